"""Op samples: reductions.

Imported by tests/op_samples.py, in a fixed order: the order of SAMPLES (test ids, docs/ops.md).
"""

import torch

from samples_common import ONLY_F32, bools, ints, nt, sample, sl, t


# --- reductions ------------------------------------------------------------------------------

sample("torch.sum", "sum", lambda a: a.sum() + torch.sum(a, -1).sum(), t(3, 4))
sample("torch.sum", "sum_dims", lambda a: a.sum((0, 2), keepdim=True) * 2 + a.sum(dim=1, keepdim=True).sum(0), t(2, 3, 4))
sample("torch.sum", "sum_dtype", lambda a: a.sum(-1, dtype=torch.float32), t(3, 4))
sample("torch.sum", "sum_int_bool", lambda a, b: a.sum(1) + b.sum(), ints(3, 4), bools(3, 4), dtypes=ONLY_F32)
sample("torch.sum", "sum_nc_empty", lambda a, b: a.sum(0) + b.sum(0).sum(), nt(3, 4), t(0, 4))
sample("torch.mean", "mean", lambda a: a.mean() + torch.mean(a, 1, keepdim=True) + a.mean((0, 1)), t(3, 4))
sample("torch.mean", "mean_dtype", lambda a: a.mean(-1, dtype=torch.float32), sl(3, 4))
sample("torch.amax", "amax", lambda a: a.amax(-1) + torch.amax(a, (0, 1)) + a.amax(0, keepdim=True).sum(), t(3, 4))
sample("torch.amin", "amin", lambda a: a.amin(-1) + torch.amin(a, (0, 1)), nt(3, 4))
sample("torch.prod", "prod", lambda a: a.prod(-1) + torch.prod(a) + a.prod(0, keepdim=True).sum(), t(3, 4, low=0.5,
       high=1.5))
sample("torch.max", "max_dim", lambda a: a.max(dim=1), t(3, 5))
sample("torch.max", "max_dim_keepdim", lambda a: torch.max(a, -1, keepdim=True), nt(3, 5))
sample("torch.max", "max_unpack", lambda a: (lambda v, i: v * 2 + i)(*a.max(0)), t(4, 3))
sample("torch.max", "max_all_and_binary", lambda a, b: a.max() + torch.max(a, b), t(3, 4), t(4))
sample("torch.min", "min_dim", lambda a: a.min(dim=0), t(3, 5))
sample("torch.min", "min_all_and_binary", lambda a, b: torch.min(a) + a.min(b), t(3, 4), t(3, 4))
sample("torch.argmax", "argmax", lambda a: a.argmax() + torch.argmax(a, 1) + a.argmax(0, keepdim=True), t(4, 4))
sample("torch.argmin", "argmin", lambda a: a.argmin(-1) + torch.argmin(a), t(3, 4))
sample("torch.var_mean", "var_mean", lambda a: torch.var_mean(a, -1), t(3, 8))
sample("torch.var_mean", "var_mean_correction", lambda a: torch.var_mean(a, (0, 1), correction=0, keepdim=True), t(3, 8))
sample("torch.var", "var", lambda a: a.var() + torch.var(a, 1, keepdim=True) + a.var(0, unbiased=False).sum()
       + a.var(-1, correction=2).sum(), t(4, 8))
sample("torch.std", "std", lambda a: a.std(-1) + torch.std(a, 1, unbiased=False) + a.std(1, correction=0), nt(3, 8))
sample("torch.logsumexp", "logsumexp", lambda a: torch.logsumexp(a, -1) + a.logsumexp((0, 1), keepdim=True).sum(),
       t(3, 5))
sample("torch.logsumexp", "logsumexp_inf_rows", lambda a: torch.logsumexp(torch.cat([a, a[:1] * 0 - float("inf"),
       a[:1] * 0 + float("inf")]), -1), t(3, 5))
sample("torch.sum", "sum_int32_dtype", lambda a: a.sum(-1, dtype=torch.int32) + a.sum(dtype=torch.int32), ints(3, 4),
       dtypes=ONLY_F32)
sample("torch.prod", "prod_int32", lambda a: a.prod(-1), ints(3, 4, low=1, high=4, dtype=torch.int32), dtypes=ONLY_F32)
sample("torch.linalg.vector_norm", "vector_norm", lambda a: torch.linalg.vector_norm(a) + torch.linalg.vector_norm(
       a, dim=-1).sum(), t(3, 4))
sample("torch.linalg.vector_norm", "vector_norm_ords", lambda a: (torch.linalg.vector_norm(a, 1),
       torch.linalg.vector_norm(a, float("inf"), -1), torch.linalg.vector_norm(a, -float("inf"), 0, True),
       torch.linalg.vector_norm(a * (a > 0), 0, 1), torch.linalg.vector_norm(a, 3.5, dtype=torch.float64),
       torch.linalg.vector_norm(a, 2, 1, dtype=torch.float32)), t(3, 4))
sample("torch.argmax", "argmax_0d", lambda a: (a.argmax(), torch.argmax(a, 0, keepdim=True), torch.argmin(a, -1)), t())
