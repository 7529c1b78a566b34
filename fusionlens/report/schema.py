"""CompileReport: the one contract between the compiler and every consumer.

Plain dataclasses, JSON in and out. Consumers (CLI, language server, tests) read this and
nothing else. Bump SCHEMA_VERSION on any incompatible change; docs/report.md documents it.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# 2: regions[].cost and .roofline, previews' regions alike, peaks; 3: backward;
# 4: programs (forward, backward) each with traces, regions and previews; training; codes;
# 5: ranks (a launch on N ranks), collectives[].time_ms, regions[].timing.slowest_ms/_rank
SCHEMA_VERSION = 5

# The kinds of program a compile makes, in the order CompileReport.programs lists them.
PROGRAM_KINDS = ("forward", "backward")
# Each kind's stages in pipeline order (fusionlens/driver/pipeline.py): the keys of its traces. A
# forward program has `joint` (the forward-backward trace) and `forward` (its forward half)
# only when compiled for training; the backward program starts at its half of the joint trace.
PROGRAM_STAGES = {
    "forward": ("acquired", "decomposed", "optimised", "joint", "forward", "fusion", "execution"),
    "backward": ("backward", "fusion", "execution"),
}
# An inference compile's stages (every forward program has these).
TRACE_STAGES = ("acquired", "decomposed", "optimised", "fusion", "execution")
# Every stage name of any program, for `--stage`.
ALL_STAGES = tuple(dict.fromkeys(s for kind in PROGRAM_KINDS for s in PROGRAM_STAGES[kind]))
# The region-id prefixes users see: a program's regions, and the previews of its code by an
# executor that could not run here.
_REGION_PREFIX = {"forward": "R", "backward": "B"}
_PREVIEW_PREFIX = {"forward": "P", "backward": "PB"}


_UNMADE = object()  # the one key of a Deferred not made yet (no read sees it: each makes the entries first)


class Deferred(dict):
    """A report's dict whose entries are made when it is first read (a jit call's report: its
    traces printed, the package versions looked up, only if someone reads them). However it is
    read (items, ==, dataclasses.asdict and to_json, pickle, copy) it is the dict `make()` returns."""

    def __init__(self, *args, make: Callable[[], dict] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._make = make
        if make is not None:  # never empty unmade: json's C encoder writes an empty dict's "{}"
            dict.__setitem__(self, _UNMADE, None)  # from its storage, without asking items()

    def filled(self) -> Deferred:
        make = self._make
        if make is not None:  # two threads may both make it: the same entries
            dict.pop(self, _UNMADE, None)
            dict.update(self, make())
            self._make = None
        return self

    def __eq__(self, other: object) -> bool:
        return dict.__eq__(self.filled(), other.filled() if isinstance(other, Deferred) else other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __reduce__(self):  # pickle, copy and deepcopy: the plain dict
        return dict, (dict.copy(self.filled()),)

    __hash__ = None  # a dict


def _read_filled(name: str):
    method = getattr(dict, name)
    return functools.wraps(method)(lambda self, *args, **kwargs: method(self.filled(), *args, **kwargs))


for _name in ("__getitem__", "__iter__", "__len__", "__contains__", "__repr__", "__or__", "__ror__", "__ior__",
              "__reversed__", "__setitem__", "__delitem__", "get", "keys", "values", "items", "copy", "pop",
              "popitem", "setdefault", "update", "clear"):  # each reads (or changes) the entries made first
    setattr(Deferred, _name, _read_filled(_name))


@dataclass(frozen=True)
class RegionRef:
    """A region of a compile as a value: which program, which index, and for a preview the
    executor whose code it is. Its `id` is what users see (`R3`, `B1`, `P2`, `PB0`; a
    preview by an executor other than `default_preview` is spelt `nvfuser:P2`)."""

    program: str  # a PROGRAM_KINDS entry
    index: int
    preview: str | None = None  # the previewing executor, None for a region that ran

    @property
    def id(self) -> str:
        prefix = (_PREVIEW_PREFIX if self.preview else _REGION_PREFIX)[self.program]
        return f"{prefix}{self.index}"

    def spelt(self, default_preview: str = "triton") -> str:
        """The id with the preview's executor where it is not the default one."""
        if self.preview and self.preview != default_preview:
            return f"{self.preview}:{self.id}"
        return self.id

    @classmethod
    def parse(cls, text: str, default_preview: str = "triton") -> RegionRef | None:
        """`R3`, `B1`, `P2`, `PB0`, `nvfuser:P2` as a RegionRef; None for anything else."""
        executor, _, rid = text.strip().rpartition(":")
        for table, preview in ((_PREVIEW_PREFIX, executor or default_preview), (_REGION_PREFIX, None)):
            for program, prefix in sorted(table.items(), key=lambda kv: -len(kv[1])):
                digits = rid[len(prefix):]
                if rid.startswith(prefix) and digits.isdigit() and (preview or not executor):
                    return cls(program, int(digits), preview)
        return None


