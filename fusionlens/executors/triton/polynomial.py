"""A row reduction's operand as a polynomial in the row values it reads, for the tiled two-axis
kernels over few long rows (two_axis_tiles.py, docs/kernels.md).

There a program sees one tile of a row (a block of its columns), never the whole row, so a row
reduction that reads an earlier one's result (LayerNorm's `sum(dy * w * (x - mean) * rstd)`
where the backward recomputes mean and rstd) cannot be summed in the first kernel as written.
It can when its operand is a polynomial in those row values with coefficients that are the
tile's own values: `rstd * (x - mean) * wdy` is `rstd * [(x - q) * wdy] + rstd * (mean - q) *
[-wdy]`, so the first kernel sums each bracket over its tile and the second, once it has mean
and rstd, adds `rstd * (A + (mean - q) * B)` over the tiles. `q` is the tile's own mean of the
values `var_mean` reduces (a shift, as Chan's formula: no cancellation where the mean is large
beside the spread), so a mean from `var_mean` is the atom `~mean` (mean - q); any other row value
read is an atom of its own.

No torch kernel, no Triton: this module reads bound symbols only, so support.takes_columns can
ask it whether a group would take the tiled kernels before the group is made.
"""

from __future__ import annotations

import torch

from fusionlens.ir.trace import BoundSymbol, Value, values_in
from fusionlens.ops import prims

MAX_TERMS = 4  # monomials a reduction's operand may have: each is a partial sum a row a tile
FIRST_PASS = (prims.sum, prims.var_mean, prims.amax, prims.amin)  # partials that combine exactly
_REDUCTIONS = (prims.sum, prims.prod, prims.amax, prims.amin, prims.var_mean)

# A coefficient: ("v", Value) a value of the tile, ("c", number), ("q", mean name) the tile's
# mean of what that var_mean reduces, or ("mul" | "add" | "div", a, b), ("neg", a).
Expr = tuple
Poly = dict[tuple[str, ...], Expr]  # sorted atom names -> coefficient
ONE: Expr = ("c", 1.0)


def _times(p: Poly, q: Poly) -> Poly:
    out: Poly = {}
    for ma, ea in p.items():
        for mb, eb in q.items():
            m = tuple(sorted(ma + mb))
            e = eb if ea == ONE else ea if eb == ONE else ("mul", ea, eb)
            out[m] = ("add", out[m], e) if m in out else e
    return out


def _plus(p: Poly, q: Poly, sign: int) -> Poly:
    out = dict(p)
    for m, e in q.items():
        e = e if sign > 0 else ("neg", e)
        out[m] = ("add", out[m], e) if m in out else e
    return out


class Expansion:
    """Expands values of one group: `producer` (value name -> the op making it), `pure` (value
    name -> no reduction upstream; absent: an input), `domain` the group's."""

    def __init__(self, producer: dict[str, BoundSymbol], pure: dict[str, bool], domain: tuple):
        self.producer, self.pure, self.domain = producer, pure, tuple(domain)
        self.memo: dict[str, Poly | None] = {}  # a value read twice (xhat) is expanded once

    def mean_of(self, v: Value) -> Value | None:
        """The var_mean mean `v` is (through broadcasts), or None."""
        while True:
            b = self.producer.get(v.name)
            if b is None:
                return None
            if b.sym is prims.var_mean:
                return v if v.name == b.outputs[1].name else None
            if b.sym is not prims.broadcast_in_dim:
                return None
            v = b.args[0]

    def expand(self, v) -> Poly | None:
        """`v` as a polynomial in the row values it reads, or None where it is not one (a
        rounding, a division by a row value, any op but + - * / and broadcasts)."""
        if not isinstance(v, Value):
            return {(): ("c", v)} if isinstance(v, (int, float)) and not isinstance(v, bool) else None
        if self.pure.get(v.name, True):
            return {(): ("v", v)}
        if v.dtype != torch.float32:
            return None  # a 16-bit value computed from a row's result: rounded, not a polynomial
        mean = self.mean_of(v)
        if mean is not None:
            return {(): ("q", mean.name), ("~" + mean.name,): ONE}
        if tuple(v.shape) != self.domain:
            return {(v.name,): ONE}  # a row value (rstd, a row sum): an atom
        if v.name not in self.memo:
            self.memo[v.name] = self._op(self.producer[v.name])
        return self.memo[v.name]

    def _op(self, b: BoundSymbol) -> Poly | None:
        if b.sym is prims.broadcast_in_dim:
            return self.expand(b.args[0])
        expanded = [self.expand(a) for a in b.args if not isinstance(a, torch.dtype)]
        args = [a for a in expanded if a is not None]
        if len(args) != len(expanded):
            return None
        if b.sym is prims.convert_element_type:
            return args[0] if isinstance(b.args[0], Value) and b.args[0].dtype == torch.float32 else None
        if b.sym is prims.neg:
            return _plus({}, args[0], -1)
        if b.sym in (prims.add, prims.sub) and len(args) == 2:
            return _plus(args[0], args[1], 1 if b.sym is prims.add else -1)
        if b.sym is prims.mul and len(args) == 2:
            return _times(args[0], args[1])
        if b.sym is prims.div and len(args) == 2 and list(args[1]) == [()]:
            return {m: ("div", e, args[1][()]) for m, e in args[0].items()}
        return None


