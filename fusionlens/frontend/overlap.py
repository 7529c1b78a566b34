"""Inputs whose elements share memory: an expanded input (`row.expand(m, n)`, stride 0), or
one made by `as_strided` with overlapping windows.

Eager's rule is the memory's: a write into one element shows in every element that aliases
it, and torch refuses most in-place ops whose written-to tensor overlaps itself ("unsupported
operation: more than one element of the written-to tensor refers to a single memory
location"). So the frontend traces on a copy with the caller's memory layout, overlaps
included (`clone`): eager's errors are raised at the user's line, and `contiguous()` or
`reshape` copy or view as they do for the caller. An update of an expanded input is then
merged across the elements that alias each location (views.py, `merge_dims`), and the jit keys
on which dims share memory (`layout_key`), so that a program made for an expanded input never
serves a plain one, nor the reverse.
"""

from __future__ import annotations

import torch

from fusionlens.ir.sizes import hint


def _layout(t: torch.Tensor) -> list[tuple[int, int]]:
    """(size, stride) of each dim, read as the example has them (a dynamic trace's symbols by
    their hints: no guard; the jit keys on the layout, so every call a program serves has it)."""
    return [(hint(n), hint(st)) for n, st in zip(t.shape, t.stride())]


def shared_dims(t: torch.Tensor) -> tuple[int, ...]:
    """The dims along which every element is one memory location (stride 0, size over 1)."""
    if t.layout is not torch.strided:
        return ()
    return tuple(d for d, (n, st) in enumerate(_layout(t)) if st == 0 and n > 1)


def _meet(dims: list[tuple[int, int]]) -> bool:
    """Whether two indices of a layout of (size, stride) dims may name one location: each
    stride, in increasing order, must reach beyond all the smaller ones reach (mixed radix)."""
    if any(n == 0 for n, _ in dims):
        return False
    reach = 0  # the largest offset the smaller strides reach
    for st, n in sorted((st, n) for n, st in dims if n > 1):
        if st <= reach:
            return True
        reach += (n - 1) * st
    return False


def overlaps(t: torch.Tensor) -> bool:
    """Whether two elements of `t` may be one memory location. Exact for stride 0; for other
    strides it is the mixed-radix test, which no non-overlapping layout torch makes fails."""
    return t.layout is torch.strided and _meet(_layout(t))


def only_expanded(t: torch.Tensor) -> bool:
    """Whether `t` overlaps only through stride-0 dims (its other dims never meet)."""
    return not _meet([(n, st) for n, st in _layout(t) if st != 0])


def layout_key(t: torch.Tensor) -> bool | tuple[int, ...] | str:
    """What the jit keys a strided tensor's layout by: True where contiguous; else its
    stride-0 dims, or "overlapping" where other strides make elements meet, or False."""
    if t.is_contiguous():
        return True
    if not overlaps(t):
        return False
    dims = shared_dims(t)
    return dims if dims and only_expanded(t) else "overlapping"


def clone(x: torch.Tensor) -> torch.Tensor:
    """A copy of `x` whose elements share memory exactly as x's do: an expanded tensor as the
    expansion of a copy of its one row, another overlapping layout as a copy of the memory it
    spans, viewed with its strides. Where x is a leaf that requires grad, each element's
    gradient is its own, as eager's autograd gives it (_SharedCopy); a non-leaf's is made by a
    view op (expand, as_strided, unfold), whose backward sums each location's elements as the
    views here do, and eager lets a write into it through a view (rebased on the copied row)."""
    if x.requires_grad and x.grad_fn is None and torch.is_grad_enabled():
        return _SharedCopy.apply(x)
    return _copy(x)


class _SharedCopy(torch.autograd.Function):
    """`_copy` whose backward is the identity, element by element. Built from views, the copy's
    gradient went through the row's expand (or the span's as_strided) and summed every element
    that aliases a location into one: a leaf's gradient all in its first row (fuzz backward
    6299). The output is not a view, so that an in-place op on it raises eager's error for a
    leaf (views.py's _refuse_leaf_copies), not autograd's for a custom Function's view: the
    memory is allocated with x's strides and filled through a view of it."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
        span = 1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride()))
        out.as_strided((span,), (1,), 0).copy_(x.as_strided((span,), (1,)))
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


def _copy(x: torch.Tensor) -> torch.Tensor:
    dims = shared_dims(x)
    if dims and only_expanded(x):
        row = x[tuple(slice(0, 1) if d in dims else slice(None) for d in range(x.ndim))]
        return torch.empty_strided(row.shape, row.stride(), dtype=x.dtype, device=x.device).copy_(row).expand(x.shape)
    span = 1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride()))
    memory = x.as_strided((span,), (1,)).clone()
    return memory.as_strided(x.shape, x.stride())


def exact_copy(x: torch.Tensor) -> torch.Tensor:
    """A copy with the caller's strides, exactly (torch's overlap checks read them: a slice
    cloned dense made `x[None].addcmul_(x, x)` raise where eager's call did not); a tensor
    whose elements share memory (an expanded one, stride 0) sharing it alike (`clone`:
    eager's errors, and its contiguous() a copy); a subclass, a parameter that overlaps and
    other layouts as clone makes them."""
    if x.layout != torch.strided:
        return x.clone()
    if type(x) is torch.Tensor and overlaps(x):  # elements that share memory share it in the copy
        return clone(x)
    if type(x) not in (torch.Tensor, torch.nn.Parameter) or x.is_contiguous() or any(
            st == 0 and n > 1 for n, st in zip(x.shape, x.stride())):
        return x.clone(memory_format=torch.preserve_format)
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device).copy_(x)  # autograd: as clone
