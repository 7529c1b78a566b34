"""Activation functions and dropout, as composites of elementwise ops (glu slices its input in
two first); the composite ones compute in float32 for low-precision inputs (opmath)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from compiler.ir import OpTag, Symbol
from compiler.ops import prims
from compiler.ops.torch_ops.common import opmath
from compiler.ops.torch_ops.pointwise import (abs, add, clamp, div, erf, exp, expm1, gt, le, log1p, lt, minimum,
                                              mul, neg, sigmoid, sub, tanh, where)
from compiler.ops.torch_ops.registry import NoDecomposition, register


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


@register(F.rrelu, torch.rrelu, tags=(OpTag.RANDOM,))
def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    if training:
        raise NoDecomposition("rrelu in training mode is random")
    return leaky_relu(input, (lower + upper) / 2)  # what torch's kernel does in eval mode


@register(F.glu)
@opmath
def glu(input, dim=-1):
    d, ends = dim % input.ndim, list(input.shape)
    half = ends[d] // 2

    def part(lo, hi):  # input[..., lo:hi, ...] along d
        return prims.slice(input, [lo if i == d else 0 for i in range(input.ndim)],
                           [hi if i == d else e for i, e in enumerate(ends)])
    return mul(part(0, half), sigmoid(part(half, ends[d])))
