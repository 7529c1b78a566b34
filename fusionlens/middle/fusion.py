"""Fusion: the fusion stage and the partitioner.

`prepare` (Trace -> Trace, stage "fusion") flattens into prims the ops a fusion executor can
take; `clusters` partitions that trace into regions one kernel can run (Clusters), each
made into a FusionGroup for its executor. Code generation is not done here: the lowering
stage hands each FusionGroup to its executor.

The contract between the partitioner and the executors (FusionGroup, Decline, and the
BoundaryCode of each region's end) is fusionlens/middle/contract.py.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import NamedTuple

from fusionlens.middle import passes
from fusionlens.middle.regroup import Regroup
from fusionlens.middle.unit_dims import unit_reshapes
from fusionlens.middle.contract import Boundary, BoundaryCode, Decline, FusionGroup, boundary, source_comments
from fusionlens.ir.trace import BoundSymbol, NameGen, OpTag, SymbolKind, Trace, Value, external_inputs
from fusionlens.ir.vocabulary import Stage
from fusionlens.ops import prims as P

__all__ = ["Cluster", "Decline", "FusionGroup", "clusters", "partition", "prepare", "sink_broadcasts",
           "source_comments", "unfused"]  # Decline, FusionGroup, source_comments: from fusionlens.middle.contract


# --- the partitioner ----------------------------------------------------------------------

_FUSIBLE_TAGS = {P.ELEMENTWISE, P.REDUCTION, OpTag.SCATTER}


def _is_scatter(b) -> bool:
    """A view update's write-back (strided_scatter, scatter): it iterates over its src (the window),
    reads its base whole and makes the base's shape, which nothing else in its region reads."""
    return OpTag.SCATTER in b.sym.tags


def _is_broadcast(b) -> bool:
    return b.sym is P.broadcast_in_dim


def _claims(b, fusers) -> tuple:
    """(executor that takes this op, or None; why none does)."""
    if b.sym.kind is not SymbolKind.PRIM or not (b.sym.tags & _FUSIBLE_TAGS or _is_broadcast(b)):
        return None, ""
    reasons = []
    for ex in fusers:
        why = ex.can_take(b)
        if why is None:
            return ex, ""
        reasons.append(f"{ex.name}: {why}")
    return None, "; ".join(reasons)


def _blocking_reason(b: BoundSymbol, why_not: str) -> Boundary:
    """Why op `b`, which reads a region's value, is not part of that region."""
    name, where = b.sym.name, b.provenance
    if OpTag.COLLECTIVE in b.sym.tags:
        return boundary(BoundaryCode.COLLECTIVE, f"{name} communicates with the other ranks", where)
    if b.note:
        return boundary(BoundaryCode.UNSUPPORTED_OP, b.note, where)
    if b.sym.kind is SymbolKind.OPAQUE:
        return boundary(BoundaryCode.UNSUPPORTED_OP, f"{name} has no FusionLens symbol", where)
    if b.sym.kind is SymbolKind.TORCH and b.subsymbols and all(
            leaf.sym.tags & {P.SHAPE, P.CAT} for leaf in passes.flatten([b])):
        return boundary(BoundaryCode.VIEW_OR_LAYOUT, f"{name} changes the layout; torch runs it (a view where it can)",
                        where)
    if b.sym.kind is SymbolKind.TORCH:
        return boundary(BoundaryCode.LIBRARY_CALL, f"{name} runs as a library call", where)
    if b.sym.tags & {P.SHAPE, P.CAT}:
        return boundary(BoundaryCode.VIEW_OR_LAYOUT, f"{name} of an intermediate value is not fused", where)
    if why_not:
        return boundary(BoundaryCode.UNSUPPORTED_OP, f"{name}: {why_not}", where)
    return boundary(BoundaryCode.UNSUPPORTED_OP, f"{name} is not fused", where)


class Refusal(NamedTuple):
    """Why an op does not join a region: the kind of boundary it makes, and the words."""

    code: BoundaryCode
    reason: str