def _in_order(bsyms: list[BoundSymbol]) -> list[BoundSymbol]:
    """`bsyms` with each op after those making what it reads (takes_columns is handed the row
    region's ops, then the column region's, which may make a product the row region reads)."""
    made = {o.name for b in bsyms for o in b.outputs}
    done: set[str] = set()
    out: list[BoundSymbol] = []
    waiting = list(bsyms)
    while waiting:
        ready = [b for b in waiting if all(a.name in done or a.name not in made for a in values_in(b.args)
                                           if isinstance(a, Value))]
        if not ready:
            return list(bsyms)  # a cycle: not ours to report
        for b in ready:
            out.append(b)
            done.update(o.name for o in b.outputs)
        waiting = [b for b in waiting if all(b is not r for r in ready)]
    return out


def row_passes(bsyms: list[BoundSymbol], domain: tuple, rdims: tuple, cdims: tuple):
    """(producer, pure, pass of each row reduction by id) of a two-axis group's row side (the
    column sums and what is computed from them left out), as analysis.py numbers passes."""
    producer: dict[str, BoundSymbol] = {}
    pure: dict[str, bool] = {}
    level: dict[str, int] = {}
    passes: dict[int, int] = {}
    columns: set[str] = set()
    for b in _in_order(bsyms):
        ins = [a for a in values_in((b.args, b.kwargs)) if isinstance(a, Value)]
        dims = tuple(sorted(int(d) % len(domain) for d in b.args[1])) if b.sym in _REDUCTIONS else None
        if dims == tuple(cdims) or any(a.name in columns for a in ins):
            columns.update(o.name for o in b.outputs)
            continue
        base = max((level.get(a.name, 0) for a in ins), default=0)
        for o in b.outputs:
            producer[o.name] = b
            pure[o.name] = dims is None and all(pure.get(a.name, True) for a in ins)
            level[o.name] = base + (dims is not None)
        if dims is not None:
            passes[id(b)] = base
    return producer, pure, passes


def tile_problem(bsyms: list[BoundSymbol], domain: tuple, rdims: tuple, cdims: tuple) -> str | None:
    """None when every row reduction of the group can be summed a tile at a time (the first
    pass's sums, var_means, amaxes and amins of floats; later passes' sums of a polynomial in the
    earlier results, at most MAX_TERMS monomials); else why not."""
    producer, pure, passes = row_passes(bsyms, domain, rdims, cdims)
    ex = Expansion(producer, pure, domain)
    for b in bsyms:
        if id(b) not in passes:
            continue
        if b.outputs[0].dtype not in (torch.float32, torch.float16, torch.bfloat16):
            return f"a row {b.sym.name} to {b.outputs[0].dtype} over tiles is not generated (floats only)"
        if passes[id(b)] == 0:
            if b.sym not in FIRST_PASS:
                return f"a row {b.sym.name} over tiles is not generated"
            continue
        poly = ex.expand(b.args[0]) if b.sym is prims.sum else None
        if poly is None:
            return (f"{b.sym.name}({b.args[0].name}) reads an earlier row reduction other than through a "
                    "polynomial: it needs the whole row first")
        if len(poly) > MAX_TERMS:
            return f"sum({b.args[0].name}) is {len(poly)} monomials in the row values (at most {MAX_TERMS})"
    return None
