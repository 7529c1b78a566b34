"""A two-axis group's kernels (fusionlens/middle/contract.py): a norm's backward, whose row
reductions (dx needs each row's sums) and column sums (the weight and bias gradients) read the
same [rows, columns] values, in two launches and one pass over them.

- The row kernel: a fixed number of programs, as many as the SMs hold at once (one wave:
  tuning.resident_programs, at most PROGRAMS_PER_SM an SM; no more than there are row blocks,
  nor than give each program TWO_AXIS_MIN_ROWS rows), each looping over the row blocks
  pid, pid + programs, ... A block
  is the region's straight-line row code on a [BLOCK_M, BLOCK_N] tile (a row fits in registers:
  support.takes_columns): its reductions, its row and full-shape outputs (dx). Each column sum's
  operand (`dy * xhat`, `dy`) is added to a float32 accumulator of the tile's shape, lane by
  lane: no block-wide reduction in the loop. After the loop a program sums its accumulator
  over the tile's rows once and stores it as its row of a [programs, columns] float32 buffer.
  What varies along a row only (the weight) is loaded once a program, before the loop.
- The combine kernel: one program per BLOCK_N columns sums the programs' partial results in a
  fixed order (the same bits at every run: no atomics), then computes what the group does with
  the column sums (a cast to the parameter's dtype) and stores the column outputs.

No value is written only to be read back: the partial buffer is programs x columns x 4 bytes a
column sum (132 x 8192 x 4 = 4.3 MB beside 256 MB of bf16 dy and x at [8192, 8192]).
Apex's and Liger's LayerNorm backward kernels and Triton's tutorial 05 divide the work this
way; here it is generated from the group's prims, so RMSNorm (no bias) and any other
row-then-column pair of the same rows are the same kernel pair.
"""

from __future__ import annotations

import torch

from fusionlens.middle.contract import Decline

from . import tuning
from .analysis import _ident
from .emitter import _Emitter, _Scope
from .reduction import ReductionWriter, _cdiv, _pick_reduction
from .writer import _next_pow2, _store_cast

COMBINE_TILE = 4096  # elements of the combine kernel's [SPLIT, BLOCK_N] tile of partial results
COMBINE_BLOCK_N = 256  # columns a combine program sums (1 KiB of float32 a partial row)


