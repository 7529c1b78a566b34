"""Sizes that may be symbols (a dynamic program's, compiler/symbols.py), read without a guard.

Comparing a symbolic size with `==` or taking its `int()` records a guard that specialises the
program to the example's size; these read sizes for what only decides or estimates (an
alias, a cost, a report) and never record one. No sympy import: static programs pay nothing.
"""

from __future__ import annotations

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
    """A dim as a report holds it: an int, or a symbol's expression (`s0`, `3*s0`)."""
    return d if type(d) is int else str(d.node.expr)


def known_equal(x, y) -> bool:
    """`x == y` for sizes that may be symbols: True only where provably so, with no guard."""
    if type(x) is int and type(y) is int:
        return x == y
    from torch.fx.experimental.symbolic_shapes import statically_known_true
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



def symbol_bindings(inputs: list) -> list[str]:
    """`s0 = x.shape[1]`: a dynamic program reads each symbol's value from the first input
    with that symbol as a dim."""
    lines, bound = [], set()
    for v in inputs:
        for i, d in enumerate(v.shape):
            if type(d) is torch.SymInt and d.node.expr.is_symbol and d.node.expr not in bound:
                bound.add(d.node.expr)
                lines.append(f"{d.node.expr} = {v.name}.shape[{i}]")
    return lines


def symbol_values(inputs: list, tensors) -> dict:
    """symbol -> its value in this call, read from the tensors as `symbol_bindings` does."""
    values = {}
    for v, t in zip(inputs, tensors):
        for i, d in enumerate(v.shape):
            if type(d) is torch.SymInt and d.node.expr.is_symbol:
                values.setdefault(d.node.expr, t.shape[i])
    return values


def evaluate(x, values: dict):
    """A number that may be a symbol's expression (a SymInt argument) at this call's values."""
    if not isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)) or x.node.expr.is_number:
        return hint(x)
    return x.node.pytype(x.node.expr.xreplace(values))
