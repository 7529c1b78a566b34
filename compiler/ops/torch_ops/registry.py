"""Registration and lookup of torch-level symbols.

A family module registers each symbol with `register` (it has a decomposition) or `library`
(executors run it whole); `lookup` finds the symbol, and the adapter for its calling
convention, of a torch callable the frontend sees.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from compiler.ir import Symbol

LIBRARY = "library"


class NoDecomposition(Exception):
    """This call has no prim decomposition; run it as a whole."""


# torch callable -> (Symbol, adapter or None). An adapter rewrites a call's (args, kwargs)
# into the canonical function's convention (e.g. Tensor.view(*shape) -> reshape(x, shape)).
REGISTRY: dict = {}
SYMBOLS: dict = {}  # name -> Symbol


def qualified_name(fn) -> Optional[str]:
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
        obj = torch
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


def register(*fns, name: Optional[str] = None, impl: Optional[Callable] = None, tags=(),
             adapters: Optional[dict] = None):
    """Decorator: `fn` is the decomposition of the torch function fns[0] and its aliases."""

    def deco(decomposition):
        sym = Symbol(name or _qualname(fns[0]), impl or fns[0], decomposition=decomposition, tags=tags)
        _add(sym, fns, adapters)
        return sym

    return deco


def library(*fns, name: Optional[str] = None, impl: Optional[Callable] = None, adapters=None):
    sym = Symbol(name or _qualname(fns[0]), impl or fns[0], tags=(LIBRARY,))
    _add(sym, fns, adapters)
    return sym


def _add(sym, fns, adapters):
    SYMBOLS[sym.name] = sym
    for fn in fns:
        REGISTRY[fn] = (sym, (adapters or {}).get(fn))


def lookup(fn):
    return REGISTRY.get(fn)


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

