"""Indexing: gathers by index (index_select, gather, take_along_dim, take: take_along_axis
prims), their scatter counterparts (scatter, index_put, index_add, ...: library calls;
index_copy: a scatter prim), the scatters of a window (slice_scatter, select_scatter,
diagonal_scatter: one strided_scatter prim, which fusion executors store into the base's
addresses), data-dependent selections (masked_select, nonzero: library calls, their shape
depends on the values) and `setitem`, the functional form of `x[key] = value`.

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
from fusionlens.ops.torch_ops.shapes import _slice_dim, reshape, take_dim, wrap_index
from fusionlens.ir.sizes import known_equal


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
index_fill = library(torch.index_fill, torch.Tensor.index_fill)
index_reduce = library(torch.index_reduce, torch.Tensor.index_reduce)
scatter = library(torch.scatter, torch.Tensor.scatter)
scatter_add = library(torch.scatter_add, torch.Tensor.scatter_add)
scatter_reduce = library(torch.scatter_reduce, torch.Tensor.scatter_reduce)
put = library(torch.put, torch.Tensor.put)
as_strided_scatter = library(torch.as_strided_scatter)


def row_major(shape) -> tuple:
    """The strides of a row-major tensor of `shape`: how the scatter prims number elements."""
    out, acc = [], 1
    for size in reversed(tuple(shape)):
        out.append(acc)
        acc = acc * size
    return tuple(reversed(out))


def put_window(input, src, offset, strides):
    """input with the window (src's shape, at row-major number `offset`, `strides` per dim of
    src) replaced by src: one strided_scatter prim."""
    if src.numel() == 0:
        return input
    return prims.strided_scatter(input, cast(src, input.dtype), offset, tuple(strides))


@register(torch.slice_scatter, torch.Tensor.slice_scatter)
def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    d = dim % input.ndim
    start, stop, step = slice_indices(slice(start, end, step), input.shape[d])
    if step < 1:
        raise NoDecomposition("a step that is not positive")  # torch raises
    rm = row_major(input.shape)
    strides = rm[:d] + (rm[d] * step,) + rm[d + 1:]
    return put_window(input, src, start * rm[d], strides)


@register(torch.select_scatter, torch.Tensor.select_scatter)
def select_scatter(input, src, dim, index):
    d = dim % input.ndim
    rm = row_major(input.shape)
    return put_window(input, src, (index % input.shape[d]) * rm[d], rm[:d] + rm[d + 1:])


@register(torch.diagonal_scatter, torch.Tensor.diagonal_scatter)
def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """The diagonal (input.diagonal(offset, dim1, dim2), its elements last) replaced by src."""
    d1, d2 = dim1 % input.ndim, dim2 % input.ndim
    rm = row_major(input.shape)
    rest = tuple(rm[d] for d in range(input.ndim) if d not in (d1, d2))
    first = offset * rm[d2] if offset >= 0 else -offset * rm[d1]
    return put_window(input, src, first, rest + (rm[d1] + rm[d2],))


@register(torch.index_copy, torch.Tensor.index_copy)
def index_copy(input, dim, index, source):
    """input with its slices along dim at `index` replaced by source's: one scatter prim, the
    index spread along dim (a KV cache's positions: StaticCache's update)."""
    if input.ndim == 0 or source.ndim != input.ndim or index.ndim > 1:
        raise NoDecomposition("a 0-d input or a source of another rank")
    d = dim % input.ndim
    if source.numel() == 0:
        return input
    where_to = prims.broadcast_in_dim(reshape(cast(index, torch.int64), (-1,)), source.shape, (d,))
    return prims.scatter(input, where_to, cast(source, input.dtype), d)


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


def _normal_key(input, key):
    """key with Ellipsis expanded and trailing full slices added."""
    consumed = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if Ellipsis in key:
        i = key.index(Ellipsis)
        return key[:i] + (slice(None),) * (input.ndim - consumed) + key[i + 1:]
    return key + (slice(None),) * (input.ndim - consumed)


def _basic_window(input, key):
    """(offset, strides, window shape, the shape x[key] has) for a key of ints, slices with a
    positive step, None and Ellipsis; None when the key has anything else."""
    rm = row_major(input.shape)
    offset, strides, window, view, dim = 0, [], [], [], 0
    for k in _normal_key(input, key):
        if k is None:
            view.append(1)
            continue
        size = input.shape[dim]
        if type(k) is int:
            offset = offset + (k % size) * rm[dim]
        elif isinstance(k, slice):
            start, stop, step = slice_indices(k, size)
            if step < 1:
                return None
            n = prims._extent(start, stop, step)
            offset = offset + start * rm[dim]
            strides.append(rm[dim] * step)
            window.append(n)
            view.append(n)
        else:
            return None
        dim += 1
    return offset, tuple(strides), tuple(window), tuple(view)


def _value_as(value, input, shape):
    if not _is_value(value):
        return prims.full(shape, _scalar_as(value, input.dtype), dtype=input.dtype, device=input.device)
    while value.ndim > len(shape) and value.shape[0] == 1:  # torch drops leading 1s of the value
        value = reshape(value, value.shape[1:])
    return broadcast_to_shape(cast(value, input.dtype), shape)


def _index_along(input, key, value):
    """x[:, ..., index, ...] = value with one integer index tensor (1-D) among full slices: a
    scatter along that dim (StaticCache's fallback `keys[:, :, cache_position] = k`)."""
    key = _normal_key(input, key)
    at = [i for i, k in enumerate(key) if _is_value(k)]
    if len(key) != input.ndim or len(at) != 1 or key[at[0]].ndim != 1 or \
            key[at[0]].dtype.is_floating_point or key[at[0]].dtype == torch.bool or builtins.any(
            not (isinstance(k, slice) and k == slice(None)) for i, k in enumerate(key) if i != at[0]):
        return None
    d, index = at[0], key[at[0]]
    shape = input.shape[:d] + (index.shape[0],) + input.shape[d + 1:]
    if index.shape[0] == 0:
        return input
    where_to = prims.broadcast_in_dim(wrap_index(index, input.shape[d]), shape, (d,))
    return prims.scatter(input, where_to, _value_as(value, input, shape), d)


@register(torch.Tensor.__setitem__, name="setitem", impl=_setitem)
def setitem(input, key, value):
    """Basic keys (ints, slices with a positive step, None, ...) write a window: one
    strided_scatter prim. A boolean mask with a scalar is a where; one integer index tensor
    among full slices a scatter; other integer tensor keys an index_put."""
    key = key if isinstance(key, tuple) else (key,)
    if builtins.any(_is_value(k) for k in key):
        mask = key[0]
        if len(key) == 1 and mask.dtype == torch.bool and mask.shape == input.shape[:mask.ndim] and (
                not _is_value(value) or value.numel() == 1):
            mask = reshape(mask, mask.shape + (1,) * (input.ndim - mask.ndim))
            fill = reshape(cast(value, input.dtype), ()) if _is_value(value) else _scalar_as(value, input.dtype)
            return where(mask, broadcast_to_shape(fill, input.shape) if _is_value(fill) else fill, input)
        if builtins.all(_is_value(k) and not k.dtype.is_floating_point and k.dtype != torch.bool for k in key):
            along = _index_along(input, key, value) if len(key) == 1 else None
            if along is not None:
                return along
            values = value if _is_value(value) else prims.full((), _scalar_as(value, input.dtype),
                                                               dtype=input.dtype, device=input.device)
            return index_put(input, key, cast(values, input.dtype))
        if builtins.all(_is_value(k) or k is Ellipsis or isinstance(k, slice) for k in key):
            along = _index_along(input, key, value)
            if along is not None:
                return along
        raise NoDecomposition("these tensor indices")
    window = _basic_window(input, key)
    if window is None:
        raise NoDecomposition("a key with a negative step, a list or a bool")
    offset, strides, box, view = window
    if builtins.any(known_equal(n, 0) for n in box):
        return input
    return put_window(input, reshape(_value_as(value, input, view), box), offset, strides)
