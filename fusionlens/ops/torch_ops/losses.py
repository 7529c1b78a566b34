"""Losses, with torch's reductions (and the legacy size_average / reduce arguments): the
negative log-likelihoods (nll_loss, cross_entropy with weights, label smoothing and
probability targets, linear_cross_entropy), the regression losses (mse, l1, smooth l1,
huber, gaussian and poisson nll), the binary ones (bce, bce with logits, soft margin,
multilabel soft margin), kl_div and the margin losses (ranking, hinge, multi-class and
multi-label). Each follows the formula of torch's CPU kernel. ctc_loss (a dynamic program
over the target) is a library call."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fusionlens.ops import prims
from fusionlens.ops.torch_ops.activations import logsigmoid
from fusionlens.ops.torch_ops.common import _is_float, _is_value, cast
from fusionlens.ops.torch_ops.normalization import log_softmax
from fusionlens.ops.torch_ops.pointwise import (abs, add, clamp_min, div, eq, exp, le, log, log1p, lt, maximum, mul,
                                                ne, neg, sub, where)
from fusionlens.ops.torch_ops.reductions import amin, sum
from fusionlens.ops.torch_ops.registry import NoDecomposition, library, register, symbol_for
from fusionlens.ops.torch_ops.shapes import reshape, squeeze, take_dim, unsqueeze

_REDUCTIONS = ("none", "mean", "sum")


def _reduction(size_average, reduce, reduction: str) -> str:
    """torch's _Reduction.legacy_get_string: the deprecated pair, where given, wins."""
    if size_average is None and reduce is None:
        if reduction not in _REDUCTIONS:
            raise NoDecomposition(f"reduction={reduction!r}")
        return reduction
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def _reduce_loss(loss, reduction_kind, count=None):
    if reduction_kind == "none":
        return loss
    total = sum(loss)
    if reduction_kind == "sum":
        return total
    return div(total, count if count is not None else loss.numel())


def _class_dim(input) -> int:
    return 0 if input.ndim == 1 else 1


def _along_classes(weight, like, c_dim: int):
    """A (C,) weight placed along `like`'s class dim."""
    return prims.broadcast_in_dim(cast(weight, like.dtype), like.shape, (c_dim,))


# --- negative log-likelihoods ----------------------------------------------------------------

@register(F.nll_loss)
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """-w[t] * input[t] along the class dim (1, or 0 for one sample); the mean divides by the
    weights of the targets not ignored, as torch's."""
    reduction = _reduction(size_average, reduce, reduction)
    if input.ndim == 0 or target.ndim != input.ndim - 1:
        raise NoDecomposition("a target that is not the input without its class dim")
    c_dim = _class_dim(input)
    valid = ne(target, ignore_index)
    safe = where(valid, target, 0)
    picked = squeeze(prims.take_along_axis(input, unsqueeze(cast(safe, torch.int64), c_dim), c_dim), c_dim)
    if weight is None:
        loss = where(valid, neg(picked), 0.0)
        return _reduce_loss(loss, reduction, sum(valid, dtype=input.dtype))
    w = where(valid, take_dim(cast(weight, input.dtype), safe, 0), 0.0)
    loss = where(valid, neg(mul(picked, w)), 0.0)
    return _reduce_loss(loss, reduction, sum(w))


def _smoothing_term(logp, target, weight, ignore_index, reduction, c_dim):
    """The label-smoothing part of cross_entropy: -sum over classes of (weighted) log p,
    0 for ignored targets, reduced as nll_loss reduces (by the targets' weights)."""
    per = mul(logp, _along_classes(weight, logp, c_dim)) if weight is not None else logp
    valid = ne(target, ignore_index)
    smooth = where(valid, neg(sum(per, c_dim)), 0.0)
    if reduction != "mean":
        return _reduce_loss(smooth, reduction)
    if weight is None:
        return div(sum(smooth), sum(valid, dtype=logp.dtype))
    w = where(valid, take_dim(cast(weight, logp.dtype), where(valid, target, 0), 0), 0.0)
    return div(sum(smooth), sum(w))


