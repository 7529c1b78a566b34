"""Shape ops beyond shapes.py, built from its ops: flips and rolls (a take along a reversed
iota, a cat of two slices), diff (slices subtracted), movedim, the atleast_nd and *stack families, tile, the split
variants (tensor_split, hsplit, ...), broadcast_tensors and meshgrid, sum_to_size, and
the `*_copy` forms of the views. Strided views (diagonal, unfold, as_strided) and
diag/block_diag/rot90 run whole."""

from __future__ import annotations

import builtins

import torch

from fusionlens.ops import prims
from fusionlens.ops.torch_ops.common import _dims, _is_value, _scalar_as, broadcast_to_shape, cast
from fusionlens.ops.torch_ops.pointwise import add, div, mul, sub
from fusionlens.ops.torch_ops.reductions import sum
from fusionlens.ops.torch_ops.registry import NoDecomposition, _pack_varargs, functional_form, library, register
from fusionlens.ops.torch_ops.shapes import (_slice_dim, cat, expand, narrow, permute, repeat, reshape, split,
                                             squeeze, take_dim, transpose, unbind, unsqueeze)
from fusionlens.ir.sizes import broadcast_shapes


@register(torch.flip, torch.Tensor.flip, adapters={torch.Tensor.flip: _pack_varargs})
def flip(input, dims):
    x = input
    for d in _dims(input, dims):
        n = x.shape[d]
        if n > 1:
            x = take_dim(x, prims.iota(n, start=n - 1, step=-1, dtype=torch.int64, device=x.device), d, wrap=False)
    return x


@register(torch.fliplr, torch.Tensor.fliplr)
def fliplr(input):
    return flip(input, (1,))


@register(torch.flipud, torch.Tensor.flipud)
def flipud(input):
    return flip(input, (0,))


