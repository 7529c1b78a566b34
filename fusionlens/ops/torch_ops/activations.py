"""Activation functions and dropout, as composites of elementwise ops (glu slices its input in
two first); the composite ones compute in float32 for low-precision inputs (opmath)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fusionlens.ir.trace import OpTag, Symbol
from fusionlens.ops import prims
from fusionlens.ops.torch_ops.common import _is_value, _scalar_as, cast, opmath
from fusionlens.ops.torch_ops.pointwise import (abs, add, clamp, div, erf, exp, expm1, gt, le, log1p, lt, minimum,
                                                mul, neg, sigmoid, sub, tanh, where)
from fusionlens.ops.torch_ops.registry import NoDecomposition, library_part, register


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


# eager's CPU dropout draws `empty_like(x).bernoulli_(1 - p)`: bernoulli.p is that draw as a
# function, so a compiled dropout takes the same masks from the same random stream.
dropout_noise = Symbol("torch.ops.aten.bernoulli.p", torch.ops.aten.bernoulli.p,
                       tags=(OpTag.LIBRARY_CALL, OpTag.RANDOM, OpTag.NON_DIFFERENTIABLE))


@register(F.dropout, torch.dropout, tags=(OpTag.RANDOM,))
def dropout(input, p=0.5, training=True, inplace=False):
    if not training or p == 0:
        return input
    if p == 1:
        return mul(input, 0.0)
    return mul(input, div(dropout_noise(input, 1.0 - p), 1.0 - p))


def _keep_mask(input, p: float, feature: bool):
    """The kept elements (1.0) of a dropout's draw: one an element, or one a channel (dims 0
    and 1) broadcast over the rest for the feature (channel-wise) dropouts."""
    if not feature:
        return dropout_noise(input, 1.0 - p)
    shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
    drawn = dropout_noise(prims.full(shape, 0.0, dtype=input.dtype, device=input.device), 1.0 - p)
    return prims.broadcast_in_dim(prims.reshape(drawn, input.shape[:2]), input.shape, (0, 1))


_SELU_SCALED_ALPHA = 1.7580993408473766  # -selu(-inf): where alpha dropout drops to


def _dropped(input, p: float, training: bool, feature: bool, alpha: bool):
    """torch's _dropout_impl: x * mask / (1 - p); for alpha dropout, dropped elements go to
    selu's negative saturation value and the result is rescaled to keep mean and variance."""
    if not training or p == 0 or input.numel() == 0:
        return input
    if feature and input.ndim < 2:
        raise NoDecomposition("a feature dropout of a tensor without channels")  # torch raises
    if p == 1:
        return mul(input, 0.0)
    keep = _keep_mask(input, p, feature)
    if not alpha:
        return mul(input, div(keep, 1.0 - p))
    a = 1.0 / math.sqrt((_SELU_SCALED_ALPHA ** 2 * p + 1) * (1 - p))
    shift = add(mul(sub(keep, 1.0), _SELU_SCALED_ALPHA * a), _SELU_SCALED_ALPHA * a * p)
    return add(mul(input, mul(keep, a)), shift)


@register(torch.ops.aten.native_dropout_backward.default, name="torch.ops.aten.native_dropout_backward.default")
def native_dropout_backward(grad_output, mask, scale):
    """The gradient through a dropout that kept `mask`: g * mask * scale."""
    return mul(mul(grad_output, cast(mask, grad_output.dtype)), scale)


# Each with its callable's own defaults (F.dropout2d trains by default, F.alpha_dropout does
# not): the frontend drops keyword arguments equal to the decomposition's defaults.
@register(F.dropout2d, tags=(OpTag.RANDOM,))
def dropout2d(input, p=0.5, training=True, inplace=False):
    return _dropped(input, p, training, feature=True, alpha=False)


@register(F.dropout3d, tags=(OpTag.RANDOM,))
def dropout3d(input, p=0.5, training=True, inplace=False):
    return _dropped(input, p, training, feature=True, alpha=False)


@register(F.alpha_dropout, tags=(OpTag.RANDOM,))
def alpha_dropout(input, p=0.5, training=False, inplace=False):
    return _dropped(input, p, training, feature=False, alpha=True)


@register(F.feature_alpha_dropout, tags=(OpTag.RANDOM,))
def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    return _dropped(input, p, training, feature=True, alpha=True)


def _aten_dropout(feature: bool, alpha: bool):
    def decomposition(input, p, train):  # torch.feature_dropout(input, p, train) and its kin
        return _dropped(input, p, train, feature, alpha)
    return decomposition


