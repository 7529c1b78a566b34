"""The expression emitter: writes the lines that load the inputs and compute each prim, for
one stride signature, into scopes the kernel writers set up.

Numerics: float16/bfloat16 are computed in float32 with one rounding at the store, plus
the roundings the program asks for (convert_element_type to a 16-bit type rounds there, to
bfloat16 in integer ops, _fl_bf16) and those where a 16-bit value leaves its type (a
comparison, a convert to float32 or an integer reads it rounded, as eager's does); bool
add and mul are or and and, as torch;
amax/amin propagate NaN as torch does; remainder uses an IEEE quotient (div_rn); tanh,
expm1, log1p, round and trunc are small helpers over stable tl functions (libdevice is not
used: the interpreter does not run it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from fusionlens.middle.contract import Decline
from fusionlens.executors import symbolic
from fusionlens.ir.trace import Value, format_arg
from fusionlens.ops import prims

from .analysis import _Analysis, _ident, _literal
from .sizes import KernelSizes
from .support import BINARY_OP, FLOATS, REDUCTIONS, TL_DTYPE, UNARY_EXPR

# Helper device functions, included in a module only when used. Written with long-stable
# tl functions only (no libdevice: Triton's interpreter does not run it).
HELPERS = {
    "_fl_log1p": '''@triton.jit
def _fl_log1p(x):
    # log(1 + x) without losing small x: log(u) * x / (u - 1) with u = 1 + x (Kahan)
    u = 1.0 + x
    d = u - 1.0
    r = tl.log(u) * (x / tl.where(d == 0.0, 1.0, d))
    return tl.where(d == 0.0, x, tl.where(u == float("inf"), u, r))
''',
    "_fl_expm1": '''@triton.jit
def _fl_expm1(x):
    # exp(x) - 1 without losing small x: (u - 1) * x / log(u) with u = exp(x) (Kahan)
    u = tl.exp(x)
    d = u - 1.0
    lu = tl.log(u)
    r = tl.where(lu == 0.0, x, d * (x / tl.where(lu == 0.0, 1.0, lu)))
    return tl.where(u == float("inf"), u, tl.where(d == -1.0, -1.0, r))
''',
    "_fl_tanh": '''@triton.jit
def _fl_tanh(x):
    # one exp and one division: 1 - 2 / (exp(2|x|) + 1), sign restored (no overflow: exp -> inf
    # gives 1); below |x| = 1/16 an odd polynomial keeps the relative accuracy of tiny x
    ax = tl.abs(x)
    big = 1.0 - 2.0 / (tl.exp(2.0 * ax) + 1.0)
    x2 = ax * ax
    small = ax * (1.0 + x2 * (-0.3333333333333333 + x2 * (0.13333333333333333 + x2 * -0.05396825396825397)))
    t = tl.where(ax < 0.0625, small, big)
    return tl.where(x < 0.0, -t, t)
''',
    "_fl_round": '''@triton.jit
def _fl_round(x):
    # round half to even, as torch.round; x - floor(x) is exact (floor(x + 0.5) is not: it
    # rounds 0.49999997 and 2**23 + 1 up); a zero keeps x's sign (round(-0.3) is -0.0)
    f = tl.floor(x)
    d = x - f
    odd = (f - 2.0 * tl.floor(f * 0.5)) != 0.0
    r = tl.where((d > 0.5) | ((d == 0.5) & odd), f + 1.0, f)
    return tl.where(r == 0.0, x * 0.0, r)
''',
    "_fl_bf16": '''@triton.jit
def _fl_bf16(x):
    # x (float32) rounded to the nearest bfloat16, ties to even, as torch; spelt out in integer
    # ops because Triton's interpreter truncates in .to(tl.bfloat16)
    bits = x.to(tl.uint32, bitcast=True)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    r = ((bits >> 16) << 16).to(tl.float32, bitcast=True)
    return tl.where(x != x, x, r)
''',
    "_fl_trunc": '''@triton.jit
def _fl_trunc(x):
    return tl.where(x < 0.0, tl.ceil(x), tl.floor(x))
''',
    "_fl_imod": '''@triton.jit
def _fl_imod(a, b):
    # integer remainder with the sign of the divisor, as torch.remainder
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
''',
    "_fl_mul": '''@triton.jit
def _fl_mul(a, b):
    return a * b
''',
    "_fl_max": '''@triton.jit
def _fl_max(a, b):
    # NaN-propagating max, as torch.amax
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
''',
    "_fl_min": '''@triton.jit
def _fl_min(a, b):
    # NaN-propagating min, as torch.amin
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
''',
    "_fl_welford": '''@triton.jit
def _fl_welford(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    # two Welford states (mean, M2, count) as one (Chan et al.): the block-wide combine
    n = n_a + n_b
    delta = mean_b - mean_a
    frac = tl.where(n == 0.0, 0.0, n_b / tl.where(n == 0.0, 1.0, n))
    return mean_a + delta * frac, m2_a + m2_b + delta * delta * n_a * frac, n
''',
    "_fl_online": '''@triton.jit
def _fl_online(m_a, s_a, m_b, s_b):
    # two online-softmax states (running max, sum of exp(x - max)) as one
    m = tl.maximum(m_a, m_b, propagate_nan=tl.PropagateNan.ALL)
    sa = tl.where(m_a == float("-inf"), 0.0, s_a * tl.exp(m_a - m))
    sb = tl.where(m_b == float("-inf"), 0.0, s_b * tl.exp(m_b - m))
    return m, sa + sb
''',
}
HELPER_DEPS: dict[str, list[str]] = {}  # helper -> the helpers it calls

# value dim -> domain dim (None: a size-1 or broadcast dim), how a value is read
DimMap = tuple[int | None, ...]


@dataclass
class _Run:
    """Adjacent domain dims indexed together (coalesced): their index variable and size."""

    dims: list[int]
    size: int  # or a sympy expression of a dynamic program's sizes
    var: str


class _Scope:
    def __init__(self, indent: str):
        self.lines: list[str] = []
        self.memo: dict[tuple[str, DimMap], str] = {}  # (value name, mapping) -> its variable
        self.indent = indent
        self.last_loc: tuple[str, int] | None = None  # (file, line) of the latest source comment

    def add(self, text: str):
        self.lines.append(self.indent + text)

    def mark(self, b):
        """A comment naming the user's line, when the next lines come from a new one."""
        p = getattr(b, "provenance", None)
        if p is None or (p.file, p.line) == self.last_loc:
            return
        self.last_loc = (p.file, p.line)
        self.add(f"# {p.source_comment()}")


