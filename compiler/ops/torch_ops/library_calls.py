"""Library calls: symbols with no decomposition, which executors run whole (matmul, linear,
SDPA, convolutions, ...)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from compiler.ops.torch_ops.registry import library


linear = library(F.linear)
matmul = library(torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__)
rmatmul = library(torch.Tensor.__rmatmul__, name="torch.Tensor.__rmatmul__")
bmm = library(torch.bmm, torch.Tensor.bmm)
mm = library(torch.mm, torch.Tensor.mm)
baddbmm = library(torch.baddbmm, torch.Tensor.baddbmm)
addmm = library(torch.addmm, torch.Tensor.addmm)
einsum = library(torch.einsum)
embedding = library(F.embedding)
sdpa = library(F.scaled_dot_product_attention)
conv1d = library(F.conv1d)
conv2d = library(F.conv2d)
