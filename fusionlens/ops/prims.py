"""Prims: the small vocabulary that torch-level ops decompose into and executors fuse.

Prims are explicit: elementwise prims take operands of one shape and one dtype (python
scalars allowed), broadcasts and casts are their own prims, reductions drop the reduced
dims. Each prim's `impl` runs it with torch, so a decomposed trace is runnable as printed
(`prims.add(t0, t1)`) and the torch executor can run any prim.
"""

from __future__ import annotations

import builtins
import operator

import torch

from fusionlens.ir.sizes import broadcast_shapes
from fusionlens.ir.trace import OpTag, Symbol, SymbolKind

ALL: dict[str, Symbol] = {}  # short name ("add") -> Symbol, for tests and docs that enumerate prims

# The old names of the tags, for code that has not switched to OpTag yet
ELEMENTWISE, REDUCTION, SHAPE, FACTORY, GATHER, CAT = (
    OpTag.ELEMENTWISE, OpTag.REDUCTION, OpTag.SHAPE, OpTag.FACTORY, OpTag.GATHER, OpTag.CAT)
_NO_GRAD = OpTag.NON_DIFFERENTIABLE  # no gradient flows through it (comparisons, indices, factories)


def _prim(name: str, impl, *tags: OpTag, meta=None) -> Symbol:
    sym = Symbol(f"prims.{name}", impl, kind=SymbolKind.PRIM, tags=tags, meta=meta)
    ALL[name] = sym
    return sym


def _is_tensor(x):
    return isinstance(x, torch.Tensor)


# --- output metadata without running torch's meta kernels (their first use imports for seconds)

def _empty(shape, dtype):
    return torch.empty(tuple(shape), dtype=dtype, device="meta")


def _tensors(*args):
    return [a for a in args if _is_tensor(a)]


def _same_meta(a, *rest):
    return _empty(a.shape, a.dtype)


def _bool_meta(a, *rest):
    ts = _tensors(a, *rest)
    return _empty(broadcast_shapes(*(t.shape for t in ts)), torch.bool)


def _binary_meta(a, b):
    ts = _tensors(a, b)
    return _empty(broadcast_shapes(*(t.shape for t in ts)), ts[0].dtype)


def _where_meta(c, a, b):
    ts = _tensors(c, a, b)
    values = _tensors(a, b)
    return _empty(broadcast_shapes(*(t.shape for t in ts)), values[0].dtype)


def _reduced(a, dims):
    return tuple(s for i, s in enumerate(a.shape) if i not in dims)


def _slice_meta(a, start_indices, end_indices, strides=None):
    strides = strides or [1] * a.ndim
    return _empty([_extent(s, e, st) for s, e, st in zip(start_indices, end_indices, strides)], a.dtype)