class Cluster:
    """A region the partitioner is growing: ops one executor takes over one iteration space."""

    def __init__(self, gid: int, ex, domain: tuple[int, ...], rdims: tuple[int, ...] | None):
        self.gid, self.ex, self.domain, self.rdims = gid, ex, domain, rdims
        self.cdims: tuple[int, ...] = ()  # a two-axis region's column sums' dims (regroup.py)
        self.ops: list[BoundSymbol] = []
        self.produced: set[str] = set()
        self.scattered: set[str] = set()  # outputs of its scatters: the region's results only
        self.boundary: Boundary | None = None

    def space(self, shape) -> str | None:
        shape = tuple(shape)
        if shape == self.domain:
            return "full"
        if self.rdims:
            reduced = tuple(s for i, s in enumerate(self.domain) if i not in self.rdims)
            keep = tuple(1 if i in self.rdims else s for i, s in enumerate(self.domain))
            if shape in (reduced, keep):
                return "reduced"
        return None

    def refuse(self, b: BoundSymbol) -> Refusal | None:
        """None if op `b` fits this group's iteration space; else why it does not."""
        if any(v.name in self.scattered for v in b.inputs()):
            return Refusal(BoundaryCode.OUTPUT_NEEDED, "it reads a base a scatter of the region writes")
        if _is_scatter(b):
            return self._refuse_scatter(b)
        if b.sym.tags & {P.REDUCTION} and self.scattered:
            return Refusal(BoundaryCode.REDUCTION_AXIS, "a reduction in a region that scatters")
        if b.sym.tags & {P.REDUCTION}:
            x = b.args[0]
            dims = tuple(b.args[1]) if b.sym is not P.argmax else None
            if dims is None:
                return Refusal(BoundaryCode.UNSUPPORTED_OP, "argmax is not fused")
            if tuple(x.shape) != self.domain:
                return Refusal(BoundaryCode.REDUCTION_AXIS, "reduction over another axis")
            if self.rdims is not None and tuple(sorted(dims)) != self.rdims:
                return Refusal(BoundaryCode.REDUCTION_AXIS, "reduction over another axis")
            return None
        for o in b.outputs:
            if self.space(o.shape) is None:
                return Refusal(BoundaryCode.SHAPE_REFUSED,
                               f"iteration shape {list(o.shape)} differs from the region's {list(self.domain)}")
        for v in b.inputs():
            if v.name in self.produced and self.space(v.shape) is None:
                return Refusal(BoundaryCode.SHAPE_REFUSED, "iteration shape differs")
        if _is_broadcast(b) and self._misplaced(b):
            return Refusal(BoundaryCode.SHAPE_REFUSED, "it broadcasts a reduced value along other dims than the "
                                                       "kept ones (each row would read another row's result)")
        return None

    def _misplaced(self, b: BoundSymbol) -> bool:
        """A reduced value of this region broadcast back to the domain along dims that are not
        its kept dims: `x.mean(-1) <= x` of a square x puts row i's mean in column i (fuzz triton
        7524). A size-1 dim broadcasts anywhere; another rank than the domain's is no placement."""
        x, shape, dims = b.args[0], tuple(b.args[1]), tuple(b.args[2])
        if not self.rdims or x.name not in self.produced or len(shape) != len(self.domain):
            return False
        kept = tuple(i for i in range(len(self.domain)) if i not in self.rdims)
        expected = kept if x.ndim == len(kept) else tuple(range(len(shape))) if x.ndim == len(shape) else None
        varies = [i for i, s in enumerate(x.shape) if not (type(s) is int and s == 1)]
        return any(expected is None or dims[i] != expected[i] for i in varies)

    def _refuse_scatter(self, b: BoundSymbol) -> Refusal | None:
        base, window = b.args[0], [v for v in b.inputs() if v is not b.args[0]]
        if self.rdims:
            return Refusal(BoundaryCode.REDUCTION_AXIS, "a scatter in a region that reduces")
        if base.name in self.produced:
            return Refusal(BoundaryCode.SHAPE_REFUSED, "it scatters into a value the region computes")
        if any(tuple(v.shape) != self.domain for v in window):
            return Refusal(BoundaryCode.SHAPE_REFUSED,
                           f"its window {list(window[0].shape)} differs from the region's {list(self.domain)}")
        return None

    def has_work(self) -> bool:
        """False for a cluster of broadcasts only: index arithmetic, not a kernel."""
        return any(b.sym.tags & _FUSIBLE_TAGS for b in self.ops)

    def add(self, b: BoundSymbol):
        if b.sym.tags & {P.REDUCTION} and self.rdims is None:
            self.rdims = tuple(sorted(b.args[1]))
        self.ops.append(b)
        self.produced.update(o.name for o in b.outputs)
        if _is_scatter(b):
            self.scattered.update(o.name for o in b.outputs)