class _Emitter:
    """Generates the module source for one stride signature (None: collect accesses only)."""

    def __init__(self, an: _Analysis, strides: list[tuple], runs: dict[str, list[_Run]] | None,
                 rid: str, sizes: KernelSizes):
        self.an = an
        self.strides = strides  # per input, per dim: an int, or an expression of the size arguments
        self.sizes = sizes  # how the kernel spells a size: a literal or an argument
        self.runs = runs  # group name -> [_Run]; None in the collecting dry run
        self.rid = rid
        self.accesses: list[tuple[int, ...]] = []  # domain-stride vectors of every load
        self.loads: list[tuple[int, str]] = []  # (id of the scope, input name) of every load: the passes
        self.helpers: set[str] = set()
        self.counter = itertools.count()
        self.alt_names: dict[tuple[str, DimMap], str] = {}
        # row-level values (one per row), visible everywhere once emitted
        self.rowmemo: dict[tuple[str, DimMap], str] = {}
        self.finished: set[str] = set()  # reductions whose results exist
        self.loop: _Scope | None = None
        self.prologue: _Scope | None = None
        self.rowscope: _Scope | None = None
        self.scalars: set[str] = set()  # variables that hold one element (a load at one address), not a block
        # a two-axis kernel's scope before its loop over row blocks: values that vary along a row
        # only (a norm's weight) are loaded there once a program, not once a row block
        self.colscope: _Scope | None = None

    # domain-stride vector of input `v` read through mapping M
    def dstrides(self, v, mapping) -> tuple[int, ...]:
        ds = [0] * self.an.n
        st = self.strides[self.an.input_index[v.name]]
        shape = self.an.shape(v)
        for i, d in enumerate(mapping):
            if d is not None and shape[i] != 1:
                ds[d] += st[i]
        return tuple(ds)

    def offset(self, ds) -> tuple[str, set[str]]:
        """(offset expression, which index bases it uses: subset of {"rows", "cols", "offs"})."""
        if self.runs is None:
            return "0", set()
        terms: list[str] = []
        used: set[str] = set()
        for group, runs in self.runs.items():
            if len(runs) > 1 and all(ds[a.dims[-1]] == ds[b.dims[-1]] * b.size for a, b in zip(runs, runs[1:])):
                # this access is dense over the whole group: index it by the flat index itself
                stride = ds[runs[-1].dims[-1]]
                if stride != 0:
                    terms.append(group if stride == 1 else f"{group} * {self.sizes.text(stride)}")
                    used.add(group)
                continue
            for r in runs:
                stride = ds[r.dims[-1]]
                if stride == 0:
                    continue
                terms.append(r.var if stride == 1 else f"{r.var} * {self.sizes.text(stride)}")
                used.add(group)
        return (" + ".join(terms) if terms else "0"), used

    def mask_for(self, used: set[str]) -> str | None:
        if not used:
            return None
        if not self.an.is_reduction:
            return "mask"
        if used == {"rows"}:
            return "row_mask"
        if used == {"cols"}:
            return "col_mask"
        return "mask"

    def var(self, v, mapping) -> str:
        canonical = None
        try:
            canonical = self.an.canonical(v)
        except Decline:
            pass
        if mapping == canonical:
            return _ident(v.name)
        key = (v.name, mapping)
        if key not in self.alt_names:
            self.alt_names[key] = f"{_ident(v.name)}_{next(self.counter)}"
        return self.alt_names[key]

    def is_row(self, mapping) -> bool:
        return self.an.is_reduction and all(d is None or d not in self.an.rdims for d in mapping)

    # scopes: set by the kernel writer
    def scope_for(self, v, mapping) -> tuple[_Scope, dict[tuple[str, DimMap], str]]:
        """(scope to write the value's line into, memo it is remembered in)."""
        if not self.an.is_reduction:
            assert self.loop is not None  # the pointwise writer sets it before emitting
            return self.loop, self.loop.memo
        if self.is_row(mapping):
            scope = self.prologue if self.an.pure[v.name] else self.rowscope
            assert scope is not None  # the reduction writer sets both before emitting
            return scope, self.rowmemo
        if self.colscope is not None and self.an.pure[v.name] and all(d is None or d in self.an.rdims
                                                                       for d in mapping):
            return self.colscope, self.colscope.memo
        if self.loop is None:
            raise Decline(f"internal: {v.name} is needed outside a pass over the row")
        return self.loop, self.loop.memo

    def val(self, x, mapping) -> str:
        if not isinstance(x, Value):
            # a number of a dynamic program (a SymFloat 1/N): an argument, or a literal if constant
            return self.sizes.text(x) if isinstance(x, (torch.SymInt, torch.SymFloat)) else _literal(x)
        shape = self.an.shape(x)
        mapping = tuple(None if (d is None or shape[i] == 1) else d for i, d in enumerate(mapping))
        scope, memo = self.scope_for(x, mapping)
        key = (x.name, mapping)
        if key in memo:
            return memo[key]
        name = self.var(x, mapping)
        if x.name in self.an.input_index:
            self.emit_load(x, mapping, name, scope)
        else:
            b = self.an.producer[x.name]
            if b.sym in REDUCTIONS:
                raise Decline(f"internal: reduction {x.name} requested before its pass")
            self.emit_op(b, x, mapping, name, scope)
        memo[key] = name
        return name

    def emit_load(self, v, mapping, name, scope):
        ds = self.dstrides(v, mapping)
        self.accesses.append(ds)
        self.loads.append((id(scope), v.name))
        off, used = self.offset(ds)
        mask = self.mask_for(used)
        ptr = f"{_ident(v.name)}_ptr"
        other = "0.0" if v.dtype in FLOATS else "0"
        args = f"{ptr} + {off}" if off != "0" else ptr
        if mask:
            args += f", mask={mask}, other={other}"
        conv = ".to(tl.float32)" if v.dtype in (torch.float16, torch.bfloat16) else ""
        desc = f"{v.name}: {_type_str(v)}"
        if mapping != tuple(range(len(mapping))) or len(mapping) != self.an.n:
            desc += f" read as dims {list(mapping)} of the domain"
        if off == "0":
            self.scalars.add(name)
        scope.add(f"{name} = tl.load({args}){conv}  # {desc}")

    def emit_op(self, b, out, mapping, name, scope):
        sym = b.sym
        comment = f"  # {sym.name}"
        if sym is prims.broadcast_in_dim:
            a, shape, bdims = b.args[0], b.args[1], b.args[2]
            ashape = self.an.shape(a)
            amap = tuple(mapping[bdims[i]] if ashape[i] != 1 else None for i in range(a.ndim))
            src = self.val(a, amap)
            if src in self.scalars:
                self.scalars.add(name)
            scope.mark(b)
            scope.add(f"{name} = {src}{comment}({a.name}, {list(symbolic.dims(shape))}, {list(bdims)})")
            return
        args = [x for x in b.args if not isinstance(x, torch.dtype)]
        operands = [self.val(x, mapping) for x in args]
        scalar = all(o in self.scalars for o, x in zip(operands, args) if isinstance(x, Value))
        operands = [self._as_eager(o, x, out.dtype) for o, x in zip(operands, args)]
        if sym in UNARY_EXPR:
            expr = UNARY_EXPR[sym].format(a=operands[0])
            for h in ("_fl_log1p", "_fl_expm1", "_fl_tanh", "_fl_round", "_fl_trunc"):
                if h in expr:
                    self.helpers.add(h)
            if sym is prims.logical_not or sym is prims.isnan:
                expr = f"({expr})"
        elif sym in BINARY_OP:
            a, c = operands
            if sym is prims.div and isinstance(b.args[0], Value) and b.args[0].dtype not in FLOATS:
                a = f"{a}.to(tl.float32)"
            if sym is prims.div and isinstance(b.args[1], Value) and b.args[1].dtype not in FLOATS:
                c = f"{c}.to(tl.float32)"
            op = BINARY_OP[sym]
            if out.dtype == torch.bool and sym in (prims.add, prims.mul):
                op = "|" if sym is prims.add else "&"  # torch's bool add is or, its mul and (int1 wraps)
            expr = f"{a} {op} {c}"
        elif sym is prims.maximum or sym is prims.minimum:
            fn = "tl.maximum" if sym is prims.maximum else "tl.minimum"
            nan = ", propagate_nan=tl.PropagateNan.ALL" if out.dtype in FLOATS else ""
            a, c = operands
            expr = f"{fn}({a}, {c}{nan})"
            if not isinstance(b.args[0], Value) or not isinstance(b.args[1], Value):
                # a python scalar operand: make it a tensor of the right type first
                lit_first = not isinstance(b.args[0], Value)
                t = _tl_compute(out.dtype)
                lit, ten = (a, c) if lit_first else (c, a)
                expr = f"{fn}({ten}, tl.full([1], {lit}, {t}){nan})"
        elif sym is prims.remainder:
            a, c = operands
            if out.dtype in FLOATS:
                # IEEE division (div_rn), as torch: an approximate quotient can land on the
                # wrong side of an integer and shift the result by a whole divisor
                expr = f"{a} - tl.floor(tl.div_rn({a}, {c})) * {c}"
            else:
                self.helpers.add("_fl_imod")
                expr = f"_fl_imod({a}, {c})"
        elif sym is prims.fmod:
            expr = "{} % {}".format(*operands)  # Triton's % is C's (frem, srem): fmod's sign
        elif sym is prims.pow:
            if symbolic.is_symbolic(b.args[1]):
                raise Decline("pow with an exponent that depends on a size is not generated for Triton")
            expr = _pow_expr(operands[0], b.args[1])
        elif sym is prims.where:
            c, a, d = operands
            expr = f"tl.where({c}, {a}, {d})"
        elif sym is prims.convert_element_type:
            src = b.args[0]
            expr = _convert(operands[0], src.dtype if isinstance(src, Value) else None, b.args[1])
            if "_fl_bf16" in expr:
                self.helpers.add("_fl_bf16")
        else:  # pragma: no cover - can_take filters these
            raise Decline(f"{sym.name} is not generated for Triton")
        if scalar:
            self.scalars.add(name)
        if scalar and out.dtype == torch.bool:
            # a scalar bool: Triton's interpreter labels a comparison with its operands' type, and
            # broadcasting it then makes floats (a & b fails); a select is labelled int1
            expr = f"tl.where({expr}, True, False)"
        shown = ", ".join(x.name if isinstance(x, Value) else format_arg(x) for x in b.args)
        scope.mark(b)
        scope.add(f"{name} = {expr}{comment}({shown})")


    def _as_eager(self, expr: str, x, dtype) -> str:
        """A 16-bit float operand, rounded to its type where the op leaves that type (a comparison,
        a convert to float32 or an integer): the float32 value kept through a chain of 16-bit ops
        is rounded at the store, and an op whose result is not stored in that type must read what
        eager's does (fuzz triton 6219: `t1 > t1.sum(0)` of float16 was True; 6499: sqrt of a
        bfloat16 times a float32 kept the unrounded root). A loaded value is exact already."""
        if not isinstance(x, Value) or x.dtype not in HALVES or x.dtype == dtype or x.name in self.an.input_index:
            return expr
        if x.dtype == torch.bfloat16:
            self.helpers.add("_fl_bf16")
            return f"_fl_bf16({expr})"
        return f"{expr}.to(tl.float16).to(tl.float32)"


