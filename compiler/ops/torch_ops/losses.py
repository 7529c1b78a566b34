"""Losses: nll_loss, cross_entropy and mse_loss, with torch's reductions."""

from __future__ import annotations

import torch.nn.functional as F

from compiler.ops import prims
from compiler.ops.torch_ops.common import _is_float, _is_value
from compiler.ops.torch_ops.normalization import log_softmax
from compiler.ops.torch_ops.pointwise import div, mul, ne, neg, sub, where
from compiler.ops.torch_ops.reductions import sum
from compiler.ops.torch_ops.registry import NoDecomposition, register
from compiler.ops.torch_ops.shapes import squeeze, unsqueeze


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
