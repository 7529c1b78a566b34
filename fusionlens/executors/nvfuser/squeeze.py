"""A two-axis region over a domain with size-1 dims (a batch of one: x of [1, T, C]) written
without them.

A size-1 dim is a broadcast dim in a FusionDefinition (support.tensor_descriptor), and nvFuser's
inner-outer persistent scheduler takes reductions over iteration and reduction dims only
(csrc/scheduler/normalization_utils.cpp checkIfReductionsAreInnerOuter: a broadcast axis is
neither). So the definition squeezes the domain's size-1 dims out of its inputs at the top
(`fd.ops.squeeze`), computes over the domain without them ([T, C]: rows over the innermost dim,
columns over the others, as always) and broadcasts each output back to its shape at the end.

`plan` finds, for every value of the region, which domain dim each of its dims is: a value of
the domain's rank is the domain; a reduction keeps its input's other dims; a broadcast_in_dim's
input dims are its output's `broadcast_dims`; elementwise operands and results share theirs.
A value's dims that are the domain's size-1 dims are dropped; a size-1 dim that is a real
broadcast (a row statistic's [1, T, 1]: its last dim is the columns') stays.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusionlens.ir.trace import OpTag, Value
from fusionlens.ops import prims


def _elementwise(b) -> bool:
    return bool(b.sym.tags & {OpTag.ELEMENTWISE})


def _reducing(b) -> bool:
    return bool(b.sym.tags & {OpTag.REDUCTION}) or b.sym is prims.var_mean


def size_one_dims(domain) -> tuple[int, ...]:
    """The domain's static size-1 dims (a symbol's dim is never 1: sizes 0 and 1 are specialised)."""
    return tuple(d for d, s in enumerate(domain) if type(s) is int and s == 1)


@dataclass(frozen=True)
class Squeeze:
    """Which dims of each value of a region are the domain's size-1 `dropped` dims."""

    dropped: tuple[int, ...]  # the domain's size-1 dims
    domain_dims: dict[str, tuple[int | None, ...]]  # value name -> the domain dim of each of its dims

    def drops(self, v: Value) -> list[int]:
        """v's dims that the definition squeezes out."""
        return [i for i, d in enumerate(self.domain_dims.get(v.name, ())) if d in self.dropped]

    def kept(self, v: Value) -> list[int]:
        gone = set(self.drops(v))
        return [i for i in range(v.ndim) if i not in gone]

    def dims(self, v: Value, dims) -> list[int]:
        """Dims of v as they are numbered in its squeezed tensor (dropped ones left out)."""
        kept = self.kept(v)
        return [kept.index(int(d)) for d in sorted(int(d) for d in dims) if int(d) in kept]


def _static_one(size) -> bool:
    return type(size) is int and size == 1


def _implied(b, known: dict[str, tuple]) -> list[tuple[str, tuple]]:
    """(value name, its domain dims) that op `b` implies from what is known."""
    tensors = [a for a in b.args[:3] if isinstance(a, Value)]
    if b.sym is prims.broadcast_in_dim:
        a, out, bdims = b.args[0], b.outputs[0], [int(d) for d in b.args[2]]
        if out.name in known:
            return [(a.name, tuple(known[out.name][d] for d in bdims))]
        if a.name in known:
            src = {dst: i for i, dst in enumerate(bdims)}
            return [(out.name, tuple(known[a.name][src[j]] if j in src else None for j in range(out.ndim)))]
        return []
    if _reducing(b):
        a, rdims = b.args[0], {int(d) for d in b.args[1]}
        if a.name not in known:
            return []
        m = tuple(d for i, d in enumerate(known[a.name]) if i not in rdims)
        return [(o.name, m) for o in b.outputs]
    if _elementwise(b):
        same = tensors + list(b.outputs)
        found = [known[v.name] for v in same if v.name in known]
        return [(v.name, found[0]) for v in same] if found else []
    return []


def plan(domain, bsyms) -> Squeeze | str:
    """How the region's values lose the domain's size-1 dims, or why they cannot."""
    dropped = size_one_dims(domain)
    n = len(domain)
    values: dict[str, Value] = {}
    for b in bsyms:
        if not (_elementwise(b) or _reducing(b) or b.sym is prims.broadcast_in_dim):
            return f"{b.sym.name} in the region (squeezing is written for elementwise ops, broadcasts and reductions)"
        for v in [a for a in b.args[:3] if isinstance(a, Value)] + list(b.outputs):
            values[v.name] = v
    known: dict[str, tuple] = {name: tuple(range(n)) for name, v in values.items() if v.ndim == n}
    changed = True
    while changed:  # a fixed point: the ops need not come in order
        changed = False
        for b in bsyms:
            for name, m in _implied(b, known):
                if name not in known:
                    known[name], changed = m, True
    for name, v in values.items():
        of = known.get(name, (None,) * v.ndim)
        for i, size in enumerate(v.shape):
            if _static_one(size) and of[i] is None:
                return f"which domain dim {name}'s size-1 dim {i} is cannot be told"
            if of[i] in dropped and not _static_one(size):
                return f"{name}'s dim {i} is the domain's size-1 dim {of[i]} but has size {size}"
    sq = Squeeze(dropped, known)
    for b in bsyms:
        if _reducing(b) and not sq.dims(b.args[0], b.args[1]):
            return f"{b.sym.name} over size-1 dims only: no reduction once they are squeezed out"
    return sq
