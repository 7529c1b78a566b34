"""Shared pieces of the op samples: argument recipes (`T`, `t`, `pos`, `ints`, ...), `Sample`,
the SAMPLES registry that `sample()` appends to, and helpers to run and inspect samples.

tests/op_samples.py imports the family files (tests/samples_*.py) in a fixed order to fill
SAMPLES; import SAMPLES from there.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
FLOATS = (F32, F16, BF16)
ONLY_F32 = (F32,)


# --- argument recipes -----------------------------------------------------------------------

@dataclass
class T:
    """A random tensor of `shape`. dtype None means the sample's dtype.

    kind: "float" (uniform in [low, high)), "int" (randint in [low, high)), "bool".
    layout: None (contiguous), "t" (a transposed view), "slice" (every other element of
    the last dim: non-contiguous and not dense), "cl" (channels_last, 4-d or 5-d).
    """

    shape: tuple
    dtype: Any = None
    kind: str = "float"
    low: float = -2.0
    high: float = 2.0
    layout: Any = None

    def make(self, dtype):
        dtype = self.dtype or dtype
        shape = tuple(self.shape)
        if self.layout == "t":
            assert len(shape) >= 2
            base_shape = shape[:-2] + (shape[-1], shape[-2])
        elif self.layout == "slice":
            base_shape = shape[:-1] + (shape[-1] * 2,)
        else:
            base_shape = shape
        if self.kind == "int":
            x = torch.randint(int(self.low), int(self.high), base_shape).to(dtype)
        elif self.kind == "bool":
            x = torch.rand(base_shape) > 0.5
        else:
            x = (torch.rand(base_shape) * (self.high - self.low) + self.low).to(dtype)
        if self.layout == "t":
            x = x.transpose(-1, -2)
        elif self.layout == "slice":
            x = x[..., ::2]
        elif self.layout == "cl":
            x = x.contiguous(memory_format=torch.channels_last if x.ndim == 4 else torch.channels_last_3d)
        assert x.shape == shape
        return x


def t(*shape, **kw) -> T:
    return T(shape, **kw)


def pos(*shape, **kw) -> T:
    """Positive values (log, sqrt, ...)."""
    return T(shape, low=0.25, high=2.0, **kw)


def ints(*shape, low=0, high=5, dtype=torch.int64, **kw) -> T:
    return T(shape, dtype=dtype, kind="int", low=low, high=high, **kw)


def bools(*shape, **kw) -> T:
    return T(shape, dtype=torch.bool, kind="bool", **kw)


def nt(*shape, **kw) -> T:
    """A transposed (non-contiguous) view."""
    return T(shape, layout="t", **kw)


def sl(*shape, **kw) -> T:
    """A strided slice (non-contiguous, not dense)."""
    return T(shape, layout="slice", **kw)


def cl(*shape, **kw) -> T:
    """Channels-last (NHWC or NDHWC strides)."""
    return T(shape, layout="cl", **kw)


@dataclass
class Sample:
    op: str  # the torch-level symbol it exercises (SYMBOLS key), for the docs table
    name: str  # unique test id
    fn: Callable
    args: tuple  # recipes (T) and python values
    dtypes: tuple = FLOATS
    decomposes: bool = True  # False: this call is expected to stay a library call
    why_not: str = ""  # when decomposes=False, the expected reason (a substring of the note)
    random: bool = False  # output is random: compare shapes/dtypes only

    def make(self, dtype):
        return tuple(pytree.tree_map(lambda a: a.make(dtype) if isinstance(a, T) else a, self.args,
                                     is_leaf=lambda a: isinstance(a, T)))

    def id(self, dtype) -> str:
        return f"{self.name}-{str(dtype).removeprefix('torch.')}"


SAMPLES: list = []
_names: set = set()


def sample(op, name, fn, *args, dtypes=FLOATS, decomposes=True, why_not="", random=False):
    assert name not in _names, name
    _names.add(name)
    SAMPLES.append(Sample(op, name, fn, args, dtypes, decomposes, why_not, random))


FLOATS_OR_SKIP = FLOATS  # eager skips the dtypes the CPU lacks for an op



def each(prefix, calls: dict, *args, **kw):
    """One sample per op of `calls` (op -> fn), all on the same argument recipes."""
    for op, fn in calls.items():
        sample(op, f"{prefix}_{op.removeprefix('torch.').replace('.', '_')}", fn, *args, **kw)


# --- running and inspecting samples --------------------------------------------------------

class _Seen(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.funcs = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.funcs.append(func)
        return func(*args, **(kwargs or {}))


def funcs_called(s: Sample) -> list:
    """The torch callables `s.fn` reaches (what the frontend's mode sees), in float32."""
    mode = _Seen()
    with torch.no_grad(), warnings.catch_warnings(), mode:
        warnings.simplefilter("ignore")
        s.fn(*s.make(F32))
    return mode.funcs


def clone_args(args):
    """A copy of the arguments: same values, same strides (non-contiguity preserved)."""
    def copy(x):
        if not isinstance(x, torch.Tensor):
            return x
        y = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)
        y.copy_(x)
        return y
    return pytree.tree_map(copy, args)