torch_feature_dropout = register(torch.feature_dropout, tags=(OpTag.RANDOM,))(_aten_dropout(True, False))
torch_alpha_dropout = register(torch.alpha_dropout, tags=(OpTag.RANDOM,))(_aten_dropout(False, True))
torch_feature_alpha_dropout = register(torch.feature_alpha_dropout, tags=(OpTag.RANDOM,))(_aten_dropout(True, True))


@register(F.dropout1d, tags=(OpTag.RANDOM,))
def dropout1d(input, p=0.5, training=True, inplace=False):
    if not training or p == 0:
        return input
    if input.ndim == 2:  # unbatched (C, L): a channel a row
        batched = prims.reshape(input, (1,) + tuple(input.shape))
        return prims.reshape(_dropped(batched, p, training, feature=True, alpha=False), input.shape)
    return _dropped(input, p, training, feature=True, alpha=False)


# --- the activations of convolutional networks (MobileNet, EfficientNet, ...) ------------------
# Each follows the formula of torch's CPU kernel, so results round the same way.

@register(F.hardsigmoid)
@opmath
def hardsigmoid(input, inplace=False):
    return div(clamp(add(input, 3.0), 0.0, 6.0), 6.0)


@register(F.hardswish)
@opmath
def hardswish(input, inplace=False):
    return div(mul(input, clamp(add(input, 3.0), 0.0, 6.0)), 6.0)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


@register(F.selu, torch.selu)
@opmath
def selu(input, inplace=False):
    return where(gt(input, 0), mul(input, _SELU_SCALE), mul(expm1(input), _SELU_ALPHA * _SELU_SCALE))


@register(F.celu, torch.celu)
@opmath
def celu(input, alpha=1.0, inplace=False):
    return where(gt(input, 0), input, mul(expm1(mul(input, 1.0 / alpha)), alpha))


@register(F.softsign)
def softsign(input):
    return div(input, add(abs(input), 1))


@register(F.tanhshrink)
@opmath
def tanhshrink(input):
    return sub(input, tanh(input))


@register(F.hardshrink, torch.hardshrink, torch.Tensor.hardshrink)
def hardshrink(input, lambd=0.5):
    return where(le(abs(input), lambd), 0, input)  # NaN fails the test and stays NaN


@register(F.softshrink)
def softshrink(input, lambd=0.5):
    inner = where(lt(input, -lambd), add(input, lambd), mul(input, 0))  # input * 0 keeps NaN
    return where(gt(input, lambd), sub(input, lambd), inner)


@register(F.logsigmoid, name="torch.nn.functional.logsigmoid")
@opmath
def logsigmoid(input):
    # min(x, 0) - log1p(exp(-|x|)): never exponentiates a large positive number
    return sub(minimum(input, 0), log1p(exp(neg(abs(input)))))


@register(F.prelu, torch.Tensor.prelu)
def prelu(input, weight):
    if input.ndim == 0:
        w = prims.reshape(weight, ()) if weight.ndim else weight
    elif weight.ndim == 0:
        w = prims.broadcast_in_dim(weight, input.shape, ())
    else:  # one weight, or one per channel (dim 1; a 1-d input has one channel)
        w = prims.broadcast_in_dim(weight, input.shape, (1 if weight.shape[0] > 1 else 0,))
    return where(gt(input, 0), input, mul(w, input))


# rrelu's slopes in training: one uniform draw in [lower, upper) an element, as a function
rrelu_noise = library_part(torch.ops.aten.uniform.default, "torch.ops.aten.uniform.default",
                           tags=(OpTag.RANDOM, OpTag.NON_DIFFERENTIABLE))


@register(F.rrelu, torch.rrelu, tags=(OpTag.RANDOM,))
def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    if training:  # negative elements scaled by a random slope each, as torch's kernel
        return where(le(input, 0), mul(input, rrelu_noise(input, lower, upper)), input)
    return leaky_relu(input, (lower + upper) / 2)  # what torch's kernel does in eval mode


@register(F.threshold, torch.threshold, name="torch.nn.functional.threshold")
def threshold(input, threshold, value, inplace=False):
    fill = value if _is_value(value) else _scalar_as(value, input.dtype)  # an int tensor stays int
    return where(le(input, threshold), fill, input)  # NaN fails the test and stays NaN


@register(F.glu)
@opmath
def glu(input, dim=-1):
    d, ends = dim % input.ndim, list(input.shape)
    half = ends[d] // 2

    def part(lo, hi):  # input[..., lo:hi, ...] along d
        return prims.slice(input, [lo if i == d else 0 for i in range(input.ndim)],
                           [hi if i == d else e for i, e in enumerate(ends)])
    return mul(part(0, half), sigmoid(part(half, ends[d])))
