"""Op samples: in-place ops (traced as new values); indexing and layout ops.

Imported by tests/op_samples.py, in a fixed order: the order of SAMPLES (test ids, docs/ops.md).
"""

import torch
import torch.nn.functional as F

from samples_common import FLOATS_OR_SKIP, ONLY_F32, bools, each, ints, nt, sample, t


# --- in-place ops (traced as new values) ----------------------------------------------------


def _iadd(x, y):
    x = x.clone()
    x += y
    return x


def _add_(x, y):
    x = x * 1
    x.add_(y).mul_(2)
    return x


def _setitem(x):
    x = x.clone()
    x[..., 0] = 1
    return x * 2


def _inplace_input(x, y):
    x += y
    return x * 2


sample("torch.add", "inplace_iadd", _iadd, t(3, 4), t(4))
sample("torch.add", "inplace_add_", _add_, t(3, 4), t(3, 4))
sample("torch.nn.functional.relu", "inplace_relu", lambda x: F.relu(x * 1, inplace=True) + 1, t(3, 4))
sample("setitem", "inplace_setitem", _setitem, t(3, 4))
sample("torch.add", "inplace_on_input", _inplace_input, t(3, 4), t(3, 4))


# --- indexing, layout, special functions, scans, linear algebra, creation ------------------


# One sample a symbol of fusionlens/ops/torch_ops/{indexing,layout,special,statistics,scans,
# linalg,spectral,creation}.py, calling each torch callable it maps (function and method).


def _setitem_cases(x, i, m):
    x = x.clone()
    x[1:3, 0] = 2.0
    x[i] = x[0] * 3
    x[m] = 0.5
    return x


sample("operator.getitem", "getitem_tensor_dims", lambda a, i, j: (a[:, i], a[0, i], a[i, :, 0], a[..., j], a[i, j],
       a[[0, 2]], a[:, [3, 0, 1]], a[1:, i, ::2]), t(3, 4, 5), ints(2, 2, low=-3, high=3), ints(2, high=3))
sample("setitem", "setitem_tensor_keys", _setitem_cases, t(4, 3), ints(2, high=4), bools(4, 3), dtypes=FLOATS_OR_SKIP)
sample("torch.index_select", "index_select", lambda a, i: torch.index_select(a, 1, i) + a.index_select(-1, i), t(3, 5),
       ints(4, high=5))
sample("torch.index_select", "index_select_0d", lambda a, i: torch.index_select(a, 0, i) * 2, t(), ints(1, high=1))
sample("torch.gather", "gather", lambda a, i: torch.gather(a, 1, i) + a.gather(1, i), t(3, 5), ints(2, 3, high=5))
sample("torch.take_along_dim", "take_along_dim", lambda a, i: (torch.take_along_dim(a, i, 1), a.take_along_dim(i)),
       t(3, 5), ints(1, 2, high=5))
sample("torch.take", "take", lambda a, i: torch.take(a, i) + a.take(i), t(3, 5), ints(2, 2, low=-15, high=15))
sample("torch.masked_select", "masked_select", lambda a, m: (torch.masked_select(a, m), a.masked_select(m)), t(3, 4),
       bools(3, 4))
sample("torch.nonzero", "nonzero", lambda a: (torch.nonzero(a > 0), (a > 0).nonzero()), t(3, 4))
sample("torch.nonzero_static", "nonzero_static", lambda a: (torch.nonzero_static(a > 0, size=5),
       (a > 0).nonzero_static(size=3)), t(3, 4))
sample("torch.argwhere", "argwhere", lambda a: (torch.argwhere(a > 0), a.argwhere()), t(3, 4))
sample("torch.masked_scatter", "masked_scatter", lambda a, m, s: torch.masked_scatter(a, m, s) + a.masked_scatter(m, s),
       t(3, 4), bools(3, 4), t(12))
sample("torch.index_put", "index_put", lambda a, i, v: torch.index_put(a, (i,), v) + a.index_put((i,), v, True),
       t(5, 3), ints(2, high=5), t(3))
sample("torch.index_add", "index_add", lambda a, i, s: torch.index_add(a, 0, i, s) + a.index_add(0, i, s, alpha=2),
       t(5, 3), ints(2, high=5), t(2, 3))
sample("torch.index_copy", "index_copy", lambda a, s: torch.index_copy(a, 0, torch.tensor([3, 1]), s)
       + a.index_copy(0, torch.tensor([0, 4]), s), t(5, 3), t(2, 3))
