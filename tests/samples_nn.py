"""Op samples: normalisation, softmax and losses; library calls (linear, conv, ...); pooling and resampling.

Imported by tests/op_samples.py, in a fixed order: the order of SAMPLES (test ids, docs/ops.md).
"""

import torch
import torch.nn.functional as F

from samples_common import BF16, F16, F32, ONLY_F32, T, bools, cl, each, ints, nt, pos, sample, sl, t


# --- normalisation, softmax and losses ------------------------------------------------------

sample("torch.nn.functional.softmax", "softmax", lambda a: F.softmax(a, dim=-1) + torch.softmax(a, 0)
       + a.softmax(-1) + torch.special.softmax(a, 1), t(3, 4, low=-5, high=5))
sample("torch.nn.functional.softmax", "softmax_dtype", lambda a: a.softmax(-1, dtype=torch.float32), t(2, 3, 6))
sample("torch.nn.functional.softmax", "softmax_nc_empty", lambda a, b: (F.softmax(a, 1), F.softmax(b, 1)), nt(3, 4),
       t(0, 4))
sample("torch.nn.functional.log_softmax", "log_softmax", lambda a: F.log_softmax(a, dim=-1) + torch.log_softmax(a, 0)
       + a.log_softmax(1), t(3, 4, low=-5, high=5))
sample("torch.nn.functional.softmax", "softmax_implicit_dim", lambda a, b: (F.softmax(a), F.softmax(b, None)), t(3, 4),
       t(2, 3, 4))
sample("torch.nn.functional.log_softmax", "log_softmax_implicit_dim", lambda a: F.log_softmax(a), t(3, 4))
sample("torch.nn.functional.log_softmax", "log_softmax_dtype", lambda a: F.log_softmax(a, -1, dtype=torch.float32),
       t(3, 4))
sample("torch.nn.functional.layer_norm", "layer_norm", lambda a, w, b: F.layer_norm(a, (8,), w, b), t(2, 3, 8), t(8),
       t(8))
sample("torch.nn.functional.layer_norm", "layer_norm_noaffine", lambda a: F.layer_norm(a, (3, 8), eps=1e-6),
       t(2, 3, 8, layout="t"))
_LAYER_NORM = torch.nn.LayerNorm(8)
sample("torch.nn.functional.layer_norm", "layer_norm_module", lambda a: _LAYER_NORM(a), t(4, 8))
sample("torch.nn.functional.rms_norm", "rms_norm", lambda a, w: F.rms_norm(a, (8,), w, 1e-6) + F.rms_norm(a, (8,)),
       t(2, 3, 8), t(8))
sample("torch.nn.functional.normalize", "normalize", lambda a: F.normalize(a) + F.normalize(a, dim=-1), t(3, 4))
sample("torch.nn.functional.normalize", "normalize_p", lambda a: (F.normalize(a, p=1.0), F.normalize(a, p=3, dim=0),
       F.normalize(a, p=float("inf"), dim=-1)), t(3, 4))
sample("torch.nn.functional.softmin", "softmin", lambda a: F.softmin(a, -1) + F.softmin(a, 0, dtype=torch.float32)
       + torch.nn.Softmin(1)(a), t(3, 4, low=-5, high=5))
sample("torch.ops.aten._safe_softmax.default", "safe_softmax", lambda a, m: torch.ops.aten._safe_softmax.default(
       a.masked_fill(m, float("-inf")), -1), t(3, 4), bools(3, 1), dtypes=ONLY_F32)  # whole masked rows give 0
sample("torch.ops.aten._softmax_backward_data", "softmax_backward_data", lambda g, a: (
       torch.ops.aten._softmax_backward_data(g, a.softmax(1), 1, a.dtype),
       torch.ops.aten._softmax_backward_data.default(g, a.softmax(0), 0, a.dtype)), t(3, 4), t(3, 4))
sample("torch.nn.functional.nll_loss", "nll_loss", lambda a, y: F.nll_loss(a.log_softmax(-1), y)
       + F.nll_loss(a, y, reduction="sum"), t(4, 5), ints(4, high=5))
sample("torch.nn.functional.nll_loss", "nll_loss_none", lambda a, y: F.nll_loss(a, y, reduction="none"), t(4, 5),
       ints(4, high=5))
sample("torch.nn.functional.cross_entropy", "cross_entropy", lambda a, y: F.cross_entropy(a, y), t(6, 5), ints(6, high=5))
sample("torch.nn.functional.cross_entropy", "cross_entropy_ignore_index",
       lambda a, y: F.cross_entropy(a, y.masked_fill(y == 0, -100)) + F.cross_entropy(a, y, ignore_index=2,
                                                                                      reduction="sum"),
       t(6, 5), ints(6, high=5))
sample("torch.nn.functional.cross_entropy", "cross_entropy_label_smoothing",
       lambda a, y, w: (F.cross_entropy(a, y, label_smoothing=0.1), F.cross_entropy(a, y, w, label_smoothing=0.2,
       reduction="none"), F.cross_entropy(a, y.masked_fill(y == 1, -100), w, label_smoothing=0.3)), t(6, 5),
       ints(6, high=5), pos(5))
