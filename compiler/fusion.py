"""Fusion: the fusion stage and the partitioner.

`prepare` (Trace -> Trace, stage "fusion") flattens into prims the ops a fusion executor can
take; `clusters` partitions that trace into regions one kernel can run (Clusters), each
made into a FusionGroup for its executor. Code generation is not done here: the lowering
stage hands each FusionGroup to its executor.

A FusionGroup is what a fusion executor (triton, nvfuser) turns into code. Its contract:

- `bsyms` are prims in SSA, topological order, each one of: an elementwise prim (tag
  "elementwise": unary/binary ops, where, convert_element_type), `prims.broadcast_in_dim`,
  or a reduction prim (`sum`, `amax`, `amin`, `prod`, `var_mean`) over exactly
  `reduction_dims` of a value whose shape is `domain`.
- `domain` is the iteration shape: every value in the group has shape `domain` ("full")
  or, when `reduction_dims` is not empty, `reduced_shape` (domain without the reduced dims).
  A reduced value is brought back to the full shape only by a broadcast_in_dim whose
  broadcast_dims are the kept dims (after inserting size-1 dims, possibly through a
  broadcast to the keepdim shape first). Inputs (`inputs`) may have any shape that a
  broadcast_in_dim inside the group maps to the domain; they may have any strides.
- `outputs` are the values used outside the group, in a fixed order; the generated
  callable takes `inputs` (tensors, in order) and returns a tuple of `outputs`, freshly
  allocated and contiguous.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Optional

from compiler import passes
from compiler.ir import BoundSymbol, NameGen, Trace, Value, distinct_lines, external_inputs
from compiler.ops import prims as P
from compiler.report import Boundary


@dataclass
class FusionGroup:
    id: str
    bsyms: list
    inputs: list
    outputs: list
    domain: tuple
    reduction_dims: tuple = ()
    source_lines: list = field(default_factory=list)  # ["file.py:12  source text", ...] for comments

    @property
    def reduced_shape(self) -> tuple:
        return tuple(s for i, s in enumerate(self.domain) if i not in self.reduction_dims)

    @property
    def kind(self) -> str:
        return "reduction" if self.reduction_dims else "pointwise"


class Decline(Exception):
    """A fusion executor refuses a group (a shape or dtype it cannot run); says why."""


# --- the partitioner ----------------------------------------------------------------------

_FUSIBLE_TAGS = {P.ELEMENTWISE, P.REDUCTION}


def _is_broadcast(b) -> bool:
    return b.sym is P.broadcast_in_dim


def _claims(b, fusers) -> tuple:
    """(executor that takes this op, or None; why none does)."""
    if b.sym.kind != "prim" or not (b.sym.tags & _FUSIBLE_TAGS or _is_broadcast(b)):
        return None, ""
    reasons = []
    for ex in fusers:
        why = ex.can_take(b)
        if why is None:
            return ex, ""
        reasons.append(f"{ex.name}: {why}")
    return None, "; ".join(reasons)


def _blocking_reason(b, why_not: str) -> Boundary:
    """Why op `b`, which reads a region's value, is not part of that region."""
    p = b.provenance
    loc = dict(file=p.file if p else None, line=p.line if p else None)
    name = b.sym.name
    if b.note:
        return Boundary("unsupported op", b.note, **loc)
    if b.sym.kind == "opaque":
        return Boundary("unsupported op", f"{name} has no FusionLens symbol", **loc)
    if b.sym.kind == "torch" and b.subsymbols and all(
            leaf.sym.tags & {P.SHAPE, P.CAT} for leaf in passes.flatten([b])):
        return Boundary("view or layout op", f"{name} changes the layout; torch runs it (a view where it can)", **loc)
    if b.sym.kind == "torch":
        return Boundary("library call", f"{name} runs as a library call", **loc)
    if b.sym.tags & {P.SHAPE, P.CAT}:
        return Boundary("view or layout op", f"{name} of an intermediate value is not fused", **loc)
    if why_not:
        return Boundary("unsupported op", f"{name}: {why_not}", **loc)
    return Boundary("unsupported op", f"{name} is not fused", **loc)


