"""The cost of a region: the bytes it must move and the FLOPs it computes (docs/roofline.md).

bytes: every input read once and every output written once (numel x itemsize), the least
traffic any kernel for it has; a region of views only (reshape, transpose, split: shape
prims) moves nothing. flops: per prim, per element of its output (elementwise, weighted for
transcendental functions) or of its input (reductions); library calls by their formulas
(matmul 2MNK, convolution, attention). math: which peak bounds the FLOPs, from the dtype.
"""

from __future__ import annotations

import math as _math
from typing import Optional

import torch

from compiler import passes
from compiler.ir import Value
from compiler.ops import prims as P
from compiler.ops.torch_ops.registry import LIBRARY
from compiler.report import Cost

# FLOPs per element of elementwise prims that are not one arithmetic op: about the FP32
# instructions a GPU's math library spends on them (exp = ex2 of a product, erf a polynomial).
# A convention to compare regions by, not a measurement.
TRANSCENDENTAL = {"exp": 2, "exp2": 1, "log": 2, "log2": 1, "log1p": 4, "expm1": 4, "sqrt": 1, "rsqrt": 1,
                  "reciprocal": 1, "sin": 2, "cos": 2, "tan": 4, "tanh": 4, "sigmoid": 4, "erf": 8, "pow": 4}
FREE = {"convert_element_type", "bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor", "logical_not"}
REDUCTION = {"var_mean": 4}  # per input element: sum for the mean, subtract, square, sum; others 1

_MATMULS = {"torch.matmul", "torch.mm", "torch.bmm", "torch.Tensor.__rmatmul__", "torch.addmm", "torch.baddbmm",
            "torch.nn.functional.linear", "torch.einsum"}
_ATTENTION = "torch.nn.functional.scaled_dot_product_attention"
_CONV = tuple(f"torch.nn.functional.conv{d}d" for d in (1, 2, 3))
_CONV_T = tuple(f"torch.nn.functional.conv_transpose{d}d" for d in (1, 2, 3))


def region_cost(bsyms, inputs, outputs) -> Cost:
    """The Cost of a region that runs `bsyms`, reading `inputs` and writing `outputs` (Values)."""
    leaves = passes.flatten(bsyms)
    views_only = bool(leaves) and all(b.sym.kind == "prim" and P.SHAPE in b.sym.tags for b in leaves)
    return Cost(0 if views_only else tensor_bytes(list(inputs) + list(outputs)),
                int(sum(flops(b) for b in leaves)), math_of(leaves))


def tensor_bytes(values) -> int:
    seen, total = set(), 0
    for v in values:
        if isinstance(v, Value) and v.name not in seen:
            seen.add(v.name)
            total += v.numel() * v.dtype.itemsize
    return total


def flops(b) -> float:
    """FLOPs of one leaf op (a prim or a library call; 0 for what only moves data)."""
    if b.sym.kind == "prim":
        short = b.sym.name.removeprefix("prims.")
        if P.ELEMENTWISE in b.sym.tags:
            weight = 0 if short in FREE else TRANSCENDENTAL.get(short, 1)
            return weight * b.outputs[0].numel()
        if P.REDUCTION in b.sym.tags:
            return REDUCTION.get(short, 1) * b.args[0].numel()
        return 0  # shapes, factories, gathers, cat: data movement
    if LIBRARY in b.sym.tags:
        try:
            return _library_flops(b)
        except (AttributeError, IndexError, TypeError, ZeroDivisionError):  # an unusual call: no count, no failure
            return 0
    return 0


def _arg(b, i: int, name: str, default=None):
    if len(b.args) > i:
        return b.args[i]
    return b.kwargs.get(name, default)


def _contracted(second: Value) -> int:
    """K of a matmul whose second operand is `second` (torch.matmul's broadcasting rules)."""
    return second.shape[0] if second.ndim == 1 else second.shape[-2]


