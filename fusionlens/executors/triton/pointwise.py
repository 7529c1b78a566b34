"""The pointwise kernel: one program per block of the group's domain flattened into a 1-D
index space. Each input is read through its own strides (stride 0 where a broadcast_in_dim
spreads it), never copied; adjacent dims are coalesced where every access allows it, so a
contiguous input is read with a plain `offs`. Tails are masked."""

from __future__ import annotations

import math

from fusionlens.ir.sizes import contiguous_strides
from fusionlens.ir.trace import Value
from fusionlens.ops import prims
from fusionlens.middle.reinplace import SCATTER_, STRIDED_SCATTER_

from . import tuning
from .emitter import _Emitter, _Scope, _type_str
from .writer import _next_pow2, _store_cast, _Writer


def _pick_pointwise(numel: int) -> tuple[int, int]:
    """(BLOCK, num_warps)."""
    block = min(tuning.POINTWISE_BLOCK, _next_pow2(numel))
    block = max(block, 16)
    warps = 4 if block >= 512 else (2 if block >= 128 else 1)
    if numel >= (1 << 22) and tuning.POINTWISE_BLOCK >= 1024:
        block, warps = 2 * tuning.POINTWISE_BLOCK, 8
    return block, warps


class PointwiseWriter(_Writer):
    def kind_comment(self) -> str:
        an = self.an
        return f"# kind: pointwise over {list(an.domain)} ({math.prod(an.domain)} elements)"

    def _body(self, em: _Emitter) -> list[str]:
        an = self.an
        numel = math.prod(an.domain)
        self.block, self.warps = _pick_pointwise(int(an.hint(numel)))  # a symbolic size: its example's
        int64 = self.needs_int64()
        body = _Scope("    ")
        em.loop, em.prologue, em.rowscope = body, body, body
        outs: list[tuple[int, Value, str]] = []  # (index, output, its variable)
        stores: dict[int, tuple[tuple, str, str]] = {}  # scatter outputs: (strides, extra offset, mask)
        for k, o in enumerate(an.outputs):
            b = an.scatters.get(o.name)
            if b is None:
                outs.append((k, o, em.val(o, an.canonical(o))))
                continue
            src = b.args[2] if b.sym in (prims.scatter, SCATTER_) else b.args[1]
            outs.append((k, o, em.val(src, an.canonical(src))))
            stores[k] = self._window(em, b)
            em.accesses.append(stores[k][0])
        head = self.pid_lines(int64) + [
            "offs = pid * BLOCK + tl.arange(0, BLOCK)",
            f"mask = offs < {self.sz(numel, 'numel')}",
        ]
        if em.runs is not None:
            head += self.index_lines("offs", em.runs["offs"])
        lines = ["    " + h for h in head] + body.lines
        for k, o, v in outs:
            if k in stores:
                lines += self._store_window(em, k, o, v, *stores[k])
                continue
            off, _ = em.offset(self.out_ds(o)) if em.runs is not None else ("offs", None)
            off = "offs" if off == "0" else off
            lines.append(f"    tl.store(out{k}_ptr + {off}, {_store_cast(v, o)}, mask=mask)  # {o.name}: "
                         f"{_type_str(o)}")
        self.constexprs = {"BLOCK": self.block}
        self.grid = self.grid_for(numel, self.block)
        return lines

    def _window(self, em: _Emitter, b) -> tuple[tuple, str, str]:
        """(per domain dim, the stride of the scatter's window in its base's row-major numbers;
        the offset added to it, as the kernel spells it; the mask beyond the domain's)."""
        base = b.args[0]
        if b.sym in (prims.strided_scatter, STRIDED_SCATTER_):
            return tuple(b.args[3]), str(b.args[2]) if b.args[2] else "", ""
        index, dim = b.args[1], b.args[3]  # scatter: dim `dim` goes to where index says
        rm = contiguous_strides(base.shape)
        ds = tuple(0 if d == dim else rm[d] for d in range(self.an.n))
        i = em.val(index, self.an.canonical(index))
        # an index out of range writes nothing (eager raises; a store there would corrupt memory)
        inside = f"({i} >= 0) & ({i} < {base.shape[dim]})"
        return ds, (f"{i} * {rm[dim]}" if rm[dim] != 1 else i), inside

    def _store_window(self, em: _Emitter, k: int, o: Value, v: str, ds: tuple, extra: str, inside: str) -> list[str]:
        """The store of a scatter's window into out{k}, a row-major copy of its base, or for an
        in-place scatter the base itself where the launcher may write it (module.py)."""
        off, _ = em.offset(ds) if em.runs is not None else ("0", None)
        terms = [t for t in (off, extra) if t and t != "0"]
        if off == "0" or em.runs is None:  # no domain term: still a block of pointers, as the mask is a block
            terms.append("offs * 0")
        where = " + ".join(terms)
        mask = f"(mask & {inside}) != 0" if inside else "mask"  # != 0: an int1 mask whatever the index's type
        b = self.an.scatters[o.name]
        into = "into it (in place)" if b.sym in (SCATTER_, STRIDED_SCATTER_) else "into its copy"
        return [f"    tl.store(out{k}_ptr + {where}, {_store_cast(v, o)}, mask={mask})  # {o.name}: "
                f"{_type_str(o)}, the window of {b.args[0].name} stored {into}"]