@dataclass(frozen=True)
class SourceLine:
    file: str
    line: int


@dataclass(frozen=True)
class Frame:
    """One user frame of an op's call stack (fusionlens.ir.provenance records them)."""

    file: str
    line: int
    function: str


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: list[int | str]  # a dynamic program's symbolic dims as their expressions: "s0", "3*s0"
    dtype: str
    device: str


@dataclass(frozen=True)
class Timing:
    """Summary of repeated measurements of one callable, in milliseconds."""

    median_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float  # interquartile range: the spread
    repeats: int
    method: str  # "cuda_events" or "perf_counter"
    device: str


@dataclass(frozen=True)
class RegionTiming:
    median_ms: float | None = None
    eager_median_ms: float | None = None  # the same ops run one by one through torch
    spread_ms: float | None = None
    slowest_ms: float | None = None  # a launch on N ranks: the largest median_ms of any rank
    slowest_rank: int | None = None  # which rank that was (a straggler)
    # on a GPU: the host time of one call (the Python launcher, its allocations, the driver), kept
    # out of median_ms (CUDA-graph replay or events over many launches: fusionlens/driver/timing.py)
    launch_ms: float | None = None


@dataclass(frozen=True)
class Boundary:
    """Why a region ends where it does (filled in by the fusion pass)."""

    reason: str  # short kind for people: "library call", "unsupported op", "reduction axis", ...
    detail: str
    file: str | None = None
    line: int | None = None
    code: str = ""  # the kind for programs to match on (contract.BoundaryCode's values)


@dataclass(frozen=True)
class Cost:
    """The least a region must do (fusionlens/middle/cost.py; docs/roofline.md)."""

    bytes: int  # every input read once and every output written once
    flops: int  # counted per prim; library calls by their own formulas
    math: str = "fp32"  # which peak bounds its FLOPs: "fp32" (CUDA cores), "tf32", "bf16" (tensor cores)


@dataclass(frozen=True)
class Roofline:
    """The least time a region can take on a GPU (fusionlens/report/roofline.py; docs/roofline.md)."""

    device: str  # a key of the roofline table ("H100")
    peak_gbs: float
    peak_tflops: float  # the peak of the region's math
    bound: str  # "memory" | "compute": which of the two minimums is the larger
    min_ms: float  # max(bytes / peak_gbs, flops / peak_tflops)
    pct_of_peak: float | None = None  # 100 * min_ms / measured median, measured on that GPU only
    estimate: bool = True  # the program did not run on this GPU
    math: str = "fp32"


@dataclass(frozen=True)
class KernelLaunch:
    """How one kernel of a region launches, at the example's sizes (docs/kernels.md)."""

    kernel: str
    grid: list[int]  # programs along each grid axis
    num_warps: int
    num_stages: int = 1
    blocks: dict[str, int] = field(default_factory=dict)  # its block sizes (BLOCK_M, BLOCK_N, ...)


