"""Symbolic sizes as the fusion executors read them (a dynamic program's groups: fusionlens/ir/symbols.py).

A FusionGroup of a dynamic program may hold torch SymInts in its values' shapes and SymInts
or SymFloats in its prims' arguments (broadcast targets, a mean's 1/N). Comparing those as
torch values records a guard, which would specialise the program to the example's sizes, so
executors read them here as sympy expressions instead, with the ShapeEnv's replacements
applied (`s1` unified with `s0` reads as `s0`):

    dim(x), dims(shape)     an int, or a sympy expression of the symbols
    hint(x)                 the example's value, for estimates only (block sizes)
    bind(inputs, symbols)   where a launcher finds each symbol at run time (an input's dim)
    evaluator(...)          a function of the input tensors giving expressions' values
    eager_callable(group)   the group's prims through torch, at any size

Nothing here imports sympy for a static group: `is_symbolic_group` answers first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _pytree as pytree

from fusionlens.middle.contract import Decline, FusionGroup
from fusionlens.ir.interpret import ops_callable
from fusionlens.ir.trace import BoundSymbol, Value

if TYPE_CHECKING:  # sympy costs a second to import: a static program never does
    import sympy

_SYM = (torch.SymInt, torch.SymFloat, torch.SymBool)
# A size as executors compute with it: an int (a float for a number like 1/N), or a sympy
# expression of the symbols. Any: sympy has no type information for mypy to check it by.
Size = Any


def _is_sym(x) -> bool:
    return isinstance(x, _SYM) and not x.node.expr.is_number


def is_symbolic(x) -> bool:
    """Whether `x` (a number or a shape) holds a symbol (without importing sympy)."""
    if isinstance(x, (tuple, list, torch.Size)):
        return any(_is_sym(d) for d in x)
    return _is_sym(x)


def is_symbolic_group(group: FusionGroup) -> bool:
    """Whether any shape or prim argument of the group holds a symbol."""
    for v in list(group.inputs) + list(group.outputs):
        if any(_is_sym(d) for d in v.shape):
            return True
    if any(_is_sym(d) for d in group.domain):
        return True
    for b in group.bsyms:
        if any(_is_sym(x) for x in pytree.tree_leaves((b.args, b.kwargs))):
            return True
        if any(_is_sym(d) for o in b.outputs for d in o.shape):
            return True
    return False


def dim(x) -> Size:
    """A size as an int, or as a sympy expression over the symbols (replacements applied)."""
    if isinstance(x, (int, float)):  # a static program's sizes: no sympy
        return x
    import sympy

    if isinstance(x, _SYM):
        e = x.node.expr
        if not e.is_number:
            e = x.node.shape_env.replace(e)
        x = e
    if isinstance(x, sympy.Basic):
        if x.is_number:
            return int(x) if x.is_integer else float(x)
        return x
    return x


def dims(shape) -> tuple[Size, ...]:
    return tuple(dim(d) for d in shape)


def example_shape(shape) -> tuple[int, ...]:
    """The example's sizes of a shape (its ints as they are), recording no guard."""
    if not is_symbolic(shape):
        return tuple(int(d) for d in shape)
    from fusionlens.ir import symbols

    return tuple(symbols.hint(tuple(shape)))


def env_of_group(group: FusionGroup):
    """The ShapeEnv of the group's symbols (None for a static group)."""
    leaves: list[Any] = [d for v in list(group.inputs) + list(group.outputs) for d in v.shape]
    leaves += list(group.domain)
    for b in group.bsyms:
        leaves += pytree.tree_leaves((b.args, b.kwargs))
    return next((x.node.shape_env for x in leaves if _is_sym(x)), None)


def hint(x, env) -> int | float:
    """The example's value of a size (an int, a SymInt or a sympy expression), no guard recorded."""
    x = dim(x)
    if isinstance(x, (int, float)):
        return x
    if not x.is_integer:  # a float of sizes (1/N)
        return float(x.xreplace(env.var_to_val))
    ask = getattr(env, "optimization_hint", None) or env.size_hint  # the former is torch >= 2.11's
    return int(ask(x))


def free_symbols(items: Iterable) -> list[sympy.Symbol]:
    """The symbols in sizes, each once, in name order (s0, s1, ...)."""
    found: set[sympy.Symbol] = set()
    for x in items:
        x = dim(x)
        if not isinstance(x, (int, float)):
            found.update(x.free_symbols)
    return sorted(found, key=lambda s: (len(s.name), s.name))


# --- where a launcher finds each symbol ---------------------------------------------------------