def _new_group_for(gid: int, ex, b: BoundSymbol) -> Cluster:
    if b.sym.tags & {P.REDUCTION} and b.sym is not P.argmax:
        return Cluster(gid, ex, tuple(b.args[0].shape), None)
    if _is_scatter(b):  # over its window
        return Cluster(gid, ex, tuple(b.args[2 if b.sym is P.scatter else 1].shape), None)
    return Cluster(gid, ex, tuple(b.outputs[0].shape), None)


def _merge_target(a: Cluster, b: Cluster) -> Cluster | None:
    """The one of two groups an op joining both can merge the other into, or None: groups of one
    domain and compatible reductions; or a reduction region and a group over its rows alone (a
    norm's statistics worked on at [rows, 1], then used across the row)."""
    if a.domain == b.domain and (a.rdims is None or b.rdims is None or a.rdims == b.rdims):
        return a
    for big, small in ((a, b), (b, a)):
        if big.rdims and small.rdims is None and not small.scattered and all(
                big.space(o.shape) == "reduced" for op in small.ops for o in op.outputs):
            return big
    return None


Node = Cluster | BoundSymbol  # what the partition orders: a region, or one op left to torch


class _Partitioner:
    """The state of one greedy pass over the ops (see `partition`)."""

    def __init__(self, fusers: list):
        self.fusers = fusers
        self.producer: dict[str, Node] = {}  # value name -> the node making it
        # id(node) -> the groups it depends on, transitively, as a bit mask of group ids (an int:
        # unions of masks cost words where sets of ids cost an entry each, and every op makes one)
        self.deps_of: dict[int, int] = {}
        self.floating: dict[str, BoundSymbol] = {}  # value name -> broadcast_in_dim op not yet placed
        self.groups: list[Cluster] = []
        self.order: list[tuple[int, Node]] = []  # (first index, node) for the final sort
        self.alive: set[int] = set()  # ids of groups not merged away
        # gid of a live group -> the mask of the gids merged into it (its own included): a deps_of
        # mask may name a group merged away, and then means the group it went into (so a merge
        # rewrites no node's mask)
        self.members: dict[int, int] = {}

    def deps_through(self, v_name: str) -> int:
        p = self.producer.get(v_name)
        if p is None:
            f = self.floating.get(v_name)
            return self.deps_through(f.args[0].name) if f is not None else 0
        own = 1 << p.gid if isinstance(p, Cluster) else 0
        return own | self.deps_of[id(p)]

    def place_floating(self, name: str, position: int):
        """A floating broadcast read by an op no group takes: it runs as a torch view."""
        b = self.floating.pop(name)
        self.deps_of[id(b)] = self.deps_through(b.args[0].name)
        self.producer[name] = b
        self.order.append((position, b))

    def depends_on(self, deps: int, g: Cluster) -> bool:
        """Whether a deps_of mask names group `g` (or a group merged into it)."""
        return deps & self.members[g.gid] != 0

    def reaches(self, v_name: str, g: Cluster) -> bool:
        """Whether value `v_name` is made by group `g` or by a node depending on it."""
        p = self.producer.get(v_name)
        if p is None:
            f = self.floating.get(v_name)
            return f is not None and self.reaches(f.args[0].name, g)
        return p is g or self.depends_on(self.deps_of[id(p)], g)

    def merge(self, into: Cluster, other: Cluster):
        # copies in C: a region can grow with the program and be merged again and again (GPT-2's
        # backward puts every layer's recomputed attention probabilities in one)
        into.ops.extend(other.ops)
        into.produced |= other.produced
        into.scattered |= other.scattered
        into.rdims = into.rdims or other.rdims
        into.cdims = into.cdims or other.cdims
        self.deps_of[id(into)] |= self.deps_of[id(other)]
        self.producer.update(dict.fromkeys(other.produced, into))
        self.alive.discard(id(other))
        self.members[into.gid] |= self.members.pop(other.gid)  # not a pass over every node's mask

    @staticmethod
    def note_boundary(g: Cluster, code: BoundaryCode, detail: str, b: BoundSymbol):
        if g.boundary is None:
            g.boundary = boundary(code, detail, b.provenance)

    def step(self, i: int, b: BoundSymbol):
        """Place op `b`, the i-th: it floats, runs alone, or joins (or starts) a group."""
        ex, why_not = _claims(b, self.fusers)
        inputs = [v.name for v in b.inputs()]
        if ex is not None and _is_broadcast(b) and not isinstance(self.producer.get(inputs[0]), Cluster) \
                and inputs[0] not in self.floating:
            self.floating[b.outputs[0].name] = b
        elif ex is None:
            self.unclaimed(i, b, inputs, why_not)
        else:
            self.claimed(i, b, ex, inputs)

    def unclaimed(self, i: int, b: BoundSymbol, inputs: list[str], why_not: str):
        """An op no fusion executor takes: a node of its own, ending the groups it reads."""
        for n in inputs:
            if n in self.floating:
                self.place_floating(n, i)
        deps = 0
        for n in inputs:
            deps |= self.deps_through(n)
        self.deps_of[id(b)] = deps
        for n in inputs:
            p = self.producer.get(n)
            if isinstance(p, Cluster):
                p.boundary = p.boundary or _blocking_reason(b, why_not)
        for o in b.outputs:
            self.producer[o.name] = b
        self.order.append((i, b))

    def join(self, b: BoundSymbol, ex, pulled: list[BoundSymbol], reads: list[str]) -> Cluster | None:
        """The group of a producer of `b` that `b` (with the broadcasts it pulls in) can join,
        the other such groups merged into it; None when there is none."""
        candidates: list[Cluster] = []
        for name in reversed(reads):
            p = self.producer.get(name)
            if isinstance(p, Cluster) and id(p) in self.alive and p.ex is ex and p not in candidates:
                candidates.append(p)
        joined = None
        for g in candidates:
            refusal = g.refuse(b) or next((g.refuse(f) for f in pulled if g.refuse(f)), None)
            if refusal is None and any(self.reaches(n, g) for n in reads if n not in g.produced):
                refusal = Refusal(BoundaryCode.OUTPUT_NEEDED, "joining would make a cycle through another op")
            if refusal is not None:
                self.note_boundary(g, refusal.code, f"{b.sym.name}: {refusal.reason}", b)
                continue
            if joined is None:
                joined = g
            elif (not (joined.scattered and g.rdims or g.scattered and joined.rdims)  # a scatter never reduces
                  and not self.depends_on(self.deps_of[id(joined)], g)
                  and not self.depends_on(self.deps_of[id(g)], joined)):
                into = _merge_target(joined, g)
                if into is not None:  # e.g. two chains reading one input, combined here
                    self.merge(into, g if into is joined else joined)
                    joined = into
        return joined

    def claimed(self, i: int, b: BoundSymbol, ex, inputs: list[str]):
        """An op executor `ex` takes: into a producer's group, or the first of a new one."""
        pulled = [self.floating[n] for n in inputs if n in self.floating]  # broadcasts this op takes in
        reads = [n for n in inputs if n not in self.floating] + [f.args[0].name for f in pulled]
        joined = self.join(b, ex, pulled, reads)
        if joined is None:
            joined = _new_group_for(len(self.groups), ex, b)
            self.groups.append(joined)
            self.alive.add(id(joined))
            self.members[joined.gid] = 1 << joined.gid
            self.deps_of[id(joined)] = 0
            self.order.append((i, joined))
        for f in pulled:
            self.floating.pop(f.outputs[0].name, None)
            if f.outputs[0].name not in joined.produced:
                joined.add(f)
                self.producer[f.outputs[0].name] = joined
        for n in reads:
            if n not in joined.produced:
                self.deps_of[id(joined)] |= self.deps_through(n)
        joined.add(b)
        for o in b.outputs:
            self.producer[o.name] = joined
        for n in reads:  # a value from another group: that group's value flows out here
            p = self.producer.get(n)
            if isinstance(p, Cluster) and p is not joined and id(p) in self.alive:
                self.note_boundary(p, BoundaryCode.OUTPUT_NEEDED, f"{n} feeds another region", b)


