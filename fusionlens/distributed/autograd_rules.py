"""Backward rules of the collectives a program issues itself, registered with the autograd
transform's lookup (fusionlens.middle.autograd.rules.extend) when this package is imported.

Each rule is a function of its own, per collective: (forward op, cotangents of its outputs) ->
[(input Value, its cotangent)], recording the backward's ops (collectives among them) under
the forward op's line.
"""

from __future__ import annotations

import math

from fusionlens.distributed import fsdp, tensor_parallel
from fusionlens.middle.autograd import remat, rules
from fusionlens.middle.autograd.torch_rules import Rule
from fusionlens.ir.trace import BoundSymbol, OpTag, Symbol, SymbolKind, Value, external_inputs
from fusionlens.ops import prims as P


# --- FSDP2 (fusionlens/distributed/fsdp.py) -----------------------------------------------------------------

def fsdp_all_gather(b: BoundSymbol, cots: list[Value | None]) -> list[tuple[Value, Value]]:
    """A unit's all-gather: its gradient flows through its wait (which names the buffer sent),
    never through the issued tensor, which only the wait reads."""
    return []


def fsdp_wait(b: BoundSymbol, cots: list[Value | None]) -> list[tuple[Value, Value]]:
    """An all-gather's wait (it names the buffer sent and the group): each rank's gradient of
    the buffer it sent is the mean over the ranks of their gradients of the gathered buffer,
    reduce-scattered (FSDP2's default reduction) and issued here, where the unit's last
    gradient is made (the all-gather itself sits a unit earlier: the prefetch). Not waited for
    here: the copy-in's rule, last in the backward, waits for it. A wait of nothing gathered
    hands its cotangent on."""
    (g,) = cots
    if g is None:
        return []
    if len(b.args) == 1:
        return [(b.args[0], g)]
    _, flat, group_size, group_name = b.args
    return [(flat, fsdp.REDUCE_SCATTER(g, fsdp.REDUCE_OP, group_size, group_name))]


def fsdp_copy_in(b: BoundSymbol, cots: list[Value | None]) -> list[tuple[Value, Value]]:
    """The padded shards flattened into one buffer: the reduce-scatter of the buffer's gradient
    waited for, then each shard's part of it, its padding cut off."""
    (g,) = cots
    if g is None:
        return []
    shards, padded = b.args
    reduced, pairs, offset = fsdp.WAIT(g), [], 0
    for shard, rows in zip(shards, padded):
        numel = rows * math.prod(shard.shape[1:])
        grad = P.reshape(P.slice(reduced, [offset], [offset + numel]), (rows, *shard.shape[1:]))
        if shard.shape[0] != rows:
            grad = P.slice(grad, [0] * shard.ndim, list(shard.shape))
        pairs.append((shard, grad))
        offset += numel
    return pairs


# --- FSDP2's reshard after forward: the backward gathers a unit's parameters again -------------

_GATHER = (fsdp.COPY_IN, fsdp.ALL_GATHER, fsdp.WAIT)
_MAX_COPY_OUT = 64  # ops from the shards to one gathered parameter at most (copy-in, gather, wait, views)


def _gathered_from_shards(v: Value, producer: dict[str, BoundSymbol],
                          inputs: set[str]) -> tuple[BoundSymbol, list[BoundSymbol]] | None:
    """(the wait, the ops that make `v` from the program's inputs) when `v` is a resharded
    unit's gathered parameter or a view of one: made only by its copy-in, all-gather, wait and
    shape prims; else None."""
    ops: dict[int, BoundSymbol] = {}
    wait, todo, seen = None, [v], set()
    while todo:
        x = todo.pop()
        if x.name in seen or x.name in inputs:
            continue
        seen.add(x.name)
        b = producer.get(x.name)
        if b is None or len(ops) >= _MAX_COPY_OUT:
            return None
        if b.sym is fsdp.WAIT:
            if not b.kwargs.get("reshard") or (wait is not None and wait is not b):
                return None
            wait = b
        elif b.sym not in _GATHER and not (b.sym.kind is SymbolKind.PRIM and OpTag.SHAPE in b.sym.tags):
            return None
        ops[id(b)] = b
        todo.extend(b.inputs())
    return (wait, list(ops.values())) if wait is not None else None


