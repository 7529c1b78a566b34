"""Shape and layout ops: reshapes, squeezes, permutes, expands, indexing and slicing,
split/cat/stack, and the triangles (tril, triu)."""

from __future__ import annotations

import builtins
import math
import operator

import torch

from fusionlens.ir.trace import Value
from fusionlens.ir.sizes import known_equal
from fusionlens.ops import prims
from fusionlens.ops.torch_ops.common import (_dims, _is_value, _scalar_as, broadcast_to_shape, cast, result_dtype,
                                             slice_indices)
from fusionlens.ops.torch_ops.pointwise import add, lt, mul, where
from fusionlens.ops.torch_ops.registry import NoDecomposition, _pack_varargs, register


def _resolve_shape(shape, numel):
    shape = list(shape)
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = numel // known if known else 0
    return tuple(shape)


# Tensor.view records as reshape: the trace is functional, and once `.contiguous()` is
# dropped as an alias a view of a transposed value must still work. (Tensor.view(dtype) is
# another op; the frontend records it as is.)
@register(torch.reshape, torch.Tensor.reshape, torch.Tensor.view,
          adapters={torch.Tensor.reshape: _pack_varargs, torch.Tensor.view: _pack_varargs})
def reshape(input, shape):
    shape = _resolve_shape(shape, input.numel())
    return input if shape == input.shape else prims.reshape(input, shape)


@register(torch.Tensor.view_as, name="torch.Tensor.view_as")
def view_as(input, other):
    return reshape(input, other.shape)


@register(torch.flatten, torch.Tensor.flatten)
def flatten(input, start_dim=0, end_dim=-1):
    if input.ndim == 0:
        return reshape(input, (1,))
    s, e = start_dim % input.ndim, end_dim % input.ndim
    shape = input.shape[:s] + (math.prod(input.shape[s:e + 1]),) + input.shape[e + 1:]
    return reshape(input, shape)


@register(torch.unflatten, torch.Tensor.unflatten)
def unflatten(input, dim, sizes):
    d = dim % input.ndim
    sizes = _resolve_shape(sizes, input.shape[d])
    return reshape(input, input.shape[:d] + tuple(sizes) + input.shape[d + 1:])


@register(torch.squeeze, torch.Tensor.squeeze)
def squeeze(input, dim=None):
    dims: tuple[int, ...]
    if dim is None:
        dims = tuple(range(input.ndim))
    else:  # squeeze(x, ()) squeezes no dim (where _dims reads () as every dim)
        dims = () if isinstance(dim, (tuple, list)) and not dim else _dims(input, dim)
    shape = tuple(s for i, s in enumerate(input.shape) if not (i in dims and s == 1))
    return reshape(input, shape)


@register(torch.unsqueeze, torch.Tensor.unsqueeze)
def unsqueeze(input, dim):
    d = dim % (input.ndim + 1)
    shape = input.shape[:d] + (1,) + input.shape[d:]
    return prims.broadcast_in_dim(input, shape, tuple(i for i in range(len(shape)) if i != d))


@register(torch.permute, torch.Tensor.permute, adapters={torch.Tensor.permute: _pack_varargs})
def permute(input, dims):
    dims = tuple(d % input.ndim for d in dims)
    return input if dims == tuple(range(input.ndim)) else prims.permute(input, dims)


@register(torch.transpose, torch.swapaxes, torch.Tensor.transpose, torch.Tensor.swapaxes)
def transpose(input, dim0, dim1):
    if input.ndim < 2:
        return input
    dims = list(range(input.ndim))
    a, b = dim0 % input.ndim, dim1 % input.ndim
    dims[a], dims[b] = dims[b], dims[a]
    return permute(input, tuple(dims))


@register(torch.t, torch.Tensor.t)
def t(input):
    return transpose(input, 0, 1)


@register(torch.Tensor.expand, name="torch.Tensor.expand", adapters={torch.Tensor.expand: _pack_varargs})
def expand(input, size, *, implicit=False):
    size = tuple(size)
    offset = len(size) - input.ndim
    shape = tuple(input.shape[i - offset] if s == -1 else s for i, s in enumerate(size))
    return broadcast_to_shape(input, shape)


@register(torch.broadcast_to, torch.Tensor.broadcast_to, adapters={torch.Tensor.broadcast_to: _pack_varargs})
def broadcast_to(input, size):
    return expand(input, size)


@register(torch.Tensor.expand_as, name="torch.Tensor.expand_as")
def expand_as(input, other):
    return expand(input, other.shape)


@register(torch.Tensor.repeat, name="torch.Tensor.repeat", adapters={torch.Tensor.repeat: _pack_varargs})
def repeat(input, repeats):
    repeats = tuple(repeats)
    x = reshape(input, (1,) * (len(repeats) - input.ndim) + input.shape)
    # interleave a broadcast dim before each dim, then merge: [r0, s0, r1, s1, ...]
    inter = tuple(v for r, s in zip(repeats, x.shape) for v in (r, s))
    dims = tuple(range(1, 2 * x.ndim, 2))
    y = prims.broadcast_in_dim(x, inter, dims)
    return reshape(y, tuple(r * s for r, s in zip(repeats, x.shape)))


