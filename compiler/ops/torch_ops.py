"""Torch-level symbols: what the frontend records, and how each decomposes into prims.

Each symbol stands for one torch function (its `impl`, also its printed name) and every
alias that means the same (Tensor methods, operators, torch.nn.functional). Its
decomposition is a plain function over Values that calls prims and other symbols, with
torch's own signature, so a recorded call binds to it unchanged. A symbol with no
decomposition is a library call (matmul, linear, SDPA, ...): executors run it as a whole.
A decomposition raises NoDecomposition for argument combinations it does not cover; the op
then stays a library call too.
"""

from __future__ import annotations

import builtins
import math
import operator
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from compiler.ir import Symbol, Value, broadcast_shapes
from compiler.ops import prims

LIBRARY = "library"


class NoDecomposition(Exception):
    """This call has no prim decomposition; run it as a whole."""


# torch callable -> (Symbol, adapter or None). An adapter rewrites a call's (args, kwargs)
# into the canonical function's convention (e.g. Tensor.view(*shape) -> reshape(x, shape)).
REGISTRY: dict = {}
SYMBOLS: dict = {}  # name -> Symbol


def qualified_name(fn) -> Optional[str]:
    """The dotted name that evaluates to `fn` in a printed program, or None."""
    n = getattr(fn, "__name__", "")
    candidates = [f"torch.nn.functional.{n}", f"torch.{n}", f"torch.Tensor.{n}",
                  f"torch.special.{n.removeprefix('special_')}", f"torch.fft.{n.removeprefix('fft_')}",
                  f"torch.linalg.{n.removeprefix('linalg_')}",
                  f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', n)}"]
    for dotted in candidates:
        parts = dotted.split(".")
        if parts[0] != "torch":
            continue
        obj = torch
        for part in parts[1:]:
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is fn:
            return dotted
    return None


def _qualname(fn) -> str:
    name = qualified_name(fn)
    if name is None:
        raise ValueError(f"no printable name for {fn!r}")
    return name


def register(*fns, name: Optional[str] = None, impl: Optional[Callable] = None, tags=(),
             adapters: Optional[dict] = None):
    """Decorator: `fn` is the decomposition of the torch function fns[0] and its aliases."""

    def deco(decomposition):
        sym = Symbol(name or _qualname(fns[0]), impl or fns[0], decomposition=decomposition, tags=tags)
        _add(sym, fns, adapters)
        return sym

    return deco


def library(*fns, name: Optional[str] = None, impl: Optional[Callable] = None, adapters=None):
    sym = Symbol(name or _qualname(fns[0]), impl or fns[0], tags=(LIBRARY,))
    _add(sym, fns, adapters)
    return sym


def _add(sym, fns, adapters):
    SYMBOLS[sym.name] = sym
    for fn in fns:
        REGISTRY[fn] = (sym, (adapters or {}).get(fn))


def lookup(fn):
    return REGISTRY.get(fn)


# --- adapters ------------------------------------------------------------------------------

def _pack_varargs(args, kwargs):
    """x.view(2, 3) / x.permute(0, 2, 1) -> (x, (2, 3)); already-packed calls pass through."""
    if len(args) > 2 or (len(args) == 2 and isinstance(args[1], int)):
        return (args[0], tuple(args[1:])), kwargs
    return args, kwargs


def _swap(args, kwargs):
    return (args[1], args[0], *args[2:]), kwargs


# --- helpers over Values and numbers -------------------------------------------------------

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
    dtype = None
    acc = metas[0]
    for m in metas[1:]:
        dtype = torch.result_type(acc, m)
        # carry the promoted category forward: a tensor of the promoted dtype
        shape = next((t.shape for t in tensors), ())
        acc = torch.empty(shape, dtype=dtype, device="meta") if tensors else m
    return dtype


def _is_float(dtype):
    return dtype.is_floating_point or dtype.is_complex


def _scalar_as(x, dtype):
    if dtype == torch.bool:
        return bool(x)
    if _is_float(dtype):
        return float(x) if not isinstance(x, complex) else x
    return int(x)


def broadcast_to_shape(x: Value, shape) -> Value:
    shape = tuple(shape)
    if x.shape == shape:
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


def _as_value(x, like: Value):
    if _is_value(x):
        return x
    return prims.full((), x, dtype=result_dtype(x), device=like.device)


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


# --- elementwise binary -------------------------------------------------------------------

@register(torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__)
def add(input, other, *, alpha=1):
    if alpha != 1:
        other = mul(other, alpha)
    return elementwise(prims.add, input, other)


@register(torch.sub, torch.subtract, torch.Tensor.sub, torch.Tensor.__sub__)
def sub(input, other, *, alpha=1):
    if alpha != 1:
        other = mul(other, alpha)
    return elementwise(prims.sub, input, other)


@register(torch.rsub, torch.Tensor.__rsub__)
def rsub(input, other, *, alpha=1):
    return sub(other, input, alpha=alpha) if _is_value(other) else elementwise(prims.sub, other * alpha, input)


@register(torch.mul, torch.multiply, torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__)
def mul(input, other):
    return elementwise(prims.mul, input, other)


@register(torch.div, torch.divide, torch.true_divide, torch.Tensor.div, torch.Tensor.__truediv__,
          torch.Tensor.true_divide)
def div(input, other, *, rounding_mode=None):
    if rounding_mode == "floor":
        dtype = result_dtype(input, other)
        if not _is_float(dtype):
            raise NoDecomposition("integer floor division")
        compute = torch.float32 if dtype in _LOW_PRECISION else dtype  # round once, as torch does
        return cast(floor(elementwise(prims.div, cast(input, compute), cast(other, compute))), dtype)
    if rounding_mode is not None:
        raise NoDecomposition(f"rounding_mode={rounding_mode!r}")
    return elementwise(prims.div, input, other, promote="int_to_float")


@register(torch.Tensor.__rtruediv__, name="torch.Tensor.__rtruediv__")
def rtruediv(input, other):
    return elementwise(prims.div, other, input, promote="int_to_float")


@register(torch.pow, torch.Tensor.pow, torch.Tensor.__pow__)
def pow(input, exponent):  # noqa: A001
    if not _is_value(exponent) and _is_value(input):
        if exponent == 2:
            return mul(input, input)
        if exponent == 0.5 and _is_float(input.dtype):
            return sqrt(input)
    return elementwise(prims.pow, input, exponent)


@register(torch.Tensor.__rpow__, name="torch.Tensor.__rpow__")
def rpow(input, other):
    return elementwise(prims.pow, other, input)


@register(torch.square, torch.Tensor.square)
def square(input):
    return mul(input, input)


@register(torch.remainder, torch.Tensor.remainder, torch.Tensor.__mod__)
def remainder(input, other):
    return elementwise(prims.remainder, input, other)


@register(torch.maximum, torch.Tensor.maximum)
def maximum(input, other):
    return elementwise(prims.maximum, input, other)


@register(torch.minimum, torch.Tensor.minimum)
def minimum(input, other):
    return elementwise(prims.minimum, input, other)


def _comparison(prim_name, *fns):
    prim = prims.ALL[prim_name]

    def decomposition(input, other):
        return elementwise(prim, input, other, promote="bool")

    decomposition.__name__ = prim_name
    return register(*fns)(decomposition)


eq = _comparison("eq", torch.eq, torch.Tensor.eq, torch.Tensor.__eq__)
ne = _comparison("ne", torch.ne, torch.Tensor.ne, torch.Tensor.__ne__)
lt = _comparison("lt", torch.lt, torch.Tensor.lt, torch.Tensor.__lt__)
le = _comparison("le", torch.le, torch.Tensor.le, torch.Tensor.__le__)
gt = _comparison("gt", torch.gt, torch.Tensor.gt, torch.Tensor.__gt__)
ge = _comparison("ge", torch.ge, torch.Tensor.ge, torch.Tensor.__ge__)


@register(torch.logical_and, torch.Tensor.logical_and)
def logical_and(input, other):
    return elementwise(prims.bitwise_and, cast(input, torch.bool), cast(other, torch.bool))


@register(torch.logical_or, torch.Tensor.logical_or)
def logical_or(input, other):
    return elementwise(prims.bitwise_or, cast(input, torch.bool), cast(other, torch.bool))


@register(torch.bitwise_and, torch.Tensor.__and__, torch.Tensor.bitwise_and)
def bitwise_and(input, other):
    return elementwise(prims.bitwise_and, input, other)


@register(torch.bitwise_or, torch.Tensor.__or__, torch.Tensor.bitwise_or)
def bitwise_or(input, other):
    return elementwise(prims.bitwise_or, input, other)


@register(torch.bitwise_xor, torch.Tensor.__xor__, torch.Tensor.bitwise_xor)
def bitwise_xor(input, other):
    return elementwise(prims.bitwise_xor, input, other)


# --- elementwise unary --------------------------------------------------------------------

_FLOAT_UNARY = ("exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos",
                "tan", "tanh", "sigmoid", "erf", "reciprocal")
_SAME_UNARY = ("abs", "neg", "floor", "ceil", "round", "trunc", "sign")


def _unary(prim_name, promote):
    prim = prims.ALL[prim_name]
    fns = [getattr(torch, prim_name), getattr(torch.Tensor, prim_name)]
    if prim_name == "neg":
        fns += [torch.negative, torch.Tensor.__neg__]
    if prim_name == "abs":
        fns += [torch.Tensor.__abs__]
    if prim_name == "sigmoid":
        fns += [F.sigmoid]
    if prim_name == "tanh":
        fns += [F.tanh]

    def decomposition(input):
        if input.dtype.is_complex:
            raise NoDecomposition("complex tensors")
        if promote and not _is_float(input.dtype):
            input = cast(input, torch.get_default_dtype())
        if prim_name in ("floor", "ceil", "round", "trunc") and not _is_float(input.dtype):
            return input
        return prim(input)

    decomposition.__name__ = prim_name
    return register(*fns)(decomposition)


exp, exp2, log, log2, log1p, expm1, sqrt, rsqrt, sin, cos, tan, tanh, sigmoid, erf, reciprocal = (
    _unary(name, promote=True) for name in _FLOAT_UNARY)
abs, neg, floor, ceil, round, trunc, sign = (_unary(name, promote=False) for name in _SAME_UNARY)  # noqa: A001


@register(torch.logical_not, torch.Tensor.logical_not)
def logical_not(input):
    return prims.logical_not(cast(input, torch.bool))


@register(torch.bitwise_not, torch.Tensor.bitwise_not, torch.Tensor.__invert__)
def bitwise_not(input):
    return prims.logical_not(input) if input.dtype == torch.bool else prims.bitwise_not(input)


@register(torch.isnan, torch.Tensor.isnan)
def isnan(input):
    return prims.isnan(input)


@register(torch.where, torch.Tensor.where, adapters={torch.Tensor.where: lambda a, k: ((a[1], a[0], *a[2:]), k)})
def where(condition, input, other):
    if not _is_value(input) and not _is_value(other):
        raise NoDecomposition("scalar branches")
    dtype = result_dtype(input, other)
    shape = _common_shape(condition, input, other)
    cond = broadcast_to_shape(cast(condition, torch.bool), shape)
    a, b = _prepare((input, other), dtype, shape)
    return prims.where(cond, a, b)


@register(torch.masked_fill, torch.Tensor.masked_fill)
def masked_fill(input, mask, value):
    value = value if not _is_value(value) else cast(value, input.dtype)
    return where(mask, _scalar_as(value, input.dtype) if not _is_value(value) else value, input)


@register(torch.clamp, torch.clip, torch.Tensor.clamp, torch.Tensor.clip)
def clamp(input, min=None, max=None):  # noqa: A002
    out = input
    if min is not None:
        out = maximum(out, min)
    if max is not None:
        out = minimum(out, max)
    return out


@register(torch.clamp_min, torch.Tensor.clamp_min)
def clamp_min(input, min):  # noqa: A002
    return maximum(input, min)


@register(torch.clamp_max, torch.Tensor.clamp_max)
def clamp_max(input, max):  # noqa: A002
    return minimum(input, max)


@register(torch.lerp, torch.Tensor.lerp)
def lerp(input, end, weight):
    return add(input, mul(weight, sub(end, input)))


@register(torch.addcmul, torch.Tensor.addcmul)
def addcmul(input, tensor1, tensor2, *, value=1):
    return add(input, mul(mul(tensor1, tensor2), value))


@register(torch.outer, torch.Tensor.outer, torch.ger)
def outer(input, vec2):
    return mul(unsqueeze(input, 1), unsqueeze(vec2, 0))


# --- activations --------------------------------------------------------------------------

def opmath(fn):
    """Compute a composite activation in float32 for float16/bfloat16 inputs, as torch's
    kernels do, and round once at the end (exp in float16 overflows early)."""
    import functools

    @functools.wraps(fn)
    def wrapper(input, *args, **kwargs):
        if _is_value(input) and input.dtype in _LOW_PRECISION:
            return cast(fn(cast(input, torch.float32), *args, **kwargs), input.dtype)
        return fn(input, *args, **kwargs)
    return wrapper


@register(F.relu, torch.relu, torch.Tensor.relu)
def relu(input, inplace=False):
    return where(le(input, 0), 0, input)  # keeps NaN like torch.relu


@register(F.relu6)
def relu6(input, inplace=False):
    return clamp(input, 0, 6)


@register(F.leaky_relu)
def leaky_relu(input, negative_slope=0.01, inplace=False):
    return where(gt(input, 0), input, mul(input, negative_slope))


@register(F.gelu)
@opmath
def gelu(input, approximate="none"):
    if approximate == "tanh":
        inner = mul(add(input, mul(mul(mul(input, input), input), 0.044715)), math.sqrt(2.0 / math.pi))
        return mul(mul(input, 0.5), add(tanh(inner), 1.0))
    return mul(mul(input, 0.5), add(erf(mul(input, 1.0 / math.sqrt(2.0))), 1.0))


@register(F.silu)
@opmath
def silu(input, inplace=False):
    return mul(input, sigmoid(input))


@register(F.softplus)
@opmath
def softplus(input, beta=1.0, threshold=20.0):
    scaled = mul(input, beta)
    return where(gt(scaled, threshold), input, div(log1p(exp(scaled)), beta))


@register(F.mish)
@opmath
def mish(input, inplace=False):
    return mul(input, tanh(softplus(input)))


@register(F.elu)
@opmath
def elu(input, alpha=1.0, inplace=False):
    return where(gt(input, 0), input, mul(expm1(input), alpha))


@register(F.hardtanh)
def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return clamp(input, min_val, max_val)


@register(F.dropout, torch.dropout, tags=("random",))
def dropout(input, p=0.5, training=True, inplace=False):
    if not training or p == 0:
        return input
    raise NoDecomposition("dropout in training mode is random")


# --- type conversion and copies -----------------------------------------------------------

def _to_dtype(input, dtype):
    return cast(input, dtype)


def _method_cast(dtype):
    def decomposition(input, memory_format=None):
        return cast(input, dtype)
    return decomposition


float_ = register(torch.Tensor.float, name="torch.Tensor.float")(_method_cast(torch.float32))
half = register(torch.Tensor.half, name="torch.Tensor.half")(_method_cast(torch.float16))
bfloat16 = register(torch.Tensor.bfloat16, name="torch.Tensor.bfloat16")(_method_cast(torch.bfloat16))
double = register(torch.Tensor.double, name="torch.Tensor.double")(_method_cast(torch.float64))
long = register(torch.Tensor.long, name="torch.Tensor.long")(_method_cast(torch.int64))
int_ = register(torch.Tensor.int, name="torch.Tensor.int")(_method_cast(torch.int32))
bool_ = register(torch.Tensor.bool, name="torch.Tensor.bool")(_method_cast(torch.bool))


@register(torch.Tensor.to, name="torch.Tensor.to")
def to(input, *args, **kwargs):
    dtype, device = kwargs.get("dtype"), kwargs.get("device")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, (str, torch.device)):
            device = torch.device(a)
        elif _is_value(a):
            dtype, device = a.dtype, a.device
    if device is not None and torch.device(device) != input.device:
        raise NoDecomposition("moves between devices")
    return cast(input, dtype) if dtype is not None else input


