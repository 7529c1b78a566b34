"""A plan's per-line costs and its collectives, as the PlanReport lists them: per step on the
busiest GPU (a block's lines times that stage's blocks and the micro-batches)."""

from __future__ import annotations

from collections import defaultdict

from fusionlens.plan import memory as memory_model
from fusionlens.plan.units import fsdp_units
from fusionlens.ir.vocabulary import ValueRole
from fusionlens.report import plan as R

GIB = memory_model.GIB
_SHORT = {"all_reduce": "all-reduce", "all_gather_into_tensor": "all-gather", "reduce_scatter_tensor": "reduce-scatter",
          "ring": "ring attention", "send_recv": "send/recv"}


def short(kind: str) -> str:
    return _SHORT.get(kind, kind)


def _times(part: str, layout, stages, busiest: int) -> float:
    """How often a part's op runs a step on its GPU: blocks x micro-batches."""
    if part == "block":
        return stages.layers[busiest] * layout.micro_batches
    return layout.micro_batches


def lines(timed, comms, traced, sharding, layout, stages, busiest, buckets=()) -> list[R.LineCost]:
    """`buckets`: DDP's all-reduces at their lines ([(Collective, seconds, exposed, count)] a step)."""
    out: dict = {}
    recompute = layout.recompute
    for (part, (file, line)), acc in timed.lines.items():
        n = _times(part, layout, stages, busiest)
        lc = out.setdefault((file, line), R.LineCost(file, line))
        again = acc["compute_forward"] if recompute == "full" and part == "block" else \
            acc["core"] if recompute == "selective" and part == "block" else 0.0
        lc.compute_s += (acc["compute_forward"] + acc["compute_backward"] + again) * n
        lc.flops += acc["flops"] * n
    for x in comms:
        if x.c.line is None:
            continue
        n = _times(x.c.part, layout, stages, busiest) * traced.traced_blocks if x.c.part == "block" else \
            _times(x.c.part, layout, stages, busiest)
        lc = out.setdefault(x.c.line, R.LineCost(*x.c.line))
        lc.comm_s += x.seconds * n
        lc.exposed_comm_s += x.exposed * n
        key = f"{x.c.group.upper()} {short(x.c.kind)}"
        lc.comm_kinds[key] = lc.comm_kinds.get(key, 0.0) + x.exposed * n
    for c, seconds, exposed, _ in buckets:
        if c.line is not None:
            lc = out.setdefault(c.line, R.LineCost(*c.line))
            lc.comm_s += seconds
            lc.exposed_comm_s += exposed
            lc.comm_kinds["DP all-reduce"] = lc.comm_kinds.get("DP all-reduce", 0.0) + exposed
    acts = _line_activations(traced, sharding, layout)
    in_flight = min(layout.pp, layout.micro_batches)
    for key, nbytes in acts.items():
        lc = out.setdefault(key[1], R.LineCost(*key[1]))
        n = stages.layers[0] * in_flight / traced.traced_blocks if key[0] == "block" else in_flight
        lc.activations_gib += nbytes * n / GIB
    return sorted(out.values(), key=lambda lc: (lc.file, lc.line))


def _line_activations(traced, sharding, layout) -> dict:
    made = {}
    for b, part, s in zip(traced.ops("forward"), traced.parts["forward"], sharding.ops["forward"]):
        p = b.provenance
        for o in b.outputs:
            made[o.name] = (part, (p.file, p.line) if p is not None else None, s)
    out: dict = defaultdict(float)
    if layout.recompute == "full":
        return out
    for v in traced.saved:
        part, line, s = made.get(v.name, (None, None, None))
        if line is None or v.role is ValueRole.PARAM or (s is not None and s.core and layout.recompute == "selective"):
            continue
        out[part, line] += v.numel() * v.dtype.itemsize / sharding.saved_divide.get(v.name, 1)
    return out


def collectives(comms, dp_colls, p2p, layout, stages, busiest, traced=None) -> list[R.PlanCollective]:
    size = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp, "dpcp": layout.dp * layout.cp}
    merged: dict = {}
    for x in comms:
        n = _times(x.c.part, layout, stages, busiest)
        count = n * (x.count if x.c.part == "block" else 1)
        key = (x.c.kind, x.c.group, x.c.nbytes, x.c.line)
        pc = merged.get(key)
        if pc is None:
            merged[key] = R.PlanCollective(x.c.kind, x.c.group, size[x.c.group], x.c.nbytes, 0, 0.0, 0.0,
                                           *(x.c.line or (None, None)))
            pc = merged[key]
        per = x.seconds / x.count if x.count else 0.0
        pc.count += round(count)
        pc.seconds += per * count
        pc.exposed_s += (x.exposed / x.count if x.count else 0.0) * count
    out = list(merged.values())
    units = fsdp_units(traced) if layout.zero == 3 and traced is not None else []
    if units:
        out += _per_unit(dp_colls, units, traced, layout, stages.layers[busiest], size["dpcp"])
    else:  # ZeRO 1/2's aggregates; ZeRO 0's buckets, those of a line and size merged (plan/buckets.py)
        dp: dict = {}
        for c, seconds, exposed, count in dp_colls:
            pc = dp.setdefault((c.kind, c.nbytes, c.line), R.PlanCollective(
                c.kind, "dp", size["dpcp"], c.nbytes, 0, 0.0, 0.0, *(c.line or (None, None))))
            pc.count += round(count)
            pc.seconds += seconds
            pc.exposed_s += exposed
        out += dp.values()
    if p2p is not None:
        sends = 2 * layout.vpp * layout.micro_batches
        from fusionlens.plan import costs

        t = costs.collective_time(p2p, layout)
        out.append(R.PlanCollective("send_recv", "pp", layout.pp, p2p.nbytes, sends, t * sends, t * sends))
    return out


def _per_unit(dp_colls, units, traced, layout, layers: int, group_size: int) -> list[R.PlanCollective]:
    """ZeRO-3's gathers and reduce-scatters per FSDP2 unit at the line that calls it (plan/units.py):
    each block's parameters, and the root's (the rest), the aggregate's time shared by bytes."""
    totals = {c.kind: (c, seconds, exposed, count) for c, seconds, exposed, count in dp_colls}
    n_params = totals["reduce_scatter_tensor"][0].nbytes / memory_model.GRAD_BYTES
    block = sum(p.numel / memory_model._sharded(p, traced, layout) for p in traced.params
                if p.where == "block") / max(traced.traced_blocks, 1)
    share = {"block": block, "root": max(n_params - block * layers, 0.0)}
    calls = {"block": layers, "root": 1}
    out: dict = {}
    for kind, (_, seconds, exposed, count) in totals.items():
        per_bytes = memory_model.PARAM_BYTES / (layout.dp * layout.cp) if kind == "all_gather_into_tensor" else \
            memory_model.GRAD_BYTES
        for u in units:
            rounds = count  # gathers or scatters of a unit a step; FSDP2's root is not resharded after its forward
            if u.part == "root" and kind == "all_gather_into_tensor" and layout.reshard_after_forward:
                rounds = count // 2
            n = calls[u.part] // (traced.traced_blocks if u.part == "block" else 1)
            frac = share[u.part] * n / n_params if n_params else 0.0
            key = (kind, u.line, u.part)
            pc = out.setdefault(key, R.PlanCollective(kind, "dp", group_size, int(share[u.part] * per_bytes), 0, 0.0,
                                                      0.0, *(u.line or (None, None))))
            pc.count += round(rounds * n)
            pc.seconds += seconds * frac
            pc.exposed_s += exposed * frac
    return [pc for pc in out.values() if pc.bytes_per_rank]
