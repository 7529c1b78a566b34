"""The compiled forward and backward programs joined to PyTorch's autograd.

`training_program` returns a callable of the program's inputs that runs the forward program
inside a `torch.autograd.Function`: the call's outputs get a grad_fn whose backward runs the
backward program on the saved tensors. `loss.backward()`, optimizers, gradient accumulation,
`retain_graph` and frozen parameters then behave as in eager, because autograd does them.
"""

from __future__ import annotations

from collections.abc import Callable

import contextlib

import torch
from torch.autograd.function import once_differentiable

from fusionlens.ir.program_calls import write_back


def training_program(forward: Callable, backward: Callable, n_inputs: int, n_results: int,
                     differentiable: list, grad_inputs: list, build: Callable, written: list | None = None) -> Callable:
    """`forward(*inputs) -> (*results, *saved)`; `backward([*saved], *cotangents) -> grads of
    inputs[grad_inputs]` (it empties the list); `build(*results)` makes the call's result (its
    structure) from all results but the last len(written): the final values of the inputs at
    `written`, which require grad and are updated in place."""
    written = written or []
    frozen = [i for i, d in enumerate(differentiable) if not d]

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            outs = forward(*inputs)
            results, saved = outs[:n_results], outs[n_results:]
            ctx.save_for_backward(*saved)
            ctx.mark_non_differentiable(*(results[i] for i in frozen))
            return tuple(results)

        @staticmethod
        @once_differentiable
        def backward(ctx, *cotangents):
            cots = [g for g, d in zip(cotangents, differentiable) if d]
            saved = list(ctx.saved_tensors)
            # autograd's references go now (unless retain_graph), the program empties `saved`:
            # each saved tensor is freed after its last use in the backward, as in eager
            ctx.maybe_clear_saved_tensors()
            grads = backward(saved, *cots)
            out = [None] * n_inputs
            for i, g in zip(grad_inputs, grads):
                out[i] = g
            return tuple(out)

    def run(*inputs):
        if not written:
            return build(*CompiledFunction.apply(*inputs))
        # An input updated in place is written after the Function ran, never inside it: the
        # forward may save it for the backward, which needs the value before the update. A
        # non-leaf goes in as a clone (its gradient flows through the clone to its history), and
        # so does one that needs no gradient (the backward reads it: the copy keeps its value).
        originals = [inputs[i] for i in written]
        inputs = tuple(x.clone() if i in written and not (x.is_leaf and x.requires_grad) else x
                       for i, x in enumerate(inputs))
        outs = CompiledFunction.apply(*inputs)
        n = len(outs) - len(written)
        for x, new in zip(originals, outs[n:]):
            with torch.no_grad() if x.is_leaf else contextlib.nullcontext():  # a leaf: updated under no_grad
                write_back(x, new)  # a non-leaf: its new value and history are the update's, as in eager
        return build(*outs[:n])
    return run
