"""The triton executor: turns a FusionGroup into readable @triton.jit kernels and a launcher.

What it generates (see compiler/fusion.py for the FusionGroup contract):

- pointwise groups: one kernel over the group's domain flattened into a 1-D index space.
  Each input is read through its own strides (stride 0 where a broadcast_in_dim spreads
  it), never copied; adjacent dims are coalesced where every access allows it, so a
  contiguous input is read with a plain `offs`. Tails are masked.
- reduction groups: one kernel, one program per block of rows (a row = one index of the
  kept dims, its elements = the reduced dims flattened). When a row fits in one register
  block (MAX_SINGLE_PASS elements) the whole region is straight-line code on a
  [BLOCK_M, BLOCK_N] tile. Otherwise it loops over each row in BLOCK_N chunks, one loop per
  pass: a pass computes every reduction whose inputs are available; softmax's
  amax-then-sum(exp(x - max)) runs as one online pass (running max, rescaled sum), and
  var_mean as one Welford pass (per-chunk mean and M2 combined with Chan's formula); a
  final pass recomputes and stores the full-shape outputs.
- float16/bfloat16/float32 values are loaded, computed and accumulated in float32 and cast
  back at the store; integer and bool values keep their types. float64 and complex are
  declined.

Kernels take the domain sizes and the input strides as literals: the generated source is
specialised to one stride signature. `Generated.source` is the variant for contiguous
inputs; the launcher (`Generated.fn`) generates and caches another variant the first time
it sees other strides (transposed or sliced inputs), and Triton caches the compiled
binaries. `Generated.specs` describes each kernel for an ahead-of-time
`triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))` check (see
tests/test_triton_hopper.py).

On a CPU the kernels run under Triton's interpreter (numpy), switched on by
TRITON_INTERPRET=1. It must be set before triton is first imported (Triton decorates its
@jit standard library -- tl.sum, tl.max, tl.sigmoid -- at import) and while a generated
module is exec'd (Triton >= 3.4 reads it at each @triton.jit). `available()` says so when
triton was imported without it. Each distinct generated module is exec'd once per process
(`load_source`), so identical regions share their compiled kernels.

Numerics: float16/bfloat16 are computed in float32 with one rounding at the store, plus
the roundings the program asks for (convert_element_type to a 16-bit type rounds there);
amax/amin propagate NaN as torch does; remainder uses an IEEE quotient (div_rn); tanh,
expm1, log1p, round and trunc are small helpers over stable tl functions (libdevice is not
used: the interpreter does not run it).
"""

from __future__ import annotations

import itertools
import keyword
import re
import math
import os
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
from torch.utils import _pytree as pytree

from compiler.fusion import Decline, FusionGroup

# Tuning knobs (module attributes so tests and benchmarks can lower or raise them).
# Largest row (reduced elements) kept in registers in one pass. At 16384 float32 elements
# and 32 warps (16 per thread) the sm_90 cubins of softmax / LayerNorm / residual+LayerNorm
# use 32-58 registers and spill nothing (cuobjdump); at 32768 they start to use stack.
MAX_SINGLE_PASS = 16384
LOOP_BLOCK_N = 2048  # chunk of a row per loop iteration when the row does not fit
POINTWISE_BLOCK = 1024
ONE_PROGRAM_LIMIT = 1 << 16  # a full reduction (one row) larger than this is left to torch

_INT32_LIMIT = 2**31 - 1

TL_DTYPE = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16", torch.int8: "tl.int8",
    torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}
PTR_TYPE = {
    torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.int64: "*i64",
    torch.int32: "*i32", torch.int16: "*i16", torch.int8: "*i8", torch.uint8: "*u8", torch.bool: "*i1",
}
FLOATS = (torch.float32, torch.float16, torch.bfloat16)

UNARY_EXPR = {
    "abs": "tl.abs({a})", "neg": "-{a}", "exp": "tl.exp({a})", "exp2": "tl.exp2({a})",
    "log": "tl.log({a})", "log2": "tl.log2({a})", "log1p": "_fl_log1p({a})", "expm1": "_fl_expm1({a})",
    "sqrt": "tl.sqrt({a})", "rsqrt": "tl.rsqrt({a})", "sin": "tl.sin({a})", "cos": "tl.cos({a})",
    "tan": "tl.sin({a}) / tl.cos({a})", "tanh": "_fl_tanh({a})", "sigmoid": "tl.sigmoid({a})",
    "erf": "tl.erf({a})", "floor": "tl.floor({a})", "ceil": "tl.ceil({a})", "round": "_fl_round({a})",
    "trunc": "_fl_trunc({a})", "reciprocal": "1.0 / {a}", "logical_not": "{a} == 0",
    "bitwise_not": "~{a}", "isnan": "{a} != {a}",
    "sign": "tl.where({a} > 0, 1.0, tl.where({a} < 0, -1.0, 0.0))",  # sign(nan) = 0, as torch
}
FLOAT_ONLY_UNARY = {"exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan",
                    "tanh", "sigmoid", "erf", "floor", "ceil", "round", "trunc", "reciprocal", "sign"}
BINARY_OP = {"add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
             "gt": ">", "ge": ">=", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
OTHER_ELEMENTWISE = {"remainder", "maximum", "minimum", "pow", "where", "convert_element_type"}
REDUCTIONS = {"sum", "amax", "amin", "prod", "var_mean"}

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
    # round half to even, as torch.round
    r = tl.floor(x + 0.5)
    odd = (r - 2.0 * tl.floor(r * 0.5)) != 0.0
    return tl.where(((r - x) == 0.5) & odd, r - 1.0, r)
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
}
HELPER_DEPS: dict = {}


# --- availability and op support ------------------------------------------------------------

def _triton_imports() -> Optional[str]:
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception as e:  # pragma: no cover - depends on the machine
        return f"triton does not import ({type(e).__name__}: {e})"
    return None


def _interpreter_problem() -> Optional[str]:
    """With TRITON_INTERPRET=1, triton must have been imported with it set: its @jit standard
    library (tl.sum, tl.max, tl.sigmoid, ...) is decorated at import time."""
    import sys

    tl_mod = sys.modules.get("triton.language")
    std = getattr(getattr(tl_mod, "standard", None), "sum", None)
    if std is not None and type(std).__name__ == "JITFunction":
        return ("triton was imported before TRITON_INTERPRET=1 was set, so its standard library is not "
                "interpreted; set TRITON_INTERPRET=1 in the environment before starting Python")
    return None


def _values(bsym) -> list:
    from compiler.ir import values_in

    return values_in((bsym.args, bsym.kwargs)) + list(bsym.outputs)


def _dtype_problem(dtype: torch.dtype) -> Optional[str]:
    if dtype == torch.float64:
        return "float64"
    if dtype.is_complex:
        return "complex"
    if dtype not in TL_DTYPE:
        return f"{str(dtype).removeprefix('torch.')} is not generated for Triton"
    return None


