"""Tensors made from nothing but arguments, beyond factories.py: the Tensor.new_* fills,
scalar_tensor, fill and eye (decomposed into full and iota), tensors from Python data
(torch.tensor), uninitialised ones (empty*), spaced ranges (linspace, logspace) and random
draws (tagged random: a compiled program's draws are checked by shape and dtype only), with the
functional forms of the in-place draws into a tensor (x.uniform_(a, b) is aten's uniform(x, a, b))."""

from __future__ import annotations

import torch

from fusionlens.ir.trace import OpTag
from fusionlens.ops import prims
from fusionlens.ops.torch_ops.common import _scalar_as
from fusionlens.ops.torch_ops.registry import functional_form, library, register


def _size(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        return tuple(size[0])
    return tuple(size)


def _new(fill):
    def decomposition(input, *size, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False):
        dtype = dtype or input.dtype
        return prims.full(_size(size), _scalar_as(fill, dtype), dtype=dtype, device=device or input.device)
    return decomposition


new_zeros = register(torch.Tensor.new_zeros, name="torch.Tensor.new_zeros")(_new(0))
new_ones = register(torch.Tensor.new_ones, name="torch.Tensor.new_ones")(_new(1))


@register(torch.Tensor.new_full, name="torch.Tensor.new_full")
def new_full(input, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=False,
             requires_grad=False):
    dtype = dtype or input.dtype
    return prims.full(tuple(size), _scalar_as(fill_value, dtype), dtype=dtype, device=device or input.device)


@register(torch.scalar_tensor)
def scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False):
    dtype = dtype or torch.get_default_dtype()
    return prims.full((), _scalar_as(s, dtype), dtype=dtype, device=torch.device(device or "cpu"))


@register(torch.fill)
def fill(input, value):
    if not isinstance(value, (bool, int, float)):
        value = prims.broadcast_in_dim(value, input.shape, ()) if value.shape == () else value
        return prims.convert_element_type(value, input.dtype) if value.dtype != input.dtype else value
    return prims.full(input.shape, _scalar_as(value, input.dtype), dtype=input.dtype, device=input.device)


@register(torch.eye)
def eye(n, m=None, *, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False, out=None):
    m = n if m is None else m
    device = torch.device(device or "cpu")
    rows = prims.broadcast_in_dim(prims.iota(n, start=0, step=1, dtype=torch.int64, device=device), (n, m), (0,))
    cols = prims.broadcast_in_dim(prims.iota(m, start=0, step=1, dtype=torch.int64, device=device), (n, m), (1,))
    diagonal = prims.eq(rows, cols)
    dtype = dtype or torch.get_default_dtype()
    return diagonal if dtype == torch.bool else prims.convert_element_type(diagonal, dtype)


tensor = library(torch.tensor)
as_tensor = library(torch.as_tensor)
empty = library(torch.empty)
empty_like = library(torch.empty_like)
empty_strided = library(torch.empty_strided)
empty_permuted = library(torch.empty_permuted)
new_empty = library(torch.Tensor.new_empty, name="torch.Tensor.new_empty")
new_empty_strided = library(torch.Tensor.new_empty_strided, name="torch.Tensor.new_empty_strided")
new_tensor = library(torch.Tensor.new_tensor, name="torch.Tensor.new_tensor")
linspace = library(torch.linspace)
logspace = library(torch.logspace)


RANDOM = {n: library(getattr(torch, n), tags=(OpTag.RANDOM,)) for n in (
    "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal", "poisson")}
bernoulli = library(torch.bernoulli, torch.Tensor.bernoulli, tags=(OpTag.RANDOM,))
multinomial = library(torch.multinomial, torch.Tensor.multinomial, tags=(OpTag.RANDOM,))


# --- the in-place draws' functional forms: aten's op of the same name makes a new tensor ------

_DRAW = (OpTag.RANDOM, OpTag.NON_DIFFERENTIABLE)


def _aten_draw(name: str):
    op = getattr(torch.ops.aten, name).default
    return library(op, name=f"torch.ops.aten.{name}.default", tags=_DRAW)


def _positional(*names: str):
    """An adapter putting these keyword arguments in their places: x.uniform_(from=0, to=1)
    cannot be printed as a call with `from=`, a Python keyword."""
    def adapter(args, kwargs):
        args, kwargs = list(args), dict(kwargs)
        for n in names[len(args) - 1:]:
            if n not in kwargs:
                break
            args.append(kwargs.pop(n))
        return tuple(args), kwargs
    return adapter


DRAWS = {n: _aten_draw(n) for n in ("cauchy", "exponential", "geometric", "log_normal", "uniform", "normal_functional")}
functional_form(torch.Tensor.cauchy_, DRAWS["cauchy"])
functional_form(torch.Tensor.exponential_, DRAWS["exponential"])
functional_form(torch.Tensor.geometric_, DRAWS["geometric"])
functional_form(torch.Tensor.log_normal_, DRAWS["log_normal"])
functional_form(torch.Tensor.uniform_, DRAWS["uniform"], _positional("from", "to"))
functional_form(torch.Tensor.normal_, DRAWS["normal_functional"])
# random_(), random_(to), random_(from, to): the overload packet picks aten's matching one
random_draw = library(torch.ops.aten.random, name="torch.ops.aten.random", tags=_DRAW)
functional_form(torch.Tensor.random_, random_draw, _positional("from", "to"))
