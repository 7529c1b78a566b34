"""Benchmarking a compiled program: the whole program against eager (and torch.compile), and
each region against the eager torch calls it replaces."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fusionlens.driver import checking, timing
from fusionlens.executors import lowering
from fusionlens.middle import passes
from fusionlens.ir.interpret import ops_callable
from fusionlens.ir.trace import BoundSymbol, external_inputs
from fusionlens.ir.vocabulary import ValueRole
from fusionlens.middle.programs import ProgramKind
from fusionlens.report.schema import Diagnostic, DiagnosticCode, ProgramTimings, RegionTiming, Timing


@dataclass
class Measurements:
    program: ProgramTimings | None = None  # the call against eager
    regions: dict[str, dict[str, RegionTiming]] = field(default_factory=dict)  # program kind -> region id -> timing
    diagnostics: list[Diagnostic] = field(default_factory=list)
    training: ProgramTimings | None = None  # a training compile: forward + backward steps
    copy_gbs: float | None = None  # the device's measured copy bandwidth (timing.copy_bandwidth_gbs)


def measure_program(c, fn, args, kwargs, inputs: list[torch.Tensor], *, repeats: int, warmup: int,
                    torch_compile: bool) -> Measurements:
    """Time `c` (a pipeline.Compiled) against `fn(*args, **kwargs)`, then each of its regions."""
    out = Measurements()
    device = c.device
    if device.type == "cpu" and any(r.executor == "triton" for p in c.programs for r in p.plan.regions):
        out.diagnostics.append(Diagnostic(
            "information", "Triton kernels ran under Triton's interpreter (no GPU): their times measure "
            "the interpreter, not kernels", code=DiagnosticCode.BENCHMARK))
    systems = [(fn, args, kwargs), (c.fn, inputs, {})]
    if torch_compile:  # timed with the others, the same way (timing.compare)
        try:
            tc = torch.compile(fn)
            with torch.no_grad():
                tc(*args, **kwargs)  # its compile, outside the samples
            systems.append((tc, args, kwargs))
        except Exception as e:  # torch.compile may be unavailable (no compiler toolchain)
            out.diagnostics.append(Diagnostic("warning", f"torch.compile baseline failed: {type(e).__name__}: {e}",
                                              code=DiagnosticCode.BENCHMARK))
    eager, compiled, *compiled_by_torch = timing.compare(systems, device, warmup, repeats)
    out.program = _timings(device, compiled, eager, compiled_by_torch[0] if compiled_by_torch else None)
    if c.differentiated is not None:
        _time_training(out, c, fn, args, kwargs, inputs, warmup=warmup, repeats=repeats, torch_compile=torch_compile)
    for program in c.programs:
        program_inputs = inputs if program.kind is ProgramKind.FORWARD else checking.backward_inputs(c, inputs)
        out.regions[program.kind] = _time_regions(program, program_inputs, device, max(3, repeats // 2))
    out.copy_gbs = timing.copy_bandwidth_gbs(device)
    return out


def _time_training(out: Measurements, c, fn, args, kwargs, inputs: list[torch.Tensor], *, warmup: int, repeats: int,
                   torch_compile: bool) -> None:
    """Training steps (forward, then the gradients of the inputs that require grad for fixed
    cotangents) compiled, eager and torch.compile'd. Buffers the steps update (BatchNorm's
    running statistics) are restored after."""
    device, d = c.device, c.differentiated
    wrt = [inputs[i] for i in d.wrt]
    state = [x for v, x in zip(c.acquired.inputs, inputs) if v.role is ValueRole.BUFFER or v.name in c.traced.mutated]
    with checking.restored(state):
        with torch.enable_grad():
            cots = checking.cotangents(checking.differentiable_outputs(c.fn(*inputs)))

        def step(call, *a, **k):
            with torch.enable_grad():
                outs = [t for _, t in checking.differentiable_outputs(call(*a, **k))]
                torch.autograd.grad(outs, wrt, cots[:len(outs)], allow_unused=True)
        eager, compiled = timing.compare([(step, (fn, *args), kwargs), (step, (c.fn, *inputs), {})], device,
                                         warmup, repeats)
        by_torch = None
        if torch_compile:
            try:
                tc = torch.compile(fn)
                by_torch = timing.measure(step, tc, *args, device=device, warmup=max(warmup, 2), repeats=repeats,
                                          **kwargs)
            except Exception as e:
                out.diagnostics.append(Diagnostic("warning", f"torch.compile training baseline failed: "
                                                  f"{type(e).__name__}: {e}", code=DiagnosticCode.BENCHMARK))
        out.training = _timings(device, compiled, eager, by_torch)


def _timings(device, compiled: Timing, eager: Timing, by_torch: Timing | None) -> ProgramTimings:
    """The report's timings of a call (compiled, eager, torch.compile'd where it ran), complete."""
    return ProgramTimings(str(device), compiled, eager, by_torch, round(eager.median_ms / compiled.median_ms, 3),
                          round(by_torch.median_ms / compiled.median_ms, 3) if by_torch is not None else None)


def _time_regions(program, inputs: list[torch.Tensor], device, reps: int) -> dict[str, RegionTiming]:
    """Each region of a pipeline.Program against the torch calls it replaces (the ops of the
    trace its fusion started from, run on `inputs` like the program)."""
    plan, source_trace = program.plan, program.source
    env = lowering.interpret(plan.trace, inputs)
    torch_env = None  # values of the torch-level program, for eager baselines of fused regions
    out = {}
    for r in plan.regions:
        read = [env[v.name] for v in r.inputs]
        b = r.bound
        call = r.fn if r.fn is not None else ops_callable([b], b.inputs(), b.outputs)
        if r.fn is not None and r.generated.eager_fn is not None:
            eager_call, eager_read = r.generated.eager_fn, read
            sources = _source_ops(source_trace, r)
            if sources:  # the torch calls the user wrote (F.layer_norm), not our prims one by one
                if torch_env is None:
                    torch_env = lowering.interpret(source_trace, inputs)
                ins = external_inputs(sources)
                eager_call = ops_callable(sources, ins, [o for s in sources for o in s.outputs])
                eager_read = [torch_env[v.name] for v in ins]
            t, eager_t = timing.compare([(call, read, {}), (eager_call, eager_read, {})], device, 1, reps)
            if device.type == "cuda":  # both by CUDA-graph replay where both capture: no launch cost in either
                mine = timing.graph_replay(call, read, device, reps)
                theirs = timing.graph_replay(eager_call, eager_read, device, reps)
                if mine is not None and theirs is not None:
                    t, eager_t = mine, theirs
        else:  # a torch region is its own eager baseline
            t = eager_t = timing.measure(call, *read, device=device, warmup=1, repeats=reps)
        launch = timing.launch_ms(call, *read, device=device)
        out[r.id] = RegionTiming(round(t.median_ms, 5), round(eager_t.median_ms, 5), round(t.iqr_ms, 5),
                                 launch_ms=round(launch, 5) if launch is not None else None)
    return out


def _source_ops(optimised, region) -> list[BoundSymbol]:
    """The torch-level ops whose every prim runs in `region`, when they account for all of
    it; else [] (the region then compares with its prims run one by one)."""
    produced = {o.name for b in region.bsyms for o in b.outputs}
    sources, covered = [], set()
    for b in optimised.bound_symbols:
        leaves = {o.name for leaf in passes.flatten([b]) for o in leaf.outputs}
        if b.subsymbols and leaves and leaves <= produced:
            sources.append(b)
            covered |= leaves
    return sources if sources and covered == produced else []