@dataclass(frozen=True)
class Source:
    """A symbol's value at run time: `inputs[input].shape[dim] // coeff`."""

    input: int
    dim: int
    coeff: int = 1

    def python(self, names: Sequence[str]) -> str:
        text = f"{names[self.input]}.shape[{self.dim}]"
        return text if self.coeff == 1 else f"{text} // {self.coeff}"


def bind(inputs: Sequence[Value], needed: Iterable[sympy.Symbol]) -> dict[sympy.Symbol, Source]:
    """{symbol: Source} for every symbol in `needed`: the first input with the symbol as a dim
    of its own (or a constant multiple of it, as a reshape merges dims: 8*s0). Raises Decline
    naming a symbol no input carries plainly: the generated code could not compute it."""
    import sympy

    found: dict[sympy.Symbol, Source] = {}
    for i, v in enumerate(inputs):
        for d, size in enumerate(dims(v.shape)):
            if isinstance(size, (int, float)):
                continue
            coeff, rest = size.as_coeff_Mul()
            if isinstance(rest, sympy.Symbol) and coeff.is_Integer and int(coeff) > 0:
                best = found.get(rest)
                if best is None or (best.coeff != 1 and int(coeff) == 1):
                    found[rest] = Source(i, d, int(coeff))
    out: dict[sympy.Symbol, Source] = {}
    for s in needed:
        if s not in found:
            carried = [f"{v.name}{list(dims(v.shape))}" for v in inputs if s in _symbols_of(v)]
            where = f" (only inside {', '.join(carried)})" if carried else ""
            raise Decline(f"the size {s} is carried by no input's shape as a dim of its own{where}: "
                          "the generated code could not compute it from the inputs")
        out[s] = found[s]
    return out


def _symbols_of(v: Value) -> set[sympy.Symbol]:
    return set(free_symbols(v.shape))


def binding_lines(binding: dict[sympy.Symbol, Source], names: Sequence[str], indent: str = "    ") -> list[str]:
    """`s0 = x.shape[1]`, one a symbol, in symbol order."""
    return [f"{indent}{s} = {binding[s].python(names)}" for s in sorted(binding, key=lambda s: (len(s.name), s.name))]


def evaluator(inputs: Sequence[Value], exprs: Sequence[Any]) -> Callable[[Sequence[torch.Tensor]], list[int | float]]:
    """A function of the input tensors returning each expression's value at their sizes (a
    compiled Python function: per call it costs what the expressions cost)."""
    from fusionlens.ir import symbols

    exprs = [dim(e) for e in exprs]
    binding = bind(inputs, free_symbols(exprs))
    names = [f"t{i}" for i in range(len(inputs))]
    body = binding_lines(binding, names)
    values = ", ".join(symbols.source(e) for e in exprs)
    src = f"def sizes({', '.join(names)}):\n" + "\n".join(body) + f"\n    return [{values}]\n"
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(src, "<fusionlens sizes>", "exec"), namespace)  # noqa: S102 - our own printed sizes
    fn = namespace["sizes"]
    return lambda tensors: fn(*tensors)


# --- the prims through torch at any size -------------------------------------------------------

def eager_callable(group: FusionGroup) -> Callable:
    """The group's prims one by one through torch (the reference every executor is compared
    with): for a symbolic group, each symbolic argument takes its value at the inputs' sizes."""
    if not is_symbolic_group(group):
        return ops_callable(group.bsyms, group.inputs, group.outputs)
    plans: list[tuple[BoundSymbol, list[Any], Any, dict[int, int]]] = []  # (bsym, leaves, spec, leaf -> expr)
    exprs: list[Any] = []
    for b in group.bsyms:
        leaves, spec = pytree.tree_flatten((b.args, b.kwargs))
        slots = {}
        for k, x in enumerate(leaves):
            if _is_sym(x):
                slots[k] = len(exprs)
                exprs.append(x)
        plans.append((b, leaves, spec, slots))
    sizes = evaluator(group.inputs, exprs)
    names, results = [v.name for v in group.inputs], [v.name for v in group.outputs]

    def run(*tensors):
        values = sizes(tensors)
        env = dict(zip(names, tensors))
        with torch.no_grad():
            for b, leaves, spec, slots in plans:
                given = [values[slots[k]] if k in slots else (env[x.name] if isinstance(x, Value) else x)
                         for k, x in enumerate(leaves)]
                args, kwargs = pytree.tree_unflatten(given, spec)
                result = b.sym.impl(*args, **kwargs)
                flat = [result] if b.out_spec is None else [x for x in pytree.tree_leaves(result)
                                                             if isinstance(x, torch.Tensor)]
                for v, x in zip(b.outputs, flat):
                    env[v.name] = x
        return tuple(env[n] for n in results)
    return run
