"""Indexing: gathers by index (index_select, gather, take_along_dim, take: take_along_axis
prims), their scatter counterparts (scatter, index_put, index_add, ...: library calls), the
scatters of a slice (slice_scatter, select_scatter: a cat), data-dependent selections
(masked_select, nonzero: library calls, their shape depends on the values) and `setitem`,
the functional form of `x[key] = value`.

Advanced `__getitem__` (tensor and list indices) is shapes.getitem's; it builds on the same
`take_dim`.
"""

from __future__ import annotations

import builtins

import torch

from fusionlens.ops import prims
from fusionlens.ops.torch_ops.common import _is_value, _scalar_as, broadcast_to_shape, cast, slice_indices
from fusionlens.ops.torch_ops.pointwise import where
from fusionlens.ops.torch_ops.registry import NoDecomposition, library, register, symbol_for
from fusionlens.ops.torch_ops.shapes import _slice_dim, cat, reshape, take_dim, unsqueeze


@register(torch.index_select, torch.Tensor.index_select)
def index_select(input, dim, index):
    d = dim % builtins.max(input.ndim, 1)
    if input.ndim == 0:  # its one element, as a 0-d result (the index can only be 0)
        return reshape(take_dim(reshape(input, (1,)), reshape(index, (-1,)), 0, wrap=False), ())
    return take_dim(input, reshape(index, (-1,)), d, wrap=False)


@register(torch.gather, torch.Tensor.gather)
def gather(input, dim, index, *, sparse_grad=False):
    """The result has index's shape; other dims of the input are cut to it first."""
    if input.ndim == 0 or index.ndim != input.ndim:
        raise NoDecomposition("a 0-d input")
    d = dim % input.ndim
    x = input
    for i, size in enumerate(index.shape):
        if i != d and size != x.shape[i]:
            x = _slice_dim(x, i, 0, size)
    return prims.take_along_axis(x, index, d)


@register(torch.take_along_dim, torch.Tensor.take_along_dim)
def take_along_dim(input, indices, dim=None):
    if dim is None:
        return take_dim(reshape(input, (-1,)), reshape(indices, (-1,)), 0)
    if input.ndim != indices.ndim or input.ndim == 0:
        raise NoDecomposition("inputs of different ranks")
    d = dim % input.ndim
    shape = [builtins.max(a, b) if i != d else None for i, (a, b) in enumerate(zip(input.shape, indices.shape))]
    x = broadcast_to_shape(input, tuple(input.shape[d] if s is None else s for s in shape))
    idx = broadcast_to_shape(indices, tuple(indices.shape[d] if s is None else s for s in shape))
    return prims.take_along_axis(x, where(prims.lt(idx, 0), prims.add(idx, input.shape[d]), idx), d)


@register(torch.take, torch.Tensor.take)
def take(input, index):
    return take_dim(reshape(input, (-1,)), index, 0)


# Scatters and data-dependent selections: run whole.
masked_select = library(torch.masked_select, torch.Tensor.masked_select)
nonzero = library(torch.nonzero, torch.Tensor.nonzero)
nonzero_static = library(torch.nonzero_static, torch.Tensor.nonzero_static)
argwhere = library(torch.argwhere, torch.Tensor.argwhere)
masked_scatter = library(torch.masked_scatter, torch.Tensor.masked_scatter)
index_put = library(torch.index_put, torch.Tensor.index_put)
index_add = library(torch.index_add, torch.Tensor.index_add)
index_copy = library(torch.index_copy, torch.Tensor.index_copy)
index_fill = library(torch.index_fill, torch.Tensor.index_fill)
index_reduce = library(torch.index_reduce, torch.Tensor.index_reduce)
scatter = library(torch.scatter, torch.Tensor.scatter)
scatter_add = library(torch.scatter_add, torch.Tensor.scatter_add)
scatter_reduce = library(torch.scatter_reduce, torch.Tensor.scatter_reduce)
put = library(torch.put, torch.Tensor.put)
diagonal_scatter = library(torch.diagonal_scatter)
as_strided_scatter = library(torch.as_strided_scatter)


def _put_slice(input, src, d, start, stop):
    """input with [start, stop) along dim d replaced by src (of that slice's shape)."""
    before = [_slice_dim(input, d, 0, start)] if start else []
    after = [_slice_dim(input, d, stop, input.shape[d])] if stop < input.shape[d] else []
    return cat(before + [cast(src, input.dtype)] + after, d)


@register(torch.slice_scatter, torch.Tensor.slice_scatter)
def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    d = dim % input.ndim
    start, stop, step = slice_indices(slice(start, end, step), input.shape[d])
    if step == 1:
        return _put_slice(input, src, d, start, builtins.max(start, stop))
    if step < 1:
        raise NoDecomposition("a step that is not positive")  # torch raises
    # src spread over every step-th position (interior padding), then chosen where it landed
    n = src.shape[d]
    if n == 0:
        return input
    config = [(0, 0, 0)] * input.ndim
    config[d] = (start, input.shape[d] - start - (n - 1) * step - 1, step - 1)
    spread = prims.pad(cast(src, input.dtype), _scalar_as(0, input.dtype), config)
    position = prims.iota(input.shape[d], start=0, step=1, dtype=torch.int64, device=input.device)
    offset = prims.sub(position, start)
    hit = prims.bitwise_and(prims.bitwise_and(prims.ge(offset, 0), prims.lt(offset, n * step)),
                            prims.eq(prims.remainder(offset, step), 0))
    return prims.where(prims.broadcast_in_dim(hit, input.shape, (d,)), spread, input)


