"""Memory of the busiest GPU by kind (docs/plan.md).

bf16 mixed precision with fp32 master weights and AdamW, as Megatron-LM keeps them: a bf16
parameter (2 bytes), its fp32 gradient (4: gradients are accumulated and reduced in fp32),
the fp32 master copy and Adam's two moments (12). ZeRO 1 shards the 12 over data parallel,
ZeRO 2 the gradients too, ZeRO 3 the parameters too. Tensor parallel shards matrices
(Linears, the vocab-parallel embedding), not the norms' vectors.

Activations are the forward program's saved tensors (what its backward reads), each divided
as its op is sharded; the attention core's under selective recomputation are dropped, and
under full recomputation a block keeps only its input. The first stage of 1F1B holds
min(pp, micro-batches) micro-batches (Narayanan et al. 2021), interleaving adds
(pp - 1) / (pp vpp) of them (Korthikanti et al. 2022, section 4.2.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusionlens.ir.trace import Value
from fusionlens.ir.vocabulary import ValueRole
from fusionlens.plan import costs
from fusionlens.plan.layout import Layout
from fusionlens.plan.parallel import Sharding
from fusionlens.plan.trace import Traced
from fusionlens.report.plan import MemoryGiB

GIB = float(1 << 30)
PARAM_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 4, 12
RESERVED_GIB = 2.0  # CUDA context, NCCL and the allocator's slack: a plan must leave this free
BUCKET_BYTES = 25 * (1 << 20)  # DDP's bucket_cap_mb default (two in flight)


@dataclass
class Stages:
    """How the layers lie on the pipeline: per GPU, its layer count and whether it holds the
    model's first part (embeddings) and last part (output layer, loss)."""

    layers: list[int]

    @classmethod
    def of(cls, layers: int, layout: Layout) -> Stages:
        chunks = layout.pp * layout.vpp
        per = [layers // chunks + (1 if i < layers % chunks else 0) for i in range(chunks)]
        return cls([sum(per[g::layout.pp]) for g in range(layout.pp)])


def _sharded(p, traced: Traced, layout: Layout) -> int:
    """The ways tensor parallel splits parameter `p`: a matrix (weights, embeddings) tp ways;
    under the target's own plan, only the weights its plan shards."""
    own = traced.own
    if own is not None and own.tp is not None:
        return layout.tp if p.name in own.linears else 1
    return layout.tp if p.ndim >= 2 else 1


def param_elements(traced: Traced, layout: Layout, stage: int, stages: Stages) -> float:
    """Parameters one GPU of pipeline stage `stage` holds (tensor-parallel shards)."""
    per_block = traced.traced_blocks
    total = 0.0
    last = stage == layout.pp - 1
    for p in traced.params:
        share = p.numel / _sharded(p, traced, layout)
        if p.where == "block":
            total += share * stages.layers[stage] / per_block
        elif p.where == "pre" and stage == 0 or p.where == "post" and last or p.where == "both" and (
                stage == 0 or last):
            total += share
    return total


def activations(traced: Traced, sharding: Sharding, layout: Layout) -> dict[str, float]:
    """Bytes saved per micro-batch: {"pre", "block" (one block), "post"} on one GPU."""
    parts = traced.parts["forward"]
    made = {o.name: (part, s) for b, part, s in zip(traced.ops("forward"), parts, sharding.ops["forward"])
            for o in b.outputs}
    fwd = traced.ops("forward")
    inputs = {v.name for v in traced.source("forward").inputs}
    constant = {o.name for k in costs.constant_ops(fwd, inputs) for o in fwd[k].outputs}
    out = {"pre": 0.0, "block": 0.0, "post": 0.0}
    for v in traced.saved:
        if v.name in constant:  # made from constants only (a causal mask): one for every block
            out["pre"] += _bytes(v)
            continue
        if v.role in (ValueRole.PARAM, ValueRole.INPUT):  # alive anyway: the weights, the batch
            continue
        part, s = made.get(v.name, ("pre", None))
        if s is not None and s.core and layout.recompute == "selective":
            continue
        out[part] += _bytes(v) / sharding.saved_divide.get(v.name, 1)
    out["block"] /= traced.traced_blocks
    if layout.recompute == "full":  # a block keeps its input only
        out["block"] = block_input_bytes(traced) / (layout.cp * (layout.tp if layout.sp else 1))
    return out


def block_input_bytes(traced: Traced) -> float:
    """The hidden state entering a block: the largest activation the blocks read from the ops
    before them (what a pipeline stage receives)."""
    ops, parts = traced.ops("forward"), traced.parts["forward"]
    before = {o.name: o for b, p in zip(ops, parts) if p == "pre" for o in b.outputs}
    read = [v for b, p in zip(ops, parts) if p == "block" for v in b.inputs()
            if isinstance(v, Value) and v.name in before]
    return max((_bytes(v) for v in read), default=0.0)


def _bytes(v: Value) -> float:
    return float(math.prod(v.shape) * v.dtype.itemsize)


def memory(traced: Traced, sharding: Sharding, layout: Layout, transient: float) -> tuple[MemoryGiB, int]:
    """The busiest GPU's memory and its stage."""
    stages = Stages.of(traced.layers, layout)
    acts = activations(traced, sharding, layout)
    m = layout.micro_batches
    best, where = None, 0
    for stage in {0, layout.pp - 1}:
        n = param_elements(traced, layout, stage, stages)
        in_flight = min(layout.pp - stage, m)
        interleave = 1 + (layout.pp - 1) / (layout.pp * layout.vpp) if layout.vpp > 1 and stage == 0 else 1
        a = acts["block"] * stages.layers[stage] * in_flight * interleave
        a += acts["pre"] * in_flight if stage == 0 else 0
        a += acts["post"] if stage == layout.pp - 1 else 0
        mem = _kinds(n, a, traced, layout, transient)
        if best is None or mem.total > best.total:
            best, where = mem, stage
    assert best is not None
    return best, where


def _kinds(n: float, acts: float, traced: Traced, layout: Layout, transient: float) -> MemoryGiB:
    dp = layout.dp * layout.cp  # Megatron reduces and shards gradients over data x context parallel
    params = n * PARAM_BYTES / (dp if layout.zero >= 3 else 1)
    grads = n * GRAD_BYTES / (dp if layout.zero >= 2 else 1)
    optimizer = n * OPTIMIZER_BYTES / (dp if layout.zero >= 1 else 1)
    buffers = 2 * BUCKET_BYTES if dp > 1 and layout.zero == 0 else 0.0
    if layout.zero >= 3:  # the unit being computed and the next one, gathered
        buffers += 2 * traced.block_params * PARAM_BYTES / layout.tp
    if layout.pp > 1:  # a send and a receive of the hidden state, each way
        buffers += 4 * block_input_bytes(traced) / (layout.cp * (layout.tp if layout.sp else 1))
    kinds = [params, grads, optimizer, acts, buffers, transient]
    total = sum(kinds) / GIB
    return MemoryGiB(params / GIB, grads / GIB, optimizer / GIB, acts / GIB, buffers / GIB, transient / GIB, total,
                     layout.system.hbm_gib)


def fits(m: MemoryGiB) -> bool:
    return m.total <= m.capacity - RESERVED_GIB
