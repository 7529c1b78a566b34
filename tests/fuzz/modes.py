"""The fuzzer's modes: which executors compile a program, what it may hold, how big it is.

- `default`: the default executors of the device (on a CPU machine: torch alone).
- `triton`: `executors=["triton"]`; on a machine without a GPU the kernels run under Triton's
  interpreter (TRITON_INTERPRET=1), which is slow, so these programs are smaller.
- `backward`: the default executors, floating inputs requiring grad; gradients are compared.
- `dynamic`: `jit(fn, dynamic=True)`, each call at another consistent set of sizes (every size
  of 2 or more grown by `SIZE_SHIFTS[call]`); the fallback ops of its first program are
  compared with those of the same program compiled statically (docs/fuzzing.md's figures).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Mode:
    name: str
    executors: tuple[str, ...] | None  # None: the device's defaults
    interpreter: bool  # Triton's interpreter where no GPU is
    grad: bool  # floating inputs require grad; gradients are judged
    ops: tuple[int, int]  # lines a program has, at least and at most
    max_numel: int  # elements an input may have
    dtypes: tuple[tuple[str, float], ...]  # (dtype, weight) of an input
    dynamic: bool = False  # compiled with dynamic=True, each call at the sizes SIZE_SHIFTS gives


MODES: dict[str, Mode] = {m.name: m for m in (
    Mode("default", None, False, False, (2, 8), 240,
         (("float32", 5), ("float16", 1.5), ("bfloat16", 1.5), ("int64", 1.5), ("bool", 1))),
    Mode("triton", ("triton",), True, False, (2, 5), 48,
         (("float32", 5), ("float16", 2), ("bfloat16", 1.5), ("int64", 1), ("bool", 0.5))),
    Mode("backward", None, False, True, (2, 7), 240,
         (("float32", 7), ("float16", 1), ("bfloat16", 1), ("int64", 1))),
    Mode("dynamic", None, False, False, (2, 8), 240,
         (("float32", 5), ("float16", 1.5), ("bfloat16", 1.5), ("int64", 1.5), ("bool", 1)), dynamic=True),
)}

# dynamic mode: call k grows every size of 2 or more by SIZE_SHIFTS[k] (0 and 1 stay: torch
# specialises them), so the sizes of one call are consistent (what broadcast still does)
SIZE_SHIFTS = (0, 1, 3, 2)

# The CI tier (tests/test_fuzz.py): seeds 0..n-1 of each mode, about 30 s on two cores (the dynamic
# mode's 40 about a minute more: four calls, a static compile to compare with).
CI_PROGRAMS: dict[str, int] = {"default": 400, "triton": 200, "backward": 300, "dynamic": 40}


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def prepare_interpreter() -> None:
    """Where no GPU is, import triton with TRITON_INTERPRET=1 before anything else does: its
    standard library is decorated for the interpreter at import time (tests/conftest.py does
    the same for the suite). The variable is put back; `environment` sets it per program."""
    if "triton" in sys.modules or torch.cuda.is_available() or importlib.util.find_spec("triton") is None:
        return
    with _variable("TRITON_INTERPRET", "1"):
        try:
            import triton.language  # noqa: F401
        except Exception:  # noqa: BLE001 - a broken install: the triton mode then fails to compile, visibly
            pass


@contextlib.contextmanager
def environment(mode: Mode) -> Iterator[None]:
    """The mode's environment while a program compiles and runs: the interpreter's variable
    set for `triton` off the GPU, and unset otherwise (the default executors must not pick
    the interpreter up)."""
    value = "1" if mode.interpreter and not torch.cuda.is_available() else None
    with _variable("TRITON_INTERPRET", value):
        yield


@contextlib.contextmanager
def _variable(name: str, value: str | None) -> Iterator[None]:
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
