"""The cost of a region: the bytes it must move and the FLOPs it computes (docs/roofline.md).

bytes: every input read once and every output written once (numel x itemsize), the least
traffic any kernel for it has; a region of views only (reshape, transpose, split: shape
prims) moves nothing. A scatter's region (a view update's write-back) writes a new base, its
base read and its result written whole, as the executors run it (a copy, then the window); an
in-place one (middle/reinplace.py) writes its window into the base, which it does not read.
flops: per prim, per element of its output (elementwise, weighted for transcendental
functions) or of its input (reductions); a library call by the formula its symbol was
registered with (ops/torch_ops/flops.py: matmul 2MNK, convolution, attention).
math: which peak bounds the FLOPs, from the dtype and the call's MATMUL / CONVOLUTION tag.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fusionlens.middle import passes
from fusionlens.middle.reinplace import IN_PLACE, window_of
from fusionlens.ir.trace import OpTag, Symbol, SymbolKind, Value
from fusionlens.ir.sizes import hint
from fusionlens.ops import prims as P

# FLOPs per element of elementwise prims that are not one arithmetic op: about the FP32
# instructions a GPU's math library spends on them (exp = ex2 of a product, erf a polynomial).
# A convention to compare regions by, not a measurement.
TRANSCENDENTAL: dict[Symbol, int] = {
    P.exp: 2, P.exp2: 1, P.log: 2, P.log2: 1, P.log1p: 4, P.expm1: 4, P.sqrt: 1, P.rsqrt: 1, P.reciprocal: 1,
    P.sin: 2, P.cos: 2, P.tan: 4, P.tanh: 4, P.sigmoid: 4, P.erf: 8, P.pow: 4}
FREE = {P.convert_element_type, P.bitwise_not, P.bitwise_and, P.bitwise_or, P.bitwise_xor, P.logical_not}
REDUCTION: dict[Symbol, int] = {P.var_mean: 4}  # per input element: sum for the mean, subtract, square, sum; others 1
_TENSOR_CORES = {OpTag.MATMUL, OpTag.CONVOLUTION}


@dataclass(frozen=True)
class Cost:
    """The least a region must do; fusionlens/driver/wire.py makes the report's Cost of it."""

    bytes: int  # every input read once and every output written once
    flops: int  # counted per prim; library calls by their own formulas
    math: str = "fp32"  # which peak bounds its FLOPs: a fusionlens.report.roofline math ("fp32", "tf32", "bf16")


def region_cost(bsyms, inputs, outputs) -> Cost:
    """The Cost of a region that runs `bsyms`, reading `inputs` and writing `outputs` (Values)."""
    leaves = passes.flatten(bsyms)
    views_only = bool(leaves) and all(b.sym.kind is SymbolKind.PRIM and OpTag.SHAPE in b.sym.tags for b in leaves)
    moved = 0 if views_only else tensor_bytes(list(inputs) + list(outputs)) - _in_place_saving(bsyms)
    return Cost(moved, int(hint(sum(flops(b) for b in leaves))), math_of(leaves))


def _in_place_saving(bsyms) -> int:
    """The bytes tensor_bytes counts for each in-place scatter beyond its window: its base, as
    an input (where no other op reads it) and as its result, each whole."""
    saved = 0
    for b in bsyms:
        window = window_of(b) if b.sym in IN_PLACE else None
        if window is None:
            continue
        base, result = b.args[0], b.outputs[0]
        read = any(v.name == base.name for c in bsyms if c is not b for v in c.inputs())
        saved += tensor_bytes([result]) - window.numel() * result.dtype.itemsize
        saved += 0 if read else tensor_bytes([base])
    return saved


def tensor_bytes(values) -> int:
    seen, total = set(), 0
    for v in values:
        if isinstance(v, Value) and v.name not in seen:
            seen.add(v.name)
            total += v.numel() * v.dtype.itemsize
    return int(hint(total))  # a dynamic program's: at the example's sizes


def flops(b) -> float:
    """FLOPs of one leaf op (a prim or a library call; 0 for what only moves data)."""
    if b.sym.kind is SymbolKind.PRIM:
        if OpTag.ELEMENTWISE in b.sym.tags:
            weight = 0 if b.sym in FREE else TRANSCENDENTAL.get(b.sym, 1)
            return weight * b.outputs[0].numel()
        if OpTag.REDUCTION in b.sym.tags:
            return REDUCTION.get(b.sym, 1) * b.args[0].numel()
        return 0  # shapes, factories, gathers, cat: data movement
    if OpTag.LIBRARY_CALL in b.sym.tags and b.sym.flops is not None:  # its formula, given at registration
        try:
            return b.sym.flops(b.args, b.kwargs, b.outputs)
        except (AttributeError, IndexError, TypeError, ZeroDivisionError):  # an unusual call: no count, no failure
            return 0
    return 0  # embedding, pooling, FFT, ...: no formula; their bytes still count


def math_of(leaves) -> str:
    """The peak a region's FLOPs run at: a matmul, convolution or attention on tensor cores
    (BF16 and FP16 inputs at the BF16 peak, FP32 at TF32 where torch allows it), everything
    else on CUDA cores at FP32 (docs/roofline.md)."""
    for b in leaves:
        if OpTag.LIBRARY_CALL not in b.sym.tags or not b.sym.tags & _TENSOR_CORES:
            continue
        dtype = _first_tensor_dtype(b)
        if dtype in (torch.bfloat16, torch.float16):
            return "bf16"
        if dtype == torch.float32:
            tf32 = torch.backends.cudnn.allow_tf32 if OpTag.CONVOLUTION in b.sym.tags else \
                torch.get_float32_matmul_precision() != "highest"
            return "tf32" if tf32 else "fp32"
    return "fp32"


def _first_tensor_dtype(b) -> torch.dtype | None:
    for a in list(b.args) + list(b.kwargs.values()):
        for x in (a if isinstance(a, (list, tuple)) else [a]):
            if isinstance(x, Value):
                return x.dtype
    return None
