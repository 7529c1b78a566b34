"""DDP's gradient buckets on the busiest GPU at scale (ZeRO 0), each at its line, with its time
and what of it the backward does not hide.

The gradients come in the order the backward finishes them (plan/units.py `ddp_grads`, read from
DDP's transform): those of the part after the blocks (on the last pipeline stage), every block of
the stage's (one block's, repeated), those of the part before (on the first stage). DDP fills its
buckets in that order, as its reducer rebuilds them (`_compute_bucket_assignment_by_size`,
fusionlens/distributed/ddp_overlap.py `plan_buckets`): a bucket closes once it holds its cap, the
first at `FIRST_BUCKET_BYTES`, every other at `memory.BUCKET_BYTES` (a target that gives DDP its
own `bucket_cap_mb`: every bucket at that, plan/own.py); each is all-reduced at the
line of the op that finishes its last gradient. The plan's gradients are fp32 (Megatron's main
gradients, `memory.GRAD_BYTES`), tensor-parallel shards of them where the parameter is split.

Timing: the all-reduces run one after another on the communication stream, each starting once
its last gradient is made (the end of the part or block that makes it: the backward of the last
micro-batch, recomputation included) and the previous one is done; a bucket's exposed time is
what of it runs after the backward (and after the bucket before it) ends. Their sum is the
step's exposed DDP time: at least the last bucket, as the aggregate model had it (at least a
25 MiB bucket), and more where the gradients made at the end (the embeddings) are large.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed

from fusionlens.plan import costs, memory as memory_model
from fusionlens.plan.layout import Layout
from fusionlens.plan.parallel import Collective
from fusionlens.plan.trace import Traced
from fusionlens.plan.units import DdpOrder, Grad

FIRST_BUCKET_BYTES = torch.distributed._DEFAULT_FIRST_BUCKET_BYTES  # DDP's first bucket: 1 MiB


@dataclass
class Bucket:
    nbytes: int = 0  # the fp32 gradients it holds, on one GPU (tensor-parallel shards)
    line: tuple[str, int] | None = None  # where it is issued: the op finishing its last gradient
    part: str = "block"  # the part of its last gradient
    ready_s: float = 0.0  # when its last gradient is made, from the start of the backward


@dataclass(frozen=True)
class BackwardTimes:
    """Seconds of the last micro-batch's backward on the busiest GPU: the part after the blocks
    (0 where the GPU does not hold it), one block (its recomputation included), all of it."""

    head: float
    block: float
    total: float


def _sequence(order: DdpOrder, traced: Traced, stage: int, layout: Layout, blocks: int):
    """(Grad, part, ready_s index) of the stage's gradients in the order they are finished:
    the ready index is -1 for the head, k for the k-th block, `blocks` for the tail."""
    where = {p.name: p.where for p in traced.params}

    def held(g: Grad) -> bool:
        w = where[g.param]
        return w == "pre" and stage == 0 or w == "post" and stage == layout.pp - 1 or \
            w == "both" and (stage == 0 or stage == layout.pp - 1)
    out = [(g, where[g.param], -1) for g in order.before if held(g)]
    for k in range(blocks):
        out += [(g, "block", k) for g in order.block]
    return out + [(g, where[g.param], blocks) for g in order.after if held(g)]


def buckets(order: DdpOrder, traced: Traced, layout: Layout, stage: int, blocks: int,
            times: BackwardTimes) -> list[Bucket]:
    """DDP's buckets of pipeline stage `stage` (holding `blocks` blocks), in the order issued."""
    params = {p.name: p for p in traced.params}
    first, cap = _caps(traced)
    out: list[Bucket] = []
    current = Bucket()
    for g, part, k in _sequence(order, traced, stage, layout, blocks):
        p = params[g.param]
        current.nbytes += int(p.numel / memory_model._sharded(p, traced, layout)) * memory_model.GRAD_BYTES
        current.line, current.part = g.line, part
        current.ready_s = times.total if k >= blocks else times.head + (k + 1) * times.block if k >= 0 else times.head
        if current.nbytes >= (first if not out else cap):
            out.append(current)
            current = Bucket()
    return out + ([current] if current.nbytes else [])


def _caps(traced: Traced) -> tuple[int, int]:
    """(the first bucket's cap, every other's) in bytes: DDP's defaults, or the target's own
    `bucket_cap_mb` for every bucket (as DDP caps them when it is given)."""
    own = traced.own
    if own is not None and own.bucket_cap_mb is not None:
        return (int(own.bucket_cap_mb * (1 << 20)),) * 2
    return FIRST_BUCKET_BYTES, memory_model.BUCKET_BYTES


def collectives(bucketed: list[Bucket], layout: Layout, backward_s: float) -> list[tuple]:
    """[(Collective, seconds, exposed, count)] a bucket each, timed as the module doc says."""
    out: list[tuple] = []
    done = 0.0
    for b in bucketed:
        c = Collective("all_reduce", b.nbytes, "dpcp", "backward", b.part, b.line)
        t = costs.collective_time(c, layout)
        start = max(b.ready_s, done)
        exposed = max(0.0, start + t - max(backward_s, done))
        done = start + t
        out.append((c, t, exposed, 1))
    return out
