"""Activation functions and dropout, as composites of elementwise ops; the composite ones
compute in float32 for low-precision inputs (opmath)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from compiler.ops.torch_ops.common import opmath
from compiler.ops.torch_ops.pointwise import (add, clamp, div, erf, exp, expm1, gt, le, log1p, mul, sigmoid,
                                              tanh, where)
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


@register(F.dropout, torch.dropout, tags=("random",))
def dropout(input, p=0.5, training=True, inplace=False):
    if not training or p == 0:
        return input
    raise NoDecomposition("dropout in training mode is random")