class Cluster:
    """A region the partitioner is growing: ops one executor takes over one iteration space."""

    def __init__(self, gid: int, ex, domain: tuple, rdims: Optional[tuple]):
        self.gid, self.ex, self.domain, self.rdims = gid, ex, domain, rdims
        self.ops: list = []
        self.produced: set = set()
        self.deps: set = set()  # groups this one depends on, transitively
        self.boundary: Optional[Boundary] = None

    def space(self, shape) -> Optional[str]:
        shape = tuple(shape)
        if shape == self.domain:
            return "full"
        if self.rdims:
            reduced = tuple(s for i, s in enumerate(self.domain) if i not in self.rdims)
            keep = tuple(1 if i in self.rdims else s for i, s in enumerate(self.domain))
            if shape in (reduced, keep):
                return "reduced"
        return None

    def refuse(self, b) -> Optional[str]:
        """None if op `b` fits this group's iteration space; else the reason it does not."""
        if b.sym.tags & {P.REDUCTION}:
            x = b.args[0]
            dims = tuple(b.args[1]) if b.sym is not P.argmax else None
            if dims is None:
                return "argmax is not fused"
            if tuple(x.shape) != self.domain:
                return "reduction over another axis"
            if self.rdims is not None and tuple(sorted(dims)) != self.rdims:
                return "reduction over another axis"
            return None
        for o in b.outputs:
            if self.space(o.shape) is None:
                return f"iteration shape {list(o.shape)} differs from the region's {list(self.domain)}"
        for v in b.inputs():
            if v.name in self.produced and self.space(v.shape) is None:
                return "iteration shape differs"
        return None

    def has_work(self) -> bool:
        """False for a cluster of broadcasts only: index arithmetic, not a kernel."""
        return any(b.sym.tags & _FUSIBLE_TAGS for b in self.ops)

    def add(self, b):
        if b.sym.tags & {P.REDUCTION} and self.rdims is None:
            self.rdims = tuple(sorted(b.args[1]))
        self.ops.append(b)
        self.produced.update(o.name for o in b.outputs)


def _new_group_for(gid, ex, b) -> Cluster:
    if b.sym.tags & {P.REDUCTION} and b.sym is not P.argmax:
        g = Cluster(gid, ex, tuple(b.args[0].shape), None)
    else:
        g = Cluster(gid, ex, tuple(b.outputs[0].shape), None)
    return g