sample("torch.index_fill", "index_fill", lambda a, i: torch.index_fill(a, 1, i, -1.0) + a.index_fill(0, i, 2.0),
       t(3, 3), ints(2, high=3))
sample("torch.index_reduce", "index_reduce", lambda a, i, s: torch.index_reduce(a, 0, i, s, "amax")
       + a.index_reduce(0, i, s, "prod", include_self=False), t(5, 3), ints(4, high=5), t(4, 3))
sample("torch.scatter", "scatter", lambda a, i, s: torch.scatter(a, 1, i, s) + a.scatter(1, i, 0.5)
       + a.scatter(1, i, s, reduce="add"), t(3, 5), ints(3, 2, high=5), t(3, 2))
sample("torch.scatter_add", "scatter_add", lambda a, i, s: torch.scatter_add(a, 0, i, s) + a.scatter_add(0, i, s),
       t(3, 4), ints(2, 4, high=3), t(2, 4))
sample("torch.scatter_reduce", "scatter_reduce", lambda a, i, s: torch.scatter_reduce(a, 0, i, s, "amax")
       + a.scatter_reduce(0, i, s, "mean", include_self=False), t(3, 4), ints(2, 4, high=3), t(2, 4))
sample("torch.put", "put", lambda a, i, s: torch.put(a, i, s) + a.put(i, s, accumulate=True), t(3, 4),
       ints(3, high=12), t(3))
sample("torch.diagonal_scatter", "diagonal_scatter", lambda a, s: torch.diagonal_scatter(a, s, 1)
       + a.diagonal_scatter(s[:2], -1) + a.diagonal_scatter(s[:2], 1, 1, 0), t(3, 4), t(3))
sample("torch.as_strided_scatter", "as_strided_scatter", lambda a, s: torch.as_strided_scatter(a, s, (2, 2), (1, 2)),
       t(3, 4), t(2, 2))
sample("torch.slice_scatter", "slice_scatter", lambda a, s, u: torch.slice_scatter(a, s, 1, 1, 3)
       + a.slice_scatter(u, 0, 2), t(3, 4), t(3, 2), t(1, 4))
sample("torch.slice_scatter", "slice_scatter_step", lambda a, s, u: (torch.slice_scatter(a, s, 1, 1, None, 2),
       a.slice_scatter(u, 0, 0, 3, 2)), t(3, 5), t(3, 2), t(2, 5))
sample("torch._unsafe_masked_index", "unsafe_masked_index", lambda a, m, i, j: torch._unsafe_masked_index(
       a, m, [i, j], -1.5), t(4, 5), bools(6, 6), ints(6, 1, low=-2, high=6), ints(1, 6, high=7), dtypes=ONLY_F32)
sample("torch._unsafe_masked_index_put_accumulate", "unsafe_masked_index_put_accumulate",
       lambda a, m, i, j, v: torch._unsafe_masked_index_put_accumulate(a, m, [i, j], v), t(4, 5), bools(6, 6),
       ints(6, 1, high=4), ints(1, 6, high=5), t(6, 6), dtypes=ONLY_F32)
sample("torch.select_scatter", "select_scatter", lambda a, s: torch.select_scatter(a, s, 0, -1) + a.select_scatter(
       s[:3], 1, 0), t(3, 4), t(4))
sample("torch.flip", "flip", lambda a: torch.flip(a, (0, 2)) + a.flip(1) + a.flip(0, 1), nt(2, 3, 3))
sample("torch.fliplr", "fliplr", lambda a: torch.fliplr(a) + a.fliplr(), t(3, 4))
sample("torch.flipud", "flipud", lambda a: torch.flipud(a) + a.flipud(), t(3, 4))
sample("torch.diff", "diff", lambda a, p: (torch.diff(a), a.diff(2, 0), torch.diff(a, dim=1, prepend=p, append=p),
       torch.diff(a > 0)), t(3, 4), t(3, 1))
sample("torch.nn.functional.pad", "pad_constant", lambda a: (F.pad(a, (1, 2)), F.pad(a, (0, 1, 2, 0), value=1.5),
       F.pad(a, (-1, 2, 1, -1)), F.pad(a, (0, 0)) * 2), t(3, 4))
sample("torch.nn.functional.pad", "pad_reflect", lambda a: (F.pad(a, (1, 2), mode="reflect"),
       F.pad(a, (2, 1, 1, 0), "reflect"), F.pad(a, (-1, 2), "reflect")), t(2, 3, 4))
