"""Save or recompute: which forward values the backward reads from memory, and which it
recomputes from others.

A forward value the backward reads is saved by default: written by the forward, kept alive
until the backward, read once more. A value made by cheap ops (elementwise prims, broadcasts,
reshapes) from other values can instead be recomputed in the backward, where its recompute
fuses into the backward's own kernels. In the spirit of Thunder's min-cut rematerialisation
and Inductor's partitioner, but greedy: for each saved value, largest first, take the cheap
ops that make it from "anchors" (inputs, values saved anyway, values of ops that are not
cheap) and recompute it when the anchors it would add to memory are fewer bytes than itself
and the recompute reads no more bytes than saving it moves (the forward's write and the
backward's read: `READ_FACTOR` x its bytes). Random ops are never cheap: their draws cannot be
replayed. Nor is a reduction: its output is small beside what it reads (a LayerNorm's mean and
rstd, 8 bytes a row, against the row), so it is saved, never recomputed, as Inductor bans
recomputing a node whose inputs are 4x its size; the rules do likewise (a norm's backward
reads the forward's statistics: composite_rules). A library call is never cheap either: SDPA's
fused forward (`sdpa_flash_cpu`, attention_rules) is not run again in the backward, its output
and logsumexp are saved, as eager's autograd saves them. An FSDP2 unit resharded after
forward has its gathered parameters gathered again in the backward instead of saved
(fusionlens.distributed.autograd_rules.fsdp_regather, registered with `extend`).
"""

from __future__ import annotations

from collections.abc import Callable

from fusionlens.ir.trace import BoundSymbol, OpTag, SymbolKind, Value
from fusionlens.ir.sizes import hint
from fusionlens.ops import prims as P

_CHEAP_SHAPE = {P.broadcast_in_dim, P.reshape, P.permute, P.convert_element_type}
# (forward, backward, input names) -> (backward, forward values it no longer saves): rewrites of
# the backward a later package registers (fusionlens.distributed: FSDP2's regather)
Rewrite = Callable[[list[BoundSymbol], list[BoundSymbol], set[str]], tuple[list[BoundSymbol], list[str]]]
_REWRITES: list[Rewrite] = []
MAX_CONE = 32  # ops recomputed for one value at most: past that the backward grows too long
# a recompute reads at most this many times the value's bytes: saving it costs a write and a read
READ_FACTOR = 2


def _cheap(b: BoundSymbol) -> bool:
    return b.sym.kind is SymbolKind.PRIM and (OpTag.ELEMENTWISE in b.sym.tags or b.sym in _CHEAP_SHAPE)


def _bytes(v: Value) -> int:
    return hint(v.numel()) * v.dtype.itemsize  # a dynamic program's at the example's sizes: no guard


def _cone(v: Value, producer: dict[str, BoundSymbol], keep: set[str],
          inputs: set[str]) -> tuple[list[BoundSymbol], dict[str, Value]] | None:
    """(cheap ops that make `v`, in any order; the values they read that are anchors: inputs,
    values in `keep` but `v`, values of ops that are not cheap), or None when `v` is not made
    by cheap ops within MAX_CONE."""
    ops: dict[int, BoundSymbol] = {}  # id -> op
    anchors: dict[str, Value] = {}
    todo, seen = [v], set()
    while todo:
        x = todo.pop()
        if x.name in seen:
            continue
        seen.add(x.name)
        b = producer.get(x.name)
        stop = x.name in inputs or (x.name in keep and x.name != v.name)
        if x is not v and (stop or b is None or not _cheap(b)):
            anchors[x.name] = x
            continue
        if b is None or not _cheap(b) or len(ops) >= MAX_CONE:
            return None
        ops[id(b)] = b
        todo.extend(b.inputs())
    return list(ops.values()), anchors


def recompute(forward: list[BoundSymbol], backward: list[BoundSymbol], saved: list[Value],
              inputs: set[str]) -> tuple[list[BoundSymbol], list[str]]:
    """(the backward with recomputed values' ops prepended, names recomputed). `saved` are the
    forward values the backward reads; `inputs` the names of the program's inputs."""
    producer = {o.name: b for b in forward for o in b.outputs}
    order = {id(b): i for i, b in enumerate(forward)}
    keep = {v.name for v in saved}  # what memory holds for the backward
    chosen_ops: dict[int, BoundSymbol] = {}
    recomputed: list[str] = []
    for v in sorted(saved, key=_bytes, reverse=True):
        if v.name in inputs or v.name not in keep:
            continue
        found = _cone(v, producer, keep, inputs)  # not a copy of `keep` per value: they are many
        if found is None:
            continue
        ops, anchors = found
        added = [a for n, a in anchors.items() if n not in keep and n not in inputs]
        if sum(map(_bytes, added)) >= _bytes(v) or sum(map(_bytes, anchors.values())) > READ_FACTOR * _bytes(v):
            continue
        keep.discard(v.name)
        keep.update(a.name for a in added)
        chosen_ops.update((id(b), b) for b in ops)
        recomputed.append(v.name)
    prefix = sorted(chosen_ops.values(), key=lambda b: order[id(b)])
    backward = prefix + list(backward)
    for rewrite in _REWRITES:  # FSDP2's reshard after forward: gathered parameters gathered again
        backward, unsaved = rewrite(forward, backward, inputs)
        recomputed += unsaved
    return backward, recomputed


def extend(rewrite: Rewrite) -> None:
    if rewrite not in _REWRITES:
        _REWRITES.append(rewrite)