@dataclass(frozen=True)
class KernelStatic:
    """One kernel compiled for a target GPU here, nothing run (docs/kernels.md): what its PTX and
    cubin say, and what that means on the GPU's SMs."""

    kernel: str
    arch: str  # "sm_90"
    gpu: str  # the roofline table's GPU whose SMs the occupancy and waves are for
    load_bits: int | None = None  # the widest global load a thread issues (128: ld.global.v4.b32)
    store_bits: int | None = None
    regs: int | None = None  # registers a thread (cuobjdump; None where it is not there)
    spill_bytes: int | None = None  # local memory a thread: spills and stack
    shared_bytes: int = 0
    blocks_per_sm: int = 0  # resident programs an SM, from warps, registers and shared memory
    waves: float = 0.0  # programs / (SMs x blocks_per_sm)
    passes: int = 1  # passes over the region's largest input
    read_ratio: float | None = None  # bytes this kernel reads / the least bytes the region must read
    error: str = ""  # why it did not compile


@dataclass(frozen=True)
class DevicePeaks:
    """The GPU a report's rooflines are for, and the copy bandwidth measured where it ran."""

    device: str  # a key of the roofline table
    hbm_gbs: float
    fp32_tflops: float
    tf32_tflops: float
    bf16_tflops: float
    estimate: bool  # a target GPU (fusionlens.targetGpu, --gpu): the program ran elsewhere
    copy_gbs: float | None = None  # measured: a large tensor copy, read + write, GB/s
    copy_device: str | None = None  # where copy_gbs was measured ("cuda:0", "cpu")


@dataclass(frozen=True)
class Region:
    id: str
    executor: str
    ops: list[str]  # symbol names, in execution order
    source_lines: list[SourceLine]
    code: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    timing: RegionTiming | None = None
    boundary: Boundary | None = None
    kernels: int = 1  # device kernels this region launches (torch ops: an estimate of 1)
    note: str = ""  # e.g. why an executor declined it
    cost: Cost | None = None
    roofline: Roofline | None = None
    # the nn.Module path its ops share ("h.0.attn": the longest common one; "" the whole model),
    # by which the report's fusion graph groups regions
    module: str = ""
    launch: list[KernelLaunch] = field(default_factory=list)  # a Triton region's kernels, as they launch
    static: list[KernelStatic] = field(default_factory=list)  # those kernels compiled for the target GPU
    findings: list[str] = field(default_factory=list)  # what `launch` and `static` mean, in plain words

    @property
    def ref(self) -> RegionRef | None:
        return RegionRef.parse(self.id, self.executor)


@dataclass(frozen=True)
class Collective:
    """A collective the program runs on torch.distributed: traced at the user's line, or run
    by the engine's own hooks (DDP's gradient buckets), listed so a report shows every one."""

    op: str  # all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast, all_to_all_single, ...
    kind: str  # "traced" (a symbol of the program) | "ddp-bucket" (DDP's reducer, in the backward)
    bytes: int  # what each rank sends in: the tensor it reduces or gathers from
    group_size: int
    program: str = "forward"  # the program that runs it (a report.PROGRAM_KINDS entry)
    region: str = ""  # the region that runs it ("" where a hook does)
    file: str | None = None
    line: int | None = None
    estimate: str = ""  # on CompileOptions.cluster, its whole world: `est 1.2 ms on 64x8xH100 (ring)`
    estimate_ms: float | None = None
    time_ms: RankSpread | None = None  # measured on every rank of a launch (None outside one)
    # regions of its program that run between its issue and its wait (it overlaps them); [] when
    # it runs synchronously (nothing overlaps it)
    overlapped_by: list[str] = field(default_factory=list)
    exposed_ms: float | None = None  # of estimate_ms, what the overlapping regions do not hide
    model_ms: float | None = None  # the same model on this machine's measured alpha, beta (a launch's calibration)
    rank_ms: list[float | None] = field(default_factory=list)  # a launch's: each rank's time_ms, in rank order
    wait_region: str = ""  # the region that waits for it ("" where none does: DDP's reducer's, a torch call's)