sample("torch.nn.functional.cross_entropy", "cross_entropy_probabilities",
       lambda a, p, w: (F.cross_entropy(a, p.softmax(1)),
       F.cross_entropy(a, p.softmax(1), w, reduction="sum", label_smoothing=0.1),
       F.cross_entropy(a[0], p[0].softmax(0))),
       t(4, 5, 2), t(4, 5, 2), pos(5))
sample("torch.nn.functional.nll_loss", "nll_loss_weights_nd", lambda a, y, w: (F.nll_loss(a, y, w),
       F.nll_loss(a, y, w, ignore_index=1, reduction="sum"), F.nll_loss(a[0].t(), y[0], reduction="none"),
       F.nll_loss(a[:, :, 0], y[:, 0], size_average=False)), t(3, 4, 5), ints(3, 5, high=4), pos(4))
sample("torch.nn.functional.linear_cross_entropy", "linear_cross_entropy", lambda x, w, b, y: (
       F.linear_cross_entropy(x, w, y, linear_bias=b), F.linear_cross_entropy(x[0], w, y[0], reduction="none",
       label_smoothing=0.1)), t(3, 4), t(5, 4), t(5), ints(3, high=5), dtypes=ONLY_F32)
sample("torch.nn.functional.mse_loss", "mse_loss", lambda a, b: F.mse_loss(a, b) + F.mse_loss(a, b, reduction="sum")
       + F.mse_loss(a, b, reduction="none").sum(), t(3, 4), t(3, 4))
sample("torch.nn.functional.ctc_loss", "ctc_loss", lambda lp, y: F.ctc_loss(lp.log_softmax(2), y, [6, 5], [3, 2]),
       t(6, 2, 4), ints(2, 3, low=1, high=4), dtypes=ONLY_F32)
# the regression, binary and margin losses, each with its reductions
sample("torch.nn.functional.l1_loss", "l1_loss", lambda a, b: (F.l1_loss(a, b), F.l1_loss(a, b, reduction="none"),
       F.l1_loss(a, b, reduce=False)), t(3, 4), t(3, 4))
sample("torch.nn.functional.smooth_l1_loss", "smooth_l1_loss", lambda a, b: (F.smooth_l1_loss(a, b),
       F.smooth_l1_loss(a, b, beta=0.5, reduction="sum"), F.smooth_l1_loss(a, b, beta=0.0)), t(3, 4), t(3, 4))
sample("torch.nn.functional.huber_loss", "huber_loss",
       lambda a, b, w: (F.huber_loss(a, b), F.huber_loss(a, b, "sum", 0.5),
       F.huber_loss(a, b, delta=2.0, weight=w)), t(3, 4), t(3, 4), pos(3, 4))
sample("torch.nn.functional.gaussian_nll_loss", "gaussian_nll_loss", lambda a, b, v: (F.gaussian_nll_loss(a, b, v),
       F.gaussian_nll_loss(a, b, v[:, :1], full=True, reduction="sum"), F.gaussian_nll_loss(a, b, v[:, 0], eps=0.5)),
       t(3, 4), t(3, 4), pos(3, 4), dtypes=ONLY_F32)
sample("torch.nn.functional.poisson_nll_loss", "poisson_nll_loss", lambda a, y: (F.poisson_nll_loss(a, y),
       F.poisson_nll_loss(a.exp(), y, log_input=False, full=True, reduction="none")), t(3, 4),
       t(3, 4, low=0.25, high=4))
sample("torch.nn.functional.binary_cross_entropy", "binary_cross_entropy", lambda p, y, w: (F.binary_cross_entropy(
       p.sigmoid(), y.to(p.dtype)), F.binary_cross_entropy(p.sigmoid(), y.to(p.dtype), w, reduction="sum")), t(3, 4),
       bools(3, 4), t(4))
sample("torch.nn.functional.binary_cross_entropy_with_logits", "bce_with_logits", lambda x, y, w, pw: (
       F.binary_cross_entropy_with_logits(x, y), F.binary_cross_entropy_with_logits(x, y, w, pos_weight=pw,
       reduction="none")), t(3, 4, low=-20, high=20), t(3, 4, low=0, high=1), pos(4), pos(4))
sample("torch.nn.functional.soft_margin_loss", "soft_margin_loss", lambda x, y: F.soft_margin_loss(x, y.sign())
       + F.soft_margin_loss(x, y, reduction="sum"), t(3, 4), t(3, 4))
sample("torch.nn.functional.multilabel_soft_margin_loss", "multilabel_soft_margin_loss", lambda x, y, w: (
       F.multilabel_soft_margin_loss(x, y.to(x.dtype)), F.multilabel_soft_margin_loss(x, y.to(x.dtype), w,
       reduction="none")), t(3, 4), bools(3, 4), pos(4))
sample("torch.nn.functional.kl_div", "kl_div",
       lambda a, b: (F.kl_div(a.log_softmax(1), b.softmax(1), reduction="batchmean"),
       F.kl_div(a, b, reduction="none", log_target=True),
       F.kl_div(a, b.softmax(1).masked_fill(b > 1, 0), reduction="sum")),
       t(3, 4), t(3, 4))
