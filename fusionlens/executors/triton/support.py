"""Whether the Triton executor can run here, and which prims and dtypes it generates.

On a CPU the kernels run under Triton's interpreter (numpy), switched on by
TRITON_INTERPRET=1. It must be set before triton is first imported (Triton decorates its
@jit standard library -- tl.sum, tl.max, tl.sigmoid -- at import) and while a generated
module is exec'd (Triton >= 3.4 reads it at each @triton.jit). `available()` says so when
triton was imported without it, and answers "no" on a CPU without the variable before
importing triton at all.
"""

from __future__ import annotations

import math
import os
import sys

import torch

from fusionlens.ir.trace import SymbolKind, Value, values_in
from fusionlens.ops import prims
from fusionlens.middle.reinplace import IN_PLACE_SCATTERS, STRIDED_SCATTER_

from . import polynomial, tuning

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

# The prims generated, by object. Unary prims map to their expression (a format string over
# {a}); binary operator prims to their Python operator.
UNARY_EXPR = {
    prims.abs: "tl.abs({a})", prims.neg: "-{a}", prims.exp: "tl.exp({a})", prims.exp2: "tl.exp2({a})",
    prims.log: "tl.log({a})", prims.log2: "tl.log2({a})", prims.log1p: "_fl_log1p({a})",
    prims.expm1: "_fl_expm1({a})", prims.sqrt: "tl.sqrt({a})", prims.rsqrt: "tl.rsqrt({a})",
    prims.sin: "tl.sin({a})", prims.cos: "tl.cos({a})", prims.tan: "tl.sin({a}) / tl.cos({a})",
    prims.tanh: "_fl_tanh({a})", prims.sigmoid: "tl.sigmoid({a})", prims.erf: "tl.erf({a})",
    prims.floor: "tl.floor({a})", prims.ceil: "tl.ceil({a})", prims.round: "_fl_round({a})",
    prims.trunc: "_fl_trunc({a})", prims.reciprocal: "1.0 / {a}", prims.logical_not: "{a} == 0",
    prims.bitwise_not: "~{a}", prims.isnan: "{a} != {a}",
    prims.sign: "tl.where({a} > 0, 1.0, tl.where({a} < 0, -1.0, 0.0))",  # sign(nan) = 0, as torch
}
FLOAT_ONLY_UNARY = {
    prims.exp, prims.exp2, prims.log, prims.log2, prims.log1p, prims.expm1, prims.sqrt, prims.rsqrt, prims.sin,
    prims.cos, prims.tan, prims.tanh, prims.sigmoid, prims.erf, prims.floor, prims.ceil, prims.round, prims.trunc,
    prims.reciprocal, prims.sign,
}
BINARY_OP = {
    prims.add: "+", prims.sub: "-", prims.mul: "*", prims.div: "/", prims.eq: "==", prims.ne: "!=",
    prims.lt: "<", prims.le: "<=", prims.gt: ">", prims.ge: ">=", prims.bitwise_and: "&",
    prims.bitwise_or: "|", prims.bitwise_xor: "^",
}
OTHER_ELEMENTWISE = {prims.remainder, prims.fmod, prims.maximum, prims.minimum, prims.pow, prims.where,
                     prims.convert_element_type}
REDUCTIONS = {prims.sum, prims.amax, prims.amin, prims.prod, prims.var_mean}


# --- availability -----------------------------------------------------------------------------

def _triton_imports() -> str | None:
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception as e:  # pragma: no cover - depends on the machine
        return f"triton does not import ({type(e).__name__}: {e})"
    return None


def _interpreter_problem() -> str | None:
    """With TRITON_INTERPRET=1, triton must have been imported with it set: its @jit standard
    library (tl.sum, tl.max, tl.sigmoid, ...) is decorated at import time."""
    tl_mod = sys.modules.get("triton.language")
    std = getattr(getattr(tl_mod, "standard", None), "sum", None)
    if std is not None and type(std).__name__ == "JITFunction":
        return ("triton was imported before TRITON_INTERPRET=1 was set, so its standard library is not "
                "interpreted; set TRITON_INTERPRET=1 in the environment before starting Python")
    return None


def available(device) -> tuple[bool, str]:
    """(ok, why not) for running generated kernels on `device`."""
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


# --- op support -------------------------------------------------------------------------------

