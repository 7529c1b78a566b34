"""The pipeline: every stage of a compile, in order, in one place.

    stage        made by                  holds
    acquired     frontend.trace           the torch ops as the user's code called them
    decomposed   passes.decompose         each op with its prims nested beneath it
    optimised    passes.optimise          after common-subexpression and dead-code elimination,
                 + each transform's       then each parallel transform's `rewrite_forward`
                 rewrite_forward
    joint        autograd.differentiate   (training) the forward-backward trace, split into
    forward                               its forward half (results, then saved values) and
    backward                              its backward half: a program of its own
    fusion       fusion.prepare           fusible ops flattened into prims, broadcasts sunk
                 + reinplace.reinplace    an input's update written into it where safe, not copied back
    execution    lowering.lower           region kernels and torch calls (Trace -> Plan)

A compile makes one `Program` per kind (report.PROGRAM_KINDS): the forward, and for training
the backward. Each program goes through fusion and lowering by the same code; an executor
that cannot run here previews its code through the same lowering, in its source-only mode.

`CompileOptions.debug` (FUSIONLENS_DEBUG) 1 prints a line per stage to stderr as it is
produced (ops, time); 2 also prints each trace; 3 prints decompositions nested and each
region's generated code. `CompileOptions.verifying` runs fusionlens.middle.verify after every stage.
`Compiled.stage_ms` holds each stage's milliseconds (STAGE_TIMES; the verifier's apart), the
forward's and the backward's added (benchmarks/compile_time.py prints them per op).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fusionlens.distributed import collectives
from fusionlens.distributed.staging import CompileTransform, Rewritten
from fusionlens.frontend import dynamic, intra_op, tracer as frontend
from fusionlens import executors as executor_registry
from fusionlens.middle import fusion, passes, reinplace
from fusionlens.executors import lowering, torch_executor  # noqa: F401 - every compile's last executor: loaded with the driver, not by the first compile
from fusionlens.driver import cuda_graphs
from fusionlens.middle.autograd import runtime as autograd_runtime, transform as autograd
from fusionlens.executors.base import FusionExecutor
from fusionlens.ir.trace import OpTag, Trace, output_builder
from fusionlens.options import CompileOptions
from fusionlens.frontend.notes import Severity
from fusionlens.ir.vocabulary import Stage, ValueRole
from fusionlens.middle.programs import STAGES, ProgramKind
from fusionlens.report.schema import DiagnosticCode


@dataclass
class PreviewPlan:
    """The code a fusion executor that cannot run here would run for a program."""

    executor: str
    reason: str
    plan: lowering.Plan


@dataclass
class Program:
    """One program of a compile (a forward or a backward): its traces from its first stage to
    its execution trace, the regions that run, the previews, and its Python function."""

    kind: ProgramKind
    traces: dict[Stage, Trace]  # the programs.STAGES[kind] that ran -> Trace, in order
    plan: lowering.Plan
    fn: Callable  # the execution trace compiled: the forward takes user tensors then constants
    previews: list[PreviewPlan] = field(default_factory=list)

    @property
    def source(self) -> Trace:
        """The trace fusion started from: what each region's ops compute, op by op."""
        stages = list(self.traces)
        return self.traces[stages[stages.index(Stage.FUSION) - 1]]


@dataclass
class RewrittenProgram:
    """A backward program a transform rewrote (`transform` its name) and the training call
    that runs it (fn: user tensors then constants, as Compiled.fn)."""

    transform: str
    rewrite: Rewritten
    program: Program
    fn: Callable