@register(torch.Tensor.type_as, name="torch.Tensor.type_as")
def type_as(input, other):
    return cast(input, other.dtype)


@register(torch.Tensor.type, name="torch.Tensor.type")
def type_(input, dtype=None, non_blocking=False):
    if not isinstance(dtype, torch.dtype):
        raise NoDecomposition("type() with a string")
    return cast(input, dtype)


@register(torch.Tensor.contiguous, name="torch.Tensor.contiguous")
def contiguous(input, memory_format=torch.contiguous_format):
    return input


@register(torch.clone, torch.Tensor.clone)
def clone(input, *, memory_format=None):
    return input


@register(torch.Tensor.detach, torch.detach, name="torch.Tensor.detach")
def detach(input):
    return input


# --- shapes -------------------------------------------------------------------------------

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
    dims = _dims(input, dim) if dim is not None else range(input.ndim)
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
    if start == 0 and stop == x.shape[dim] and step == 1:
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
        raise NoDecomposition("indexing with tensors")
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
            start, stop, step = k.indices(size)
            if step < 0:
                raise NoDecomposition("negative step")
            stop = builtins.max(start, stop)
            x = _slice_dim(x, dim, start, stop, step)
            out_shape.append(x.shape[dim])
        dim += 1
    return reshape(x, tuple(out_shape))