sample("torch.nn.functional.margin_ranking_loss", "margin_ranking_loss",
       lambda a, b, y: (F.margin_ranking_loss(a, b, y.sign()),
       F.margin_ranking_loss(a, b, y.sign(), margin=0.5, reduction="none")), t(5), t(5), t(5))
sample("torch.nn.functional.hinge_embedding_loss", "hinge_embedding_loss",
       lambda a, y: (F.hinge_embedding_loss(a, y.sign()),
       F.hinge_embedding_loss(a, y.sign(), margin=0.5, reduction="none")), t(3, 4), t(3, 4))
sample("torch.nn.functional.multi_margin_loss", "multi_margin_loss", lambda a, y, w: (F.multi_margin_loss(a, y),
       F.multi_margin_loss(a, y, p=2, margin=0.5, weight=w, reduction="none"), F.multi_margin_loss(a[0], y[0])),
       t(3, 5), ints(3, high=5), pos(5))
sample("torch.nn.functional.multilabel_margin_loss", "multilabel_margin_loss",
       lambda a, y: (F.multilabel_margin_loss(a, y),
       F.multilabel_margin_loss(a, y, reduction="none"), F.multilabel_margin_loss(a[0], y[0], reduction="sum")),
       t(3, 4), ints(3, 4, low=-1, high=4))
# distances, and the losses over them
_PAIRWISE = torch.nn.PairwiseDistance(p=1.0)
sample("torch.nn.functional.cosine_similarity", "cosine_similarity", lambda a, b: (F.cosine_similarity(a, b),
       torch.cosine_similarity(a, b[0], dim=-1, eps=0.5)), t(3, 4), t(3, 4))
sample("torch.nn.functional.pairwise_distance", "pairwise_distance", lambda a, b: (F.pairwise_distance(a, b),
       F.pairwise_distance(a, b, p=1, keepdim=True), torch.pairwise_distance(a[0], b[0], 3.0)), t(3, 4), t(3, 4))
sample("torch.nn.functional.pdist", "pdist", lambda a: (F.pdist(a), F.pdist(a, p=1), F.pdist(a[:1])), t(5, 3))
sample("torch.nn.functional.cosine_embedding_loss", "cosine_embedding_loss", lambda a, b, y: (
       F.cosine_embedding_loss(a, b, y.sign()), F.cosine_embedding_loss(a, b, y.sign(), margin=0.3, reduction="none")),
       t(3, 4), t(3, 4), t(3))
sample("torch.nn.functional.triplet_margin_loss", "triplet_margin_loss",
       lambda a, p, n: (F.triplet_margin_loss(a, p, n),
       F.triplet_margin_loss(a, p, n, margin=0.5, p=1, swap=True, reduction="none")), t(3, 4), t(3, 4), t(3, 4))
sample("torch.nn.functional.triplet_margin_with_distance_loss", "triplet_margin_with_distance_loss",
       lambda a, p, n: (F.triplet_margin_with_distance_loss(a, p, n), F.triplet_margin_with_distance_loss(
           a, p, n, distance_function=_PAIRWISE, swap=True, reduction="sum")), t(3, 4), t(3, 4), t(3, 4))


def _bn_module(module):
    """A norm module in eval mode with running statistics other than 0 and 1."""
    with torch.no_grad():
        module.running_mean.uniform_(-1, 1)
        module.running_var.uniform_(0.5, 2)
        if module.weight is not None:
            module.weight.uniform_(-2, 2)
            module.bias.uniform_(-1, 1)
    return module.eval()


_BATCH_NORM = _bn_module(torch.nn.BatchNorm2d(3))
_BATCH_NORM_NOAFFINE = _bn_module(torch.nn.BatchNorm1d(4, affine=False))
_GROUP_NORM = torch.nn.GroupNorm(2, 4)
_INSTANCE_NORM = torch.nn.InstanceNorm2d(3, affine=True)
sample("torch.nn.functional.batch_norm", "batch_norm_eval", lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b),
       t(2, 3, 4, 4), t(3), pos(3), t(3), t(3))
sample("torch.nn.functional.batch_norm", "batch_norm_eval_partial_affine", lambda x, m, v, w, b: (
       F.batch_norm(x, m, v, eps=1e-3), F.batch_norm(x, m, v, w), F.batch_norm(x, m, v, bias=b)), t(4, 3), t(3), pos(3),
       t(3), t(3))
sample("torch.nn.functional.batch_norm", "batch_norm_eval_cl", lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, False),
       cl(2, 3, 4, 5), t(3), pos(3), t(3), t(3))
sample("torch.nn.functional.batch_norm", "batch_norm_eval_5d_empty", lambda x, e, m, v: (F.batch_norm(x, m, v),
       F.batch_norm(e, m, v)), t(1, 3, 2, 3, 4), t(0, 3, 4), t(3), pos(3))