@dataclass
class Compiled:
    name: str
    programs: list[Program]  # in report.PROGRAM_KINDS order
    fn: Callable  # the call: user tensors then constants -> the user's result (joined to autograd)
    constants: list[torch.Tensor]  # tensors appended to the user's tensors at each call
    n_user_inputs: int
    traced: frontend.TraceResult
    compile_ms: float
    device: torch.device
    executors: list[str]  # resolved, in priority order
    options: CompileOptions
    notes: list[frontend.Note] = field(default_factory=list)  # the frontend's, then the pipeline's
    eager_only: str | None = None  # why this signature runs eagerly, if it must
    differentiated: autograd.Differentiated | None = None  # compiled for training
    stage_ms: dict[str, float] = field(default_factory=dict)  # STAGE_TIMES (and "verify") -> ms, all programs
    guards: dynamic.Guards | None = None  # a dynamic program's: what its sizes must satisfy at each call
    rewritten: RewrittenProgram | None = None  # a transform's backward (DDP's), beside the one checked
    # the backward the check and the benchmark ran, where `programs` shows the rewritten one instead
    replaced: Program | None = None
    # (the result of the checked run of the program,) where it ran on the call's own tensors
    # (api.compile_checked's first_call): jit's first call returns it (take_result)
    first_result: tuple[Any] | None = None
    # each call runs on one intra-op thread (frontend/intra_op.py): a small CPU inference program
    # with an op that torch may split across the pool (`on_one_thread`)
    one_thread: bool = False

    def take_result(self) -> tuple[Any] | None:
        """(the checked run's result,) once, or None: a jit entry keeps no call's tensors."""
        result, self.first_result = self.first_result, None
        return result

    def finished(self, transforms: Sequence[CompileTransform]) -> Compiled:
        """This compile's calls as each call runs them (each transform's `finish`: tensor parallel's
        local shards taken afresh), after the check and the benchmark ran them on the constants."""
        call = self.fn
        rewritten = self.rewritten
        for t in transforms:
            call = t.finish(call, self.constants)
            if rewritten is not None:
                rewritten = dataclasses.replace(rewritten, fn=t.finish(rewritten.fn, self.constants))
        return dataclasses.replace(self, fn=call, rewritten=rewritten)

    def showing_rewritten(self) -> Compiled:
        """This compile with the rewritten backward as its backward program (what the report
        shows and the synchronising call runs); the one checked kept as `replaced`."""
        assert self.rewritten is not None
        backward = self.program(ProgramKind.BACKWARD)
        programs = [self.rewritten.program if p.kind is ProgramKind.BACKWARD else p for p in self.programs]
        return dataclasses.replace(self, programs=programs, replaced=backward)

    def program(self, kind: ProgramKind) -> Program | None:
        return next((p for p in self.programs if p.kind == kind), None)

    @property
    def forward(self) -> Program:
        return self.programs[0]

    @property
    def acquired(self) -> Trace:
        return self.forward.traces[Stage.ACQUIRED]


# The stages `Compiled.stage_ms` times, in pipeline order (the verifier's time, when it runs,
# is kept apart under "verify"), and the stage each recorded trace's time is charged to.
STAGE_TIMES = ("trace", "decompose", "optimise", "autograd", "fusion", "lowering", "previews")
stage_clock: Callable[[], float] = time.perf_counter  # benchmarks/compile_time.py may time CPU instead
_TIMED_AS = {Stage.ACQUIRED: "trace", Stage.DECOMPOSED: "decompose", Stage.OPTIMISED: "optimise",
             Stage.JOINT: "autograd", Stage.FORWARD: "autograd", Stage.BACKWARD: "autograd", Stage.FUSION: "fusion",
             Stage.EXECUTION: "lowering"}


