"""Scans, sorts and searches, run whole as library calls: cumulative sums and products
(cumsum, cummax, logcumsumexp, ...), sorting and selection (sort, argsort, topk, kthvalue,
median, mode, quantile; the ones with indices return torch's named tuples), uniqueness,
searching (searchsorted, bucketize, isin) and histograms."""

from __future__ import annotations

import torch

from fusionlens.ops.torch_ops.registry import library


def _both(name, *extra):
    """library(torch.<name>, torch.Tensor.<name>, *extra)."""
    fns = [getattr(torch, name)] + ([getattr(torch.Tensor, name)] if hasattr(torch.Tensor, name) else [])
    return library(*fns, *extra)


# cumulative ops
cumsum = _both("cumsum")
cumprod = _both("cumprod")
cummax = _both("cummax")
cummin = _both("cummin")
logcumsumexp = _both("logcumsumexp")
cumulative_trapezoid = _both("cumulative_trapezoid")
trapezoid = _both("trapezoid")
trapz = _both("trapz")

# sorting and order statistics
sort = _both("sort")
argsort = _both("argsort")
msort = _both("msort")
topk = _both("topk")
kthvalue = _both("kthvalue")
median = _both("median")
nanmedian = _both("nanmedian")
mode = _both("mode")
quantile = _both("quantile")
nanquantile = _both("nanquantile")

# uniqueness, searching, counting (their shapes may depend on the values)
unique = library(torch.unique, torch.Tensor.unique)
unique_consecutive = library(torch.unique_consecutive, torch.Tensor.unique_consecutive)
searchsorted = library(torch.searchsorted)
bucketize = library(torch.bucketize)
isin = library(torch.isin)
histc = _both("histc")
histogram = _both("histogram")
bincount = _both("bincount")