def partition(leaves: list[BoundSymbol], fusers: list,
              results: set[str] | None = None) -> tuple[list[Node], list[Cluster]]:
    """Greedy, dataflow-aware partition. Returns (nodes in a valid order, groups).

    A node is a Cluster or a single BoundSymbol. An op joins the group(s) of its producers
    when it fits their iteration space and joining makes no cycle (no path leaves the group
    and comes back); producer groups that fit are merged. Broadcasts of values from outside
    any group float until a consumer takes them in: they are index arithmetic, not work.
    Given the names of the trace's results, a second pass regroups reductions (regroup.py).
    """
    state = _Partitioner(fusers)
    for i, b in enumerate(leaves):
        state.step(i, b)
    for name in list(state.floating):
        state.place_floating(name, len(leaves))
    if results is not None:
        Regroup(state, leaves, results).run()
    order = [(i, n) for i, n in state.order if not isinstance(n, Cluster) or id(n) in state.alive]
    return _toposort(order, state.producer), [g for g in state.groups if id(g) in state.alive]


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
        return optimised.with_(Stage.FUSION, list(optimised.bound_symbols))
    leaves: list[BoundSymbol] = []
    for b in optimised.bound_symbols:
        leaves.extend(passes.flatten([b]) if b.subsymbols and _fuses_anything(b, fusers) else [b])
    flat = passes.dce(passes.cse(optimised.with_(Stage.FUSION, unit_reshapes(leaves))))
    return flat.with_(Stage.FUSION, sink_broadcasts(flat, fusers))


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


