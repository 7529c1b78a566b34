"""Pooling. adaptive_avg_pool*d decomposes into a mean when each output cell averages whole,
equal windows (output size 1, global pooling, above all: the squeeze-and-excitation blocks
and classifier heads of CNNs), and into masked sums over a table of windows otherwise;
max_unpool*d is a scatter into zeros; every other pooling op is a library call.

Why max_pool and avg_pool stay whole: as prims they would be one strided slice per kernel
offset (9 for 3x3) over a padded copy, and slices and pads are region boundaries, so the
decomposition would fuse nothing and read more memory than torch's kernel.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fusionlens.ir.trace import OpTag
from fusionlens.ops import prims
from fusionlens.ops.torch_ops.common import cast
from fusionlens.ops.torch_ops.reductions import mean
from fusionlens.ops.torch_ops.registry import NoDecomposition, library, register, symbol_for
from fusionlens.ops.torch_ops.shapes import reshape

# The library calls, for 1, 2 and 3 spatial dims. nn.MaxPool*d calls F.max_pool*d, or
# F.max_pool*d_with_indices with return_indices=True (F.adaptive_max_pool*d likewise);
# torch.max_pool*d (no return_indices) computes the same values as F.max_pool*d.
for _d in (1, 2, 3):
    library(getattr(F, f"max_pool{_d}d"), getattr(torch, f"max_pool{_d}d"))
    library(getattr(F, f"max_pool{_d}d_with_indices"))
    library(getattr(F, f"avg_pool{_d}d"))
    library(getattr(F, f"adaptive_max_pool{_d}d"))
    library(getattr(F, f"adaptive_max_pool{_d}d_with_indices"))
for _d in (2, 3):  # pooling regions drawn at random
    library(getattr(F, f"fractional_max_pool{_d}d"), tags=(OpTag.RANDOM,))
    library(getattr(F, f"fractional_max_pool{_d}d_with_indices"), tags=(OpTag.RANDOM,))
max_pool2d_backward = library(torch.ops.aten.max_pool2d_with_indices_backward.default,
                              name="torch.ops.aten.max_pool2d_with_indices_backward.default")


def _output_size(output_size, spatial: tuple) -> tuple:
    """The output's spatial sizes: an int means it for every dim, None keeps the input's."""
    sizes = (output_size,) * len(spatial) if isinstance(output_size, int) else tuple(output_size)
    if len(sizes) != len(spatial):
        raise NoDecomposition(f"output size {output_size!r} for {len(spatial)} spatial dims")
    return tuple(s if o is None else int(o) for o, s in zip(sizes, spatial))


def _adaptive_mean_along(x, d: int, out: int):
    """x averaged along dim d into `out` cells: cell o averages elements
    [floor(o L / out), ceil((o + 1) L / out)), as torch's adaptive pooling. A masked sum over
    a (out, L) window table, divided by each window's size."""
    length = x.shape[d]
    iota = lambda n: prims.iota(n, start=0, step=1, dtype=torch.int64, device=x.device)  # noqa: E731
    o = prims.broadcast_in_dim(iota(out), (out, length), (0,))
    pos = prims.broadcast_in_dim(iota(length), (out, length), (1,))
    # pos >= floor(o L / out)  <=>  (pos + 1) out > o L;  pos < ceil((o + 1) L / out)  <=>  pos out < (o + 1) L
    inside = prims.bitwise_and(prims.gt(prims.mul(prims.add(pos, 1), out), prims.mul(o, length)),
                               prims.lt(prims.mul(pos, out), prims.mul(prims.add(o, 1), length)))
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    count = prims.sum(prims.convert_element_type(inside, compute), (1,))
    shape = tuple(x.shape[:d]) + (out,) + tuple(x.shape[d:])
    spread = prims.broadcast_in_dim(cast(x, compute), shape, tuple(i if i < d else i + 1 for i in range(x.ndim)))
    total = prims.sum(prims.where(prims.broadcast_in_dim(inside, shape, (d, d + 1)), spread, 0.0), (d + 1,))
    return cast(prims.div(total, prims.broadcast_in_dim(count, total.shape, (d,))), x.dtype)


def _adaptive_avg_pool(k: int):
    def decomposition(input, output_size):
        lead, spatial = tuple(input.shape[:-k]), tuple(input.shape[-k:])
        out = _output_size(output_size, spatial)
        if all(o == 1 for o in out):
            return mean(input, tuple(range(input.ndim - k, input.ndim)), True)
        if any(o == 0 or s == 0 for o, s in zip(out, spatial)):
            raise NoDecomposition(f"output size {out} of an input of size {spatial}")
        if any(s % o for o, s in zip(out, spatial)):  # windows of unequal sizes, which may overlap
            x = input
            for i, (o, s) in enumerate(zip(out, spatial)):
                if o != s:  # a cell an element: the dim as it is
                    x = _adaptive_mean_along(x, input.ndim - k + i, o)
            return x
        # cell i of a dim averages input[i*w:(i+1)*w] where w = size // out: split each
        # spatial dim into (out, w) and average over the w dims
        split = lead + tuple(d for o, s in zip(out, spatial) for d in (o, s // o))
        window_dims = tuple(len(lead) + 2 * i + 1 for i in range(k))
        return mean(reshape(input, split), window_dims)

    decomposition.__name__ = f"adaptive_avg_pool{k}d"
    return decomposition


adaptive_avg_pool1d = register(F.adaptive_avg_pool1d)(_adaptive_avg_pool(1))
adaptive_avg_pool2d = register(F.adaptive_avg_pool2d)(_adaptive_avg_pool(2))
adaptive_avg_pool3d = register(F.adaptive_avg_pool3d)(_adaptive_avg_pool(3))


def _unpool_size(input, k: int, kernel_size, stride, padding, output_size) -> tuple:
    """The output's spatial sizes, as F._unpool_output_size computes them."""
    tup = lambda v: (v,) * k if isinstance(v, int) else tuple(v)  # noqa: E731
    kernel = tup(kernel_size)
    step = kernel if stride is None else tup(stride)
    pad = tup(padding)
    if output_size is not None:
        return tuple(output_size)[-k:]
    return tuple((input.shape[input.ndim - k + i] - 1) * step[i] + kernel[i] - 2 * pad[i] for i in range(k))


def _max_unpool(k: int):
    def decomposition(input, indices, kernel_size, stride=None, padding=0, output_size=None):
        """Each value written at its index (flat within its plane) of a zero plane: a scatter,
        which runs whole (the last write of an index wins, as in torch's kernel)."""
        size = _unpool_size(input, k, kernel_size, stride, padding, output_size)
        lead = tuple(input.shape[:-k])
        flat = lead + (math.prod(input.shape[-k:]),)
        planes = prims.full(lead + (math.prod(size),), 0.0, dtype=input.dtype, device=input.device)
        index = reshape(cast(indices, torch.int64), flat)
        written = symbol_for(torch.scatter)(planes, len(lead), index, reshape(input, flat))
        return reshape(written, lead + size)

    decomposition.__name__ = f"max_unpool{k}d"
    return decomposition


max_unpool1d = register(F.max_unpool1d)(_max_unpool(1))
max_unpool2d = register(F.max_unpool2d)(_max_unpool(2))
max_unpool3d = register(F.max_unpool3d)(_max_unpool(3))
