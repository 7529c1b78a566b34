"""Elementwise torch ops: arithmetic, comparisons, logical and bitwise ops, the unary math
functions, and the composites over them (where, masked_fill, clamp, lerp, addcmul, outer)."""

from __future__ import annotations

import builtins

import torch
import torch.nn.functional as F

from fusionlens.ops import prims
from fusionlens.ops.torch_ops.common import (_LOW_PRECISION, _common_shape, _is_float, _is_value, _prepare,
                                             _scalar_as, broadcast_to_shape, cast, elementwise, result_dtype)
from fusionlens.ops.torch_ops.registry import NoDecomposition, library_part, register, symbol_for


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


# torch.div with a rounding mode on integers: no prim divides integers, so it is a torch call
# of its own (exact, where a float quotient would round for large int64 values)
integer_division = library_part(torch.div)


@register(torch.div, torch.divide, torch.true_divide, torch.Tensor.div, torch.Tensor.__truediv__,
          torch.Tensor.true_divide)
def div(input, other, *, rounding_mode=None):
    if rounding_mode is None:
        return elementwise(prims.div, input, other, promote="int_to_float")
    if rounding_mode not in ("floor", "trunc"):
        raise NoDecomposition(f"rounding_mode={rounding_mode!r}")
    dtype = result_dtype(input, other)
    if not _is_float(dtype):
        if not any(_is_value(x) for x in (input, other)):
            raise NoDecomposition("no tensor operand")
        return integer_division(input, other, rounding_mode=rounding_mode)
    if rounding_mode == "floor":
        return _floor_division(input, other, dtype)
    compute = torch.float32 if dtype in _LOW_PRECISION else dtype  # round once, as torch does
    quotient = elementwise(prims.div, cast(input, compute), cast(other, compute))
    if compute is not dtype and _is_value(input) and _is_value(other):
        quotient = cast(quotient, dtype)  # torch's tensor-by-tensor trunc rounds the quotient to half first
    return cast(trunc(quotient), dtype)


def _floor_division(input, other, dtype: torch.dtype):
    """torch's floor division of floats (c10 div_floor_floating): (a - fmod(a, b)) / b, one less
    where the remainder's sign is not the divisor's, rounded to the nearest integer; not
    floor(a / b), which is one off where the quotient rounds up to an integer. A zero keeps the
    quotient's sign; b == 0 gives a / b. Low-precision floats compute in float32, as torch's CUDA
    kernel does; its CPU kernel rounds each step to the dtype in vectorised lanes and not in the
    others, which no decomposition can follow: there torch's own kernel runs."""
    compute = dtype
    if dtype in _LOW_PRECISION:
        device = next((x.device for x in (input, other) if _is_value(x)), None)
        if device is None or device.type == "cpu":
            raise NoDecomposition("floor division of low-precision floats on a CPU rounds by lane in torch's kernel")
        compute = torch.float32
    a, b = cast(input, compute), cast(other, compute)
    mod = elementwise(prims.fmod, a, b)
    quotient = elementwise(prims.div, a, b)
    q = elementwise(prims.div, elementwise(prims.sub, a, mod), b)
    if not _is_value(b):  # a number
        if b == 0:
            return cast(quotient, dtype)
        off = elementwise(prims.gt if b < 0 else prims.lt, mod, 0)
    else:  # (mod != 0) & ((b < 0) != (mod < 0)), a NaN divisor giving False
        off = where(elementwise(prims.lt, b, 0), elementwise(prims.gt, mod, 0), elementwise(prims.lt, mod, 0))
    q = where(off, elementwise(prims.sub, q, 1), q)
    whole = floor(q)
    whole = where(elementwise(prims.gt, elementwise(prims.sub, q, whole), 0.5), elementwise(prims.add, whole, 1), whole)
    zero = elementwise(prims.mul, quotient, 0.0)  # copysign(0, a / b): the quotient here is finite
    whole = where(elementwise(prims.eq, q, 0), zero, whole)
    return cast(where(elementwise(prims.eq, b, 0), quotient, whole) if _is_value(b) else whole, dtype)


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


@register(torch.fmod, torch.Tensor.fmod)
def fmod(input, other):
    return elementwise(prims.fmod, input, other)


@register(torch.maximum, torch.Tensor.maximum)
def maximum(input, other):
    return elementwise(prims.maximum, input, other)


@register(torch.minimum, torch.Tensor.minimum)
def minimum(input, other):
    return elementwise(prims.minimum, input, other)


