"""The executor contract: what the lowering stage asks of every executor, and what a fusion
executor hands back for one region.

    available(device) -> (ok, why not)     every executor
    can_take(bsym) -> None | why not        fusion executors: may this prim join a region?
    generate(group, device) -> Generated    the region's kernel(s), ready to call
    definition_source(group) -> str         the code it would run, without running anything
                                            (reports on machines where it is unavailable)

A fusion executor raises `compiler.fusion.Decline` from `generate` for a region it refuses;
its prims then run through torch one by one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional


class Executor:
    """Runs ops. The torch executor runs any op as its torch call; fusion executors override."""

    name: str = ""
    fuses: bool = False

    def available(self, device) -> tuple:
        return True, ""


class FusionExecutor(Executor):
    fuses = True

    def can_take(self, bsym) -> Optional[str]:
        raise NotImplementedError

    def generate(self, group, device) -> "Generated":
        raise NotImplementedError

    def definition_source(self, group) -> str:
        raise NotImplementedError


@dataclass
class Generated:
    """One region's generated code and the callable that runs it."""

    source: str  # the generated code, as a reader should see it
    fn: Optional[Callable]  # group inputs (tensors, in order) -> tuple of fresh outputs
    kernels: int = 1  # device kernels launched per call
    eager_fn: Optional[Callable] = None  # the same prims run one by one with torch

    def report_code(self) -> str:
        """What the report shows of the region (may change once it has run)."""
        return self.source

    def status(self) -> str:
        """One line for the report; empty when there is nothing to say."""
        return ""