sample("torch.nn.functional.batch_norm", "batch_norm_mixed_dtypes", lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b),
       t(2, 3, 4, 4), t(3, dtype=F32), pos(3, dtype=F32), t(3, dtype=F32), t(3, dtype=F32), dtypes=(F16, BF16))
sample("torch.nn.functional.batch_norm", "batch_norm_module_eval", lambda x, y: _BATCH_NORM(x).sum()
       + _BATCH_NORM_NOAFFINE(y).sum(), t(2, 3, 5, 5), t(3, 4, 6), dtypes=ONLY_F32)
sample("torch.nn.functional.batch_norm", "batch_norm_batch_stats", lambda x, w, b: F.batch_norm(x, None, None, w, b, True)
       + F.batch_norm(x, None, None, training=True, eps=0.1), t(4, 3, 5), t(3), t(3))
sample("torch.nn.functional.batch_norm", "batch_norm_train_running_stats",
       lambda x, m, v: F.batch_norm(x, m, v, training=True, momentum=0.2), t(4, 3, 5), t(3), pos(3),
       decomposes=False, why_not="running statistics in place")
_BATCH_NORM_CMA = torch.nn.BatchNorm1d(3, momentum=None).train()  # momentum=None: a cumulative average
sample("batch_norm_cumulative", "batch_norm_cumulative_module_train", lambda x: _BATCH_NORM_CMA(x), t(4, 3, 5),
       dtypes=ONLY_F32, decomposes=False, why_not="running statistics in place")
sample("torch.nn.functional.instance_norm", "instance_norm", lambda x, w, b: F.instance_norm(x)
       + F.instance_norm(x, weight=w, bias=b, eps=1e-3), t(2, 3, 4, 5), t(3), t(3))
sample("torch.nn.functional.instance_norm", "instance_norm_running", lambda x, m, v, w: F.instance_norm(
       x, m, v, w, use_input_stats=False), cl(2, 3, 4, 4), t(3), pos(3), t(3))
sample("torch.nn.functional.instance_norm", "instance_norm_module", lambda x: _INSTANCE_NORM(x), t(2, 3, 4, 4),
       dtypes=ONLY_F32)
sample("torch.nn.functional.instance_norm", "instance_norm_update_running", lambda x, m, v: F.instance_norm(x, m, v),
       t(2, 3, 6), t(3), pos(3), dtypes=ONLY_F32, decomposes=False, why_not="running statistics in place")
sample("torch.nn.functional.group_norm", "group_norm", lambda x, w, b: F.group_norm(x, 2, w, b) + F.group_norm(x, 1)
       + F.group_norm(x, 4, eps=1e-3), t(2, 4, 3, 3), t(4), t(4))
sample("torch.nn.functional.group_norm", "group_norm_2d_cl", lambda x, y, w: (F.group_norm(x, 3, w), F.group_norm(y, 2)),
       t(2, 6), cl(2, 4, 3, 5), t(6))
sample("torch.nn.functional.group_norm", "group_norm_module", lambda x: _GROUP_NORM(x), t(2, 4, 6), dtypes=ONLY_F32)
sample("torch.native_layer_norm", "native_layer_norm", lambda x, w, b: (torch.native_layer_norm(x, (4,), w, b, 1e-5),
       torch.native_layer_norm(x, (3, 4), None, None, 0.5)), t(2, 3, 4), t(4), t(4))
sample("torch.native_group_norm", "native_group_norm",
       lambda x, w, b: torch.native_group_norm(x, w, b, 2, 4, 6, 2, 1e-5),
       t(2, 4, 6), t(4), t(4))
sample("torch.native_batch_norm", "native_batch_norm", lambda x, w, b, m, v: (torch.native_batch_norm(
       x, w, b, m, v, False, 0.1, 1e-5), torch.native_batch_norm(x, None, b, None, None, True, 0.1, 1e-3)),
       t(4, 3, 5), t(3), t(3), t(3), pos(3), dtypes=ONLY_F32)
sample("torch._native_batch_norm_legit", "native_batch_norm_legit", lambda x, w, m, v: (
       torch._native_batch_norm_legit(x, w, None, m, v, False, 0.1, 1e-5),
       torch._native_batch_norm_legit(x, w, None, True, 0.1, 1e-5)), t(4, 3, 5), t(3), t(3), pos(3), dtypes=ONLY_F32)
sample("torch.ops.aten._batch_norm_with_update", "batch_norm_with_update", lambda x, m, v: (
       torch.ops.aten._batch_norm_with_update(x, None, None, m, v, 0.1, 1e-5)), t(4, 3, 5), t(3), pos(3),
       dtypes=ONLY_F32, decomposes=False, why_not="running statistics in place")
sample("torch.nn.functional.local_response_norm", "local_response_norm", lambda x, y: (F.local_response_norm(x, 3),
       F.local_response_norm(y, 2, alpha=1e-2, beta=0.5, k=2.0), torch.nn.LocalResponseNorm(4)(x)), t(2, 5, 6),
       t(2, 4, 3, 3))

# --- library calls ---------------------------------------------------------------------------

sample("torch.nn.functional.linear", "linear", lambda x, w, b: F.linear(x, w, b) + F.linear(x, w), t(2, 3, 8), t(4, 8),
       t(4))
