"""The compiled forward and backward programs joined to PyTorch's autograd.

`training_program` returns a callable of the program's inputs that runs the forward program
inside a `torch.autograd.Function`: the call's outputs get a grad_fn whose backward runs the
backward program on the saved tensors. `loss.backward()`, optimizers, gradient accumulation,
`retain_graph` and frozen parameters then behave as in eager, because autograd does them.

A result that is one of the call's inputs, or a view of one, is returned as eager returns it
(as aot_autograd's runtime wrapper does): an autograd.Function would return a new view of the
input with the Function's grad_fn. So the caller's tensor itself is returned (`out[1] is x`), and
a view of an input is made again from the caller's tensor outside the Function (`as_strided`:
its storage, its `_base`, its gradient through autograd's view backward; an in-place update of
it is visible in x, as in eager). The Function's own copy of such a result gets no cotangent
but autograd's zeros.
"""

from __future__ import annotations

from collections.abc import Callable

import contextlib

import torch
from torch.autograd.function import once_differentiable

from fusionlens.frontend import overlap
from fusionlens.ir.program_calls import write_back


def training_program(forward: Callable, backward: Callable, n_inputs: int, n_results: int,
                     differentiable: list, grad_inputs: list, build: Callable, written: list | None = None,
                     returned: list | None = None) -> Callable:
    """`forward(*inputs) -> (*results, *saved)`; `backward([*saved], *cotangents) -> grads of
    inputs[grad_inputs]` (it empties the list); `build(*results)` makes the call's result (its
    structure) from all results but the last len(written): the final values of the inputs at
    `written`, which require grad and are updated in place. `returned[k]`: the input that result
    k is (the caller's tensor is returned, after its update where it is written), else None."""
    written = written or []
    frozen = [i for i, d in enumerate(differentiable) if not d]
    inputs_returned = [(k, i) for k, i in enumerate(returned or []) if i is not None]
    skip = {k for k, _ in inputs_returned} | set(frozen)
    itself: dict[int, int] = {}  # the last forward's results that were its input object (x.contiguous())

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            outs = forward(*inputs)
            results, saved = outs[:n_results], outs[n_results:]
            itself.clear()
            itself.update({k: i for k, r in enumerate(results) for i, x in enumerate(inputs) if r is x})
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

    def as_eager(outs, given: tuple, passed: tuple) -> tuple:
        """The call's tensors as eager returns them (the module's docstring); `passed` are the
        tensors the Function took (a copy where an input is written after it ran)."""
        # found each call, not once: whether a reshape is a view depends on the input's strides,
        # which the jit does not key on (a view eager's autograd does not track, made under
        # no_grad, stays the Function's)
        # a torch call that returns its input (x.contiguous(), x.float() of float32): the caller's
        # tensor, as the program's own returned inputs (fuzz backward 25240)
        same = [(k, i) for k, i in itself.items() if k not in skip and passed[i] is given[i]]
        views = _views_of_inputs(outs, given, passed, skip | {k for k, _ in same})
        if not inputs_returned and not views and not same:
            return outs
        outs = list(outs)
        for k, i in inputs_returned + same:
            outs[k] = given[i]
        for k, i in views:
            t = outs[k]
            outs[k] = given[i].as_strided(t.size(), t.stride(), t.storage_offset())
        return tuple(outs)

    def run(*inputs):
        if not written:
            return build(*as_eager(CompiledFunction.apply(*inputs), inputs, inputs))
        # An input updated in place is written after the Function ran, never inside it: the
        # forward may save it for the backward, which needs the value before the update. A
        # non-leaf goes in as a clone (its gradient flows through the clone to its history), and
        # so does one that needs no gradient (the backward reads it: the copy keeps its value).
        given = inputs
        originals = [inputs[i] for i in written]
        inputs = tuple(x.clone() if i in written and not (x.is_leaf and x.requires_grad) else x
                       for i, x in enumerate(inputs))
        outs = CompiledFunction.apply(*inputs)
        n = len(outs) - len(written)
        for x, new in zip(originals, outs[n:]):
            # a leaf that requires grad: updated under no_grad (eager raises otherwise); any other
            # tensor takes the update's value and history, as in eager
            with torch.no_grad() if x.is_leaf and x.requires_grad else contextlib.nullcontext():
                write_back(x, new)
        return build(*as_eager(outs[:n], given, inputs))
    return run


def _views_of_inputs(outs, given: tuple, passed: tuple, skip: set) -> list[tuple[int, int]]:
    """(k, i) of each result k the program made a view of input i (same storage and dtype), where
    the Function took the caller's own tensor i (not a copy)."""
    storages: dict[tuple[int, torch.dtype], int] = {}
    for i, (x, p) in enumerate(zip(given, passed)):
        # (not an input whose elements share memory, an expanded one: as_strided's backward would
        # give each of its elements the gradient of the memory they share)
        if x is p and isinstance(x, torch.Tensor) and x.layout == torch.strided and x.untyped_storage().data_ptr() \
                and not overlap.overlaps(x):
            storages.setdefault((x.untyped_storage().data_ptr(), x.dtype), i)
    found = []
    for k, t in enumerate(outs):
        if k not in skip and isinstance(t, torch.Tensor) and t._base is not None and t.layout == torch.strided:
            at = storages.get((t.untyped_storage().data_ptr(), t.dtype))
            if at is not None:
                found.append((k, at))
    return found
