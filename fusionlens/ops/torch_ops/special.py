"""Elementwise math beyond pointwise.py: composites of the prims (frac, xlogy, logaddexp,
isinf, nan_to_num, fmax, isclose, ...), which fuse, and the functions with no prim to build
them from (inverse trigonometry, hyperbolic functions, gamma and Bessel functions,
torch.special's polynomials), which run whole as library calls."""

from __future__ import annotations

import math

import torch

from fusionlens.ops import prims
from fusionlens.ops.torch_ops.common import _is_float, _is_value, cast, elementwise, result_dtype
from fusionlens.ops.torch_ops.pointwise import (abs, add, div, eq, erf, exp, exp2, isnan, log, log1p,
                                                logical_not, lt, maximum, minimum, mul, ne, sin, sub, trunc, where)
from fusionlens.ops.torch_ops.registry import NoDecomposition, library, register


def _floating(x):
    if not _is_value(x) or not _is_float(x.dtype) or x.dtype.is_complex:
        raise NoDecomposition("not a real floating-point tensor")
    return x


# --- composites of prims ---------------------------------------------------------------------

@register(torch.frac, torch.Tensor.frac)
def frac(input):
    return sub(_floating(input), trunc(input))


@register(torch.deg2rad, torch.Tensor.deg2rad)
def deg2rad(input):
    return mul(_floating(input), math.pi / 180)


@register(torch.rad2deg, torch.Tensor.rad2deg)
def rad2deg(input):
    return mul(_floating(input), 180 / math.pi)


@register(torch.positive, torch.Tensor.positive)
def positive(input):
    return input


@register(torch.sgn, torch.Tensor.sgn)
def sgn(input):
    if input.dtype.is_complex:
        raise NoDecomposition("complex tensors")
    return prims.sign(input)


@register(torch.log10, torch.Tensor.log10)
def log10(input):
    return mul(log(input), 1 / math.log(10))


@register(torch.erfc, torch.Tensor.erfc, torch.special.erfc)
def erfc(input):
    return sub(1, erf(input))


@register(torch.special.ndtr)
def ndtr(input):
    x = cast(input, torch.get_default_dtype()) if not _is_float(input.dtype) else input
    return mul(add(erf(mul(x, 1 / math.sqrt(2))), 1), 0.5)


@register(torch.logical_xor, torch.Tensor.logical_xor)
def logical_xor(input, other):
    return elementwise(prims.ne, ne(input, 0), ne(other, 0))


@register(torch.isinf, torch.Tensor.isinf)
def isinf(input):
    if not _is_float(input.dtype):
        return prims.full(input.shape, False, dtype=torch.bool, device=input.device)
    return eq(abs(input), math.inf)


@register(torch.isposinf, torch.Tensor.isposinf)
def isposinf(input):
    return eq(input, math.inf)


@register(torch.isneginf, torch.Tensor.isneginf)
def isneginf(input):
    return eq(input, -math.inf)


@register(torch.isfinite, torch.Tensor.isfinite)
def isfinite(input):
    if not _is_float(input.dtype):
        return prims.full(input.shape, True, dtype=torch.bool, device=input.device)
    return logical_not(prims.bitwise_or(isnan(input), isinf(input)))


@register(torch.isreal, torch.Tensor.isreal)
def isreal(input):
    if input.dtype.is_complex:
        raise NoDecomposition("complex tensors")
    return prims.full(input.shape, True, dtype=torch.bool, device=input.device)


@register(torch.nan_to_num, torch.Tensor.nan_to_num)
def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    if not _is_float(input.dtype) or input.dtype.is_complex:
        raise NoDecomposition("not a real floating-point tensor")
    info = torch.finfo(input.dtype)
    x = where(isnan(input), nan, input)
    x = where(eq(x, math.inf), info.max if posinf is None else posinf, x)
    return where(eq(x, -math.inf), info.min if neginf is None else neginf, x)


def _fmax_min(pick):
    def decomposition(input, other):
        m = pick(input, other)
        return where(isnan(other), input, where(isnan(input), other, m))
    return decomposition


fmax = register(torch.fmax, torch.Tensor.fmax)(_fmax_min(maximum))
fmin = register(torch.fmin, torch.Tensor.fmin)(_fmax_min(minimum))


def _xlog(fn, scalar_fn):
    def decomposition(input, other):
        if not _is_float(result_dtype(input, other)) or not _is_value(input):
            raise NoDecomposition("integer operands or a scalar input")
        product = mul(input, fn(other) if _is_value(other) else scalar_fn(other))
        zero = where(eq(input, 0), 0.0, product)
        return where(isnan(other), math.nan, zero) if _is_value(other) else zero
    return decomposition


