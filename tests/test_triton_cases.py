"""Functions the Triton generator is checked on: each one becomes one FusionGroup.

(No tests here; it lives in tests/ so that the traced lines are user lines: the compiler
does not attribute ops to its own package.) Shared by tests/test_triton.py (differential tests under the interpreter or on a GPU),
tests/test_triton_hopper.py (sm_90 compiles of every kernel) and benchmarks/bench_fusion.py.
`make(device, dtype, scale)` builds fresh random inputs; scale=1 is the small test size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

LOW = (torch.float16, torch.bfloat16)


@dataclass
class Case:
    name: str
    fn: Callable
    make: Callable  # (device, dtype) -> tuple of tensors
    dtypes: tuple = (torch.float32,)


def _r(*shape, device, dtype, scale=1.0):
    return (scale * torch.randn(*shape, device=device, dtype=torch.float32)).to(dtype)


# --- functions ----------------------------------------------------------------------------

def add_bcast_both(a, b):
    return a + b * 2.0  # [37, 1] + [1, 53]


def scalar_ops(x):
    return (x * 3.0 - 1.5) / 0.25, x.clamp(-0.5, 0.5)


def mixed_dtypes(a, b):
    return a * b + 1  # f16/bf16 * f32 -> f32


def odd_noncontig(a, b):
    return torch.exp(a) * torch.sigmoid(b) - a


def unary_zoo(x):
    y = x.abs() + 0.5
    return (torch.log1p(x.abs()), torch.expm1(x), torch.tanh(3 * x), torch.erf(x), torch.round(4 * x),
            torch.trunc(3 * x), torch.sign(x), torch.remainder(5 * x, 1.5), y.pow(2), y.pow(0.5),
            y.pow(-1), y.pow(1.7), torch.rsqrt(y), torch.log2(y), torch.reciprocal(y), torch.floor(x))


def compare_where(x, y):
    m = x > y
    return torch.where(m, x, y * 0.5), m, (x <= 0) & (y > 0)


def int_ops(a, b):
    return a * b + 3, torch.remainder(a, 5), torch.maximum(a, b), (a % 7 == 0)


def nan_max(x, y):
    return torch.maximum(x, y), torch.minimum(x, y.abs()), torch.clamp(x, max=0.25)


def gelu_tanh(x, bias):
    return F.gelu(x + bias, approximate="tanh")


def gelu_erf(x):
    return F.gelu(x)


def silu_gate(g, u):
    return F.silu(g) * u


def sum_last_keepdim(x):
    return x.sum(-1, keepdim=True), x.amax(-1), x.amin(-1, keepdim=True), x.mean(-1)


def sum_middle(x):
    return x.sum(1), x.amax(1, keepdim=True), x.mean(1, keepdim=True)


def prod_last(x):
    return torch.prod(1.0 + 0.1 * x, -1)


def var_mean_last(x):
    v, m = torch.var_mean(x, -1, keepdim=True)
    v0, m0 = torch.var_mean(x, -1, correction=0)
    return v, m, v0


def var_mean_middle(x):
    return torch.var_mean(x, 1)


def softmax(x):
    return torch.softmax(x, -1)


def log_softmax(x):
    return F.log_softmax(x, -1)


def safe_softmax(x):
    x = x - x.amax(-1, keepdim=True)
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def manual_layer_norm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + 1e-5) * w + b


def rms_norm(x, w):
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return out.type_as(x) * w


def residual_norm(x, residual, w, b):
    h = x + residual
    return F.layer_norm(h, (h.shape[-1],), w, b), h


def softmax_transposed(x):
    return torch.softmax(x, -1)


def softmax_middle(x):
    return torch.softmax(x, 1)


def row_input(x, m):
    # m [rows, 1] is read both per row (with the sums) and broadcast over the row
    s = (x - m).sum(-1, keepdim=True)
    return s * m + 1.0, (x * m) / (s + 100.0)


def sum_two_dims(x):
    return x.sum((0, 2)), x.amax((0, 2), keepdim=True)  # non-adjacent reduced dims


def mean_last_two(x):
    return x.mean((1, 2), keepdim=True), torch.var_mean(x, (1, 2))


def sum_dim0(x):
    return x.sum(0), torch.softmax(x, 0)


def count_bool(x):
    return (x > 0).sum(-1), torch.amax(x.abs(), -1)


def full_reduce(x):
    return x.sum(), x.amin()


def scalar_domain(x, y):
    return x * y + 1.0


def nan_reduce(x):
    return x.amax(-1), x.amin(-1), x.sum(-1)


def _with_nans(d, t):
    x = _r(4, 37, device=d, dtype=t)
    x[1, 5] = float("nan")
    x[3, 36] = float("nan")
    return (x,)


# --- cases ------------------------------------------------------------------------------

ALL = (LOW[0], LOW[1], torch.float32)

CASES = [
    Case("add_bcast_both", add_bcast_both, lambda d, t: (_r(37, 1, device=d, dtype=t), _r(1, 53, device=d, dtype=t)),
         (torch.float32, torch.float16)),
    Case("scalar_ops", scalar_ops, lambda d, t: (_r(37, 53, device=d, dtype=t),), ALL),
    Case("mixed_dtypes", mixed_dtypes, lambda d, t: (_r(9, 31, device=d, dtype=t), _r(31, device=d, dtype=torch.float32)),
         LOW),
    Case("odd_noncontig", odd_noncontig,
         lambda d, t: (_r(53, 37, device=d, dtype=t).t(), _r(37, 106, device=d, dtype=t)[:, ::2]),
         (torch.float32, torch.bfloat16)),
    Case("unary_zoo", unary_zoo, lambda d, t: (_r(7, 33, device=d, dtype=t),)),
    Case("compare_where", compare_where, lambda d, t: (_r(5, 19, device=d, dtype=t), _r(19, device=d, dtype=t))),
    Case("int_ops", int_ops, lambda d, t: (torch.randint(-50, 50, (6, 21), device=d, dtype=torch.int32),
                                           torch.randint(-50, 50, (21,), device=d, dtype=torch.int32))),
    Case("nan_max", nan_max, lambda d, t: (torch.tensor([[1.0, float("nan"), -2.0, 0.0]], device=d).to(t).expand(3, 4),
                                           _r(3, 4, device=d, dtype=t))),
    Case("gelu_tanh", gelu_tanh, lambda d, t: (_r(13, 96, device=d, dtype=t), _r(96, device=d, dtype=t)), ALL),
    Case("gelu_erf", gelu_erf, lambda d, t: (_r(13, 40, device=d, dtype=t),)),
    Case("silu_gate", silu_gate, lambda d, t: (_r(11, 48, device=d, dtype=t), _r(11, 48, device=d, dtype=t)), ALL),
    Case("sum_last_keepdim", sum_last_keepdim, lambda d, t: (_r(6, 37, device=d, dtype=t),), (torch.float32, torch.float16)),
    Case("sum_middle", sum_middle, lambda d, t: (_r(3, 41, 7, device=d, dtype=t),)),
    Case("prod_last", prod_last, lambda d, t: (_r(4, 29, device=d, dtype=t),)),
    Case("var_mean_last", var_mean_last, lambda d, t: (_r(5, 45, device=d, dtype=t, scale=3.0) + 2,)),
    Case("var_mean_middle", var_mean_middle, lambda d, t: (_r(2, 33, 5, device=d, dtype=t),)),
    Case("softmax", softmax, lambda d, t: (_r(6, 53, device=d, dtype=t, scale=4.0),), ALL),
    Case("log_softmax", log_softmax, lambda d, t: (_r(6, 53, device=d, dtype=t, scale=4.0),), (torch.float32, torch.bfloat16)),
    Case("safe_softmax", safe_softmax, lambda d, t: (_r(4, 40, device=d, dtype=t, scale=20.0),)),
    Case("softmax_transposed", softmax_transposed, lambda d, t: (_r(53, 6, device=d, dtype=t).t(),)),
    Case("softmax_middle", softmax_middle, lambda d, t: (_r(3, 37, 5, device=d, dtype=t),)),
    Case("layer_norm", layer_norm, lambda d, t: (_r(7, 61, device=d, dtype=t), 1 + 0.1 * _r(61, device=d, dtype=t),
                                                 _r(61, device=d, dtype=t)), ALL),
    Case("manual_layer_norm", manual_layer_norm,
         lambda d, t: (_r(7, 61, device=d, dtype=t), 1 + 0.1 * _r(61, device=d, dtype=t), _r(61, device=d, dtype=t))),
    Case("rms_norm", rms_norm, lambda d, t: (_r(5, 64, device=d, dtype=t), 1 + 0.1 * _r(64, device=d, dtype=t)), ALL),
    Case("residual_norm", residual_norm,
         lambda d, t: (_r(6, 48, device=d, dtype=t), _r(6, 48, device=d, dtype=t), 1 + 0.1 * _r(48, device=d, dtype=t),
                       _r(48, device=d, dtype=t)), (torch.float32, torch.bfloat16)),
]

CASES += [
    Case("row_input", row_input, lambda d, t: (_r(6, 45, device=d, dtype=t), _r(6, 1, device=d, dtype=t))),
    Case("sum_two_dims", sum_two_dims, lambda d, t: (_r(3, 6, 11, device=d, dtype=t),)),
    Case("mean_last_two", mean_last_two, lambda d, t: (_r(4, 5, 13, device=d, dtype=t),)),
    Case("sum_dim0", sum_dim0, lambda d, t: (_r(29, 10, device=d, dtype=t),)),
    Case("count_bool", count_bool, lambda d, t: (_r(5, 33, device=d, dtype=t),)),
    Case("full_reduce", full_reduce, lambda d, t: (_r(7, 9, device=d, dtype=t),)),
    Case("scalar_domain", scalar_domain, lambda d, t: (_r((), device=d, dtype=t), _r((), device=d, dtype=t))),
    Case("nan_reduce", nan_reduce, _with_nans),
]

# cases whose reductions are also run in the looped (row does not fit in one block) form
LOOPED = ["sum_last_keepdim", "sum_middle", "prod_last", "var_mean_last", "var_mean_middle", "softmax", "log_softmax",
          "safe_softmax", "softmax_transposed", "softmax_middle", "layer_norm", "manual_layer_norm", "rms_norm",
          "residual_norm", "row_input", "sum_two_dims", "mean_last_two", "sum_dim0", "count_bool", "full_reduce", "nan_reduce"]


def by_name(name: str) -> Case:
    return next(c for c in CASES if c.name == name)
