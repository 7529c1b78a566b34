"""Symbolic sizes: the dims a dynamic program serves every size of.

A dynamic compile traces the call once more on fake tensors whose dynamic dims are torch
SymInts of one `ShapeEnv` (torch's own symbolic shapes: `s0`, `s1`, ...). Every later stage
computes with them as with ints; what a stage decides about a size (`s0 == 1`, `s0 > 8`)
the ShapeEnv records as a guard, and the program checks its guards before each call.

Never call `int()` on a size that may be symbolic: that specialises the program to the
example's value (a guard `s0 == 7`). `hint` is the example's value without a guard, for
what only estimates (costs, tile sizes); `source` prints a size as Python over the symbols.
"""

from __future__ import annotations

import functools
import sys

import sympy
import torch
from torch.utils._sympy.printers import PythonPrinter

from fusionlens.ir import provenance, sizes
from fusionlens.ir.torch_compat import FakeTensorMode, ShapeEnv


class _Located(list):
    """The ShapeEnv's guards, each with the user line that made it (`where[i]` for guard i):
    the op a decomposition was decomposing, else the first user frame on the stack."""

    def __init__(self, items=()):
        super().__init__(items)
        self.where: list[provenance.Provenance | None] = [None] * len(self)

    def append(self, guard) -> None:
        super().append(guard)
        trace = sys.modules.get("fusionlens.ir.trace")  # it imports this module: looked up, not imported
        ctx = trace._current() if trace is not None else None
        self.where.append(ctx.provenance if ctx is not None and ctx.provenance is not None else provenance.capture())


class SymbolEnv(ShapeEnv):
    """A ShapeEnv naming its symbols s0, s1, ... in the order they are made (torch's own
    names hash the source, s49 for the first): the names users read in signatures. Each
    guard keeps the user line that made it (`where`), for the diagnostic of a recompile."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.guards: _Located = _Located(self.guards)  # torch's list, each guard's user line beside it

    def where(self, guard) -> provenance.Provenance | None:
        """The user line where `guard` (one of `guards`) was made."""
        located = self.guards
        for i, g in enumerate(located):
            if g is guard:
                return located.where[i] if isinstance(located, _Located) else None
        return None

    def _generate_unique_id(self, source_name: str) -> int:
        n = len(self.unique_ids)
        self.unique_ids.add(n)
        return n

    @functools.cached_property
    def fake(self) -> FakeTensorMode:
        """The fake tensors of this env's sizes (a dynamic trace runs on them)."""
        return FakeTensorMode(shape_env=self, allow_non_fake_inputs=True)


def env_of(shape) -> SymbolEnv:
    for d in shape:
        if isinstance(d, torch.SymInt) and not d.node.expr.is_number:
            return d.node.shape_env
    raise ValueError(f"{shape} has no symbol")


def empty(shape, dtype: torch.dtype) -> torch.Tensor:
    """A fake tensor standing in for a Value of a symbolic shape (a meta tensor cannot have one);
    a meta tensor where a later guard made every symbol of the shape a constant (a split's
    count of pieces specialises its size)."""
    if not is_symbolic(shape):
        return torch.empty(hint(shape), dtype=dtype, device="meta")
    with env_of(shape).fake:
        return torch.empty(shape, dtype=dtype, device="meta")


Dim = int | torch.SymInt


def is_symbolic(x) -> bool:
    """Whether `x` (a size, a shape, or a number) holds a symbol that is not a constant."""
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return not x.node.expr.is_number
    if isinstance(x, (tuple, list, torch.Size)):
        return any(is_symbolic(d) for d in x)
    return False


def hint(x):
    """The example's value of a size or shape, recording no guard (sizes.hint, shapes too)."""
    if isinstance(x, (tuple, list, torch.Size)):
        return tuple(hint(d) for d in x)
    return sizes.hint(x)


def expr(x) -> sympy.Expr:
    return x.node.expr if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)) else sympy.sympify(x)


_PRINTER = PythonPrinter()


def source(x) -> str:
    """Python source of a size (or a shape, as a tuple) over the symbols' names."""
    if isinstance(x, (tuple, list, torch.Size)):
        items = [source(d) for d in x]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(x, sympy.Basic):  # an expression an executor derived (a product of sizes)
        return _PRINTER.doprint(x)
    if is_symbolic(x):
        return _PRINTER.doprint(expr(x))
    return repr(hint(x))
