"""A two-axis group (a norm's backward) over few long rows: the domain tiled by column blocks.

Rows longer than tuning.TWO_AXIS_MAX_ROW and fewer than TWO_AXIS_FILL_ROWS x SMs ([256, 262144],
[64, 131072]) leave SMs idle when programs share out the rows (two_axis.py), and a program per
few rows would write a partial column-sum row as big as what it reads. So the work is cut
along the columns instead, in two kernels, no atomics:

1. The statistics kernel, grid (column blocks, row groups): a program takes one block of
   BLOCK_N columns (a tile in registers) of a group of consecutive row blocks and stores,
   per row, each row reduction's partial over its columns into a [rows, column blocks] float32
   buffer: a sum, a var_mean's tile mean and M2 (Chan's formula combines them), an amax; a
   reduction that reads an earlier one (LayerNorm's `sum(dy * w * xhat)` where the backward
   recomputes mean and rstd) as the partial sums of its operand's coefficients in the earlier
   results, shifted by the tile's mean (polynomial.py). Row groups enough for
   TWO_AXIS_TILE_WAVES (8) waves of programs.
2. The dx kernel, grid (column blocks,), each of BLOCK_N columns over every row: per row block
   it combines the row's partials in a fixed order (the same bits at every run), runs the row
   code (rstd, the dx coefficients), computes and stores dx for its tile, and adds the column
   sums' operands (`dy * xhat`, `dy`) into lane-wise accumulators; after the last row block it
   sums them over the rows and stores dw and db: every column's sums are one program's, so no
   partial column rows at all.

dy and x are read twice (once a kernel); the partial buffers are rows x column blocks x 4 bytes a
partial (256 x 32 x 4 = 32 KiB at [256, 262144]).
"""

from __future__ import annotations

import torch

from fusionlens.ops import prims

from . import polynomial, tuning
from .analysis import _Analysis, _ident, _literal
from .emitter import _Emitter, _Scope
from .reduction import ReductionWriter, _cdiv, _identity, _reduce_expr, _var_mean_names
from .writer import _next_pow2, _store_cast


def tiled(an: _Analysis) -> bool:
    """Whether a two-axis group takes the tiled kernels: static, rows longer than registers hold
    and too few to give every SM a program of TWO_AXIS_FILL_ROWS, each row reduction summable a
    tile at a time (support.takes_columns refuses the rest of such groups)."""
    if not an.cdims or an.env is not None:
        return False
    if int(an.ncols) <= tuning.TWO_AXIS_MAX_ROW or int(an.nrows) >= tuning.TWO_AXIS_FILL_ROWS * an.sms:
        return False
    return polynomial.tile_problem(an.group.bsyms, an.domain, an.rdims, an.cdims) is None


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


