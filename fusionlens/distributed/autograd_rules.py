"""Backward rules of the collectives a program issues itself, registered with the autograd
transform's lookup (fusionlens.middle.autograd.rules.extend) when this package is imported.

A rule is (forward op, cotangents of its outputs) -> [(input Value, its cotangent)], recording
the backward's ops (collectives among them) under the forward op's line. One rule serves every
issued collective (distributed/symbols.py), reading how its gradient passes from its `grad`
argument; the wait hands its cotangent on; FSDP2's copy-in and tensor parallel's f have their
own. Under FSDP2's MixedPrecisionPolicy the all-gather's rule reduces in its `reduce_dtype` and
the copy-in's lands the result in its `grad_dtype`. Two rewrites of the backward are registered
with remat: reduce-scatters issued as early as their input allows (`issue_early`), and FSDP2's
re-gather of resharded units (`fsdp_regather`).
"""

from __future__ import annotations

import math

from fusionlens.distributed import fsdp, symbols as S, tensor_parallel, vocabulary as V
from fusionlens.middle.autograd import remat, rules
from fusionlens.middle.autograd.torch_rules import Rule
from fusionlens.middle.autograd.transform import Unsupported
from fusionlens.ir.trace import BoundSymbol, OpTag, Symbol, SymbolKind, Value, external_inputs
from fusionlens.ops import prims as P


# --- the collectives (distributed/symbols.py): one rule an issue, reading its `grad` ---------------

def issued(b: BoundSymbol, cots: list[Value | None]) -> list[tuple[Value, Value]]:
    """Every issued collective's rule, as its `grad` argument says: no gradient (Grad.NONE: a
    functional collective, dist.*, a backward's own; where a cotangent reaches such a collective
    of the user's code, Unsupported: training runs eagerly, as eager's autograd differentiates
    it), the cotangent to each rank's part unchanged (Grad.IDENTITY: tensor parallel's g, whose
    result is replicated), or the mean over the ranks reduce-scattered back to the buffer each
    rank sent (Grad.REDUCE_SCATTER: FSDP2's all-gather; `issue_early` moves the reduce-scatter up
    to where the gradient is complete, and the copy-in's rule, last in the backward, waits for it)."""
    (g,) = cots
    grad = b.kwargs.get("grad", S.Grad.NONE)
    if g is None:
        return []
    if grad is S.Grad.NONE:  # a collective of the user's code whose value reaches a result that requires grad
        raise Unsupported(
            f"a gradient reaches {b.sym.name} (a collective of the user's code), which eager's autograd "
            "differentiates in its own way: an in-place torch.distributed collective passes the gradient to "
            "the tensor's value before the call (torch warns it has no autograd kernel), one into an output "
            "passes none or as its backend implements it, a functional collective by its adjoint collective; "
            "FusionLens gives none of these (it would give zeros)", b.provenance)
    x, group = b.args[0], b.args[1]
    if grad is S.Grad.IDENTITY:
        return [(x, g)]
    # FSDP2's MixedPrecisionPolicy: the gradient cast to reduce_dtype before it is reduced, so the
    # reduce-scatter moves reduce_dtype's bytes; its result, the cotangent of a buffer gathered in
    # param_dtype, stays in reduce_dtype (a wider cotangent: the copy-in's rule lands it)
    dtype = b.kwargs.get("reduce_dtype")
    if dtype is not None and dtype != g.dtype:
        g = P.convert_element_type(g, dtype)
    return [(x, S.REDUCE_SCATTER(g, group, op=fsdp.REDUCE_OP))]


def waited(b: BoundSymbol, cots: list[Value | None]) -> list[tuple[Value, Value]]:
    """A wait hands its cotangent to the value it waited for (the issue's rule takes it on)."""
    (g,) = cots
    return [(b.args[0], g)] if g is not None else []


# --- FSDP2 (fusionlens/distributed/fsdp.py) -----------------------------------------------------------------

def fsdp_copy_in(b: BoundSymbol, cots: list[Value | None]) -> list[tuple[Value, Value]]:
    """The padded shards flattened into one buffer: the reduce-scatter of the buffer's gradient
    waited for, cast to `grad_dtype` where a MixedPrecisionPolicy reduced it in another (FSDP2
    lands it in the parameters' own dtype), then each shard's part of it, its padding cut off."""
    (g,) = cots
    if g is None:
        return []
    shards, padded = b.args
    reduced, pairs, offset = S.WAIT(g), [], 0
    landing = b.kwargs.get("grad_dtype")  # where the shards were cast (param_dtype), their casts' rules land it
    if landing is not None and landing != reduced.dtype and landing.itemsize >= shards[0].dtype.itemsize:
        reduced = P.convert_element_type(reduced, landing)
    for shard, rows in zip(shards, padded):
        numel = rows * math.prod(shard.shape[1:])
        grad = P.reshape(P.slice(reduced, [offset], [offset + numel]), (rows, *shard.shape[1:]))
        if shard.shape[0] != rows:
            grad = P.slice(grad, [0] * shard.ndim, list(shard.shape))
        pairs.append((shard, grad))
        offset += numel
    return pairs


# --- FSDP2's reshard after forward: the backward gathers a unit's parameters again -------------

