"""The pipeline: every stage of a compile, in order, in one place.

    stage        made by             holds
    acquired     frontend.trace      the torch ops as the user's code called them
    decomposed   passes.decompose    each op with its prims nested beneath it
    optimised    passes.optimise     after common-subexpression and dead-code elimination
    fusion       fusion.prepare      fusible ops flattened into prims, broadcasts sunk
    execution    lowering.lower      region kernels and torch calls (Trace -> Plan)

Each stage is a Trace -> Trace function; lowering also gives the Plan (the regions). The
execution trace is compiled once into the program's Python function.

FUSIONLENS_DEBUG=1 prints a line per stage to stderr as it is produced (ops, time);
2 also prints each trace; 3 prints decompositions nested and each region's generated code.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from compiler import executors as executor_registry, frontend, fusion, lowering, passes
from compiler.ir import Trace
from compiler.report import TRACE_STAGES


@dataclass
class Compiled:
    name: str
    traces: dict  # stage -> Trace, in TRACE_STAGES order
    plan: lowering.Plan
    fn: Any  # the program: takes user tensors then constants
    constants: list  # tensors appended to the user's tensors at each call
    n_user_inputs: int
    traced: frontend.TraceResult
    compile_ms: float
    device: torch.device
    executors: list  # resolved, in priority order
    previews: list = field(default_factory=list)  # code of fusion executors that cannot run here


def debug_level() -> int:
    try:
        return int(os.environ.get("FUSIONLENS_DEBUG") or 0)
    except ValueError:
        return 0


class _StageLog:
    """Records each stage's trace; prints it as it is produced under FUSIONLENS_DEBUG."""

    def __init__(self, name: str):
        self.name, self.level, self.traces = name, debug_level(), {}
        self.last = time.perf_counter()

    def __call__(self, trace: Trace, plan: Optional[lowering.Plan] = None) -> Trace:
        assert trace.stage in TRACE_STAGES and trace.stage not in self.traces, trace.stage
        self.traces[trace.stage] = trace
        now = time.perf_counter()
        if self.level >= 1:
            extra = f", {len(plan.regions)} regions" if plan is not None else ""
            print(f"[fusionlens] {self.name} · {trace.stage}: {len(trace.bound_symbols)} ops{extra} "
                  f"({(now - self.last) * 1e3:.1f} ms)", file=sys.stderr)
        if self.level >= 2:
            print(trace.python(nested=self.level >= 3 and trace.stage == "decomposed"), file=sys.stderr)
        if self.level >= 3 and plan is not None:
            for r in plan.regions:
                if r.generated is not None:
                    print(f"# --- {r.id} ({r.executor}) ---\n{r.generated.source}", file=sys.stderr)
        self.last = now
        return trace


def _device_of(tensors) -> torch.device:
    for t in tensors:
        if t.device.type != "cpu":
            return t.device
    return torch.device("cpu")


def compile_program(fn, args, kwargs, executors: Optional[list] = None, name: Optional[str] = None,
                    previews: bool = False) -> Compiled:
    """Trace `fn(*args, **kwargs)` and run every stage. `previews`: with the default executors,
    also write the code of the fusion executors that cannot run here (reports want it; jit
    does not)."""
    start = time.perf_counter()
    traced = frontend.trace(fn, args, kwargs, name)
    stage = _StageLog(traced.trace.name)
    acquired = stage(traced.trace)
    optimised = stage(passes.optimise(stage(passes.decompose(acquired))))
    device = _device_of(frontend.user_tensors(fn, args, kwargs) + list(traced.constants.values()))
    names = executor_registry.resolve(executors, device)
    chosen = executor_registry.select(names, device, preview_all=previews and executors is None)
    flat = stage(fusion.prepare(optimised, chosen.fusers))
    plan = lowering.lower(flat, chosen.fusers, device, chosen.notes)
    stage(plan.trace, plan)
    shown = [{"executor": ex.name, "reason": why, "regions": lowering.preview(optimised, ex)}
             for ex, why in chosen.previews]
    program = plan.trace.python_callable()
    user = [v for v in acquired.inputs if v.role == "input"]
    constants = [traced.constants[v.name] for v in acquired.inputs if v.role != "input"]
    return Compiled(acquired.name, stage.traces, plan, program, constants, len(user), traced,
                    (time.perf_counter() - start) * 1e3, device, names, shown)
