"""Where the data-parallel collectives are issued, from issue 27's transforms
(fusionlens/distributed/transform.py) applied to the traced model (the stack cut to its traced
blocks, on the meta device) on a 2-rank mesh with no ranks:

- FSDP2 with each repeated block a unit (torchtitan's wrapping) gives each unit's all-gather and
  reduce-scatter at the line that calls it (`fsdp_units`).
- DDP, with a bucket cap below any gradient so that each gradient is a bucket of its own, gives
  the order in which the backward finishes the gradients and the line of the op finishing each:
  a DDP bucket is issued at the line of the op that finishes its last gradient (`ddp_grads`).
  plan/buckets.py fills DDP's buckets from that order for the whole model, every block repeated.

The plan keeps its own bytes (bf16 parameters gathered, fp32 gradients reduced: Megatron's and
torchtitan's mixed precision) and times; the transform tells it which unit or bucket, and which
line, each collective belongs to, so the plan lists them as a real run records them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from fusionlens.plan.trace import Traced, _cut


@dataclass(frozen=True)
class Unit:
    part: str  # "block" (one of the repeated blocks) or "root" (the rest of the model)
    line: tuple[str, int] | None  # where its collectives are issued


def _lines(records) -> list[tuple[str, int] | None]:
    return [(c.file, c.line) if c.file and c.line else None for c in records]


def fsdp_units(traced: Traced) -> list[Unit]:
    """FSDP2's units of the traced model in the order their forward gathers run: the root (if it
    holds parameters of its own) first, then the traced blocks. [] where the transform does not
    apply (the note says why)."""
    if "fsdp" not in traced.units:  # the units and their lines do not depend on the layout
        traced.units["fsdp"] = _apply(traced)
    return traced.units["fsdp"]


def _apply(traced: Traced) -> list[Unit]:
    from fusionlens.distributed.transform import FSDP2, Mesh, Program
    from fusionlens.distributed.vocabulary import CollectiveKind

    if traced.call is None:
        return []
    module, args, kwargs = traced.call
    blocks = [f"{traced.block_path}.{i}" for i in range(traced.traced_blocks)] if traced.block_path else []
    transform = FSDP2("dp", units=blocks)
    cut = _cut(module, traced.block_path, traced.traced_blocks) if traced.block_path else contextlib.nullcontext()
    try:
        with torch.device("meta"), cut:
            sharded = transform(Program(module, args, kwargs), Mesh((2,), ("dp",)))
    except Exception as e:  # the plan's numbers stand; only the lines are missing
        traced.notes.append(f"FSDP2's units not found, ZeRO-3's collectives listed for the whole model ({e})"[:300])
        return []
    gathers = [c for c in sharded.collectives if c.program == "forward" and c.kind is CollectiveKind.ALL_GATHER]
    lines = _lines(gathers)
    root = any(p.where != "block" for p in traced.params) and len(lines) > len(blocks)
    # the root's gather runs at the model's call: no line of the model; a target's is its return line
    out = [Unit("root", traced.call_line)] if root else []
    return out + [Unit("block", line) for line in lines[len(out):]]


@dataclass(frozen=True)
class Grad:
    param: str  # the parameter's trace input name (p_blocks_0_fc1_weight)
    line: tuple[str, int] | None  # the line of the op that finishes it: where a bucket it completes is issued


@dataclass(frozen=True)
class DdpOrder:
    """The gradients in the order the backward finishes them: those before the blocks' (the output
    layer's, the final norm's), one block's (every block repeats it), those after (embeddings)."""

    before: list[Grad]
    block: list[Grad]
    after: list[Grad]


def ddp_grads(traced: Traced) -> DdpOrder | None:
    """DDP's transform's order and lines of the gradients (see the module doc); None where the
    transform does not apply or its order cannot be read as repeated blocks (the note says why)."""
    if "ddp" not in traced.units:
        traced.units["ddp"] = _apply_ddp(traced)
    return traced.units["ddp"]


def _apply_ddp(traced: Traced) -> DdpOrder | None:
    from fusionlens.distributed.transform import DDP, Mesh, Program
    from fusionlens.distributed.vocabulary import CollectiveKind

    if traced.call is None:
        return None
    module, args, kwargs = traced.call
    cut = _cut(module, traced.block_path, traced.traced_blocks) if traced.block_path else contextlib.nullcontext()
    try:
        with torch.device("meta"), cut:  # a cap of a byte: each gradient all-reduced on its own
            synced = DDP("dp", bucket_cap_mb=1 / (1 << 20))(Program(module, args, kwargs), Mesh((2,), ("dp",)))
    except Exception as e:  # the plan's numbers stand; only the buckets' lines are missing
        traced.notes.append(f"DDP's transform did not apply, its all-reduce listed for the whole model ({e})"[:300])
        return None
    records = [c for c in synced.collectives if c.kind is CollectiveKind.ALL_REDUCE and c.program == "backward"]
    why = _unmatched(traced, records)
    if why is None:
        grads = [Grad(name, line) for name, line in zip(_finishing_order(traced), _lines(records))]
        order = _split(traced, grads)
        if order is not None:
            return order
        why = "its gradients are not finished block by block"
    traced.notes.append(f"DDP's buckets not placed, its all-reduce listed for the whole model: {why}")
    return None


def _finishing_order(traced: Traced) -> list[str]:
    """The parameters DDP reduces in the order the plan's own backward finishes their gradients
    (the transform's backward is the same program: `_unmatched` checks it by their bytes)."""
    backward = traced.source("backward")
    made = {o.name: i for i, b in enumerate(backward.bound_symbols) for o in b.outputs}
    params = {p.name for p in traced.params}
    slots = [(made.get(getattr(v, "name", ""), -1), name) for v, name in zip(backward.output, traced.grads)
             if name in params]
    return [name for _, name in sorted(slots, key=lambda s: s[0])]


def _unmatched(traced: Traced, records) -> str | None:
    """Why the transform's per-gradient all-reduces are not the plan's gradients one for one."""
    dtypes = {v.name: v.dtype for v in traced.source("forward").inputs}
    numel = {p.name: p.numel for p in traced.params}
    names = _finishing_order(traced)
    if not records:
        return "DDP's reducer, not the backward, would all-reduce (a parameter gets no gradient, or a sparse one)"
    if len(records) != len(names):
        return f"the transform reduces {len(records)} gradients, the plan's backward makes {len(names)}"
    for name, c in zip(names, records):
        if c.bytes != numel[name] * dtypes[name].itemsize:
            return f"the transform's gradient of {c.bytes} bytes at line {c.line} is not {name}'s"
    return None


def _split(traced: Traced, grads: list[Grad]) -> DdpOrder | None:
    """`grads` as before, the traced blocks' (each the same), after; None if they interleave."""
    where = {p.name: p.where for p in traced.params}
    inside = [i for i, g in enumerate(grads) if where[g.param] == "block"]
    if not inside:  # no repeated blocks: the whole backward is one part, its gradients ready at its end
        return DdpOrder([], [], grads)
    first, last = inside[0], inside[-1] + 1
    run, n = grads[first:last], max(traced.traced_blocks, 1)
    if len(inside) != last - first or len(run) % n:
        return None
    size = len(run) // n
    numel = {p.name: p.numel for p in traced.params}
    one = [(numel[g.param], g.line) for g in run[:size]]
    if any([(numel[g.param], g.line) for g in run[k * size:(k + 1) * size]] != one for k in range(n)):
        return None
    return DdpOrder(grads[:first], run[:size], grads[last:])