class TwoAxisWriter(ReductionWriter):
    programs: int  # the row kernel's programs: each stores one row of partial column sums

    def kind_comment(self) -> str:
        an = self.an
        return (f"# kind: two-axis reduction over {list(an.domain)}: {an.nrows} rows of {an.ncols} elements, "
                f"reduced along each row (dims {list(an.rdims)}) and along each column (dims {list(an.cdims)}); "
                f"{self.programs} programs each take the blocks of {self.bm} rows pid, pid + {self.programs}, ... "
                "and keep partial column sums, then a kernel combining them")

    def has_combine(self) -> bool:
        return True

    @property
    def partial_shape(self) -> tuple[int, int]:
        return self.programs, int(self.an.ncols)

    def partials(self) -> list[tuple[str, torch.dtype]]:
        return [(f"part{j}_ptr", torch.float32) for j in range(len(self.an.col_reductions))]

    def _body(self, em: _Emitter) -> list[str]:
        an = self.an
        nontrivial = [d for d in range(an.n) if an.domain[d] != 1]
        self.bm, self.bn, looped, self.warps = _pick_reduction(an, bool(nontrivial) and nontrivial[-1] in an.kept)
        if looped:
            raise Decline(f"rows of {an.ncols} elements do not fit in registers: no two-axis kernel")
        blocks = _cdiv(int(an.nrows), self.bm)
        self.programs = max(1, min(blocks, tuning.resident_programs(self.warps, self.bm * self.bn) * an.sms,
                                   _cdiv(int(an.nrows), tuning.TWO_AXIS_MIN_ROWS)))
        self.looped, self.split = False, 1
        self.stages = tuning.stages_for(True)  # the loop over row blocks prefetches the next block
        cast = ".to(tl.int64)" if self.needs_int64() else ""
        self.cast64 = cast
        head = _Scope("    ")
        head.add(f"pid = tl.program_id(0)  # this program's row blocks: pid, pid + {self.programs}, ...")
        head.add(f"cols = tl.arange(0, BLOCK_N)[None, :]  # [1, BLOCK_N]: the reduced dims {list(an.rdims)}")
        head.add(f"col_mask = cols < {an.ncols}")
        for line in self.index_lines("cols", em.runs["cols"]) if em.runs is not None else []:
            head.add(line)
        em.colscope = _Scope("    ")
        accs = _Scope("    ")
        body = _Scope("        ")
        em.loop = em.rowscope = em.prologue = body
        body.add(f"rows = blk{cast} * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]  # [BLOCK_M, 1]: one row = one "
                 f"index of the kept dims {list(an.kept)}")
        body.add(f"row_mask = rows < {an.nrows}")
        body.add("mask = row_mask & col_mask")
        for line in self.index_lines("rows", em.runs["rows"]) if em.runs is not None else []:
            body.add(line)
        stored: set[int] = set()
        for b in an.reductions:
            self._single_reduction(em, b, body)
        self._flush_rows(em, stored)
        for k, o in self._outputs_at("full"):
            self._store_full(em, body, k, o)
        for k, o in self._outputs_at("row"):
            if k not in stored:
                v = em.val(o, an.canonical(o))
                body.add(f"tl.store(out{k}_ptr + rows, {_store_cast(v, o)}, mask=row_mask)  # {o.name}")
        tail = _Scope("    ")
        for j, b in enumerate(an.col_reductions):
            acc = f"acc_{_ident(b.outputs[0].name)}"
            accs.add(f"{acc} = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)  # {b.outputs[0].name}: lane-wise partial "
                     f"sums over this program's rows")
            x = em.val(b.args[0], tuple(range(an.n)))
            body.mark(b)
            body.add(f"{acc} += tl.where(mask, {x}, 0.0)  # sum({b.args[0].name}, {list(an.cdims)}): this block's rows")
            tail.add(f"tl.store(part{j}_ptr + pid * {an.ncols} + cols, tl.sum({acc}, axis=0)[None, :], "
                     f"mask=col_mask)  # {b.outputs[0].name}: this program's partial column sums")
        self.constexprs = {"BLOCK_M": self.bm, "BLOCK_N": self.bn}
        self.grid, self.grid_size = f"({self.programs},)", [self.programs]
        loop = [f"    for blk in range(pid, {blocks}, {self.programs}):  # this program's blocks of {self.bm} rows"]
        return head.lines + em.colscope.lines + accs.lines + loop + body.lines + tail.lines

    # the combine kernel -------------------------------------------------------------------------
    def combine_kernel(self) -> tuple[list[str], set[str]]:
        """The second kernel: each column's partial sums added in a fixed order, then the
        group's ops on the column sums and the column outputs."""
        an = self.an
        self.bn2 = min(_next_pow2(int(an.ncols)), COMBINE_BLOCK_N)
        self.bs2 = min(_next_pow2(self.programs), max(1, COMBINE_TILE // self.bn2))
        self.warps2 = tuning.warps_for(self.bs2 * self.bn2)
        self.grid2_size = [_cdiv(int(an.ncols), self.bn2)]
        self.grid2 = f"({self.grid2_size[0]},)"
        self.constexprs2 = {"BLOCK_N": self.bn2, "SPLIT": self.bs2}
        dry = _Emitter(an, self.strides, None, self.rid, self.sizes)
        self._combine_body(dry)
        em = _Emitter(an, self.strides, self.make_runs(dry.accesses), self.rid, self.sizes)
        lines = self._combine_body(em)
        self.em2 = em
        return lines, em.helpers

    def _combine_body(self, em: _Emitter) -> list[str]:
        an = self.an
        body = _Scope("    ")
        em.loop = em.rowscope = em.prologue = body
        body.add("pid = tl.program_id(0)")
        body.add("cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]  # [1, BLOCK_N]: this program's columns")
        body.add(f"col_mask = cols < {an.ncols}")
        for line in self.index_lines("cols", em.runs["cols"]) if em.runs is not None else []:
            body.add(line)
        body.add("parts = tl.arange(0, SPLIT)[:, None]  # [SPLIT, 1]: programs of the row kernel")
        loop = _Scope("        ")
        for j, b in enumerate(an.col_reductions):
            acc = f"acc_{_ident(b.outputs[0].name)}"
            body.add(f"{acc} = tl.zeros([SPLIT, BLOCK_N], tl.float32)")
            loop.add(f"{acc} += tl.load(part{j}_ptr + (start + parts) * {an.ncols} + cols, mask=part_mask, other=0.0)")
        body.add(f"for start in range(0, {self.programs}, SPLIT):  # the {self.programs} partial sums, in order")
        body.lines.append(f"        part_mask = ((start + parts) < {self.programs}) & col_mask")
        body.lines.extend(loop.lines)
        for b in an.col_reductions:
            o = b.outputs[0]
            name = _ident(o.name)
            body.mark(b)
            body.add(f"{name} = tl.sum(acc_{name}, axis=0)[None, :]  # prims.sum({b.args[0].name}, {list(an.cdims)})")
            body.memo[(o.name, an.canonical(o))] = name
        for k, o in enumerate(an.outputs):
            if an.level_shape(o) == "col":
                v = em.val(o, an.canonical(o))
                body.add(f"tl.store(out{k}_ptr + cols, {_store_cast(v, o)}, mask=col_mask)  # {o.name}")
        return body.lines