@register(torch.narrow, torch.Tensor.narrow)
def narrow(input, dim, start, length):
    d = dim % input.ndim
    start = start % input.shape[d] if start < 0 else start
    return _slice_dim(input, d, start, start + length)


@register(torch.select, torch.Tensor.select)
def select(input, dim, index):
    d = dim % input.ndim
    i = index % input.shape[d]
    return reshape(_slice_dim(input, d, i, i + 1), input.shape[:d] + input.shape[d + 1:])


@register(torch.split, torch.Tensor.split)
def split(tensor, split_size_or_sections, dim=0):
    d = dim % tensor.ndim
    size = tensor.shape[d]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        sizes = [builtins.min(step, size - i) for i in range(0, size, step)] or [0]
    else:
        sizes = list(split_size_or_sections)
    out, start = [], 0
    for s in sizes:
        out.append(_slice_dim(tensor, d, start, start + s))
        start += s
    return tuple(out)


@register(torch.chunk, torch.Tensor.chunk)
def chunk(input, chunks, dim=0):
    size = input.shape[dim % input.ndim]
    return split(input, -(-size // chunks), dim)


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


# --- factories ----------------------------------------------------------------------------

def _shape_arg(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        return tuple(size[0])
    return tuple(size)


def _factory_device(device):
    return torch.device(device) if device is not None else torch.device("cpu")


@register(torch.full)
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False):
    dtype = dtype or (torch.get_default_dtype() if isinstance(fill_value, float) else result_dtype(fill_value))
    return prims.full(tuple(size), fill_value, dtype=dtype, device=_factory_device(device))


@register(torch.ones)
def ones(*size, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False, out=None):
    return prims.full(_shape_arg(size), 1, dtype=dtype or torch.get_default_dtype(), device=_factory_device(device))


@register(torch.zeros)
def zeros(*size, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False, out=None):
    return prims.full(_shape_arg(size), 0, dtype=dtype or torch.get_default_dtype(), device=_factory_device(device))


def _like(fill):
    def decomposition(input, *, dtype=None, layout=None, device=None, pin_memory=False,
                      requires_grad=False, memory_format=None):
        return prims.full(input.shape, fill, dtype=dtype or input.dtype, device=device or input.device)
    return decomposition


ones_like = register(torch.ones_like)(_like(1))
zeros_like = register(torch.zeros_like)(_like(0))


@register(torch.full_like)
def full_like(input, fill_value, *, dtype=None, layout=None, device=None, pin_memory=False,
              requires_grad=False, memory_format=None):
    return prims.full(input.shape, fill_value, dtype=dtype or input.dtype, device=device or input.device)


@register(torch.arange)
def arange(*args, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False, out=None):
    start, end, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) > 2 else 1)
    if builtins.any(isinstance(a, float) for a in (start, end, step)) and dtype is None:
        raise NoDecomposition("float arange")  # its length rounds like torch's, not ours
    length = builtins.max(0, -(-(end - start) // step))
    return prims.iota(length, start=start, step=step, dtype=dtype or torch.int64, device=_factory_device(device))


# --- reductions ---------------------------------------------------------------------------

@register(torch.sum, torch.Tensor.sum)
def sum(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A001
    return reduction(prims.sum, input, dim, keepdim, dtype)


@register(torch.mean, torch.Tensor.mean)
def mean(input, dim=None, keepdim=False, *, dtype=None):
    dims = _dims(input, dim)
    n = math.prod(input.shape[d] for d in dims) if input.ndim else 1
    out_dtype = dtype or input.dtype
    compute = torch.float32 if out_dtype in _LOW_PRECISION else out_dtype
    total = reduction(prims.sum, cast(input, compute), dim, keepdim)
    return cast(div(total, n), out_dtype)


@register(torch.amax, torch.Tensor.amax)
def amax(input, dim=(), keepdim=False):
    return reduction(prims.amax, input, dim, keepdim, accumulate=False)


@register(torch.amin, torch.Tensor.amin)
def amin(input, dim=(), keepdim=False):
    return reduction(prims.amin, input, dim, keepdim, accumulate=False)


@register(torch.prod, torch.Tensor.prod)
def prod(input, dim=None, keepdim=False, *, dtype=None):
    return reduction(prims.prod, input, dim, keepdim, dtype)


def _max_min(which):
    reduce_prim, arg_prim, pair = ((prims.amax, prims.argmax, maximum) if which == "max"
                                   else (prims.amin, prims.argmin, minimum))

    def decomposition(input, dim=None, keepdim=False):
        if _is_value(dim):
            return pair(input, dim)  # torch.max(a, b): elementwise
        if dim is None:
            return reduction(reduce_prim, input, None, False, accumulate=False)
        d = dim % builtins.max(input.ndim, 1)
        values = reduction(reduce_prim, input, d, keepdim, accumulate=False)
        indices = _keep(arg_prim(input, d), input, (d,), keepdim)
        return torch.return_types.max((values, indices)) if which == "max" else torch.return_types.min((values, indices))

    decomposition.__name__ = which
    return decomposition


max = register(torch.max, torch.Tensor.max)(_max_min("max"))  # noqa: A001
min = register(torch.min, torch.Tensor.min)(_max_min("min"))  # noqa: A001


def _argmax_min(arg_prim):
    def decomposition(input, dim=None, keepdim=False):
        if dim is None:
            return arg_prim(reshape(input, (-1,)), 0)
        d = dim % input.ndim
        return _keep(arg_prim(input, d), input, (d,), keepdim)
    return decomposition


argmax = register(torch.argmax, torch.Tensor.argmax)(_argmax_min(prims.argmax))
argmin = register(torch.argmin, torch.Tensor.argmin)(_argmax_min(prims.argmin))


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    return 1 if unbiased is None or unbiased else 0


@register(torch.var_mean)
def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):  # var_mean(x, unbiased)
        dim, unbiased = None, dim
    dims = _dims(input, dim)
    compute = torch.float32 if input.dtype in _LOW_PRECISION else input.dtype
    var, m = prims.var_mean(cast(input, compute), dims, _correction(unbiased, correction))
    return (cast(_keep(var, input, dims, keepdim), input.dtype), cast(_keep(m, input, dims, keepdim), input.dtype))


@register(torch.var, torch.Tensor.var)
def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var_mean(input, dim, unbiased, keepdim, correction=correction)[0]


@register(torch.std, torch.Tensor.std)
def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return sqrt(var(input, dim, unbiased, keepdim, correction=correction))


@register(torch.logsumexp, torch.Tensor.logsumexp)
def logsumexp(input, dim, keepdim=False):
    dims = _dims(input, dim)
    m = amax(input, dims, True)
    m = where(eq(abs(m), math.inf), 0.0, m)  # as torch: rows of -inf give -inf, not nan
    s = sum(exp(sub(input, m)), dims, True)
    out = add(log(s), m)
    return out if keepdim else squeeze(out, dims)


@register(torch.linalg.vector_norm)
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):  # noqa: A002
    if ord != 2:
        raise NoDecomposition(f"ord={ord}")
    return sqrt(sum(mul(x, x), dim, keepdim))


# --- normalisation and softmax ------------------------------------------------------------

def _softmax_dim(input, dim):
    if dim is None:  # torch's legacy implicit dim (torch.nn.functional._get_softmax_dim)
        return 0 if input.ndim in (0, 1, 3) else 1
    return dim


def _softmax_dtype(input, dtype):
    x = cast(input, dtype) if dtype is not None else input
    compute = torch.float32 if x.dtype in _LOW_PRECISION else x.dtype
    return x, compute


@register(F.softmax, torch.softmax, torch.Tensor.softmax, torch.special.softmax)
def softmax(input, dim=None, _stacklevel=3, dtype=None):
    dim = _softmax_dim(input, dim)
    x, compute = _softmax_dtype(input, dtype)
    xc = cast(x, compute)
    shifted = sub(xc, amax(xc, dim, True))
    e = exp(shifted)
    return cast(div(e, sum(e, dim, True)), x.dtype)


@register(F.log_softmax, torch.log_softmax, torch.Tensor.log_softmax)
def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    dim = _softmax_dim(input, dim)
    x, compute = _softmax_dtype(input, dtype)
    xc = cast(x, compute)
    shifted = sub(xc, amax(xc, dim, True))
    return cast(sub(shifted, log(sum(exp(shifted), dim, True))), x.dtype)


@register(F.layer_norm)
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    dims = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    compute = torch.float32 if input.dtype in _LOW_PRECISION else input.dtype
    x = cast(input, compute)
    v, m = prims.var_mean(x, dims, 0)
    v, m = _keep(v, x, dims, True), _keep(m, x, dims, True)
    out = mul(sub(x, m), rsqrt(add(v, eps)))
    if weight is not None:
        out = mul(out, weight)
    if bias is not None:
        out = add(out, bias)
    return cast(out, input.dtype)


@register(F.rms_norm)
def rms_norm(input, normalized_shape, weight=None, eps=None):
    dims = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    compute = torch.float32 if input.dtype in _LOW_PRECISION else input.dtype
    eps = torch.finfo(input.dtype).eps if eps is None else eps
    x = cast(input, compute)
    out = mul(x, rsqrt(add(mean(mul(x, x), dims, True), eps)))
    if weight is not None:
        out = mul(out, weight)
    return cast(out, input.dtype)


@register(F.normalize)
def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    if p != 2:
        raise NoDecomposition(f"p={p}")
    return div(input, clamp_min(vector_norm(input, 2, dim, True), eps))


# --- losses -------------------------------------------------------------------------------

def _reduce_loss(loss, reduction_kind, count=None):
    if reduction_kind == "none":
        return loss
    total = sum(loss)
    if reduction_kind == "sum":
        return total
    return div(total, count if count is not None else loss.numel())


@register(F.nll_loss)
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    if weight is not None or size_average is not None or reduce is not None or input.ndim != 2:
        raise NoDecomposition("weights, legacy reduction or >2-d input")
    valid = ne(target, ignore_index)
    safe = where(valid, target, 0)
    picked = prims.take_along_axis(input, unsqueeze(safe, 1), 1)
    loss = where(valid, neg(squeeze(picked, 1)), 0.0)
    return _reduce_loss(loss, reduction, sum(valid, dtype=input.dtype))


@register(F.cross_entropy)
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    if label_smoothing != 0.0 or not _is_value(target) or _is_float(target.dtype):
        raise NoDecomposition("label smoothing or probability targets")
    return nll_loss(log_softmax(input, 1), target, weight, size_average, ignore_index, reduce, reduction)


@register(F.mse_loss)
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    if weight is not None:
        raise NoDecomposition("weight")
    d = sub(input, target)
    return _reduce_loss(mul(d, d), reduction)


# --- library calls: executors run these whole --------------------------------------------

linear = library(F.linear)
matmul = library(torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__)
rmatmul = library(torch.Tensor.__rmatmul__, name="torch.Tensor.__rmatmul__")
bmm = library(torch.bmm, torch.Tensor.bmm)
mm = library(torch.mm, torch.Tensor.mm)
baddbmm = library(torch.baddbmm, torch.Tensor.baddbmm)
addmm = library(torch.addmm, torch.Tensor.addmm)
einsum = library(torch.einsum)
embedding = library(F.embedding)
sdpa = library(F.scaled_dot_product_attention)
conv1d = library(F.conv1d)
conv2d = library(F.conv2d)
