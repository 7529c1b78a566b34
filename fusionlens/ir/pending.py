"""Ops that start work another op finishes: an issue returns a pending value, a wait takes it.

The IR knows no collective: fusionlens/distributed/vocabulary.py makes its collectives of these
classes (the collective's kind, reduce op and group are its attributes there). What the IR
needs is the shape of the protocol, so that the verifier (fusionlens/middle/verify.py) checks
it for any asynchronous op: each value an ISSUE makes is pending until exactly one WAIT takes
it, and no other op reads a pending value. A SYNC op issues and waits in one (its result is
ready), as a `torch.ops._c10d_functional` op the user's code calls directly is described (its
wait left to torch); every collective FusionLens records itself is an ISSUE and a WAIT.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from fusionlens.ir.trace import Symbol


class Phase(enum.Enum):
    """Where an asynchronous op stands in its issue-wait pair."""

    ISSUE = "issue"  # starts the work: its first output is pending
    WAIT = "wait"  # takes a pending value (its first argument), returns it ready
    SYNC = "sync"  # both at once: nothing is left pending


class AsyncSymbol(Symbol):
    """A Symbol that issues, waits for, or synchronously runs asynchronous work (`phase`)."""

    def __init__(self, name: str, impl: Callable, *, phase: Phase, **kwargs: Any):
        super().__init__(name, impl, **kwargs)
        self.phase = phase


def phase_of(sym: Symbol) -> Phase | None:
    """The op's phase, None for an op that is no asynchronous work's."""
    return sym.phase if isinstance(sym, AsyncSymbol) else None
