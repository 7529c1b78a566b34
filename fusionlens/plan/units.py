"""Where the data-parallel collectives are issued, from issue 27's transforms
(fusionlens/distributed/transform.py) applied to the traced model on a mesh with no ranks:
FSDP2 with each repeated block a unit (torchtitan's wrapping) gives each unit's all-gather and
reduce-scatter at the line that calls it. (DDP's transform needs real tensors, `.item()` in
its constructor, so on the meta device DDP's all-reduce stays one entry for the whole model.)
The plan keeps its own bytes (bf16 parameters gathered, fp32 gradients reduced: Megatron's and
torchtitan's mixed precision) and times; the transform tells it which unit, and which line,
each collective belongs to, so the plan lists them as a real run records them.
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