def _dtype_problem(dtype: torch.dtype) -> str | None:
    if dtype == torch.float64:
        return "float64"
    if dtype.is_complex:
        return "complex"
    if dtype not in TL_DTYPE:
        return f"{str(dtype).removeprefix('torch.')} is not generated for Triton"
    return None


def can_take(bsym) -> str | None:
    """None when the prim can join a Triton region; else why not."""
    sym = bsym.sym
    if sym.kind is not SymbolKind.PRIM:
        return f"{sym.name} is not a prim"
    for v in values_in((bsym.args, bsym.kwargs)) + list(bsym.outputs):
        problem = _dtype_problem(v.dtype)
        if problem:
            return problem
    if prims.ELEMENTWISE in sym.tags:
        if sym in UNARY_EXPR or sym in BINARY_OP or sym in OTHER_ELEMENTWISE:
            return _elementwise_problem(bsym)
        return f"{sym.name} is not generated for Triton"
    if sym is prims.broadcast_in_dim:
        return None
    if sym in prims.SCATTERS or sym in IN_PLACE_SCATTERS:
        return _scatter_problem(bsym)
    if sym in REDUCTIONS:
        src = bsym.args[0]
        if src.dtype == torch.bool and sym is not prims.sum:
            return f"{sym.name} of bool is not generated for Triton"
        if sym is prims.var_mean and src.dtype not in FLOATS:
            return f"{sym.name} of {str(src.dtype).removeprefix('torch.')} is not generated for Triton"
        return None
    return f"{sym.name} is not generated for Triton"


def _scatter_problem(bsym) -> str | None:
    """A scatter is a store into the base's addresses: its window must be known when the kernel
    is written (a dynamic program's symbolic offsets are not generated yet)."""
    if bsym.sym is prims.strided_scatter or bsym.sym is STRIDED_SCATTER_:
        offset, strides = bsym.args[2], bsym.args[3]
        if type(offset) is not int or not all(type(s) is int for s in strides):
            return "a window at symbolic offsets is not generated for Triton"
    if not all(type(s) is int for s in bsym.args[0].shape):
        return "a scatter into a base of symbolic size is not generated for Triton"
    return None


def _elementwise_problem(bsym) -> str | None:
    sym = bsym.sym
    out = bsym.outputs[0]
    operands = [a for a in bsym.args if isinstance(a, Value)]
    if sym in FLOAT_ONLY_UNARY and operands and operands[0].dtype not in FLOATS:
        return f"{sym.name} of {str(operands[0].dtype).removeprefix('torch.')} is not generated for Triton"
    if sym is prims.div and out.dtype not in FLOATS:
        return "integer division is not generated for Triton"
    if sym is prims.pow:
        if isinstance(bsym.args[1], Value):
            return f"{sym.name} with a tensor exponent is not generated for Triton"
        if out.dtype not in FLOATS:
            return f"integer {sym.name} is not generated for Triton"
    return None


def takes_columns(domain: tuple, rdims: tuple[int, ...], cdims: tuple[int, ...], bsyms: list) -> str | None:
    """None when Triton writes these ops as one two-axis kernel pair (two_axis.py): a static
    domain, column reductions that are float sums, rows of any length (longer than
    tuning.TWO_AXIS_MAX_ROW the row kernel loops over chunks of them); rows that long and too few
    to give every SM's program TWO_AXIS_FILL_ROWS of them are tiled by column blocks instead
    (two_axis_tiles.py), where each row reduction sums a tile at a time (polynomial.py); else why not."""
    if not all(type(d) is int for d in domain):
        return "a two-axis region of symbolic size is not generated for Triton"
    for b in bsyms:
        if b.sym in REDUCTIONS and tuple(sorted(b.args[1])) == tuple(cdims):
            if b.sym is not prims.sum or b.args[0].dtype not in FLOATS:
                return f"a column {b.sym.name} of {b.args[0].dtype} is not generated for Triton (float sums only)"
    ncols = math.prod(domain[d] for d in rdims)
    nrows = math.prod(domain[d] for d in cdims)
    if ncols > tuning.TWO_AXIS_MAX_ROW and nrows < tuning.TWO_AXIS_FILL_ROWS * tuning.SM_COUNT:
        problem = polynomial.tile_problem(bsyms, domain, rdims, cdims)
        if problem:
            return (f"{nrows} rows of {ncols} elements, too few for a program an SM, are tiled by column blocks, "
                    f"but {problem}; the column sums are a split region of their own")
    return None