class TritonExecutor:
    name = "triton"
    fuses = True

    def generate(self, group: FusionGroup, device=None) -> "Generated":
        return generate(group, device)

    def definition_source(self, group: FusionGroup) -> str:
        """The code this executor would run for `group` (contiguous inputs), without running
        or even importing triton: for reports on machines where the executor is unavailable."""
        return source_only(group)

    def available(self, device) -> tuple:
        device = torch.device(device)
        if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            # answered before importing triton, which costs most of a second
            return False, ("no CUDA device; set TRITON_INTERPRET=1 (before triton is imported) to run "
                           "Triton's interpreter on the CPU")
        problem = _triton_imports()
        if device.type == "cuda":
            if problem:
                return False, problem
            return True, ""
        if problem:
            return False, problem
        problem = _interpreter_problem()
        if problem:
            return False, problem
        try:
            import numpy  # noqa: F401
        except Exception as e:  # pragma: no cover
            return False, f"Triton's interpreter needs numpy, which does not import ({e})"
        return True, ""

    def can_take(self, bsym) -> Optional[str]:
        sym = bsym.sym
        if sym.kind != "prim":
            return f"{sym.name} is not a prim"
        short = sym.name.removeprefix("prims.")
        for v in _values(bsym):
            problem = _dtype_problem(v.dtype)
            if problem:
                return problem
        if "elementwise" in sym.tags:
            if short in UNARY_EXPR or short in BINARY_OP or short in OTHER_ELEMENTWISE:
                return _elementwise_problem(short, bsym)
            return f"{sym.name} is not generated for Triton"
        if short == "broadcast_in_dim":
            return None
        if short in REDUCTIONS:
            src = bsym.args[0]
            if src.dtype == torch.bool and short != "sum":
                return f"{sym.name} of bool is not generated for Triton"
            if short in ("var_mean",) and src.dtype not in FLOATS:
                return f"{sym.name} of {str(src.dtype).removeprefix('torch.')} is not generated for Triton"
            return None
        return f"{sym.name} is not generated for Triton"


def _elementwise_problem(short: str, bsym) -> Optional[str]:
    from compiler.ir import Value

    out = bsym.outputs[0]
    operands = [a for a in bsym.args if isinstance(a, Value)]
    if short in FLOAT_ONLY_UNARY and operands and operands[0].dtype not in FLOATS:
        return f"prims.{short} of {str(operands[0].dtype).removeprefix('torch.')} is not generated for Triton"
    if short == "div" and out.dtype not in FLOATS:
        return "integer division is not generated for Triton"
    if short == "pow":
        if isinstance(bsym.args[1], Value):
            return "prims.pow with a tensor exponent is not generated for Triton"
        if out.dtype not in FLOATS:
            return "integer prims.pow is not generated for Triton"
    return None


# --- the generated artefact -----------------------------------------------------------------

@dataclass
class Generated:
    source: str  # the generated module (kernels + launcher) for contiguous inputs
    fn: Callable  # launcher: group inputs (tensors, in order) -> tuple of fresh outputs
    kernels: int  # kernel launches per call
    eager_fn: Callable  # the same prims run one by one with torch
    specs: list = field(default_factory=list)  # [KernelSpec] of the contiguous variant
    variants: dict = field(default_factory=dict)  # stride signature -> source, filled as seen
    default_key: tuple = ()  # the stride signature of contiguous inputs
    last_key: Optional[tuple] = None  # the stride signature of the latest call
    interpreted: bool = False  # generated under TRITON_INTERPRET=1

    def report_code(self) -> str:
        """The source of the variant that ran last (the contiguous one before any call)."""
        key = self.default_key if self.last_key is None else self.last_key
        return self.variants.get(key, self.source)

    def status(self) -> str:
        """One line for a report; empty when there is nothing to say."""
        parts = []
        if self.interpreted:
            parts.append("ran by Triton's interpreter on the CPU (numpy): checks the kernel, not its speed")
        if self.last_key is not None and self.last_key != self.default_key:
            parts.append("generated for the strides of its non-contiguous inputs")
        return "; ".join(parts)


@dataclass
class KernelSpec:
    """What an ahead-of-time compile of one kernel needs (triton.compile with ASTSource)."""

    name: str
    signature: dict  # arg name -> "*fp32" | "constexpr" ...
    constexprs: dict  # arg name -> value
    num_warps: int


# --- analysis (independent of strides) ------------------------------------------------------

def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _literal(x) -> str:
    if isinstance(x, bool):
        return "True" if x else "False"
    if isinstance(x, float):
        if math.isnan(x):
            return 'float("nan")'
        if math.isinf(x):
            return 'float("inf")' if x > 0 else 'float("-inf")'
        return repr(x)
    if isinstance(x, int):
        return repr(x)
    raise Decline(f"a constant of type {type(x).__name__} ({x!r}) is not generated for Triton")


_RESERVED = set(keyword.kwlist) | {
    "tl", "triton", "torch", "pid", "offs", "mask", "rows", "cols", "row_mask", "col_mask", "start",
    "float", "int", "range", "min", "max", "abs", "sum", "len", "print", "BLOCK", "BLOCK_M", "BLOCK_N",
    "grid", "math", "True", "False", "None",
}


def _ident(name: str) -> str:
    clean = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    if not clean or clean[0].isdigit():
        clean = "v_" + clean
    if (clean in _RESERVED or clean.startswith(("_fl_", "acc_", "on_", "wf_", "r_", "c_", "i_", "fl_"))
            or re.fullmatch(r"out\d+(_ptr)?", clean) or clean.endswith("_ptr")):
        clean = "v_" + clean
    return clean


