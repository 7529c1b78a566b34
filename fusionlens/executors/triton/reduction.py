"""The reduction kernel: one program per block of rows (a row = one index of the kept dims,
its elements = the reduced dims flattened). When a row fits in one register block
(tuning.MAX_SINGLE_PASS elements) the whole region is straight-line code on a
[BLOCK_M, BLOCK_N] tile. Otherwise it loops over each row in BLOCK_N chunks, one loop per
pass: a pass computes every reduction whose inputs are available; softmax's
amax-then-sum(exp(x - max)) runs as one online pass (running max, rescaled sum), and
var_mean as one Welford pass (each lane's running count, mean and M2, combined once after the
loop with Chan's formula); a final pass recomputes and stores the full-shape outputs. A one-pass
sum/prod/amax/amin whose rows would leave SMs idle is split: each row cut into chunks, one
program a chunk storing partials, a second kernel combining them in order (docs/kernels.md)."""

from __future__ import annotations

from typing import Any

import torch

from fusionlens.middle.contract import Decline
from fusionlens.ir.trace import Value
from fusionlens.ops import prims

from . import tuning
from .analysis import _Analysis, _ident, _value_args
from .emitter import _Emitter, _Scope, _type_str
from .support import FLOATS, REDUCTIONS, TL_DTYPE
from .writer import _next_pow2, _store_cast, _Writer