sample("torch.nn.functional.pad", "pad_replicate_circular", lambda a, v: (F.pad(a, (3, 1), "replicate"),
       F.pad(a, (0, 2, -1, 1), mode="replicate"), F.pad(a, (1, 2, 2, 0), "circular"), F.pad(v, (1, 1, 1, 1, 1, 1),
       "replicate"), torch.nn.ReflectionPad2d(1)(a)), t(2, 3, 4), t(1, 2, 2, 3, 3))
sample("torch.roll", "roll", lambda a: torch.roll(a, 1) + a.roll((1, -2), (0, 1)) + a.roll(5, 1), t(3, 4))
sample("torch.movedim", "movedim", lambda a: torch.movedim(a, 0, -1) + torch.moveaxis(a, (0, 1), (2, 0)).permute(
       1, 2, 0).movedim(2, 0).moveaxis(0, 2), t(2, 2, 2))
sample("torch.atleast_1d", "atleast_1d", lambda a, b: (torch.atleast_1d(a), torch.atleast_1d(a, b)), t(), t(3))
sample("torch.atleast_2d", "atleast_2d", lambda a, b: (torch.atleast_2d(a), torch.atleast_2d((a, b))), t(3), t())
sample("torch.atleast_3d", "atleast_3d", lambda a, b: torch.atleast_3d(a, b), t(3), t(2, 3))
sample("torch.hstack", "hstack", lambda a, b: (torch.hstack([a, b]), torch.hstack((a[0], b[0]))), t(3, 2), t(3, 4))
sample("torch.vstack", "vstack", lambda a, b: torch.vstack([a, b]) + torch.row_stack((a, b)), t(4), t(2, 4))
sample("torch.dstack", "dstack", lambda a, b: torch.dstack([a, b]), t(2, 3), t(2, 3, 2))
sample("torch.column_stack", "column_stack", lambda a, b: torch.column_stack([a, b]), t(3), t(3, 2))
sample("torch.tile", "tile", lambda a: (torch.tile(a, (2,)), a.tile(1, 1), a.tile((2, 1, 1))), t(2, 3))
sample("torch.ravel", "ravel", lambda a: torch.ravel(a) + a.ravel(), nt(3, 4))
sample("torch.Tensor.reshape_as", "reshape_as", lambda a, b: a.reshape_as(b) + b, nt(3, 4), t(2, 6))
sample("torch.tensor_split", "tensor_split", lambda a: torch.tensor_split(a, 3, 1) + a.tensor_split([1, -2, 9], 1),
       t(3, 7))
sample("torch.hsplit", "hsplit", lambda a: torch.hsplit(a, 2) + a.hsplit([1, 3]), t(3, 4))
sample("torch.vsplit", "vsplit", lambda a: torch.vsplit(a, 2) + a.vsplit([1]), t(4, 3))
sample("torch.dsplit", "dsplit", lambda a: torch.dsplit(a, 2) + a.dsplit([1]), t(2, 3, 4))
sample("torch.split_with_sizes", "split_with_sizes", lambda a: torch.split_with_sizes(a, [1, 3], 1)
       + a.split_with_sizes([2, 2], -1) + torch.unsafe_split_with_sizes(a, [2, 1]) + torch.split_with_sizes_copy(
       a, [1, 2]), t(3, 4))
sample("torch.unsafe_split", "unsafe_split", lambda a: torch.unsafe_split(a, 2, 1) + a.unsafe_split(2), t(3, 4))
sample("torch.unsafe_chunk", "unsafe_chunk", lambda a: torch.unsafe_chunk(a, 2, 1) + a.unsafe_chunk(3), t(3, 4))
sample("torch.broadcast_tensors", "broadcast_tensors", lambda a, b: torch.broadcast_tensors(a, b), t(3, 1), t(4))
sample("torch.meshgrid", "meshgrid", lambda a, b, c: torch.meshgrid(a, b, indexing="ij") + torch.meshgrid(
       [a, b, c], indexing="xy"), t(3), t(4), t(2))
sample("torch.gradient", "gradient", lambda a, b: (torch.gradient(a), torch.gradient(a, spacing=2.0, dim=1),
       torch.gradient(a, spacing=[0.5, 2], edge_order=2), torch.gradient(b, dim=(0,))), t(4, 5), t(6))
sample("torch.adjoint", "adjoint", lambda a: torch.adjoint(a) + a.adjoint() * 2, t(2, 3, 4))
sample("torch.ops.aten.resize.default", "resize", lambda a: (torch.ops.aten.resize.default(a, [2, 5]),
       torch.ops.aten.resize_as.default(a, a[0])), t(3, 4), dtypes=ONLY_F32)  # x.resize_(...), x.resize_as_(y)
