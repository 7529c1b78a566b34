"""From a Python call to the acquired trace.

`tracer` (the call run under a TorchFunctionMode, each torch op recorded at its user line),
`arguments` (what the program takes), `objects` (objects in a result that are no pytree node),
`views` (in-place updates through views, functionalised), `overlap` (inputs whose elements
share memory: expanded ones), `aliasing` (inputs that share memory with one another: `x`
and `x[0]`), `captured` (tensors reached outside the arguments: globals, closure cells;
their updates and the names jit guards), `notes` (what the compiler tells
the user, and its Severity), `dynamic` (the call again on
symbolic sizes), `intra_op` (small ops on one intra-op thread).

Invariant: the frontend records what the call did and decides nothing about how it runs; it
imports the IR and the ops, never a later stage.
"""
