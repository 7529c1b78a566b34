"""Resampling: interpolate, a library call (torch's kernels run it whole). nn.Upsample,
nn.UpsamplingNearest2d/Bilinear2d and the deprecated F.upsample* functions all call it; those
functions are plain Python that never reach a TorchFunctionMode, so interpolate is what the
frontend records for them."""

from __future__ import annotations

import torch.nn.functional as F

from compiler.ops.torch_ops.registry import library

interpolate = library(F.interpolate)