@register(torch.roll, torch.Tensor.roll)
def roll(input, shifts, dims=None):
    if dims is None or dims == ():
        return reshape(roll(reshape(input, (-1,)), shifts, 0), input.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    x = input
    for s, d in zip(shifts, dims):
        d %= x.ndim
        n = x.shape[d]
        k = s % n if n else 0
        if k:
            x = cat([_slice_dim(x, d, n - k, n), _slice_dim(x, d, 0, n - k)], d)
    return x


@register(torch.movedim, torch.moveaxis, torch.Tensor.movedim, torch.Tensor.moveaxis)
def movedim(input, source, destination):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    n = input.ndim
    src, dst = [s % builtins.max(n, 1) for s in src], [d % builtins.max(n, 1) for d in dst]
    order: list[int | None] = [None] * n
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(i for i in range(n) if i not in src)
    return permute(input, tuple(o if o is not None else next(rest) for o in order))


def _atleast(ndim):
    def one(x):
        if x.ndim >= ndim:
            return x
        if ndim == 3 and x.ndim == 2:
            return reshape(x, x.shape + (1,))
        if ndim == 3 and x.ndim == 1:
            return reshape(x, (1,) + x.shape + (1,))
        return reshape(x, (1,) * (ndim - x.ndim) + x.shape)

    def decomposition(*tensors):
        if len(tensors) == 1 and _is_value(tensors[0]):
            return one(tensors[0])
        items = tensors[0] if len(tensors) == 1 else tensors
        return tuple(_fresh(one(x), x) for x in items)
    return decomposition


def _fresh(y, x):
    """y, as a new value when it is x: an op whose results are partly its inputs stays whole."""
    return prims.reshape(x, x.shape) if y is x else y


atleast_1d = register(torch.atleast_1d)(_atleast(1))
atleast_2d = register(torch.atleast_2d)(_atleast(2))
atleast_3d = register(torch.atleast_3d)(_atleast(3))


@register(torch.hstack)
def hstack(tensors):
    tensors = [atleast_1d(x) for x in tensors]
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


@register(torch.vstack, torch.row_stack)
def vstack(tensors):
    return cat([atleast_2d(x) for x in tensors], 0)


@register(torch.dstack)
def dstack(tensors):
    return cat([atleast_3d(x) for x in tensors], 2)


@register(torch.column_stack)
def column_stack(tensors):
    return cat([reshape(x, (x.numel(), 1)) if x.ndim <= 1 else x for x in tensors], 1)


@register(torch.tile, torch.Tensor.tile, adapters={torch.Tensor.tile: _pack_varargs})
def tile(input, dims):
    dims = tuple(dims)
    return repeat(input, (1,) * (input.ndim - len(dims)) + dims)


@register(torch.ravel, torch.Tensor.ravel)
def ravel(input):
    return reshape(input, (-1,))


@register(torch.Tensor.reshape_as, name="torch.Tensor.reshape_as")
def reshape_as(input, other):
    return reshape(input, other.shape)


@register(torch.tensor_split, torch.Tensor.tensor_split)
def tensor_split(input, indices_or_sections, dim=0):
    d = dim % input.ndim
    size = input.shape[d]
    if _is_value(indices_or_sections):
        raise NoDecomposition("split points in a tensor")
    if isinstance(indices_or_sections, int):
        # as torch: the first size % n pieces one longer (a guard per piece on a symbolic size)
        n, bounds = indices_or_sections, [0]
        for i in range(n):
            bounds.append(bounds[-1] + size // n + (1 if i < size % n else 0))
    else:
        bounds = [0] + [builtins.min(builtins.max(i % size if i < 0 else i, 0), size)
                        for i in indices_or_sections] + [size]
    return tuple(_slice_dim(input, d, a, builtins.max(a, b)) for a, b in zip(bounds, bounds[1:]))


def _directional_split(dim_of):
    def decomposition(input, indices_or_sections):
        d = dim_of(input)
        if isinstance(indices_or_sections, int) and input.shape[d] % indices_or_sections:
            raise NoDecomposition("sections that do not divide the dim (torch raises)")
        return tensor_split(input, indices_or_sections, d)
    return decomposition


hsplit = register(torch.hsplit, torch.Tensor.hsplit)(_directional_split(lambda x: 0 if x.ndim == 1 else 1))
vsplit = register(torch.vsplit, torch.Tensor.vsplit)(_directional_split(lambda x: 0))
dsplit = register(torch.dsplit, torch.Tensor.dsplit)(_directional_split(lambda x: 2))


@register(torch.split_with_sizes, torch.Tensor.split_with_sizes, torch.unsafe_split_with_sizes,
          torch.split_with_sizes_copy)
def split_with_sizes(input, split_sizes, dim=0):
    return split(input, list(split_sizes), dim)


@register(torch.unsafe_split, torch.Tensor.unsafe_split)
def unsafe_split(input, split_size, dim=0):
    return split(input, split_size, dim)


@register(torch.unsafe_chunk, torch.Tensor.unsafe_chunk)
def unsafe_chunk(input, chunks, dim=0):
    size = input.shape[dim % input.ndim]
    return split(input, -(-size // chunks) if size else 1, dim)


@register(torch.diff, torch.Tensor.diff)
def diff(input, n=1, dim=-1, prepend=None, append=None):
    d = dim % input.ndim
    x = cat([v for v in (prepend, input, append) if v is not None], d) if prepend is not None or append is not None \
        else input
    for _ in range(n):
        size = x.shape[d]
        if size == 0:
            break
        a, b = _slice_dim(x, d, 1, size), _slice_dim(x, d, 0, size - 1)
        x = prims.ne(a, b) if x.dtype == torch.bool else sub(a, b)
    return x


@register(torch.broadcast_tensors)
def broadcast_tensors(*tensors):
    shape = broadcast_shapes(*(x.shape for x in tensors))
    return tuple(_fresh(broadcast_to_shape(x, shape), x) for x in tensors)


@register(torch.meshgrid)
def meshgrid(*tensors, indexing=None):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    xy = indexing == "xy" and len(tensors) >= 2
    sizes = [x.numel() for x in tensors]
    if xy:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, x in enumerate(tensors):
        d = (1 - i if i < 2 else i) if xy else i
        out.append(prims.broadcast_in_dim(reshape(x, (x.numel(),)), tuple(sizes), (d,)))
    return tuple(out)


@register(torch.Tensor.sum_to_size, name="torch.Tensor.sum_to_size", adapters={torch.Tensor.sum_to_size: _pack_varargs})
def sum_to_size(input, size):
    size = tuple(size)
    lead = input.ndim - len(size)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(size) if s == 1 and input.shape[lead + i] != 1)
    out = sum(input, dims, True) if dims else input
    return reshape(out, size)


# the copying forms of views: the trace is functional, so they are their views
expand_copy = register(torch.expand_copy)(lambda input, size, *, implicit=False: expand(input, size))
permute_copy = register(torch.permute_copy)(lambda input, dims: permute(input, dims))
squeeze_copy = register(torch.squeeze_copy)(lambda input, dim=None: squeeze(input, dim))
unsqueeze_copy = register(torch.unsqueeze_copy)(lambda input, dim: unsqueeze(input, dim))
t_copy = register(torch.t_copy)(lambda input: transpose(input, 0, 1))
transpose_copy = register(torch.transpose_copy)(lambda input, dim0, dim1: transpose(input, dim0, dim1))
view_copy = register(torch.view_copy)(lambda input, size: reshape(input, size))
unbind_copy = register(torch.unbind_copy)(lambda input, dim=0: unbind(input, dim))
alias_copy = register(torch.alias_copy)(lambda input: input)
narrow_copy = register(torch.narrow_copy, torch.Tensor.narrow_copy)(
    lambda input, dim, start, length: narrow(input, dim, start, length))



@register(torch.ops.aten.copy.default, name="torch.ops.aten.copy.default")
def copy(input, src, non_blocking=False):
    """What `x.copy_(src)` writes into x: src broadcast to x's shape in x's dtype (through a
    view of x, its write-back is the view's scatter into the base)."""
    if src.device != input.device or input.dtype.is_complex or src.dtype.is_complex:
        raise NoDecomposition("a copy across devices or of complex values")
    return broadcast_to_shape(cast(src, input.dtype), input.shape)


functional_form(torch.Tensor.copy_, copy)


@register(torch.ops.aten.fill.Scalar, torch.ops.aten.fill.Tensor, name="torch.ops.aten.fill",
          impl=torch.ops.aten.fill)  # the packet: a number or a 0-dim tensor
def fill(input, value):
    """What `x.fill_(value)` writes into x: value (a number or a 0-dim tensor) everywhere."""
    if _is_value(value):
        return broadcast_to_shape(cast(reshape(value, ()), input.dtype), input.shape)
    return prims.full(input.shape, _scalar_as(value, input.dtype), dtype=input.dtype, device=input.device)


functional_form(torch.Tensor.fill_, fill)

# x.resize_(...) and x.resize_as_(y): aten's functional resizes, which keep the storage's order
# (a non-contiguous tensor's elements are read as laid out, not as indexed): run whole
resize = library(torch.ops.aten.resize.default, name="torch.ops.aten.resize.default")
resize_as = library(torch.ops.aten.resize_as.default, name="torch.ops.aten.resize_as.default")
functional_form(torch.Tensor.resize_, resize, _pack_varargs)
functional_form(torch.Tensor.resize_as_, resize_as)
functional_form(torch.resize_as_, resize_as)


@register(torch.adjoint, torch.Tensor.adjoint)
def adjoint(input):
    """The conjugate transpose of the last two dims (x.mH): for real tensors, the transpose."""
    if input.dtype.is_complex:
        raise NoDecomposition("complex tensors (a conjugate)")
    if input.ndim < 2:
        raise NoDecomposition("fewer than 2 dims")  # torch raises
    return transpose(input, -2, -1)


# strided views and block layouts: run whole
diagonal = library(torch.diagonal, torch.Tensor.diagonal)
diagonal_copy = library(torch.diagonal_copy)
linalg_diagonal = library(torch.linalg.diagonal)
diag = library(torch.diag, torch.Tensor.diag)
diag_embed = library(torch.diag_embed, torch.Tensor.diag_embed)
diagflat = library(torch.diagflat, torch.Tensor.diagflat)
block_diag = library(torch.block_diag)
unfold = library(torch.Tensor.unfold, name="torch.Tensor.unfold")
unfold_copy = library(torch.unfold_copy)
as_strided = library(torch.as_strided, torch.Tensor.as_strided)
as_strided_copy = library(torch.as_strided_copy)
rot90 = library(torch.rot90, torch.Tensor.rot90)
repeat_interleave = library(torch.repeat_interleave, torch.Tensor.repeat_interleave)
constant_pad_nd = library(torch.constant_pad_nd)
cartesian_prod = library(torch.cartesian_prod)
combinations = library(torch.combinations)
chunk_cat = library(torch._chunk_cat)


@register(torch.nn.functional.pad)
def pad(input, pad, mode="constant", value=None):
    """Constant padding: negative pads crop (a slice), then prims.pad adds the rest. Reflect,
    replicate and circular padding take each padded dim at computed positions (a gather)."""
    if len(pad) % 2 or len(pad) // 2 > input.ndim or not all(isinstance(p, int) for p in pad):
        raise NoDecomposition("a padding list torch refuses")
    if mode in _POSITIONS:
        return _gather_pad(input, pad, _POSITIONS[mode])
    if mode != "constant":
        raise NoDecomposition(f"mode={mode!r}")
    if not any(pad):
        return input  # a copy in torch; in the functional trace, as clone, the value itself
    config = [[0, 0] for _ in range(input.ndim)]
    for i in range(len(pad) // 2):  # pairs from the last dim backwards, as torch
        config[input.ndim - 1 - i] = [pad[2 * i], pad[2 * i + 1]]
    x = input
    starts = [max(-lo, 0) for lo, _ in config]
    ends = [s - max(-hi, 0) for s, (_, hi) in zip(input.shape, config)]
    if any(starts) or ends != list(input.shape):
        x = prims.slice(x, starts, ends)
    grow = [(max(lo, 0), max(hi, 0), 0) for lo, hi in config]
    if any(lo or hi for lo, hi, _ in grow):
        x = prims.pad(x, 0 if value is None else value, grow)
    return x


def _reflect(k, size):  # the mirror image about the first and last element: size - 1 - |size - 1 - |k||
    last = size - 1
    return prims.sub(last, prims.abs(prims.sub(last, prims.abs(k))))


def _replicate(k, size):  # the nearest edge element
    return prims.minimum(prims.maximum(k, 0), size - 1)


def _circular(k, size):  # wrapped around
    return prims.remainder(k, size)


_POSITIONS = {"reflect": _reflect, "replicate": _replicate, "circular": _circular}


def _gather_pad(input, pad, positions):
    """Each padded dim (pairs from the last dim backwards, as torch): output element j of a dim
    of size n padded by (lo, hi) reads input element positions(j - lo, n). Negative pads crop."""
    x = input
    for i in range(len(pad) // 2):
        d, lo, hi = input.ndim - 1 - i, pad[2 * i], pad[2 * i + 1]
        n = x.shape[d]
        if not (lo or hi):
            continue
        if n == 0:
            raise NoDecomposition("padding an empty dim")  # torch raises
        k = prims.iota(n + lo + hi, start=-lo, step=1, dtype=torch.int64, device=x.device)
        x = take_dim(x, positions(k, n), d, wrap=False)
    return x


@register(torch.gradient)
def gradient(input, *, spacing=1, dim=None, edge_order=1):
    """Central differences inside, one-sided ones (first or second order) at the two ends, per
    dim, with even spacing (a number per dim); coordinates as tensors run whole."""
    if input.ndim == 0 or edge_order not in (1, 2):
        raise NoDecomposition("a 0-d input or an edge order torch refuses")
    dims = tuple(range(input.ndim)) if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
    dims = tuple(d % input.ndim for d in dims)
    spacing = 1 if spacing is None else spacing
    steps = list(spacing) if isinstance(spacing, (list, tuple)) else [spacing] * len(dims)
    if len(steps) == 1 and len(dims) > 1:
        steps = steps * len(dims)
    if len(steps) != len(dims) or any(_is_value(h) or not isinstance(h, (int, float)) for h in steps):
        raise NoDecomposition("coordinates as tensors")
    if any(input.shape[d] < edge_order + 1 for d in dims):
        raise NoDecomposition("a dim too short for the edge order")  # torch raises
    return tuple(_gradient_along(input, d, h, edge_order) for d, h in zip(dims, steps))


def _gradient_along(x, d: int, h, edge_order: int):
    n = x.shape[d]
    part = lambda a, b: _slice_dim(x, d, a, b)  # noqa: E731
    center = div(div(sub(part(2, n), part(0, n - 2)), h), 2)
    if edge_order == 1:
        first = div(sub(part(1, 2), part(0, 1)), h)
        last = div(sub(part(n - 1, n), part(n - 2, n - 1)), h)
    else:
        first = div(add(sub(mul(part(1, 2), 2), mul(part(0, 1), 1.5)), mul(part(2, 3), -0.5)), h)
        last = div(add(sub(mul(part(n - 3, n - 2), 0.5), mul(part(n - 2, n - 1), 2)), mul(part(n - 1, n), 1.5)), h)
    return cat([first, center, last], d)