class _Analysis:
    """What a group computes, independent of the strides it is called with."""

    def __init__(self, group: FusionGroup):
        from compiler.ir import Value

        self.group = group
        self.domain = tuple(int(s) for s in group.domain)
        self.n = len(self.domain)
        self.rdims = tuple(sorted(int(d) % max(self.n, 1) for d in group.reduction_dims))
        self.kept = tuple(d for d in range(self.n) if d not in self.rdims)
        self.reduced_shape = tuple(self.domain[d] for d in self.kept)
        self.keepdim_shape = tuple(1 if d in self.rdims else s for d, s in enumerate(self.domain))
        self.is_reduction = bool(self.rdims)
        self.inputs = list(group.inputs)
        self.outputs = list(group.outputs)
        self.input_index = {v.name: i for i, v in enumerate(self.inputs)}
        self.producer = {}
        self.values = {v.name: v for v in self.inputs}
        for b in group.bsyms:
            for o in b.outputs:
                self.producer[o.name] = b
                self.values[o.name] = o
        devices = sorted({str(v.device) for v in self.inputs + self.outputs})
        if len(devices) > 1:
            raise Decline(f"the region's tensors are on different devices ({', '.join(devices)}); "
                          "one kernel reads one device")
        if math.prod(self.domain) == 0:
            raise Decline("the region is empty (a zero-size dimension); torch runs it")
        for b in group.bsyms:
            reason = EXECUTOR.can_take(b)
            if reason:
                raise Decline(reason)
        for v in self.inputs + self.outputs:
            problem = _dtype_problem(v.dtype)
            if problem:
                raise Decline(problem)
        for o in self.outputs:
            if o.name not in self.producer and o.name not in self.input_index:
                raise Decline(f"output {o.name} is not computed in the region")
        # A value is "pure" when no reduction is upstream: it can be computed anywhere.
        self.pure = {v.name: True for v in self.inputs}
        self.reductions = []
        for b in group.bsyms:
            ins = [a for a in pytree.tree_leaves((b.args, b.kwargs)) if isinstance(a, Value)]
            for a in ins:
                if a.name not in self.values:
                    raise Decline(f"{b.sym.name} reads {a.name}, which is neither an input nor computed here")
            is_red = b.sym.name.removeprefix("prims.") in REDUCTIONS
            if is_red:
                self.reductions.append(b)
                src = b.args[0]
                dims = tuple(sorted(int(d) for d in b.args[1]))
                if tuple(src.shape) != self.domain or dims != self.rdims:
                    raise Decline(f"{b.sym.name} over dims {dims} of {list(src.shape)} does not match the "
                                  f"region's reduction over {self.rdims} of {list(self.domain)}")
            p = not is_red and all(self.pure.get(a.name, True) for a in ins)
            for o in b.outputs:
                self.pure[o.name] = p
        if self.reductions and not self.is_reduction:
            raise Decline("the region has reductions but no reduction dims")
        # rows and their elements
        self.nrows = math.prod(self.reduced_shape) if self.is_reduction else 1
        self.ncols = math.prod(self.domain[d] for d in self.rdims) if self.is_reduction else 1
        if self.is_reduction and self.nrows == 1 and self.ncols > ONE_PROGRAM_LIMIT:
            raise Decline(f"a reduction of all {self.ncols} elements to one value would run on one program; "
                          "torch runs it")
        for o in self.outputs:
            if self.level_shape(o) is None:
                raise Decline(f"output {o.name} has shape {list(o.shape)}, neither the region's domain "
                              f"{list(self.domain)} nor its reduced shape")
        self._passes()

    def level_shape(self, v) -> Optional[str]:
        s = tuple(v.shape)
        if s == self.domain:
            if self.is_reduction and not self.pure.get(v.name, True) and s == self.keepdim_shape:
                return "row"
            return "full"
        if self.is_reduction and s in (self.reduced_shape, self.keepdim_shape):
            return "row"
        return None

    def canonical(self, v) -> tuple:
        """The mapping (value dim -> domain dim or None) of a full or row-level value."""
        s = tuple(v.shape)
        kind = self.level_shape(v)
        if kind is None:
            raise Decline(f"{v.name} has shape {list(s)}, neither the region's domain {list(self.domain)} "
                          "nor its reduced shape")
        if kind == "full" and s == self.domain:
            m = tuple(range(self.n))
        elif s == self.keepdim_shape:
            m = tuple(None if d in self.rdims else d for d in range(self.n))
        else:
            m = self.kept
        return tuple(None if v.shape[i] == 1 else d for i, d in enumerate(m))

    def _passes(self):
        """Assign each reduction to a pass over the rows; find online softmax pairs."""
        self.pass_of = {}  # reduction output name -> pass
        self.online = {}  # sum bsym id -> amax bsym (sum(exp(A - bcast(amax(A))))
        level = {v.name: 0 for v in self.inputs}
        from compiler.ir import Value

        for b in self.group.bsyms:
            ins = [a for a in pytree.tree_leaves((b.args, b.kwargs)) if isinstance(a, Value)]
            base = max((level[a.name] for a in ins), default=0)
            short = b.sym.name.removeprefix("prims.")
            if short in REDUCTIONS:
                p = base
                partner = self._online_partner(b) if short == "sum" else None
                if partner is not None and self.pass_of[partner.outputs[0].name] == base - 1:
                    p = base - 1
                    self.online[id(b)] = partner
                for o in b.outputs:
                    self.pass_of[o.name] = p
                    level[o.name] = p + 1
            else:
                for o in b.outputs:
                    level[o.name] = base
        self.npasses = 1 + max(self.pass_of.values(), default=-1)

    def _follow_broadcasts(self, v):
        while True:
            b = self.producer.get(getattr(v, "name", None))
            if b is None or b.sym.name != "prims.broadcast_in_dim":
                return v
            v = b.args[0]

    def _online_partner(self, b):
        from compiler.ir import Value

        e = b.args[0]
        eb = self.producer.get(e.name)
        if eb is None or eb.sym.name != "prims.exp":
            return None
        s = eb.args[0]
        sb = self.producer.get(s.name) if isinstance(s, Value) else None
        if sb is None or sb.sym.name != "prims.sub" or not all(isinstance(a, Value) for a in sb.args[:2]):
            return None
        a, mb = sb.args[0], sb.args[1]
        m = self._follow_broadcasts(mb)
        rb = self.producer.get(m.name)
        if rb is None or rb.sym.name != "prims.amax" or rb.args[0].name != a.name:
            return None
        if a.dtype not in FLOATS:
            return None
        return rb


# --- emission (one stride signature) --------------------------------------------------------

@dataclass
class _Run:
    dims: list
    size: int
    var: str


class _Scope:
    def __init__(self, indent: str):
        self.lines: list = []
        self.memo: dict = {}
        self.indent = indent
        self.last_loc = None

    def add(self, text: str):
        self.lines.append(self.indent + text)

    def mark(self, b):
        """A comment naming the user's line, when the next lines come from a new one."""
        p = getattr(b, "provenance", None)
        if p is None or (p.file, p.line) == self.last_loc:
            return
        self.last_loc = (p.file, p.line)
        try:
            from compiler.ir import display_path

            text = p.source()
        except Exception:  # pragma: no cover - a file that went away
            return
        self.add(f"# {display_path(p.file)}:{p.line}  {text}")


