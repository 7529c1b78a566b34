"""One plan costed: the traced programs, transformed by the layout, timed and sized.

    per micro-batch, per pipeline stage (GPU):
      forward  = its blocks' ops + (first stage) embeddings + (last stage) output layer and loss
                 + its exposed tensor- and context-parallel communication
      backward = the same for the backward program + recomputation (full: the forward again;
                 selective: the attention core's forward ops)
    step = pipeline (micro-batches + bubble) slots of the slowest stage's forward + backward
           + point-to-point sends + exposed data-parallel / ZeRO communication + optimizer step
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from fusionlens.plan import buckets as ddp_buckets, costs, memory as memory_model, schedule
from fusionlens.plan.layout import Layout
from fusionlens.plan.parallel import Collective, Sharding, shard
from fusionlens.plan.trace import Traced
from fusionlens.plan.units import ddp_grads, fsdp_units
from fusionlens.report import plan as R

PARTS = ("pre", "block", "post")


@dataclass
class Timed:
    """Seconds of one micro-batch by program and part (a block: one block), and per line."""

    compute: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))  # (kind, part) -> s
    core: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # forward attention core: part -> s
    flops: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))  # on one GPU
    model_flops: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))  # unsharded
    lines: dict[tuple[str, Any], dict[str, float]] = field(  # (part, (file, line)) -> compute_forward, ...
        default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    transient: float = 0.0


def _time_ops(traced: Traced, sharding: Sharding, layout: Layout) -> Timed:
    out = Timed()
    one = Layout(1, 1, layout.system)
    blocks = traced.traced_blocks
    flash: dict = defaultdict(float)
    for b, s in zip(traced.ops("forward"), sharding.ops["forward"]):
        if b.sym.name.endswith("scaled_dot_product_attention") and _line_of(b) is not None:
            flash[_line_of(b)] += costs.op_time(b, s, layout).flops
    for kind in ("forward", "backward"):
        ops = traced.ops(kind)
        results = {v.name for v in traced.source(kind).results()}
        inputs = {v.name for v in traced.source(kind).inputs}
        times = costs.program_times(ops, traced.parts[kind], sharding.ops[kind], layout, results,
                                    flash if kind == "backward" else None, inputs)
        for b, part, s, t in zip(ops, traced.parts[kind], sharding.ops[kind], times):
            share = 1 / blocks if part == "block" else 1.0
            out.compute[kind, part] += t.seconds * share
            out.flops[kind, part] += t.flops * share
            out.model_flops[kind, part] += costs.op_time(b, _unsharded(s), one).flops * share
            if kind == "forward" and s.core:
                out.core[part] += t.seconds * share
            line = _line_of(b)
            if line is not None:
                acc = out.lines[part, line]
                acc["compute_" + kind] += t.seconds * share
                acc["flops"] += t.flops * share
                if kind == "forward" and s.core:
                    acc["core"] += t.seconds * share
            if kind == "backward" and not costs.in_flash_kernel(b, flash):
                # (an attention's backward ops are one flash kernel, costs._flash_backward: its scores are
                # never whole in memory, so they are no temporary)
                out.transient = max(out.transient, max((o.numel() * o.dtype.itemsize for o in b.outputs), default=0)
                                    / s.divide)
    return out


def _unsharded(s):
    from fusionlens.plan.parallel import OpShard

    return OpShard(1, s.gemm, s.core, False)


def _line_of(b):
    p = b.provenance
    return (p.file, p.line) if p is not None else None


@dataclass
class Comm:
    seconds: float
    exposed: float
    c: Collective
    count: float  # per micro-batch (block ones: per block) on the busiest GPU


def _tp_cp(sharding: Sharding, layout: Layout, timed: Timed, traced: Traced) -> list[Comm]:
    out = []
    for c in sharding.collectives:
        t = costs.collective_time(c, layout)
        share = 1 / traced.traced_blocks if c.part == "block" else 1.0
        exposed = t
        if c.overlap == "gemm":
            exposed = 0.0
        elif c.overlap == "attention":
            rings = [x for x in sharding.collectives if x.group == "cp" and x.part == c.part and x.program == "forward"]
            per_op = timed.core[c.part] / max(1, len(rings))
            exposed = max(0.0, t - per_op * (2 if c.program == "backward" else 1))
        out.append(Comm(t * share, exposed * share, c, share))
    return out


def evaluate(traced: Traced, layout: Layout, name: str = "", detail: bool = True) -> R.PlanReport:
    layout.check()
    sharding = shard(traced, layout)
    timed = _time_ops(traced, sharding, layout)
    comms = _tp_cp(sharding, layout, timed, traced)
    stages = memory_model.Stages.of(traced.layers, layout)
    m, pp = layout.micro_batches, layout.pp

    def per_stage(g: int, kind: str, what) -> float:
        n = stages.layers[g]
        total = what(kind, "block") * n
        total += what(kind, "pre") if g == 0 else 0.0
        total += what(kind, "post") if g == pp - 1 else 0.0
        return total

    def comm_of(kind: str, part: str) -> float:
        return sum(x.exposed for x in comms if x.c.program == kind and x.c.part == part)

    fwd = [per_stage(g, "forward", lambda k, p: timed.compute[k, p] + comm_of(k, p)) for g in range(pp)]
    bwd = [per_stage(g, "backward", lambda k, p: timed.compute[k, p] + comm_of(k, p)) for g in range(pp)]
    rec = [_recompute(g, stages, timed, comm_of, layout) for g in range(pp)]
    p2p_s, p2p = _p2p(traced, layout)
    slots = [f + b + r + p2p_s for f, b, r in zip(fwd, bwd, rec)]
    busiest = max(range(pp), key=lambda g: slots[g])
    pipe_s, bubble = schedule.step_seconds(slots[busiest], m, pp, layout.vpp)
    n_params = memory_model.param_elements(traced, layout, busiest, stages)
    backward_s = bwd[busiest] + rec[busiest]
    ddp = _ddp(traced, layout, stages, busiest, timed, comm_of, rec[busiest], backward_s)
    dp_exposed, dp_total, dp_colls = _data_parallel(n_params, layout, backward_s, fwd[busiest], ddp)
    opt_params = n_params / (layout.dp * layout.cp if layout.zero >= 1 else 1)
    optimizer_s = costs.optimizer_seconds(opt_params, layout)
    step = pipe_s + dp_exposed + optimizer_s
    mem, _ = memory_model.memory(traced, sharding, layout, timed.transient)
    per_mb_model = sum(timed.model_flops[k, p] * (traced.layers if p == "block" else 1)
                       for k in ("forward", "backward") for p in PARTS)
    model_flops = per_mb_model * m * layout.dp
    recompute_flops = _recompute_flops(timed, traced, layout) * m * layout.dp
    tokens = layout.batch * traced.seq
    tflops = model_flops / layout.world / step / 1e12
    exposed: dict[str, float] = defaultdict(float)
    for x in comms:
        layers = stages.layers[busiest] if x.c.part == "block" else (1 if _on(busiest, x.c.part, pp) else 0)
        exposed[x.c.group] += x.exposed * layers * m * (2 if layout.recompute == "full" and x.c.program == "forward"
                                                         and x.c.part == "block" else 1)
    exposed["pp"] += p2p_s * m
    exposed["dp"] += dp_exposed
    compute = sum(slots[busiest] for _ in range(1)) * m - sum(exposed[g] for g in ("tp", "cp", "pp"))
    if detail and layout.zero == 3:
        fsdp_units(traced)  # before the notes are copied: a model FSDP2 cannot wrap says so
    rep = R.PlanReport(
        name, layout.cluster_name, layout.system.gpu, _options(layout), step, tokens / step,
        tokens / step / layout.world,
        tflops, (model_flops + recompute_flops) / layout.world / step / 1e12, tflops / layout.system.bf16_tflops,
        mem, memory_model.fits(mem),
        R.Breakdown(max(compute, 0.0), rec[busiest] * m, {k: v for k, v in exposed.items() if v > 0}, bubble,
                    optimizer_s),
        params=traced.total_params, model_flops=model_flops,
        flops_formula="forward + backward FLOPs of the traced programs (matmuls 2MNK, attention, elementwise), "
                      "recomputation excluded",
        linears=sharding.linears, notes=list(traced.notes))
    if detail:
        rep.lines = _lines(timed, comms, traced, sharding, layout, stages, busiest, dp_colls if ddp else [])
        rep.collectives = _collectives(comms, dp_colls, p2p, layout, stages, busiest, traced)
        rep.schedule = schedule.spans([f + p2p_s / 2 for f in fwd], [b + r + p2p_s / 2 for b, r in zip(bwd, rec)], m)
    return rep


def _on(stage: int, part: str, pp: int) -> bool:
    return part == "block" or part == "pre" and stage == 0 or part == "post" and stage == pp - 1


def _recompute(g: int, stages, timed: Timed, comm_of, layout: Layout) -> float:
    n = stages.layers[g]
    if layout.recompute == "full":
        return n * (timed.compute["forward", "block"] + comm_of("forward", "block"))
    if layout.recompute == "selective":
        return n * timed.core["block"]
    return 0.0


def _recompute_flops(timed: Timed, traced: Traced, layout: Layout) -> float:
    if layout.recompute == "none":
        return 0.0
    block = timed.model_flops["forward", "block"]
    if layout.recompute == "selective":
        block = sum(v["flops"] for (part, _), v in timed.lines.items() if part == "block" and v["core"] > 0)
        block *= layout.tp if layout.tp > 1 else 1  # lines' flops are per GPU: back to the whole model
    return block * traced.layers


def _p2p(traced: Traced, layout: Layout) -> tuple[float, Collective | None]:
    """A stage boundary's sends a micro-batch: the hidden state forward, its gradient back, each
    split over the tensor-parallel ranks' own NICs (Megatron's scatter-gather), per chunk."""
    if layout.pp == 1:
        return 0.0, None
    nbytes = int(memory_model.block_input_bytes(traced) / (layout.tp * layout.cp))
    c = Collective("send_recv", nbytes, "pp", "forward", "block", None)
    return 2 * layout.vpp * costs.collective_time(c, layout), c


def _ddp(traced: Traced, layout: Layout, stages, busiest: int, timed: Timed, comm_of, recompute_s: float,
         backward_s: float) -> list | None:
    """ZeRO 0's all-reduces a DDP bucket each, at their lines (plan/buckets.py); None where there
    is no data parallelism or DDP's transform does not apply (the aggregate stands, a note says why)."""
    if layout.zero != 0 or layout.dp * layout.cp == 1:
        return None
    order = ddp_grads(traced)
    if order is None:
        return None
    blocks = stages.layers[busiest]
    head = timed.compute["backward", "post"] + comm_of("backward", "post") if busiest == layout.pp - 1 else 0.0
    block = timed.compute["backward", "block"] + comm_of("backward", "block") + recompute_s / max(blocks, 1)
    times = ddp_buckets.BackwardTimes(head, block, backward_s)
    found = ddp_buckets.buckets(order, traced, layout, busiest, blocks, times)
    return ddp_buckets.collectives(found, layout, times.total)


