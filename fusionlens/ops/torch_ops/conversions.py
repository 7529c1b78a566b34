"""Type conversions (to, type_as, float(), ...) and copies the functional trace drops
(contiguous, clone, detach)."""

from __future__ import annotations

import torch

from fusionlens.ops.torch_ops.common import _is_value, cast
from fusionlens.ops.torch_ops.registry import NoDecomposition, register


def _method_cast(dtype):
    def decomposition(input, memory_format=None):
        return cast(input, dtype)
    return decomposition


float_ = register(torch.Tensor.float, name="torch.Tensor.float")(_method_cast(torch.float32))
half = register(torch.Tensor.half, name="torch.Tensor.half")(_method_cast(torch.float16))
bfloat16 = register(torch.Tensor.bfloat16, name="torch.Tensor.bfloat16")(_method_cast(torch.bfloat16))
double = register(torch.Tensor.double, name="torch.Tensor.double")(_method_cast(torch.float64))
long = register(torch.Tensor.long, name="torch.Tensor.long")(_method_cast(torch.int64))
int_ = register(torch.Tensor.int, name="torch.Tensor.int")(_method_cast(torch.int32))
bool_ = register(torch.Tensor.bool, name="torch.Tensor.bool")(_method_cast(torch.bool))


@register(torch.Tensor.to, name="torch.Tensor.to")
def to(input, *args, **kwargs):
    dtype, device = kwargs.get("dtype"), kwargs.get("device")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, (str, torch.device)):
            device = torch.device(a)
        elif _is_value(a):
            dtype, device = a.dtype, a.device
    if device is not None and torch.device(device) != input.device:
        raise NoDecomposition("moves between devices")
    return cast(input, dtype) if dtype is not None else input


@register(torch.Tensor.type_as, name="torch.Tensor.type_as")
def type_as(input, other):
    return cast(input, other.dtype)


@register(torch.Tensor.type, name="torch.Tensor.type")
def type_(input, dtype=None, non_blocking=False):
    if not isinstance(dtype, torch.dtype):
        raise NoDecomposition("type() with a string")
    return cast(input, dtype)


@register(torch.Tensor.contiguous, name="torch.Tensor.contiguous")
def contiguous(input, memory_format=torch.contiguous_format):
    return input


@register(torch.clone, torch.Tensor.clone)
def clone(input, *, memory_format=None):
    return input


@register(torch.Tensor.detach, torch.detach, name="torch.Tensor.detach")
def detach(input):
    return input
