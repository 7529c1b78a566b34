"""Softmax and log-softmax, and the normalisations (layer_norm, rms_norm, normalize,
batch_norm, instance_norm, group_norm), in float32 for low-precision inputs."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fusionlens.ir.trace import OpTag
from fusionlens.ops import prims
from fusionlens.ops.torch_ops.common import _LOW_PRECISION, _keep, cast
from fusionlens.ops.torch_ops.pointwise import add, clamp_min, div, eq, exp, log, mul, neg, pow, rsqrt, sub, where
from fusionlens.ops.torch_ops.reductions import mean, stabiliser, sum, vector_norm
from fusionlens.ops.torch_ops.registry import NoDecomposition, register


def _softmax_dim(input, dim):
    if dim is None:  # torch's legacy implicit dim (torch.nn.functional._get_softmax_dim)
        return 0 if input.ndim in (0, 1, 3) else 1
    return dim


def _softmax_dtype(input, dtype):
    x = cast(input, dtype) if dtype is not None else input
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        # torch's kernel: it refuses integers and bools, but an empty one is returned as is
        raise NoDecomposition(f"softmax of a {x.dtype} tensor")
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
    return layer_norm_with_stats(input, normalized_shape, weight, bias, eps)[0]


def layer_norm_with_stats(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(layer_norm, mean, 1 / std): the statistics in the computing dtype (float32 for
    low-precision inputs), kept over the normalised dims, as a training forward saves them."""
    dims = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    compute = torch.float32 if input.dtype in _LOW_PRECISION else input.dtype
    x = cast(input, compute)
    v, m = prims.var_mean(x, dims, 0)
    v, m = _keep(v, x, dims, True), _keep(m, x, dims, True)
    rstd = rsqrt(add(v, eps))
    out = mul(sub(x, m), rstd)
    if weight is not None:
        out = mul(out, weight)
    if bias is not None:
        out = add(out, bias)
    return cast(out, input.dtype), m, rstd


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
    if out is not None:
        raise NoDecomposition("an out= tensor")
    return div(input, clamp_min(vector_norm(input, p, dim, True), eps))


@register(F.softmin)
def softmin(input, dim=None, _stacklevel=3, dtype=None):
    return softmax(neg(input), dim, dtype=dtype)


@register(torch.ops.aten._safe_softmax.default, name="torch.ops.aten._safe_softmax.default")
def safe_softmax(input, dim, dtype=None):
    """softmax, with 0 for rows that are all -inf (where softmax gives nan): attention's
    fully masked rows."""
    out = softmax(input, dim, dtype=dtype)
    live = sum(cast(prims.ne(input, -math.inf), torch.int32), dim, True)
    return where(eq(live, 0), 0.0, out)


@register(torch.ops.aten._softmax_backward_data, torch.ops.aten._softmax_backward_data.default,
          name="torch.ops.aten._softmax_backward_data")
def softmax_backward_data(grad_output, output, dim, input_dtype):
    """softmax's gradient from its output y: y * (g - sum(g * y))."""
    compute = torch.float32 if output.dtype in _LOW_PRECISION else output.dtype
    g, y = cast(grad_output, compute), cast(output, compute)
    return cast(mul(y, sub(g, sum(mul(g, y), dim, True))), input_dtype)


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
    if input.ndim < 2:  # no channel dim: eager returns an empty one as is, and raises for others
        raise NoDecomposition("an input of fewer than 2 dims")
    if training and (running_mean is not None or running_var is not None):
        # Training mode also updates running_mean and running_var in place. Until mutations
        # are written back (functionalisation), the call runs whole in torch, so its result
        # and the buffers' updates are exactly eager's.
        raise NoDecomposition("training mode updates the running statistics in place")
    if not training and (running_mean is None or running_var is None):
        raise NoDecomposition("evaluation mode without running statistics")  # torch raises
    if training:  # no running statistics to update: normalise by the batch's
        return batch_norm_with_stats(input, weight, bias, eps)[0]
    x = cast(input, _compute_dtype(input))
    var, mean = _per_channel(running_var, x), _per_channel(running_mean, x)
    return cast(_affine(_normalise(x, var, mean, eps), weight, bias), input.dtype)


def _batch_norm_cumulative(input, running_mean, running_var, num_batches_tracked, weight=None, bias=None, eps=1e-5):
    # the factor as nn.BatchNorm's forward computes it (SyncBatchNorm's `1.0 / n.item()` is the same float)
    return F.batch_norm(input, running_mean, running_var, weight, bias, True, 1.0 / float(num_batches_tracked), eps)


@register(_batch_norm_cumulative, name="batch_norm_cumulative", tags=(OpTag.PROGRAM_GLOBAL,))
def batch_norm_cumulative(input, running_mean, running_var, num_batches_tracked, weight=None, bias=None, eps=1e-5):
    """nn.BatchNorm's training forward with momentum=None (a cumulative moving average): F.batch_norm
    with the factor 1 / num_batches_tracked read from the buffer when the program runs, not a
    constant of the trace (frontend/value_guards.py records the module's call as this op)."""
    raise NoDecomposition("training mode updates the running statistics in place")