class _Emitter:
    """Generates the module source for one stride signature (None: collect accesses only)."""

    def __init__(self, an: _Analysis, strides: list, runs: Optional[dict], rid: str):
        self.an = an
        self.strides = strides
        self.runs = runs  # group name -> [_Run]; None in the collecting dry run
        self.rid = rid
        self.accesses: list = []  # domain-stride vectors of every load
        self.helpers: set = set()
        self.counter = itertools.count()
        self.alt_names: dict = {}
        self.rowmemo: dict = {}  # row-level values (one per row), visible everywhere once emitted
        self.finished: set = set()  # reductions whose results exist
        self.loop = self.prologue = self.rowscope = None

    # domain-stride vector of input `v` read through mapping M
    def dstrides(self, v, mapping) -> tuple:
        ds = [0] * self.an.n
        st = self.strides[self.an.input_index[v.name]]
        for i, d in enumerate(mapping):
            if d is not None and v.shape[i] != 1:
                ds[d] += st[i]
        return tuple(ds)

    def offset(self, ds) -> tuple:
        """(offset expression, which index bases it uses: subset of {"rows", "cols", "offs"})."""
        if self.runs is None:
            return "0", set()
        terms, used = [], set()
        for group, runs in self.runs.items():
            if len(runs) > 1 and all(ds[a.dims[-1]] == ds[b.dims[-1]] * b.size for a, b in zip(runs, runs[1:])):
                # this access is dense over the whole group: index it by the flat index itself
                stride = ds[runs[-1].dims[-1]]
                if stride:
                    terms.append(group if stride == 1 else f"{group} * {stride}")
                    used.add(group)
                continue
            for r in runs:
                stride = ds[r.dims[-1]]
                if stride == 0:
                    continue
                terms.append(r.var if stride == 1 else f"{r.var} * {stride}")
                used.add(group)
        return (" + ".join(terms) if terms else "0"), used

    def mask_for(self, used: set) -> Optional[str]:
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
    def scope_for(self, v, mapping) -> tuple:
        """(scope to write the value's line into, memo it is remembered in)."""
        if not self.an.is_reduction:
            return self.loop, self.loop.memo
        if self.is_row(mapping):
            return (self.prologue if self.an.pure[v.name] else self.rowscope), self.rowmemo
        if self.loop is None:
            raise Decline(f"internal: {v.name} is needed outside a pass over the row")
        return self.loop, self.loop.memo

    def val(self, x, mapping) -> str:
        from compiler.ir import Value

        if not isinstance(x, Value):
            return _literal(x)
        mapping = tuple(None if (d is None or x.shape[i] == 1) else d for i, d in enumerate(mapping))
        scope, memo = self.scope_for(x, mapping)
        key = (x.name, mapping)
        if key in memo:
            return memo[key]
        name = self.var(x, mapping)
        if x.name in self.an.input_index:
            self.emit_load(x, mapping, name, scope)
        else:
            b = self.an.producer[x.name]
            short = b.sym.name.removeprefix("prims.")
            if short in REDUCTIONS:
                raise Decline(f"internal: reduction {x.name} requested before its pass")
            self.emit_op(b, short, x, mapping, name, scope)
        memo[key] = name
        return name

    def emit_load(self, v, mapping, name, scope):
        ds = self.dstrides(v, mapping)
        self.accesses.append(ds)
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
        scope.add(f"{name} = tl.load({args}){conv}  # {desc}")

    def emit_op(self, b, short, out, mapping, name, scope):
        from compiler.ir import Value

        comment = f"  # prims.{short}"
        if short == "broadcast_in_dim":
            a, shape, bdims = b.args[0], b.args[1], b.args[2]
            amap = tuple(mapping[bdims[i]] if a.shape[i] != 1 else None for i in range(a.ndim))
            src = self.val(a, amap)
            scope.mark(b)
            scope.add(f"{name} = {src}{comment}({a.name}, {list(shape)}, {list(bdims)})")
            return
        operands = [self.val(x, mapping) for x in b.args if not isinstance(x, torch.dtype)]
        if short in UNARY_EXPR:
            expr = UNARY_EXPR[short].format(a=operands[0])
            for h in ("_fl_log1p", "_fl_expm1", "_fl_tanh", "_fl_round", "_fl_trunc"):
                if h in expr:
                    self.helpers.add(h)
            if short in ("logical_not", "isnan"):
                expr = f"({expr})"
        elif short in BINARY_OP:
            a, c = operands
            if short == "div" and isinstance(b.args[0], Value) and b.args[0].dtype not in FLOATS:
                a = f"{a}.to(tl.float32)"
            if short == "div" and isinstance(b.args[1], Value) and b.args[1].dtype not in FLOATS:
                c = f"{c}.to(tl.float32)"
            expr = f"{a} {BINARY_OP[short]} {c}"
        elif short in ("maximum", "minimum"):
            fn = "tl.maximum" if short == "maximum" else "tl.minimum"
            nan = ", propagate_nan=tl.PropagateNan.ALL" if out.dtype in FLOATS else ""
            a, c = operands
            expr = f"{fn}({a}, {c}{nan})"
            if not isinstance(b.args[0], Value) or not isinstance(b.args[1], Value):
                # a python scalar operand: make it a tensor of the right type first
                lit_first = not isinstance(b.args[0], Value)
                t = _tl_compute(out.dtype)
                lit, ten = (a, c) if lit_first else (c, a)
                expr = f"{fn}({ten}, tl.full([1], {lit}, {t}){nan})"
        elif short == "remainder":
            a, c = operands
            if out.dtype in FLOATS:
                # IEEE division (div_rn), as torch: an approximate quotient can land on the
                # wrong side of an integer and shift the result by a whole divisor
                expr = f"{a} - tl.floor(tl.div_rn({a}, {c})) * {c}"
            else:
                self.helpers.add("_fl_imod")
                expr = f"_fl_imod({a}, {c})"
        elif short == "pow":
            expr = _pow_expr(operands[0], b.args[1])
        elif short == "where":
            c, a, d = operands
            expr = f"tl.where({c}, {a}, {d})"
        elif short == "convert_element_type":
            src = b.args[0]
            expr = _convert(operands[0], src.dtype if isinstance(src, Value) else None, b.args[1])
        else:  # pragma: no cover - can_take filters these
            raise Decline(f"prims.{short} is not generated for Triton")
        shown = ", ".join(x.name if isinstance(x, Value) else format_small(x) for x in b.args)
        scope.mark(b)
        scope.add(f"{name} = {expr}{comment}({shown})")


def format_small(x) -> str:
    from compiler.ir import format_arg

    return format_arg(x)


def _type_str(v) -> str:
    return v.type_str().rsplit(" ", 1)[0]


def _tl_compute(dtype) -> str:
    return "tl.float32" if dtype in FLOATS else TL_DTYPE[dtype]


def _convert(a: str, src, dst) -> str:
    if dst in FLOATS:
        out = a if src in FLOATS else f"{a}.to(tl.float32)"
        if dst != torch.float32 and src != dst:
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
        return out if e > 0 else f"1.0 / {out}"
    if e == 0.5:
        return f"tl.sqrt({a})"
    if e == -0.5:
        return f"tl.rsqrt({a})"
    return f"tl.exp2({_literal(float(e))} * tl.log2({a}))"


# --- kernel writers -------------------------------------------------------------------------