_LINEAR = torch.nn.Linear(8, 4)
_EMBEDDING = torch.nn.Embedding(10, 4)
sample("torch.nn.functional.linear", "linear_module", lambda x: _LINEAR(x), t(3, 8), dtypes=ONLY_F32)
sample("torch.matmul", "matmul", lambda a, b: a @ b + torch.matmul(a, b) + a.matmul(b), t(2, 3, 4), nt(4, 5))
sample("torch.Tensor.__rmatmul__", "rmatmul", lambda a, b: b.__rmatmul__(a), t(3, 4), t(4, 2))
sample("torch.bmm", "bmm", lambda a, b: torch.bmm(a, b) + a.bmm(b), t(2, 3, 4), t(2, 4, 5))
sample("torch.mm", "mm", lambda a, b: torch.mm(a, b) + a.mm(b), t(3, 4), sl(4, 5))
sample("torch.baddbmm", "baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, alpha=0.5) + c.baddbmm(a, b), t(2, 3, 5),
       t(2, 3, 4), t(2, 4, 5))
sample("torch.addmm", "addmm", lambda c, a, b: torch.addmm(c, a, b) + c.addmm(a, b, beta=0.5), t(5), t(3, 4), t(4, 5))
sample("torch.einsum", "einsum", lambda a, b: torch.einsum("bij,bjk->bik", a, b), t(2, 3, 4), t(2, 4, 5))
sample("torch.nn.functional.embedding", "embedding", lambda i, w: F.embedding(i, w) * 2, ints(2, 3, high=10), t(10, 4))
sample("torch.nn.functional.embedding", "embedding_module", lambda i: _EMBEDDING(i), ints(2, 3, high=10),
       dtypes=ONLY_F32)
sample("torch.nn.functional.scaled_dot_product_attention", "sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
       t(2, 2, 4, 8), t(2, 2, 4, 8), t(2, 2, 4, 8))
sample("torch._grouped_mm", "grouped_mm", lambda a, b: torch._grouped_mm(a, b), t(3, 4, 8, dtype=BF16),
       t(3, 8, 8, dtype=BF16), dtypes=ONLY_F32)  # a mixture of experts' matmul per expert (bf16 on the CPU)
sample("torch.nn.functional.embedding_bag", "embedding_bag", lambda i, w, o, s: (F.embedding_bag(i, w, o),
       F.embedding_bag(i, w, o, mode="sum", per_sample_weights=s), F.embedding_bag(i.view(2, 3), w, mode="max")),
       ints(6, high=10), t(10, 4), T((3,), kind="int", dtype=torch.int64, low=0, high=1), t(6), dtypes=ONLY_F32)
sample("torch.segment_reduce", "segment_reduce", lambda x, n: (torch.segment_reduce(x, "sum", lengths=n),
       torch.segment_reduce(x, "max", lengths=n, initial=0.0)), t(6, 2), T((3,), kind="int", dtype=torch.int64, low=2,
       high=3), dtypes=ONLY_F32)
sample("torch.hash_tensor", "hash_tensor", lambda x: (torch.hash_tensor(x), torch.hash_tensor(x, dim=1)), t(3, 4),
       dtypes=ONLY_F32)
sample("torch.histogramdd", "histogramdd", lambda x: torch.histogramdd(x, bins=[3, 2], range=[-2.0, 2.0, -2.0, 2.0]),
       t(10, 2), dtypes=ONLY_F32)
sample("torch._C._sparse._sparse_mm", "sparse_mm",
       lambda a, b: torch._C._sparse._sparse_mm(a.to_sparse_csr(), b, "sum"),
       t(4, 4), t(4, 3), dtypes=ONLY_F32)  # the sparse operand's ops run as their torch calls
sample("torch._C._sparse.sparse_sampled_addmm", "sparse_sampled_addmm", lambda c, a, b: torch.sparse.sampled_addmm(
       c.to_sparse_csr(), a, b, alpha=0.5).to_dense(), t(3, 3), t(3, 4), t(4, 3), dtypes=ONLY_F32)
sample("torch.Tensor.to_sparse", "to_sparse", lambda a: a.to_sparse().to_dense() * 2, t(3, 4), dtypes=ONLY_F32)
_BILINEAR = torch.nn.Bilinear(3, 4, 2)
sample("torch.nn.functional.bilinear", "bilinear",
       lambda a, b, w, c: (F.bilinear(a, b, w, c), F.bilinear(a[0], b[0], w),
       _BILINEAR(a, b)), t(5, 3), t(5, 4), t(2, 3, 4), t(2), dtypes=ONLY_F32)
sample("torch.nn.functional.scaled_dot_product_attention", "sdpa_causal",
       lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), t(1, 2, 5, 8), t(1, 2, 5, 8),
       t(1, 2, 5, 8))
sample("torch.nn.functional.scaled_dot_product_attention", "sdpa_mask",
       lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m) + F.scaled_dot_product_attention(
           q, k, v, attn_mask=m.logical_not().float() * -1e4),
       t(1, 2, 5, 8), t(1, 2, 5, 8), t(1, 2, 5, 8), bools(5, 5))
