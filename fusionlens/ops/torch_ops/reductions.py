"""Reductions: sum, mean, prod, amax/amin, max/min (with indices), argmax/argmin, variance
and standard deviation, logsumexp and the vector norm."""

from __future__ import annotations

import builtins
import math

import torch

from fusionlens.ir.trace import Value
from fusionlens.ops import prims
from fusionlens.ops.torch_ops.common import _LOW_PRECISION, _dims, _is_value, _keep, cast, reduction
from fusionlens.ops.torch_ops.pointwise import abs, add, div, eq, exp, log, maximum, minimum, mul, pow, sqrt, sub, where
from fusionlens.ops.torch_ops.registry import NoDecomposition, register
from fusionlens.ops.torch_ops.shapes import reshape, squeeze


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
        result = torch.return_types.max if which == "max" else torch.return_types.min
        # torch's stubs type a return_types structseq's fields as Tensors; it takes any object
        # and the trace's result holds Values in it, the structure eager's result has
        return result((values, indices))  # type: ignore[arg-type]

    decomposition.__name__ = which
    return decomposition


max = register(torch.max, torch.Tensor.max)(_max_min("max"))  # noqa: A001
min = register(torch.min, torch.Tensor.min)(_max_min("min"))  # noqa: A001


def _argmax_min(arg_prim):
    def decomposition(input, dim=None, keepdim=False):
        if dim is None or input.ndim == 0:  # a 0-d tensor's dim 0 or -1 is its one element
            flat = arg_prim(reshape(input, (-1,)), 0)
            return reshape(flat, (1,) * input.ndim) if keepdim and dim is not None else flat
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
    x = cast(input, compute)
    if input.ndim == 0:  # a 0-d tensor's dim 0 or -1 is its one element: reduce it as a row of one
        x = reshape(x, (1,))
    var, m = prims.var_mean(x, (0,) if input.ndim == 0 else dims, _correction(unbiased, correction))
    return (cast(_keep(var, input, dims, keepdim), input.dtype), cast(_keep(m, input, dims, keepdim), input.dtype))


@register(torch.var, torch.Tensor.var)
def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var_mean(input, dim, unbiased, keepdim, correction=correction)[0]


def sqrt_of_variance(v: Value) -> Value:
    """sqrt(v), whose gradient is 0 where v is 0, as torch's std_backward masks it (a constant
    row, or one value with correction=0): through sqrt's own rule it would be 0 * inf = nan."""
    zero = eq(v, 0.0)
    return where(zero, 0.0, sqrt(where(zero, 1.0, v)))


@register(torch.std, torch.Tensor.std)
def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return sqrt_of_variance(var(input, dim, unbiased, keepdim, correction=correction))


def stabiliser(input, dim) -> Value:
    """The max over `dim`, kept: what softmax and logsumexp subtract so that exp stays finite.
    Over an empty dim it is 0: amax has no identity there (it raises, as torch's does), and
    any shift gives the same empty (softmax) or -inf (logsumexp) result."""
    dims = _dims(input, dim)
    if input.ndim and builtins.any(input.shape[d] == 0 for d in dims):
        shape = tuple(1 if d in dims else s for d, s in enumerate(input.shape))
        return prims.full(shape, 0.0, dtype=input.dtype, device=input.device)
    return amax(input, dims, True)


@register(torch.logsumexp, torch.Tensor.logsumexp)
def logsumexp(input, dim, keepdim=False):
    if not (input.dtype.is_floating_point or input.dtype.is_complex):  # as torch: an integer or bool input in
        # the default float type
        input = cast(input, torch.get_default_dtype())  # (fuzz triton 28851: abs of a bool raised)
    dims = _dims(input, dim)
    m = stabiliser(input, dims)
    m = where(eq(abs(m), math.inf), 0.0, m)  # as torch: rows of -inf give -inf, not nan
    s = sum(exp(sub(input, m)), dims, True)
    out = add(log(s), m)
    return out if keepdim else squeeze(out, dims)


@register(torch.linalg.vector_norm)
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):  # noqa: A002
    """sum(|x|^ord)^(1/ord); the max and min of |x| for ord=inf and -inf; the count of
    nonzeros for 0. In float32 for low-precision inputs, as torch accumulates."""
    if x.dtype.is_complex or (dtype is not None and dtype.is_complex):
        raise NoDecomposition("complex tensors")
    if ord == 2 and dtype is None:
        return sqrt(sum(mul(x, x), dim, keepdim))  # the 2-norm's rule (torch_rules) knows this form
    out_dtype = dtype or x.dtype
    compute = torch.float32 if out_dtype in _LOW_PRECISION else out_dtype
    a = abs(cast(x, compute))
    if ord == math.inf or ord == -math.inf:
        if x.numel() == 0:
            raise NoDecomposition("the max of an empty tensor")  # torch raises
        r = (amax if ord > 0 else amin)(a, _dims(x, dim), keepdim)
    elif ord == 0:
        r = sum(cast(prims.ne(a, 0.0), compute), dim, keepdim)
    elif ord == 1:
        r = sum(a, dim, keepdim)
    elif ord == 2:
        r = sqrt(sum(mul(a, a), dim, keepdim))
    else:
        r = pow(sum(pow(a, ord), dim, keepdim), 1.0 / ord)
    return cast(r, out_dtype)