def _pick_pointwise(numel: int) -> tuple:
    block = min(POINTWISE_BLOCK, _next_pow2(numel))
    block = max(block, 16)
    warps = 4 if block >= 512 else (2 if block >= 128 else 1)
    if numel >= (1 << 22) and POINTWISE_BLOCK >= 1024:
        block, warps = 2 * POINTWISE_BLOCK, 8
    return block, warps


def _pick_reduction(an: _Analysis, rows_contiguous: bool) -> tuple:
    """(BLOCK_M, BLOCK_N, looped, num_warps)."""
    ncols, nrows = an.ncols, an.nrows
    single = ncols <= MAX_SINGLE_PASS
    if rows_contiguous:
        # the reduced dims are not the innermost: neighbouring rows are neighbouring addresses
        bm = min(_next_pow2(nrows), 64)
        bn = min(_next_pow2(ncols), max(4096 // bm, 8)) if single else min(LOOP_BLOCK_N, max(4096 // bm, 8))
        single = ncols <= bn
    else:
        bn = _next_pow2(ncols) if single else _next_pow2(LOOP_BLOCK_N)
        bm = min(_next_pow2(nrows), max(1, 2048 // bn), 64) if single else 1
    tile = bm * bn
    warps = (1 if tile <= 128 else 2 if tile <= 512 else 4 if tile <= 2048 else 8 if tile <= 4096 else
             16 if tile <= 8192 else 32)
    return bm, bn, not single, warps


class _Writer:
    def __init__(self, an: _Analysis, strides: list, rid: str):
        self.an = an
        self.strides = [tuple(int(x) for x in s) for s in strides]
        self.rid = rid
        self.kname = f"{rid}_kernel"

    def out_ds(self, o) -> tuple:
        # full outputs are contiguous in the domain
        ds, acc = [0] * self.an.n, 1
        for d in reversed(range(self.an.n)):
            ds[d] = acc if self.an.domain[d] != 1 else 0
            acc *= self.an.domain[d]
        return tuple(ds)

    def make_runs(self, accesses: list) -> dict:
        an = self.an
        groups = {"rows": list(an.kept), "cols": list(an.rdims)} if an.is_reduction else {"offs": list(range(an.n))}
        prefix = {"rows": "r_", "cols": "c_", "offs": "i_"}
        runs = {}
        for g, dims in groups.items():
            dims = [d for d in dims if an.domain[d] != 1]
            merged: list = []
            for d in dims:
                if merged and all(ds[merged[-1][-1]] == ds[d] * an.domain[d] for ds in accesses):
                    merged[-1].append(d)
                else:
                    merged.append([d])
            runs[g] = [_Run(m, math.prod(an.domain[d] for d in m), f"{prefix[g]}{k}") for k, m in enumerate(merged)]
        return runs

    def index_lines(self, group: str, runs: list) -> list:
        out = []
        for k, r in enumerate(runs):
            inner = math.prod(x.size for x in runs[k + 1:])
            if len(runs) == 1:
                expr = group
            elif k == 0:
                expr = f"{group} // {inner}"
            elif inner == 1:
                expr = f"{group} % {r.size}"
            else:
                expr = f"({group} // {inner}) % {r.size}"
            out.append(f"{r.var} = {expr}  # domain dims {r.dims}")
        return out

    def needs_int64(self) -> bool:
        an = self.an
        worst = math.prod(an.domain)
        for v, st in zip(an.inputs, self.strides):
            worst = max(worst, sum((s - 1) * abs(x) for s, x in zip(v.shape, st)) + 1)
        return worst >= _INT32_LIMIT - POINTWISE_BLOCK * 4

    def write(self) -> tuple:
        """(kernel source, launcher source, spec, kernel constexprs, grid, helpers)."""
        # dry run to learn every access, then coalesce dims against all of them
        dry = _Emitter(self.an, self.strides, None, self.rid)
        self._body(dry)
        accesses = dry.accesses + [self.out_ds(o) for o in self.an.outputs if self.an.level_shape(o) == "full"]
        runs = self.make_runs(accesses)
        em = _Emitter(self.an, self.strides, runs, self.rid)
        lines = self._body(em)
        return lines, em.helpers, runs

    # one body writer for both kinds; returns the kernel's lines
    def _body(self, em: _Emitter) -> list:
        return self._pointwise(em) if not self.an.is_reduction else self._reduction(em)

    def _signature(self) -> list:
        an = self.an
        args = [f"{_ident(v.name)}_ptr" for v in an.inputs]
        args += [f"out{k}_ptr" for k in range(len(an.outputs))]
        return args

    def _pointwise(self, em: _Emitter) -> list:
        an = self.an
        numel = math.prod(an.domain)
        self.block, self.warps = _pick_pointwise(numel)
        int64 = self.needs_int64()
        body = _Scope("    ")
        em.loop, em.prologue, em.rowscope = body, body, body
        outs = []
        for k, o in enumerate(an.outputs):
            outs.append((k, o, em.val(o, an.canonical(o))))
        head = [
            f"pid = tl.program_id(0){'.to(tl.int64)' if int64 else ''}",
            "offs = pid * BLOCK + tl.arange(0, BLOCK)",
            f"mask = offs < {numel}",
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
        self.grid = (math.ceil(numel / self.block),)
        return lines

    def _reduction(self, em: _Emitter) -> list:
        an = self.an
        # is the innermost non-trivial domain dim a kept dim? then rows are contiguous
        nontrivial = [d for d in range(an.n) if an.domain[d] != 1]
        rows_contiguous = bool(nontrivial) and nontrivial[-1] in an.kept
        bm, bn, looped, warps = _pick_reduction(an, rows_contiguous)
        self.bm, self.bn, self.looped, self.warps = bm, bn, looped, warps
        int64 = self.needs_int64()
        cast64 = ".to(tl.int64)" if int64 else ""
        prologue = _Scope("    ")
        rowscope = _Scope("    ")
        em.prologue = prologue
        em.rowscope = rowscope
        em.loop = None
        head = [
            f"pid = tl.program_id(0){cast64}",
            "rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]  # [BLOCK_M, 1]: one row = one index of "
            f"the kept dims {list(an.kept)}",
            f"row_mask = rows < {an.nrows}",
        ]
        if em.runs is not None:
            head += self.index_lines("rows", em.runs["rows"])
        col_index = lambda base: (  # noqa: E731
            [f"cols = {base}tl.arange(0, BLOCK_N)[None, :]{cast64}  # [1, BLOCK_N]: elements of the "
             f"reduced dims {list(an.rdims)}",
             f"col_mask = cols < {an.ncols}",
             "mask = row_mask & col_mask"]
            + (self.index_lines("cols", em.runs["cols"]) if em.runs is not None else []))
        full_outs = [(k, o) for k, o in enumerate(an.outputs) if an.level_shape(o) == "full"]
        row_outs = [(k, o) for k, o in enumerate(an.outputs) if an.level_shape(o) == "row"]
        stored = set()

        def flush_rows():
            # every non-pure row-level value whose reductions are done, and row outputs ready
            for b in an.group.bsyms:
                short = b.sym.name.removeprefix("prims.")
                if short in REDUCTIONS:
                    continue
                for o in b.outputs:
                    if an.pure[o.name] or an.level_shape(o) != "row":
                        continue
                    if self._ready(o, em):
                        em.val(o, an.canonical(o))
            for k, o in row_outs:
                if k in stored:
                    continue
                if an.pure[o.name] or self._ready(o, em):
                    v = em.val(o, an.canonical(o))
                    em.rowscope.add(f"tl.store(out{k}_ptr + rows, {_store_cast(v, o)}, mask=row_mask)  # {o.name}: "
                                 f"{_type_str(o)}")
                    stored.add(k)

        if not looped:
            body = _Scope("    ")
            em.loop = body
            em.rowscope = body
            em.prologue = body
            for line in col_index(""):
                body.add(line)
            for b in an.group.bsyms:
                short = b.sym.name.removeprefix("prims.")
                if short in REDUCTIONS:
                    self._single_reduction(em, b, short, body)
            flush_rows()
            for k, o in full_outs:
                v = em.val(o, an.canonical(o))
                off, _ = em.offset(self.out_ds(o))
                off = "rows + cols" if off == "0" else off
                body.add(f"tl.store(out{k}_ptr + {off}, {_store_cast(v, o)}, mask=mask)  # {o.name}: {_type_str(o)}")
            for k, o in row_outs:
                if k not in stored:
                    v = em.val(o, an.canonical(o))
                    body.add(f"tl.store(out{k}_ptr + rows, {_store_cast(v, o)}, mask=row_mask)  # {o.name}")
            lines = ["    " + h for h in head] + body.lines
        else:
            # pieces: lines or scopes, joined at the end (a scope may still grow: a row value
            # first needed in a later pass is written after the pass that made it possible)
            pieces: list = [prologue, rowscope]
            for p in range(an.npasses):
                reds = [b for b in an.reductions if an.pass_of[b.outputs[0].name] == p]
                init = _Scope("    ")
                loop = _Scope("        ")
                fin = _Scope("    ")
                em.loop = loop
                for line in col_index("start + "):
                    loop.add(line)
                online_amax = {id(an.online[id(x)]) for x in reds if id(x) in an.online}
                for b in reds:
                    if id(b) in online_amax:
                        continue  # an amax computed with its online sum
                    self._looped_reduction(em, b, b.sym.name.removeprefix("prims."), init, loop, fin)
                em.loop = None
                title = ", ".join(f"prims.{b.sym.name.removeprefix('prims.')} -> " + "/".join(o.name for o in b.outputs)
                                  for b in reds)
                pieces += [f"    # pass {p + 1} over the row: {title}", init,
                           f"    for start in range(0, {an.ncols}, BLOCK_N):", loop, fin]
                em.rowscope = _Scope("    ")
                pieces.append(em.rowscope)
                flush_rows()
            if full_outs:
                loop = _Scope("        ")
                em.loop = loop
                for line in col_index("start + "):
                    loop.add(line)
                for k, o in full_outs:
                    v = em.val(o, an.canonical(o))
                    off, _ = em.offset(self.out_ds(o))
                    off = "rows + cols" if off == "0" else off
                    loop.add(f"tl.store(out{k}_ptr + {off}, {_store_cast(v, o)}, mask=mask)  # {o.name}: "
                             f"{_type_str(o)}")
                em.loop = None
                pieces += [f"    # pass {an.npasses + 1} over the row: the full-shape outputs",
                           f"    for start in range(0, {an.ncols}, BLOCK_N):", loop]
            for k, o in row_outs:
                if k not in stored:
                    raise Decline(f"internal: row output {o.name} was never ready")
            lines = ["    " + h for h in head]
            for piece in pieces:
                lines += piece.lines if isinstance(piece, _Scope) else [piece]
        self.constexprs = {"BLOCK_M": bm, "BLOCK_N": bn}
        self.grid = (math.ceil(an.nrows / bm),)
        return lines

    def _ready(self, v, em) -> bool:
        """Are all reductions upstream of v finished (in the row memo)?"""
        from compiler.ir import Value

        an = self.an
        seen = set()
        stack = [v]
        while stack:
            x = stack.pop()
            if x.name in seen or x.name in an.input_index:
                continue
            seen.add(x.name)
            b = an.producer[x.name]
            if b.sym.name.removeprefix("prims.") in REDUCTIONS:
                if x.name not in em.finished:
                    return False
                continue
            stack.extend(a for a in pytree.tree_leaves((b.args, b.kwargs)) if isinstance(a, Value))
        return True

    # reductions -----------------------------------------------------------------------------
    def _register(self, em, out, varname):
        em.rowmemo[(out.name, self.an.canonical(out))] = varname
        em.finished.add(out.name)

    def _single_reduction(self, em, b, short, body):
        an = self.an
        src = b.args[0]
        x = em.val(src, tuple(range(an.n)))
        outs = b.outputs
        body.mark(b)
        if short == "var_mean":
            var_o, mean_o, mv, vv, denom, corr = _var_mean_names(b, an.ncols)
            body.add(f"{mv} = tl.sum(tl.where(mask, {x}, 0.0), axis=1)[:, None] / {float(an.ncols)!r}  "
                     f"# prims.var_mean({src.name}): mean")
            body.add(f"{vv}_d = tl.where(mask, {x} - {mv}, 0.0)")
            body.add(f"{vv} = tl.sum({vv}_d * {vv}_d, axis=1)[:, None] / {denom!r}  "
                     f"# prims.var_mean({src.name}, correction={corr}): var")
            self._register(em, mean_o, mv)
            self._register(em, var_o, vv)
            return
        o = outs[0]
        name = _ident(o.name)
        ident, _ = _identity(short, o.dtype)
        xv = x if o.dtype in FLOATS or src.dtype == o.dtype else f"{x}.to({TL_DTYPE[o.dtype]})"
        red = _reduce_expr(short, o.dtype, em)
        body.add(f"{name} = {red.format(v=f'tl.where(mask, {xv}, {ident})')}[:, None]  # prims.{short}({src.name}, "
                 f"{list(an.rdims)})")
        self._register(em, o, name)

    def _looped_reduction(self, em, b, short, init, loop, fin):
        an = self.an
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
            init.add(f"on_{m} = tl.full([BLOCK_M, 1], float(\"-inf\"), tl.float32)  # running max")
            init.add(f"on_{s} = tl.zeros([BLOCK_M, 1], tl.float32)  # running sum of exp(x - running max)")
            em.helpers.add("_fl_max")
            loop.add(f"on_{m}_new = tl.maximum(on_{m}, tl.reduce(tl.where(mask, {a}, float(\"-inf\")), 1, _fl_max)[:, None], "
                     "propagate_nan=tl.PropagateNan.ALL)")
            loop.add(f"on_{m}_scale = tl.where(on_{m}_new == float(\"-inf\"), 0.0, tl.exp(on_{m} - on_{m}_new))")
            loop.add(f"on_{s} = on_{s} * on_{m}_scale + tl.sum(tl.where(mask, tl.exp({a} - on_{m}_new), 0.0), "
                     "axis=1)[:, None]")
            loop.add(f"on_{m} = on_{m}_new")
            fin.add(f"{m} = on_{m}  # prims.amax({mb.args[0].name}) (online)")
            fin.add(f"{s} = on_{s}  # prims.sum(exp({mb.args[0].name} - max)) (online softmax)")
            self._register(em, m_o, m)
            self._register(em, s_o, s)
            return
        x = em.val(src, full)
        loop.mark(b)
        fin.mark(b)
        if short == "var_mean":
            var_o, mean_o, mv, vv, denom, corr = _var_mean_names(b, an.ncols)
            w = f"wf_{mv}"
            init.add(f"{w}_n = tl.zeros([BLOCK_M, 1], tl.float32)  # Welford: count, mean, M2 per row")
            init.add(f"{w}_mean = tl.zeros([BLOCK_M, 1], tl.float32)")
            init.add(f"{w}_m2 = tl.zeros([BLOCK_M, 1], tl.float32)")
            loop.add(f"{w}_cn = tl.sum(tl.where(mask, 1.0, 0.0), axis=1)[:, None]")
            loop.add(f"{w}_cmean = tl.sum(tl.where(mask, {x}, 0.0), axis=1)[:, None] / tl.maximum({w}_cn, 1.0)")
            loop.add(f"{w}_d = tl.where(mask, {x} - {w}_cmean, 0.0)")
            loop.add(f"{w}_cm2 = tl.sum({w}_d * {w}_d, axis=1)[:, None]")
            loop.add(f"{w}_nn = {w}_n + {w}_cn  # Chan et al.: combine the chunk into the running state")
            loop.add(f"{w}_delta = {w}_cmean - {w}_mean")
            loop.add(f"{w}_frac = {w}_cn / tl.maximum({w}_nn, 1.0)")
            loop.add(f"{w}_mean = {w}_mean + {w}_delta * {w}_frac")
            loop.add(f"{w}_m2 = {w}_m2 + {w}_cm2 + {w}_delta * {w}_delta * {w}_n * {w}_frac")
            loop.add(f"{w}_n = {w}_nn")
            fin.add(f"{mv} = {w}_mean  # prims.var_mean({src.name}): mean (Welford)")
            fin.add(f"{vv} = {w}_m2 / {denom!r}  # prims.var_mean({src.name}, "
                    f"correction={corr}): var")
            self._register(em, mean_o, mv)
            self._register(em, var_o, vv)
            return
        o = outs[0]
        name = _ident(o.name)
        ident, acc_t = _identity(short, o.dtype)
        xv = x if o.dtype in FLOATS or src.dtype == o.dtype else f"{x}.to({TL_DTYPE[o.dtype]})"
        acc = f"acc_{name}"
        init.add(f"{acc} = tl.full([BLOCK_M, BLOCK_N], {ident}, {acc_t})")
        masked = f"tl.where(mask, {xv}, {ident})"
        nan = ", propagate_nan=tl.PropagateNan.ALL" if o.dtype in FLOATS else ""
        step = {"sum": f"{acc} + {masked}", "prod": f"{acc} * {masked}",
                "amax": f"tl.maximum({acc}, {masked}{nan})", "amin": f"tl.minimum({acc}, {masked}{nan})"}[short]
        loop.add(f"{acc} = {step}")
        red = _reduce_expr(short, o.dtype, em)
        fin.add(f"{name} = {red.format(v=acc)}[:, None]  # prims.{short}({src.name}, {list(an.rdims)})")
        self._register(em, o, name)


def _reduce_expr(short: str, dtype, em) -> str:
    """The row reduction of a [BLOCK_M, BLOCK_N] tile (a format string over {v})."""
    if short == "sum":
        return "tl.sum({v}, axis=1)"
    if short == "prod":
        em.helpers.add("_fl_mul")
        return "tl.reduce({v}, 1, _fl_mul)"
    if dtype in FLOATS:  # torch.amax/amin propagate NaN; tl.max/tl.min do not
        helper = "_fl_max" if short == "amax" else "_fl_min"
        em.helpers.add(helper)
        return f"tl.reduce({{v}}, 1, {helper})"
    return "tl.max({v}, axis=1)" if short == "amax" else "tl.min({v}, axis=1)"


def _identity(short: str, dtype) -> tuple:
    acc_t = "tl.float32" if dtype in FLOATS else ("tl.int64" if dtype == torch.int64 else TL_DTYPE[dtype])
    if dtype in FLOATS:
        ident = {"sum": "0.0", "prod": "1.0", "amax": 'float("-inf")', "amin": 'float("inf")'}[short]
    else:
        info = torch.iinfo(dtype) if dtype != torch.bool else None
        ident = {"sum": "0", "prod": "1", "amax": str(info.min) if info else "0",
                 "amin": str(info.max) if info else "1"}[short]
    return ident, acc_t


def _store_cast(v: str, o) -> str:
    if o.dtype == torch.float32:
        return v
    return f"({v}).to({TL_DTYPE[o.dtype]})"


# --- module assembly and the launcher -------------------------------------------------------

def _contiguous_strides(shape) -> tuple:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def _stride_key(shape, stride) -> tuple:
    return tuple(0 if s == 1 else int(x) for s, x in zip(shape, stride))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}es" if word.endswith("s") else f"{n} {word}s"


def _region_ident(rid: str) -> str:
    return "fl_" + _ident(str(rid)).removeprefix("v_")


def build_source(group: FusionGroup, an: _Analysis, strides: list) -> tuple:
    """(source, kernel name, launcher name, KernelSpec)."""
    rid = _region_ident(group.id)
    w = _Writer(an, strides, rid)
    lines, helpers, runs = w.write()
    for h in list(helpers):
        helpers.update(HELPER_DEPS.get(h, []))
    kname = f"{rid}_kernel"
    lname = f"{rid}_launch"
    args = w._signature()
    const_names = list(w.constexprs)
    out = [f"# FusionLens · Triton code for region {group.id}"]
    if an.is_reduction:
        passes = "one pass in registers" if not w.looped else (
            f"{_plural(an.npasses + (1 if any(an.level_shape(o) == 'full' for o in an.outputs) else 0), 'pass')} "
            f"over each row in chunks of {w.bn}")
        out.append(f"# kind: reduction over dims {list(an.rdims)} of {list(an.domain)}: {an.nrows} rows of "
                   f"{an.ncols} elements, {passes}")
    else:
        out.append(f"# kind: pointwise over {list(an.domain)} ({math.prod(an.domain)} elements)")
    if group.source_lines:
        out.append("# from:")
        for s in group.source_lines:
            out.append(f"#   {s}")
    out.append("# inputs: " + "; ".join(f"{v.name}: {_type_str(v)} strides {tuple(st)}"
                                        for v, st in zip(an.inputs, strides)))
    out.append("# outputs: " + "; ".join(f"{o.name}: {_type_str(o)}" for o in an.outputs))
    out += ["import torch", "import triton", "import triton.language as tl", "", ""]
    for h in ("_fl_expm1", "_fl_log1p", "_fl_tanh", "_fl_round", "_fl_trunc", "_fl_imod", "_fl_mul", "_fl_max",
              "_fl_min"):
        if h in helpers:
            out += HELPERS[h].rstrip("\n").split("\n") + ["", ""]
    out.append("@triton.jit")
    out.append(f"def {kname}({', '.join(args + [c + ': tl.constexpr' for c in const_names])}):")
    out += lines
    out += ["", ""]
    dev = f"{_ident(an.inputs[0].name)}.device" if an.inputs else "torch.device('cuda')"
    largs = [_ident(v.name) for v in an.inputs]
    out.append(f"def {lname}({', '.join(largs)}):")
    for k, o in enumerate(an.outputs):
        out.append(f"    out{k} = torch.empty({tuple(o.shape)!r}, dtype={o.dtype}, device={dev})  # {o.name}")
    consts = ", ".join(f"{c}={v}" for c, v in w.constexprs.items())
    call_args = ", ".join(largs + [f"out{k}" for k in range(len(an.outputs))])
    out.append(f"    {kname}[{w.grid!r}]({call_args}, {consts}, num_warps={w.warps})")
    ret = ", ".join(f"out{k}" for k in range(len(an.outputs)))
    out.append(f"    return ({ret},)" if len(an.outputs) == 1 else f"    return ({ret})")
    source = "\n".join(out) + "\n"
    sig = {}
    for v, a in zip(an.inputs, args):
        sig[a] = PTR_TYPE[v.dtype]
    for k, o in enumerate(an.outputs):
        sig[f"out{k}_ptr"] = PTR_TYPE[o.dtype]
    for c in const_names:
        sig[c] = "constexpr"
    spec = KernelSpec(kname, sig, dict(w.constexprs), w.warps)
    return source, kname, lname, spec


_module_ids = itertools.count()
_MODULES: dict = {}  # (source, interpreted?) -> namespace: identical regions share compiled kernels
_MODULES_LOCK = threading.Lock()


def load_source(source: str, launcher: str, label: str) -> Callable:
    """Exec a generated module once per distinct source; returns the object named `launcher`
    (or a kernel). The source is registered with linecache so tracebacks and Triton (which
    reads the kernel's source) see it."""
    key = (source, os.environ.get("TRITON_INTERPRET") == "1")
    with _MODULES_LOCK:
        namespace = _MODULES.get(key)
        if namespace is None:
            namespace = _MODULES[key] = _exec_source(source, label)
    return namespace[launcher]


def _exec_source(source: str, label: str) -> dict:
    import linecache

    import triton  # noqa: F401  (imported here: TRITON_INTERPRET must be set before this)

    filename = f"<fusionlens-triton {label} #{next(_module_ids)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": f"fusionlens_triton_{label}", "__file__": filename}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def _var_mean_names(b, ncols: int) -> tuple:
    """(var value, mean value, mean name, var name, variance divisor, correction)."""
    var_o, mean_o = b.outputs
    corr = b.args[2] if len(b.args) > 2 else b.kwargs.get("correction", 1)
    return var_o, mean_o, _ident(mean_o.name), _ident(var_o.name), float(max(ncols - corr, 0)), corr


def _eager(group: FusionGroup) -> Callable:
    from compiler.ir import ops_callable

    return ops_callable(group.bsyms, group.inputs, group.outputs)


def source_only(group: FusionGroup) -> str:
    try:
        an = _Analysis(group)
        default = [_stride_key(v.shape, _contiguous_strides(v.shape)) for v in an.inputs]
        return build_source(group, an, default)[0]
    except Decline as e:
        return f"# Triton would decline region {group.id}: {e}\n"
    except Exception as e:  # pragma: no cover - a generator gap
        return f"# Triton code generation failed for region {group.id}: {type(e).__name__}: {e}\n"


def generate(group: FusionGroup, device=None) -> Generated:
    try:
        an = _Analysis(group)
        default = [_stride_key(v.shape, _contiguous_strides(v.shape)) for v in an.inputs]
        source, kname, lname, spec = build_source(group, an, default)
    except Decline:
        raise
    except Exception as e:  # a gap in the generator must not break the program: torch runs it
        raise Decline(f"internal error in the Triton generator ({type(e).__name__}: {e})") from e
    label = _region_ident(group.id)
    variants = {tuple(default): source}
    launchers = {tuple(default): load_source(source, lname, label)}
    lock = threading.Lock()
    shapes = [tuple(v.shape) for v in an.inputs]
    dtypes = [v.dtype for v in an.inputs]

    gen = Generated(source, None, 1, _eager(group), [spec], variants, tuple(default),
                    interpreted=os.environ.get("TRITON_INTERPRET") == "1")

    def launch(*tensors):
        if len(tensors) != len(shapes):
            raise TypeError(f"region {group.id} takes {len(shapes)} tensors, got {len(tensors)}")
        key = tuple(_stride_key(s, t.stride()) for s, t in zip(shapes, tensors))
        gen.last_key = key
        fn = launchers.get(key)
        if fn is None:
            for t, s, d, v in zip(tensors, shapes, dtypes, an.inputs):
                if tuple(t.shape) != s or t.dtype != d:
                    raise TypeError(f"region {group.id}: {v.name} was compiled for {d}{list(s)}, got "
                                    f"{t.dtype}{list(t.shape)}")
            with lock:
                src, _, name, _ = build_source(group, an, list(key))
                fn = launchers[key] = load_source(src, name, label)
                variants[key] = src
        return fn(*tensors)

    if gen.interpreted:
        import numpy

        def launch_quietly(*tensors):
            # the interpreter evaluates masked-off lanes and inf/nan on purpose (exp -> inf in
            # tanh, log(0) in masked lanes): numpy's floating-point warnings are noise here
            with numpy.errstate(all="ignore"):
                return launch(*tensors)

        gen.fn = launch_quietly
    else:
        gen.fn = launch
    return gen


EXECUTOR = TritonExecutor()