def fsdp_regather(forward: list[BoundSymbol], backward: list[BoundSymbol],
                  inputs: set[str]) -> tuple[list[BoundSymbol], list[str]]:
    """(the backward gathering each resharded unit's parameters again, the forward values it no
    longer saves). FSDP2 frees a unit's unsharded parameters after its forward and all-gathers
    them again for its backward, prefetching one unit ahead: here the values the backward reads
    that are a resharded unit's gathered parameters (or views of them) are made again from its
    shards (inputs, which FSDP holds anyway): the copy-in and all-gather issued right after the
    previous unit's wait in backward order (the first at the backward's start), the wait and
    the copy-out right before the first op that reads them. A reshard_after_forward=False unit
    (its wait has no `reshard`) keeps its gathered parameters saved."""
    if not any(b.sym is fsdp.WAIT and b.kwargs.get("reshard") for b in forward):
        return backward, []  # most programs: no FSDP2 unit resharded
    producer = {o.name: b for b in forward for o in b.outputs}
    order = {id(b): i for i, b in enumerate(forward)}
    units: dict[int, dict[int, BoundSymbol]] = {}  # id(wait) -> its ops
    unit_of: dict[str, int] = {}  # forward value the backward reads -> id(wait)
    for v in external_inputs(backward):
        found = _gathered_from_shards(v, producer, inputs) if v.name in producer else None
        if found is not None:
            units.setdefault(id(found[0]), {}).update((id(b), b) for b in found[1])
            unit_of[v.name] = id(found[0])
    if not units:
        return backward, []
    first: dict[int, int] = {}  # id(wait) -> index of the first backward op reading its values
    for i, b in enumerate(backward):
        for x in b.inputs():
            if x.name in unit_of:
                first.setdefault(unit_of[x.name], i)
    ranked = sorted(units, key=lambda u: first[u])

    def part(u: int, issue: bool) -> list[BoundSymbol]:
        return sorted((b for b in units[u].values() if (b.sym in (fsdp.COPY_IN, fsdp.ALL_GATHER)) == issue),
                      key=lambda b: order[id(b)])
    before: dict[int, list[BoundSymbol]] = {0: part(ranked[0], True)}
    for k, u in enumerate(ranked):
        ahead = part(ranked[k + 1], True) if k + 1 < len(ranked) else []
        before.setdefault(first[u], []).extend(part(u, False) + ahead)
    out: list[BoundSymbol] = []
    for i, b in enumerate(backward):
        out += before.get(i, [])
        out.append(b)
    return out, list(unit_of)


# --- tensor parallel (fusionlens/distributed/tensor_parallel.py): Megatron's f and g --------------------------

def tp_all_reduce(b: BoundSymbol, cots: list[Value | None]) -> list[tuple[Value, Value]]:
    """g, the sum over the ranks of a rowwise layer's partial results: its cotangent passes to
    every rank's part unchanged (the result is replicated: each rank's cotangent is the same)."""
    (g,) = cots
    return [(b.args[0], g)] if g is not None else []


def tp_grad_all_reduce(b: BoundSymbol, cots: list[Value | None]) -> list[tuple[Value, Value]]:
    """f, the identity before a colwise layer: the input's gradient is the sum over the ranks
    of each rank's part, all-reduced in the backward."""
    (g,) = cots
    x, op, group_name = b.args
    return [(x, tensor_parallel.ALL_REDUCE(g, op, group_name))] if g is not None else []


RULES: dict[Symbol, Rule] = {  # by symbol; a collective's rule in a function of its own
    fsdp.COPY_IN: fsdp_copy_in,
    fsdp.ALL_GATHER: fsdp_all_gather,
    fsdp.WAIT: fsdp_wait,
    tensor_parallel.ALL_REDUCE: tp_all_reduce,
    tensor_parallel.GRAD_ALL_REDUCE: tp_grad_all_reduce,
}

rules.extend(RULES)
remat.extend(fsdp_regather)
