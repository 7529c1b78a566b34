"""Distances and the losses built on them: cosine_similarity, pairwise_distance, pdist (the
distances of a set's pairs), cosine_embedding_loss and the triplet margin losses. Each is a
reduction over the last (or a given) dim of elementwise ops, as torch's kernels compute it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fusionlens.ir.sizes import broadcast_shapes
from fusionlens.ir.trace import Value
from fusionlens.ops import prims
from fusionlens.ops.torch_ops.common import broadcast_to_shape
from fusionlens.ops.torch_ops.losses import _reduce_loss, _reduction
from fusionlens.ops.torch_ops.pointwise import add, clamp_min, div, eq, minimum, mul, sqrt, sub, where
from fusionlens.ops.torch_ops.reductions import sum, vector_norm
from fusionlens.ops.torch_ops.registry import NoDecomposition, register
from fusionlens.ops.torch_ops.shapes import take_dim

_MAX_PDIST_ROWS = 128  # pdist's index has a part a row


@register(F.cosine_similarity, torch.cosine_similarity, name="torch.nn.functional.cosine_similarity")
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 / max(|x1|, eps) * x2 / max(|x2|, eps)) along dim: each normalised first, as
    torch does (the result stays within [-1, 1])."""
    shape = tuple(broadcast_shapes(x1.shape, x2.shape))
    a, b = broadcast_to_shape(x1, shape), broadcast_to_shape(x2, shape)
    if not (a.dtype.is_floating_point and b.dtype.is_floating_point):
        raise NoDecomposition("integer operands")
    na = clamp_min(vector_norm(a, 2, dim, True), eps)
    nb = clamp_min(vector_norm(b, 2, dim, True), eps)
    return sum(mul(div(a, na), div(b, nb)), dim)


@register(F.pairwise_distance, torch.pairwise_distance, name="torch.nn.functional.pairwise_distance")
def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """The p-norm of x1 - x2 + eps over the last dim."""
    ndim = max(x1.ndim, x2.ndim)
    if ndim == 0:
        raise NoDecomposition("0-d inputs")
    return vector_norm(add(sub(x1, x2), eps), p, ndim - 1, keepdim)


def _pairs(n: int, device) -> tuple[Value, Value]:
    """The rows i and j of the pairs i < j, in pdist's order (row by row)."""
    def joined(parts):
        return parts[0] if len(parts) == 1 else prims.cat(parts, 0)
    rows = range(n - 1)
    first = joined([prims.full((n - 1 - i,), i, dtype=torch.int64, device=device) for i in rows])
    second = joined([prims.iota(n - 1 - i, start=i + 1, step=1, dtype=torch.int64, device=device) for i in rows])
    return first, second


@register(F.pdist, torch.pdist, name="torch.nn.functional.pdist")
def pdist(input, p=2):
    """The p-norm distances of the rows' pairs i < j, in row order: the two rows of each pair
    taken, subtracted and reduced (never a row with itself, whose distance 0 has no gradient)."""
    if input.ndim != 2:
        raise NoDecomposition("an input that is not 2-d")  # torch raises
    n = input.shape[0]
    if n < 2:
        return prims.full((0,), 0.0, dtype=input.dtype, device=input.device)
    if n > _MAX_PDIST_ROWS:
        raise NoDecomposition(f"{n} rows")
    first, second = _pairs(n, input.device)
    diff = sub(take_dim(input, first, 0, wrap=False), take_dim(input, second, 0, wrap=False))
    if p == 2:  # torch's kernel: the square root of the sum of squares, no abs
        return sqrt(sum(mul(diff, diff), 1))
    return vector_norm(diff, p, 1)


_COSINE_EPS = 1e-12  # what torch's cosine_embedding_loss adds to each squared magnitude


@register(F.cosine_embedding_loss)
def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """1 - cos where the target is 1, max(0, cos - margin) where it is -1."""
    reduction = _reduction(size_average, reduce, reduction)
    d = target.ndim  # the feature dim: 0 for a single pair, 1 for a batch
    dot = sum(mul(input1, input2), d)
    mag1 = add(sum(mul(input1, input1), d), _COSINE_EPS)
    mag2 = add(sum(mul(input2, input2), d), _COSINE_EPS)
    cos = div(dot, sqrt(mul(mag1, mag2)))
    loss = add(where(eq(target, 1), sub(1, cos), 0.0), where(eq(target, -1), clamp_min(sub(cos, margin), 0), 0.0))
    return _reduce_loss(loss, reduction)


def _triplet(dist_pos, dist_neg, dist_swap, margin, reduction):
    if dist_swap is not None:
        dist_neg = minimum(dist_neg, dist_swap)
    return _reduce_loss(clamp_min(add(sub(dist_pos, dist_neg), margin), 0), reduction)


@register(F.triplet_margin_loss)
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    reduction = _reduction(size_average, reduce, reduction)
    dist = lambda a, b: pairwise_distance(a, b, p, eps)  # noqa: E731
    return _triplet(dist(anchor, positive), dist(anchor, negative), dist(positive, negative) if swap else None,
                    margin, reduction)


@register(F.triplet_margin_with_distance_loss)
def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None, margin=1.0, swap=False,
                                      reduction="mean"):
    """With the default distance or an nn.PairwiseDistance; any other distance function is the
    user's code, which a decomposition cannot call on its values."""
    if distance_function is None:
        dist = lambda a, b: pairwise_distance(a, b)  # noqa: E731
    elif isinstance(distance_function, torch.nn.PairwiseDistance):
        m = distance_function
        dist = lambda a, b: pairwise_distance(a, b, m.norm, m.eps, m.keepdim)  # noqa: E731
    else:
        raise NoDecomposition("a distance function of the user's")
    reduction = _reduction(None, None, reduction)
    return _triplet(dist(anchor, positive), dist(anchor, negative), dist(positive, negative) if swap else None,
                    margin, reduction)