def partition(leaves: list, fusers: list):
    """Greedy, dataflow-aware partition. Returns (nodes in a valid order, groups).

    A node is a Cluster or a single BoundSymbol. An op joins the group(s) of its producers
    when it fits their iteration space and joining makes no cycle (no path leaves the group
    and comes back); producer groups that fit are merged. Broadcasts of values from outside
    any group float until a consumer takes them in: they are index arithmetic, not work.
    """
    producer: dict = {}  # value name -> Cluster or BoundSymbol
    deps_of: dict = {}  # id(node) -> set of group ids it depends on (transitively)
    floating: dict = {}  # value name -> broadcast_in_dim op not yet placed
    groups: list = []
    order: list = []  # (first index, node) for the final sort
    alive: set = set()  # ids of groups not merged away

    def deps_through(v_name):
        p = producer.get(v_name)
        if p is None:
            f = floating.get(v_name)
            return deps_through(f.args[0].name) if f is not None else set()
        own = {p.gid} if isinstance(p, Cluster) else set()
        return own | deps_of[id(p)]

    def place_floating(name, position):
        """A floating broadcast read by an op no group takes: it runs as a torch view."""
        b = floating.pop(name)
        deps_of[id(b)] = deps_through(b.args[0].name)
        producer[name] = b
        order.append((position, b))

    def merge(into: Cluster, other: Cluster):
        for b in other.ops:
            into.ops.append(b)
        into.produced |= other.produced
        into.rdims = into.rdims or other.rdims
        deps_of[id(into)] |= deps_of[id(other)]
        for name in other.produced:
            producer[name] = into
        alive.discard(id(other))
        for node_deps in deps_of.values():
            if other.gid in node_deps:
                node_deps.add(into.gid)

    def note_boundary(g: Cluster, kind, detail, b):
        if g.boundary is None:
            p = b.provenance
            g.boundary = Boundary(kind, detail, p.file if p else None, p.line if p else None)

    for i, b in enumerate(leaves):
        ex, why_not = _claims(b, fusers)
        inputs = [v.name for v in b.inputs()]
        if ex is not None and _is_broadcast(b) and not isinstance(producer.get(inputs[0]), Cluster) \
                and inputs[0] not in floating:
            floating[b.outputs[0].name] = b
            continue
        if ex is None:
            for n in inputs:
                if n in floating:
                    place_floating(n, i)
            deps_of[id(b)] = set().union(*(deps_through(n) for n in inputs)) if inputs else set()
            for n in inputs:
                p = producer.get(n)
                if isinstance(p, Cluster):
                    p.boundary = p.boundary or _blocking_reason(b, why_not)
            for o in b.outputs:
                producer[o.name] = b
            order.append((i, b))
            continue
        pulled = [floating[n] for n in inputs if n in floating]  # broadcasts this op takes in
        reads = [n for n in inputs if n not in floating] + [f.args[0].name for f in pulled]
        candidates = []
        for name in reversed(reads):
            p = producer.get(name)
            if isinstance(p, Cluster) and id(p) in alive and p.ex is ex and p not in candidates:
                candidates.append(p)
        joined = None
        for g in candidates:
            reason = g.refuse(b) or next((g.refuse(f) for f in pulled if g.refuse(f)), None)
            if reason is None and g.gid in set().union(set(), *(deps_through(n) for n in reads
                                                                 if n not in g.produced)):
                reason = "joining would make a cycle through another op"
            if reason is not None:
                kind = ("reduction over another axis" if "reduction" in reason else
                        "shape the executor refuses" if "shape" in reason else "output needed elsewhere")
                note_boundary(g, kind, f"{b.sym.name}: {reason}", b)
                continue
            if joined is None:
                joined = g
            elif (joined.domain == g.domain and (joined.rdims is None or g.rdims is None or joined.rdims == g.rdims)
                  and g.gid not in deps_of[id(joined)] and joined.gid not in deps_of[id(g)]):
                merge(joined, g)  # e.g. two chains reading one input, combined here
        if joined is None:
            joined = _new_group_for(len(groups), ex, b)
            groups.append(joined)
            alive.add(id(joined))
            deps_of[id(joined)] = set()
            order.append((i, joined))
        for f in pulled:
            floating.pop(f.outputs[0].name, None)
            if f.outputs[0].name not in joined.produced:
                joined.add(f)
                producer[f.outputs[0].name] = joined
        for n in reads:
            if n not in joined.produced:
                deps_of[id(joined)] |= deps_through(n)
        joined.add(b)
        for o in b.outputs:
            producer[o.name] = joined
        for n in reads:  # a value from another group: that group's value flows out here
            p = producer.get(n)
            if isinstance(p, Cluster) and p is not joined and id(p) in alive:
                note_boundary(p, "output needed elsewhere", f"{n} feeds another region", b)
    for name in list(floating):
        place_floating(name, len(leaves))
    order = [(i, n) for i, n in order if not isinstance(n, Cluster) or id(n) in alive]
    return _toposort(order, producer), [g for g in groups if id(g) in alive]


def _toposort(order, producer):
    """Nodes in dependency order, ties broken by where each node first appeared."""

    def node_inputs(node):
        ops = node.ops if isinstance(node, Cluster) else [node]
        inside = node.produced if isinstance(node, Cluster) else set()
        return {v.name for b in ops for v in b.inputs() if v.name not in inside}

    index = {id(n): k for k, (_, n) in enumerate(order)}
    nodes = [n for _, n in order]
    preds = {id(n): {id(producer[v]) for v in node_inputs(n) if v in producer} - {id(n)} for n in nodes}
    succs: dict = {id(n): [] for n in nodes}
    for n in nodes:
        for p in preds[id(n)]:
            succs[p].append(n)
    waiting = {id(n): len(preds[id(n)]) for n in nodes}
    ready = [(index[id(n)], id(n)) for n in nodes if waiting[id(n)] == 0]
    heapq.heapify(ready)
    by_id = {id(n): n for n in nodes}
    out = []
    while ready:
        _, nid = heapq.heappop(ready)
        out.append(by_id[nid])
        for s in succs[nid]:
            waiting[id(s)] -= 1
            if waiting[id(s)] == 0:
                heapq.heappush(ready, (index[id(s)], id(s)))
    if len(out) != len(nodes):
        raise RuntimeError("fusion made a cycle (a FusionLens bug)")
    return out


def _fuses_anything(b, fusers) -> bool:
    return any(_claims(leaf, fusers)[0] is not None and leaf.sym.tags & _FUSIBLE_TAGS
               for leaf in passes.flatten([b]))


