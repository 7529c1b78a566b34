"""What consumers read: the report and everything drawn from it, with no torch.

`schema` (the CompileReport contract, JSON in and out), `discovery` (a file's targets, by
parsing), `roofline` and `comm_model` (the arithmetic of GPU peaks and of collectives on a
cluster), `chrome_trace` and `html` (a report as trace events and as a page). The language
server imports this package and nothing else of the compiler (besides its worker's entry).

Invariant: nothing here imports torch or any other FusionLens package.
"""