HALVES = (torch.float16, torch.bfloat16)


def _type_str(v) -> str:
    return v.type_str().rsplit(" ", 1)[0]


def _tl_compute(dtype) -> str:
    return "tl.float32" if dtype in FLOATS else TL_DTYPE[dtype]


def _convert(a: str, src, dst) -> str:
    if dst in FLOATS:
        out = a if src in FLOATS else f"{a}.to(tl.float32)"
        if dst == torch.bfloat16 and src != dst:
            out = f"_fl_bf16({out})"  # round as torch does
        elif dst != torch.float32 and src != dst:
            out = f"{out}.to({TL_DTYPE[dst]}).to(tl.float32)"  # round as torch does
        return out
    if dst == torch.bool:
        return f"({a} != 0)"
    return f"{a}.to({TL_DTYPE[dst]})"


def _pow_expr(a: str, e) -> str:
    if isinstance(e, bool):
        e = int(e)
    if isinstance(e, float) and e.is_integer() and abs(e) <= 64:
        e = int(e)
    if isinstance(e, int) and abs(e) <= 64:
        if e == 0:
            return f"tl.where({a} == {a}, 1.0, 1.0)"
        n = abs(e)
        # repeated squaring, spelt out
        base, out = a, None
        while n:
            if n & 1:
                out = base if out is None else f"({out} * {base})"
            n >>= 1
            if n:
                base = f"({base} * {base})"
        assert out is not None  # n >= 1: the loop set it
        return out if e > 0 else f"1.0 / {out}"
    if e == 0.5:
        return f"tl.sqrt({a})"
    if e == -0.5:
        return f"tl.rsqrt({a})"
    return f"tl.exp2({_literal(float(e))} * tl.log2({a}))"
