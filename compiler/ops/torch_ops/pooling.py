"""Pooling. adaptive_avg_pool*d decomposes into a mean when each output cell averages whole,
equal windows (output size 1, global pooling, above all: the squeeze-and-excitation blocks
and classifier heads of CNNs); every other pooling op is a library call.

Why max_pool and avg_pool stay whole: as prims they would be one strided slice per kernel
offset (9 for 3x3) over a padded copy, and slices and pads are region boundaries, so the
decomposition would fuse nothing and read more memory than torch's kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from compiler.ops.torch_ops.reductions import mean
from compiler.ops.torch_ops.registry import NoDecomposition, library, register
from compiler.ops.torch_ops.shapes import reshape

# The library calls, for 1, 2 and 3 spatial dims. nn.MaxPool*d calls F.max_pool*d, or
# F.max_pool*d_with_indices with return_indices=True (F.adaptive_max_pool*d likewise);
# torch.max_pool*d (no return_indices) computes the same values as F.max_pool*d.
for _d in (1, 2, 3):
    library(getattr(F, f"max_pool{_d}d"), getattr(torch, f"max_pool{_d}d"))
    library(getattr(F, f"max_pool{_d}d_with_indices"))
    library(getattr(F, f"avg_pool{_d}d"))
    library(getattr(F, f"adaptive_max_pool{_d}d"))
    library(getattr(F, f"adaptive_max_pool{_d}d_with_indices"))


def _output_size(output_size, spatial: tuple) -> tuple:
    """The output's spatial sizes: an int means it for every dim, None keeps the input's."""
    sizes = (output_size,) * len(spatial) if isinstance(output_size, int) else tuple(output_size)
    if len(sizes) != len(spatial):
        raise NoDecomposition(f"output size {output_size!r} for {len(spatial)} spatial dims")
    return tuple(s if o is None else int(o) for o, s in zip(sizes, spatial))


def _adaptive_avg_pool(k: int):
    def decomposition(input, output_size):
        lead, spatial = tuple(input.shape[:-k]), tuple(input.shape[-k:])
        out = _output_size(output_size, spatial)
        if all(o == 1 for o in out):
            return mean(input, tuple(range(input.ndim - k, input.ndim)), True)
        if any(o == 0 or s % o for o, s in zip(out, spatial)):
            raise NoDecomposition(f"output size {out} does not divide the input's {spatial}")
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
