"""Trace -> trace stages between the frontend and code generation.

`programs` (ProgramKind and each kind's stages), `passes` (decomposition, DCE, CSE),
`autograd` (the joint trace and its split), `cost` (a region's bytes and FLOPs), `contract`
(what fusion hands an executor), `fusion` (the partitioner), `regroup` (its second pass over
reductions of one domain: a norm's backward), `reinplace` (an input's update written into the
input itself, not a copy written back), `verify` (the checks between stages).

Invariant: every stage here is a function of traces; none runs the program.
"""