def _pick_reduction(an: _Analysis, rows_contiguous: bool) -> tuple[int, int, bool, int]:
    """(BLOCK_M, BLOCK_N, looped, num_warps). A row length that is a symbol's is looped (the
    kernel serves every size) in blocks sized for the example's length."""
    ncols, nrows = int(an.hint(an.ncols)), int(an.hint(an.nrows))
    fixed = isinstance(an.ncols, int)
    single = fixed and ncols <= tuning.MAX_SINGLE_PASS
    if rows_contiguous:
        # the reduced dims are not the innermost: neighbouring rows are neighbouring addresses
        bm = min(_next_pow2(nrows), 64)
        bn = (min(_next_pow2(ncols), max(4096 // bm, 8)) if single or not fixed else
              min(tuning.LOOP_BLOCK_N, max(4096 // bm, 8)))
        single = single and ncols <= bn
    elif fixed:
        bn = _next_pow2(ncols) if single else _next_pow2(tuning.LOOP_BLOCK_N)
        bm = min(_next_pow2(nrows), max(1, 2048 // bn), 64) if single else 1
    else:
        bn = min(_next_pow2(ncols), _next_pow2(tuning.LOOP_BLOCK_N))
        bm = min(_next_pow2(nrows), max(1, 2048 // bn), 64)
    return bm, bn, not single, tuning.warps_for(bm * bn)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pick_split(an: _Analysis, bm: int, bn: int) -> tuple[int, int]:
    """(programs a row is split over, elements of a row each reads): (1, ncols) unless the
    region can be split (an.splittable) and its rows alone would leave SMs idle; docs/kernels.md."""
    if not an.splittable():
        return 1, an.ncols
    bn = min(bn, _next_pow2(tuning.LOOP_BLOCK_N))  # a split row is looped over in chunks of this
    programs = _cdiv(an.nrows, bm)
    want = tuning.PROGRAMS_PER_SM * an.sms
    read = an.nrows * an.ncols * max(v.dtype.itemsize for v in an.inputs)
    if programs >= want or read < tuning.SPLIT_MIN_BYTES or an.ncols < 2 * bn:
        return 1, an.ncols
    split = min(_cdiv(want, programs), _cdiv(an.ncols, bn), tuning.MAX_SPLIT)
    chunk = _cdiv(_cdiv(an.ncols, split), bn) * bn
    return _cdiv(an.ncols, chunk), chunk


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}es" if word.endswith("s") else f"{n} {word}s"


class ReductionWriter(_Writer):
    def kind_comment(self) -> str:
        an = self.an
        if self.split > 1:
            return (f"# kind: split reduction over dims {list(an.rdims)} of {list(an.domain)}: {an.nrows} rows of "
                    f"{an.ncols} elements, each cut into {self.split} chunks of {self.chunk} (one program a "
                    f"chunk), then a kernel combining the partial results")
        passes = "one pass in registers" if not self.looped else (
            f"{_plural(an.npasses + (1 if any(an.level_shape(o) == 'full' for o in an.outputs) else 0), 'pass')} "
            f"over each row in chunks of {self.bn}")
        return (f"# kind: reduction over dims {list(an.rdims)} of {list(an.domain)}: {an.nrows} rows of "
                f"{an.ncols} elements, {passes}")

    def _body(self, em: _Emitter) -> list[str]:
        an = self.an
        # is the innermost non-trivial domain dim a kept dim? then rows are contiguous
        nontrivial = [d for d in range(an.n) if an.domain[d] != 1]
        rows_contiguous = bool(nontrivial) and nontrivial[-1] in an.kept
        self.bm, self.bn, self.looped, self.warps = _pick_reduction(an, rows_contiguous)
        self.split, self.chunk = _pick_split(an, self.bm, self.bn)
        if self.split > 1 and not self.looped:  # each program loops over its chunk of a row
            self.bn = min(self.bn, _next_pow2(tuning.LOOP_BLOCK_N))
            self.looped = True
            self.split, self.chunk = _pick_split(an, self.bm, self.bn)
            self.warps = tuning.warps_for(self.bm * self.bn)
        self.stages = tuning.stages_for(self.looped)
        int64 = self.needs_int64()
        self.cast64 = ".to(tl.int64)" if int64 else ""
        em.prologue = _Scope("    ")
        em.rowscope = _Scope("    ")
        em.loop = None
        head = self.pid_lines(int64) + [
            "rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]  # [BLOCK_M, 1]: one row = one index of "
            f"the kept dims {list(an.kept)}",
            f"row_mask = rows < {self.sz(an.nrows, 'rows')}",
        ]
        if self.split > 1:
            head.append(f"split_id = tl.program_id(1){self.cast64}  # which of the {self.split} chunks of each row")
        if em.runs is not None:
            head += self.index_lines("rows", em.runs["rows"])
        stored: set[int] = set()  # the row outputs stored so far
        if self.split > 1:
            body = self._split_body(em)
        else:
            body = self._looped_body(em, stored) if self.looped else self._single_pass_body(em, stored)
        self.constexprs = {"BLOCK_M": self.bm, "BLOCK_N": self.bn}
        self.grid = self.grid_for(an.nrows, self.bm)
        if self.split > 1:
            self.grid = f"({_cdiv(an.nrows, self.bm)}, {self.split})"
            self.grid_size = [_cdiv(an.nrows, self.bm), self.split]
        return ["    " + h for h in head] + body

    # split reductions -------------------------------------------------------------------------
    def has_combine(self) -> bool:
        return self.split > 1

    @property
    def partial_shape(self) -> tuple[int, int]:
        """The shape of each partial-results buffer: [split, nrows]."""
        return self.split, int(self.an.nrows)

    def partials(self) -> list[tuple[str, torch.dtype]]:
        """(argument, dtype) of each reduction's partial results, [split, nrows] (split only)."""
        if self.split <= 1:
            return []
        return [(f"part{j}_ptr", torch.float32 if b.outputs[0].dtype in FLOATS else b.outputs[0].dtype)
                for j, b in enumerate(self.an.reductions)]

    def _split_body(self, em: _Emitter) -> list[str]:
        """This program's chunk of each row: the one pass, then each reduction's partial result
        stored for the combine kernel."""
        an = self.an
        assert em.prologue is not None and em.rowscope is not None  # set by _body
        pieces: list[str | _Scope] = [em.prologue, em.rowscope]
        pieces += self._pass(em, 0)
        tail = _Scope("    ")
        for j, b in enumerate(an.reductions):
            o = b.outputs[0]
            var = em.rowmemo[(o.name, an.canonical(o))]
            tail.add(f"tl.store(part{j}_ptr + split_id * {an.nrows} + rows, {var}, mask=row_mask)  "
                     f"# {o.name}: this chunk's partial {b.sym.name}")
        pieces.append(tail)
        return [x for piece in pieces for x in (piece.lines if isinstance(piece, _Scope) else [piece])]

    def combine_kernel(self) -> tuple[list[str], set[str]]:
        """The split's second kernel: each row's partial results reduced in a fixed order (the
        same sum at every run), then the region's row-level epilogue and row outputs."""
        split_p2 = _next_pow2(self.split)
        self.bm2 = min(_next_pow2(self.an.nrows), max(1, 4096 // split_p2), 64)
        self.warps2 = tuning.warps_for(self.bm2 * split_p2)
        self.grid2 = f"({_cdiv(self.an.nrows, self.bm2)},)"
        self.grid2_size = [_cdiv(self.an.nrows, self.bm2)]
        self.constexprs2 = {"BLOCK_M": self.bm2, "SPLIT": split_p2}
        return self._written_combine()

    def _written_combine(self) -> tuple[list[str], set[str]]:
        """The combine kernel's body (`_combine_body`): a dry run to learn its accesses, then
        the body on the index runs they coalesce into."""
        dry = _Emitter(self.an, self.strides, None, self.rid, self.sizes)
        self._combine_body(dry)
        em = _Emitter(self.an, self.strides, self.make_runs(dry.accesses), self.rid, self.sizes)
        lines = self._combine_body(em)
        self.em2 = em
        return lines, em.helpers

    def _combine_body(self, em: _Emitter) -> list[str]:
        an = self.an
        body = _Scope("    ")
        em.prologue = em.rowscope = body
        em.loop = None
        body.add("pid = tl.program_id(0)")
        body.add("rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]  # [BLOCK_M, 1]")
        body.add(f"row_mask = rows < {an.nrows}")
        if em.runs is not None:
            for line in self.index_lines("rows", em.runs["rows"]):
                body.add(line)
        body.add("splits = tl.arange(0, SPLIT)[None, :]  # [1, SPLIT]: the partial results of a row")
        body.add(f"part_mask = row_mask & (splits < {self.split})")
        for j, b in enumerate(an.reductions):
            o = b.outputs[0]
            name = _ident(o.name)
            ident, _ = _identity(b.sym, o.dtype)
            body.add(f"{name}_parts = tl.load(part{j}_ptr + splits * {an.nrows} + rows, mask=part_mask, "
                     f"other={ident})")
            red = _reduce_expr(b.sym, o.dtype, em)
            body.add(f"{name} = {red.format(v=name + '_parts')}[:, None]  # {b.sym.name}({b.args[0].name}, "
                     f"{list(an.rdims)}): the {self.split} partials combined")
            self._register(em, o, name)
        stored: set[int] = set()
        self._flush_rows(em, stored)
        for k, o in self._outputs_at("row"):
            if k not in stored:
                raise Decline(f"internal: row output {o.name} was never ready")
        return body.lines

    def _outputs_at(self, level: str) -> list[tuple[int, Value]]:
        """(index, output) of the outputs of shape `level` ("full" or "row")."""
        return [(k, o) for k, o in enumerate(self.an.outputs) if self.an.level_shape(o) == level]

    def _col_index(self, em: _Emitter, base: str) -> list[str]:
        """The lines that index one BLOCK_N chunk of each row, starting at `base`."""
        an = self.an
        wide = ["if INDEX_64:", "    cols = cols.to(tl.int64)"] if self.symbolic else []
        return ([f"cols = {base}tl.arange(0, BLOCK_N)[None, :]{self.cast64}  # [1, BLOCK_N]: elements of the "
                 f"reduced dims {list(an.rdims)}"] + wide
                + [f"col_mask = cols < {self.sz(an.ncols, 'cols')}",
                   "mask = row_mask & col_mask"]
                + (self.index_lines("cols", em.runs["cols"]) if em.runs is not None else []))

    def _flush_rows(self, em: _Emitter, stored: set[int]):
        """Every non-pure row-level value whose reductions are done, and the row outputs ready."""
        an = self.an
        assert em.rowscope is not None  # _body sets it before any pass
        for b in an.group.bsyms:
            if b.sym in REDUCTIONS:
                continue
            for o in b.outputs:
                if an.pure[o.name] or an.level_shape(o) != "row":
                    continue
                if self._ready(o, em):
                    em.val(o, an.canonical(o))
        for k, o in self._outputs_at("row"):
            if k in stored:
                continue
            if an.pure[o.name] or self._ready(o, em):
                v = em.val(o, an.canonical(o))
                em.rowscope.add(f"tl.store(out{k}_ptr + rows, {_store_cast(v, o)}, mask=row_mask)  # {o.name}: "
                                f"{_type_str(o)}")
                stored.add(k)

    def _store_full(self, em: _Emitter, scope: _Scope, k: int, o: Value):
        v = em.val(o, self.an.canonical(o))
        off, _ = em.offset(self.out_ds(o))
        off = "rows + cols" if off == "0" else off
        scope.add(f"tl.store(out{k}_ptr + {off}, {_store_cast(v, o)}, mask=mask)  # {o.name}: {_type_str(o)}")

    def _single_pass_body(self, em: _Emitter, stored: set[int]) -> list[str]:
        """A row fits in one register block: the region as straight-line code on one tile."""
        an = self.an
        body = _Scope("    ")
        em.loop = em.rowscope = em.prologue = body
        for line in self._col_index(em, ""):
            body.add(line)
        for b in an.group.bsyms:
            if b.sym in REDUCTIONS:
                self._single_reduction(em, b, body)
        self._store_outputs(em, body, stored)
        return body.lines

    def _store_outputs(self, em: _Emitter, body: _Scope, stored: set[int]):
        """After a block of rows is reduced: its row-level ops, its full-shape outputs, and its
        row outputs not stored already."""
        self._flush_rows(em, stored)
        for k, o in self._outputs_at("full"):
            self._store_full(em, body, k, o)
        for k, o in self._outputs_at("row"):
            if k not in stored:
                v = em.val(o, self.an.canonical(o))
                body.add(f"tl.store(out{k}_ptr + rows, {_store_cast(v, o)}, mask=row_mask)  # {o.name}")

    def _looped_body(self, em: _Emitter, stored: set[int]) -> list[str]:
        """One loop over each row per pass, then a pass storing the full-shape outputs."""
        an = self.an
        # pieces: lines or scopes, joined at the end (a scope may still grow: a row value
        # first needed in a later pass is written after the pass that made it possible)
        assert em.prologue is not None and em.rowscope is not None  # set by _body
        pieces: list[str | _Scope] = [em.prologue, em.rowscope]
        for p in range(an.npasses):
            pieces += self._pass(em, p)
            em.rowscope = _Scope("    ")
            pieces.append(em.rowscope)
            self._flush_rows(em, stored)
        full_outs = self._outputs_at("full")
        if full_outs:
            loop = _Scope("        ")
            em.loop = loop
            for line in self._col_index(em, "start + "):
                loop.add(line)
            for k, o in full_outs:
                self._store_full(em, loop, k, o)
            em.loop = None
            pieces += [f"    # pass {an.npasses + 1} over the row: the full-shape outputs",
                       f"    for start in range(0, {self.sz(an.ncols, 'cols')}, BLOCK_N):", loop]
        for k, o in self._outputs_at("row"):
            if k not in stored:
                raise Decline(f"internal: row output {o.name} was never ready")
        lines: list[str] = []
        for piece in pieces:
            lines += piece.lines if isinstance(piece, _Scope) else [piece]
        return lines

    def _pass(self, em: _Emitter, p: int) -> list[str | _Scope]:
        """Pass `p` over each row: the reductions it computes (init, the loop, what follows)."""
        an = self.an
        reds = [b for b in an.reductions if an.pass_of[b.outputs[0].name] == p]
        init = _Scope("    ")
        loop = _Scope("        ")
        fin = _Scope("    ")
        em.loop = loop
        for line in self._col_index(em, "start + "):
            loop.add(line)
        online_amax = {id(an.online[id(x)]) for x in reds if id(x) in an.online}
        for b in reds:
            if id(b) in online_amax:
                continue  # an amax computed with its online sum
            self._looped_reduction(em, b, init, loop, fin)
        em.loop = None
        title = ", ".join(f"{b.sym.name} -> " + "/".join(o.name for o in b.outputs) for b in reds)
        span = (f"split_id * {self.chunk}, split_id * {self.chunk} + {self.chunk}" if self.split > 1 else
                f"0, {self.sz(an.ncols, 'cols')}")
        return [f"    # pass {p + 1} over the row: {title}", init, f"    for start in range({span}, BLOCK_N):",
                loop, fin]

    def _ready(self, v, em) -> bool:
        """Are all reductions upstream of v finished (in the row memo)?"""
        an = self.an
        seen = set()
        stack = [v]
        while stack:
            x = stack.pop()
            if x.name in seen or x.name in an.input_index:
                continue
            seen.add(x.name)
            b = an.producer[x.name]
            if b.sym in REDUCTIONS:
                if x.name not in em.finished:
                    return False
                continue
            stack.extend(_value_args(b))
        return True

    # reductions -----------------------------------------------------------------------------
    def _number(self, x) -> str:
        """A divisor: a float literal, or the argument of a size that depends on a symbol."""
        return repr(float(x)) if isinstance(x, (int, float)) else self.sz(x)

    def _register(self, em, out, varname):
        em.rowmemo[(out.name, self.an.canonical(out))] = varname
        em.finished.add(out.name)

    def _single_reduction(self, em, b, body):
        an = self.an
        sym = b.sym
        src = b.args[0]
        x = em.val(src, tuple(range(an.n)))
        outs = b.outputs
        body.mark(b)
        if sym is prims.var_mean:
            var_o, mean_o, mv, vv, denom, corr = _var_mean_names(b, an.ncols)
            body.add(f"{mv} = tl.sum(tl.where(mask, {x}, 0.0), axis=1)[:, None] / {self._number(an.ncols)}  "
                     f"# prims.var_mean({src.name}): mean")
            body.add(f"{vv}_d = tl.where(mask, {x} - {mv}, 0.0)")
            body.add(f"{vv} = tl.sum({vv}_d * {vv}_d, axis=1)[:, None] / {self._number(denom)}  "
                     f"# prims.var_mean({src.name}, correction={corr}): var")
            self._register(em, mean_o, mv)
            self._register(em, var_o, vv)
            return
        o = outs[0]
        name = _ident(o.name)
        ident, _ = _identity(sym, o.dtype)
        xv = _in_output_type(x, src, o)
        red = _reduce_expr(sym, o.dtype, em)
        body.add(f"{name} = {red.format(v=f'tl.where(mask, {xv}, {ident})')}[:, None]  # {sym.name}({src.name}, "
                 f"{list(an.rdims)})")
        self._register(em, o, name)

    def _looped_reduction(self, em, b, init, loop, fin):
        an = self.an
        sym = b.sym
        src = b.args[0]
        full = tuple(range(an.n))
        outs = b.outputs
        if id(b) in an.online:
            mb = an.online[id(b)]
            m_o, s_o = mb.outputs[0], outs[0]
            m, s = _ident(m_o.name), _ident(s_o.name)
            a = em.val(mb.args[0], full)
            loop.mark(b)
            fin.mark(b)
            # each lane keeps its own running max and rescaled sum: no block-wide reduction in
            # the loop, one combine (_fl_online) after it
            em.helpers.add("_fl_online")
            init.add(f"on_{m} = tl.full([BLOCK_M, BLOCK_N], float(\"-inf\"), tl.float32)  # running max, per lane")
            init.add(f"on_{s} = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)  # running sum of exp(x - running max)")
            loop.add(f"on_{m}_x = tl.where(mask, {a}, float(\"-inf\"))")
            loop.add(f"on_{m}_new = tl.maximum(on_{m}, on_{m}_x, propagate_nan=tl.PropagateNan.ALL)")
            loop.add(f"on_{s} = tl.where(on_{m}_new == float(\"-inf\"), 0.0, on_{s} * tl.exp(on_{m} - on_{m}_new) + "
                     f"tl.exp(on_{m}_x - on_{m}_new))")
            loop.add(f"on_{m} = on_{m}_new")
            fin.add(f"{m}, {s} = tl.reduce((on_{m}, on_{s}), 1, _fl_online)  # prims.amax({mb.args[0].name}) and "
                    "sum(exp(x - max)): one combine (online softmax)")
            fin.add(f"{m} = {m}[:, None]")
            fin.add(f"{s} = {s}[:, None]")
            self._register(em, m_o, m)
            self._register(em, s_o, s)
            return
        x = em.val(src, full)
        loop.mark(b)
        fin.mark(b)
        if sym is prims.var_mean:
            var_o, mean_o, mv, vv, denom, corr = _var_mean_names(b, an.ncols)
            w = f"wf_{mv}"
            # single-pass Welford, per lane (no block-wide reduction in the loop), then one combine
            em.helpers.add("_fl_welford")
            init.add(f"{w}_n = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)  # Welford: count, mean, M2 per lane")
            init.add(f"{w}_mean = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)")
            init.add(f"{w}_m2 = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)")
            loop.add(f"{w}_n = {w}_n + tl.where(mask, 1.0, 0.0)")
            loop.add(f"{w}_d = tl.where(mask, {x} - {w}_mean, 0.0)")
            loop.add(f"{w}_mean = {w}_mean + {w}_d / tl.maximum({w}_n, 1.0)")
            loop.add(f"{w}_m2 = {w}_m2 + {w}_d * tl.where(mask, {x} - {w}_mean, 0.0)")
            fin.add(f"{w}_mean, {w}_m2, {w}_n = tl.reduce(({w}_mean, {w}_m2, {w}_n), 1, _fl_welford)  "
                    "# the lanes' states combined")
            fin.add(f"{mv} = {w}_mean[:, None]  # prims.var_mean({src.name}): mean (Welford)")
            fin.add(f"{vv} = {w}_m2[:, None] / {self._number(denom)}  # prims.var_mean({src.name}, "
                    f"correction={corr}): var")
            self._register(em, mean_o, mv)
            self._register(em, var_o, vv)
            return
        o = outs[0]
        name = _ident(o.name)
        ident, acc_t = _identity(sym, o.dtype)
        xv = _in_output_type(x, src, o)
        acc = f"acc_{name}"
        init.add(f"{acc} = tl.full([BLOCK_M, BLOCK_N], {ident}, {acc_t})")
        masked = f"tl.where(mask, {xv}, {ident})"
        nan = ", propagate_nan=tl.PropagateNan.ALL" if o.dtype in FLOATS else ""
        step = {prims.sum: f"{acc} + {masked}", prims.prod: f"{acc} * {masked}",
                prims.amax: f"tl.maximum({acc}, {masked}{nan})", prims.amin: f"tl.minimum({acc}, {masked}{nan})"}[sym]
        loop.add(f"{acc} = {step}")
        red = _reduce_expr(sym, o.dtype, em)
        fin.add(f"{name} = {red.format(v=acc)}[:, None]  # {sym.name}({src.name}, {list(an.rdims)})")
        self._register(em, o, name)


def _in_output_type(x: str, src, o) -> str:
    """The reduced operand `x` in the type its reduction accumulates (floats stay float32)."""
    return x if o.dtype in FLOATS or src.dtype == o.dtype else f"{x}.to({TL_DTYPE[o.dtype]})"


def _reduce_expr(sym, dtype, em) -> str:
    """The row reduction of a [BLOCK_M, BLOCK_N] tile (a format string over {v})."""
    if sym is prims.sum:
        return "tl.sum({v}, axis=1)"
    if sym is prims.prod:
        em.helpers.add("_fl_mul")
        return "tl.reduce({v}, 1, _fl_mul)"
    if dtype in FLOATS:  # torch.amax/amin propagate NaN; tl.max/tl.min do not
        helper = "_fl_max" if sym is prims.amax else "_fl_min"
        em.helpers.add(helper)
        return f"tl.reduce({{v}}, 1, {helper})"
    return "tl.max({v}, axis=1)" if sym is prims.amax else "tl.min({v}, axis=1)"


def _identity(sym, dtype) -> tuple[str, str]:
    """(the reduction's identity as a literal, its accumulator's tl type)."""
    acc_t = "tl.float32" if dtype in FLOATS else ("tl.int64" if dtype == torch.int64 else TL_DTYPE[dtype])
    if dtype in FLOATS:
        ident = {prims.sum: "0.0", prims.prod: "1.0", prims.amax: 'float("-inf")', prims.amin: 'float("inf")'}[sym]
    else:
        info = torch.iinfo(dtype) if dtype != torch.bool else None
        ident = {prims.sum: "0", prims.prod: "1", prims.amax: str(info.min) if info else "0",
                 prims.amin: str(info.max) if info else "1"}[sym]
    return ident, acc_t


def _var_mean_names(b, ncols) -> tuple[Value, Value, str, str, Any, int | float]:
    """(var value, mean value, mean name, var name, variance divisor, correction); the divisor
    is a float, or an expression where the row length is a symbol's."""
    var_o, mean_o = b.outputs
    corr = b.args[2] if len(b.args) > 2 else b.kwargs.get("correction", 1)
    if isinstance(ncols, int):
        return var_o, mean_o, _ident(mean_o.name), _ident(var_o.name), float(max(ncols - corr, 0)), corr
    import sympy

    return var_o, mean_o, _ident(mean_o.name), _ident(var_o.name), sympy.Max(ncols - corr, 0), corr
