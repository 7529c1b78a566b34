"""Op samples: views and shape ops, factories.

Imported by tests/op_samples.py, in a fixed order: the order of SAMPLES (test ids, docs/ops.md).
"""

import torch
import torch.nn.functional as F

from samples_common import ONLY_F32, bools, ints, nt, sample, sl, t


# --- shapes ----------------------------------------------------------------------------------

sample("torch.Tensor.view", "view_neg1", lambda a: a.view(-1, 4) * 2 + a.view(12).view(3, 4).view(-1, 4), t(3, 4))
sample("torch.Tensor.view", "view_tuple", lambda a: a.view((2, 6)) + 1, t(3, 4))
sample("torch.reshape", "reshape_nc", lambda a: a.reshape(-1) + torch.reshape(a, (12,)) + a.reshape(2, 6).reshape(12),
       nt(3, 4))
sample("torch.reshape", "reshape_empty", lambda a: a.reshape(-1, 2) + 1, t(0, 4))
sample("torch.Tensor.view", "view_dtype", lambda a: a.view(torch.int32) + 1, t(3, 4), dtypes=ONLY_F32,
       decomposes=False, why_not="view as another dtype")
sample("torch.Tensor.view_as", "view_as", lambda a, b: a.view_as(b) + b, t(3, 4), t(2, 6))
sample("torch.flatten", "flatten", lambda a: torch.flatten(a) .sum() + a.flatten(1).sum(-1).sum(), t(2, 3, 4))
sample("torch.unflatten", "unflatten", lambda a: a.unflatten(-1, (2, -1)) + torch.unflatten(a, 1, (2, 2, 3)).reshape(
       2, 12).unflatten(1, (2, 6)), t(2, 12))
sample("torch.squeeze", "squeeze", lambda a: a.squeeze() + a.squeeze(1).squeeze(-1) + torch.squeeze(a, (1, 3)),
       t(3, 1, 4, 1))
sample("torch.squeeze", "squeeze_no_dims", lambda a: torch.squeeze(a, ()) * 2, t(1, 3, 1))
sample("torch.unsqueeze", "unsqueeze", lambda a: a.unsqueeze(0) + torch.unsqueeze(a, -1).transpose(0, 2), t(3, 3))
sample("torch.permute", "permute", lambda a: a.permute(2, 0, 1) + torch.permute(a, (2, 0, 1)) + a.permute((2, 0, 1)),
       t(2, 3, 4))
sample("torch.permute", "T_property", lambda a: a.T + a.mT.transpose(0, 1), t(3, 3))
sample("torch.transpose", "transpose", lambda a: a.transpose(0, 1) + torch.transpose(a, -1, -2)
       + torch.swapaxes(a, 0, 1) + a.swapaxes(1, 0), sl(4, 4))
sample("torch.transpose", "transpose_1d", lambda a: a.transpose(0, 0) * 2, t(4))
sample("torch.t", "t", lambda a: torch.t(a) + a.t() * 2, t(3, 3))
sample("torch.Tensor.expand", "expand", lambda a: a.expand(2, 3, 4) + a.expand(-1, 4) + a.expand((2, 3, 4)), t(3, 1))
sample("torch.broadcast_to", "broadcast_to", lambda a: torch.broadcast_to(a, (2, 3, 4)) + a.broadcast_to(3, 4), t(4))
sample("torch.Tensor.expand_as", "expand_as", lambda a, b: a.expand_as(b) * b, t(1, 4), t(3, 4))
sample("torch.Tensor.repeat", "repeat", lambda a: a.repeat(2, 3) + 1, t(2, 3))
sample("torch.Tensor.repeat", "repeat_more_dims", lambda a: a.repeat((2, 1, 2)) * 2, nt(2, 3))
sample("operator.getitem", "getitem_slice", lambda a: a[..., 1:3] + a[:, None][:, 0, 1:3] + a[1:2, ::2].sum(), t(3, 4))
sample("operator.getitem", "getitem_int", lambda a: a[0] + a[-1, :] + a[:, 2].sum() + a[1, 2], t(3, 4))
sample("operator.getitem", "getitem_none_ellipsis", lambda a: a[None, ..., None] * 2 + a[..., 0:1, None].sum(),
       t(2, 3, 4))
sample("operator.getitem", "getitem_nc", lambda a: a[1:, :2] * 2, nt(3, 4))
sample("operator.getitem", "getitem_empty", lambda a: a[2:2] + 1, t(3, 4))
sample("operator.getitem", "getitem_tensor_index", lambda a, i: a[i] * 2, t(5, 3), ints(4, high=5))
sample("operator.getitem", "getitem_bool_mask", lambda a, m: a[m] * 2, t(3, 4), bools(3, 4), dtypes=ONLY_F32,
       decomposes=False, why_not="a boolean mask")
sample("torch.narrow", "narrow", lambda a: a.narrow(1, 1, 2) + torch.narrow(a, -1, -3, 2), t(3, 4))
sample("torch.narrow", "narrow_tensor_start", lambda a, i: (a.narrow(1, i, 2), torch.narrow(a, 0, i - 3, 2)), t(3, 4),
       ints(low=0, high=2))  # where it starts is data: a take
