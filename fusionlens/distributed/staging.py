"""What a parallel wrapping hands the pipeline at its declared points (the compile side of
fusionlens/distributed/transform.py): the `CompileTransform` protocol, a backward it
`Rewritten`, and the `ReportInputs` it adds to the report's assembly."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from fusionlens.ir.trace import Trace
from fusionlens.middle.autograd import transform as autograd


@dataclass
class Rewritten:
    """A backward trace a transform rewrote before fusion (DDP: its bucket all-reduces), which
    the pipeline lowers into a program of its own; `wrap(backward function)` is what the
    training call runs in its place; `state` what the transform keeps of it (DDP's buckets)."""

    trace: Trace
    wrap: Callable[[Callable], Callable]
    state: Any = None


@dataclass
class ReportInputs:
    """What a transform adds to a compile's report: collectives no program of it runs (DDP's
    reducer's buckets) and diagnostics after every other; `rewritten`: the report shows the
    rewritten backward (its collectives at their regions) in place of the one checked."""

    collectives: list[Any] = field(default_factory=list)  # report.schema.Collective
    diagnostics: list[Any] = field(default_factory=list)  # report.schema.Diagnostic
    rewritten: bool = False


class CompileTransform(Protocol):
    """A wrapping as the pipeline applies it, found by `unwrap` (which unwraps the callable and
    its parameters: DDP's module, FSDP2's shards by keyword): its hooks run at the pipeline's
    declared points, in order: `tracing` around tracing and the check (its ops record through
    frontend.recorder), `rewrite_forward` on the optimised trace (before autograd splits it and
    before fusion), `rewrite_backward` on the backward trace before fusion, `finish` on the
    compiled call, `report` into the report's assembly. A transform subclasses this protocol to
    inherit the no-op defaults of the hooks it does not need."""

    name: str

    def groups(self) -> list[str]:
        """The process groups (by name) it communicates on: the ranks agree on the check there."""
        ...

    def unwrap(self, fn: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """(the callable traced in place of `fn`, its keyword arguments): the wrapper taken off
        (DDP's module), the parameters as the program takes them (FSDP2's local shards by
        keyword); by default both unchanged."""
        return fn, kwargs

    def tracing(self) -> contextlib.AbstractContextManager[Any]:
        """Active while the call is traced and checked against eager."""
        ...

    def rewrite_forward(self, forward: Trace) -> Trace:
        """The forward trace rewritten (the optimised stage: what autograd differentiates and
        fusion fuses); by default unchanged (none of DDP, FSDP2 and tensor parallel needs it)."""
        return forward

    def rewrite_backward(self, d: autograd.Differentiated, inputs: list[Any], constants: list[torch.Tensor],
                         backward: Trace) -> Rewritten | None:
        """The backward rewritten (a program of its own), or None."""
        ...

    def finish(self, call: Callable, constants: list[torch.Tensor]) -> Callable:
        """The compiled call (user tensors, then `constants`) as each call runs it."""
        ...

    def report(self, rewritten: Rewritten | None, failed: bool, training: bool) -> ReportInputs:
        """What the report adds; `failed`: the signature runs eagerly (its check failed)."""
        ...