class _StageLog:
    """Records one program's traces; prints each as it is produced under `debug`, verifies it
    when the options say so, and adds the time since the last one to its stage in `times`."""

    def __init__(self, name: str, kind: ProgramKind, options: CompileOptions, times: dict[str, float],
                 since: float | None = None):
        self.name, self.kind, self.options, self.times = name, kind, options, times
        self.traces: dict[Stage, Trace] = {}
        self.last = stage_clock() if since is None else since

    def charge(self, stage: str) -> None:
        """Add the time since the last trace (or charge) to `stage`."""
        now = stage_clock()
        self.times[stage] = self.times.get(stage, 0.0) + (now - self.last) * 1e3
        self.last = now

    def __call__(self, trace: Trace, plan: lowering.Plan | None = None,
                 fusers: list[FusionExecutor] | None = None) -> Trace:
        """Record `trace`; `fusers`: the fusion executors its stage was prepared for (the
        verifier checks that no op left whole holds a prim one of them takes)."""
        assert trace.stage in STAGES[self.kind] and trace.stage not in self.traces, trace.stage
        self.traces[trace.stage] = trace
        started = self.last
        self.charge(_TIMED_AS[trace.stage])
        elapsed_ms = (self.last - started) * 1e3
        if self.options.verifying:
            from fusionlens.middle import verify  # only when asked: it walks every op

            verify.verify(trace, trace.stage, fusers)
            self.charge("verify")
        level = self.options.debug
        if level >= 1:
            extra = f", {len(plan.regions)} regions" if plan is not None else ""
            print(f"[fusionlens] {self.name} · {trace.stage}: {len(trace.bound_symbols)} ops{extra} "
                  f"({elapsed_ms:.1f} ms)", file=sys.stderr)
        if level >= 2:
            print(trace.python(nested=level >= 3 and trace.stage is Stage.DECOMPOSED), file=sys.stderr)
        if level >= 3 and plan is not None:
            for r in plan.regions:
                if r.generated is not None:
                    print(f"# --- {r.id} ({r.executor}) ---\n{r.generated.source}", file=sys.stderr)
        self.last = stage_clock()  # printing is no stage's time
        return trace


def _device_of(tensors) -> torch.device:
    for t in tensors:
        if t.device.type != "cpu":
            return t.device
    return torch.device("cpu")


