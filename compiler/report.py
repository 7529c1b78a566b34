"""CompileReport: the one contract between the compiler and every consumer.

Plain dataclasses, JSON in and out. Consumers (CLI, language server, tests) read this and
nothing else. Bump SCHEMA_VERSION on any incompatible change; docs/report.md documents it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Optional

SCHEMA_VERSION = 3  # 2: regions[].cost and .roofline, previews' regions alike, peaks; 3: backward

# The compiler's stages in order (compiler/pipeline.py): the keys of CompileReport.traces.
TRACE_STAGES = ("acquired", "decomposed", "optimised", "fusion", "execution")
# A training compile's own stages (CompileReport.backward.traces): the joint trace, its two
# halves, then the backward half's fusion and execution stages.
BACKWARD_STAGES = ("joint", "forward", "backward", "fusion", "execution")


@dataclass
class SourceLine:
    file: str
    line: int


@dataclass(frozen=True)
class Frame:
    """One user frame of an op's call stack (compiler.provenance records them)."""

    file: str
    line: int
    function: str


@dataclass
class TensorInfo:
    name: str
    shape: list
    dtype: str
    device: str


@dataclass
class Timing:
    """Summary of repeated measurements of one callable, in milliseconds."""

    median_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float  # interquartile range: the spread
    repeats: int
    method: str  # "cuda_events" or "perf_counter"
    device: str


@dataclass
class RegionTiming:
    median_ms: Optional[float] = None
    eager_median_ms: Optional[float] = None  # the same ops run one by one through torch
    spread_ms: Optional[float] = None


@dataclass
class Boundary:
    """Why a region ends where it does (filled in by the fusion pass)."""

    reason: str  # short kind: "library call", "unsupported op", "reduction axis", ...
    detail: str
    file: Optional[str] = None
    line: Optional[int] = None


@dataclass
class Cost:
    """The least a region must do (compiler/cost.py; docs/roofline.md)."""

    bytes: int  # every input read once and every output written once
    flops: int  # counted per prim; library calls by their own formulas
    math: str = "fp32"  # which peak bounds its FLOPs: "fp32" (CUDA cores), "tf32", "bf16" (tensor cores)


@dataclass
class Roofline:
    """The least time a region can take on a GPU (compiler/roofline.py; docs/roofline.md)."""

    device: str  # a key of the roofline table ("H100")
    peak_gbs: float
    peak_tflops: float  # the peak of the region's math
    bound: str  # "memory" | "compute": which of the two minimums is the larger
    min_ms: float  # max(bytes / peak_gbs, flops / peak_tflops)
    pct_of_peak: Optional[float] = None  # 100 * min_ms / measured median, measured on that GPU only
    estimate: bool = True  # the program did not run on this GPU
    math: str = "fp32"


@dataclass
class DevicePeaks:
    """The GPU a report's rooflines are for, and the copy bandwidth measured where it ran."""

    device: str  # a key of the roofline table
    hbm_gbs: float
    fp32_tflops: float
    tf32_tflops: float
    bf16_tflops: float
    estimate: bool  # a target GPU (fusionlens.targetGpu, --gpu): the program ran elsewhere
    copy_gbs: Optional[float] = None  # measured: a large tensor copy, read + write, GB/s
    copy_device: Optional[str] = None  # where copy_gbs was measured ("cuda:0", "cpu")


@dataclass
class Region:
    id: str
    executor: str
    ops: list  # symbol names, in execution order
    source_lines: list  # [SourceLine]
    code: str
    inputs: list  # [TensorInfo]
    outputs: list  # [TensorInfo]
    timing: Optional[RegionTiming] = None
    boundary: Optional[Boundary] = None
    kernels: int = 1  # device kernels this region launches (torch ops: an estimate of 1)
    note: str = ""  # e.g. why an executor declined it
    cost: Optional[Cost] = None
    roofline: Optional[Roofline] = None


@dataclass
class OpRecord:
    """One traced torch-level op: where it came from and where it went."""

    index: int
    name: str  # symbol name, e.g. "torch.nn.functional.linear"
    region: Optional[str]  # region id it executes in (None if eliminated)
    file: str
    line: int
    end_line: int
    col: int
    end_col: int
    stack: list  # [Frame], innermost first, user frames only
    trace: str  # the op's line in the optimised trace
    prims: list  # names of the prims it decomposed into


@dataclass
class Fallback:
    op: str
    reason: str
    file: Optional[str]
    line: Optional[int]


@dataclass
class Diagnostic:
    """Lines are 1-based, columns 0-based UTF-8 byte offsets (as Python's ast and code
    positions count them)."""

    severity: str  # "error" | "warning" | "information"
    message: str
    file: Optional[str] = None
    line: Optional[int] = None
    col: Optional[int] = None
    end_line: Optional[int] = None
    end_col: Optional[int] = None


@dataclass
class ProgramTimings:
    device: str
    compiled: Optional[Timing] = None
    eager: Optional[Timing] = None
    torch_compile: Optional[Timing] = None
    speedup_vs_eager: Optional[float] = None
    speedup_vs_torch_compile: Optional[float] = None