sample("torch.nn.functional.conv1d", "conv1d", lambda x, w, b: F.conv1d(x, w, b, padding=1), t(2, 3, 8), t(4, 3, 3), t(4),
       dtypes=(F32, BF16))
sample("torch.nn.functional.conv2d", "conv2d", lambda x, w: F.conv2d(x, w, stride=2), t(1, 3, 6, 6), t(4, 3, 3, 3),
       dtypes=(F32, BF16))
_CONV2D = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
_CONV_T2D = torch.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)
sample("torch.nn.functional.conv2d", "conv2d_groups_dilation", lambda x, w, d: (F.conv2d(x, w, None, 1, 2, 2, 2),
       F.conv2d(x, d, padding="same", groups=4)), t(1, 4, 7, 7), t(6, 2, 3, 3), t(4, 1, 3, 3))
sample("torch.nn.functional.conv2d", "conv2d_depthwise_cl", lambda x, w, b: F.conv2d(x, w, b, (2, 1), (1, 0), groups=4),
       cl(2, 4, 6, 6), t(4, 1, 3, 3), t(4))
sample("torch.nn.functional.conv2d", "conv2d_module", lambda x: _CONV2D(x), t(2, 4, 8, 8), dtypes=ONLY_F32)
sample("torch.nn.functional.conv3d", "conv3d", lambda x, w, b: (F.conv3d(x, w, b, stride=(1, 2, 2), padding=1),
       F.conv3d(x, w, stride=2, padding="valid", dilation=1)), t(1, 2, 4, 5, 5), t(3, 2, 3, 3, 3), t(3),
       dtypes=(F32, BF16))
sample("torch.nn.functional.conv3d", "conv3d_groups_cl", lambda x, w: F.conv3d(x, w, groups=2, dilation=(1, 2, 1)),
       cl(1, 4, 3, 6, 4), t(2, 2, 2, 2, 2), dtypes=(F32, BF16))
sample("torch.nn.functional.conv_transpose1d", "conv_transpose1d", lambda x, w, b: F.conv_transpose1d(x, w, b, 2, 1, 1)
       + F.conv_transpose1d(x, w, stride=2, padding=1, output_padding=1, dilation=1), t(2, 3, 6), t(3, 4, 3), t(4),
       dtypes=(F32, BF16))
sample("torch.nn.functional.conv_transpose2d", "conv_transpose2d", lambda x, w: (F.conv_transpose2d(x, w, None, 1, 0, 0, 2),
       F.conv_transpose2d(x, w, groups=2, dilation=2, stride=1)), t(1, 4, 5, 5), t(4, 3, 3, 3), dtypes=(F32, BF16))
sample("torch.nn.functional.conv_transpose2d", "conv_transpose2d_module_cl", lambda x: _CONV_T2D(x), cl(2, 4, 4, 4),
       dtypes=ONLY_F32)
sample("torch.nn.functional.conv_transpose3d", "conv_transpose3d", lambda x, w, b: F.conv_transpose3d(x, w, b, stride=2,
       padding=(0, 1, 1)), t(1, 2, 3, 3, 3), t(2, 3, 2, 3, 3), t(3), dtypes=(F32, BF16))

# --- pooling and resampling ------------------------------------------------------------------

_MAX_POOL = torch.nn.MaxPool2d(3, 2, 1)
_AVG_POOL = torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False)
sample("torch.nn.functional.max_pool1d", "max_pool1d", lambda x: (F.max_pool1d(x, 3, 2, 1) + torch.max_pool1d(x, 3, 2, 1),
       F.max_pool1d(x, 2, ceil_mode=True, dilation=2)), t(2, 3, 9))
sample("torch.nn.functional.max_pool2d", "max_pool2d", lambda x: (F.max_pool2d(x, 2), F.max_pool2d(x, (3, 2), (2, 1), 1),
       torch.max_pool2d(x, 3, 2, 1, 2, True), F.max_pool2d(x, 3, ceil_mode=True)), t(2, 3, 7, 8))
sample("torch.nn.functional.max_pool2d", "max_pool2d_module_cl", lambda x: _MAX_POOL(x), cl(2, 3, 8, 8))
sample("torch.nn.functional.max_pool3d", "max_pool3d", lambda x: (F.max_pool3d(x, 2) + torch.max_pool3d(x, 2, 2, 0, 1, False),
       F.max_pool3d(x, 3, 2, 1, ceil_mode=True)), t(1, 2, 4, 5, 5))
sample("torch.nn.functional.max_pool1d_with_indices", "max_pool1d_with_indices",
       lambda x: F.max_pool1d(x, 3, 2, return_indices=True), t(2, 3, 8))
sample("torch.nn.functional.max_pool2d_with_indices", "max_pool2d_with_indices",
       lambda x: torch.nn.MaxPool2d(2, return_indices=True)(x), t(1, 3, 6, 5))
sample("torch.nn.functional.max_pool3d_with_indices", "max_pool3d_with_indices",
       lambda x: F.max_pool3d(x, 2, ceil_mode=True, return_indices=True), t(1, 2, 3, 4, 5))