def _extent(start, stop, step) -> int:
    """len(range(start, stop, step)), for bounds that may be symbols (a dynamic program's)."""
    if type(start) is int and type(stop) is int:
        return len(range(start, stop, step))
    from fusionlens.ir.torch_compat import statically_known_true
    if statically_known_true(stop >= start) or statically_known_true(stop - start >= 0):  # torch guarded it (a
        # split's piece): the size torch gives it
        return (stop - start + step - 1) // step
    return torch.sym_max(0, (stop - start + step - 1) // step)


def _cat_meta(tensors, dim):
    shape = list(tensors[0].shape)
    shape[dim] = builtins.sum(t.shape[dim] for t in tensors)
    return _empty(shape, tensors[0].dtype)


def _take_meta(a, index, dim):
    shape = [index.shape[d] if d == dim else builtins.max(a.shape[d], index.shape[d]) for d in range(a.ndim)]
    return _empty(shape, a.dtype)


# --- elementwise ---------------------------------------------------------------------------
# One line a prim, so that a reader (and go-to-definition) finds each one.

def _maximum(a, b):
    if not _is_tensor(b):
        return torch.clamp_min(a, b)
    if not _is_tensor(a):
        return torch.clamp_min(b, a)
    return torch.maximum(a, b)


def _minimum(a, b):
    if not _is_tensor(b):
        return torch.clamp_max(a, b)
    if not _is_tensor(a):
        return torch.clamp_max(b, a)
    return torch.minimum(a, b)


def _unary(name, impl, meta=_same_meta, *tags: OpTag):
    return _prim(name, impl, OpTag.ELEMENTWISE, *tags, meta=meta)


def _binary(name, impl, meta=_binary_meta, *tags: OpTag):
    return _prim(name, impl, OpTag.ELEMENTWISE, *tags, meta=meta)


abs = _unary("abs", torch.abs)  # noqa: A001
neg = _unary("neg", torch.neg)
exp = _unary("exp", torch.exp)
exp2 = _unary("exp2", torch.exp2)
log = _unary("log", torch.log)
log2 = _unary("log2", torch.log2)
log1p = _unary("log1p", torch.log1p)
expm1 = _unary("expm1", torch.expm1)
sqrt = _unary("sqrt", torch.sqrt)
rsqrt = _unary("rsqrt", torch.rsqrt)
sin = _unary("sin", torch.sin)
cos = _unary("cos", torch.cos)
tan = _unary("tan", torch.tan)
tanh = _unary("tanh", torch.tanh)
sigmoid = _unary("sigmoid", torch.sigmoid)
erf = _unary("erf", torch.erf)
floor = _unary("floor", torch.floor)
ceil = _unary("ceil", torch.ceil)
round = _unary("round", torch.round)  # noqa: A001
trunc = _unary("trunc", torch.trunc)
sign = _unary("sign", torch.sign)
reciprocal = _unary("reciprocal", torch.reciprocal)
logical_not = _unary("logical_not", torch.logical_not, _bool_meta, _NO_GRAD)
bitwise_not = _unary("bitwise_not", torch.bitwise_not, _same_meta, _NO_GRAD)
isnan = _unary("isnan", torch.isnan, _bool_meta, _NO_GRAD)

add = _binary("add", operator.add)
sub = _binary("sub", operator.sub)
mul = _binary("mul", operator.mul)
div = _binary("div", operator.truediv)
pow = _binary("pow", operator.pow)  # noqa: A001
remainder = _binary("remainder", operator.mod)


def _fmod(a, b):
    if not isinstance(a, torch.Tensor):  # torch.fmod takes a number as the divisor only; a 0-dim tensor promotes as one
        a = torch.tensor(a, device=b.device)
    return torch.fmod(a, b)


fmod = _binary("fmod", _fmod)  # the sign of the dividend (C's): floor division builds on it
maximum = _binary("maximum", _maximum)
minimum = _binary("minimum", _minimum)
eq = _binary("eq", operator.eq, _bool_meta, _NO_GRAD)
ne = _binary("ne", operator.ne, _bool_meta, _NO_GRAD)
lt = _binary("lt", operator.lt, _bool_meta, _NO_GRAD)
le = _binary("le", operator.le, _bool_meta, _NO_GRAD)
gt = _binary("gt", operator.gt, _bool_meta, _NO_GRAD)
ge = _binary("ge", operator.ge, _bool_meta, _NO_GRAD)
bitwise_and = _binary("bitwise_and", operator.and_, _binary_meta, _NO_GRAD)
bitwise_or = _binary("bitwise_or", operator.or_, _binary_meta, _NO_GRAD)
bitwise_xor = _binary("bitwise_xor", operator.xor, _binary_meta, _NO_GRAD)

UNARY = (abs, neg, exp, exp2, log, log2, log1p, expm1, sqrt, rsqrt, sin, cos, tan, tanh, sigmoid, erf,
         floor, ceil, round, trunc, sign, reciprocal, logical_not, bitwise_not, isnan)
BINARY = (add, sub, mul, div, pow, remainder, fmod, maximum, minimum, eq, ne, lt, le, gt, ge,
          bitwise_and, bitwise_or, bitwise_xor)
COMPARISONS = (eq, ne, lt, le, gt, ge)

where = _prim("where", torch.where, OpTag.ELEMENTWISE, meta=_where_meta)
convert_element_type = _prim("convert_element_type", lambda a, dtype: a.to(dtype), OpTag.ELEMENTWISE,
                             meta=lambda a, dtype: _empty(a.shape, dtype))


# --- shapes and layout ---------------------------------------------------------------------

def _broadcast_in_dim(a, shape, broadcast_dims):
    """Place a's dims at `broadcast_dims` of `shape`; every other dim is broadcast."""
    expanded = [1] * len(shape)
    for src, dst in enumerate(broadcast_dims):
        expanded[dst] = a.shape[src]
    return a.reshape(expanded).expand(shape)


def _slice(a, start_indices, end_indices, strides=None):
    strides = strides or [1] * a.ndim
    return a[tuple(builtins.slice(s, e, st) for s, e, st in zip(start_indices, end_indices, strides))]


broadcast_in_dim = _prim("broadcast_in_dim", _broadcast_in_dim, OpTag.SHAPE,
                         meta=lambda a, shape, broadcast_dims: _empty(shape, a.dtype))
reshape = _prim("reshape", lambda a, shape: a.reshape(shape), OpTag.SHAPE, meta=lambda a, shape: _empty(shape, a.dtype))
permute = _prim("permute", lambda a, dims: a.permute(dims), OpTag.SHAPE,
                meta=lambda a, dims: _empty([a.shape[d] for d in dims], a.dtype))
slice = _prim("slice", _slice, OpTag.SHAPE, meta=_slice_meta)  # noqa: A001
cat = _prim("cat", lambda tensors, dim: torch.cat(tensors, dim), OpTag.CAT, meta=_cat_meta)
take_along_axis = _prim("take_along_axis", lambda a, index, dim: torch.take_along_dim(a, index, dim), OpTag.GATHER,
                        meta=_take_meta)


def _pad(a, padding_value, padding_config):
    """lax.pad without negative padding: per dim (low, high, interior) elements of
    `padding_value` around and between a's elements (the backward of slice)."""
    shape = [lo + hi + s + max(s - 1, 0) * interior for s, (lo, hi, interior) in zip(a.shape, padding_config)]
    out = torch.full(shape, padding_value, dtype=a.dtype, device=a.device)
    out[tuple(builtins.slice(lo, lo + s + max(s - 1, 0) * interior, interior + 1)
              for s, (lo, hi, interior) in zip(a.shape, padding_config))] = a
    return out


def _pad_meta(a, padding_value, padding_config):
    return _empty([lo + hi + s + max(s - 1, 0) * interior for s, (lo, hi, interior) in zip(a.shape, padding_config)],
                  a.dtype)


# the duals of slice and take_along_axis, which backward rules need
pad = _prim("pad", _pad, OpTag.SHAPE, meta=_pad_meta)
scatter_add = _prim("scatter_add", lambda a, index, src, dim: a.scatter_add(dim, index, src), OpTag.GATHER,
                    meta=lambda a, index, src, dim: _empty(a.shape, a.dtype))



# --- scatters: a window of the first operand replaced (a view update written back) -----------
# The window is addressed by the row-major numbers of `a`'s elements, whatever a's strides:
# element i of src goes to number offset + sum(i[d] * strides[d]) (strided_scatter: slices,
# selects, diagonals, strided views and chains of them), or, for `scatter`, to a's element whose
# index is src's with dim `dim` replaced by index's value (index_copy_, a KV cache's positions).
# The result is a new tensor (row-major); executors may write it where `a` was.

# (each impl stands alone: repro scripts copy a named impl's source, and nothing else, as the
# prim's torch spelling)

def _window(a, shape, offset, strides):
    """The strided window of a's row-major elements, a view where a is contiguous."""
    # (a copy where not: reshape(-1) of an expanded `a` is a view of stride 0, whose numbers are
    # no addresses: fuzz backward 32056, a cotangent broadcast from a 0-d one)
    flat = (a if a.is_contiguous() else a.contiguous()).view(-1)
    return torch.as_strided(flat, tuple(shape), tuple(strides), flat.storage_offset() + offset)


def _strided_scatter(a, src, offset, strides):
    out = a.clone(memory_format=torch.contiguous_format)
    flat = out.view(-1)
    torch.as_strided(flat, tuple(src.shape), tuple(strides), flat.storage_offset() + offset).copy_(src)
    return out


strided_window = _prim("strided_window", _window, OpTag.SHAPE,
                       meta=lambda a, shape, offset, strides: _empty(shape, a.dtype))
strided_scatter = _prim("strided_scatter", _strided_scatter, OpTag.SCATTER,
                        meta=lambda a, src, offset, strides: _empty(a.shape, a.dtype))
scatter = _prim("scatter", lambda a, index, src, dim: a.scatter(dim, index, src), OpTag.SCATTER,
                meta=lambda a, index, src, dim: _empty(a.shape, a.dtype))
SCATTERS = (strided_scatter, scatter)

# --- reductions (the reduced dims are dropped) ---------------------------------------------


def _prod(a, dims):
    for d in sorted(dims, reverse=True):
        a = torch.prod(a, d, dtype=a.dtype)
    return a


def _reduce_meta(a, dims):
    return _empty(_reduced(a, dims), a.dtype)


# dtype=a.dtype: torch.sum would widen integers to int64; the prim keeps its input's dtype.
sum = _prim("sum", lambda a, dims: torch.sum(a, dims, dtype=a.dtype), OpTag.REDUCTION, meta=_reduce_meta)  # noqa: A001
amax = _prim("amax", lambda a, dims: torch.amax(a, dims), OpTag.REDUCTION, meta=_reduce_meta)
amin = _prim("amin", lambda a, dims: torch.amin(a, dims), OpTag.REDUCTION, meta=_reduce_meta)
prod = _prim("prod", _prod, OpTag.REDUCTION, meta=_reduce_meta)
var_mean = _prim("var_mean", lambda a, dims, correction: torch.var_mean(a, dims, correction=correction),
                 OpTag.REDUCTION, meta=lambda a, dims, correction: (_reduce_meta(a, dims), _reduce_meta(a, dims)))
argmax = _prim("argmax", lambda a, dim: torch.argmax(a, dim), OpTag.REDUCTION, _NO_GRAD,
               meta=lambda a, dim: _empty(_reduced(a, (dim,)), torch.int64))
argmin = _prim("argmin", lambda a, dim: torch.argmin(a, dim), OpTag.REDUCTION, _NO_GRAD,
               meta=lambda a, dim: _empty(_reduced(a, (dim,)), torch.int64))

# --- factories ----------------------------------------------------------------------------

full = _prim("full",
             lambda shape, fill_value, *, dtype, device: torch.full(shape, fill_value, dtype=dtype, device=device),
             OpTag.FACTORY, _NO_GRAD, meta=lambda shape, fill_value, *, dtype, device: _empty(shape, dtype))
iota = _prim("iota", lambda length, *, start, step, dtype, device:
             torch.arange(start, start + length * step, step, dtype=dtype, device=device)[:length],
             OpTag.FACTORY, _NO_GRAD, meta=lambda length, *, start, step, dtype, device: _empty((length,), dtype))
