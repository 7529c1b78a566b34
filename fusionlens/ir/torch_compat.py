"""What differs between the torch releases FusionLens supports (pyproject.toml: 2.11 to 2.14).

Dynamic shapes and fake tensors are torch's private API (torch.fx.experimental.symbolic_shapes,
torch._subclasses, torch._dynamo.source): names and signatures there move between releases,
so every module takes them from here, and a change in a new release is handled once.
The symbolic-shapes module imports sympy (a second): `symbolic_shapes()` imports it only when
a dynamic compile asks, and `statically_known_true` only when a size is a symbol.
"""

from __future__ import annotations

import functools
import importlib
import re
from types import ModuleType
from typing import Any

import torch

SUPPORTED = ((2, 11), (2, 14))  # the oldest and the newest release CI runs (.ci/run: 2.13, and 2.14 in a tier)


def version(text: str | None = None) -> tuple[int, int, int]:
    """(major, minor, patch) of a torch version string (`2.14.1+cu130`, `2.15.0.dev20260101`)."""
    numbers = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text or torch.__version__)
    if numbers is None:
        raise ValueError(f"not a torch version: {text!r}")
    major, minor, patch = numbers.groups()
    return int(major), int(minor), int(patch or 0)


TORCH = version()


def supported(v: tuple[int, ...] = TORCH) -> bool:
    """Whether torch `v` is in the range FusionLens is tested on."""
    return SUPPORTED[0] <= tuple(v[:2]) <= SUPPORTED[1]


@functools.cache
def symbolic_shapes() -> ModuleType:
    """torch.fx.experimental.symbolic_shapes (ShapeEnv, DimDynamic, StatelessSymbolicContext, ...)."""
    from torch.fx.experimental import symbolic_shapes as module
    return module


def statically_known_true(x) -> bool:
    """Whether a SymBool (or bool) is provably true, recording no guard."""
    if isinstance(x, bool):
        return x
    return bool(symbolic_shapes().statically_known_true(x))


def is_fake(x) -> bool:
    """Whether `x` is a fake tensor (a dynamic trace's: it has sizes, no values)."""
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(x, FakeTensor)


def on_fakes(func):
    """`func` as a dynamic trace runs it on fake tensors: through torch's Python reference
    where the C++ kernel reads sizes as ints (take_along_dim's: every size a guard `s0 == 7`)
    or refuses symbolic sizes (lerp with a 0-d tensor weight: "SymIntArrayRef expected to
    contain only concrete integers"). The trace still records `func`; only the result's
    metadata comes from here."""
    name = getattr(func, "__name__", "")
    if func in (torch.take_along_dim, torch.Tensor.take_along_dim, torch.lerp, torch.Tensor.lerp):
        import torch._refs as refs  # (its import is a registration walk: only a dynamic trace pays it)
        return getattr(refs, name)
    return func


# torch's private classes FusionLens uses, by where each release keeps them; imported on first use
_WHERE = {"ShapeEnv": "torch.fx.experimental.symbolic_shapes", "DimDynamic": "torch.fx.experimental.symbolic_shapes",
          "StatelessSymbolicContext": "torch.fx.experimental.symbolic_shapes",
          "FakeTensorMode": "torch._subclasses.fake_tensor", "FakeTensor": "torch._subclasses.fake_tensor",
          "LocalSource": "torch._dynamo.source"}


_PLAIN = (torch.Tensor, torch.nn.Parameter)  # a subclass's equal may do more than compare (communicate)


def plainly_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch.equal of two plain tensors, the cheap first test of a comparison; False where it
    cannot say (a subclass, a dtype whose `equal` has no kernel here: complex32 on the CPU), so
    that the caller's full comparison decides."""
    if type(a) not in _PLAIN or type(b) not in _PLAIN:
        return False
    try:
        return torch.equal(a, b)
    except (NotImplementedError, RuntimeError):
        return False


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether `a` and `b` hold the same values, NaN where NaN (a change of value, not of bits:
    -0.0 is 0.0): how a tensor updated inside a torch call, its version counter untouched, is
    told from its copy."""
    a, b = a.detach(), b.detach()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return plainly_equal(a, b) or bool(((a == b) | (a != a) & (b != b)).all())


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
