"""What code outside the frontend may do while a call is traced: the `Recorder` interface.

The parallel wrappings (fusionlens/distributed/: torch.distributed's collectives, FSDP2's
gathers, tensor parallel's f and g) record their own symbols while the user's call runs. They
do it through this small interface, which the frontend's Tracer implements, never through the
Tracer's attributes; and they find the recorder one way, `current()`, set while `trace` runs.
The frontend imports nothing of theirs: the driver passes their `TraceHook`s to `trace`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

import torch

from fusionlens.ir.provenance import Provenance
from fusionlens.ir.trace import BoundSymbol, Value


class Recorder(Protocol):
    """A trace being recorded, as a wrapping that records its own ops sees it."""

    def records(self) -> bool:
        """Whether ops are recorded now (False: the call runs eagerly, or a wrapping's own ops run)."""
        ...

    def unrecorded(self) -> AbstractContextManager[None]:
        """While active, the torch ops and collectives that run are not recorded: they are the
        implementation of a symbol the wrapping records itself."""
        ...

    def where(self) -> Provenance | None:
        """The user's line of the op being recorded now."""
        ...

    def value(self, x: Any) -> Any:
        """`x` as the trace reads it: a tensor's Value (a new input where it is none), else `x`."""
        ...

    def output(self, t: torch.Tensor) -> Value:
        """A new Value for `t`, which an op recorded now makes."""
        ...

    def pending(self, like: torch.Tensor) -> Value:
        """A new Value of `like`'s type bound to no tensor: an issued collective's pending result."""
        ...

    def program_global(self, name: str, obj: Any) -> None:
        """`obj` callable by `name` in the printed program (a symbol's implementation)."""
        ...

    def emit(self, op: BoundSymbol, at: int | None = None) -> None:
        """`op` appended to the trace, or inserted before the op at position `at`."""
        ...

    def ops(self) -> Sequence[BoundSymbol]:
        """The ops recorded so far, in order (read only)."""
        ...

    def update(self, name: str, ops: Callable[[Value], Sequence[BoundSymbol]], written: torch.Tensor) -> None:
        """An op that wrote `written` in place (a torch.distributed collective): recorded as the
        ops `ops(its new Value)` returns (made before: they read its old one)."""
        ...

    def refuse(self, name: str, how: str = "") -> None:
        """The call runs eagerly: `name` (a collective) cannot be recorded (`how`: on what)."""
        ...


class Recording:
    """The Recorder interface, as the frontend's Tracer implements it (its base class)."""

    inside_collective: bool  # a wrapping's own ops run: the TorchFunctionMode records none of them
    recording: bool
    bound_symbols: list[BoundSymbol]
    extra_globals: dict[str, Any]
    taken: set[str]
    names: Any  # ir.trace.NameGen
    updated_at: dict[int, Provenance | None]
    eager_only: str | None
    notes: list[Any]

    if TYPE_CHECKING:  # the Tracer's own (fusionlens/frontend/tracer.py)
        def where(self) -> Provenance | None: ...
        def argument(self, x: Any) -> Any: ...
        def new_output(self, t: torch.Tensor) -> Value: ...
        def _unique(self, base: str) -> str: ...
        def _refused(self, message: str) -> None: ...

    def records(self) -> bool:
        return self.recording and not self.inside_collective

    @contextlib.contextmanager
    def unrecorded(self) -> Iterator[None]:
        inside, self.inside_collective = self.inside_collective, True
        try:
            yield
        finally:
            self.inside_collective = inside

    def value(self, x: Any) -> Any:
        return self.argument(x)

    def output(self, t: torch.Tensor) -> Value:
        return self.new_output(t)

    def pending(self, like: torch.Tensor) -> Value:
        return Value(self.names.next(), like.shape, like.dtype, like.device)

    def program_global(self, name: str, obj: Any) -> None:
        self.taken.add(name)
        self.extra_globals[name] = obj

    def emit(self, op: BoundSymbol, at: int | None = None) -> None:
        if at is None:
            self.bound_symbols.append(op)
        else:
            self.bound_symbols.insert(at, op)

    def ops(self) -> Sequence[BoundSymbol]:
        return tuple(self.bound_symbols)

    def update(self, name: str, ops: Callable[[Value], Sequence[BoundSymbol]], written: torch.Tensor) -> None:
        if written._base is not None:
            return self.refuse(name, "on a view")
        made = ops(self.new_output(written))
        self.updated_at.setdefault(id(written), made[-1].provenance if made else self.where())
        # no note: a collective is no fallback (fusion ends its regions at it: BoundaryCode.COLLECTIVE)
        self.bound_symbols.extend(made)

    def refuse(self, name: str, how: str = "") -> None:
        if self.eager_only is None:
            self._refused(f"torch.distributed.{name}{' ' + how if how else ''} is not traced: calls with this "
                          "signature run eagerly")


class TraceHook(Protocol):
    """What a wrapping adds to tracing (the driver passes them to `trace`)."""

    def refuses(self, fn: Any, args: tuple, kwargs: dict) -> str | None:
        """Why the call must run eagerly (nothing is recorded), or None."""
        ...

    def recording(self, recorder: Recorder) -> AbstractContextManager[None]:
        """Active while the call is traced: the wrapping records its ops through `recorder`."""
        ...


_CURRENT: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar("fusionlens_recorder", default=None)


def current() -> Recorder | None:
    """The recorder of the call being traced in this context, or None."""
    return _CURRENT.get()


@contextlib.contextmanager
def active(recorder: Recorder) -> Iterator[None]:
    """`recorder` is `current()` while active."""
    token = _CURRENT.set(recorder)
    try:
        yield
    finally:
        _CURRENT.reset(token)
