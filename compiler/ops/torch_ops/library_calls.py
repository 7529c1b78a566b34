"""Library calls: symbols with no decomposition, which executors run whole (matmul, linear,
SDPA, convolutions, ...)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from compiler.ir import OpTag
from compiler.ops.torch_ops import flops
from compiler.ops.torch_ops.registry import library

_MM, _CONV = (OpTag.MATMUL,), (OpTag.CONVOLUTION,)  # which tensor-core precision rule they follow

linear = library(F.linear, tags=_MM, flops=flops.linear)
matmul = library(torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, tags=_MM, flops=flops.matmul)
rmatmul = library(torch.Tensor.__rmatmul__, name="torch.Tensor.__rmatmul__", tags=_MM, flops=flops.rmatmul)
bmm = library(torch.bmm, torch.Tensor.bmm, tags=_MM, flops=flops.matmul)
mm = library(torch.mm, torch.Tensor.mm, tags=_MM, flops=flops.matmul)
baddbmm = library(torch.baddbmm, torch.Tensor.baddbmm, tags=_MM, flops=flops.addmm)
addmm = library(torch.addmm, torch.Tensor.addmm, tags=_MM, flops=flops.addmm)
einsum = library(torch.einsum, tags=_MM, flops=flops.einsum)
embedding = library(F.embedding)
sdpa = library(F.scaled_dot_product_attention, tags=_MM, flops=flops.attention)
conv1d = library(F.conv1d, tags=_CONV, flops=flops.convolution)
conv2d = library(F.conv2d, tags=_CONV, flops=flops.convolution)
