"""Softmax and log-softmax, and the normalisations (layer_norm, rms_norm, normalize,
batch_norm, instance_norm, group_norm), in float32 for low-precision inputs."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from compiler.ops import prims
from compiler.ops.torch_ops.common import _LOW_PRECISION, _keep, cast
from compiler.ops.torch_ops.pointwise import add, clamp_min, div, exp, log, mul, rsqrt, sub
from compiler.ops.torch_ops.reductions import mean, stabiliser, sum, vector_norm
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
    shifted = sub(xc, stabiliser(xc, dim))
    e = exp(shifted)
    return cast(div(e, sum(e, dim, True)), x.dtype)


@register(F.log_softmax, torch.log_softmax, torch.Tensor.log_softmax)
def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    dim = _softmax_dim(input, dim)
    x, compute = _softmax_dtype(input, dtype)
    xc = cast(x, compute)
    shifted = sub(xc, stabiliser(xc, dim))
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
    eps = torch.finfo(compute).eps if eps is None else eps  # eager's: the computing dtype's (float32 for bf16)
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


# --- the normalisations of convolutional networks: statistics per channel or group ------------

def _compute_dtype(input):
    return torch.float32 if input.dtype in _LOW_PRECISION else input.dtype


def _per_channel(p, x):
    """A (C,) statistic or parameter placed along x's channel dim (1), in x's dtype."""
    return prims.broadcast_in_dim(cast(p, x.dtype), x.shape, (1,))


def _affine(out, weight, bias):
    if weight is not None:
        out = mul(out, _per_channel(weight, out))
    if bias is not None:
        out = add(out, _per_channel(bias, out))
    return out


def _normalise(x, var, mean, eps):
    return mul(sub(x, mean), rsqrt(add(var, eps)))


def _batch_stats(x, dims):
    v, m = prims.var_mean(x, dims, 0)  # biased variance, as torch normalises with
    return _keep(v, x, dims, True), _keep(m, x, dims, True)


@register(F.batch_norm)
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
               eps=1e-5):
    if training and (running_mean is not None or running_var is not None):
        # Training mode also updates running_mean and running_var in place. Until mutations
        # are written back (functionalisation), the call runs whole in torch, so its result
        # and the buffers' updates are exactly eager's.
        raise NoDecomposition("training mode updates the running statistics in place")
    if not training and (running_mean is None or running_var is None):
        raise NoDecomposition("evaluation mode without running statistics")  # torch raises
    x = cast(input, _compute_dtype(input))
    if training:  # no running statistics to update: normalise by the batch's
        var, mean = _batch_stats(x, (0, *range(2, x.ndim)))
    else:
        var, mean = _per_channel(running_var, x), _per_channel(running_mean, x)
    return cast(_affine(_normalise(x, var, mean, eps), weight, bias), input.dtype)


@register(F.instance_norm)
def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    if use_input_stats and (running_mean is not None or running_var is not None):
        # As batch_norm in training mode: the running statistics are updated in place.
        raise NoDecomposition("use_input_stats updates the running statistics in place")
    if not use_input_stats and (running_mean is None or running_var is None):
        raise NoDecomposition("no input statistics and no running statistics")  # torch raises
    x = cast(input, _compute_dtype(input))
    if use_input_stats:
        var, mean = _batch_stats(x, tuple(range(2, x.ndim)))
    else:
        var, mean = _per_channel(running_var, x), _per_channel(running_mean, x)
    return cast(_affine(_normalise(x, var, mean, eps), weight, bias), input.dtype)


@register(F.group_norm)
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    n, c = input.shape[0], input.shape[1]
    x = cast(input, _compute_dtype(input))
    # statistics over each group's channels and positions: (N, G, C/G * spatial) ...
    grouped = prims.reshape(x, (n, num_groups, math.prod(input.shape[1:]) // num_groups))
    var, mean = prims.var_mean(grouped, (2,), 0)
    # ... then back onto x's channels, so normalising reads x in its own layout

    def spread(s):
        per_channel = prims.broadcast_in_dim(s, (n, num_groups, c // num_groups), (0, 1))
        return prims.broadcast_in_dim(prims.reshape(per_channel, (n, c)), x.shape, (0, 1))

    return cast(_affine(_normalise(x, spread(var), spread(mean), eps), weight, bias), input.dtype)