def _probability_targets(logp, target, weight, reduction, label_smoothing, c_dim):
    n_classes = logp.shape[c_dim]
    if label_smoothing > 0:
        target = add(mul(target, 1 - label_smoothing), label_smoothing / n_classes)
    per = mul(logp, target)
    if weight is not None:
        per = mul(per, _along_classes(weight, per, c_dim))
    loss = neg(sum(per, c_dim))
    if reduction == "mean":
        return div(sum(loss), logp.numel() // n_classes if n_classes else 0)
    return _reduce_loss(loss, reduction)


@register(F.cross_entropy)
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    reduction = _reduction(size_average, reduce, reduction)
    if not _is_value(target) or input.ndim == 0:
        raise NoDecomposition("a target that is not a tensor")
    c_dim = _class_dim(input)
    logp = log_softmax(input, c_dim)
    if _is_float(target.dtype):
        if target.shape != input.shape:
            raise NoDecomposition("probability targets of another shape")  # torch raises
        return _probability_targets(logp, target, weight, reduction, label_smoothing, c_dim)
    nll = nll_loss(logp, target, weight, None, ignore_index, None, reduction)
    if label_smoothing == 0:
        return nll
    smooth = _smoothing_term(logp, target, weight, ignore_index, reduction, c_dim)
    return add(mul(nll, 1 - label_smoothing), mul(smooth, label_smoothing / input.shape[c_dim]))


@register(F.linear_cross_entropy)
def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None, reduction="mean",
                         ignore_index=None, label_smoothing=0.0, options=None):
    """cross_entropy of linear(input): `options` only chooses how torch chunks the work."""
    num_classes, out_features = linear_weight.shape[0], tuple(linear_weight.shape[1:-1])
    logits_shape = tuple(input.shape[:-1]) + (num_classes,) + out_features
    w, b = linear_weight, linear_bias
    if out_features:
        w = reshape(w, (math.prod(out_features) * num_classes, input.shape[-1]))
        b = reshape(b, (w.shape[0],)) if b is not None else None
    logits = reshape(symbol_for(F.linear)(input, w, b), logits_shape)
    return cross_entropy(logits, target, weight, ignore_index=-100 if ignore_index is None else ignore_index,
                         reduction=reduction, label_smoothing=label_smoothing)


ctc_loss = library(F.ctc_loss)


# --- regression losses ------------------------------------------------------------------------

@register(F.mse_loss)
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _reduction(size_average, reduce, reduction)
    d = sub(input, target)
    return _weighted(mul(d, d), weight, reduction)


def _weighted(loss, weight, reduction):
    """F.l1_loss / F.mse_loss / F.huber_loss with a weight: the weighted mean divides by the
    weights' sum for l1 and mse, torch's Python code says; huber takes the plain mean."""
    if weight is None:
        return _reduce_loss(loss, reduction)
    weighted = mul(loss, weight)
    return _reduce_loss(weighted, reduction, sum(weight) if reduction == "mean" else None)


@register(F.l1_loss)
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    return _weighted(abs(sub(input, target)), weight, _reduction(size_average, reduce, reduction))


@register(F.smooth_l1_loss)
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    z = abs(sub(input, target))
    if beta == 0:
        return _reduce_loss(z, _reduction(size_average, reduce, reduction))
    loss = where(lt(z, beta), div(mul(mul(z, z), 0.5), beta), sub(z, 0.5 * beta))
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


@register(F.huber_loss)
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    z = abs(sub(input, target))
    loss = where(lt(z, delta), mul(mul(z, z), 0.5), mul(sub(z, 0.5 * delta), delta))
    reduction = _reduction(None, None, reduction)
    return _reduce_loss(loss if weight is None else mul(loss, weight), reduction)


@register(F.gaussian_nll_loss)
def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """0.5 * (log(var) + (input - target)^2 / var), var clamped to eps; a var one dim short
    of the input (homoscedastic) gets that dim back."""
    reduction = _reduction(None, None, reduction)
    if not _is_value(var):
        var = prims.full(input.shape, float(var), dtype=input.dtype, device=input.device)
    elif var.shape != input.shape and tuple(input.shape[:-1]) == tuple(var.shape):
        var = unsqueeze(var, -1)
    var = maximum(var, eps)
    d = sub(input, target)
    loss = mul(add(log(var), div(mul(d, d), var)), 0.5)
    if full:
        loss = add(loss, 0.5 * math.log(2 * math.pi))
    return _reduce_loss(loss, reduction)


@register(F.poisson_nll_loss)
def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean"):
    if log_input:
        loss = sub(exp(input), mul(target, input))
    else:
        loss = sub(input, mul(target, log(add(input, eps))))
    if full:  # Stirling's approximation of log(target!), for targets above 1
        stirling = add(sub(mul(target, log(target)), target), mul(log(mul(target, 2 * math.pi)), 0.5))
        loss = add(loss, where(le(target, 1), 0.0, stirling))
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


# --- binary and divergence losses ---------------------------------------------------------------

@register(F.binary_cross_entropy)
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """(t - 1) * max(log(1 - x), -100) - t * max(log(x), -100): torch clamps the logs."""
    loss = sub(mul(sub(target, 1), maximum(log1p(neg(input)), -100.0)), mul(target, maximum(log(input), -100.0)))
    if weight is not None:
        loss = mul(loss, weight)
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