@dataclass
class SavedTensor:
    """A tensor the forward program keeps for the backward."""

    name: str
    shape: list
    dtype: str
    bytes: int
    kind: str  # "activation" (computed by the forward: the memory training costs) or the input's role
    file: Optional[str] = None  # the user line that produced it (activations)
    line: Optional[int] = None


@dataclass
class Backward:
    """A training compile: the backward program, what the forward saves for it, the step's time."""

    traces: dict = field(default_factory=dict)  # BACKWARD_STAGES -> Python source
    regions: list = field(default_factory=list)  # [Region]: source_lines are the forward lines they differentiate
    saved: list = field(default_factory=list)  # [SavedTensor]
    saved_bytes: int = 0  # activations only: inputs and parameters are alive anyway
    recomputed: list = field(default_factory=list)  # values the backward recomputes rather than saves
    grad_inputs: list = field(default_factory=list)  # names of the inputs that get gradients
    previews: list = field(default_factory=list)  # as CompileReport.previews, of the backward program
    timings: Optional[ProgramTimings] = None  # one training step: the forward, then gradients for fixed cotangents


@dataclass
class Target:
    name: str
    file: Optional[str]
    line: Optional[int]
    end_line: Optional[int]


@dataclass
class CompileReport:
    target: Target
    status: str = "ok"  # "ok" | "error"
    error: Optional[Diagnostic] = None
    executors: list = field(default_factory=list)  # requested, in priority order
    traces: dict = field(default_factory=dict)  # stage name -> Python source
    regions: list = field(default_factory=list)  # [Region]
    ops: list = field(default_factory=list)  # [OpRecord]
    fallbacks: list = field(default_factory=list)  # [Fallback]
    diagnostics: list = field(default_factory=list)  # [Diagnostic]
    timings: Optional[ProgramTimings] = None
    signature: list = field(default_factory=list)  # assumptions the trace specialised on
    device: str = "cpu"
    device_name: str = "CPU"
    versions: dict = field(default_factory=dict)
    compile_ms: Optional[float] = None
    # executors asked for but unusable here that can still write their code (nvFuser
    # without a GPU): [{executor, reason, regions: [{id, ops, source_lines, code, inputs,
    # outputs, cost, roofline}]}], plain dicts with a Region's fields
    previews: list = field(default_factory=list)
    peaks: Optional[DevicePeaks] = None  # what the rooflines are computed for
    backward: Optional[Backward] = None  # compiled for training (grad enabled, something requires grad)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self, indent: Optional[int] = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict) -> "CompileReport":
        return _build(cls, data)

    @classmethod
    def from_json(cls, text: str) -> "CompileReport":
        return cls.from_dict(json.loads(text))

    def region(self, region_id: str) -> Region:
        return next(r for r in self.regions if r.id == region_id)


def format_bytes(n: int, compact: bool = False) -> str:
    """`1.5 MB`; `compact`: no decimal from 10 up (`512 KB`), for inlay hints."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.0f} {unit}" if compact and n >= 10 * scale else f"{n / scale:.1f} {unit}"
    return f"{n} B"


def format_ms(ms: Optional[float], missing: str = "?") -> str:
    """A time for people: 3 significant figures, in µs below 0.1 ms."""
    if ms is None:
        return missing
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    if ms >= 0.1:
        return f"{ms:.2f} ms"
    return f"{ms * 1000:.1f} µs"


# (class, field) -> dataclass of the list elements or nested object, for from_dict.
_NESTED: dict = {
    (CompileReport, "target"): Target, (CompileReport, "error"): Diagnostic,
    (CompileReport, "regions"): Region, (CompileReport, "ops"): OpRecord,
    (CompileReport, "fallbacks"): Fallback, (CompileReport, "diagnostics"): Diagnostic,
    (CompileReport, "timings"): ProgramTimings,
    (Region, "source_lines"): SourceLine, (Region, "inputs"): TensorInfo, (Region, "outputs"): TensorInfo,
    (Region, "timing"): RegionTiming, (Region, "boundary"): Boundary,
    (Region, "cost"): Cost, (Region, "roofline"): Roofline, (CompileReport, "peaks"): DevicePeaks,
    (OpRecord, "stack"): Frame,
    (CompileReport, "backward"): Backward, (Backward, "regions"): Region, (Backward, "saved"): SavedTensor,
    (Backward, "timings"): ProgramTimings,
    (ProgramTimings, "compiled"): Timing, (ProgramTimings, "eager"): Timing, (ProgramTimings, "torch_compile"): Timing,
}


def _build(cls, data: Any):
    if data is None:
        return None
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        nested = _NESTED.get((cls, f.name))
        if nested is not None and value is not None:
            value = [_build(nested, v) for v in value] if isinstance(value, list) else _build(nested, value)
        kwargs[f.name] = value
    return cls(**kwargs)
