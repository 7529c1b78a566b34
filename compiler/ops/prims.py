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

from compiler.ir import Symbol, broadcast_shapes

ALL: dict = {}  # name -> Symbol

ELEMENTWISE, REDUCTION, SHAPE, FACTORY, GATHER, CAT = (
    "elementwise", "reduction", "shape", "factory", "gather", "cat")


def _prim(name, impl, *tags, meta=None):
    sym = Symbol(f"prims.{name}", impl, kind="prim", tags=tags, meta=meta)
    ALL[name] = sym
    globals()[name] = sym
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
    return _empty([len(range(s, e, st)) for s, e, st in zip(start_indices, end_indices, strides)], a.dtype)


def _cat_meta(tensors, dim):
    shape = list(tensors[0].shape)
    shape[dim] = builtins.sum(t.shape[dim] for t in tensors)
    return _empty(shape, tensors[0].dtype)


def _take_meta(a, index, dim):
    shape = [index.shape[d] if d == dim else builtins.max(a.shape[d], index.shape[d]) for d in range(a.ndim)]
    return _empty(shape, a.dtype)


# --- elementwise ---------------------------------------------------------------------------

UNARY = {
    "abs": torch.abs, "neg": torch.neg, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log,
    "log2": torch.log2, "log1p": torch.log1p, "expm1": torch.expm1, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh,
    "sigmoid": torch.sigmoid, "erf": torch.erf, "floor": torch.floor, "ceil": torch.ceil,
    "round": torch.round, "trunc": torch.trunc, "sign": torch.sign, "reciprocal": torch.reciprocal,
    "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not, "isnan": torch.isnan,
}


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


BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "pow": operator.pow, "remainder": operator.mod, "maximum": _maximum, "minimum": _minimum,
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
    "gt": operator.gt, "ge": operator.ge, "bitwise_and": operator.and_,
    "bitwise_or": operator.or_, "bitwise_xor": operator.xor,
}
COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}

for _name, _fn in UNARY.items():
    _prim(_name, _fn, ELEMENTWISE, meta=_bool_meta if _name in ("logical_not", "isnan") else _same_meta)
for _name, _fn in BINARY.items():
    _prim(_name, _fn, ELEMENTWISE, meta=_bool_meta if _name in COMPARISONS else _binary_meta)

where = _prim("where", torch.where, ELEMENTWISE, meta=_where_meta)
convert_element_type = _prim("convert_element_type", lambda a, dtype: a.to(dtype), ELEMENTWISE,
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


broadcast_in_dim = _prim("broadcast_in_dim", _broadcast_in_dim, SHAPE,
                         meta=lambda a, shape, broadcast_dims: _empty(shape, a.dtype))
reshape = _prim("reshape", lambda a, shape: a.reshape(shape), SHAPE, meta=lambda a, shape: _empty(shape, a.dtype))
permute = _prim("permute", lambda a, dims: a.permute(dims), SHAPE,
                meta=lambda a, dims: _empty([a.shape[d] for d in dims], a.dtype))
slice_ = _prim("slice", _slice, SHAPE, meta=_slice_meta)
cat = _prim("cat", lambda tensors, dim: torch.cat(tensors, dim), CAT, meta=_cat_meta)
take_along_axis = _prim("take_along_axis", lambda a, index, dim: torch.take_along_dim(a, index, dim), GATHER,
                        meta=_take_meta)

# --- reductions (the reduced dims are dropped) ---------------------------------------------


def _prod(a, dims):
    for d in sorted(dims, reverse=True):
        a = torch.prod(a, d, dtype=a.dtype)
    return a


def _reduce_meta(a, dims):
    return _empty(_reduced(a, dims), a.dtype)


# dtype=a.dtype: torch.sum would widen integers to int64; the prim keeps its input's dtype.
sum = _prim("sum", lambda a, dims: torch.sum(a, dims, dtype=a.dtype), REDUCTION, meta=_reduce_meta)  # noqa: A001
amax = _prim("amax", lambda a, dims: torch.amax(a, dims), REDUCTION, meta=_reduce_meta)
amin = _prim("amin", lambda a, dims: torch.amin(a, dims), REDUCTION, meta=_reduce_meta)
prod = _prim("prod", _prod, REDUCTION, meta=_reduce_meta)
var_mean = _prim("var_mean", lambda a, dims, correction: torch.var_mean(a, dims, correction=correction),
                 REDUCTION, meta=lambda a, dims, correction: (_reduce_meta(a, dims), _reduce_meta(a, dims)))
argmax = _prim("argmax", lambda a, dim: torch.argmax(a, dim), REDUCTION,
               meta=lambda a, dim: _empty(_reduced(a, (dim,)), torch.int64))
argmin = _prim("argmin", lambda a, dim: torch.argmin(a, dim), REDUCTION,
               meta=lambda a, dim: _empty(_reduced(a, (dim,)), torch.int64))

# --- factories ----------------------------------------------------------------------------

full = _prim("full", lambda shape, fill_value, *, dtype, device: torch.full(shape, fill_value, dtype=dtype, device=device),
             FACTORY, meta=lambda shape, fill_value, *, dtype, device: _empty(shape, dtype))
iota = _prim("iota", lambda length, *, start, step, dtype, device:
             torch.arange(start, start + length * step, step, dtype=dtype, device=device)[:length], FACTORY,
             meta=lambda length, *, start, step, dtype, device: _empty((length,), dtype))
