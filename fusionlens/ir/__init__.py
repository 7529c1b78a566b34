"""The intermediate representation: a program as an SSA trace of bound symbols.

`trace` (Value, Symbol, BoundSymbol, Trace, the printer and the recording context),
`provenance` (the user line an op came from), `sizes` and `symbols` (sizes that may be
symbolic), `program_calls` (what a printed program calls), `interpret` (the op-by-op
interpreter every executor is compared with).

Invariant: the IR knows no op, no stage and no executor; it imports only `fusionlens.report`.
"""
