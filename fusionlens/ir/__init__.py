"""The intermediate representation: a program as an SSA trace of bound symbols.

`trace` (Value, Symbol, BoundSymbol, Trace, the printer and the recording context),
`provenance` (the user line an op came from), `sizes` and `symbols` (sizes that may be
symbolic), `program_calls` (what a printed program calls), `interpret` (the op-by-op
interpreter every executor is compared with).

`vocabulary` (a trace's Stage, a value's ValueRole: enums the compiler compares).

Invariant: the IR knows no op and no executor and runs no stage; of ours it imports only
`fusionlens.report.discovery` (which frames are model code), never the report's types.
"""