def _comparison(prim, *fns):
    def decomposition(input, other):
        return elementwise(prim, input, other, promote="bool")

    decomposition.__name__ = prim.name.removeprefix("prims.")
    return register(*fns)(decomposition)


eq = _comparison(prims.eq, torch.eq, torch.Tensor.eq, torch.Tensor.__eq__)
ne = _comparison(prims.ne, torch.ne, torch.Tensor.ne, torch.Tensor.__ne__)
lt = _comparison(prims.lt, torch.lt, torch.Tensor.lt, torch.Tensor.__lt__)
le = _comparison(prims.le, torch.le, torch.Tensor.le, torch.Tensor.__le__)
gt = _comparison(prims.gt, torch.gt, torch.Tensor.gt, torch.Tensor.__gt__)
ge = _comparison(prims.ge, torch.ge, torch.Tensor.ge, torch.Tensor.__ge__)


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

_ROUNDING = (prims.floor, prims.ceil, prims.round, prims.trunc)


def _unary(prim, promote, *extra_fns):
    """The torch op named like `prim` (torch.exp, Tensor.exp and `extra_fns`): integer
    inputs become float first when `promote`; rounding an integer returns it unchanged."""
    name = prim.name.removeprefix("prims.")
    fns = [getattr(torch, name), getattr(torch.Tensor, name), *extra_fns]

    def decomposition(input):
        if input.dtype.is_complex:
            raise NoDecomposition("complex tensors")
        if promote and not _is_float(input.dtype):
            input = cast(input, torch.get_default_dtype())
        if prim in _ROUNDING and not _is_float(input.dtype):
            return input
        return prim(input)

    decomposition.__name__ = name
    return register(*fns)(decomposition)


# the float ones: integer inputs compute in the default float dtype
exp = _unary(prims.exp, True)
exp2 = _unary(prims.exp2, True)
log = _unary(prims.log, True)
log2 = _unary(prims.log2, True)
log1p = _unary(prims.log1p, True)
expm1 = _unary(prims.expm1, True)
sqrt = _unary(prims.sqrt, True)
rsqrt = _unary(prims.rsqrt, True)
sin = _unary(prims.sin, True)
cos = _unary(prims.cos, True)
tan = _unary(prims.tan, True)
tanh = _unary(prims.tanh, True, F.tanh)
sigmoid = _unary(prims.sigmoid, True, F.sigmoid)
erf = _unary(prims.erf, True)
reciprocal = _unary(prims.reciprocal, True)
# the ones that keep their input's dtype
abs = _unary(prims.abs, False, torch.Tensor.__abs__)  # noqa: A001
neg = _unary(prims.neg, False, torch.negative, torch.Tensor.__neg__)
floor = _unary(prims.floor, False)
ceil = _unary(prims.ceil, False)
trunc = _unary(prims.trunc, False)
sign = _unary(prims.sign, False)


@register(torch.round, torch.Tensor.round)
def round(input, *, decimals=0):  # noqa: A001
    """torch's kernel: nearbyint(x * 10^d) / 10^d, or nearbyint(x / 10^-d) * 10^-d for d < 0,
    in float32 for low-precision inputs; an integer rounds to itself."""
    if input.dtype.is_complex:
        raise NoDecomposition("complex tensors")
    if not _is_float(input.dtype):
        if decimals:
            raise NoDecomposition("decimals on an integer tensor")  # torch raises
        return input
    if decimals == 0:
        return prims.round(input)
    compute = torch.float32 if input.dtype in _LOW_PRECISION else input.dtype
    x, scale = cast(input, compute), 10.0 ** builtins.abs(decimals)
    if decimals > 0:
        return cast(prims.div(prims.round(prims.mul(x, scale)), scale), input.dtype)
    return cast(prims.mul(prims.round(prims.div(x, scale)), scale), input.dtype)


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
    # eager's product is in the type of all three: float16 factors of a float32 input multiply
    # in float32, not rounded to float16 first (fuzz triton 5111)
    dtype = result_dtype(input, tensor1, tensor2)
    if isinstance(value, float) and not (dtype.is_floating_point or dtype.is_complex):
        value = int(value)  # eager casts value to the integer type: 0.5 is 0 (fuzz triton 14246)
    return add(input, mul(mul(cast(tensor1, dtype), cast(tensor2, dtype)), value))


@register(torch.outer, torch.Tensor.outer, torch.ger)
def outer(input, vec2):
    unsqueeze = symbol_for(torch.unsqueeze)  # a shape op, registered after this family
    return mul(unsqueeze(input, 1), unsqueeze(vec2, 0))


# --- activations --------------------------------------------------------------------------
