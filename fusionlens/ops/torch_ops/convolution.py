"""Convolutions: library calls (torch's kernels run them whole), known to the trace by name.

nn.Conv1d/2d/3d call torch.conv1d/2d/3d and nn.ConvTranspose*d torch.conv_transpose*d, the
same objects as torch.nn.functional's. conv1d and conv2d were registered first, in
library_calls; the rest of the family is here. Output shapes and dtypes are torch's own
(recorded from the traced call, or torch's meta kernels inside a decomposition).
"""

from __future__ import annotations

import torch.nn.functional as F

from fusionlens.ir.trace import OpTag
from fusionlens.ops.torch_ops import flops
from fusionlens.ops.torch_ops.registry import library

_CONV = (OpTag.CONVOLUTION,)

conv3d = library(F.conv3d, tags=_CONV, flops=flops.convolution)
conv_transpose1d = library(F.conv_transpose1d, tags=_CONV, flops=flops.transposed_convolution)
conv_transpose2d = library(F.conv_transpose2d, tags=_CONV, flops=flops.transposed_convolution)
conv_transpose3d = library(F.conv_transpose3d, tags=_CONV, flops=flops.transposed_convolution)
