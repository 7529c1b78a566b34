"""The FLOPs of library calls, which no prim describes: each function is given to `library`
as the `flops` of the symbols it counts, and takes the call's (args, kwargs, outputs) in the
trace. The formulas are docs/roofline.md's (2 FLOPs a multiply-add); fusionlens/middle/cost.py asks
a symbol for them.
"""

from __future__ import annotations

import math

from fusionlens.ir.trace import Value


def _arg(args: tuple, kwargs: dict, i: int, name: str, default=None):
    return args[i] if len(args) > i else kwargs.get(name, default)


def _out(outputs: list) -> int:
    return outputs[0].numel() if outputs else 0


def _contracted(second: Value) -> int:
    """K of a matmul whose second operand is `second` (torch.matmul's broadcasting rules)."""
    return second.shape[0] if second.ndim == 1 else second.shape[-2]


def matmul(args: tuple, kwargs: dict, outputs: list) -> float:
    """matmul, mm, bmm: 2 M N K (times the batch)."""
    return 2 * _out(outputs) * _contracted(args[1])


def rmatmul(args: tuple, kwargs: dict, outputs: list) -> float:
    """self.__rmatmul__(other) is other @ self."""
    return 2 * _out(outputs) * _contracted(args[0])


def addmm(args: tuple, kwargs: dict, outputs: list) -> float:
    """addmm, baddbmm: beta * input + alpha * (m1 @ m2), 2 M N K + M N."""
    out = _out(outputs)
    return 2 * out * _contracted(args[2]) + out


def linear(args: tuple, kwargs: dict, outputs: list) -> float:
    """2 M N K, + M N with a bias."""
    out = _out(outputs)
    weight, bias = _arg(args, kwargs, 1, "weight"), _arg(args, kwargs, 2, "bias")
    return 2 * out * weight.shape[-1] + (out if isinstance(bias, Value) else 0)


def einsum(args: tuple, kwargs: dict, outputs: list) -> float:
    """2 FLOPs for each combination of every index (one multiply-add) per pair of operands;
    a single operand only sums; an equation with `...`: 0."""
    equation = args[0] if args and isinstance(args[0], str) else None
    operands = [a for a in args[1:] for a in (a if isinstance(a, (list, tuple)) else [a])]
    operands = [a for a in operands if isinstance(a, Value)]
    if equation is None or not operands or "..." in equation:
        return 0
    sizes: dict[str, int] = {}
    for term, x in zip(equation.split("->")[0].replace(" ", "").split(","), operands):
        for letter, size in zip(term, x.shape):
            sizes[letter] = max(sizes.get(letter, 1), size)
    every = math.prod(sizes.values())
    return every if len(operands) == 1 else 2 * every * (len(operands) - 1)


def attention(args: tuple, kwargs: dict, outputs: list) -> float:
    """Q @ K^T and P @ V and the softmax between them (about 5 per score: max, subtract, exp,
    sum, divide); a causal mask skips the scores it hides."""
    q, k, v = (_arg(args, kwargs, i, n) for i, n in enumerate(("query", "key", "value")))
    L, E, S, Ev = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    scores = L * S
    if _arg(args, kwargs, 5, "is_causal", False):  # top-left aligned: query i sees keys 0..i
        m = min(L, S)
        scores = m * (m + 1) // 2 + (L - m) * S
    return math.prod(q.shape[:-2]) * scores * (2 * E + 2 * Ev + 5)


def _conv(args: tuple, kwargs: dict, outputs: list, points: int) -> float:
    weight, bias = _arg(args, kwargs, 1, "weight"), _arg(args, kwargs, 2, "bias")
    per_point = weight.numel() // weight.shape[0]  # C_in/groups * kernel (C_out/groups * kernel transposed)
    return 2 * points * per_point + (_out(outputs) if isinstance(bias, Value) else 0)


def convolution(args: tuple, kwargs: dict, outputs: list) -> float:
    """2 x output elements x (C_in / groups x kernel size), + output elements with a bias."""
    return _conv(args, kwargs, outputs, _out(outputs))


def transposed_convolution(args: tuple, kwargs: dict, outputs: list) -> float:
    """2 x input elements x (C_out / groups x kernel size), + output elements with a bias."""
    return _conv(args, kwargs, outputs, args[0].numel())