@dataclass(frozen=True)
class RankSpread:
    """A time measured on every rank of a launch: its least, median and largest value, ms."""

    min: float
    median: float
    max: float


@dataclass(frozen=True)
class RankReport:
    """One rank of a launch on N ranks (`fusionlens compile --nproc N`): where it ran and what
    it measured there. The merged report is rank 0's with one of these per rank."""

    rank: int
    device: str
    compile_ms: float | None = None
    timings: ProgramTimings | None = None  # the forward program against eager, on this rank
    step: ProgramTimings | None = None  # a training step, on this rank
    region_ms: dict[str, float | None] = field(default_factory=dict)  # region id -> its median here
    collective_ms: list[float | None] = field(default_factory=list)  # per report collective, in order
    calibration: Calibration | None = None  # this rank's fit of all_reduce on its backend


@dataclass(frozen=True)
class Calibration:
    """A launch's short calibration (fusionlens/report/comm_model.py `calibrate`): all_reduce over the
    whole world timed at a few sizes, fitted to `seconds = alpha + beta * bytes`."""

    backend: str  # "gloo", "nccl"
    world: int
    alpha_s: float  # latency, seconds
    beta_s: float  # seconds a byte (1 / bandwidth); <= 0 when the fit failed: no model_ms then
    sizes: list[int] = field(default_factory=list)  # bytes, one all_reduce size a sample
    median_s: list[float] = field(default_factory=list)  # the median time of each size, seconds


@dataclass(frozen=True)
class OpRecord:
    """One traced torch-level op: where it came from and where it went."""

    index: int
    name: str  # symbol name, e.g. "torch.nn.functional.linear"
    region: str | None  # region id it executes in (None if eliminated)
    file: str
    line: int
    end_line: int
    col: int
    end_col: int
    stack: list[Frame]  # innermost first, user frames only
    trace: str  # the op's line in the optimised trace
    prims: list[str]  # names of the prims it decomposed into


@dataclass(frozen=True)
class Fallback:
    op: str
    reason: str
    file: str | None
    line: int | None


@dataclass(frozen=True)
class Diagnostic:
    """Lines are 1-based, columns 0-based UTF-8 byte offsets (as Python's ast and code
    positions count them)."""

    severity: str  # "error" | "warning" | "information"
    message: str
    file: str | None = None
    line: int | None = None
    col: int | None = None
    end_line: int | None = None
    end_col: int | None = None
    code: str = ""  # what it is about, for programs to match on (DiagnosticCode's values)


class DiagnosticCode(enum.StrEnum):
    """The `code` of a Diagnostic: consumers match on these, never on the message's text."""

    MISMATCH = "mismatch"  # the compiled result does not match eager
    GRADIENT_MISMATCH = "gradient-mismatch"  # a compiled gradient does not match eager's
    ILL_CONDITIONED = "ill-conditioned"  # a gradient past float32's tolerance, as close to float64 as eager
    PRECISION = "precision"  # a result past eager's tolerance, as close to a float64 run as eager's (or closer)
    EAGER_FALLBACK = "eager-fallback"  # the signature runs eagerly (jit)
    TRAINING_EAGER = "training-eager"  # the training program runs eagerly
    DATA_DEPENDENT = "data-dependent"  # control flow or a shape depends on tensor values
    VALUE_GUARD = "value-guard"  # a branch on a tensor's value: checked at each call, or why a call recompiled
    INPLACE_VIEW = "inplace-view"  # an in-place update through a view
    CAPTURED_CONSTANT = "captured-constant"  # a tensor that is no input was captured
    NOTHING_TO_COMPILE = "nothing-to-compile"  # the call returned no tensor
    COLLECTIVE = "collective"  # a torch.distributed collective: traced, or why the signature runs eagerly
    DYNAMIC_SHAPES = "dynamic-shapes"  # which sizes a program serves, or why it is static
    HIDDEN_TENSORS = "hidden-tensors"  # the result holds computed tensors FusionLens cannot rebuild
    INPLACE_PARAMETER = "inplace-parameter"  # the call updates a parameter in place
    WRITEBACK = "writeback"  # an input updated in place: the program writes it back
    EXECUTOR = "executor"  # an executor cannot run here or declined a region
    ROOFLINE = "roofline"  # what the rooflines are computed for
    BENCHMARK = "benchmark"  # a timing could not be taken
    RANDOM = "random"  # a random op: compared by shape, or run eagerly
    ATTENTION_BACKWARD = "attention-backward"  # SDPA's backward holds [B, H, L, S]: why no fused kernel
    OTHER = "other"


