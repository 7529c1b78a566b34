"""The sizes a kernel takes as arguments, and the stride pattern a variant is specialised to.

A static group's kernel spells every size and stride as a literal (its program is
specialised to them). A symbolic group's kernel (a dynamic program: fusionlens/ir/symbols.py)
takes each size that depends on a symbol as an argument instead, so one source serves every
size: `KernelSizes.text` names each distinct expression once (`s0`, `sz_numel`, `sz_cols`,
`st_x_0` for a stride passed as it is), and the launcher computes them from the inputs'
shapes and strides at each call. What stays compile-time is what Triton compiles on: block
sizes (from the example's sizes, `symbolic.hint`) and the stride *pattern* of each input
(`pattern`): which dims are broadcast (stride 0), contiguous (the product of the later
sizes, an expression of the size arguments), unit-stride, or anything else (an argument).
Triton still specialises the integer arguments as it does (== 1, divisible by 16).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fusionlens.executors import symbolic
from fusionlens.executors.symbolic import Size
from fusionlens.ir.trace import Value

from .analysis import _literal

# One input dim's stride in a symbolic variant's key: 0 broadcast (size 1 or stride 0),
# "c" contiguous (the product of the later sizes), 1 unit stride, "v" any other (an argument)
Pattern = tuple[int | str, ...]


def pattern(shape: tuple[Size, ...], size: Sequence[int], stride: Sequence[int]) -> Pattern:
    """The pattern of a tensor of runtime `size`/`stride` read as a value of `shape` (its dims
    as `symbolic.dims` gives them)."""
    out: list[int | str] = []
    for d, (s, st) in enumerate(zip(shape, stride)):
        if (isinstance(s, int) and s == 1) or st == 0:
            out.append(0)
        elif st == math.prod(size[d + 1:]):
            out.append("c")
        elif st == 1:
            out.append(1)
        else:
            out.append("v")
    return tuple(out)


def contiguous_pattern(shape: tuple[Size, ...]) -> Pattern:
    return tuple(0 if isinstance(s, int) and s == 1 else "c" for s in shape)


def pattern_strides(shape: tuple[Size, ...], pat: Pattern, ident: str) -> tuple[Size, ...]:
    """The strides a pattern stands for, as expressions: "v" dims are symbols `st_<x>_<d>`,
    which the launcher reads from the tensor (`x.stride(d)`)."""
    import sympy

    out: list[Size] = []
    for d, p in enumerate(pat):
        if p == "c":
            out.append(symbolic.dim(math.prod(shape[d + 1:])))
        elif p == "v":
            out.append(sympy.Symbol(f"st_{ident}_{d}", integer=True, positive=True))
        else:
            out.append(p)
    return tuple(out)


def is_stride_symbol(x) -> bool:
    """A stride the launcher passes as it is (a "v" dim of `pattern_strides`)."""
    return getattr(x, "is_Symbol", False) and x.name.startswith("st_")


class KernelSizes:
    """The size arguments of one kernel: each non-constant expression once, by name, in the
    order first asked for; constants are written as literals (all of a static group's)."""

    def __init__(self, env, inputs: Sequence[Value], strides: Sequence[tuple[Size, ...]], idents: Sequence[str]):
        self.env = env  # the ShapeEnv of a symbolic group; None for a static one
        self.names: dict[Size, str] = {}  # expression -> argument name
        self.floats: set[str] = set()  # arguments that are floats (a mean's 1/N)
        self.stride_sources: dict[Size, tuple[int, int]] = {}  # stride symbol -> (input index, dim)
        self.inputs = list(inputs)
        self.idents = list(idents)
        for i, st in enumerate(strides):
            for d, x in enumerate(st):
                if is_stride_symbol(x):
                    self.stride_sources[x] = (i, d)

    def text(self, x, role: str | None = None) -> str:
        """`x` as the kernel spells it: a literal, or the name of its argument."""
        x = symbolic.dim(x)
        if isinstance(x, bool):
            return "True" if x else "False"
        if isinstance(x, int):
            return repr(x)
        if isinstance(x, float):
            return _literal(x)
        name = self.names.get(x)
        if name is None:
            name = x.name if x.is_Symbol else f"sz_{role}" if role else f"sz_{len(self.names)}"
            while name in self.names.values():
                name += "_"
            self.names[x] = name
            if not x.is_integer:
                self.floats.add(name)
        return name

    def hint(self, x) -> int | float:
        """The example's value (for block sizes only: it records no guard)."""
        return symbolic.hint(x, self.env) if self.env is not None else symbolic.dim(x)

    @property
    def args(self) -> list[str]:
        return list(self.names.values())

    def launcher_lines(self, extra: Sequence[Size] = ()) -> list[str]:
        """The launcher's lines computing every argument from the inputs: each symbol from an
        input that has it as a dim, each passed stride from its tensor, then each expression.
        The symbols of `extra` (what the launcher itself computes: output shapes) are bound too."""
        from fusionlens.ir import symbols

        exprs = list(self.names)
        used = symbolic.free_symbols(exprs + list(extra))
        shape_symbols = [s for s in used if s not in self.stride_sources]
        lines = symbolic.binding_lines(symbolic.bind(self.inputs, shape_symbols), self.idents)
        for s, (i, d) in self.stride_sources.items():
            if s in used:
                lines.append(f"    {s} = {self.idents[i]}.stride({d})")
        for e, name in self.names.items():
            if not e.is_Symbol:
                lines.append(f"    {name} = {symbols.source(e)}")
        return lines

    def signature(self) -> dict[str, str]:
        """Argument name -> its type for an ahead-of-time compile (aot.py)."""
        return {n: "fp32" if n in self.floats else "i32" for n in self.args}