sample("torch.nn.functional.avg_pool1d", "avg_pool1d", lambda x: (F.avg_pool1d(x, 3, 2, 1) + F.avg_pool1d(x, 3, 2, 1,
       count_include_pad=False), F.avg_pool1d(x, 3, 2, 1, ceil_mode=True)), t(2, 3, 8))
sample("torch.nn.functional.avg_pool2d", "avg_pool2d", lambda x: (F.avg_pool2d(x, 2), F.avg_pool2d(x, 3, 2, 1, True, False),
       F.avg_pool2d(x, (3, 2), divisor_override=3)), t(2, 3, 7, 6))
sample("torch.nn.functional.avg_pool2d", "avg_pool2d_module_cl", lambda x: _AVG_POOL(x), cl(2, 3, 8, 8))
sample("torch.nn.functional.avg_pool3d", "avg_pool3d", lambda x: F.avg_pool3d(x, 2) + F.avg_pool3d(x, 3, 2, 1,
       count_include_pad=False, divisor_override=None), t(1, 2, 4, 4, 4), dtypes=ONLY_F32)
sample("torch.nn.functional.adaptive_avg_pool1d", "adaptive_avg_pool1d", lambda x: (F.adaptive_avg_pool1d(x, 1),
       F.adaptive_avg_pool1d(x, 4), torch.nn.AdaptiveAvgPool1d((2,))(x)), t(2, 3, 8))
sample("torch.nn.functional.adaptive_avg_pool1d", "adaptive_avg_pool1d_uneven", lambda x: (F.adaptive_avg_pool1d(x, 3),
       F.adaptive_avg_pool1d(x, 5), F.adaptive_avg_pool1d(x, 11)), t(2, 3, 8))  # unequal, overlapping windows
sample("torch.nn.functional.adaptive_avg_pool2d", "adaptive_avg_pool2d_global", lambda x, y: F.adaptive_avg_pool2d(x, 1)
       + torch.nn.AdaptiveAvgPool2d((1, 1))(x) + F.adaptive_avg_pool2d(y, (1, 1)).sum(), t(2, 3, 5, 7), t(3, 4, 4))
sample("torch.nn.functional.adaptive_avg_pool2d", "adaptive_avg_pool2d_divides", lambda x: (F.adaptive_avg_pool2d(x, (2, 3)),
       F.adaptive_avg_pool2d(x, (None, 2)), F.adaptive_avg_pool2d(x, (4, 6))), t(2, 3, 4, 6))
sample("torch.nn.functional.adaptive_avg_pool2d", "adaptive_avg_pool2d_cl_empty", lambda x, e: (F.adaptive_avg_pool2d(x, 1),
       F.adaptive_avg_pool2d(x, 2), F.adaptive_avg_pool2d(e, 1)), cl(2, 3, 4, 4), t(0, 3, 4, 4))
sample("torch.nn.functional.adaptive_avg_pool2d", "adaptive_avg_pool2d_uneven",
       lambda x: (F.adaptive_avg_pool2d(x, (3, 2)),
       F.adaptive_avg_pool2d(x, (5, 3))), t(2, 3, 7, 4))
sample("torch.nn.functional.adaptive_avg_pool3d", "adaptive_avg_pool3d_uneven",
       lambda x: F.adaptive_avg_pool3d(x, (3, 2, 4)),
       t(1, 2, 5, 5, 6), dtypes=ONLY_F32)
sample("torch.nn.functional.adaptive_avg_pool3d", "adaptive_avg_pool3d", lambda x: (F.adaptive_avg_pool3d(x, 1),
       F.adaptive_avg_pool3d(x, (2, 1, None)), torch.nn.AdaptiveAvgPool3d(2)(x)), t(1, 2, 4, 4, 6))
sample("torch.nn.functional.adaptive_max_pool1d", "adaptive_max_pool1d", lambda x: F.adaptive_max_pool1d(x, 3)
       + F.adaptive_max_pool1d(x, 1), t(2, 3, 8))
sample("torch.nn.functional.adaptive_max_pool2d", "adaptive_max_pool2d", lambda x: (F.adaptive_max_pool2d(x, (3, 2)),
       torch.nn.AdaptiveMaxPool2d(1)(x)), t(2, 3, 7, 4))
sample("torch.nn.functional.adaptive_max_pool3d", "adaptive_max_pool3d", lambda x: F.adaptive_max_pool3d(x, (2, 3, 1)),
       t(1, 2, 4, 5, 3))
sample("torch.nn.functional.adaptive_max_pool1d_with_indices", "adaptive_max_pool1d_with_indices",
       lambda x: F.adaptive_max_pool1d(x, 3, return_indices=True), t(2, 3, 8))
sample("torch.nn.functional.adaptive_max_pool2d_with_indices", "adaptive_max_pool2d_with_indices",
       lambda x: torch.nn.AdaptiveMaxPool2d((2, 2), return_indices=True)(x), t(1, 3, 5, 4))
