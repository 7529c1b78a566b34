"""Registration and lookup of torch-level symbols.

A family module registers each symbol with `register` (it has a decomposition) or `library`
(executors run it whole), declaring its tags (ir.OpTag) and, for a library call with a
formula, its FLOPs; `lookup` finds the symbol, and the adapter for its calling convention,
of a torch callable the frontend sees; `registered` finds one by name (rule tables use it,
so a misspelt name fails at import). `fallback_tags` gives the tags of a torch callable
that has no symbol (the frontend records it as one opaque call).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from fusionlens.ir.trace import OpTag, Symbol

LIBRARY = OpTag.LIBRARY_CALL  # the old name, for code that has not switched to OpTag yet
Flops = Callable[[tuple, dict, list], float]  # a library call's FLOPs from its (args, kwargs, outputs)


class NoDecomposition(Exception):
    """This call has no prim decomposition; run it as a whole."""


# torch callable -> (Symbol, adapter or None). An adapter rewrites a call's (args, kwargs)
# into the canonical function's convention (e.g. Tensor.view(*shape) -> reshape(x, shape)).
REGISTRY: dict[Callable, tuple[Symbol, Callable | None]] = {}
SYMBOLS: dict[str, Symbol] = {}  # name -> Symbol


def qualified_name(fn) -> str | None:
    """The dotted name that evaluates to `fn` in a printed program, or None."""
    n = getattr(fn, "__name__", "")
    candidates = [f"torch.nn.functional.{n}", f"torch.{n}", f"torch.Tensor.{n}",
                  f"torch.special.{n.removeprefix('special_')}", f"torch.fft.{n.removeprefix('fft_')}",
                  f"torch.linalg.{n.removeprefix('linalg_')}",
                  f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', n)}"]
    for dotted in candidates:
        parts = dotted.split(".")
        if parts[0] != "torch":
            continue
        obj: object = torch
        for part in parts[1:]:
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is fn:
            return dotted
    return None


def _qualname(fn) -> str:
    name = qualified_name(fn)
    if name is None:
        raise ValueError(f"no printable name for {fn!r}")
    return name


def register(*fns, name: str | None = None, impl: Callable | None = None, tags: Iterable[OpTag] = (),
             adapters: dict | None = None):
    """Decorator: `fn` is the decomposition of the torch function fns[0] and its aliases."""

    def deco(decomposition):
        sym = Symbol(name or _qualname(fns[0]), impl or fns[0], decomposition=decomposition, tags=tags)
        _add(sym, fns, adapters)
        return sym

    return deco


def library(*fns, name: str | None = None, impl: Callable | None = None, adapters=None,
            tags: Iterable[OpTag] = (), flops: Flops | None = None) -> Symbol:
    """A library call: torch's kernel runs fns[0] (and its aliases) whole."""
    sym = Symbol(name or _qualname(fns[0]), impl or fns[0], tags=(OpTag.LIBRARY_CALL, *tags), flops=flops)
    _add(sym, fns, adapters)
    return sym


def library_part(fn, name: str | None = None, tags: Iterable[OpTag] = ()) -> Symbol:
    """A torch call that a decomposition makes for what no prim computes (an integer division,
    a random draw): a library call of its own, registered for no torch callable, so the op
    around it still decomposes and the rest of it fuses. `name` must evaluate to `fn` in a
    printed program (torch.ops.aten.* has no qualified name to find)."""
    return Symbol(name or _qualname(fn), fn, tags=(OpTag.LIBRARY_CALL, *tags))


def _add(sym, fns, adapters):
    if sym.name in SYMBOLS:  # rule tables and the printed program tell symbols apart by name
        raise ValueError(f"a symbol named {sym.name} is registered already")
    SYMBOLS[sym.name] = sym
    for fn in fns:
        REGISTRY[fn] = (sym, (adapters or {}).get(fn))


def lookup(fn):
    return REGISTRY.get(fn)


# In-place methods with no functional method beside them (x.uniform_(a, b), x.zero_(), x.resize_(n)):
# the in-place callable -> the symbol of its functional form, and the adapter to that symbol's
# convention. The frontend records such a call as that symbol's, as it records x.add_(y) as add.
INPLACE: dict[Callable, tuple[Symbol, Callable | None]] = {}


def functional_form(inplace_fn: Callable, sym: Symbol, adapter: Callable | None = None) -> None:
    """`sym` (registered) computes what the in-place `inplace_fn` writes into its tensor."""
    if inplace_fn in INPLACE:
        raise ValueError(f"a functional form is registered already for {inplace_fn!r}")
    INPLACE[inplace_fn] = (sym, adapter)


def lookup_inplace(fn):
    return INPLACE.get(fn)


def registered(name: str) -> Symbol:
    """The registered symbol called `name`; a name no symbol has is an error (a misspelling)."""
    sym = SYMBOLS.get(name)
    if sym is None:
        raise LookupError(f"no registered symbol is named {name!r}")
    return sym


def symbol_for(fn) -> Symbol:
    """The symbol registered for torch callable `fn`, looked up when called: how a family
    calls an op that a family registered after it defines (outer calls unsqueeze)."""
    return REGISTRY[fn][0]


# --- adapters ------------------------------------------------------------------------------

def _pack_varargs(args, kwargs):
    """x.view(2, 3) / x.permute(0, 2, 1) -> (x, (2, 3)); already-packed calls pass through."""
    if len(args) > 2 or (len(args) == 2 and isinstance(args[1], int)):
        return (args[0], tuple(args[1:])), kwargs
    return args, kwargs