def _data_parallel(n_params: float, layout: Layout, backward_s: float, forward_s: float, ddp: list | None = None):
    """(exposed seconds a step, total seconds, [(Collective, seconds, exposed, count)]); `ddp`:
    ZeRO 0's buckets (`_ddp`), in place of one all-reduce of every gradient."""
    group = "dpcp"
    if layout.dp * layout.cp == 1:
        return 0.0, 0.0, []
    grads = int(n_params * memory_model.GRAD_BYTES)
    params = int(n_params * memory_model.PARAM_BYTES)
    dp = layout.dp * layout.cp
    m = layout.micro_batches
    out = []
    if layout.zero == 0 and ddp:
        out = list(ddp)
    elif layout.zero == 0:
        c = Collective("all_reduce", grads, group, "backward", "block", None)
        t = costs.collective_time(c, layout)
        bucket = costs.collective_time(Collective("all_reduce", memory_model.BUCKET_BYTES, group, "backward", "block",
                                                  None), layout)
        exposed = max(t - backward_s, min(bucket, t))
        out.append((c, t, exposed, 1))
    elif layout.zero in (1, 2):
        rs = Collective("reduce_scatter_tensor", grads, group, "backward", "block", None)
        ag = Collective("all_gather_into_tensor", params // dp, group, "forward", "block", None)
        t_rs, t_ag = costs.collective_time(rs, layout), costs.collective_time(ag, layout)
        out += [(rs, t_rs, max(t_rs - backward_s, 0.0), 1), (ag, t_ag, t_ag, 1)]
    else:
        ag = Collective("all_gather_into_tensor", params // dp, group, "forward", "block", None)
        rs = Collective("reduce_scatter_tensor", grads, group, "backward", "block", None)
        t_ag, t_rs = costs.collective_time(ag, layout), costs.collective_time(rs, layout)
        gathers = 2 if layout.reshard_after_forward else 1
        exposed_f = max(t_ag - forward_s, 0.0)
        exposed_b = max(t_ag * (gathers - 1) + t_rs - backward_s, 0.0)
        out += [(ag, t_ag * gathers * m, (exposed_f + exposed_b) * m, gathers * m), (rs, t_rs * m, 0.0, m)]
    return sum(x[2] for x in out), sum(x[1] for x in out), out


def _options(layout: Layout) -> dict:
    return {"tp": layout.tp, "pp": layout.pp, "vpp": layout.vpp, "cp": layout.cp, "dp": layout.dp, "sp": layout.sp,
            "zero": layout.zero, "global_batch": layout.batch, "micro_batch": layout.micro_batch,
            "micro_batches": layout.micro_batches, "recompute": layout.recompute}


def _lines(timed, comms, traced, sharding, layout, stages, busiest, buckets) -> list[R.LineCost]:
    from fusionlens.plan.report_lines import lines

    return lines(timed, comms, traced, sharding, layout, stages, busiest, buckets)


def _collectives(comms, dp_colls, p2p, layout, stages, busiest, traced) -> list[R.PlanCollective]:
    from fusionlens.plan.report_lines import collectives

    return collectives(comms, dp_colls, p2p, layout, stages, busiest, traced)
