"""Sizes that may be symbols (a dynamic program's, fusionlens/ir/symbols.py), read without a guard.

Comparing a symbolic size with `==` or taking its `int()` records a guard that specialises the
program to the example's size; these read sizes for what only decides or estimates (an
alias, a cost, a report) and never record one. No sympy import: static programs pay nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def as_dim(s):
    """A size as a Value keeps it: an int, or a SymInt that is not a constant."""
    if type(s) is torch.SymInt:
        return int(s) if s.node.expr.is_number else s  # int() of a constant adds no guard
    return int(s)


def hint(x):
    """A number that may be a symbol's expression (a dynamic program's size) as the example's
    value, recording no guard: for what only estimates (costs, rooflines, reports)."""
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return x.node.pytype(x.node.expr) if x.node.expr.is_number else x.node.hint
    return x


def dim_text(d) -> int | str:
    """A dim as a report holds it: an int, or a symbol's expression (`s0`, `3*s0`); a symbol a
    later guard made a constant (`s0 == 2`) as that int, as a Value made after the guard has it."""
    if type(d) is int:
        return d
    return int(d.node.expr) if d.node.expr.is_number else str(d.node.expr)


def known_equal(x, y) -> bool:
    """`x == y` for sizes that may be symbols: True only where provably so, with no guard."""
    if type(x) is int and type(y) is int:
        return x == y
    from fusionlens.ir.torch_compat import statically_known_true
    return statically_known_true(x == y)


def same_shape(a, b) -> bool:
    """`tuple(a) == tuple(b)`, for shapes that may hold symbols: equal only where provably so,
    with no guard recorded (a guard would specialise a dynamic program to the example)."""
    a, b = tuple(a), tuple(b)
    if len(a) != len(b):
        return False
    if all(type(x) is int for x in a + b):
        return a == b
    return all(known_equal(x, y) for x, y in zip(a, b))



SIZES = "fusionlens_sizes"  # a dynamic program's global: its int arguments' symbols' values for the call


def symbol_bindings(inputs: list, bsyms: Sequence = (), sizes: bool = False) -> list[str]:
    """`s0 = x.shape[1]`: a dynamic program reads each symbol's value from the first input
    with that symbol as a dim; with `sizes`, a symbol no input carries (an int argument's) from
    SIZES: `s1 = fusionlens_sizes['s1']`."""
    lines, bound = [], set()
    for v in inputs:
        for i, d in enumerate(v.shape):
            if type(d) is torch.SymInt and d.node.expr.is_symbol and d.node.expr not in bound:
                bound.add(d.node.expr)
                lines.append(f"{d.node.expr} = {v.name}.shape[{i}]")
    if sizes:
        used = {s for b in bsyms for x in _symbolic_numbers((b.args, b.kwargs)) for s in x.node.expr.free_symbols}
        lines += [f"{s} = {SIZES}[{str(s)!r}]" for s in sorted(used - bound, key=str)]
    return lines


def _symbolic_numbers(tree):
    """The SymInts (SymFloats, SymBools) in an op's arguments, slices' bounds included."""
    if isinstance(tree, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        yield tree
    elif isinstance(tree, (tuple, list)):
        for x in tree:
            yield from _symbolic_numbers(x)
    elif isinstance(tree, dict):
        for x in tree.values():
            yield from _symbolic_numbers(x)
    elif isinstance(tree, slice):
        yield from _symbolic_numbers((tree.start, tree.stop, tree.step))


def symbol_values(inputs: list, tensors) -> dict[str, int]:
    """symbol name -> its value in this call, read from the tensors as `symbol_bindings` does."""
    values: dict[str, int] = {}
    for v, t in zip(inputs, tensors):
        for i, d in enumerate(v.shape):
            if type(d) is torch.SymInt and d.node.expr.is_symbol:
                values.setdefault(str(d.node.expr), t.shape[i])
    return values


def evaluate(x, values: dict[str, int]):
    """A number that may be a symbol's expression (a SymInt argument) at this call's values."""
    if not isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)) or x.node.expr.is_number:
        return hint(x)
    expr = x.node.expr
    return x.node.pytype(expr.xreplace({s: values[s.name] for s in expr.free_symbols}))


def broadcast_shapes(*shapes) -> tuple:
    """torch.broadcast_shapes without its first-call import of sympy (over a second)."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, size in enumerate(shape, ndim - len(shape)):
            if size != 1:
                if out[i] not in (1, size):
                    raise RuntimeError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
                out[i] = size
    return tuple(out)


def contiguous_strides(shape) -> tuple:
    """The strides torch gives a contiguous tensor of `shape` (size-0 dims count as 1)."""
    strides: list[int | torch.SymInt] = []
    acc: int | torch.SymInt = 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s if type(s) is torch.SymInt else max(int(s), 1)  # a symbol is >= 2 (0 and 1 are specialised)
    return tuple(reversed(strides))