@register(torch.select_scatter, torch.Tensor.select_scatter)
def select_scatter(input, src, dim, index):
    d = dim % input.ndim
    i = index % input.shape[d]
    return _put_slice(input, unsqueeze(src, d), d, i, i + 1)


@register(torch._unsafe_masked_index)
def unsafe_masked_index(input, mask, indices, fill):
    """input[indices] where mask, fill elsewhere; indices are clamped into [-size, size) first
    (they may be out of range where the mask is False: what the name's "unsafe" allows), then
    index as usual (negatives from the end), as torch's kernel."""
    if not builtins.all(_is_value(i) for i in indices):
        raise NoDecomposition("indices with None")
    clamped = [prims.minimum(prims.maximum(cast(i, torch.int64), -input.shape[k]), input.shape[k] - 1)
               for k, i in enumerate(indices)]
    taken = symbol_for(torch.Tensor.__getitem__)(input, tuple(clamped))
    value = cast(fill, input.dtype) if _is_value(fill) else _scalar_as(fill, input.dtype)
    return where(mask, taken, value)


@register(torch._unsafe_masked_index_put_accumulate)
def unsafe_masked_index_put_accumulate(input, mask, indices, values):
    """input with values added at indices where mask (clamped as the masked index clamps);
    a scatter, run whole as index_put's."""
    if not builtins.all(_is_value(i) for i in indices):
        raise NoDecomposition("indices with None")
    clamped = [prims.minimum(prims.maximum(cast(i, torch.int64), -input.shape[k]), input.shape[k] - 1)
               for k, i in enumerate(indices)]
    masked = where(mask, cast(values, input.dtype), _scalar_as(0, input.dtype))
    return index_put(input, tuple(clamped), masked, True)


# --- x[key] = value --------------------------------------------------------------------------

def _setitem(input, key, value):
    """x[key] = value, functionally: a new tensor, the input unchanged."""
    out = input.clone()
    out[key] = value
    return out


def _basic_entries(input, key):
    """(per input dim: (start, stop), the shape x[key] has) for a key of ints, unit-step
    slices, None and Ellipsis; None when the key has anything else."""
    consumed = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (input.ndim - consumed) + key[i + 1:]
    else:
        key = key + (slice(None),) * (input.ndim - consumed)
    entries, view, dim = [], [], 0
    for k in key:
        if k is None:
            view.append(1)
            continue
        size = input.shape[dim]
        if type(k) is int:
            entries.append((k % size, k % size + 1))
        elif isinstance(k, slice):
            start, stop, step = slice_indices(k, size)
            if step != 1:
                return None
            entries.append((start, builtins.max(start, stop)))
            view.append(entries[-1][1] - start)
        else:
            return None
        dim += 1
    return entries, tuple(view)


def _put(input, entries, src, d=0):
    """input with the box `entries` (from dim d on) replaced by src (the box's shape)."""
    if d == len(entries):
        return src
    start, stop = entries[d]
    inner = src if d + 1 == len(entries) else _put(_slice_dim(input, d, start, stop), entries, src, d + 1)
    return inner if (start, stop) == (0, input.shape[d]) else _put_slice(input, inner, d, start, stop)


def _value_as(value, input, shape):
    if not _is_value(value):
        return prims.full(shape, _scalar_as(value, input.dtype), dtype=input.dtype, device=input.device)
    while value.ndim > len(shape) and value.shape[0] == 1:  # torch drops leading 1s of the value
        value = reshape(value, value.shape[1:])
    return broadcast_to_shape(cast(value, input.dtype), shape)


@register(torch.Tensor.__setitem__, name="setitem", impl=_setitem)
def setitem(input, key, value):
    """Basic keys (ints, unit-step slices, None, ...) write a box: a cat of the parts around
    it. A boolean mask with a scalar is a where; integer tensor keys an index_put."""
    key = key if isinstance(key, tuple) else (key,)
    if builtins.any(_is_value(k) for k in key):
        mask = key[0]
        if len(key) == 1 and mask.dtype == torch.bool and mask.shape == input.shape[:mask.ndim] and (
                not _is_value(value) or value.numel() == 1):
            mask = reshape(mask, mask.shape + (1,) * (input.ndim - mask.ndim))
            fill = reshape(cast(value, input.dtype), ()) if _is_value(value) else _scalar_as(value, input.dtype)
            return where(mask, broadcast_to_shape(fill, input.shape) if _is_value(fill) else fill, input)
        if builtins.all(_is_value(k) and not k.dtype.is_floating_point and k.dtype != torch.bool for k in key):
            values = value if _is_value(value) else prims.full((), _scalar_as(value, input.dtype),
                                                               dtype=input.dtype, device=input.device)
            return index_put(input, key, cast(values, input.dtype))
        raise NoDecomposition("these tensor indices")
    basic = _basic_entries(input, key)
    if basic is None:
        raise NoDecomposition("a key with a step, a list or a bool")
    entries, view = basic
    box = tuple(stop - start for start, stop in entries)
    if 0 in box:
        return input
    return _put(input, entries, reshape(_value_as(value, input, view), box))
