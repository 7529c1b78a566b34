"""A two-axis group's kernels (fusionlens/middle/contract.py): a norm's backward, whose row
reductions (dx needs each row's sums) and column sums (the weight and bias gradients) read the
same [rows, columns] values, in two launches and one pass over them.

- The row kernel: a fixed number of programs, as many as the SMs hold at once (one wave:
  tuning.resident_programs, at most PROGRAMS_PER_SM an SM; no more than there are row blocks,
  nor than give each program TWO_AXIS_MIN_ROWS rows), each looping over the row blocks
  pid, pid + programs, ... A block is the region's straight-line row code on a
  [BLOCK_M, BLOCK_N] tile (rows of at most tuning.TWO_AXIS_MAX_ROW elements): its reductions,
  its row and full-shape outputs (dx). Each column sum's operand (`dy * xhat`, `dy`) is
  added to a float32 accumulator of the tile's shape, lane by lane: no block-wide reduction
  in the loop. After the loop a program sums its accumulator over the tile's rows once and
  stores it as its row of a [programs, columns] float32 buffer. What varies along a row only
  (the weight) is loaded once a program, before the loop.
- Longer rows: each row block in BLOCK_N chunks, a pass per set of row statistics, then one
  computing dx and adding each chunk's column sums over the block's rows to the program's row
  of the [programs, columns] buffer in global memory (_looped_rows): registers hold a chunk.
- Few long rows (fewer than TWO_AXIS_FILL_ROWS x SMs of more than TWO_AXIS_MAX_ROW): the domain
  is tiled by column blocks instead (two_axis_tiles.py: `self.tiles` writes both kernels).
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
from fusionlens.ops import prims

from . import tuning
from .analysis import _Analysis, _ident
from .emitter import _Emitter, _Scope
from .reduction import ReductionWriter, _cdiv, _pick_reduction
from .two_axis_tiles import Tiles, tiled
from .writer import _next_pow2, _store_cast

COMBINE_TILE = 4096  # elements of the combine kernel's [SPLIT, BLOCK_N] tile of partial results
COMBINE_BLOCK_N = 256  # columns a combine program sums (1 KiB of float32 a partial row)


def _pick_looped(an) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) of a looped two-axis kernel: a tile of TWO_AXIS_LOOP_TILE elements,
    chunks of at most LOOP_BLOCK_N; up to TWO_AXIS_LOOP_ROWS rows a block (each block reads and
    writes its program's partial row: more rows a block, fewer of those bytes a row) while the
    row blocks still give every SM a program."""
    rows = max(1, min(tuning.TWO_AXIS_LOOP_ROWS, int(an.nrows) // max(1, an.sms)))
    bm = 1 << (rows.bit_length() - 1)
    bn = min(_next_pow2(tuning.LOOP_BLOCK_N), max(16, tuning.TWO_AXIS_LOOP_TILE // bm), _next_pow2(int(an.ncols)))
    return bm, bn


class TwoAxisWriter(ReductionWriter):
    programs: int  # the row kernel's programs: each stores one row of partial column sums

    def __init__(self, an: _Analysis, strides: list[tuple], rid: str):
        super().__init__(an, strides, rid)
        # few long rows: the domain tiled by column blocks instead (two_axis_tiles.py)
        self.tiles = Tiles(self) if tiled(an) else None

    def kind_comment(self) -> str:
        an = self.an
        if self.tiles is not None:
            return self.tiles.kind_comment()
        if self.looped:
            return (f"# kind: two-axis reduction over {list(an.domain)}: {an.nrows} rows of {an.ncols} elements, "
                    f"reduced along each row (dims {list(an.rdims)}) in {an.npasses + 1} passes over chunks of "
                    f"{self.bn} and along each column (dims {list(an.cdims)}); {self.programs} programs each take "
                    f"the blocks of {self.bm} rows pid, pid + {self.programs}, ... and add their column sums to "
                    "their row of partial sums, then a kernel combining them")
        return (f"# kind: two-axis reduction over {list(an.domain)}: {an.nrows} rows of {an.ncols} elements, "
                f"reduced along each row (dims {list(an.rdims)}) and along each column (dims {list(an.cdims)}); "
                f"{self.programs} programs each take the blocks of {self.bm} rows pid, pid + {self.programs}, ... "
                "and keep partial column sums, then a kernel combining them")

    def has_combine(self) -> bool:
        return True

    @property
    def partial_shape(self) -> tuple[int, int]:
        if self.tiles is not None:
            return self.tiles.partial_shape
        return self.programs, int(self.an.ncols)

    def partials(self) -> list[tuple[str, torch.dtype]]:
        if self.tiles is not None:
            return self.tiles.partials()
        return [(f"part{j}_ptr", torch.float32) for j in range(len(self.an.col_reductions))]

    def _programs(self, blocks: int) -> int:
        """One wave of programs (what the SMs hold at once), no more than there are row blocks,
        nor than give each program TWO_AXIS_MIN_ROWS rows, unless that leaves SMs idle (then
        one an SM, each of TWO_AXIS_FILL_ROWS rows at least)."""
        an = self.an
        rows = int(an.nrows)
        few = max(_cdiv(rows, tuning.TWO_AXIS_MIN_ROWS), min(an.sms, rows // tuning.TWO_AXIS_FILL_ROWS))
        accs = sum(3 if b.sym is prims.var_mean else 1 for b in an.reductions) if self.looped else 0
        return max(1, min(blocks, tuning.resident_programs(self.warps, self.bm * self.bn, accs) * an.sms, few))

    def _body(self, em: _Emitter) -> list[str]:
        if self.tiles is not None:
            return self.tiles.stats_kernel(em)
        an = self.an
        nontrivial = [d for d in range(an.n) if an.domain[d] != 1]
        self.bm, self.bn, looped, self.warps = _pick_reduction(an, bool(nontrivial) and nontrivial[-1] in an.kept)
        self.looped, self.split = looped or int(an.ncols) > tuning.TWO_AXIS_MAX_ROW, 1
        if self.looped:
            self.bm, self.bn = _pick_looped(an)
            self.warps = tuning.warps_for(self.bm * self.bn)
        blocks = _cdiv(int(an.nrows), self.bm)
        self.programs = self._programs(blocks)
        self.stages = tuning.stages_for(True)  # the loop over row blocks prefetches the next block
        cast = ".to(tl.int64)" if self.needs_int64() else ""
        self.cast64 = cast
        self.constexprs = {"BLOCK_M": self.bm, "BLOCK_N": self.bn}
        self.grid, self.grid_size = f"({self.programs},)", [self.programs]
        if self.looped:
            return self._looped_rows(em, blocks)
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
        self._store_outputs(em, body, stored)
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
        loop = [f"    for blk in range(pid, {blocks}, {self.programs}):  # this program's blocks of {self.bm} rows"]
        return head.lines + em.colscope.lines + accs.lines + loop + body.lines + tail.lines

    # rows longer than registers hold -------------------------------------------------------------
    def _looped_rows(self, em: _Emitter, blocks: int) -> list[str]:
        """Each row block in BLOCK_N chunks: a pass a set of the row's statistics (the looped
        reduction's passes, reduction.py), then one computing the full-shape outputs (dx) and
        adding each chunk's column sums, over the block's rows, to this program's row of the
        partial buffer (its own row: no atomics). Registers hold one chunk, never the row."""
        an = self.an
        em.colscope = None
        em.prologue, em.rowscope = _Scope("    "), _Scope("    ")
        rows = [f"rows = blk{self.cast64} * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]  # [BLOCK_M, 1]: one row = "
                f"one index of the kept dims {list(an.kept)}", f"row_mask = rows < {an.nrows}"]
        rows += self.index_lines("rows", em.runs["rows"]) if em.runs is not None else []
        pieces: list[str | _Scope] = ["    " + r for r in rows] + [em.prologue, em.rowscope]
        stored: set[int] = set()
        self._flush_rows(em, stored)
        for p in range(an.npasses):
            pieces += self._pass(em, p)
            em.rowscope = _Scope("    ")
            pieces.append(em.rowscope)
            self._flush_rows(em, stored)
        for k, o in self._outputs_at("row"):
            if k not in stored:
                raise Decline(f"internal: row output {o.name} was never ready")
        loop = _Scope("        ")
        em.loop = loop
        for line in self._col_index(em, "start + "):
            loop.add(line)
        for k, o in self._outputs_at("full"):
            self._store_full(em, loop, k, o)
        for j, b in enumerate(an.col_reductions):
            name = f"part_{_ident(b.outputs[0].name)}"
            loop.mark(b)
            loop.add(f"{name} = tl.sum(tl.where(mask, {em.val(b.args[0], tuple(range(an.n)))}, 0.0), axis=0)[None, :]"
                     f"  # sum({b.args[0].name}, {list(an.cdims)}) over this block's rows")
            loop.add("if blk > pid:  # this program's earlier blocks (none before its first)")
            loop.add(f"    {name} += tl.load(part{j}_ptr + pid * {an.ncols} + cols, mask=col_mask, other=0.0)")
            loop.add(f"tl.store(part{j}_ptr + pid * {an.ncols} + cols, {name}, mask=col_mask)  "
                     f"# {b.outputs[0].name}: this program's partial column sums so far")
        em.loop = None
        pieces += [f"    # pass {an.npasses + 1} over the row: the full-shape outputs and the partial column sums",
                   "    tl.debug_barrier()  # the previous block's partial sums, stored by other threads, visible",
                   f"    for start in range(0, {an.ncols}, BLOCK_N):", loop]
        lines = [x for piece in pieces for x in (piece.lines if isinstance(piece, _Scope) else [piece])]
        head = ["    pid = tl.program_id(0)  # this program's row blocks: pid, pid + "
                f"{self.programs}, ...; its row of the partial buffers",
                f"    for blk in range(pid, {blocks}, {self.programs}):  # this program's blocks of {self.bm} rows"]
        return head + ["    " + x for x in lines]

    # the combine kernel -------------------------------------------------------------------------
    def combine_kernel(self) -> tuple[list[str], set[str]]:
        """The second kernel: each column's partial sums added in a fixed order, then the
        group's ops on the column sums and the column outputs."""
        if self.tiles is not None:
            return self.tiles.combine_kernel()
        an = self.an
        self.bn2 = min(_next_pow2(int(an.ncols)), COMBINE_BLOCK_N)
        self.bs2 = min(_next_pow2(self.programs), max(1, COMBINE_TILE // self.bn2))
        self.warps2 = tuning.warps_for(self.bs2 * self.bn2)
        self.grid2_size = [_cdiv(int(an.ncols), self.bn2)]
        self.grid2 = f"({self.grid2_size[0]},)"
        self.constexprs2 = {"BLOCK_N": self.bn2, "SPLIT": self.bs2}
        return self._written_combine()

    def _combine_body(self, em: _Emitter) -> list[str]:
        if self.tiles is not None:
            return self.tiles.dx_kernel(em)
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

