"""Factories: tensors made from a shape and a fill (full, ones, zeros, *_like, arange)."""

from __future__ import annotations

import builtins

import torch

from fusionlens.ops import prims
from fusionlens.ops.torch_ops.common import result_dtype
from fusionlens.ops.torch_ops.registry import NoDecomposition, functional_form, register


def _shape_arg(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        return tuple(size[0])
    return tuple(size)


def _factory_device(device):
    # no device given: torch's default device (torch.set_default_device, `with torch.device("cuda")`), as eager
    return torch.device(device) if device is not None else torch.get_default_device()


@register(torch.full)
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False):
    dtype = dtype or (torch.get_default_dtype() if isinstance(fill_value, float) else result_dtype(fill_value))
    return prims.full(tuple(size), fill_value, dtype=dtype, device=_factory_device(device))


@register(torch.ones)
def ones(*size, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False, out=None):
    return prims.full(_shape_arg(size), 1, dtype=dtype or torch.get_default_dtype(), device=_factory_device(device))


@register(torch.zeros)
def zeros(*size, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False, out=None):
    return prims.full(_shape_arg(size), 0, dtype=dtype or torch.get_default_dtype(), device=_factory_device(device))


def _like(fill):
    def decomposition(input, *, dtype=None, layout=None, device=None, pin_memory=False,
                      requires_grad=False, memory_format=None):
        return prims.full(input.shape, fill, dtype=dtype or input.dtype, device=device or input.device)
    return decomposition


ones_like = register(torch.ones_like)(_like(1))
zeros_like = register(torch.zeros_like)(_like(0))
functional_form(torch.Tensor.zero_, zeros_like)  # x.zero_(): a tensor of zeros like x
functional_form(torch.zero_, zeros_like)


@register(torch.full_like)
def full_like(input, fill_value, *, dtype=None, layout=None, device=None, pin_memory=False,
              requires_grad=False, memory_format=None):
    return prims.full(input.shape, fill_value, dtype=dtype or input.dtype, device=device or input.device)


@register(torch.arange)
def arange(*args, start=None, end=None, step=None, dtype=None, layout=None, device=None, pin_memory=False,
           requires_grad=False, out=None):
    if len(args) == 1 and end is None:  # arange(end)
        args = (start if start is not None else 0, args[0])
    bounds = list(args) + [None] * (3 - len(args))
    start = bounds[0] if bounds[0] is not None else (0 if start is None else start)
    end = bounds[1] if bounds[1] is not None else end
    step = bounds[2] if bounds[2] is not None else (1 if step is None else step)
    if end is None:
        raise NoDecomposition("no end")  # torch raises
    if builtins.any(isinstance(a, float) for a in (start, end, step)) and dtype is None:
        raise NoDecomposition("float arange")  # its length rounds like torch's, not ours
    length = builtins.max(0, -(-(end - start) // step))
    return prims.iota(length, start=start, step=step, dtype=dtype or torch.int64, device=_factory_device(device))
