"""The executor contract: what the lowering stage asks of every executor, and what a fusion
executor hands back for one region.

    available(device) -> (ok, why not)     every executor
    can_take(bsym) -> None | why not        fusion executors: may this prim join a region?
    takes_columns(domain, rdims, cdims, bsyms) -> None | why not
                                            may a row-reduction region also hold column
                                            reductions of the same rows (a two-axis group)?
    generate(group, device) -> Generated    the region's kernel(s), ready to call
    definition_source(group) -> str         the code it would run for contiguous inputs,
                                            without running anything (previews: lowering's
                                            source-only mode, on machines where it is unavailable)
    preview(group) -> (source, kernels)     definition_source and the kernels it launches a call
    source_for(group, layouts, device) -> str
                                            the complete standalone source of the region's
                                            kernel(s) for inputs of these layouts (shapes,
                                            strides, dtypes), runs nothing (fusionlens/driver/repro.py)

The group, `Decline` and `Layout` are fusionlens/middle/contract.py's. A fusion executor raises
`Decline` from `generate` (and `source_for`) for a region it refuses; its prims then run
through torch one by one.

What `source_for` gives: Triton, the generated module (imports, helpers, `@triton.jit`
kernels and the `<region>_launch(*inputs)` launcher returning the outputs' tuple) verbatim;
nvFuser, the FusionDefinition script (its import line, the definition function, and the
`with FusionDefinition() as fd:` block that builds `fd`).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

from fusionlens.middle.contract import FusionGroup, Layout
from fusionlens.ir.trace import BoundSymbol


class Executor:
    """Runs ops. The torch executor runs any op as its torch call; fusion executors override."""

    name: str = ""
    fuses: bool = False

    def available(self, device) -> tuple[bool, str]:
        return True, ""


class FusionExecutor(Executor):
    fuses = True

    def can_take(self, bsym: BoundSymbol) -> str | None:
        raise NotImplementedError

    def takes_columns(self, domain: tuple, reduction_dims: tuple[int, ...], column_dims: tuple[int, ...],
                      bsyms: list[BoundSymbol]) -> str | None:
        """None if this executor generates a two-axis group of these ops (row reductions over
        `reduction_dims`, column sums over `column_dims`: fusionlens/middle/contract.py); else why not."""
        return f"{self.name} does not generate a region reducing rows and columns at once"

    def generate(self, group: FusionGroup, device) -> Generated:
        raise NotImplementedError

    def definition_source(self, group: FusionGroup) -> str:
        raise NotImplementedError

    def preview(self, group: FusionGroup) -> tuple[str, int]:
        """(definition_source, the device kernels it would launch a call): a preview's code and
        count (fusionlens/executors/lowering.py, source-only); 1 where the executor cannot tell."""
        return self.definition_source(group), 1

    def source_for(self, group: FusionGroup, layouts: list[Layout], device: str = "cuda") -> str:
        """The region's code for inputs of `layouts` (in `group.inputs` order) on a `device`
        ("cuda", "cpu") device; raises Decline where `generate` would decline them."""
        raise NotImplementedError(f"executor {self.name} writes no standalone source")

    def describe_kernels(self, pairs: list, gpu: str, compile_static: bool) -> list:
        """Each (lowering Region, report Region) pair's report Region with its kernels' `launch`
        and, with `compile_static`, their `static` analysis and `findings` for the target `gpu`
        (docs/kernels.md), in order: new values (a report Region is frozen). None added by default."""
        return [out for _, out in pairs]


@dataclass
class Generated:
    """One region's generated code and the callable that runs it."""

    source: str  # the generated code, as a reader should see it
    fn: Callable | None  # group inputs (tensors, in order) -> tuple of fresh outputs
    kernels: int = 1  # device kernels launched per call
    eager_fn: Callable | None = None  # the same prims run one by one with torch

    def report_code(self) -> str:
        """What the report shows of the region (may change once it has run)."""
        return self.source

    def status(self) -> str:
        """One line for the report; empty when there is nothing to say."""
        return ""