@register(F.binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """(1 - t) * x - log(sigmoid(x)) * (1 + (pos_weight - 1) * t), as torch's kernel."""
    log_sig = logsigmoid(input)
    if pos_weight is not None:
        log_sig = mul(log_sig, add(mul(sub(pos_weight, 1), target), 1))
    loss = sub(mul(sub(1, target), input), log_sig)
    if weight is not None:
        loss = mul(loss, weight)
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


@register(F.soft_margin_loss)
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    loss = log1p(exp(mul(neg(input), target)))
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


@register(F.multilabel_soft_margin_loss)
def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    loss = neg(add(mul(target, logsigmoid(input)), mul(sub(1, target), logsigmoid(neg(input)))))
    if weight is not None:
        loss = mul(loss, weight)
    class_dim = input.ndim - 1
    loss = div(sum(loss, class_dim), input.shape[class_dim])
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


@register(F.kl_div)
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    if log_target:
        loss = mul(exp(target), sub(target, input))
    else:
        loss = sub(symbol_for(torch.xlogy)(target, target), mul(target, input))
    if reduction == "batchmean" and size_average is None and reduce is None:
        total = sum(loss)
        return div(total, input.shape[0]) if input.ndim else total
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


# --- margin losses ------------------------------------------------------------------------------

@register(F.margin_ranking_loss)
def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    loss = clamp_min(add(mul(neg(target), sub(input1, input2)), margin), 0)
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


@register(F.hinge_embedding_loss)
def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    """max(0, margin - x) where the target is not 1, plus x where it is not -1."""
    from_margin = where(ne(target, 1), clamp_min(sub(margin, input), 0), 0.0)
    loss = add(from_margin, where(ne(target, -1), input, 0.0))
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


def _rows(input, target):
    """input as (N, C) rows and target as (N,) or (N, C), as torch's margin losses view them."""
    x = reshape(input, (1, 1) if input.ndim == 0 else (1, input.shape[0]) if input.ndim == 1 else input.shape)
    return x, target


def _per_sample(loss, input, reduction):
    """A loss of (N,) samples, reduced; unreduced, a single sample's is 0-d as torch's."""
    if reduction == "none":
        return reshape(loss, ()) if input.ndim <= 1 else loss
    return _reduce_loss(loss, reduction)


@register(F.multi_margin_loss)
def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                      reduction="mean"):
    """Per sample: the mean over classes j != y of max(0, margin - x[y] + x[j])^p (times
    weight[y])."""
    if p not in (1, 2) or input.ndim > 2:
        raise NoDecomposition(f"p={p}")  # torch raises
    reduction = _reduction(size_average, reduce, reduction)
    x, _ = _rows(input, target)
    n, c = x.shape
    y = reshape(cast(target, torch.int64), (n, 1))
    z = clamp_min(add(sub(margin, prims.take_along_axis(x, y, 1)), x), 0)
    z = mul(z, z) if p == 2 else z
    if weight is not None:
        z = mul(z, take_dim(cast(weight, x.dtype), y, 0))
    classes = prims.broadcast_in_dim(prims.iota(c, start=0, step=1, dtype=torch.int64, device=x.device), (n, c), (1,))
    z = where(eq(classes, y), 0.0, z)
    return _per_sample(div(sum(z, 1), c), input, reduction)


@register(F.multilabel_margin_loss)
def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Per sample: the sum over its targets j (the classes before the first -1) and the
    classes k that are not targets of max(0, 1 - (x[j] - x[k])), over the number of classes."""
    if input.ndim > 2:
        raise NoDecomposition("more than 2 dims")  # torch raises
    reduction = _reduction(size_average, reduce, reduction)
    x, _ = _rows(input, target)
    n, c = x.shape
    t = reshape(cast(target, torch.int64), (n, c))
    position = prims.broadcast_in_dim(prims.iota(c, start=0, step=1, dtype=torch.int64, device=x.device), (n, c), (1,))
    end = amin(where(eq(t, -1), position, c), 1, True)  # the first -1, or c
    listed = lt(position, end)  # (n, j): target slot j is a target
    taken = prims.take_along_axis(x, where(listed, t, 0), 1)  # x[target[j]]
    # is_target[n, k]: class k is one of the listed targets
    slots = prims.broadcast_in_dim(where(listed, t, -1), (n, c, c), (0, 1))
    classes = prims.broadcast_in_dim(prims.iota(c, start=0, step=1, dtype=torch.int64, device=x.device), (n, c, c),
                                     (2,))
    is_target = prims.gt(sum(cast(prims.eq(slots, classes), torch.int32), 1), 0)
    margins = clamp_min(add(sub(1.0, prims.broadcast_in_dim(taken, (n, c, c), (0, 1))),
                            prims.broadcast_in_dim(x, (n, c, c), (0, 2))), 0)
    keep = prims.bitwise_and(prims.broadcast_in_dim(listed, (n, c, c), (0, 1)),
                             prims.logical_not(prims.broadcast_in_dim(is_target, (n, c, c), (0, 2))))
    loss = div(sum(where(keep, margins, 0.0), (1, 2)), c)
    return _per_sample(loss, input, reduction)
