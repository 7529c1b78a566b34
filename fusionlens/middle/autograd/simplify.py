"""Peepholes on the backward ops, before the split: patterns that VJP rules make op by op and
that read better (and run faster) as one op.

- `pads_to_cat`: the gradient of a tensor split into pieces along one dim (`split`, `chunk`,
  q, k and v sliced from one projection) is, rule by rule, each piece's cotangent zero-padded
  to the whole shape and the pads summed: as many full-size pads and adds as pieces. When
  the pieces tile the dim, that sum is the pieces' cotangents concatenated: one `cat`.
"""

from __future__ import annotations

from collections import Counter

from fusionlens.ir.trace import BoundSymbol, Value, values_in
from fusionlens.ops import prims as P


def pads_to_cat(bsyms: list, results: list) -> list:
    """`bsyms` with each sum of zero-pads that tile one dim replaced by a cat (the same output
    Value); the pads and adds it no longer reads are left for dead-code elimination."""
    made = {o.name: b for b in bsyms for o in b.outputs}
    uses = Counter(v.name for b in bsyms for v in b.inputs())
    uses.update(v.name for v in values_in(results))
    out = []
    for b in bsyms:
        cat = _as_cat(b, made, uses) if b.sym is P.add else None
        out.append(cat or b)
    return out


def _as_cat(b: BoundSymbol, made: dict, uses: Counter) -> BoundSymbol | None:
    pads = _pad_leaves(b, made, uses, root=True)
    if not pads or len(pads) < 2:
        return None
    dims = {d for _, d, _ in pads}
    if len(dims) != 1:
        return None
    dim = dims.pop()
    size = b.outputs[0].shape[dim]
    pieces, at = [], 0
    for lo, _, g in sorted(pads, key=lambda p: p[0]):
        if lo != at:
            return None  # a gap or an overlap: not a tiling
        pieces.append(g)
        at += g.shape[dim]
    if at != size:
        return None
    return BoundSymbol(P.cat, (pieces, dim), {}, list(b.outputs), None, b.provenance)


def _pad_leaves(b: BoundSymbol, made: dict, uses: Counter, root: bool = False) -> list | None:
    """(start, dim, cotangent) of each zero-pad summed by the add tree under `b` (inner adds
    and pads read nowhere else), or None when a leaf is anything else."""
    if not root and uses[b.outputs[0].name] != 1:
        return None
    if b.sym is P.add:
        leaves = []
        for arg in b.args:
            inner = made.get(arg.name) if isinstance(arg, Value) else None
            found = _pad_leaves(inner, made, uses) if inner is not None else None
            if found is None:
                return None
            leaves += found
        return leaves
    if b.sym is P.pad:
        g, value, config = b.args
        padded = [d for d, c in enumerate(config) if tuple(c) != (0, 0, 0)]
        if value != 0.0 or len(padded) != 1 or config[padded[0]][2] != 0:
            return None
        return [(config[padded[0]][0], padded[0], g)]
    return None