@dataclass(frozen=True)
class ProgramTimings:
    device: str
    compiled: Timing | None = None
    eager: Timing | None = None
    torch_compile: Timing | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_torch_compile: float | None = None


@dataclass(frozen=True)
class SavedTensor:
    """A tensor the forward program keeps for the backward."""

    name: str
    shape: list[int | str]
    dtype: str
    bytes: int
    kind: str  # "activation" (computed by the forward: the memory training costs) or the input's role
    file: str | None = None  # the user line that produced it (activations)
    line: int | None = None


@dataclass(frozen=True)
class Preview:
    """The code a fusion executor that cannot run here (Triton or nvFuser on a CPU) would run
    for a program: why it did not run, and the regions it would make. Nothing in it ran; their
    rooflines are estimates and they have no timing."""

    executor: str
    reason: str
    regions: list[Region] = field(default_factory=list)


@dataclass(frozen=True)
class ProgramReport:
    """One program of a compile: an inference or training forward, or a training backward."""

    kind: str  # a PROGRAM_KINDS entry
    traces: dict[str, str] = field(default_factory=dict)  # PROGRAM_STAGES[kind] that ran -> Python source
    regions: list[Region] = field(default_factory=list)  # what runs, in order
    previews: list[Preview] = field(default_factory=list)
    # the program run alone against eager (forward); a backward is timed in Training.step
    timings: ProgramTimings | None = None

    def region(self, region_id: str) -> Region | None:
        return next((r for r in self.regions if r.id == region_id), None)


@dataclass(frozen=True)
class Training:
    """What a training compile adds to its two programs: what the forward saves for the
    backward, what the backward recomputes, which inputs get gradients, one step's time."""

    saved: list[SavedTensor] = field(default_factory=list)
    saved_bytes: int = 0  # activations only: inputs and parameters are alive anyway
    recomputed: list[str] = field(default_factory=list)  # values the backward recomputes rather than saves
    grad_inputs: list[str] = field(default_factory=list)  # names of the inputs that get gradients
    step: ProgramTimings | None = None  # one training step: the forward, then gradients for fixed cotangents


@dataclass(frozen=True)
class Target:
    name: str
    file: str | None
    line: int | None
    end_line: int | None


class JsonDocument:
    """A report that is a JSON document of its own (CompileReport, plan.PlanReport): to and from
    plain dicts and JSON text, nested dataclasses rebuilt by `from_plain`."""

    def to_dict(self) -> dict[str, Any]:
        # every subclass is a dataclass; this mixin itself is none
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> typing.Self:
        return from_plain(cls, data)

    @classmethod
    def from_json(cls, text: str) -> typing.Self:
        return cls.from_dict(json.loads(text))


