"""Softmax and log-softmax, and the normalisations (layer_norm, rms_norm, normalize), in
float32 for low-precision inputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from compiler.ops import prims
from compiler.ops.torch_ops.common import _LOW_PRECISION, _keep, cast
from compiler.ops.torch_ops.pointwise import add, clamp_min, div, exp, log, mul, rsqrt, sub
from compiler.ops.torch_ops.reductions import amax, mean, sum, vector_norm
from compiler.ops.torch_ops.registry import NoDecomposition, register


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
