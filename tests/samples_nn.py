"""Op samples: normalisation, softmax and losses; library calls (linear, conv, ...); pooling and resampling.

Imported by tests/op_samples.py, in a fixed order: the order of SAMPLES (test ids, docs/ops.md).
"""

import torch
import torch.nn.functional as F

from samples_common import BF16, F16, F32, ONLY_F32, bools, cl, ints, nt, pos, sample, sl, t


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
sample("torch.nn.functional.normalize", "normalize_p1", lambda a: F.normalize(a, p=1.0), t(3, 4), dtypes=ONLY_F32,
       decomposes=False, why_not="p=1")
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
       lambda a, y: F.cross_entropy(a, y, label_smoothing=0.1), t(6, 5), ints(6, high=5), dtypes=ONLY_F32,
       decomposes=False, why_not="label smoothing")
sample("torch.nn.functional.mse_loss", "mse_loss", lambda a, b: F.mse_loss(a, b) + F.mse_loss(a, b, reduction="sum")
       + F.mse_loss(a, b, reduction="none").sum(), t(3, 4), t(3, 4))


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
sample("torch.nn.functional.adaptive_avg_pool1d", "adaptive_avg_pool1d_uneven", lambda x: F.adaptive_avg_pool1d(x, 3),
       t(2, 3, 8), dtypes=ONLY_F32, decomposes=False, why_not="does not divide")
sample("torch.nn.functional.adaptive_avg_pool2d", "adaptive_avg_pool2d_global", lambda x, y: F.adaptive_avg_pool2d(x, 1)
       + torch.nn.AdaptiveAvgPool2d((1, 1))(x) + F.adaptive_avg_pool2d(y, (1, 1)).sum(), t(2, 3, 5, 7), t(3, 4, 4))
sample("torch.nn.functional.adaptive_avg_pool2d", "adaptive_avg_pool2d_divides", lambda x: (F.adaptive_avg_pool2d(x, (2, 3)),
       F.adaptive_avg_pool2d(x, (None, 2)), F.adaptive_avg_pool2d(x, (4, 6))), t(2, 3, 4, 6))
sample("torch.nn.functional.adaptive_avg_pool2d", "adaptive_avg_pool2d_cl_empty", lambda x, e: (F.adaptive_avg_pool2d(x, 1),
       F.adaptive_avg_pool2d(x, 2), F.adaptive_avg_pool2d(e, 1)), cl(2, 3, 4, 4), t(0, 3, 4, 4))
sample("torch.nn.functional.adaptive_avg_pool2d", "adaptive_avg_pool2d_uneven", lambda x: F.adaptive_avg_pool2d(x, (3, 2)),
       t(2, 3, 7, 4), dtypes=ONLY_F32, decomposes=False, why_not="does not divide")
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