@dataclass(frozen=True)
class CompileReport(JsonDocument):
    target: Target
    status: str = "ok"  # "ok" | "error"
    error: Diagnostic | None = None
    executors: list[str] = field(default_factory=list)  # requested, in priority order
    programs: list[ProgramReport] = field(default_factory=list)  # in PROGRAM_KINDS order; none on error
    training: Training | None = None  # compiled for training (grad enabled, something requires grad)
    ops: list[OpRecord] = field(default_factory=list)
    fallbacks: list[Fallback] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    signature: list[str] = field(default_factory=list)  # assumptions the trace specialised on
    guards: list[str] = field(default_factory=list)  # a dynamic program's: what each call's sizes must satisfy
    collectives: list[Collective] = field(default_factory=list)  # torch.distributed communication, in order
    device: str = "cpu"
    device_name: str = "CPU"
    versions: dict[str, str] = field(default_factory=dict)
    compile_ms: float | None = None
    peaks: DevicePeaks | None = None  # what the rooflines are computed for
    ranks: list[RankReport] = field(default_factory=list)  # a launch on N ranks: one entry each, in rank order
    stage_ms: dict[str, float] = field(default_factory=dict)  # the compile's stages (pipeline.STAGE_TIMES) -> ms
    schema_version: int = SCHEMA_VERSION


    def program(self, kind: str) -> ProgramReport | None:
        return next((p for p in self.programs if p.kind == kind), None)

    @property
    def forward(self) -> ProgramReport:
        """The forward program; an empty one when nothing was compiled (status "error")."""
        return self.program("forward") or ProgramReport("forward")

    def all_regions(self) -> list[Region]:
        """Every region that runs, the forward's then the backward's."""
        return [r for p in self.programs for r in p.regions]

    def find(self, ref: RegionRef) -> Region | None:
        """The region or preview region `ref` names, or None."""
        program = self.program(ref.program)
        if program is None:
            return None
        if ref.preview is None:
            return program.region(ref.id)
        preview = next((p for p in program.previews if p.executor == ref.preview), None)
        return next((r for r in preview.regions if r.id == ref.id), None) if preview else None


def format_bytes(n: int, compact: bool = False) -> str:
    """`1.5 MB`; `compact`: no decimal from 10 up (`512 KB`), for inlay hints."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.0f} {unit}" if compact and n >= 10 * scale else f"{n / scale:.1f} {unit}"
    return f"{n} B"


def format_ms(ms: float | None, missing: str = "?") -> str:
    """A time for people: 3 significant figures, in µs below 0.1 ms; "< 0.1 µs" for what would
    print as 0.0 µs (a small tensor's roofline at a GPU's bandwidth takes nanoseconds)."""
    if ms is None:
        return missing
    if round(ms * 1000, 1) == 0:
        return "< 0.1 µs"
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    if ms >= 0.1:
        return f"{ms:.2f} ms"
    return f"{ms * 1000:.1f} µs"


@functools.lru_cache(maxsize=256)  # keyed by dataclasses: the report's and the worker protocol's, a few dozen
def _nested_fields(cls: type) -> dict[str, type]:
    """field -> the dataclass it holds (alone, optional, or as a list's elements), read from the
    field's annotation: `list[Region]`, `Training | None`."""
    out: dict[str, type] = {}
    for name, hint in typing.get_type_hints(cls).items():
        held = [a for a in _held(hint) if isinstance(a, type) and dataclasses.is_dataclass(a)]
        if held:
            out[name] = held[0]
    return out


def _held(hint: Any) -> list[Any]:
    if typing.get_origin(hint) in (list, types.UnionType, typing.Union):
        return [x for a in typing.get_args(hint) for x in _held(a)]
    return [hint]


def from_plain(cls: type, data: Any) -> Any:
    """An instance of dataclass `cls` from its plain-dict form (`dataclasses.asdict`, JSON),
    nested dataclasses too, as the fields' annotations say; keys it does not know are left out
    (a newer writer's). What the report and the language server's worker protocol are read with."""
    if data is None:
        return None
    nested = _nested_fields(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value, inner = data[f.name], nested.get(f.name)
        if inner is not None and value is not None:
            value = [from_plain(inner, v) for v in value] if isinstance(value, list) else from_plain(inner, value)
        kwargs[f.name] = value
    return cls(**kwargs)
