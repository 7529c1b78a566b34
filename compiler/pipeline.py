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
from compiler.autograd import runtime as autograd_runtime, transform as autograd
from compiler.ir import Trace, output_builder
from compiler.report import BACKWARD_STAGES, TRACE_STAGES


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
    backward: Optional["Backward"] = None  # when compiled for training


@dataclass
class Backward:
    """The training half of a Compiled: the program then runs `forward` inside an autograd
    Function whose backward runs `plan`'s program."""

    differentiated: autograd.Differentiated
    traces: dict  # BACKWARD_STAGES -> Trace
    plan: lowering.Plan  # the backward program's regions and execution trace
    forward_fn: Any  # the forward program: (*inputs) -> (*results, *saved)
    backward_fn: Any  # the backward program: ([*saved], *cotangents) -> gradients (it empties the list)
    previews: list = field(default_factory=list)  # the backward's code by executors that cannot run here


def debug_level() -> int:
    try:
        return int(os.environ.get("FUSIONLENS_DEBUG") or 0)
    except ValueError:
        return 0


class _StageLog:
    """Records each stage's trace; prints it as it is produced under FUSIONLENS_DEBUG."""

    def __init__(self, name: str, stages=TRACE_STAGES):
        self.name, self.level, self.traces, self.stages = name, debug_level(), {}, stages
        self.last = time.perf_counter()

    def __call__(self, trace: Trace, plan: Optional[lowering.Plan] = None) -> Trace:
        assert trace.stage in self.stages and trace.stage not in self.traces, trace.stage
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


def requires_grad(tensors) -> bool:
    """Whether a call on these tensors is compiled for training (as eager would record it)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def compile_program(fn, args, kwargs, executors: Optional[list] = None, name: Optional[str] = None,
                    previews: bool = False) -> Compiled:
    """Trace `fn(*args, **kwargs)` and run every stage. `previews`: with the default executors,
    also write the code of the fusion executors that cannot run here (reports want it; jit
    does not). Where grad is enabled and an input, parameter or buffer requires grad, the
    program is compiled for training: a forward and a backward program joined by autograd."""
    start = time.perf_counter()
    traced = frontend.trace(fn, args, kwargs, name)
    stage = _StageLog(traced.trace.name)
    acquired = stage(traced.trace)
    optimised = stage(passes.optimise(stage(passes.decompose(acquired))))
    user_tensors = frontend.user_tensors(fn, args, kwargs)
    device = _device_of(user_tensors + list(traced.constants.values()))
    names = executor_registry.resolve(executors, device)
    chosen = executor_registry.select(names, device, preview_all=previews and executors is None)
    user = [v for v in acquired.inputs if v.role == "input"]
    constants = [traced.constants[v.name] for v in acquired.inputs if v.role != "input"]
    differentiated = _differentiate(optimised, user_tensors + constants, traced)
    program_trace = optimised if differentiated is None else differentiated.forward
    flat = stage(fusion.prepare(program_trace, chosen.fusers))
    plan = lowering.lower(flat, chosen.fusers, device, chosen.notes)
    stage(plan.trace, plan)
    shown = [{"executor": ex.name, "reason": why, "regions": lowering.preview(program_trace, ex)}
             for ex, why in chosen.previews]
    program = plan.trace.python_callable()
    backward = None
    if differentiated is not None:
        backward = _compile_backward(differentiated, program, chosen, device, acquired)
        backward.previews = [{"executor": ex.name, "reason": why, "regions": lowering.preview(backward.traces["backward"], ex, "PB")}
                             for ex, why in chosen.previews]
        program = backward_program(backward, len(acquired.inputs), acquired.output)
    return Compiled(acquired.name, stage.traces, plan, program, constants, len(user), traced,
                    (time.perf_counter() - start) * 1e3, device, names, shown, backward)


def _differentiate(optimised: Trace, tensors: list, traced) -> Optional[autograd.Differentiated]:
    """The forward and backward traces where the call records autograd; None for inference.
    An op the transform cannot differentiate makes the signature run eagerly (said at its line)."""
    if not requires_grad(tensors):
        return None
    try:
        return autograd.differentiate(optimised, [t.requires_grad for t in tensors])
    except autograd.Unsupported as e:
        message = f"training runs eagerly: {e.message}"
        traced.notes.append(frontend.Note("warning", message, e.where))
        traced.eager_only = traced.eager_only or message
        return None


def _compile_backward(d: autograd.Differentiated, forward_fn, chosen, device, acquired: Trace) -> Backward:
    stage = _StageLog(f"{acquired.name} backward", BACKWARD_STAGES)
    stage(d.joint)
    stage(d.forward)
    backward = stage(d.backward)
    flat = stage(fusion.prepare(backward, chosen.fusers))
    plan = lowering.lower(flat, chosen.fusers, device, [], prefix="B")
    stage(plan.trace, plan)
    return Backward(d, stage.traces, plan, forward_fn, plan.trace.python_callable())


def backward_program(b: Backward, n_inputs: int, output) -> Any:
    d = b.differentiated
    return autograd_runtime.training_program(b.forward_fn, b.backward_fn, n_inputs, d.n_results,
                                             d.differentiable, d.grad_inputs, output_builder(output))
