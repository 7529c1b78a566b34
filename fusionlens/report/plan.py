"""PlanReport: what a training step costs at scale (`fusionlens plan`, `fusionlens.plan`).

Plain dataclasses, JSON in and out, no torch: the CLI, the language server and the HTML page
read it. docs/report.md documents every field; docs/plan.md how each is computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fusionlens.report.schema import JsonDocument

PLAN_SCHEMA_VERSION = 1


@dataclass
class MemoryGiB:
    """Memory of the busiest GPU, GiB (2**30 bytes), by kind."""

    params: float = 0.0
    grads: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0  # saved for the backward, at the busiest pipeline stage
    buffers: float = 0.0  # communication buffers (gathered parameters, pipeline sends)
    transient: float = 0.0  # the largest temporary of the step (a gradient being made)
    total: float = 0.0
    capacity: float = 0.0  # the GPU's HBM


@dataclass
class Breakdown:
    """Seconds of one step on the busiest GPU; they add up to `step_s`."""

    compute_s: float = 0.0  # forward and backward ops, recomputation included
    recompute_s: float = 0.0  # of compute_s: the forward ops run again in the backward
    exposed_comm_s: dict[str, float] = field(default_factory=dict)  # "tp", "cp", "dp", "pp" -> seconds waited
    bubble_s: float = 0.0  # pipeline fill and drain
    optimizer_s: float = 0.0


@dataclass
class PlanCollective:
    kind: str  # all_reduce, all_gather_into_tensor, reduce_scatter_tensor, ring (attention), send_recv
    group: str  # tp, cp, dp, pp
    group_size: int
    bytes_per_rank: int  # what each rank passes in
    count: int  # how many a step on the busiest GPU
    seconds: float  # all of them
    exposed_s: float  # of seconds, what the step waits for
    file: str | None = None
    line: int | None = None


@dataclass
class LineCost:
    """A user line at scale: per step on the busiest GPU."""

    file: str
    line: int
    compute_s: float = 0.0
    comm_s: float = 0.0  # its collectives
    exposed_comm_s: float = 0.0
    activations_gib: float = 0.0  # what its ops save for the backward, all micro-batches in flight
    flops: float = 0.0
    comm_kinds: dict[str, float] = field(default_factory=dict)  # "TP all_reduce" -> exposed seconds


@dataclass
class StageSpan:
    """One slot of the pipeline schedule of the busiest step: a stage (GPU) doing something."""

    stage: int
    kind: str  # forward, backward, bubble, comm, optimizer
    start_s: float
    end_s: float
    micro_batch: int = -1
    chunk: int = 0  # the virtual stage (interleaved)


@dataclass
class PlanPoint:
    """One plan the search costed: its options, step time and memory."""

    options: dict[str, Any]
    step_s: float
    memory_gib: float
    fits: bool
    mfu: float


@dataclass
class PlanReport(JsonDocument):
    name: str  # the target
    cluster: str  # 128x8xH100
    gpu: str
    options: dict[str, Any]  # tp, pp, vpp, cp, dp, sp, zero, global_batch, micro_batch, recompute
    step_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float  # model FLOPs a second on one GPU
    hardware_tflops_per_gpu: float  # recomputation included
    mfu: float  # tflops_per_gpu / the GPU's dense BF16 peak
    memory_gib: MemoryGiB
    fits: bool
    breakdown: Breakdown
    lines: list[LineCost] = field(default_factory=list)
    collectives: list[PlanCollective] = field(default_factory=list)
    schedule: list[StageSpan] = field(default_factory=list)
    frontier: list[PlanPoint] = field(default_factory=list)  # --search: the plans that fit, fastest first
    params: int = 0  # in the whole model
    model_flops: float = 0.0  # a step, the whole cluster: forward and backward as traced, no recompute
    flops_formula: str = ""
    linears: dict[str, list[str]] = field(default_factory=dict)  # tensor parallel: "column"/"row" -> Linears
    notes: list[str] = field(default_factory=list)
    planning_s: float = 0.0
    schema_version: int = PLAN_SCHEMA_VERSION