def _library_flops(b) -> float:
    name, out = b.sym.name, b.outputs[0].numel() if b.outputs else 0
    if name in ("torch.matmul", "torch.mm", "torch.bmm"):
        return 2 * out * _contracted(b.args[1])
    if name == "torch.Tensor.__rmatmul__":  # self.__rmatmul__(other) is other @ self
        return 2 * out * _contracted(b.args[0])
    if name in ("torch.addmm", "torch.baddbmm"):  # beta * input + alpha * (m1 @ m2)
        return 2 * out * _contracted(b.args[2]) + out
    if name == "torch.nn.functional.linear":
        weight, bias = _arg(b, 1, "weight"), _arg(b, 2, "bias")
        return 2 * out * weight.shape[-1] + (out if isinstance(bias, Value) else 0)
    if name == "torch.einsum":
        return _einsum_flops(b)
    if name == _ATTENTION:
        return _attention_flops(b)
    if name in _CONV or name in _CONV_T:
        weight, bias = _arg(b, 1, "weight"), _arg(b, 2, "bias")
        per_point = weight.numel() // weight.shape[0]  # C_in/groups * kernel (C_out/groups * kernel transposed)
        points = out if name in _CONV else b.args[0].numel()
        return 2 * points * per_point + (out if isinstance(bias, Value) else 0)
    return 0  # embedding, pooling, FFT, ...: no formula here; their bytes still count


def _attention_flops(b) -> float:
    """Q @ K^T and P @ V (2 FLOPs a multiply-add) and the softmax between them (about 5 per
    score: max, subtract, exp, sum, divide); a causal mask skips the scores it hides."""
    q, k, v = _arg(b, 0, "query"), _arg(b, 1, "key"), _arg(b, 2, "value")
    L, E, S, Ev = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    scores = L * S
    if _arg(b, 5, "is_causal", False):  # top-left aligned: query i sees keys 0..i
        m = min(L, S)
        scores = m * (m + 1) // 2 + (L - m) * S
    return _math.prod(q.shape[:-2]) * scores * (2 * E + 2 * Ev + 5)


def _einsum_flops(b) -> float:
    """2 FLOPs for each combination of every index (one multiply-add) per pair of operands;
    a single operand only sums."""
    equation = b.args[0] if b.args and isinstance(b.args[0], str) else None
    operands = [a for a in b.args[1:] for a in (a if isinstance(a, (list, tuple)) else [a])]
    operands = [a for a in operands if isinstance(a, Value)]
    if equation is None or not operands or "..." in equation:
        return 0
    sizes = {}
    for term, x in zip(equation.split("->")[0].replace(" ", "").split(","), operands):
        for letter, size in zip(term, x.shape):
            sizes[letter] = max(sizes.get(letter, 1), size)
    every = _math.prod(sizes.values())
    return every if len(operands) == 1 else 2 * every * (len(operands) - 1)


def math_of(leaves) -> str:
    """The peak a region's FLOPs run at: a matmul, convolution or attention on tensor cores
    (BF16 and FP16 inputs at the BF16 peak, FP32 at TF32 where torch allows it), everything
    else on CUDA cores at FP32 (docs/roofline.md)."""
    for b in leaves:
        name = b.sym.name
        if LIBRARY not in b.sym.tags or not (name in _MATMULS or name == _ATTENTION or name in _CONV + _CONV_T):
            continue
        dtype = _first_tensor_dtype(b)
        if dtype in (torch.bfloat16, torch.float16):
            return "bf16"
        if dtype == torch.float32:
            tf32 = torch.backends.cudnn.allow_tf32 if name in _CONV + _CONV_T else \
                torch.get_float32_matmul_precision() != "highest"
            return "tf32" if tf32 else "fp32"
    return "fp32"


def _first_tensor_dtype(b) -> Optional[torch.dtype]:
    for a in list(b.args) + list(b.kwargs.values()):
        for x in (a if isinstance(a, (list, tuple)) else [a]):
            if isinstance(x, Value):
                return x.dtype
    return None
