"""Helpers over Values and numbers that every family shares: torch's type promotion,
casts and broadcasts, the elementwise and reduction patterns, and opmath for composites."""

from __future__ import annotations

import builtins
import functools

import torch
from torch.utils._pytree import tree_leaves as pytree_leaves

from fusionlens.ir.sizes import broadcast_shapes
from fusionlens.ir.trace import Symbol, Value
from fusionlens.ir.sizes import same_shape
from fusionlens.ops import prims
from fusionlens.ops.torch_ops.registry import NoDecomposition


def _is_value(x):
    return isinstance(x, Value)


def _meta(x):
    return x.meta() if _is_value(x) else x


def result_dtype(*operands) -> torch.dtype:
    """Type promotion as torch does it (tensor, zero-dim and scalar categories)."""
    metas = [_meta(x) for x in operands if x is not None]
    tensors = [m for m in metas if isinstance(m, torch.Tensor)]
    if len(metas) == 1:
        return tensors[0].dtype if tensors else torch.tensor(metas[0]).dtype
    dtype: torch.dtype | None = None
    acc = metas[0]
    for m in metas[1:]:
        dtype = torch.result_type(acc, m)
        # carry the promoted category forward: a tensor of the promoted dtype
        shape = next((t.shape for t in tensors), ())
        acc = torch.empty(shape, dtype=dtype, device="meta") if tensors else m
    assert dtype is not None  # two operands or more: the loop ran
    return dtype


def _is_float(dtype):
    return dtype.is_floating_point or dtype.is_complex


def _scalar_as(x, dtype):
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):  # a dynamic size: kept an expression
        return x * 1.0 if _is_float(dtype) and isinstance(x, torch.SymInt) else x
    if dtype == torch.bool:
        return bool(x)
    if _is_float(dtype):
        return float(x) if not isinstance(x, complex) else x
    return int(x)


def slice_indices(k: slice, size) -> tuple:
    """`k.indices(size)` for a size or bounds that may be symbolic (a dynamic program's): the
    bounds as expressions (min, max) rather than an int() of a symbol, which would specialise
    the program to the example's size. Steps are the slice's own ints."""
    if not any(isinstance(x, torch.SymInt) for x in (k.start, k.stop, size)):
        return k.indices(size)
    step = 1 if k.step is None else k.step

    def bound(x, default):
        if x is None:
            return default
        if isinstance(x, int) and x < 0:
            x = x + size
        from fusionlens.ir.torch_compat import statically_known_true
        if statically_known_true(x <= size):  # s0 sliced to 64 when s0 <= 64 is known: s0, not Min(64, s0)
            return x if statically_known_true(x >= 0) else torch.sym_max(0, x)
        return torch.sym_max(0, torch.sym_min(x, size))
    if step < 0:  # counted from the end: the bounds as Python's, whose rule differs
        return tuple(int(x) if isinstance(x, torch.SymInt) else x for x in k.indices(int(size)))
    return bound(k.start, 0), bound(k.stop, size), step


def broadcast_to_shape(x: Value, shape) -> Value:
    shape = tuple(shape)
    if same_shape(x.shape, shape):
        return x
    offset = len(shape) - x.ndim
    return prims.broadcast_in_dim(x, shape, tuple(range(offset, len(shape))))


def cast(x, dtype):
    if _is_value(x):
        return x if x.dtype == dtype else prims.convert_element_type(x, dtype)
    return _scalar_as(x, dtype)


def _prepare(operands, dtype, shape):
    return [broadcast_to_shape(cast(x, dtype), shape) if _is_value(x) else cast(x, dtype) for x in operands]


def _common_shape(*operands):
    return tuple(broadcast_shapes(*(x.shape for x in operands if _is_value(x))))


def elementwise(prim, *operands, promote="default"):
    """Promote dtypes, broadcast shapes, then apply the prim.

    promote: "default" keeps the promoted dtype; "int_to_float" makes integer results
    float (true division, exp, ...); "bool" computes in the promoted dtype, returns bool.
    """
    values = [x for x in operands if _is_value(x)]
    if not values:
        raise NoDecomposition("no tensor operand")
    if any(v.dtype.is_complex for v in values):
        raise NoDecomposition("complex tensors")
    dtype = result_dtype(*operands)
    if promote == "int_to_float" and not _is_float(dtype):
        dtype = torch.get_default_dtype()
    shape = _common_shape(*operands)
    return prim(*_prepare(operands, dtype, shape))


def _dims(x: Value, dim) -> tuple:
    if dim is None or dim == () or dim == []:
        return tuple(range(x.ndim))
    if isinstance(dim, int):
        dim = (dim,)
    return tuple(sorted(d % builtins.max(x.ndim, 1) for d in dim))


def _keep(r: Value, x: Value, dims, keepdim: bool) -> Value:
    if not keepdim:
        return r
    shape = tuple(1 if i in dims else s for i, s in enumerate(x.shape))
    kept = tuple(i for i in range(x.ndim) if i not in dims)
    return prims.broadcast_in_dim(r, shape, kept)


_LOW_PRECISION = (torch.float16, torch.bfloat16)


def reduction(prim, x: Value, dim=None, keepdim=False, dtype=None, accumulate=True):
    """Reduce over `dim`, accumulating low-precision floats in float32 as torch does."""
    dims = _dims(x, dim)
    out_dtype = dtype or x.dtype
    if prim in (prims.sum, prims.prod) and dtype is None and not _is_float(x.dtype):
        out_dtype = torch.int64  # torch sums and multiplies integers and bools in int64
    compute = torch.float32 if (accumulate and out_dtype in _LOW_PRECISION) else out_dtype
    y = cast(x, compute)
    if x.ndim and dims:
        y = prim(y, dims)
    return cast(_keep(y, x, dims, keepdim), out_dtype)


def opmath(fn):
    """Compute a composite activation in float32 for float16/bfloat16 inputs, as torch's
    kernels do, and round once at the end (exp in float16 overflows early)."""

    @functools.wraps(fn)
    def wrapper(input, *args, **kwargs):
        if _is_value(input) and input.dtype in _LOW_PRECISION:
            return cast(fn(cast(input, torch.float32), *args, **kwargs), input.dtype)
        return fn(input, *args, **kwargs)
    return wrapper


def kept_dtype(args, kwargs) -> torch.dtype | None:
    """The dtype an in-place op on args[0] casts its result back to, where another tensor
    operand's differs (None where none does: the functional result already has it)."""
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    target = args[0].dtype
    others = [a for a in pytree_leaves((args[1:], kwargs)) if isinstance(a, torch.Tensor)]
    return target if any(a.dtype != target for a in others) else None


def cast_result(sym: Symbol, dtype: torch.dtype, printed: str) -> Symbol:
    """`sym` whose tensor result is cast to `dtype`: an in-place op's functional form, whose
    operand of a wider dtype promotes the result where eager casts it back into the tensor."""
    def impl(*args, **kwargs):
        return sym.impl(*args, **kwargs).to(dtype)
    decompose, decomposition = sym.decomposition, None
    if decompose is not None:
        decomposition = functools.wraps(decompose)(lambda *a, **k: cast(decompose(*a, **k), dtype))
    return Symbol(printed, functools.wraps(sym.impl)(impl), kind=sym.kind, decomposition=decomposition,
                  tags=sym.tags, flops=sym.flops)
