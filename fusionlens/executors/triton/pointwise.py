"""The pointwise kernel: one program per block of the group's domain flattened into a 1-D
index space. Each input is read through its own strides (stride 0 where a broadcast_in_dim
spreads it), never copied; adjacent dims are coalesced where every access allows it, so a
contiguous input is read with a plain `offs`. Tails are masked."""

from __future__ import annotations

import math

from fusionlens.ir.trace import Value

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
        for k, o in enumerate(an.outputs):
            outs.append((k, o, em.val(o, an.canonical(o))))
        head = self.pid_lines(int64) + [
            "offs = pid * BLOCK + tl.arange(0, BLOCK)",
            f"mask = offs < {self.sz(numel, 'numel')}",
        ]
        if em.runs is not None:
            head += self.index_lines("offs", em.runs["offs"])
        lines = ["    " + h for h in head] + body.lines
        for k, o, v in outs:
            off, _ = em.offset(self.out_ds(o)) if em.runs is not None else ("offs", None)
            off = "offs" if off == "0" else off
            lines.append(f"    tl.store(out{k}_ptr + {off}, {_store_cast(v, o)}, mask=mask)  # {o.name}: "
                         f"{_type_str(o)}")
        self.constexprs = {"BLOCK": self.block}
        self.grid = self.grid_for(numel, self.block)
        return lines
