"""Summaries beyond reductions.py, as decompositions over its reductions: all and any,
count_nonzero, the NaN-ignoring nansum and nanmean, aminmax and std_mean; covariance and
correlation run whole."""

from __future__ import annotations

import torch

from fusionlens.ops import prims
from fusionlens.ops.torch_ops.common import _dims, _is_float, cast
from fusionlens.ops.torch_ops.pointwise import div, eq, gt, isnan, ne, where
from fusionlens.ops.torch_ops.reductions import amax, amin, sqrt_of_variance, sum, var_mean
from fusionlens.ops.torch_ops.registry import NoDecomposition, library, register


def _count(mask, dim, keepdim):
    return sum(cast(mask, torch.int64), dim, keepdim)


def _all_any(test, expect):
    def decomposition(input, dim=None, keepdim=False):
        if input.dtype == torch.uint8:
            raise NoDecomposition("uint8 (torch returns uint8)")
        misses = _count(test(input, 0), dim, keepdim)
        return eq(misses, 0) if expect else gt(misses, 0)
    return decomposition


all = register(torch.all, torch.Tensor.all)(_all_any(eq, True))  # noqa: A001  (no zero: all true)
any = register(torch.any, torch.Tensor.any)(_all_any(ne, False))  # noqa: A001  (some non-zero)


@register(torch.count_nonzero, torch.Tensor.count_nonzero)
def count_nonzero(input, dim=None):
    return _count(ne(input, 0), dim, False)


@register(torch.nansum, torch.Tensor.nansum)
def nansum(input, dim=None, keepdim=False, *, dtype=None):
    x = where(isnan(input), 0, input) if _is_float(input.dtype) else input
    return sum(x, dim, keepdim, dtype=dtype)


@register(torch.nanmean, torch.Tensor.nanmean)
def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    if not _is_float(input.dtype) or input.dtype.is_complex:
        raise NoDecomposition("not a real floating-point tensor")
    present = _count(prims.logical_not(isnan(input)), dim, keepdim)
    return div(nansum(input, dim, keepdim, dtype=dtype), cast(present, dtype or input.dtype))


@register(torch.aminmax, torch.Tensor.aminmax)
def aminmax(input, *, dim=None, keepdim=False):
    dims = _dims(input, dim)
    lo, hi = amin(input, dims, keepdim), amax(input, dims, keepdim)
    return torch.return_types.aminmax((lo, hi))


@register(torch.std_mean)
def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    var, mean = var_mean(input, dim, unbiased, keepdim, correction=correction)
    return sqrt_of_variance(var), mean


cov = library(torch.cov, torch.Tensor.cov)
corrcoef = library(torch.corrcoef, torch.Tensor.corrcoef)