sample("torch.nn.functional.adaptive_max_pool3d_with_indices", "adaptive_max_pool3d_with_indices",
       lambda x: F.adaptive_max_pool3d(x, 2, return_indices=True), t(1, 2, 4, 4, 3))
sample("torch.nn.functional.interpolate", "interpolate", lambda x: (F.interpolate(x, scale_factor=2),
       F.interpolate(x, size=(5, 7), mode="bilinear"), F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
       F.interpolate(x, size=6, mode="nearest-exact"), torch.nn.Upsample(scale_factor=2, mode="bicubic")(x)),
       t(2, 3, 4, 4))
sample("torch.nn.functional.interpolate", "interpolate_1d_3d", lambda x, y: (F.interpolate(x, scale_factor=2, mode="linear"),
       F.interpolate(y, size=(4, 4, 6), mode="trilinear"), F.interpolate(x, size=3, mode="area")), t(2, 3, 6),
       t(1, 2, 2, 3, 3))
sample("torch.nn.functional.interpolate", "interpolate_cl_antialias", lambda x: F.interpolate(x, size=(3, 3),
       mode="bilinear", antialias=True), cl(2, 3, 8, 8), dtypes=ONLY_F32)
sample("torch.nn.functional.interpolate", "upsample", lambda x: F.upsample(x, scale_factor=2, mode="bilinear"), t(1, 2, 3, 3))
sample("torch.nn.functional.interpolate", "upsample_nearest", lambda x: F.upsample_nearest(x, scale_factor=2)
       + torch.nn.UpsamplingNearest2d(scale_factor=2)(x), t(1, 2, 3, 3))
sample("torch.nn.functional.interpolate", "upsample_bilinear", lambda x: F.upsample_bilinear(x, size=(5, 5))
       + torch.nn.UpsamplingBilinear2d(size=(5, 5))(x), t(1, 2, 3, 3))
sample("torch.nn.functional.grid_sample", "grid_sample", lambda x, g: (F.grid_sample(x, g, align_corners=False),
       F.grid_sample(x, g, mode="nearest", padding_mode="border", align_corners=True)), t(2, 3, 5, 5), t(2, 4, 4, 2),
       dtypes=ONLY_F32)
each("grid_sampler", {"torch.grid_sampler": lambda x, g: torch.grid_sampler(x, g, 0, 0, False),
                      "torch.grid_sampler_2d": lambda x, g: torch.grid_sampler_2d(x, g, 1, 1, True)},
     t(2, 3, 5, 5), t(2, 4, 4, 2), dtypes=ONLY_F32)
sample("torch.grid_sampler_3d", "grid_sampler_3d",
       lambda v, h: torch.grid_sampler_3d(v, h, 0, 2, False), t(1, 2, 3, 3, 3),
       t(1, 2, 2, 2, 3), dtypes=ONLY_F32)
sample("torch.ops.aten._upsample_bilinear2d_aa", "upsample_bilinear2d_aa",
       lambda x: torch.ops.aten._upsample_bilinear2d_aa(
       x, [3, 5], False, None), t(1, 2, 8, 9), dtypes=ONLY_F32)
each("fractional", {"torch.nn.functional.fractional_max_pool2d": lambda x, y: F.fractional_max_pool2d(x, 2, 3),
                    "torch.nn.functional.fractional_max_pool2d_with_indices": lambda x, y: F.fractional_max_pool2d(
                        x, 2, output_ratio=(0.5, 0.5), return_indices=True),
                    "torch.nn.functional.fractional_max_pool3d": lambda x, y: F.fractional_max_pool3d(y, 2, (2, 2, 1)),
                    "torch.nn.functional.fractional_max_pool3d_with_indices": lambda x, y: F.fractional_max_pool3d(
                        y, 2, 2, return_indices=True)},
     t(1, 2, 6, 6), t(1, 2, 5, 5, 4), dtypes=ONLY_F32, random=True)  # pooling regions drawn at random
sample("torch.ops.aten.max_pool2d_with_indices_backward.default", "max_pool2d_backward", lambda g, x, i: (
       torch.ops.aten.max_pool2d_with_indices_backward.default(g, x, [2, 2], [2, 2], [0, 0], [1, 1], False, i)),
       t(1, 2, 2, 2), t(1, 2, 4, 4), ints(1, 2, 2, 2, high=16), dtypes=ONLY_F32)
sample("torch.nn.functional.max_unpool1d", "max_unpool1d",
       lambda x: F.max_unpool1d(*F.max_pool1d(x, 2, return_indices=True),
       2), t(2, 3, 8))
sample("torch.nn.functional.max_unpool2d", "max_unpool2d_overlapping", lambda y: F.max_unpool2d(
       *F.max_pool2d(y, 3, 2, return_indices=True), 3, 2, output_size=(5, 6)), t(1, 2, 5, 6))  # an index written twice
sample("torch.nn.functional.max_unpool3d", "max_unpool3d", lambda z: torch.nn.MaxUnpool3d(2)(
       *F.max_pool3d(z, 2, return_indices=True)), t(1, 2, 4, 4, 2), dtypes=ONLY_F32)