def batch_norm_with_stats(input, weight=None, bias=None, eps=1e-5):
    """(training-mode batch_norm, save_mean, save_invstd) with no running statistics: the
    batch's mean and 1 / sqrt(biased variance + eps) per channel, (C,) in the computing dtype
    (float32 for low-precision inputs), as aten's native_batch_norm saves them for its backward."""
    x = cast(input, _compute_dtype(input))
    var, m = prims.var_mean(x, (0, *range(2, x.ndim)), 0)  # biased, as torch normalises with
    invstd = rsqrt(add(var, eps))
    out = mul(sub(x, _per_channel(m, x)), _per_channel(invstd, x))
    return cast(_affine(out, weight, bias), input.dtype), m, invstd


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


# --- aten's native forms: the normalised tensor with the statistics a backward saves ----------

def _saved(stat, dtype):
    """A statistic as an output of its own: eager's autograd does not differentiate it (the trace
    freezes it), and the normalised tensor's gradient must still flow through the value it used."""
    out = cast(stat, dtype)
    return prims.reshape(out, out.shape) if out is stat else out


@register(torch.native_layer_norm)
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    """(layer_norm, mean, 1 / std) with the statistics kept over the normalised dims."""
    dims = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    x = cast(input, _compute_dtype(input))
    var, m = _batch_stats(x, dims)
    rstd = rsqrt(add(var, eps))
    out = mul(sub(x, m), rstd)
    if weight is not None:
        out = mul(out, weight)
    if bias is not None:
        out = add(out, bias)
    return cast(out, input.dtype), _saved(m, input.dtype), _saved(rstd, input.dtype)


@register(torch.native_group_norm)
def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    """(group_norm, mean, 1 / std), the statistics of shape (N, group)."""
    x = cast(input, _compute_dtype(input))
    grouped = prims.reshape(x, (N, group, (C // group) * HxW))
    var, m = prims.var_mean(grouped, (2,), 0)
    rstd = rsqrt(add(var, eps))

    def spread(s):  # (N, group) onto x's channels
        per_channel = prims.broadcast_in_dim(s, (N, group, C // group), (0, 1))
        return prims.broadcast_in_dim(prims.reshape(per_channel, (N, C)), x.shape, (0, 1))

    out = _affine(mul(sub(x, spread(m)), spread(rstd)), weight, bias)
    return cast(out, input.dtype), _saved(m, input.dtype), _saved(rstd, input.dtype)


def _native_batch_norm(input, weight, bias, running_mean, running_var, training, eps):
    """(batch_norm, saved mean, saved 1 / std): the batch's statistics (C,) in training, empty
    tensors in evaluation (aten saves none). Training that updates running statistics in place
    stays one torch call, as F.batch_norm's does."""
    if training and (running_mean is not None or running_var is not None):
        raise NoDecomposition("training mode updates the running statistics in place")
    if not training and (running_mean is None or running_var is None):
        raise NoDecomposition("evaluation mode without running statistics")  # torch raises
    if not training:
        x = cast(input, _compute_dtype(input))
        out = _normalise(x, _per_channel(running_var, x), _per_channel(running_mean, x), eps)
        empty = prims.full((0,), 0.0, dtype=input.dtype, device=input.device)
        return cast(_affine(out, weight, bias), input.dtype), empty, prims.full(
            (0,), 0.0, dtype=input.dtype, device=input.device)
    out, m, rstd = batch_norm_with_stats(input, weight, bias, eps)
    return out, _saved(m, input.dtype), _saved(rstd, input.dtype)


@register(torch.native_batch_norm)
def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return _native_batch_norm(input, weight, bias, running_mean, running_var, training, eps)


@register(torch._native_batch_norm_legit)
def native_batch_norm_legit(input, weight, bias, *rest):
    """Two overloads: (running_mean, running_var, training, momentum, eps) and, with no
    running statistics, (training, momentum, eps)."""
    if len(rest) == 3:
        return _native_batch_norm(input, weight, bias, None, None, rest[0], rest[2])
    running_mean, running_var, training, _, eps = rest
    return _native_batch_norm(input, weight, bias, running_mean, running_var, training, eps)


@register(torch.ops.aten._batch_norm_with_update, name="torch.ops.aten._batch_norm_with_update")
def batch_norm_with_update(input, weight, bias, running_mean, running_var, momentum, eps):
    raise NoDecomposition("it updates the running statistics in place")


@register(F.local_response_norm)
def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """x / (k + alpha * mean of x^2 over `size` neighbouring channels)^beta, the window
    zero-padded as torch pads it (size // 2 before, (size - 1) // 2 after): a sum of slices."""
    if input.numel() == 0:
        return input
    if size > 32:
        raise NoDecomposition(f"a window of {size} channels")  # one slice a channel: too many
    x = cast(input, _compute_dtype(input))
    squares = mul(x, x)
    config = [(size // 2, (size - 1) // 2, 0) if d == 1 else (0, 0, 0) for d in range(x.ndim)]
    padded = prims.pad(squares, 0.0, config)
    c = x.shape[1]
    window = None
    for i in range(size):
        part = prims.slice(padded, [i if d == 1 else 0 for d in range(x.ndim)],
                           [i + c if d == 1 else s for d, s in enumerate(x.shape)])
        window = part if window is None else add(window, part)
    scale = pow(add(mul(div(window, size), alpha), k), beta)
    return cast(div(x, scale), input.dtype)