def _slice_dim(x: Value, dim: int, start: int, stop: int, step: int = 1) -> Value:
    if known_equal(start, 0) and known_equal(stop, x.shape[dim]) and step == 1:
        return x
    starts = [0] * x.ndim
    ends = list(x.shape)
    strides = [1] * x.ndim
    starts[dim], ends[dim], strides[dim] = start, stop, step
    return prims.slice(x, tuple(starts), tuple(ends), tuple(strides))


@register(torch.Tensor.__getitem__, name="operator.getitem", impl=operator.getitem)
def getitem(input, key):
    key = key if isinstance(key, tuple) else (key,)
    if any(_is_value(k) or isinstance(k, (list, torch.Tensor)) for k in key):
        return _advanced_getitem(input, key)
    n_ellipsis = builtins.sum(k is Ellipsis for k in key)
    consumed = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if n_ellipsis:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (input.ndim - consumed) + key[i + 1:]
    else:
        key = key + (slice(None),) * (input.ndim - consumed)
    x, dim, out_shape = input, 0, []
    for k in key:
        if k is None:
            out_shape.append(1)
            continue
        size = x.shape[dim]
        if isinstance(k, bool) or not isinstance(k, (int, slice)):
            raise NoDecomposition(f"index {k!r}")
        if isinstance(k, int):
            idx = k % size
            x = _slice_dim(x, dim, idx, idx + 1)
        else:
            start, stop, step = slice_indices(k, size)
            if step < 0:
                raise NoDecomposition("negative step")
            stop = builtins.max(start, stop)
            x = _slice_dim(x, dim, start, stop, step)
            out_shape.append(x.shape[dim])
        dim += 1
    return reshape(x, tuple(out_shape))


def wrap_index(index: Value, size: int) -> Value:
    """An int64 index with negative entries counted from the end, as torch's indexing does."""
    index = cast(index, torch.int64)
    return where(lt(index, 0), add(index, size), index)


def take_dim(x: Value, index: Value, dim: int, wrap: bool = True) -> Value:
    """x's slices along `dim` at `index` (any shape; negatives wrap unless wrap=False): the
    result has x's shape with dim `dim` replaced by index's shape. One take_along_axis prim."""
    flat = reshape(cast(index, torch.int64), (-1,))
    flat = wrap_index(flat, x.shape[dim]) if wrap else flat
    full = x.shape[:dim] + (flat.shape[0],) + x.shape[dim + 1:]
    taken = prims.take_along_axis(x, prims.broadcast_in_dim(flat, full, (dim,)), dim)
    return reshape(taken, x.shape[:dim] + index.shape + x.shape[dim + 1:])


def _list_index(k, device) -> Value:
    """A list of ints as an index tensor: an iota when it steps evenly, else a cat of fills."""
    if not k or len(k) > 64 or not all(type(i) is int for i in k):
        raise NoDecomposition("a list index other than a short list of ints")
    step = k[1] - k[0] if len(k) > 1 else 1
    if all(b - a == step for a, b in zip(k, k[1:])):
        return prims.iota(len(k), start=k[0], step=step, dtype=torch.int64, device=device)
    return prims.cat([prims.full((1,), i, dtype=torch.int64, device=device) for i in k], 0)


def _advanced_getitem(input, key):
    """Indexing with integer tensors (and lists, and ints beside them): the indexed dims are
    linearised into one index and taken with take_along_axis, placed as torch places them
    (where the indices are if they are adjacent, else first). Boolean masks give a shape
    that depends on the data: those run whole."""
    if builtins.any(_is_value(k) and k.dtype == torch.bool for k in key) or builtins.any(
            isinstance(k, (bool, torch.Tensor)) or k is None for k in key):
        raise NoDecomposition("a boolean mask or None beside tensor indices (the shape depends on the data)")
    key = tuple(_list_index(k, input.device) if isinstance(k, list) else k for k in key)
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (input.ndim - len(key) + 1) + key[i + 1:]
    key = key + (slice(None),) * (input.ndim - len(key))
    x = getitem(input, tuple(k if isinstance(k, slice) else slice(None) for k in key))
    adv = [i for i, k in enumerate(key) if not isinstance(k, slice)]
    if adv != list(range(adv[0], adv[-1] + 1)):  # apart: the indexed dims go first
        x = permute(x, adv + [i for i in range(x.ndim) if i not in adv])
        key, adv = tuple(key[i] for i in adv), list(range(len(adv)))
    p, sizes = adv[0], [x.shape[i] for i in adv]
    linear: Value | int = 0
    stride = 1
    for i, size in reversed(list(zip(adv, sizes))):
        k = key[i]
        k = wrap_index(k, size) if isinstance(k, Value) else k % size
        term = (mul(k, stride) if stride != 1 else k) if isinstance(k, Value) else k * stride
        linear = add(term, linear) if isinstance(term, Value) or isinstance(linear, Value) else term + linear
        stride *= size
    assert isinstance(linear, Value)  # getitem comes here only with a tensor (or list) index
    merged = reshape(x, x.shape[:p] + (math.prod(sizes),) + x.shape[p + len(adv):])
    return take_dim(merged, linear, p, wrap=False)