sample("torch.ops.aten.slice.Tensor", "aten_slice", lambda a: (torch.ops.aten.slice.Tensor(a, 1, 1, -1),
       torch.ops.aten.slice.Tensor(a, 0, None, None, 2), torch.ops.aten.slice.Tensor(a, -1, 2, 100) * 2), t(3, 5))
sample("torch.select", "select", lambda a: a.select(1, 2) + torch.select(a, 0, -1).sum(), t(3, 3))
sample("torch.split", "split", lambda a: [x * 2 for x in a.split(2, dim=-1)] + list(torch.split(a, [1, 4], 1)),
       t(3, 5))
sample("torch.split", "split_unpack", lambda a: (lambda q, k, v: q @ k.transpose(0, 1) + v.sum())(*a.split(4, dim=1)),
       t(3, 12))
sample("torch.chunk", "chunk", lambda a: [x + 1 for x in a.chunk(3, 1)] + [x * 2 for x in torch.chunk(a, 2)], t(4, 7))
sample("torch.unbind", "unbind", lambda a: [x + 1 for x in a.unbind(1)] + [x * 2 for x in torch.unbind(a)], t(2, 3))
sample("torch.cat", "cat", lambda a, b: torch.cat([a, b], 1) + torch.concat((a, b), -1)
       + torch.concatenate([a, b], dim=1), t(3, 2), nt(3, 4))
sample("torch.cat", "cat_promote_empty", lambda a, b, e: torch.cat([a, b, e], 0), t(2, 3), ints(1, 3, dtype=torch.int32),
       t(0))
sample("torch.stack", "stack", lambda a, b: torch.stack([a, b]) + torch.stack((a, b), dim=-1).permute(2, 0, 1), t(3, 4),
       t(3, 4))
sample("torch.tril", "tril", lambda a: torch.tril(a) + a.tril(1) + a.tril(-1), t(4, 5))
sample("torch.tril", "tril_bool", lambda m: torch.tril(m) | m.triu(1), bools(4, 4))
sample("torch.triu", "triu", lambda a: torch.triu(a) + a.triu(2) + torch.triu(a, -1), t(2, 4, 3))

# --- factories -------------------------------------------------------------------------------

sample("torch.full", "full", lambda a: a + torch.full((3, 4), 2.5) + torch.full((4,), 3, dtype=a.dtype), t(3, 4))
sample("torch.ones", "ones", lambda a: a + torch.ones(3, 4) + torch.ones((4,), dtype=a.dtype), t(3, 4))
sample("torch.zeros", "zeros", lambda a: a + torch.zeros(3, 4) + torch.zeros((1, 4), dtype=torch.int64), t(3, 4))
sample("torch.ones_like", "ones_like", lambda a: a + torch.ones_like(a) + torch.ones_like(a, dtype=torch.float32),
       t(3, 4))
sample("torch.zeros_like", "zeros_like", lambda a: a - torch.zeros_like(a), nt(3, 4))
sample("torch.full_like", "full_like", lambda a: a * torch.full_like(a, 3.0), t(3, 4))
sample("torch.arange", "arange", lambda a: a + torch.arange(4) + torch.arange(1, 9, 2) + torch.arange(4, dtype=a.dtype),
       t(3, 4))
sample("torch.arange", "arange_keywords", lambda a: a + torch.arange(start=0, end=4) + torch.arange(1, end=5)
       + torch.arange(end=4) + torch.arange(start=-2, end=6, step=2), t(3, 4))
sample("torch.arange", "arange_float", lambda a: a + torch.arange(0.0, 2.0, 0.5), t(3, 4), dtypes=ONLY_F32,
       decomposes=False, why_not="float arange")
sample("torch.tril", "causal_mask", lambda a: a.masked_fill(torch.tril(torch.ones(4, 4, dtype=torch.bool)).logical_not(),
       float("-inf")).softmax(-1), t(2, 4, 4))
sample("torch.nn.functional.pixel_shuffle", "pixel_shuffle",
       lambda a: (F.pixel_shuffle(a, 2), torch.pixel_shuffle(a[0], 1),
       torch.nn.PixelShuffle(2)(a) * 2), t(2, 8, 3, 2))
sample("torch.nn.functional.pixel_unshuffle", "pixel_unshuffle", lambda a: (F.pixel_unshuffle(a, 2),
       torch.nn.PixelUnshuffle(3)(a[:, :, :6, :6])), t(2, 3, 6, 8))
sample("torch.nn.functional.channel_shuffle", "channel_shuffle", lambda a: (F.channel_shuffle(a, 2),
       torch.nn.ChannelShuffle(3)(a)), t(2, 6, 3, 2))
sample("torch.nn.functional.unfold", "unfold_im2col", lambda a: (F.unfold(a, 2), F.unfold(a, (2, 3), dilation=(1, 2),
       padding=1, stride=2), torch.nn.Unfold(3, padding=1)(a[0])), t(2, 3, 5, 6))
