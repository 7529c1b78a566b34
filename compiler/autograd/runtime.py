"""The compiled forward and backward programs joined to PyTorch's autograd.

`training_program` returns a callable of the program's inputs that runs the forward program
inside a `torch.autograd.Function`: the call's outputs get a grad_fn whose backward runs the
backward program on the saved tensors. `loss.backward()`, optimizers, gradient accumulation,
`retain_graph` and frozen parameters then behave as in eager, because autograd does them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.autograd.function import once_differentiable


def training_program(forward: Callable, backward: Callable, n_inputs: int, n_results: int,
                     differentiable: list, grad_inputs: list, build: Callable) -> Callable:
    """`forward(*inputs) -> (*results, *saved)`; `backward([*saved], *cotangents) -> grads of
    inputs[grad_inputs]` (it empties the list); `build(*results)` makes the call's result (its structure)."""
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
        return build(*CompiledFunction.apply(*inputs))
    return run