sample("torch.ops.aten.resize_as.default", "resize_as",
       lambda a, b: torch.ops.aten.resize_as.default(a, b) * 2, t(3, 4),
       t(6), dtypes=ONLY_F32)


def _copy_(a, b, c):
    """x.copy_(src) through views (written back into the base) and whole, src broadcast and cast."""
    x = a * 1
    x[1:, :2].copy_(b)
    x[:, 3].copy_(c[:3])
    return x, a.clone().copy_(c), torch.ops.aten.copy.default(a, c)


def _fill_(a, v):
    """x.fill_(value) with a number and a 0-dim tensor, through views and whole."""
    x = a * 1
    x[:, 1].fill_(2.5)
    x[0, ::2].fill_(v)
    return x, a.clone().fill_(v), torch.ops.aten.fill.Scalar(a, -0.5), torch.ops.aten.fill.Tensor(a, v)


sample("torch.ops.aten.copy.default", "copy_", _copy_, t(3, 4), t(2, 2), ints(4, high=5))
sample("torch.ops.aten.fill", "fill_", _fill_, t(3, 4), t())
sample("torch.Tensor.sum_to_size", "sum_to_size", lambda a: (a.sum_to_size(3, 1), a.sum_to_size((1, 4)),
       a.sum_to_size(4)), t(2, 3, 4))
each("copy", {
    "torch.expand_copy": lambda a: torch.expand_copy(a, (2, 3, 4)), "torch.permute_copy": lambda a: torch.permute_copy(
        a, (1, 0)), "torch.squeeze_copy": lambda a: torch.squeeze_copy(a[None]),
    "torch.unsqueeze_copy": lambda a: torch.unsqueeze_copy(a, 1), "torch.t_copy": lambda a: torch.t_copy(a),
    "torch.transpose_copy": lambda a: torch.transpose_copy(a, 0, 1),
    "torch.view_copy": lambda a: torch.view_copy(a, (12,)),
    "torch.unbind_copy": lambda a: torch.unbind_copy(a), "torch.alias_copy": lambda a: torch.alias_copy(a) * 2,
    "torch.narrow_copy": lambda a: (torch.narrow_copy(a, 1, 1, 2), a.narrow_copy(0, 0, 2))}, t(3, 4))
each("diags", {
    "torch.diagonal": lambda a, v: (torch.diagonal(a), a.diagonal(1)), "torch.diagonal_copy": lambda a, v:
    torch.diagonal_copy(a, -1), "torch.linalg.diagonal": lambda a, v: torch.linalg.diagonal(a),
    "torch.diag": lambda a, v: (torch.diag(a), a.diag(1), torch.diag(v)), "torch.diag_embed": lambda a, v: (
        torch.diag_embed(v), v.diag_embed(1)), "torch.diagflat": lambda a, v: (torch.diagflat(a), a.diagflat())},
     t(3, 4), t(3))
sample("torch.block_diag", "block_diag", lambda a, b: torch.block_diag(a, b), t(2, 2), t(1, 3))
each("unfold", {"torch.Tensor.unfold": lambda a: a.unfold(1, 2, 1),
                 "torch.unfold_copy": lambda a: torch.unfold_copy(a, 0, 2, 1)}, t(3, 4))
each("strided", {"torch.as_strided": lambda a: (torch.as_strided(a, (2, 2), (1, 2)), a.as_strided((3,), (2,))),
                  "torch.as_strided_copy": lambda a: torch.as_strided_copy(a, (2,), (3,))}, t(3, 4))
sample("torch.rot90", "rot90", lambda a: torch.rot90(a) + a.rot90(2).rot90(2), t(3, 3))
sample("torch.repeat_interleave", "repeat_interleave", lambda a, r: (torch.repeat_interleave(a, 2, 0),
       a.repeat_interleave(r, dim=1)), t(2, 3), ints(3, low=1, high=3))
sample("torch.constant_pad_nd", "constant_pad_nd", lambda a: torch.constant_pad_nd(a, (1, 2), 0.5), t(3, 4))
sample("torch.cartesian_prod", "cartesian_prod", lambda a, b: torch.cartesian_prod(a, b), t(3), t(2))
sample("torch.combinations", "combinations", lambda a: torch.combinations(a, 2), t(4))
sample("torch._chunk_cat", "chunk_cat", lambda a, b: torch._chunk_cat([a, b], 1, 2), t(2, 4), t(2, 2),
       dtypes=FLOATS_OR_SKIP)
