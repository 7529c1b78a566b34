"""`--search`: the plans that fit on a cluster for a global batch, fastest first.

Pruned, not brute-forced (docs/plan.md): tensor parallel stays within a node (its all-reduces
are on the critical path) and divides the heads; pipeline stages divide the layers;
context parallel is tried only for sequences of 8192 and more; a ZeRO stage is tried only when
the one below it does not fit; recomputation only when none does not fit or as the next
cheaper one; micro-batches double while they fit. The target is traced once per micro-batch
size; every other option is a transform of the same programs.
"""

from __future__ import annotations

import dataclasses

from fusionlens.plan import model
from fusionlens.plan.layout import Layout
from fusionlens.plan.trace import Traced
from fusionlens.report.plan import PlanPoint

LIMIT = 64  # points kept on the frontier


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(traced: Traced, base: Layout) -> list[Layout]:
    out = []
    world, node = base.world, base.gpus_per_node
    tps = [t for t in (1, 2, 4, 8) if t <= node and world % t == 0]
    pps = [p for p in _divisors(traced.layers) if p <= 64]
    cps = [1] + ([2, 4, 8] if traced.seq >= 8192 else [])
    for tp in tps:
        for pp in pps:
            for cp in cps:
                if world % (tp * pp * cp):
                    continue
                dp = world // (tp * pp * cp)
                if base.global_batch % dp:
                    continue
                vpps = [1] + [v for v in (2, 3, 4) if pp > 1 and traced.layers % (pp * v) == 0]
                for vpp in vpps:
                    out.append(dataclasses.replace(base, tp=tp, pp=pp, cp=cp, dp=dp, vpp=vpp, sp=tp > 1,
                                                   micro_batch=traced.micro_batch))
    return out


def search(traced: Traced, base: Layout, retrace=None) -> list[PlanPoint]:
    """Plans that fit, by predicted step time (and some that do not, last, for the frontier)."""
    points: list[PlanPoint] = []
    variants = {traced.micro_batch: traced}
    for layout in candidates(traced, base):
        for zero in (0, 1, 2, 3):
            fitted = False
            for recompute in ("none", "selective", "full"):
                lay = dataclasses.replace(layout, zero=zero, recompute=recompute)
                if base.global_batch % (lay.dp * lay.micro_batch):
                    continue
                rep = model.evaluate(traced, lay, detail=False)
                points.append(PlanPoint(rep.options, rep.step_s, rep.memory_gib.total, rep.fits, rep.mfu))
                if rep.fits:
                    fitted = True
                    _bigger_micro_batches(traced, lay, retrace, variants, points)
                    break
            if fitted:
                break
    points.sort(key=lambda p: (not p.fits, p.step_s))
    return points[:LIMIT]


def _bigger_micro_batches(traced, lay: Layout, retrace, variants: dict, points: list) -> None:
    """Double the micro-batch while it fits and divides the batch (one trace per size)."""
    if retrace is None:
        return
    mb = traced.micro_batch * 2
    while lay.global_batch % (lay.dp * mb) == 0 and mb <= 16:
        if mb not in variants:
            variants[mb] = retrace(mb)
        bigger = dataclasses.replace(lay, micro_batch=mb)
        rep = model.evaluate(variants[mb], bigger, detail=False)
        points.append(PlanPoint(rep.options, rep.step_s, rep.memory_gib.total, rep.fits, rep.mfu))
        if not rep.fits:
            return
        mb *= 2