def _regathered(b: BoundSymbol) -> bool:
    """Whether `b` is an all-gather the backward issues again (`regather`) instead of saving its result."""
    return b.sym is S.ALL_GATHER and bool(b.kwargs.get("regather"))


def _moved_early(backward: list[BoundSymbol]) -> set[int]:
    """The reduce-scatters, and the casts to reduce_dtype that only they read (`issued`'s)."""
    moved = {id(b) for b in backward if b.sym is S.REDUCE_SCATTER}
    readers: dict[str, list[BoundSymbol]] = {}
    for b in backward:
        for v in b.inputs():
            readers.setdefault(v.name, []).append(b)
    for b in backward:
        read_by = readers.get(b.outputs[0].name, []) if b.sym is P.convert_element_type else []
        if read_by and all(r.sym is S.REDUCE_SCATTER for r in read_by):
            moved.add(id(b))
    return moved


def issue_early(forward: list[BoundSymbol], backward: list[BoundSymbol],
                inputs: set[str]) -> tuple[list[BoundSymbol], list[str]]:
    """(the backward with each reduce-scatter, and its cast to reduce_dtype, moved up to right
    after the op that completes its input, nothing more recomputed). An all-gather's rule
    issues it where autograd reaches the all-gather, a unit ahead of where the unit's gradient
    is complete (the gather was prefetched); FSDP2 reduce-scatters a unit's gradient as soon as
    its backward is done, so that it overlaps the next unit's."""
    if not any(b.sym is S.REDUCE_SCATTER for b in backward):
        return backward, []
    moved = _moved_early(backward)
    made = {o.name: i for i, b in enumerate(backward) if id(b) not in moved for o in b.outputs}
    anchor: dict[str, int] = {}  # a moved op's output -> the op it now follows
    after: dict[int, list[BoundSymbol]] = {}
    rest = []
    for i, b in enumerate(backward):
        if id(b) in moved:
            at = max((made.get(v.name, anchor.get(v.name, -1)) for v in b.inputs()), default=-1)
            anchor.update((o.name, at) for o in b.outputs)
            after.setdefault(at, []).append(b)  # in their order: a cast before its reduce-scatter
        else:
            rest.append((i, b))
    out = list(after.get(-1, []))
    for i, b in rest:
        out += [b, *after.get(i, [])]
    return out, []


_GATHER = (fsdp.COPY_IN, S.ALL_GATHER, S.WAIT)
_CASTS = (fsdp.TO, P.convert_element_type)  # a MixedPrecisionPolicy's casts of the shards to param_dtype
_MAX_COPY_OUT = 64  # ops from the shards to one gathered parameter at most (casts, copy-in, gather, wait, views)


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
        if b.sym is S.WAIT:
            gather = producer.get(b.args[0].name)
            if gather is None or not _regathered(gather) or (wait is not None and wait is not b):
                return None
            wait = b
        elif b.sym not in _GATHER + _CASTS and not (b.sym.kind is SymbolKind.PRIM and OpTag.SHAPE in b.sym.tags):
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
    shards (inputs, which FSDP holds anyway): the shards' casts to param_dtype (a
    MixedPrecisionPolicy's), the copy-in and all-gather issued right after the previous unit's
    wait in backward order (the first at the backward's start), the wait and
    the copy-out right before the first op that reads them. A reshard_after_forward=False unit
    (its all-gather has no `regather`) keeps its gathered parameters saved."""
    if not any(_regathered(b) for b in forward):
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

    def issues(b: BoundSymbol) -> bool:  # the shards' casts, the copy-in and the all-gather
        return b.sym in (fsdp.COPY_IN, S.ALL_GATHER) or (b.sym in _CASTS and all(v.name in inputs for v in b.inputs()))

    def part(u: int, issue: bool) -> list[BoundSymbol]:
        return sorted((b for b in units[u].values() if issues(b) == issue), key=lambda b: order[id(b)])
    before: dict[int, list[BoundSymbol]] = {0: part(ranked[0], True)}
    for k, u in enumerate(ranked):
        ahead = part(ranked[k + 1], True) if k + 1 < len(ranked) else []
        before.setdefault(first[u], []).extend(part(u, False) + ahead)
    out: list[BoundSymbol] = []
    for i, b in enumerate(backward):
        out += before.get(i, [])
        out.append(b)
    return out, list(unit_of)


# --- tensor parallel (fusionlens/distributed/tensor_parallel.py): Megatron's f ------------------------------

def tp_grad_all_reduce(b: BoundSymbol, cots: list[Value | None]) -> list[tuple[Value, Value]]:
    """f, the identity before a colwise layer: the input's gradient is the sum over the ranks
    of each rank's part, all-reduced in the backward."""
    (g,) = cots
    x, group = b.args
    return [(x, S.WAIT(S.ALL_REDUCE(g, group, op=V.ReduceOp.SUM)))] if g is not None else []


RULES: dict[Symbol, Rule] = {  # by symbol; every issue's rule reads its `grad`
    **{sym: issued for sym in S.ISSUE.values()},
    S.WAIT: waited,
    fsdp.COPY_IN: fsdp_copy_in,
    tensor_parallel.GRAD_ALL_REDUCE: tp_grad_all_reduce,
}

rules.extend(RULES)
remat.extend(issue_early)  # before the regather, which places its ops by the backward's order
remat.extend(fsdp_regather)