class Tiles:
    """The two kernels of a tiled two-axis group, written through its TwoAxisWriter `w`."""

    def __init__(self, w: ReductionWriter):
        self.w = w
        an = self.an = w.an
        ncols, nrows = int(an.ncols), int(an.nrows)
        ex = polynomial.Expansion(an.producer, an.pure, an.domain)
        self.slots: list[tuple] = []  # (reduction, what) a partial buffer: "value", "mean", "m2", a monomial
        self.polys: dict[int, polynomial.Poly] = {}
        for b in an.reductions:
            if an.pass_of[b.outputs[0].name] == 0:
                whats: list = ["mean", "m2"] if b.sym is prims.var_mean else ["value"]
            else:
                poly = ex.expand(b.args[0])
                assert poly is not None  # tiled() asked polynomial.tile_problem
                self.polys[id(b)] = poly
                whats = list(poly)
            self.slots += [(b, x) for x in whats]
        want = tuning.PROGRAMS_PER_SM * an.sms
        # the statistics kernel: column blocks as wide as registers hold, row groups to fill the GPU
        self.bn1 = min(_next_pow2(ncols), _pow2_floor(tuning.TWO_AXIS_MAX_ROW))
        self.c1 = _cdiv(ncols, self.bn1)
        self.bm1 = max(1, min(_next_pow2(nrows), tuning.TWO_AXIS_LOOP_TILE // self.bn1))
        self.blocks1 = _cdiv(nrows, self.bm1)
        # row groups of `per` consecutive row blocks: programs for TWO_AXIS_TILE_WAVES waves of one
        # an SM (the last wave's idle SMs then cost at most an eighth of the time, a quarter where
        # an SM holds two), as few as that allows (each loads its block of w once)
        per = max(1, self.c1 * self.blocks1 // (tuning.TWO_AXIS_TILE_WAVES * an.sms))
        self.per, self.g1 = per, _cdiv(self.blocks1, per)
        # the dx kernel: column blocks narrow enough for `want` programs, each over every row
        self.bn2 = max(min(tuning.TWO_AXIS_TILE_MIN_COLS, _next_pow2(ncols)),
                       min(_pow2_floor(ncols // want), _next_pow2(tuning.LOOP_BLOCK_N)))
        self.c2 = _cdiv(ncols, self.bn2)
        self.bm2 = max(1, min(_next_pow2(nrows), tuning.TWO_AXIS_LOOP_TILE // self.bn2))
        self.q: dict[str, str] = {}  # var_mean mean name -> the variable of its tile means

    def kind_comment(self) -> str:
        an = self.an
        return (f"# kind: two-axis reduction over {list(an.domain)}: {an.nrows} rows of {an.ncols} elements, "
                f"reduced along each row (dims {list(an.rdims)}) and each column (dims {list(an.cdims)}), tiled "
                f"by column blocks: {self.c1} x {self.g1} programs store each row's partials over {self.bn1} "
                f"columns, then {self.c2} programs of {self.bn2} columns each combine them, compute the "
                "full-shape outputs and sum their columns over every row")

    @property
    def partial_shape(self) -> tuple[int, int]:
        return int(self.an.nrows), self.c1

    def partials(self) -> list[tuple[str, torch.dtype]]:
        return [(f"part{j}_ptr", torch.float32) for j in range(len(self.slots))]

    def _head(self, em: _Emitter, scope: _Scope, cast: str, what: str):
        scope.add(f"pid = tl.program_id(0)  # {what}")
        scope.add(f"cols = pid{cast} * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]  # [1, BLOCK_N]: elements of the "
                  f"reduced dims {list(self.an.rdims)}")
        scope.add(f"col_mask = cols < {self.an.ncols}")
        for line in self.w.index_lines("cols", em.runs["cols"]) if em.runs is not None else []:
            scope.add(line)

    def _rows(self, em: _Emitter, body: _Scope, cast: str):
        an = self.an
        body.add(f"rows = blk{cast} * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]  # [BLOCK_M, 1]: one row = one "
                 f"index of the kept dims {list(an.kept)}")
        body.add(f"row_mask = rows < {an.nrows}")
        body.add("mask = row_mask & col_mask")
        for line in self.w.index_lines("rows", em.runs["rows"]) if em.runs is not None else []:
            body.add(line)

    # the statistics kernel ------------------------------------------------------------------------
    def stats_kernel(self, em: _Emitter) -> list[str]:
        """Kernel 1: each row's partials over this program's column block (module docstring)."""
        w, an = self.w, self.an
        w.bm, w.bn, w.looped, w.split = self.bm1, self.bn1, False, 1
        w.warps, w.stages = tuning.warps_for(self.bm1 * self.bn1), tuning.stages_for(True)
        cast = ".to(tl.int64)" if w.needs_int64() else ""
        w.cast64 = cast
        w.constexprs = {"BLOCK_M": self.bm1, "BLOCK_N": self.bn1}
        w.grid, w.grid_size = f"({self.c1}, {self.g1})", [self.c1, self.g1]
        head = _Scope("    ")
        self._head(em, head, cast, f"this program's block of {self.bn1} columns: its column of the partials")
        head.add(f"r_grp = tl.program_id(1)  # its {self.per} row blocks from r_grp * {self.per}")
        em.colscope = _Scope("    ")
        body = _Scope("        ")
        em.loop = em.rowscope = em.prologue = body
        self._rows(em, body, cast)
        self.q = {}
        full = tuple(range(an.n))
        for j, (b, what) in enumerate(self.slots):
            body.mark(b)
            p = f"r_p{j}"
            if what == "value":
                ident, _ = _identity(b.sym, b.outputs[0].dtype)
                red = _reduce_expr(b.sym, b.outputs[0].dtype, em)
                body.add(f"{p} = {red.format(v=f'tl.where(mask, {em.val(b.args[0], full)}, {ident})')}[:, None]  "
                         f"# {b.sym.name}({b.args[0].name}) over this tile")
            elif what == "mean":
                body.add(f"r_n{j} = tl.sum(tl.where(mask, 1.0, 0.0), axis=1)[:, None]")
                body.add(f"{p} = tl.sum(tl.where(mask, {em.val(b.args[0], full)}, 0.0), axis=1)[:, None] / "
                         f"tl.maximum(r_n{j}, 1.0)  # var_mean({b.args[0].name}): this tile's mean")
                self.q[b.outputs[1].name] = p
            elif what == "m2":
                body.add(f"r_d{j} = tl.where(mask, {em.val(b.args[0], full)} - {self.q[b.outputs[1].name]}, 0.0)")
                body.add(f"{p} = tl.sum(r_d{j} * r_d{j}, axis=1)[:, None]  # and its M2")
            else:
                coef = self._render(em, self.polys[id(b)][what])
                body.add(f"{p} = tl.sum(tl.where(mask, {coef}, 0.0), axis=1)[:, None]  # sum({b.args[0].name}): "
                         f"the coefficient of {' * '.join(what) or '1'} over this tile")
            body.add(f"tl.store(part{j}_ptr + rows * {self.c1} + pid, {p}, mask=row_mask)")
        first = f"r_grp * {self.per}"
        loop = (f"    for blk in range({first}, {first} + {self.per}):  # this program's blocks of {self.bm1} rows "
                "(past the last: masked)")
        return head.lines + em.colscope.lines + [loop] + body.lines

    def _render(self, em: _Emitter, e: polynomial.Expr) -> str:
        """A coefficient as Triton code over this tile's values."""
        if e[0] == "v":
            return em.val(e[1], tuple(range(self.an.n)))
        if e[0] == "c":
            return _literal(float(e[1]))
        if e[0] == "q":
            return self.q[e[1]]
        if e[0] == "neg":
            return f"(-{self._render(em, e[1])})"
        op = {"mul": "*", "add": "+", "div": "/"}[e[0]]
        return f"({self._render(em, e[1])} {op} {self._render(em, e[2])})"

    # the dx kernel --------------------------------------------------------------------------------
    def combine_kernel(self) -> tuple[list[str], set[str]]:
        w = self.w
        self.split = _next_pow2(self.c1)
        w.warps2 = tuning.warps_for(self.bm2 * self.bn2)
        w.grid2, w.grid2_size = f"({self.c2},)", [self.c2]
        w.constexprs2 = {"BLOCK_M": self.bm2, "BLOCK_N": self.bn2, "SPLIT": self.split}
        return w._written_combine()

    def dx_kernel(self, em: _Emitter) -> list[str]:
        """Kernel 2: the row partials combined, dx, and the whole column sums of its columns."""
        w, an = self.w, self.an
        cast = w.cast64
        head = _Scope("    ")
        self._head(em, head, cast, f"this program's block of {self.bn2} columns, over every row")
        em.colscope = _Scope("    ")
        accs = _Scope("    ")
        body = _Scope("        ")
        em.loop = em.rowscope = em.prologue = body
        self._rows(em, body, cast)
        body.add(f"splits = tl.arange(0, SPLIT)[None, :]  # [1, SPLIT]: a row's partials, one a block of "
                 f"{self.bn1} columns")
        body.add(f"part_mask = row_mask & (splits < {self.c1})")
        self.q = {}
        rows_out = w._outputs_at("row")
        stored = {k for k, _ in rows_out}  # stored below, by one program
        for p in range(an.npasses):
            for b in (b for b in an.reductions if an.pass_of[b.outputs[0].name] == p):
                self._combine(em, body, b)
            w._flush_rows(em, stored)
        for k, o in rows_out:
            body.add(f"tl.store(out{k}_ptr + rows, {_store_cast(em.val(o, an.canonical(o)), o)}, "
                     f"mask=row_mask & (pid == 0))  # {o.name}: every program has it, the first stores it")
        for k, o in w._outputs_at("full"):
            w._store_full(em, body, k, o)
        tail = _Scope("    ")
        for b in an.col_reductions:
            name = _ident(b.outputs[0].name)
            accs.add(f"acc_{name} = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)  # {b.outputs[0].name}: lane-wise")
            body.mark(b)
            body.add(f"acc_{name} += tl.where(mask, {em.val(b.args[0], tuple(range(an.n)))}, 0.0)  "
                     f"# sum({b.args[0].name}, {list(an.cdims)})")
            tail.add(f"{name} = tl.sum(acc_{name}, axis=0)[None, :]  # prims.sum({b.args[0].name}, {list(an.cdims)})")
            tail.memo[(b.outputs[0].name, an.canonical(b.outputs[0]))] = name
        em.loop = em.rowscope = em.prologue = tail
        for k, o in enumerate(an.outputs):
            if an.level_shape(o) == "col":
                tail.add(f"tl.store(out{k}_ptr + cols, {_store_cast(em.val(o, an.canonical(o)), o)}, "
                         f"mask=col_mask)  # {o.name}")
        loop = f"    for blk in range(0, {_cdiv(int(an.nrows), self.bm2)}):  # every row, in blocks of {self.bm2}"
        return head.lines + em.colscope.lines + accs.lines + [loop] + body.lines + tail.lines

    def _combine(self, em: _Emitter, body: _Scope, b):
        """Reduction `b` of each row of the block, from its partials in a fixed order."""
        w, an = self.w, self.an
        js = [j for j, (s, _) in enumerate(self.slots) if s is b]
        ident = _identity(b.sym, b.outputs[0].dtype)[0] if b.sym in (prims.amax, prims.amin) else "0.0"
        body.mark(b)
        for j in js:
            body.add(f"r_parts{j} = tl.load(part{j}_ptr + rows * {self.c1} + splits, mask=part_mask, other={ident})")
        if b.sym is prims.var_mean:
            var_o, mean_o, mv, vv, denom, _ = _var_mean_names(b, an.ncols)
            jm, j2 = js
            em.helpers.add("_fl_welford")
            body.add(f"r_n{jm} = tl.where(part_mask, tl.minimum({self.bn1}, {an.ncols} - splits * {self.bn1}), 0)"
                     ".to(tl.float32)  # the columns each partial is over")
            body.add(f"{mv}, r_m2{jm}, r_n{jm} = tl.reduce((r_parts{jm}, r_parts{j2}, r_n{jm}), 1, _fl_welford)  "
                     f"# prims.var_mean({b.args[0].name}): the tiles' means and M2 (Chan)")
            body.add(f"{mv} = {mv}[:, None]")
            body.add(f"{vv} = r_m2{jm}[:, None] / {w._number(denom)}")
            w._register(em, mean_o, mv)
            w._register(em, var_o, vv)
            self.q[mean_o.name] = f"r_parts{jm}"
            return
        o = b.outputs[0]
        name = _ident(o.name)
        if id(b) not in self.polys:
            red = _reduce_expr(b.sym, o.dtype, em)
            body.add(f"{name} = {red.format(v=f'r_parts{js[0]}')}[:, None]  # {b.sym.name}({b.args[0].name}, "
                     f"{list(an.rdims)}): the tiles' partials")
        else:
            terms = [" * ".join([f"r_parts{j}"] + [self._atom(em, a) for a in m])
                     for j, m in zip(js, self.polys[id(b)])]
            body.add(f"{name} = tl.sum(tl.where(part_mask, {' + '.join(terms)}, 0.0), axis=1)[:, None]  "
                     f"# sum({b.args[0].name}, {list(an.rdims)}): its coefficients' partials times the row values")
        w._register(em, o, name)

    def _atom(self, em: _Emitter, atom: str) -> str:
        """A row value a monomial multiplies: `~mean` is the row's mean less each tile's."""
        an = self.an
        v = an.values[atom.removeprefix("~")]
        val = em.val(v, an.canonical(v))
        return f"({val} - {self.q[v.name]})" if atom.startswith("~") else val