xlogy = register(torch.xlogy, torch.Tensor.xlogy, torch.special.xlogy)(_xlog(log, math.log))
xlog1py = register(torch.special.xlog1py)(_xlog(log1p, math.log1p))


def _logaddexp(exp_fn, log1p_fn):
    def decomposition(input, other):
        m = maximum(input, other)
        d = abs(sub(input, other))
        out = add(m, log1p_fn(exp_fn(mul(d, -1))))
        both_inf = prims.bitwise_and(eq(input, other), eq(abs(input), math.inf))
        return where(both_inf, input, out)
    return decomposition


logaddexp = register(torch.logaddexp, torch.Tensor.logaddexp)(_logaddexp(exp, log1p))
logaddexp2 = register(torch.logaddexp2, torch.Tensor.logaddexp2)(
    _logaddexp(exp2, lambda x: mul(log1p(x), 1 / math.log(2))))


@register(torch.logit, torch.Tensor.logit, torch.special.logit)
def logit(input, eps=None):
    x = _floating(input)
    if eps is not None:
        x = minimum(maximum(x, eps), 1 - eps)
    return log(div(x, sub(1, x)))


@register(torch.sinc, torch.Tensor.sinc, torch.special.sinc)
def sinc(input):
    x = mul(_floating(input), math.pi)
    return where(eq(input, 0), 1.0, div(sin(x), x))


@register(torch.special.entr)
def entr(input):
    x = _floating(input)
    return where(lt(x, 0), -math.inf, where(eq(x, 0), 0.0, mul(mul(x, -1), log(x))))


@register(torch.float_power, torch.Tensor.float_power)
def float_power(input, exponent):
    if any(_is_value(x) and x.dtype.is_complex for x in (input, exponent)):
        raise NoDecomposition("complex tensors")
    return elementwise(prims.pow, cast(input, torch.float64), cast(exponent, torch.float64))


@register(torch.floor_divide, torch.Tensor.floor_divide, torch.Tensor.__floordiv__)
def floor_divide(input, other):
    """torch.div(rounding_mode="floor"): for floats pointwise._floor_division (torch's own
    algorithm); integers divide in a torch call of their own (no prim divides them)."""
    return div(input, other, rounding_mode="floor")


@register(torch.Tensor.__rmod__, name="torch.Tensor.__rmod__")
def rmod(input, other):
    return elementwise(prims.remainder, other, input)


@register(torch.addcdiv, torch.Tensor.addcdiv)
def addcdiv(input, tensor1, tensor2, *, value=1):
    dtype = result_dtype(input, tensor1, tensor2)  # eager divides in the type of all three, as addcmul
    q = elementwise(prims.div, cast(tensor1, dtype), cast(tensor2, dtype))
    return add(input, mul(q, value) if value != 1 else q)


@register(torch.isclose, torch.Tensor.isclose)
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    if not _is_float(result_dtype(input, other)):
        raise NoDecomposition("integer operands")
    close = prims.le(abs(sub(input, other)), add(mul(abs(other), rtol), atol))
    close = prims.bitwise_or(close, eq(input, other))
    return prims.bitwise_or(close, prims.bitwise_and(isnan(input), isnan(other))) if equal_nan else close


# --- no prim to build them from: library calls -------------------------------------------------

def _same_name(*names, special=()):
    """library(torch.X, torch.Tensor.X) for each name; torch.special.X beside it for `special`."""
    out = {}
    for n in names:
        fns = [getattr(torch, n)] + ([getattr(torch.Tensor, n)] if hasattr(torch.Tensor, n) else [])
        fns += [getattr(torch.special, n)] if n in special else []
        out[n] = library(*fns)
    return out


UNARY = _same_name("acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "erfinv", "lgamma", "digamma",
                   "i0", "signbit", "angle", special=("erfinv", "digamma", "i0"))
BINARY = _same_name("atan2", "hypot", "copysign", "nextafter", "heaviside", "igamma", "igammac", "ldexp",
                    "mvlgamma", "frexp")
polygamma = library(torch.polygamma, torch.Tensor.polygamma,
                    adapters={torch.Tensor.polygamma: lambda a, k: ((a[1], a[0], *a[2:]), k)})  # x.polygamma(n)
SPECIAL = {n: library(getattr(torch.special, n)) for n in (
    "airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "erfcx", "i0e", "i1", "i1e", "log_ndtr", "ndtri",
    "modified_bessel_i0", "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1", "polygamma",
    "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0", "zeta", "multigammaln",
    "gammaln", "psi", "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
    "chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
    "legendre_polynomial_p", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w")}