def requires_grad(tensors) -> bool:
    """Whether a call on these tensors is compiled for training (as eager would record it)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def compile_program(fn, args, kwargs, options: CompileOptions | None = None,
                    name: str | None = None, dims: dynamic.DynamicDims = (),
                    ints: frozenset[int] = frozenset(), transforms: Sequence[CompileTransform] = ()) -> Compiled:
    """Trace `fn(*args, **kwargs)` and run every stage. `options.previews`: with the default
    executors, also write the code of the fusion executors that cannot run here (reports want
    it; jit does not). Where grad is enabled and an input, parameter or buffer requires grad,
    the call is compiled for training: a forward and a backward program joined by autograd.
    `dims`: per user tensor, the dims the program serves every size of (fusionlens/frontend/dynamic.py);
    `ints`: the int arguments (positions among the call's flat leaves) it serves every value of.
    `transforms`: the parallel wrappings' (distributed/transform.py `unwrap`), whose hooks run
    here: a forward they rewrite is the optimised trace (differentiated and fused as it is),
    a backward they rewrite is lowered as a program of its own (`Compiled.rewritten`);
    `finished` applies their last hook, once the compile was checked and timed."""
    options = options or CompileOptions()
    start, stage_ms, since = time.perf_counter(), dict.fromkeys(STAGE_TIMES, 0.0), stage_clock()
    traced = frontend.trace(fn, args, kwargs, name, hooks=collectives.HOOKS)
    notes, eager_only = list(traced.notes), traced.eager_only
    traced, guards, why_static = _symbolic(fn, args, kwargs, name, dims, ints, traced)
    if why_static:
        notes.append(frontend.Note(Severity.INFORMATION, why_static, None, DiagnosticCode.DYNAMIC_SHAPES))
    forward = _StageLog(traced.trace.name, ProgramKind.FORWARD, options, stage_ms, since=since)
    acquired = forward(traced.trace)
    optimised = forward(_rewrite_forward(transforms, passes.optimise(forward(passes.decompose(acquired)))))
    user_tensors = frontend.user_tensors(fn, args, kwargs)
    device = _device_of(user_tensors + list(traced.constants.values()))
    names = executor_registry.resolve(list(options.executors) if options.executors else None, device)
    chosen = executor_registry.select(names, device, preview_all=options.previews and options.executors is None)
    notes += [frontend.Note(severity, message, where, DiagnosticCode.EXECUTOR)
              for severity, message, where in chosen.notes]
    forward.charge("fusion")  # choosing the executors
    constants = [traced.constants[v.name] for v in acquired.inputs if v.role is not ValueRole.INPUT]
    differentiated, why = _differentiate(optimised, user_tensors + constants)
    if why is not None:
        notes.append(why)
        eager_only = eager_only or why.message
    if differentiated is not None:
        notes += differentiated.notes  # the autograd transform's (an SDPA's backward without the fused kernel)
        forward(differentiated.joint)
        forward(differentiated.forward)
    programs = [_lower(forward, differentiated.forward if differentiated else optimised, chosen, device, "R", "P")]
    call = programs[0].fn
    if differentiated is not None:
        backward = _StageLog(f"{acquired.name} backward", ProgramKind.BACKWARD, options, stage_ms)
        programs.append(_lower(backward, backward(differentiated.backward), chosen, device, "B", "PB"))
        call = training_program(programs[0].fn, programs[1].fn, differentiated, len(acquired.inputs), acquired.output)
    rewritten = _rewritten(transforms, differentiated, programs[0], constants, names, device, options, stage_ms) \
        if differentiated is not None and eager_only is None else None
    n_user = sum(v.role is ValueRole.INPUT for v in acquired.inputs)
    if differentiated is None:  # a static forward program may replay as one CUDA graph
        call = cuda_graphs.maybe_graphed(call, programs[0], device, n_user, options.cuda_graphs, guards is None)
    if guards is not None:
        guards.finish()
    return Compiled(acquired.name, programs, call, constants, n_user, traced, (time.perf_counter() - start) * 1e3,
                    device, names, options, notes, eager_only, differentiated, stage_ms, guards, rewritten,
                    one_thread=differentiated is None and guards is None and on_one_thread(programs[0], device))


_RUN_ON_ONE_THREAD = frozenset({OpTag.ELEMENTWISE, OpTag.SHAPE, OpTag.FACTORY})  # TensorIterator kernels and views


def on_one_thread(program: Program, device: torch.device) -> bool:
    """Whether a static CPU program runs on one intra-op thread at each call (intra_op.py):
    its inputs and every value it makes hold at most intra_op.SMALL elements, and one of its
    ops may split even such a tensor over torch's pool (softmax, layer_norm, a linear: any op
    whose prims are not all elementwise, shape or factory ones; those run on one thread below
    SMALL anyway, so a chain of them is left as it is, with no switch a call). Such an op waits
    for the pool to wake at each call after a pause (milliseconds on a loaded machine) for
    microseconds of work."""
    trace = program.plan.trace
    if device.type != "cpu":
        return False
    if any(v.symbolic or v.numel() > intra_op.SMALL for v in trace.inputs):
        return False
    if not intra_op.small_ops(trace.bound_symbols):
        return False
    return any(not (leaf.sym.tags & _RUN_ON_ONE_THREAD) for b in trace.bound_symbols for leaf in _prims(b))


def _prims(b):
    """The innermost ops a bound symbol decomposes into (itself where it has none: a library call)."""
    if not b.subsymbols:
        yield b
    for s in b.subsymbols:
        yield from _prims(s)


def _rewrite_forward(transforms: Sequence[CompileTransform], optimised: Trace) -> Trace:
    """The optimised trace as each transform's `rewrite_forward` leaves it, in order: what
    autograd differentiates and fusion fuses (the optimised stage shows it)."""
    for t in transforms:
        optimised = t.rewrite_forward(optimised)
    return optimised


def _rewritten(transforms: Sequence[CompileTransform], d: autograd.Differentiated, forward: Program,
               constants: list[torch.Tensor], names: list[str], device, options: CompileOptions,
               stage_ms: dict[str, float]) -> RewrittenProgram | None:
    """The backward a transform rewrote (DDP's, with its bucket all-reduces), fused and lowered
    as the backward is (no previews), and the training call that runs it in the backward's place."""
    acquired = forward.traces[Stage.ACQUIRED]
    for t in transforms:
        rewrite = t.rewrite_backward(d, list(acquired.inputs), constants, d.backward)
        if rewrite is None:
            continue
        stage = _StageLog(f"{acquired.name} backward", ProgramKind.BACKWARD, options, stage_ms)
        program = _lower(stage, stage(rewrite.trace), executor_registry.select(names, device), device, "B", "PB")
        fn = training_program(forward.fn, rewrite.wrap(program.fn), d, len(acquired.inputs), acquired.output)
        return RewrittenProgram(t.name, rewrite, program, fn)
    return None


def _symbolic(fn, args, kwargs, name, dims: dynamic.DynamicDims, ints: frozenset[int],
              traced: frontend.TraceResult):
    """(the trace to compile, its guards, why it is not symbolic): the real trace unless
    `dims` (or `ints`) asks for symbolic sizes and the call can be traced with them."""
    if not any(dims) and not ints or traced.eager_only is not None:
        return traced, None, ""
    if ints and requires_grad(frontend.user_tensors(fn, args, kwargs) + list(traced.constants.values())):
        ints = frozenset()  # a backward runs after later calls have set the int symbols: sizes only
        if not any(dims):
            return traced, None, ""
    try:
        symbolic, guards = dynamic.trace(fn, args, kwargs, name or traced.trace.name, dims, traced, ints)
    except dynamic.Unsupported as e:
        return traced, None, f"this signature compiles for its static shapes: {e}"
    return symbolic, guards, ""


def _lower(stage: _StageLog, trace: Trace, chosen, device, prefix: str, preview_prefix: str) -> Program:
    """A program from the trace fusion starts at: fused, lowered, compiled to a function; and
    the same lowering in source-only mode for each executor that can only preview."""
    # an input's update written into it, not into a copy copied back, where safe (middle/reinplace.py)
    flat = stage(reinplace.reinplace(fusion.prepare(trace, chosen.fusers), chosen.fusers,
                                     training=trace.stage is Stage.FORWARD), fusers=chosen.fusers)
    options = stage.options
    plan = lowering.lower(flat, chosen.fusers, device, prefix, profile=options.profile, verify=options.verifying)
    stage(plan.trace, plan)
    fn = plan.trace.python_callable()
    stage.charge("lowering")  # the execution trace's exec
    previews = [PreviewPlan(ex.name, why, _preview_plan(trace, ex, device, preview_prefix, options))
                for ex, why in chosen.previews]
    stage.charge("previews")  # their fusion and lowering, source only
    return Program(stage.kind, stage.traces, plan, fn, previews)


def _preview_plan(trace: Trace, ex, device, prefix: str, options: CompileOptions) -> lowering.Plan:
    """`ex`'s regions of `trace` and their code, by lowering in its source-only mode."""
    flat = reinplace.reinplace(fusion.prepare(trace, [ex]), [ex], training=trace.stage is Stage.FORWARD)
    return lowering.lower(flat, [ex], device, prefix, source_only=True,
                          verify=options.verifying)


def _differentiate(optimised: Trace,
                   tensors: list[torch.Tensor]) -> tuple[autograd.Differentiated | None, frontend.Note | None]:
    """(the forward and backward traces where the call records autograd, else None; a note
    when it cannot be differentiated). An op the transform cannot differentiate makes the
    signature run eagerly (said at its line)."""
    if not requires_grad(tensors):
        return None, None
    try:
        return autograd.differentiate(optimised, [t.requires_grad for t in tensors]), None
    except autograd.Unsupported as e:
        why = f"training runs eagerly: {e.message}"
        return None, frontend.Note(Severity.WARNING, why, e.where, DiagnosticCode.TRAINING_EAGER)


def training_program(forward_fn, backward_fn, d: autograd.Differentiated, n_inputs: int, output) -> Any:
    """The forward and backward programs joined in a torch.autograd.Function."""
    return autograd_runtime.training_program(forward_fn, backward_fn, n_inputs, d.n_results,
                                             d.differentiable, d.grad_inputs, output_builder(output), d.written,
                                             d.returned)