def prepare(optimised: Trace, fusers: list) -> Trace:
    """The fusion stage: flatten into prims the ops a fusion executor can work on (keeping the
    others whole), clean up again (CSE, DCE) and sink broadcasts into their consumers. With
    no fusion executor the trace is unchanged."""
    if not fusers:
        return optimised.with_("fusion", list(optimised.bound_symbols))
    leaves = []
    for b in optimised.bound_symbols:
        leaves.extend(passes.flatten([b]) if b.subsymbols and _fuses_anything(b, fusers) else [b])
    flat = passes.dce(passes.cse(optimised.with_("fusion", leaves)))
    return flat.with_("fusion", sink_broadcasts(flat, fusers))


def sink_broadcasts(trace: Trace, fusers) -> list:
    """Rewrite broadcast(f(x, y)) as f(broadcast(x), broadcast(y)) when f is elementwise and
    its result has no other use, so that f runs inside the region that reads the broadcast
    (e.g. a causal mask compared with 0 on its small shape, then broadcast to the scores)."""
    names = NameGen("t", passes.max_index(trace) + 1, {v.name for v in trace.inputs})
    bsyms = list(trace.bound_symbols)
    changed = True
    while changed:
        changed = False
        uses: dict = {}
        for b in bsyms:
            for v in b.inputs():
                uses[v.name] = uses.get(v.name, 0) + 1
        for v in trace.results():
            uses[v.name] = uses.get(v.name, 0) + 1
        producer = {o.name: b for b in bsyms for o in b.outputs}
        for i, b in enumerate(bsyms):
            if not _is_broadcast(b):
                continue
            x = b.args[0]
            e = producer.get(x.name)
            if (e is None or uses.get(x.name) != 1 or len(e.outputs) != 1 or P.ELEMENTWISE not in e.sym.tags
                    or _claims(e, fusers)[0] is None
                    or any(tuple(v.shape) != tuple(x.shape) for v in e.inputs())
                    # only values computed outside any region: sinking work computed in a
                    # region (e.g. rsqrt of a variance) would repeat it per element
                    or any(v.name in producer and _claims(producer[v.name], fusers)[0] is not None
                           for v in e.inputs())):
                continue
            shape, dims = b.args[1], b.args[2]
            new, mapping = [], {}
            for v in e.inputs():
                out = Value(names.next(), shape, v.dtype, v.device)
                new.append(BoundSymbol(P.broadcast_in_dim, (v, shape, dims), {}, [out], None, e.provenance))
                mapping[v.name] = out
            moved = e.replace(mapping)
            moved.outputs = list(b.outputs)
            bsyms[i:i + 1] = new + [moved]
            bsyms.remove(e)
            changed = True
            break
    return bsyms


def source_comments(bsyms) -> list:
    """One `path:line  source` comment per distinct user line of `bsyms` (FusionGroup.source_lines)."""
    return [p.source_comment() for p in distinct_lines(bsyms)]


def clusters(flat: Trace, fusers: list) -> tuple:
    """Partition the fusion-stage trace: (nodes in a valid order, a function making the
    FusionGroup of a Cluster node, given its region id). A node is a Cluster or one op."""
    output_names = {v.name for v in flat.results()}
    nodes, _ = partition(flat.bound_symbols, fusers)
    used_by: dict = {}  # value name -> ids of the nodes reading it
    for n in nodes:
        for b in (n.ops if isinstance(n, Cluster) else [n]):
            for v in b.inputs():
                used_by.setdefault(v.name, set()).add(id(n))

    def make_group(n: Cluster, rid: str) -> FusionGroup:
        inputs = external_inputs(n.ops)
        outputs = [o for b in n.ops for o in b.outputs
                   if o.name in output_names or (used_by.get(o.name, set()) - {id(n)})]
        return FusionGroup(rid, list(n.ops), inputs, outputs, n.domain, tuple(n.rdims or ()),
                           source_comments(n.ops))

    return nodes, make_group


def unfused(b, fusers: list) -> tuple:
    """(Boundary or None, why no fusion executor took op `b`) for an op left to torch."""
    why = _claims(b, fusers)[1]
    needs_boundary = b.sym.kind != "prim" or b.note or why or b.sym.tags & {P.SHAPE, P.CAT}
    return (_blocking_reason(b, why) if needs_boundary else None), why