@register(torch.narrow, torch.Tensor.narrow)
def narrow(input, dim, start, length):
    d = dim % input.ndim
    if _is_value(start):  # a 0-d tensor: where it starts is data, so a take at start + iota
        offsets = prims.iota(length, start=0, step=1, dtype=torch.int64, device=input.device)
        first = wrap_index(reshape(start, (1,)), input.shape[d])
        return take_dim(input, add(offsets, first), d, wrap=False)
    start = start % input.shape[d] if start < 0 else start
    return _slice_dim(input, d, start, start + length)


@register(torch.ops.aten.slice.Tensor, name="torch.ops.aten.slice.Tensor")
def aten_slice(input, dim=0, start=None, end=None, step=1):
    """aten's slice: input[start:end:step] along dim, with Python's clamping of the bounds."""
    d = dim % builtins.max(input.ndim, 1)
    begin, stop, step = slice_indices(builtins.slice(start, end, step), input.shape[d])
    if step <= 0:
        raise NoDecomposition("a step that is not positive")  # torch raises
    return _slice_dim(input, d, begin, builtins.max(begin, stop), step)


@register(torch.select, torch.Tensor.select)
def select(input, dim, index):
    d = dim % input.ndim
    i = index % input.shape[d]
    return reshape(_slice_dim(input, d, i, i + 1), input.shape[:d] + input.shape[d + 1:])


@register(torch.split, torch.Tensor.split)
def split(tensor, split_size_or_sections, dim=0):
    d = dim % tensor.ndim
    size = tensor.shape[d]
    if isinstance(split_size_or_sections, (int, torch.SymInt)):
        step = split_size_or_sections
        # how many pieces is a guard on a symbolic size (`(s0 + 1)//2 == 4`, as torch's own
        # split makes), never `s0 == 8`; the last piece's size stays an expression (`s0 - 6`)
        count = builtins.max(int((size + step - 1) // step), 1) if not known_equal(size, 0) else 1
        sizes = [step] * (count - 1) + [size - step * (count - 1)]
    else:
        sizes = list(split_size_or_sections)
    out, start = [], 0
    for s in sizes:
        if isinstance(s, torch.SymInt):  # torch's split guards each piece so: then its size has no max(0, ...)
            bool(s >= 0)
        out.append(_slice_dim(tensor, d, start, start + s))
        start += s
    return tuple(out)


@register(torch.chunk, torch.Tensor.chunk)
def chunk(input, chunks, dim=0):
    size = input.shape[dim % input.ndim]
    return split(input, (size + chunks - 1) // chunks, dim)  # torch's own expression for the piece


@register(torch.unbind, torch.Tensor.unbind)
def unbind(input, dim=0):
    d = dim % input.ndim
    return tuple(select(input, d, i) for i in range(input.shape[d]))


@register(torch.cat, torch.concat, torch.concatenate)
def cat(tensors, dim=0):
    tensors = [x for x in tensors if not (x.ndim == 1 and x.shape[0] == 0)]
    dtype = result_dtype(*tensors)
    d = dim % tensors[0].ndim
    return prims.cat([cast(x, dtype) for x in tensors], d)


@register(torch.stack)
def stack(tensors, dim=0):
    d = dim % (tensors[0].ndim + 1)
    return cat([unsqueeze(x, d) for x in tensors], d)


def _triangle(input, diagonal, lower):
    rows, cols = input.shape[-2], input.shape[-1]
    r = prims.broadcast_in_dim(prims.iota(rows, start=0, step=1, dtype=torch.int64, device=input.device),
                               (rows, cols), (0,))
    c = prims.broadcast_in_dim(prims.iota(cols, start=0, step=1, dtype=torch.int64, device=input.device),
                               (rows, cols), (1,))
    offset = prims.sub(c, r)
    keep = prims.le(offset, diagonal) if lower else prims.ge(offset, diagonal)
    return where(keep, input, _scalar_as(0, input.dtype))  # False for bool: keeps the dtype


@register(torch.tril, torch.Tensor.tril)
def tril(input, diagonal=0):
    return _triangle(input, diagonal, lower=True)


@register(torch.triu, torch.Tensor.triu)
def triu(input, diagonal=0):
    return _triangle(input, diagonal, lower=False)
