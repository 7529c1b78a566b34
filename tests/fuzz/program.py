"""A fuzz program as data: its inputs (how each call makes them) and its lines of Python.

A program is kept as text, line by line, so that the shrinker can drop lines and rename
values without knowing what an op means, and so that the standalone script it writes is
the very code that failed. Inputs are Python expressions too (`InputSpec.source`): the
runner evaluates the same text the script prints, so the two cannot make different tensors.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import hashlib
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "int64": torch.int64, "bool": torch.bool, "count": torch.int64}  # count: a step counter, 0..4

# The globals a program's lines may use besides torch and F: nn.BatchNorm1d with momentum=None (a
# cumulative moving average), called through torch.func.functional_call with the program's values
# as its buffers (and BNA's affine parameters), so one module fits any number of channels.
PRELUDE = ("BN = torch.nn.BatchNorm1d(1, momentum=None, affine=False)\n"
           "BNA = torch.nn.BatchNorm1d(1, momentum=None)\n")

# How an input is laid out in memory. Each call of a program takes its inputs in `LAYOUTS[k][call]`:
# the first and last call the input's own layout, the middle one another layout that keeps the
# jit signature (contiguous or not) where one exists, so the cached program meets other strides.
CONTIGUOUS, OFFSET, SIZE1_STRIDES = "contiguous", "offset", "size1-strides"
TRANSPOSED, STEP, EXPANDED = "transposed", "step", "expanded"
OTHER_LAYOUT = {CONTIGUOUS: OFFSET, TRANSPOSED: STEP, STEP: TRANSPOSED, EXPANDED: STEP}

NAME = re.compile(r"\b([xt]\d+)\b")


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # a key of DTYPES
    layout: str = CONTIGUOUS
    requires_grad: bool = False

    def layout_for(self, call: int) -> str:
        if call != 1 or not self.shape:
            return self.layout
        if self.layout == CONTIGUOUS:
            return SIZE1_STRIDES if 1 in self.shape else OFFSET
        if self.layout == STEP and len(self.shape) < 2:
            return STEP
        return OTHER_LAYOUT[self.layout]

    def source(self, call: int) -> str:
        """The expression that makes this input for call `call`, given `g` (a seeded
        torch.Generator) and `device`."""
        layout = self.layout_for(call)
        shape = list(self.shape)
        base, view = _layout(shape, layout)
        dt = DTYPES[self.dtype]
        if dt == torch.bool:
            make = f"(torch.rand({tuple(base)}, generator=g) > 0.5)"
        elif self.dtype == "count":
            make = f"torch.randint(0, 5, {tuple(base)}, generator=g)"
        elif dt == torch.int64:
            make = f"torch.randint(-4, 5, {tuple(base)}, generator=g)"
        else:
            make = f"torch.randn({tuple(base)}, generator=g).to({dt})"
        text = f"{make}.to(device){view}"
        return text + (".requires_grad_()" if self.requires_grad else "")


def _layout(shape: list[int], layout: str) -> tuple[list[int], str]:
    """(the shape to draw, the view that turns it into `shape` laid out as `layout`)."""
    n = len(shape)
    if layout == TRANSPOSED and n >= 2:
        return shape[:-2] + [shape[-1], shape[-2]], ".transpose(-1, -2)"
    if layout == STEP and n >= 1:
        return shape[:-1] + [2 * shape[-1]], "[..., ::2]"
    if layout == EXPANDED and n >= 1:
        return [1] + shape[1:], f".expand({tuple(shape)})"
    if layout == OFFSET and n >= 1:
        return [shape[0] + 1] + shape[1:], "[1:]"
    if layout == SIZE1_STRIDES and n >= 1:
        # a contiguous tensor whose size-1 dims have strides no contiguous copy would have
        strides, step = [0] * n, 1
        for i in reversed(range(n)):
            strides[i] = 7 * step if shape[i] == 1 else step
            step *= max(shape[i], 1)
        size = 1 + sum((s - 1) * st for s, st in zip(shape, strides)) if all(shape) else 1
        return [size], f".as_strided({tuple(shape)}, {tuple(strides)})"
    return shape, ""


@dataclass(frozen=True)
class Line:
    """`target = expr`, or a statement (an in-place update: target is None)."""
    code: str
    target: str | None
    family: str

    def reads(self) -> set[str]:
        return set(NAME.findall(self.code)) - {self.target}

    def text(self) -> str:
        return f"{self.target} = {self.code}" if self.target else self.code


@dataclass(frozen=True)
class Program:
    inputs: tuple[InputSpec, ...]
    lines: tuple[Line, ...]
    outputs: tuple[str, ...]
    value_seed: int = 0  # call k draws its inputs from torch.Generator().manual_seed(value_seed + k)
    origin: str = ""  # "mode seed" it was generated from, for messages

    def replace(self, **changes) -> Program:
        return dataclasses.replace(self, **changes)

    def source(self, name: str = "program") -> str:
        args = ", ".join(s.name for s in self.inputs)
        body = [f"    {line.text()}" for line in self.lines]
        outs = "".join(f"{o}, " for o in self.outputs)
        return "\n".join([f"def {name}({args}):", *body, f"    return ({outs})"]) + "\n"

    def function(self):
        """The program as a Python function, from a file of its own: FusionLens's diagnostics
        and errors then name its lines."""
        text = self.source()
        path = _folder() / f"fuzz_{hashlib.sha1(text.encode()).hexdigest()[:16]}.py"
        if not path.exists():
            path.write_text(f"import torch\nimport torch.nn.functional as F\n\n{PRELUDE}\n\n{text}")
        scope: dict = {}
        exec(compile(path.read_text(), str(path), "exec"), scope)  # noqa: S102 - our own generated text
        return scope["program"]

    def resized(self, shift: int) -> Program:
        """The program at other sizes: every size of 2 or more grown by `shift` in every input
        alike (sizes that were equal stay equal, so broadcasts still hold; 0 and 1 stay)."""
        grow = lambda shape: tuple(n + shift if n >= 2 else n for n in shape)  # noqa: E731
        return self.replace(inputs=tuple(dataclasses.replace(s, shape=grow(s.shape)) for s in self.inputs))

    def make_inputs(self, call: int, device: torch.device) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(self.value_seed + call)
        scope = {"torch": torch, "g": g, "device": device}
        return [eval(s.source(call), scope) for s in self.inputs]  # noqa: S307 - our own generated text


@functools.cache
def program_scope() -> dict:
    """torch, F and PRELUDE's globals: what the generator runs a candidate line with."""
    scope = {"torch": torch, "F": F}
    exec(PRELUDE, scope)  # noqa: S102 - our own text
    return scope


@functools.cache
def _folder() -> Path:
    """This process's folder of program files, removed when it exits."""
    folder = Path(tempfile.mkdtemp(prefix="fusionlens-fuzz-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder
