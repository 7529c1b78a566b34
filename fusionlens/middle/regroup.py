"""After the greedy partition (fusion.py): reductions over one domain on other axes regrouped.

A norm's backward reduces the same [rows, columns] values two ways: each row (dx needs a
row's `sum(dy * w)` and `sum(dy * w * xhat)`) and each column (the weight gradient
`sum(dy * xhat)` and the bias gradient `sum(dy)` over every row). The greedy pass ends the row
region at the first column sum, so the row region wrote `dy * xhat` out for the column region
to read back. `Regroup` rewrites that partition, in this order:

- columns: a column region (reducing the dims a row region keeps) joins that row region as a
  two-axis region (`Cluster.cdims`, the FusionGroup's `column_dims`) where its executor takes
  one (`takes_columns`): one kernel over row blocks computes dx and accumulates each
  program's partial column sums, a second small kernel combines them (docs/kernels.md);
- recompute (where the executor takes no two-axis region): a full-shape value that a region
  computes elementwise for one reduction region alone (`dy * xhat`) is recomputed there from
  what it is made of, where that reads no more bytes than writing it out and reading it back;
- siblings: reduction regions over one domain and the same axes, of one executor, that read
  a common input and do not depend on each other become one region (the weight and bias
  gradients: one pass over `dy`), as Inductor's and nvFuser's schedulers do.

It works on the partitioner's state (fusion.py `_Partitioner`, its `Cluster`s) and imports
nothing of fusion.py, which calls it.
"""

from __future__ import annotations

import heapq
from typing import Any

from fusionlens.ir.sizes import same_shape
from fusionlens.ir.trace import BoundSymbol, NameGen, OpTag, Value, external_inputs
from fusionlens.middle.contract import BoundaryCode
from fusionlens.ops import prims as P

RECOMPUTE_OPS = 12  # the most ops recomputed for one value: cheap elementwise chains only

Cluster = Any  # fusion.Cluster (not imported: fusion.py imports this module)


def _is_broadcast(b: BoundSymbol) -> bool:
    return b.sym is P.broadcast_in_dim


def _in_order(ops: list[BoundSymbol]) -> list[BoundSymbol]:
    """`ops` in an order where each op follows those making what it reads, otherwise as given."""
    made = {o.name: i for i, b in enumerate(ops) for o in b.outputs}
    waiting = [len({made[v.name] for v in b.inputs() if v.name in made}) for b in ops]
    readers: dict[int, set[int]] = {}
    for i, b in enumerate(ops):
        for j in {made[v.name] for v in b.inputs() if v.name in made}:
            readers.setdefault(j, set()).add(i)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    out: list[BoundSymbol] = []
    while ready:
        i = heapq.heappop(ready)
        out.append(ops[i])
        for r in readers.get(i, ()):
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, r)
    if len(out) != len(ops):
        raise RuntimeError("merging regions made a cycle (a FusionLens bug)")
    return out


def _is_region(node) -> bool:
    """A node of the partition is a region (a Cluster) or one op left to torch (a BoundSymbol)."""
    return node is not None and not isinstance(node, BoundSymbol)


class Regroup:
    """The rewrites of the module docstring over one partition (`state`: a fusion._Partitioner)."""

    def __init__(self, state: Any, leaves: list[BoundSymbol], results: set[str]):
        self.state, self.results = state, results
        self.readers: dict[str, list[int]] = {}  # value name -> id of the node of each op reading it
        self.index()
        taken = {v.name for b in leaves for v in [*b.inputs(), *b.outputs]}
        numbered = [int(n[1:]) for n in taken if n[:1] == "t" and n[1:].isdigit()]
        self.names = NameGen("t", 1 + max(numbered, default=0), taken)

    def index(self):
        """Who reads each value, by node (again after regions merged)."""
        self.readers.clear()
        for _, n in self.state.order:
            if _is_region(n) and id(n) not in self.state.alive:
                continue
            for b in (n.ops if _is_region(n) else [n]):
                for v in b.inputs():
                    self.readers.setdefault(v.name, []).append(id(n))

    def groups(self) -> list[Cluster]:
        return [g for g in self.state.groups if id(g) in self.state.alive]

    def run(self):
        if self.merge_columns():
            self.index()
        for g in self.groups():
            if g.rdims:
                for v in external_inputs(g.ops):
                    self.recompute(v, g)
        self.merge_siblings()

    def chain(self, name: str, a: Cluster) -> list[BoundSymbol] | None:
        """The ops of `a` computing `name` from values made outside it and its row-level values,
        in `a`'s order; None if that takes a reduction, a scatter or more than RECOMPUTE_OPS."""
        made = {o.name: b for b in a.ops for o in b.outputs}
        ops: dict[int, BoundSymbol] = {}
        stack = [name]
        while stack:
            b = made.get(stack.pop())
            if b is None or id(b) in ops or a.space(b.outputs[0].shape) == "reduced":
                continue  # from outside `a`, already taken, or a row statistic: read, not recomputed
            if not (P.ELEMENTWISE in b.sym.tags or _is_broadcast(b)) or len(b.outputs) != 1 \
                    or len(ops) == RECOMPUTE_OPS:
                return None
            ops[id(b)] = b
            stack.extend(v.name for v in b.inputs())
        return [b for b in a.ops if id(b) in ops]

    def recompute(self, v: Value, g: Cluster):
        """Recompute `v` in reduction region `g` rather than read it from the region making it."""
        a = self.state.producer.get(v.name)
        if not _is_region(a) or a is g or a.ex is not g.ex or a.domain != g.domain \
                or tuple(v.shape) != g.domain or v.name in self.results \
                or any(r != id(g) for r in self.readers[v.name] if r != id(a)):
            return
        chain = self.chain(v.name, a)
        if not chain:
            return
        reads = {u.name for u in external_inputs(g.ops)}
        new_reads = [u for u in external_inputs(chain) if tuple(u.shape) == g.domain and u.name not in reads]
        # write v + read v back against reading what it is made of: never more bytes
        if sum(u.dtype.itemsize for u in new_reads) > 2 * v.dtype.itemsize:
            return
        mapping = {o.name: Value(self.names.next(), o.shape, o.dtype, o.device) for b in chain for o in b.outputs}
        copies = [b.replace(mapping) for b in chain]
        for b in g.ops:
            for u in b.inputs():
                if u.name in mapping:
                    self.readers[u.name].remove(id(g))
        rest = [b.replace(mapping) for b in g.ops]
        g.ops[:] = copies + rest
        g.produced.update(o.name for o in mapping.values())
        new = {o.name for o in mapping.values()}
        for b in copies:
            for u in b.inputs():
                self.readers.setdefault(u.name, []).append(id(g))
            self.state.producer[b.outputs[0].name] = g
        for b in rest:  # g's own ops now read the copies: without these, a later drop_dead(g) misses them
            for u in b.inputs():
                if u.name in new:
                    self.readers.setdefault(u.name, []).append(id(g))
        self.drop_dead(a)

    def drop_dead(self, a: Cluster):
        """Remove the ops of `a` whose results nothing reads any more."""
        for b in reversed(list(a.ops)):
            if any(self.readers.get(o.name) or o.name in self.results for o in b.outputs):
                continue
            a.ops.remove(b)
            for o in b.outputs:
                a.produced.discard(o.name)
                self.state.producer.pop(o.name, None)
            for u in b.inputs():
                self.readers[u.name].remove(id(a))
        if not a.ops:  # everything it made is recomputed where it is read
            self.state.alive.discard(id(a))

    # columns: a row region and a column region of the same rows as one two-axis region ----------
    def merge_columns(self) -> bool:
        """Each column region joins the row region of its rows that it reads from (or shares an
        input with), where the executor takes the pair as one two-axis region; True if any did."""
        merged = False
        for a in self.groups():
            inner = [d for d, n in enumerate(a.domain) if n != 1]
            if not a.rdims or a.scattered or not inner or inner[-1] not in a.rdims:
                continue  # the row region reduces the innermost dim: its rows are contiguous
            kept = tuple(d for d in range(len(a.domain)) if d not in a.rdims)
            for g in self.groups():
                if g is a or id(g) not in self.state.alive or id(a) not in self.state.alive:
                    continue
                if g.ex is a.ex and g.domain == a.domain and g.rdims == kept and a.cdims in ((), kept) \
                        and not g.cdims and self.columns_fit(a, g) \
                        and a.ex.takes_columns(a.domain, a.rdims, kept, a.ops + g.ops) is None:
                    self.join_columns(a, g, kept)
                    merged = True
        return merged

    def columns_fit(self, a: Cluster, g: Cluster) -> bool:
        """Whether column region `g` can run in row region `a`'s kernel: they share an input or
        one reads the other's values, `a` reads none of what `g`'s sums make (column values are
        the region's outputs only: the contract), and no path through another node leaves one
        of them and comes back into the other (merging would make a cycle)."""
        state = self.state
        if g.scattered or any(b.sym.tags & {OpTag.REDUCTION} and b.sym is not P.sum for b in g.ops):
            return False
        if all(type(g.domain[d]) is int and g.domain[d] == 1 for d in g.rdims):
            # one row: the column "sums" keep the domain's shape, so a column value brought back
            # to the rows looks like one (fuzz triton 13607: a layer_norm's weight from them)
            return False
        a_reads = {v.name for v in external_inputs(a.ops)}
        g_reads = {v.name for v in external_inputs(g.ops)}
        if not (a_reads & g_reads or a_reads & g.produced or g_reads & a.produced):
            return False
        shapes = (tuple(n for d, n in enumerate(g.domain) if d not in g.rdims),
                  tuple(1 if d in g.rdims else n for d, n in enumerate(g.domain)))  # sizes may be symbols
        columns: set[str] = set()  # what g's sums make, and what g computes from it
        for b in g.ops:
            if b.sym.tags & {OpTag.REDUCTION} or any(v.name in columns for v in b.inputs()):
                if not all(any(same_shape(o.shape, s) for s in shapes) for o in b.outputs):
                    return False  # a column sum brought back to the rows needs every row first
                columns.update(o.name for o in b.outputs)
        if a_reads & columns:
            return False
        return not any(state.reaches(n, g) for n in a_reads - g.produced) and \
            not any(state.reaches(n, a) for n in g_reads - a.produced)

    def join_columns(self, a: Cluster, g: Cluster, kept: tuple[int, ...]):
        ended_at_g = a.boundary is not None and a.boundary.code is BoundaryCode.REDUCTION_AXIS
        state = self.state
        state.merge(a, g)
        state.deps_of[id(a)] &= ~state.members[a.gid]  # what a read from g is its own now
        a.ops[:] = _in_order(a.ops)
        a.cdims = kept
        if ended_at_g or a.boundary is None:  # the column sums that ended it are in it now
            a.boundary = g.boundary

    # siblings ------------------------------------------------------------------------------------
    def merge_siblings(self):
        state = self.state
        for g in self.groups():
            for h in self.groups():
                if g is h or not g.rdims or id(g) not in state.alive or id(h) not in state.alive:
                    continue
                if (h.ex is g.ex and h.domain == g.domain and h.rdims == g.rdims
                        and {v.name for v in external_inputs(g.ops)} & {v.name for v in external_inputs(h.ops)}
                        and not state.depends_on(state.deps_of[id(g)], h)
                        and not state.depends_on(state.deps_of[id(h)], g)):
                    state.merge(g, h)
                    g.boundary = g.boundary or h.boundary


