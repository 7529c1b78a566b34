"""Resampling: interpolate and grid sampling, library calls (torch's kernels run them whole); aten's
antialiased bilinear upsampling (what interpolate(antialias=True) calls) likewise. nn.Upsample,
nn.UpsamplingNearest2d/Bilinear2d and the deprecated F.upsample* functions all call it; those
functions are plain Python that never reach a TorchFunctionMode, so interpolate is what the
frontend records for them."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fusionlens.ops.torch_ops.registry import library

interpolate = library(F.interpolate)
grid_sample = library(F.grid_sample)
# each its own symbol: their arguments differ (modes as ints), so they are no aliases of F.grid_sample
grid_sampler = library(torch.grid_sampler)
grid_sampler_2d = library(torch.grid_sampler_2d)
grid_sampler_3d = library(torch.grid_sampler_3d)
upsample_bilinear2d_aa = library(torch.ops.aten._upsample_bilinear2d_aa, name="torch.ops.aten._upsample_bilinear2d_aa")
