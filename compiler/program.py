"""From the optimised trace to a runnable program: regions, execution trace, callable.

Executors claim ops in priority order. Fusion executors (see compiler/fusion.py) take
regions of prims and turn each into one generated kernel; every op nobody fused runs
through the torch executor as one torch call, which is its own region. The execution trace
calls region kernels and torch ops in order; it is printed like every other trace and
compiled once into a Python function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from compiler import executors as executor_registry
from compiler.ir import BoundSymbol, Trace, format_call, run_ops
from compiler.report import Boundary


@dataclass
class Region:
    id: str
    executor: str
    bsyms: list  # the ops it runs (prims for fusion regions, torch-level ops for torch)
    inputs: list  # Values read from outside
    outputs: list  # Values used outside
    code: str = ""
    fn: Optional[Callable] = None  # fusion regions: the generated callable
    eager_fn: Optional[Callable] = None  # fusion regions: the same ops one torch call at a time
    boundary: Optional[Boundary] = None
    note: str = ""
    kernels: int = 1
    bound: Optional[BoundSymbol] = None  # its op in the execution trace
    generated: Any = None  # the fusion executor's Generated (nvFuser's says whether nvFuser ran)


@dataclass
class Plan:
    trace: Trace  # the execution trace
    regions: list
    notes: list = field(default_factory=list)  # (severity, message, provenance)
    previews: list = field(default_factory=list)  # code of executors that cannot run here


def torch_region(rid: str, b: BoundSymbol) -> Region:
    return Region(rid, "torch", [b], b.inputs(), list(b.outputs), code=format_call(b), bound=b,
                  note=b.note)


def plan(optimised: Trace, executor_names: list, device: torch.device, preview_all: bool = False) -> Plan:
    """Regions and the execution trace. Fusion executors asked for but unusable here (and,
    with `preview_all`, every fusion executor not in use) still write the code they would
    run, into `previews`: on a CPU the editor can show what Triton would generate."""
    from compiler import fusion

    fusers, notes, previews = [], [], []
    candidates = list(executor_names)
    if preview_all:
        candidates += [n for n in executor_registry.KNOWN if n not in candidates]
    for name in candidates:
        ex = executor_registry.get(name)
        ok, why = ex.available(device)
        if not ok:
            if name in executor_names:
                notes.append(("warning", f"executor {name} is not usable here: {why}; its work goes to the "
                                         "next executor", None))
            if hasattr(ex, "definition_source"):  # still show what it would run
                previews.append({"executor": name, "reason": why, "regions": fusion.preview(optimised, ex)})
        elif ex.fuses and name in executor_names:
            fusers.append(ex)
    if fusers:
        result = fusion.plan_with_fusion(optimised, fusers, device, notes)
    else:
        regions = [torch_region(f"R{i}", b) for i, b in enumerate(optimised.bound_symbols)]
        result = Plan(optimised.with_("execution", list(optimised.bound_symbols)), regions, notes)
    result.previews = previews
    return result


def interpret(trace: Trace, inputs: list) -> dict:
    """Run a trace op by op and keep every value: name -> tensor (for per-region timing)."""
    return run_ops(trace.bound_symbols, {v.name: x for v, x in zip(trace.inputs, inputs)})
