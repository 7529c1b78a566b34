"""Library calls: symbols with no decomposition, which executors run whole (matmul, linear,
SDPA, convolutions, grouped and sparse matmuls, embedding bags, histograms, ...); bilinear is an
einsum with a bias."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fusionlens.ir.trace import OpTag
from fusionlens.ops.torch_ops import flops
from fusionlens.ops.torch_ops.registry import library, register, symbol_for

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
# a mixture of experts' matmul per group (no FLOPs formula or tensor-core tag yet: test_op_tags pins those sets)
grouped_mm = library(torch._grouped_mm)
embedding_bag = library(F.embedding_bag)
segment_reduce = library(torch.segment_reduce)
hash_tensor = library(torch.hash_tensor)
histogramdd = library(torch.histogramdd)
# sparse tensors: only torch's kernels take them (prims and fusion executors are for strided ones)
_SPARSE = torch._C._sparse  # type: ignore[attr-defined]  # torch's stubs lack the module
sparse_mm = library(_SPARSE._sparse_mm)
sparse_sampled_addmm = library(_SPARSE.sparse_sampled_addmm)
to_sparse = library(torch.Tensor.to_sparse, name="torch.Tensor.to_sparse")


@register(F.bilinear, torch.bilinear, name="torch.nn.functional.bilinear")
def bilinear(input1, input2, weight, bias=None):
    """y[..., o] = x1[..., i] W[o, i, j] x2[..., j] + b[o]: one einsum, then the bias."""
    out = einsum("...i,oij,...j->...o", input1, weight, input2)
    return out if bias is None else symbol_for(torch.add)(out, bias)