def clusters(flat: Trace, fusers: list) -> tuple[list[Node], Callable[[Cluster, str], FusionGroup]]:
    """Partition the fusion-stage trace: (nodes in a valid order, a function making the
    FusionGroup of a Cluster node, given its region id). A node is a Cluster or one op."""
    output_names = {v.name for v in flat.results()}
    nodes, _ = partition(flat.bound_symbols, fusers, output_names)
    used_by: dict[str, set[int]] = {}  # value name -> ids of the nodes reading it
    for n in nodes:
        for b in (n.ops if isinstance(n, Cluster) else [n]):
            for v in b.inputs():
                used_by.setdefault(v.name, set()).add(id(n))

    def make_group(n: Cluster, rid: str) -> FusionGroup:
        inputs = external_inputs(n.ops)
        outputs = [o for b in n.ops for o in b.outputs
                   if o.name in output_names or (used_by.get(o.name, set()) - {id(n)})]
        return FusionGroup(rid, list(n.ops), inputs, outputs, n.domain, tuple(n.rdims or ()),
                           source_comments(n.ops), n.cdims)

    return nodes, make_group


def unfused(b: BoundSymbol, fusers: list) -> tuple[Boundary | None, str]:
    """(Boundary or None, why no fusion executor took op `b`) for an op left to torch."""
    why = _claims(b, fusers)[1]
    needs_boundary = b.sym.kind is not SymbolKind.PRIM or b.note or why or b.sym.tags & {P.SHAPE, P.CAT}
    return (_blocking_reason(b, why) if needs_boundary else None), why
