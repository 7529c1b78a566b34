"""Sample calls of every supported torch-level op, for the differential op tests.

Each `Sample` is a small user function (the op as a user writes it: a function, a Tensor
method, an operator) and a recipe for its arguments. Arguments are made fresh, from the
global torch RNG, for each dtype: several shapes, broadcasting, python scalars,
non-contiguous (transposed, strided) and zero-size tensors.

`python tests/op_samples.py --markdown` prints docs/ops.md: every torch-level symbol, the
torch callables that map to it, and the prims its samples decompose into.
"""

from __future__ import annotations

import operator
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
FLOATS = (F32, F16, BF16)
ONLY_F32 = (F32,)


# --- argument recipes -----------------------------------------------------------------------

@dataclass
class T:
    """A random tensor of `shape`. dtype None means the sample's dtype.

    kind: "float" (uniform in [low, high)), "int" (randint in [low, high)), "bool".
    layout: None (contiguous), "t" (a transposed view), "slice" (every other element of
    the last dim: non-contiguous and not dense), "cl" (channels_last, 4-d or 5-d).
    """

    shape: tuple
    dtype: Any = None
    kind: str = "float"
    low: float = -2.0
    high: float = 2.0
    layout: Any = None

    def make(self, dtype):
        dtype = self.dtype or dtype
        shape = tuple(self.shape)
        if self.layout == "t":
            assert len(shape) >= 2
            base_shape = shape[:-2] + (shape[-1], shape[-2])
        elif self.layout == "slice":
            base_shape = shape[:-1] + (shape[-1] * 2,)
        else:
            base_shape = shape
        if self.kind == "int":
            x = torch.randint(int(self.low), int(self.high), base_shape).to(dtype)
        elif self.kind == "bool":
            x = torch.rand(base_shape) > 0.5
        else:
            x = (torch.rand(base_shape) * (self.high - self.low) + self.low).to(dtype)
        if self.layout == "t":
            x = x.transpose(-1, -2)
        elif self.layout == "slice":
            x = x[..., ::2]
        elif self.layout == "cl":
            x = x.contiguous(memory_format=torch.channels_last if x.ndim == 4 else torch.channels_last_3d)
        assert x.shape == shape
        return x


def t(*shape, **kw) -> T:
    return T(shape, **kw)


def pos(*shape, **kw) -> T:
    """Positive values (log, sqrt, ...)."""
    return T(shape, low=0.25, high=2.0, **kw)


def ints(*shape, low=0, high=5, dtype=torch.int64, **kw) -> T:
    return T(shape, dtype=dtype, kind="int", low=low, high=high, **kw)


def bools(*shape, **kw) -> T:
    return T(shape, dtype=torch.bool, kind="bool", **kw)


def nt(*shape, **kw) -> T:
    """A transposed (non-contiguous) view."""
    return T(shape, layout="t", **kw)


def sl(*shape, **kw) -> T:
    """A strided slice (non-contiguous, not dense)."""
    return T(shape, layout="slice", **kw)


def cl(*shape, **kw) -> T:
    """Channels-last (NHWC or NDHWC strides)."""
    return T(shape, layout="cl", **kw)


@dataclass
class Sample:
    op: str  # the torch-level symbol it exercises (SYMBOLS key), for the docs table
    name: str  # unique test id
    fn: Callable
    args: tuple  # recipes (T) and python values
    dtypes: tuple = FLOATS
    decomposes: bool = True  # False: this call is expected to stay a library call
    why_not: str = ""  # when decomposes=False, the expected reason (a substring of the note)
    random: bool = False  # output is random: compare shapes/dtypes only

    def make(self, dtype):
        return tuple(pytree.tree_map(lambda a: a.make(dtype) if isinstance(a, T) else a, self.args,
                                     is_leaf=lambda a: isinstance(a, T)))

    def id(self, dtype) -> str:
        return f"{self.name}-{str(dtype).removeprefix('torch.')}"


SAMPLES: list = []
_names: set = set()


def sample(op, name, fn, *args, dtypes=FLOATS, decomposes=True, why_not="", random=False):
    assert name not in _names, name
    _names.add(name)
    SAMPLES.append(Sample(op, name, fn, args, dtypes, decomposes, why_not, random))


# --- elementwise binary ----------------------------------------------------------------------

sample("torch.add", "add_op", lambda a, b: a + b, t(3, 4), t(3, 4))
sample("torch.add", "add_bcast", lambda a, b: a + b, t(2, 3, 4), t(4))
sample("torch.add", "add_bcast_both", lambda a, b: torch.add(a, b), t(3, 1), t(1, 4))
sample("torch.add", "add_scalar", lambda a: a + 2.5, t(3, 4))
sample("torch.add", "radd_scalar", lambda a: 2 + a, t(3, 4))
sample("torch.add", "add_alpha", lambda a, b: torch.add(a, b, alpha=2), t(3, 4), t(3, 4))
sample("torch.add", "add_method_nc", lambda a, b: a.add(b), nt(3, 4), sl(3, 4))
sample("torch.add", "add_zero_size", lambda a, b: a + b, t(0, 4), t(4))
sample("torch.add", "add_int_float", lambda a, b: a + b, ints(3, 4), t(3, 4))
sample("torch.add", "add_int_scalar_float", lambda a: a + 1.5, ints(3, 4), dtypes=ONLY_F32)
sample("torch.add", "add_0d", lambda a, b: a + b, t(), t(3, 4))
sample("torch.sub", "sub_op", lambda a, b: a - b, t(3, 4), t(4))
sample("torch.sub", "sub_fns", lambda a, b: torch.sub(a, b, alpha=0.5) + torch.subtract(b, a) + a.sub(b),
       t(2, 3), nt(2, 3))
sample("torch.rsub", "rsub_scalar", lambda a: 2 - a, t(3, 4))
sample("torch.rsub", "rsub_fn", lambda a, b: torch.rsub(a, b), t(3, 4), t(4))
sample("torch.mul", "mul_op", lambda a, b: a * b, t(2, 3, 4), t(3, 1))
sample("torch.mul", "mul_fns", lambda a, b: torch.mul(a, b) + torch.multiply(a, 3) + a.mul(b) + 0.5 * a,
       t(3, 4), sl(3, 4))
sample("torch.div", "div_op", lambda a, b: a / b, t(3, 4), pos(4))
sample("torch.div", "div_fns", lambda a, b: torch.div(a, b) + torch.divide(a, 2) + torch.true_divide(a, b)
       + a.div(b) + a.true_divide(b), t(3, 4), pos(3, 4))
sample("torch.div", "div_int", lambda a, b: a / b, ints(3, 4), ints(3, 4, low=1, high=4), dtypes=ONLY_F32)
sample("torch.div", "div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), t(3, 4), pos(3, 4))
sample("torch.div", "div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"), t(3, 4), pos(3, 4),
       decomposes=False, why_not="rounding_mode")
sample("torch.Tensor.__rtruediv__", "rdiv_scalar", lambda a: 2 / a, pos(3, 4))
sample("torch.pow", "pow_scalar", lambda a: a ** 3, t(3, 4))
sample("torch.pow", "pow_square", lambda a: a ** 2, t(3, 4))
sample("torch.pow", "pow_sqrt", lambda a: torch.pow(a, 0.5), pos(3, 4))
sample("torch.pow", "pow_tensor", lambda a, b: a.pow(b), pos(3, 4), t(4))
sample("torch.Tensor.__rpow__", "rpow_scalar", lambda a: 2 ** a, t(3, 4))
sample("torch.square", "square", lambda a: torch.square(a) + a.square(), nt(3, 4))
sample("torch.remainder", "remainder", lambda a, b: torch.remainder(a, b) + a.remainder(1.5) + a % b,
       t(3, 4), pos(3, 4), dtypes=(F32,))
sample("torch.remainder", "remainder_int", lambda a: a % 3, ints(3, 4, low=-9, high=9), dtypes=ONLY_F32)
sample("torch.maximum", "maximum", lambda a, b: torch.maximum(a, b) + a.maximum(b), t(3, 4), t(4))
sample("torch.minimum", "minimum", lambda a, b: torch.minimum(a, b) + a.minimum(b), t(3, 4), t(3, 1))
for _cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
    _op = getattr(operator, _cmp)
    sample(f"torch.{_cmp}", f"{_cmp}_op", lambda a, b, _op=_op: _op(a, b), ints(3, 4, dtype=None),
           ints(4, dtype=None))
    sample(f"torch.{_cmp}", f"{_cmp}_fns", lambda a, b, _c=_cmp: getattr(torch, _c)(a, b) & getattr(a, _c)(0.5),
           t(3, 4), nt(3, 4))
sample("torch.logical_and", "logical_and", lambda a, b: torch.logical_and(a, b) | a.logical_and(b > 0),
       bools(3, 4), t(3, 4))
sample("torch.logical_or", "logical_or", lambda a, b: torch.logical_or(a, b) ^ a.logical_or(b), bools(3, 4),
       t(4))
sample("torch.bitwise_and", "bitwise_and", lambda a, b: torch.bitwise_and(a, b) + (a & b) + a.bitwise_and(b),
       ints(3, 4, high=100), ints(4, high=100), dtypes=ONLY_F32)
sample("torch.bitwise_or", "bitwise_or", lambda a, b: torch.bitwise_or(a, b) + (a | b) + a.bitwise_or(b),
       ints(3, 4, high=100), ints(3, 4, high=100), dtypes=ONLY_F32)
sample("torch.bitwise_xor", "bitwise_xor", lambda a, b: torch.bitwise_xor(a, b) + (a ^ b) + a.bitwise_xor(b),
       ints(3, 4, high=100), ints(3, 4, high=100), dtypes=ONLY_F32)
sample("torch.bitwise_and", "bool_and_or_xor", lambda a, b: (a & b) | (a ^ b), bools(3, 4), bools(3, 4),
       dtypes=ONLY_F32)

# --- elementwise unary -----------------------------------------------------------------------

_POSITIVE = {"log", "log2", "sqrt", "rsqrt", "reciprocal"}
for _name in ("exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
              "sigmoid", "erf", "reciprocal", "abs", "neg", "floor", "ceil", "round", "trunc", "sign"):
    _mk = pos if _name in _POSITIVE else t
    sample(f"torch.{_name}", f"{_name}_fn", lambda a, _n=_name: getattr(torch, _n)(a), _mk(3, 4))
    sample(f"torch.{_name}", f"{_name}_method_nc", lambda a, _n=_name: getattr(a, _n)(), _mk(2, 3, 4, layout="t"),
           dtypes=(F32, BF16))
    sample(f"torch.{_name}", f"{_name}_empty", lambda a, _n=_name: getattr(torch, _n)(a), _mk(0, 3), dtypes=ONLY_F32)
for _name in ("exp", "sqrt", "sigmoid", "abs", "neg", "floor", "round", "sign"):
    sample(f"torch.{_name}", f"{_name}_int", lambda a, _n=_name: getattr(torch, _n)(a),
           ints(3, 4, low=0 if _name == "sqrt" else -3, high=4), dtypes=ONLY_F32)
sample("torch.neg", "neg_op", lambda a: -a + torch.negative(a), sl(3, 4))
sample("torch.abs", "abs_op", lambda a: abs(a), t(3, 4))
sample("torch.tanh", "tanh_F", lambda a: F.tanh(a) + F.sigmoid(a), t(3, 4))
sample("torch.logical_not", "logical_not", lambda a, b: torch.logical_not(a) & b.logical_not(), bools(3, 4),
       t(3, 4))
sample("torch.bitwise_not", "bitwise_not", lambda a, b: torch.bitwise_not(a) + (~a) + a.bitwise_not() + (~b),
       ints(3, 4, low=-5, high=5), bools(3, 4), dtypes=ONLY_F32)
sample("torch.isnan", "isnan", lambda a: torch.isnan(a.log()) | a.isnan(), t(3, 4))

# --- where, clamp and friends ---------------------------------------------------------------

sample("torch.where", "where", lambda c, a, b: torch.where(c, a, b), bools(3, 4), t(3, 4), t(4))
sample("torch.where", "where_scalar_branch", lambda c, a: torch.where(c, a, 0.0) + a.where(c, 1.0),
       bools(3, 1), t(3, 4))
sample("torch.where", "where_scalars", lambda c: torch.where(c, 1.0, 0.0), bools(3, 4), dtypes=ONLY_F32,
       decomposes=False, why_not="scalar branches")
sample("torch.masked_fill", "masked_fill", lambda a, m: a.masked_fill(m, float("-inf")).softmax(-1),
       t(2, 3, 4), bools(3, 4))
sample("torch.masked_fill", "masked_fill_fn", lambda a, m: torch.masked_fill(a, m, 0.5), t(3, 4), bools(4))
sample("torch.masked_fill", "masked_fill_tensor_value", lambda a, m, v: a.masked_fill(m, v), t(3, 4), bools(3, 4),
       t())
sample("torch.clamp", "clamp", lambda a: torch.clamp(a, -0.5, 0.5) + a.clamp(min=0.1) + a.clip(max=0.2)
       + torch.clip(a, 0.0, 1.0), t(3, 4))
sample("torch.clamp", "clamp_tensor", lambda a, lo, hi: a.clamp(lo, hi), t(3, 4), t(4, high=0.0), t(3, 1, low=0.0))
sample("torch.clamp_min", "clamp_min", lambda a: torch.clamp_min(a, 0.0) + a.clamp_min(0.5), nt(3, 4))
sample("torch.clamp_max", "clamp_max", lambda a: torch.clamp_max(a, 0.0) + a.clamp_max(0.5), nt(3, 4))
sample("torch.lerp", "lerp", lambda a, b: torch.lerp(a, b, 0.3) + a.lerp(b, 0.7), t(3, 4), t(4))
sample("torch.lerp", "lerp_tensor_weight", lambda a, b, w: torch.lerp(a, b, w), t(3, 4), t(3, 4), t(3, 4, low=0.0,
       high=1.0), dtypes=ONLY_F32)
sample("torch.addcmul", "addcmul", lambda a, b, c: torch.addcmul(a, b, c, value=0.5) + a.addcmul(b, c), t(3, 4),
       t(4), t(3, 1))
sample("torch.outer", "outer", lambda a, b: torch.outer(a, b) + a.outer(b) + torch.ger(a, b), t(3), t(5))

# --- activations -----------------------------------------------------------------------------

sample("torch.nn.functional.relu", "relu", lambda a: F.relu(a) + torch.relu(a) + a.relu(), t(3, 4))
sample("torch.nn.functional.relu", "relu_nc_empty", lambda a, b: F.relu(a).sum() + F.relu(b).sum(), nt(3, 4),
       t(0, 2))
sample("torch.nn.functional.relu6", "relu6", lambda a: F.relu6(a * 4), t(3, 4))
sample("torch.nn.functional.leaky_relu", "leaky_relu", lambda a: F.leaky_relu(a) + F.leaky_relu(a, 0.2), t(3, 4))
sample("torch.nn.functional.gelu", "gelu", lambda a: F.gelu(a), t(3, 4, low=-4, high=4))
sample("torch.nn.functional.gelu", "gelu_tanh", lambda a: F.gelu(a, approximate="tanh"), t(3, 4, low=-4, high=4))
sample("torch.nn.functional.gelu", "gelu_module", lambda a: torch.nn.GELU()(a) + torch.nn.GELU("tanh")(a),
       sl(2, 8))
sample("torch.nn.functional.silu", "silu", lambda a: F.silu(a), t(3, 4, low=-4, high=4))
sample("torch.nn.functional.softplus", "softplus", lambda a: F.softplus(a) + F.softplus(a, beta=2, threshold=1),
       t(3, 4, low=-4, high=4))
sample("torch.nn.functional.softplus", "softplus_large", lambda a: F.softplus(a * 8), t(3, 4))
sample("torch.nn.functional.mish", "mish", lambda a: F.mish(a), t(3, 4, low=-4, high=4))
sample("torch.nn.functional.elu", "elu", lambda a: F.elu(a) + F.elu(a, alpha=0.5), t(3, 4))
sample("torch.nn.functional.hardtanh", "hardtanh", lambda a: F.hardtanh(a) + F.hardtanh(a, -0.5, 0.5), t(3, 4))
sample("torch.nn.functional.dropout", "dropout_eval", lambda a: F.dropout(a, 0.5, training=False) * 2, t(3, 4))
sample("torch.nn.functional.dropout", "dropout_p0", lambda a: torch.dropout(a, 0.0, True) * 2, t(3, 4))
sample("torch.nn.functional.dropout", "dropout_module_eval", lambda a: torch.nn.Dropout(0.1).eval()(a) + 1, t(3, 4))
sample("torch.nn.functional.dropout", "dropout_train", lambda a: F.dropout(a, 0.5, training=True), t(3, 4),
       decomposes=False, why_not="training mode is random", random=True)
sample("torch.nn.functional.hardsigmoid", "hardsigmoid", lambda a: F.hardsigmoid(a) + torch.nn.Hardsigmoid()(a),
       t(3, 4, low=-5, high=5))
sample("torch.nn.functional.hardswish", "hardswish", lambda a: F.hardswish(a) + torch.nn.Hardswish()(a),
       t(3, 4, low=-5, high=5))
sample("torch.nn.functional.hardswish", "hardswish_inplace_cl", lambda a: F.hardswish(a * 1, inplace=True), cl(2, 3, 4, 4))
sample("torch.nn.functional.selu", "selu", lambda a: F.selu(a) + torch.selu(a) + torch.nn.SELU()(a), t(3, 4, low=-4,
       high=4))
sample("torch.nn.functional.celu", "celu", lambda a: F.celu(a) + F.celu(a, alpha=0.5) + torch.celu(a, 2.0), t(3, 4, low=-4,
       high=4))
sample("torch.nn.functional.softsign", "softsign", lambda a: F.softsign(a) + torch.nn.Softsign()(a), t(3, 4, low=-8, high=8))
sample("torch.nn.functional.tanhshrink", "tanhshrink", lambda a: F.tanhshrink(a), t(3, 4, low=-4, high=4))
sample("torch.nn.functional.hardshrink", "hardshrink", lambda a: F.hardshrink(a) + torch.hardshrink(a, 1.0)
       + a.hardshrink(0.25) + torch.nn.Hardshrink(0.0)(a), t(3, 4))
sample("torch.nn.functional.softshrink", "softshrink", lambda a: F.softshrink(a) + F.softshrink(a, 1.0)
       + torch.nn.Softshrink(0.0)(a), t(3, 4))
sample("torch.nn.functional.logsigmoid", "logsigmoid", lambda a: F.logsigmoid(a) + torch.nn.LogSigmoid()(a * 30),
       t(3, 4, low=-4, high=4))
_PRELU = torch.nn.PReLU(3, init=0.1)
sample("torch.nn.functional.prelu", "prelu", lambda a, w, w1: F.prelu(a, w) + torch.prelu(a, w1) + a.prelu(w),
       t(2, 3, 4, 4), t(3), t(1))
sample("torch.nn.functional.prelu", "prelu_shapes", lambda a, b, c, w1: (F.prelu(a, w1), F.prelu(b, w1), F.prelu(c, w1)),
       t(5), t(), t(4, 3), t(1))
sample("torch.nn.functional.prelu", "prelu_module", lambda a: _PRELU(a), t(2, 3, 5), dtypes=ONLY_F32)
sample("torch.nn.functional.rrelu", "rrelu_eval", lambda a: F.rrelu(a) + torch.rrelu(a, 0.1, 0.3)
       + torch.nn.RReLU().eval()(a), t(3, 4))
sample("torch.nn.functional.rrelu", "rrelu_train", lambda a: F.rrelu(a, training=True), t(3, 4), dtypes=(F32, BF16),
       decomposes=False, why_not="training mode is random", random=True)
sample("torch.nn.functional.glu", "glu", lambda a: (F.glu(a), F.glu(a, 1), torch.nn.GLU(0)(a)), t(4, 6, 2))
sample("torch.nn.functional.glu", "glu_nc", lambda a: F.glu(a, -1), nt(3, 4))

# --- dtype conversion and copies -------------------------------------------------------------

sample("torch.Tensor.float", "float", lambda a: a.float() * 2, t(3, 4))
sample("torch.Tensor.half", "half", lambda a: a.half() * 2, t(3, 4))
sample("torch.Tensor.bfloat16", "bfloat16", lambda a: a.bfloat16() * 2, t(3, 4))
sample("torch.Tensor.double", "double", lambda a: a.double() * 2, t(3, 4))
sample("torch.Tensor.long", "long", lambda a: (a * 3).long() + 1, t(3, 4))
sample("torch.Tensor.int", "int", lambda a: (a * 3).int() + 1, t(3, 4))
sample("torch.Tensor.bool", "bool", lambda a: a.bool() & (a > 0), ints(3, 4, low=-1, high=2, dtype=None))
sample("torch.Tensor.to", "to_dtype", lambda a: a.to(torch.float32) + a.to(dtype=torch.float16).float(), t(3, 4))
sample("torch.Tensor.to", "to_other", lambda a, b: a.to(b) + b, ints(3, 4, dtype=torch.int32), t(3, 4))
sample("torch.Tensor.to", "to_same_device", lambda a: a.to("cpu") * 2, t(3, 4))
sample("torch.Tensor.type_as", "type_as", lambda a, b: a.type_as(b) + b, ints(3, 4), t(3, 4))
sample("torch.Tensor.type", "type_dtype", lambda a: a.type(torch.float64) * 2, t(3, 4))
sample("torch.Tensor.type", "type_string", lambda a: a.type("torch.DoubleTensor") * 2, t(3, 4), dtypes=ONLY_F32,
       decomposes=False, why_not="string")
sample("torch.Tensor.contiguous", "contiguous", lambda a: a.transpose(0, 1).contiguous() * 2, t(3, 4))
sample("torch.Tensor.contiguous", "contiguous_view", lambda a: a.transpose(0, 1).contiguous().view(-1, 2) * 2,
       t(3, 4))
sample("torch.clone", "clone", lambda a: torch.clone(a) + a.clone(), nt(3, 4))
sample("torch.Tensor.detach", "detach", lambda a: a.detach() + torch.detach(a) + a.data, t(3, 4))

# --- shapes ----------------------------------------------------------------------------------

sample("torch.Tensor.view", "view_neg1", lambda a: a.view(-1, 4) * 2 + a.view(12).view(3, 4).view(-1, 4), t(3, 4))
sample("torch.Tensor.view", "view_tuple", lambda a: a.view((2, 6)) + 1, t(3, 4))
sample("torch.reshape", "reshape_nc", lambda a: a.reshape(-1) + torch.reshape(a, (12,)) + a.reshape(2, 6).reshape(12),
       nt(3, 4))
sample("torch.reshape", "reshape_empty", lambda a: a.reshape(-1, 2) + 1, t(0, 4))
sample("torch.Tensor.view", "view_dtype", lambda a: a.view(torch.int32) + 1, t(3, 4), dtypes=ONLY_F32,
       decomposes=False, why_not="view as another dtype")
sample("torch.Tensor.view_as", "view_as", lambda a, b: a.view_as(b) + b, t(3, 4), t(2, 6))
sample("torch.flatten", "flatten", lambda a: torch.flatten(a) .sum() + a.flatten(1).sum(-1).sum(), t(2, 3, 4))
sample("torch.unflatten", "unflatten", lambda a: a.unflatten(-1, (2, -1)) + torch.unflatten(a, 1, (2, 2, 3)).reshape(
       2, 12).unflatten(1, (2, 6)), t(2, 12))
sample("torch.squeeze", "squeeze", lambda a: a.squeeze() + a.squeeze(1).squeeze(-1) + torch.squeeze(a, (1, 3)),
       t(3, 1, 4, 1))
sample("torch.unsqueeze", "unsqueeze", lambda a: a.unsqueeze(0) + torch.unsqueeze(a, -1).transpose(0, 2), t(3, 3))
sample("torch.permute", "permute", lambda a: a.permute(2, 0, 1) + torch.permute(a, (2, 0, 1)) + a.permute((2, 0, 1)),
       t(2, 3, 4))
sample("torch.permute", "T_property", lambda a: a.T + a.mT.transpose(0, 1), t(3, 3))
sample("torch.transpose", "transpose", lambda a: a.transpose(0, 1) + torch.transpose(a, -1, -2)
       + torch.swapaxes(a, 0, 1) + a.swapaxes(1, 0), sl(4, 4))
sample("torch.transpose", "transpose_1d", lambda a: a.transpose(0, 0) * 2, t(4))
sample("torch.t", "t", lambda a: torch.t(a) + a.t() * 2, t(3, 3))
sample("torch.Tensor.expand", "expand", lambda a: a.expand(2, 3, 4) + a.expand(-1, 4) + a.expand((2, 3, 4)), t(3, 1))
sample("torch.broadcast_to", "broadcast_to", lambda a: torch.broadcast_to(a, (2, 3, 4)) + a.broadcast_to(3, 4), t(4))
sample("torch.Tensor.expand_as", "expand_as", lambda a, b: a.expand_as(b) * b, t(1, 4), t(3, 4))
sample("torch.Tensor.repeat", "repeat", lambda a: a.repeat(2, 3) + 1, t(2, 3))
sample("torch.Tensor.repeat", "repeat_more_dims", lambda a: a.repeat((2, 1, 2)) * 2, nt(2, 3))
sample("operator.getitem", "getitem_slice", lambda a: a[..., 1:3] + a[:, None][:, 0, 1:3] + a[1:2, ::2].sum(), t(3, 4))
sample("operator.getitem", "getitem_int", lambda a: a[0] + a[-1, :] + a[:, 2].sum() + a[1, 2], t(3, 4))
sample("operator.getitem", "getitem_none_ellipsis", lambda a: a[None, ..., None] * 2 + a[..., 0:1, None].sum(),
       t(2, 3, 4))
sample("operator.getitem", "getitem_nc", lambda a: a[1:, :2] * 2, nt(3, 4))
sample("operator.getitem", "getitem_empty", lambda a: a[2:2] + 1, t(3, 4))
sample("operator.getitem", "getitem_tensor_index", lambda a, i: a[i] * 2, t(5, 3), ints(4, high=5))
sample("operator.getitem", "getitem_bool_mask", lambda a, m: a[m] * 2, t(3, 4), bools(3, 4), dtypes=ONLY_F32,
       decomposes=False, why_not="a boolean mask")
sample("torch.narrow", "narrow", lambda a: a.narrow(1, 1, 2) + torch.narrow(a, -1, -3, 2), t(3, 4))
sample("torch.select", "select", lambda a: a.select(1, 2) + torch.select(a, 0, -1).sum(), t(3, 3))
sample("torch.split", "split", lambda a: [x * 2 for x in a.split(2, dim=-1)] + list(torch.split(a, [1, 4], 1)),
       t(3, 5))
sample("torch.split", "split_unpack", lambda a: (lambda q, k, v: q @ k.transpose(0, 1) + v.sum())(*a.split(4, dim=1)),
       t(3, 12))
sample("torch.chunk", "chunk", lambda a: [x + 1 for x in a.chunk(3, 1)] + [x * 2 for x in torch.chunk(a, 2)], t(4, 7))
sample("torch.unbind", "unbind", lambda a: [x + 1 for x in a.unbind(1)] + [x * 2 for x in torch.unbind(a)], t(2, 3))
sample("torch.cat", "cat", lambda a, b: torch.cat([a, b], 1) + torch.concat((a, b), -1)
       + torch.concatenate([a, b], dim=1), t(3, 2), nt(3, 4))
sample("torch.cat", "cat_promote_empty", lambda a, b, e: torch.cat([a, b, e], 0), t(2, 3), ints(1, 3, dtype=torch.int32),
       t(0))
sample("torch.stack", "stack", lambda a, b: torch.stack([a, b]) + torch.stack((a, b), dim=-1).permute(2, 0, 1), t(3, 4),
       t(3, 4))
sample("torch.tril", "tril", lambda a: torch.tril(a) + a.tril(1) + a.tril(-1), t(4, 5))
sample("torch.tril", "tril_bool", lambda m: torch.tril(m) | m.triu(1), bools(4, 4))
sample("torch.triu", "triu", lambda a: torch.triu(a) + a.triu(2) + torch.triu(a, -1), t(2, 4, 3))

# --- factories -------------------------------------------------------------------------------

sample("torch.full", "full", lambda a: a + torch.full((3, 4), 2.5) + torch.full((4,), 3, dtype=a.dtype), t(3, 4))
sample("torch.ones", "ones", lambda a: a + torch.ones(3, 4) + torch.ones((4,), dtype=a.dtype), t(3, 4))
sample("torch.zeros", "zeros", lambda a: a + torch.zeros(3, 4) + torch.zeros((1, 4), dtype=torch.int64), t(3, 4))
sample("torch.ones_like", "ones_like", lambda a: a + torch.ones_like(a) + torch.ones_like(a, dtype=torch.float32),
       t(3, 4))
sample("torch.zeros_like", "zeros_like", lambda a: a - torch.zeros_like(a), nt(3, 4))
sample("torch.full_like", "full_like", lambda a: a * torch.full_like(a, 3.0), t(3, 4))
sample("torch.arange", "arange", lambda a: a + torch.arange(4) + torch.arange(1, 9, 2) + torch.arange(4, dtype=a.dtype),
       t(3, 4))
sample("torch.arange", "arange_float", lambda a: a + torch.arange(0.0, 2.0, 0.5), t(3, 4), dtypes=ONLY_F32,
       decomposes=False, why_not="float arange")
sample("torch.tril", "causal_mask", lambda a: a.masked_fill(torch.tril(torch.ones(4, 4, dtype=torch.bool)).logical_not(),
       float("-inf")).softmax(-1), t(2, 4, 4))

# --- reductions ------------------------------------------------------------------------------

sample("torch.sum", "sum", lambda a: a.sum() + torch.sum(a, -1).sum(), t(3, 4))
sample("torch.sum", "sum_dims", lambda a: a.sum((0, 2), keepdim=True) * 2 + a.sum(dim=1, keepdim=True).sum(0), t(2, 3, 4))
sample("torch.sum", "sum_dtype", lambda a: a.sum(-1, dtype=torch.float32), t(3, 4))
sample("torch.sum", "sum_int_bool", lambda a, b: a.sum(1) + b.sum(), ints(3, 4), bools(3, 4), dtypes=ONLY_F32)
sample("torch.sum", "sum_nc_empty", lambda a, b: a.sum(0) + b.sum(0).sum(), nt(3, 4), t(0, 4))
sample("torch.mean", "mean", lambda a: a.mean() + torch.mean(a, 1, keepdim=True) + a.mean((0, 1)), t(3, 4))
sample("torch.mean", "mean_dtype", lambda a: a.mean(-1, dtype=torch.float32), sl(3, 4))
sample("torch.amax", "amax", lambda a: a.amax(-1) + torch.amax(a, (0, 1)) + a.amax(0, keepdim=True).sum(), t(3, 4))
sample("torch.amin", "amin", lambda a: a.amin(-1) + torch.amin(a, (0, 1)), nt(3, 4))
sample("torch.prod", "prod", lambda a: a.prod(-1) + torch.prod(a) + a.prod(0, keepdim=True).sum(), t(3, 4, low=0.5,
       high=1.5))
sample("torch.max", "max_dim", lambda a: a.max(dim=1), t(3, 5))
sample("torch.max", "max_dim_keepdim", lambda a: torch.max(a, -1, keepdim=True), nt(3, 5))
sample("torch.max", "max_unpack", lambda a: (lambda v, i: v * 2 + i)(*a.max(0)), t(4, 3))
sample("torch.max", "max_all_and_binary", lambda a, b: a.max() + torch.max(a, b), t(3, 4), t(4))
sample("torch.min", "min_dim", lambda a: a.min(dim=0), t(3, 5))
sample("torch.min", "min_all_and_binary", lambda a, b: torch.min(a) + a.min(b), t(3, 4), t(3, 4))
sample("torch.argmax", "argmax", lambda a: a.argmax() + torch.argmax(a, 1) + a.argmax(0, keepdim=True), t(4, 4))
sample("torch.argmin", "argmin", lambda a: a.argmin(-1) + torch.argmin(a), t(3, 4))
sample("torch.var_mean", "var_mean", lambda a: torch.var_mean(a, -1), t(3, 8))
sample("torch.var_mean", "var_mean_correction", lambda a: torch.var_mean(a, (0, 1), correction=0, keepdim=True), t(3, 8))
sample("torch.var", "var", lambda a: a.var() + torch.var(a, 1, keepdim=True) + a.var(0, unbiased=False).sum()
       + a.var(-1, correction=2).sum(), t(4, 8))
sample("torch.std", "std", lambda a: a.std(-1) + torch.std(a, 1, unbiased=False) + a.std(1, correction=0), nt(3, 8))
sample("torch.logsumexp", "logsumexp", lambda a: torch.logsumexp(a, -1) + a.logsumexp((0, 1), keepdim=True).sum(),
       t(3, 5))
sample("torch.logsumexp", "logsumexp_inf_rows", lambda a: torch.logsumexp(torch.cat([a, a[:1] * 0 - float("inf"),
       a[:1] * 0 + float("inf")]), -1), t(3, 5))
sample("torch.sum", "sum_int32_dtype", lambda a: a.sum(-1, dtype=torch.int32) + a.sum(dtype=torch.int32), ints(3, 4),
       dtypes=ONLY_F32)
sample("torch.prod", "prod_int32", lambda a: a.prod(-1), ints(3, 4, low=1, high=4, dtype=torch.int32), dtypes=ONLY_F32)
sample("torch.linalg.vector_norm", "vector_norm", lambda a: torch.linalg.vector_norm(a) + torch.linalg.vector_norm(
       a, dim=-1).sum(), t(3, 4))
sample("torch.linalg.vector_norm", "vector_norm_ord1", lambda a: torch.linalg.vector_norm(a, 1), t(3, 4), dtypes=ONLY_F32,
       decomposes=False, why_not="ord=1")

# --- normalisation, softmax and losses ------------------------------------------------------

sample("torch.nn.functional.softmax", "softmax", lambda a: F.softmax(a, dim=-1) + torch.softmax(a, 0)
       + a.softmax(-1) + torch.special.softmax(a, 1), t(3, 4, low=-5, high=5))
sample("torch.nn.functional.softmax", "softmax_dtype", lambda a: a.softmax(-1, dtype=torch.float32), t(2, 3, 6))
sample("torch.nn.functional.softmax", "softmax_nc_empty", lambda a, b: (F.softmax(a, 1), F.softmax(b, 1)), nt(3, 4),
       t(0, 4))
sample("torch.nn.functional.log_softmax", "log_softmax", lambda a: F.log_softmax(a, dim=-1) + torch.log_softmax(a, 0)
       + a.log_softmax(1), t(3, 4, low=-5, high=5))
sample("torch.nn.functional.softmax", "softmax_implicit_dim", lambda a, b: (F.softmax(a), F.softmax(b, None)), t(3, 4),
       t(2, 3, 4))
sample("torch.nn.functional.log_softmax", "log_softmax_implicit_dim", lambda a: F.log_softmax(a), t(3, 4))
sample("torch.nn.functional.log_softmax", "log_softmax_dtype", lambda a: F.log_softmax(a, -1, dtype=torch.float32),
       t(3, 4))
sample("torch.nn.functional.layer_norm", "layer_norm", lambda a, w, b: F.layer_norm(a, (8,), w, b), t(2, 3, 8), t(8),
       t(8))
sample("torch.nn.functional.layer_norm", "layer_norm_noaffine", lambda a: F.layer_norm(a, (3, 8), eps=1e-6),
       t(2, 3, 8, layout="t"))
_LAYER_NORM = torch.nn.LayerNorm(8)
sample("torch.nn.functional.layer_norm", "layer_norm_module", lambda a: _LAYER_NORM(a), t(4, 8))
sample("torch.nn.functional.rms_norm", "rms_norm", lambda a, w: F.rms_norm(a, (8,), w, 1e-6) + F.rms_norm(a, (8,)),
       t(2, 3, 8), t(8))
sample("torch.nn.functional.normalize", "normalize", lambda a: F.normalize(a) + F.normalize(a, dim=-1), t(3, 4))
sample("torch.nn.functional.normalize", "normalize_p1", lambda a: F.normalize(a, p=1.0), t(3, 4), dtypes=ONLY_F32,
       decomposes=False, why_not="p=1")
sample("torch.nn.functional.nll_loss", "nll_loss", lambda a, y: F.nll_loss(a.log_softmax(-1), y)
       + F.nll_loss(a, y, reduction="sum"), t(4, 5), ints(4, high=5))
sample("torch.nn.functional.nll_loss", "nll_loss_none", lambda a, y: F.nll_loss(a, y, reduction="none"), t(4, 5),
       ints(4, high=5))
sample("torch.nn.functional.cross_entropy", "cross_entropy", lambda a, y: F.cross_entropy(a, y), t(6, 5), ints(6, high=5))
sample("torch.nn.functional.cross_entropy", "cross_entropy_ignore_index",
       lambda a, y: F.cross_entropy(a, y.masked_fill(y == 0, -100)) + F.cross_entropy(a, y, ignore_index=2,
                                                                                      reduction="sum"),
       t(6, 5), ints(6, high=5))
sample("torch.nn.functional.cross_entropy", "cross_entropy_label_smoothing",
       lambda a, y: F.cross_entropy(a, y, label_smoothing=0.1), t(6, 5), ints(6, high=5), dtypes=ONLY_F32,
       decomposes=False, why_not="label smoothing")
sample("torch.nn.functional.mse_loss", "mse_loss", lambda a, b: F.mse_loss(a, b) + F.mse_loss(a, b, reduction="sum")
       + F.mse_loss(a, b, reduction="none").sum(), t(3, 4), t(3, 4))


def _bn_module(module):
    """A norm module in eval mode with running statistics other than 0 and 1."""
    with torch.no_grad():
        module.running_mean.uniform_(-1, 1)
        module.running_var.uniform_(0.5, 2)
        if module.weight is not None:
            module.weight.uniform_(-2, 2)
            module.bias.uniform_(-1, 1)
    return module.eval()


_BATCH_NORM = _bn_module(torch.nn.BatchNorm2d(3))
_BATCH_NORM_NOAFFINE = _bn_module(torch.nn.BatchNorm1d(4, affine=False))
_GROUP_NORM = torch.nn.GroupNorm(2, 4)
_INSTANCE_NORM = torch.nn.InstanceNorm2d(3, affine=True)
sample("torch.nn.functional.batch_norm", "batch_norm_eval", lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b),
       t(2, 3, 4, 4), t(3), pos(3), t(3), t(3))
sample("torch.nn.functional.batch_norm", "batch_norm_eval_partial_affine", lambda x, m, v, w, b: (
       F.batch_norm(x, m, v, eps=1e-3), F.batch_norm(x, m, v, w), F.batch_norm(x, m, v, bias=b)), t(4, 3), t(3), pos(3),
       t(3), t(3))
sample("torch.nn.functional.batch_norm", "batch_norm_eval_cl", lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, False),
       cl(2, 3, 4, 5), t(3), pos(3), t(3), t(3))
sample("torch.nn.functional.batch_norm", "batch_norm_eval_5d_empty", lambda x, e, m, v: (F.batch_norm(x, m, v),
       F.batch_norm(e, m, v)), t(1, 3, 2, 3, 4), t(0, 3, 4), t(3), pos(3))
sample("torch.nn.functional.batch_norm", "batch_norm_mixed_dtypes", lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b),
       t(2, 3, 4, 4), t(3, dtype=F32), pos(3, dtype=F32), t(3, dtype=F32), t(3, dtype=F32), dtypes=(F16, BF16))
sample("torch.nn.functional.batch_norm", "batch_norm_module_eval", lambda x, y: _BATCH_NORM(x).sum()
       + _BATCH_NORM_NOAFFINE(y).sum(), t(2, 3, 5, 5), t(3, 4, 6), dtypes=ONLY_F32)
sample("torch.nn.functional.batch_norm", "batch_norm_batch_stats", lambda x, w, b: F.batch_norm(x, None, None, w, b, True)
       + F.batch_norm(x, None, None, training=True, eps=0.1), t(4, 3, 5), t(3), t(3))
sample("torch.nn.functional.batch_norm", "batch_norm_train_running_stats",
       lambda x, m, v: F.batch_norm(x, m, v, training=True, momentum=0.2), t(4, 3, 5), t(3), pos(3),
       decomposes=False, why_not="running statistics in place")
sample("torch.nn.functional.instance_norm", "instance_norm", lambda x, w, b: F.instance_norm(x)
       + F.instance_norm(x, weight=w, bias=b, eps=1e-3), t(2, 3, 4, 5), t(3), t(3))
sample("torch.nn.functional.instance_norm", "instance_norm_running", lambda x, m, v, w: F.instance_norm(
       x, m, v, w, use_input_stats=False), cl(2, 3, 4, 4), t(3), pos(3), t(3))
sample("torch.nn.functional.instance_norm", "instance_norm_module", lambda x: _INSTANCE_NORM(x), t(2, 3, 4, 4),
       dtypes=ONLY_F32)
sample("torch.nn.functional.instance_norm", "instance_norm_update_running", lambda x, m, v: F.instance_norm(x, m, v),
       t(2, 3, 6), t(3), pos(3), dtypes=ONLY_F32, decomposes=False, why_not="running statistics in place")
sample("torch.nn.functional.group_norm", "group_norm", lambda x, w, b: F.group_norm(x, 2, w, b) + F.group_norm(x, 1)
       + F.group_norm(x, 4, eps=1e-3), t(2, 4, 3, 3), t(4), t(4))
sample("torch.nn.functional.group_norm", "group_norm_2d_cl", lambda x, y, w: (F.group_norm(x, 3, w), F.group_norm(y, 2)),
       t(2, 6), cl(2, 4, 3, 5), t(6))
sample("torch.nn.functional.group_norm", "group_norm_module", lambda x: _GROUP_NORM(x), t(2, 4, 6), dtypes=ONLY_F32)

# --- library calls ---------------------------------------------------------------------------

sample("torch.nn.functional.linear", "linear", lambda x, w, b: F.linear(x, w, b) + F.linear(x, w), t(2, 3, 8), t(4, 8),
       t(4))
_LINEAR = torch.nn.Linear(8, 4)
_EMBEDDING = torch.nn.Embedding(10, 4)
sample("torch.nn.functional.linear", "linear_module", lambda x: _LINEAR(x), t(3, 8), dtypes=ONLY_F32)
sample("torch.matmul", "matmul", lambda a, b: a @ b + torch.matmul(a, b) + a.matmul(b), t(2, 3, 4), nt(4, 5))
sample("torch.Tensor.__rmatmul__", "rmatmul", lambda a, b: b.__rmatmul__(a), t(3, 4), t(4, 2))
sample("torch.bmm", "bmm", lambda a, b: torch.bmm(a, b) + a.bmm(b), t(2, 3, 4), t(2, 4, 5))
sample("torch.mm", "mm", lambda a, b: torch.mm(a, b) + a.mm(b), t(3, 4), sl(4, 5))
sample("torch.baddbmm", "baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, alpha=0.5) + c.baddbmm(a, b), t(2, 3, 5),
       t(2, 3, 4), t(2, 4, 5))
sample("torch.addmm", "addmm", lambda c, a, b: torch.addmm(c, a, b) + c.addmm(a, b, beta=0.5), t(5), t(3, 4), t(4, 5))
sample("torch.einsum", "einsum", lambda a, b: torch.einsum("bij,bjk->bik", a, b), t(2, 3, 4), t(2, 4, 5))
sample("torch.nn.functional.embedding", "embedding", lambda i, w: F.embedding(i, w) * 2, ints(2, 3, high=10), t(10, 4))
sample("torch.nn.functional.embedding", "embedding_module", lambda i: _EMBEDDING(i), ints(2, 3, high=10),
       dtypes=ONLY_F32)
sample("torch.nn.functional.scaled_dot_product_attention", "sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
       t(2, 2, 4, 8), t(2, 2, 4, 8), t(2, 2, 4, 8))
sample("torch.nn.functional.scaled_dot_product_attention", "sdpa_causal",
       lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), t(1, 2, 5, 8), t(1, 2, 5, 8),
       t(1, 2, 5, 8))
sample("torch.nn.functional.scaled_dot_product_attention", "sdpa_mask",
       lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m) + F.scaled_dot_product_attention(
           q, k, v, attn_mask=m.logical_not().float() * -1e4),
       t(1, 2, 5, 8), t(1, 2, 5, 8), t(1, 2, 5, 8), bools(5, 5))
sample("torch.nn.functional.conv1d", "conv1d", lambda x, w, b: F.conv1d(x, w, b, padding=1), t(2, 3, 8), t(4, 3, 3), t(4),
       dtypes=(F32, BF16))
sample("torch.nn.functional.conv2d", "conv2d", lambda x, w: F.conv2d(x, w, stride=2), t(1, 3, 6, 6), t(4, 3, 3, 3),
       dtypes=(F32, BF16))
_CONV2D = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
_CONV_T2D = torch.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)
sample("torch.nn.functional.conv2d", "conv2d_groups_dilation", lambda x, w, d: (F.conv2d(x, w, None, 1, 2, 2, 2),
       F.conv2d(x, d, padding="same", groups=4)), t(1, 4, 7, 7), t(6, 2, 3, 3), t(4, 1, 3, 3))
sample("torch.nn.functional.conv2d", "conv2d_depthwise_cl", lambda x, w, b: F.conv2d(x, w, b, (2, 1), (1, 0), groups=4),
       cl(2, 4, 6, 6), t(4, 1, 3, 3), t(4))
sample("torch.nn.functional.conv2d", "conv2d_module", lambda x: _CONV2D(x), t(2, 4, 8, 8), dtypes=ONLY_F32)
sample("torch.nn.functional.conv3d", "conv3d", lambda x, w, b: (F.conv3d(x, w, b, stride=(1, 2, 2), padding=1),
       F.conv3d(x, w, stride=2, padding="valid", dilation=1)), t(1, 2, 4, 5, 5), t(3, 2, 3, 3, 3), t(3),
       dtypes=(F32, BF16))
sample("torch.nn.functional.conv3d", "conv3d_groups_cl", lambda x, w: F.conv3d(x, w, groups=2, dilation=(1, 2, 1)),
       cl(1, 4, 3, 6, 4), t(2, 2, 2, 2, 2), dtypes=(F32, BF16))
sample("torch.nn.functional.conv_transpose1d", "conv_transpose1d", lambda x, w, b: F.conv_transpose1d(x, w, b, 2, 1, 1)
       + F.conv_transpose1d(x, w, stride=2, padding=1, output_padding=1, dilation=1), t(2, 3, 6), t(3, 4, 3), t(4),
       dtypes=(F32, BF16))
sample("torch.nn.functional.conv_transpose2d", "conv_transpose2d", lambda x, w: (F.conv_transpose2d(x, w, None, 1, 0, 0, 2),
       F.conv_transpose2d(x, w, groups=2, dilation=2, stride=1)), t(1, 4, 5, 5), t(4, 3, 3, 3), dtypes=(F32, BF16))
sample("torch.nn.functional.conv_transpose2d", "conv_transpose2d_module_cl", lambda x: _CONV_T2D(x), cl(2, 4, 4, 4),
       dtypes=ONLY_F32)
sample("torch.nn.functional.conv_transpose3d", "conv_transpose3d", lambda x, w, b: F.conv_transpose3d(x, w, b, stride=2,
       padding=(0, 1, 1)), t(1, 2, 3, 3, 3), t(2, 3, 2, 3, 3), t(3), dtypes=(F32, BF16))

# --- pooling and resampling ------------------------------------------------------------------

_MAX_POOL = torch.nn.MaxPool2d(3, 2, 1)
_AVG_POOL = torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False)
sample("torch.nn.functional.max_pool1d", "max_pool1d", lambda x: (F.max_pool1d(x, 3, 2, 1) + torch.max_pool1d(x, 3, 2, 1),
       F.max_pool1d(x, 2, ceil_mode=True, dilation=2)), t(2, 3, 9))
sample("torch.nn.functional.max_pool2d", "max_pool2d", lambda x: (F.max_pool2d(x, 2), F.max_pool2d(x, (3, 2), (2, 1), 1),
       torch.max_pool2d(x, 3, 2, 1, 2, True), F.max_pool2d(x, 3, ceil_mode=True)), t(2, 3, 7, 8))
sample("torch.nn.functional.max_pool2d", "max_pool2d_module_cl", lambda x: _MAX_POOL(x), cl(2, 3, 8, 8))
sample("torch.nn.functional.max_pool3d", "max_pool3d", lambda x: (F.max_pool3d(x, 2) + torch.max_pool3d(x, 2, 2, 0, 1, False),
       F.max_pool3d(x, 3, 2, 1, ceil_mode=True)), t(1, 2, 4, 5, 5))
sample("torch.nn.functional.max_pool1d_with_indices", "max_pool1d_with_indices",
       lambda x: F.max_pool1d(x, 3, 2, return_indices=True), t(2, 3, 8))
sample("torch.nn.functional.max_pool2d_with_indices", "max_pool2d_with_indices",
       lambda x: torch.nn.MaxPool2d(2, return_indices=True)(x), t(1, 3, 6, 5))
sample("torch.nn.functional.max_pool3d_with_indices", "max_pool3d_with_indices",
       lambda x: F.max_pool3d(x, 2, ceil_mode=True, return_indices=True), t(1, 2, 3, 4, 5))
sample("torch.nn.functional.avg_pool1d", "avg_pool1d", lambda x: (F.avg_pool1d(x, 3, 2, 1) + F.avg_pool1d(x, 3, 2, 1,
       count_include_pad=False), F.avg_pool1d(x, 3, 2, 1, ceil_mode=True)), t(2, 3, 8))
sample("torch.nn.functional.avg_pool2d", "avg_pool2d", lambda x: (F.avg_pool2d(x, 2), F.avg_pool2d(x, 3, 2, 1, True, False),
       F.avg_pool2d(x, (3, 2), divisor_override=3)), t(2, 3, 7, 6))
sample("torch.nn.functional.avg_pool2d", "avg_pool2d_module_cl", lambda x: _AVG_POOL(x), cl(2, 3, 8, 8))
sample("torch.nn.functional.avg_pool3d", "avg_pool3d", lambda x: F.avg_pool3d(x, 2) + F.avg_pool3d(x, 3, 2, 1,
       count_include_pad=False, divisor_override=None), t(1, 2, 4, 4, 4), dtypes=ONLY_F32)
sample("torch.nn.functional.adaptive_avg_pool1d", "adaptive_avg_pool1d", lambda x: (F.adaptive_avg_pool1d(x, 1),
       F.adaptive_avg_pool1d(x, 4), torch.nn.AdaptiveAvgPool1d((2,))(x)), t(2, 3, 8))
sample("torch.nn.functional.adaptive_avg_pool1d", "adaptive_avg_pool1d_uneven", lambda x: F.adaptive_avg_pool1d(x, 3),
       t(2, 3, 8), dtypes=ONLY_F32, decomposes=False, why_not="does not divide")
sample("torch.nn.functional.adaptive_avg_pool2d", "adaptive_avg_pool2d_global", lambda x, y: F.adaptive_avg_pool2d(x, 1)
       + torch.nn.AdaptiveAvgPool2d((1, 1))(x) + F.adaptive_avg_pool2d(y, (1, 1)).sum(), t(2, 3, 5, 7), t(3, 4, 4))
sample("torch.nn.functional.adaptive_avg_pool2d", "adaptive_avg_pool2d_divides", lambda x: (F.adaptive_avg_pool2d(x, (2, 3)),
       F.adaptive_avg_pool2d(x, (None, 2)), F.adaptive_avg_pool2d(x, (4, 6))), t(2, 3, 4, 6))
sample("torch.nn.functional.adaptive_avg_pool2d", "adaptive_avg_pool2d_cl_empty", lambda x, e: (F.adaptive_avg_pool2d(x, 1),
       F.adaptive_avg_pool2d(x, 2), F.adaptive_avg_pool2d(e, 1)), cl(2, 3, 4, 4), t(0, 3, 4, 4))
sample("torch.nn.functional.adaptive_avg_pool2d", "adaptive_avg_pool2d_uneven", lambda x: F.adaptive_avg_pool2d(x, (3, 2)),
       t(2, 3, 7, 4), dtypes=ONLY_F32, decomposes=False, why_not="does not divide")
sample("torch.nn.functional.adaptive_avg_pool3d", "adaptive_avg_pool3d", lambda x: (F.adaptive_avg_pool3d(x, 1),
       F.adaptive_avg_pool3d(x, (2, 1, None)), torch.nn.AdaptiveAvgPool3d(2)(x)), t(1, 2, 4, 4, 6))
sample("torch.nn.functional.adaptive_max_pool1d", "adaptive_max_pool1d", lambda x: F.adaptive_max_pool1d(x, 3)
       + F.adaptive_max_pool1d(x, 1), t(2, 3, 8))
sample("torch.nn.functional.adaptive_max_pool2d", "adaptive_max_pool2d", lambda x: (F.adaptive_max_pool2d(x, (3, 2)),
       torch.nn.AdaptiveMaxPool2d(1)(x)), t(2, 3, 7, 4))
sample("torch.nn.functional.adaptive_max_pool3d", "adaptive_max_pool3d", lambda x: F.adaptive_max_pool3d(x, (2, 3, 1)),
       t(1, 2, 4, 5, 3))
sample("torch.nn.functional.adaptive_max_pool1d_with_indices", "adaptive_max_pool1d_with_indices",
       lambda x: F.adaptive_max_pool1d(x, 3, return_indices=True), t(2, 3, 8))
sample("torch.nn.functional.adaptive_max_pool2d_with_indices", "adaptive_max_pool2d_with_indices",
       lambda x: torch.nn.AdaptiveMaxPool2d((2, 2), return_indices=True)(x), t(1, 3, 5, 4))
sample("torch.nn.functional.adaptive_max_pool3d_with_indices", "adaptive_max_pool3d_with_indices",
       lambda x: F.adaptive_max_pool3d(x, 2, return_indices=True), t(1, 2, 4, 4, 3))
sample("torch.nn.functional.interpolate", "interpolate", lambda x: (F.interpolate(x, scale_factor=2),
       F.interpolate(x, size=(5, 7), mode="bilinear"), F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
       F.interpolate(x, size=6, mode="nearest-exact"), torch.nn.Upsample(scale_factor=2, mode="bicubic")(x)),
       t(2, 3, 4, 4))
sample("torch.nn.functional.interpolate", "interpolate_1d_3d", lambda x, y: (F.interpolate(x, scale_factor=2, mode="linear"),
       F.interpolate(y, size=(4, 4, 6), mode="trilinear"), F.interpolate(x, size=3, mode="area")), t(2, 3, 6),
       t(1, 2, 2, 3, 3))
sample("torch.nn.functional.interpolate", "interpolate_cl_antialias", lambda x: F.interpolate(x, size=(3, 3),
       mode="bilinear", antialias=True), cl(2, 3, 8, 8), dtypes=ONLY_F32)
sample("torch.nn.functional.interpolate", "upsample", lambda x: F.upsample(x, scale_factor=2, mode="bilinear"), t(1, 2, 3, 3))
sample("torch.nn.functional.interpolate", "upsample_nearest", lambda x: F.upsample_nearest(x, scale_factor=2)
       + torch.nn.UpsamplingNearest2d(scale_factor=2)(x), t(1, 2, 3, 3))
sample("torch.nn.functional.interpolate", "upsample_bilinear", lambda x: F.upsample_bilinear(x, size=(5, 5))
       + torch.nn.UpsamplingBilinear2d(size=(5, 5))(x), t(1, 2, 3, 3))

# --- in-place ops (traced as new values) ----------------------------------------------------


def _iadd(x, y):
    x = x.clone()
    x += y
    return x


def _add_(x, y):
    x = x * 1
    x.add_(y).mul_(2)
    return x


def _setitem(x):
    x = x.clone()
    x[..., 0] = 1
    return x * 2


def _inplace_input(x, y):
    x += y
    return x * 2


sample("torch.add", "inplace_iadd", _iadd, t(3, 4), t(4))
sample("torch.add", "inplace_add_", _add_, t(3, 4), t(3, 4))
sample("torch.nn.functional.relu", "inplace_relu", lambda x: F.relu(x * 1, inplace=True) + 1, t(3, 4))
sample("setitem", "inplace_setitem", _setitem, t(3, 4))
sample("torch.add", "inplace_on_input", _inplace_input, t(3, 4), t(3, 4))


# --- indexing, layout, special functions, scans, linear algebra, creation ------------------
FLOATS_OR_SKIP = FLOATS  # eager skips the dtypes the CPU lacks for an op
# One sample a symbol of compiler/ops/torch_ops/{indexing,layout,special,statistics,scans,
# linalg,spectral,creation}.py, calling each torch callable it maps (function and method).


def each(prefix, calls: dict, *args, **kw):
    """One sample per op of `calls` (op -> fn), all on the same argument recipes."""
    for op, fn in calls.items():
        sample(op, f"{prefix}_{op.removeprefix('torch.').replace('.', '_')}", fn, *args, **kw)


def _setitem_cases(x, i, m):
    x = x.clone()
    x[1:3, 0] = 2.0
    x[i] = x[0] * 3
    x[m] = 0.5
    return x


sample("operator.getitem", "getitem_tensor_dims", lambda a, i, j: (a[:, i], a[0, i], a[i, :, 0], a[..., j], a[i, j],
       a[[0, 2]], a[:, [3, 0, 1]], a[1:, i, ::2]), t(3, 4, 5), ints(2, 2, low=-3, high=3), ints(2, high=3))
sample("setitem", "setitem_tensor_keys", _setitem_cases, t(4, 3), ints(2, high=4), bools(4, 3), dtypes=FLOATS_OR_SKIP)
sample("torch.index_select", "index_select", lambda a, i: torch.index_select(a, 1, i) + a.index_select(-1, i), t(3, 5),
       ints(4, high=5))
sample("torch.gather", "gather", lambda a, i: torch.gather(a, 1, i) + a.gather(1, i), t(3, 5), ints(2, 3, high=5))
sample("torch.take_along_dim", "take_along_dim", lambda a, i: (torch.take_along_dim(a, i, 1), a.take_along_dim(i)),
       t(3, 5), ints(1, 2, high=5))
sample("torch.take", "take", lambda a, i: torch.take(a, i) + a.take(i), t(3, 5), ints(2, 2, low=-15, high=15))
sample("torch.masked_select", "masked_select", lambda a, m: (torch.masked_select(a, m), a.masked_select(m)), t(3, 4),
       bools(3, 4))
sample("torch.nonzero", "nonzero", lambda a: (torch.nonzero(a > 0), (a > 0).nonzero()), t(3, 4))
sample("torch.nonzero_static", "nonzero_static", lambda a: (torch.nonzero_static(a > 0, size=5),
       (a > 0).nonzero_static(size=3)), t(3, 4))
sample("torch.argwhere", "argwhere", lambda a: (torch.argwhere(a > 0), a.argwhere()), t(3, 4))
sample("torch.masked_scatter", "masked_scatter", lambda a, m, s: torch.masked_scatter(a, m, s) + a.masked_scatter(m, s),
       t(3, 4), bools(3, 4), t(12))
sample("torch.index_put", "index_put", lambda a, i, v: torch.index_put(a, (i,), v) + a.index_put((i,), v, True),
       t(5, 3), ints(2, high=5), t(3))
sample("torch.index_add", "index_add", lambda a, i, s: torch.index_add(a, 0, i, s) + a.index_add(0, i, s, alpha=2),
       t(5, 3), ints(2, high=5), t(2, 3))
sample("torch.index_copy", "index_copy", lambda a, s: torch.index_copy(a, 0, torch.tensor([3, 1]), s)
       + a.index_copy(0, torch.tensor([0, 4]), s), t(5, 3), t(2, 3))
sample("torch.index_fill", "index_fill", lambda a, i: torch.index_fill(a, 1, i, -1.0) + a.index_fill(0, i, 2.0),
       t(3, 3), ints(2, high=3))
sample("torch.index_reduce", "index_reduce", lambda a, i, s: torch.index_reduce(a, 0, i, s, "amax")
       + a.index_reduce(0, i, s, "prod", include_self=False), t(5, 3), ints(4, high=5), t(4, 3))
sample("torch.scatter", "scatter", lambda a, i, s: torch.scatter(a, 1, i, s) + a.scatter(1, i, 0.5)
       + a.scatter(1, i, s, reduce="add"), t(3, 5), ints(3, 2, high=5), t(3, 2))
sample("torch.scatter_add", "scatter_add", lambda a, i, s: torch.scatter_add(a, 0, i, s) + a.scatter_add(0, i, s),
       t(3, 4), ints(2, 4, high=3), t(2, 4))
sample("torch.scatter_reduce", "scatter_reduce", lambda a, i, s: torch.scatter_reduce(a, 0, i, s, "amax")
       + a.scatter_reduce(0, i, s, "mean", include_self=False), t(3, 4), ints(2, 4, high=3), t(2, 4))
sample("torch.put", "put", lambda a, i, s: torch.put(a, i, s) + a.put(i, s, accumulate=True), t(3, 4),
       ints(3, high=12), t(3))
sample("torch.diagonal_scatter", "diagonal_scatter", lambda a, s: torch.diagonal_scatter(a, s, 1), t(3, 4), t(3))
sample("torch.as_strided_scatter", "as_strided_scatter", lambda a, s: torch.as_strided_scatter(a, s, (2, 2), (1, 2)),
       t(3, 4), t(2, 2))
sample("torch.slice_scatter", "slice_scatter", lambda a, s, u: torch.slice_scatter(a, s, 1, 1, 3)
       + a.slice_scatter(u, 0, 2), t(3, 4), t(3, 2), t(1, 4))
sample("torch.select_scatter", "select_scatter", lambda a, s: torch.select_scatter(a, s, 0, -1) + a.select_scatter(
       s[:3], 1, 0), t(3, 4), t(4))
sample("torch.flip", "flip", lambda a: torch.flip(a, (0, 2)) + a.flip(1) + a.flip(0, 1), nt(2, 3, 3))
sample("torch.fliplr", "fliplr", lambda a: torch.fliplr(a) + a.fliplr(), t(3, 4))
sample("torch.flipud", "flipud", lambda a: torch.flipud(a) + a.flipud(), t(3, 4))
sample("torch.diff", "diff", lambda a, p: (torch.diff(a), a.diff(2, 0), torch.diff(a, dim=1, prepend=p, append=p),
       torch.diff(a > 0)), t(3, 4), t(3, 1))
sample("torch.roll", "roll", lambda a: torch.roll(a, 1) + a.roll((1, -2), (0, 1)) + a.roll(5, 1), t(3, 4))
sample("torch.movedim", "movedim", lambda a: torch.movedim(a, 0, -1) + torch.moveaxis(a, (0, 1), (2, 0)).permute(
       1, 2, 0).movedim(2, 0).moveaxis(0, 2), t(2, 2, 2))
sample("torch.atleast_1d", "atleast_1d", lambda a, b: (torch.atleast_1d(a), torch.atleast_1d(a, b)), t(), t(3))
sample("torch.atleast_2d", "atleast_2d", lambda a, b: (torch.atleast_2d(a), torch.atleast_2d((a, b))), t(3), t())
sample("torch.atleast_3d", "atleast_3d", lambda a, b: torch.atleast_3d(a, b), t(3), t(2, 3))
sample("torch.hstack", "hstack", lambda a, b: (torch.hstack([a, b]), torch.hstack((a[0], b[0]))), t(3, 2), t(3, 4))
sample("torch.vstack", "vstack", lambda a, b: torch.vstack([a, b]) + torch.row_stack((a, b)), t(4), t(2, 4))
sample("torch.dstack", "dstack", lambda a, b: torch.dstack([a, b]), t(2, 3), t(2, 3, 2))
sample("torch.column_stack", "column_stack", lambda a, b: torch.column_stack([a, b]), t(3), t(3, 2))
sample("torch.tile", "tile", lambda a: (torch.tile(a, (2,)), a.tile(1, 1), a.tile((2, 1, 1))), t(2, 3))
sample("torch.ravel", "ravel", lambda a: torch.ravel(a) + a.ravel(), nt(3, 4))
sample("torch.Tensor.reshape_as", "reshape_as", lambda a, b: a.reshape_as(b) + b, nt(3, 4), t(2, 6))
sample("torch.tensor_split", "tensor_split", lambda a: torch.tensor_split(a, 3, 1) + a.tensor_split([1, -2, 9], 1),
       t(3, 7))
sample("torch.hsplit", "hsplit", lambda a: torch.hsplit(a, 2) + a.hsplit([1, 3]), t(3, 4))
sample("torch.vsplit", "vsplit", lambda a: torch.vsplit(a, 2) + a.vsplit([1]), t(4, 3))
sample("torch.dsplit", "dsplit", lambda a: torch.dsplit(a, 2) + a.dsplit([1]), t(2, 3, 4))
sample("torch.split_with_sizes", "split_with_sizes", lambda a: torch.split_with_sizes(a, [1, 3], 1)
       + a.split_with_sizes([2, 2], -1) + torch.unsafe_split_with_sizes(a, [2, 1]) + torch.split_with_sizes_copy(
       a, [1, 2]), t(3, 4))
sample("torch.unsafe_split", "unsafe_split", lambda a: torch.unsafe_split(a, 2, 1) + a.unsafe_split(2), t(3, 4))
sample("torch.unsafe_chunk", "unsafe_chunk", lambda a: torch.unsafe_chunk(a, 2, 1) + a.unsafe_chunk(3), t(3, 4))
sample("torch.broadcast_tensors", "broadcast_tensors", lambda a, b: torch.broadcast_tensors(a, b), t(3, 1), t(4))
sample("torch.meshgrid", "meshgrid", lambda a, b, c: torch.meshgrid(a, b, indexing="ij") + torch.meshgrid(
       [a, b, c], indexing="xy"), t(3), t(4), t(2))
sample("torch.Tensor.sum_to_size", "sum_to_size", lambda a: (a.sum_to_size(3, 1), a.sum_to_size((1, 4)),
       a.sum_to_size(4)), t(2, 3, 4))
each("copy", {
    "torch.expand_copy": lambda a: torch.expand_copy(a, (2, 3, 4)), "torch.permute_copy": lambda a: torch.permute_copy(
        a, (1, 0)), "torch.squeeze_copy": lambda a: torch.squeeze_copy(a[None]),
    "torch.unsqueeze_copy": lambda a: torch.unsqueeze_copy(a, 1), "torch.t_copy": lambda a: torch.t_copy(a),
    "torch.transpose_copy": lambda a: torch.transpose_copy(a, 0, 1), "torch.view_copy": lambda a: torch.view_copy(a, (12,)),
    "torch.unbind_copy": lambda a: torch.unbind_copy(a), "torch.alias_copy": lambda a: torch.alias_copy(a) * 2,
    "torch.narrow_copy": lambda a: (torch.narrow_copy(a, 1, 1, 2), a.narrow_copy(0, 0, 2))}, t(3, 4))
each("diags", {
    "torch.diagonal": lambda a, v: (torch.diagonal(a), a.diagonal(1)), "torch.diagonal_copy": lambda a, v:
    torch.diagonal_copy(a, -1), "torch.linalg.diagonal": lambda a, v: torch.linalg.diagonal(a),
    "torch.diag": lambda a, v: (torch.diag(a), a.diag(1), torch.diag(v)), "torch.diag_embed": lambda a, v: (
        torch.diag_embed(v), v.diag_embed(1)), "torch.diagflat": lambda a, v: (torch.diagflat(a), a.diagflat())},
     t(3, 4), t(3))
sample("torch.block_diag", "block_diag", lambda a, b: torch.block_diag(a, b), t(2, 2), t(1, 3))
each("unfold", {"torch.Tensor.unfold": lambda a: a.unfold(1, 2, 1),
                 "torch.unfold_copy": lambda a: torch.unfold_copy(a, 0, 2, 1)}, t(3, 4))
each("strided", {"torch.as_strided": lambda a: (torch.as_strided(a, (2, 2), (1, 2)), a.as_strided((3,), (2,))),
                  "torch.as_strided_copy": lambda a: torch.as_strided_copy(a, (2,), (3,))}, t(3, 4))
sample("torch.rot90", "rot90", lambda a: torch.rot90(a) + a.rot90(2).rot90(2), t(3, 3))
sample("torch.repeat_interleave", "repeat_interleave", lambda a, r: (torch.repeat_interleave(a, 2, 0),
       a.repeat_interleave(r, dim=1)), t(2, 3), ints(3, low=1, high=3))
sample("torch.constant_pad_nd", "constant_pad_nd", lambda a: torch.constant_pad_nd(a, (1, 2), 0.5), t(3, 4))
sample("torch.cartesian_prod", "cartesian_prod", lambda a, b: torch.cartesian_prod(a, b), t(3), t(2))
sample("torch.combinations", "combinations", lambda a: torch.combinations(a, 2), t(4))
sample("torch._chunk_cat", "chunk_cat", lambda a, b: torch._chunk_cat([a, b], 1, 2), t(2, 4), t(2, 2),
       dtypes=FLOATS_OR_SKIP)

# elementwise math: composites, then library calls (with each alias)
sample("torch.frac", "frac", lambda a: torch.frac(a * 3) + a.frac(), t(3, 4))
sample("torch.deg2rad", "deg2rad", lambda a: torch.deg2rad(a) + a.deg2rad(), t(3, 4))
sample("torch.rad2deg", "rad2deg", lambda a: torch.rad2deg(a) + a.rad2deg(), t(3, 4))
sample("torch.positive", "positive", lambda a: torch.positive(a) + a.positive(), t(3, 4))
sample("torch.sgn", "sgn", lambda a: torch.sgn(a) + a.sgn(), t(3, 4))
sample("torch.log10", "log10", lambda a: torch.log10(a) + a.log10(), pos(3, 4))
sample("torch.erfc", "erfc", lambda a: torch.erfc(a) + a.erfc() + torch.special.erfc(a), t(3, 4))
sample("torch.special.ndtr", "ndtr", lambda a: torch.special.ndtr(a), t(3, 4))
sample("torch.logical_xor", "logical_xor", lambda a, b: torch.logical_xor(a, b) | a.logical_xor(b > 0), bools(3, 4),
       t(3, 4))
each("inf", {n: (lambda a, _n=n.split(".")[-1]: (getattr(torch, _n)(a), getattr(a, _n)()))
           for n in ("torch.isinf", "torch.isposinf", "torch.isneginf", "torch.isfinite", "torch.isreal")},
     t(3, 4, low=-1e38, high=1e38))
for _op in ("isinf", "isposinf", "isneginf", "isfinite"):
    sample(f"torch.{_op}", f"{_op}_nan_inf", lambda a, _n=_op: getattr(torch, _n)(a.log() * a.exp()), t(3, 4))
sample("torch.nan_to_num", "nan_to_num", lambda a: torch.nan_to_num(a.log()) + a.log().nan_to_num(1.0, 2.0, -2.0),
       t(3, 4))
sample("torch.fmax", "fmax", lambda a, b: (torch.fmax(a.log(), b), a.fmax(b)), t(3, 4), t(4))
sample("torch.fmin", "fmin", lambda a, b: (torch.fmin(a, b.log()), a.fmin(b)), t(3, 4), t(3, 4))
sample("torch.xlogy", "xlogy", lambda a, b: torch.xlogy(a, b) + a.xlogy(2.0) + torch.special.xlogy(a * 0, b),
       t(3, 4), pos(3, 4))
sample("torch.special.xlog1py", "xlog1py", lambda a, b: torch.special.xlog1py(a, b), t(3, 4), pos(3, 4))
sample("torch.logaddexp", "logaddexp", lambda a, b: torch.logaddexp(a, b) + a.logaddexp(b * 10), t(3, 4), t(4))
sample("torch.logaddexp2", "logaddexp2", lambda a, b: torch.logaddexp2(a, b) + a.logaddexp2(b), t(3, 4), t(3, 4))
sample("torch.logit", "logit", lambda a: torch.logit(a) + a.logit(0.1) + torch.special.logit(a, 1e-3), t(3, 4, low=0.05,
       high=0.95))
sample("torch.sinc", "sinc", lambda a: torch.sinc(a) + a.sinc() + torch.special.sinc(a * 0), t(3, 4))
sample("torch.special.entr", "entr", lambda a: torch.special.entr(a), t(3, 4, low=-0.5, high=2))
sample("torch.float_power", "float_power", lambda a, b: torch.float_power(a, b) + a.float_power(2), pos(3, 4), t(4))
sample("torch.floor_divide", "floor_divide", lambda a, b: torch.floor_divide(a, b) + a.floor_divide(0.7) + a // b,
       t(3, 4), pos(3, 4), dtypes=ONLY_F32)
sample("torch.Tensor.__rmod__", "rmod", lambda a: 2.5 % a, pos(3, 4), dtypes=FLOATS_OR_SKIP)
sample("torch.addcdiv", "addcdiv", lambda a, b, c: torch.addcdiv(a, b, c, value=0.5) + a.addcdiv(b, c), t(3, 4), t(4),
       pos(3, 1))
sample("torch.isclose", "isclose", lambda a, b: (torch.isclose(a, b, atol=0.5), a.isclose(a.log(), equal_nan=True)),
       t(3, 4), t(3, 4))
_DOMAINS = {"acosh": (1.0, 3.0), "atanh": (-0.9, 0.9), "acos": (-0.9, 0.9), "asin": (-0.9, 0.9), "erfinv": (-0.9, 0.9),
            "lgamma": (0.1, 3.0), "digamma": (0.1, 3.0)}
_SPECIAL_ALIASES = ("erfinv", "digamma", "i0")
for _name in ("acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "erfinv", "lgamma", "digamma", "i0",
              "signbit", "angle"):
    _lo, _hi = _DOMAINS.get(_name, (-2.0, 2.0))
    sample(f"torch.{_name}", f"{_name}_library", lambda a, _n=_name: (getattr(torch, _n)(a), getattr(a, _n)())
           + ((getattr(torch.special, _n)(a),) if _n in _SPECIAL_ALIASES else ()), T((3, 4), low=_lo, high=_hi))
for _name in ("atan2", "fmod", "hypot", "copysign", "nextafter", "heaviside", "igamma", "igammac"):
    sample(f"torch.{_name}", f"{_name}_library", lambda a, b, _n=_name: (getattr(torch, _n)(a, b), getattr(a, _n)(b)),
           pos(3, 4), t(3, 4) if _name not in ("igamma", "igammac") else pos(3, 4))
sample("torch.ldexp", "ldexp", lambda a, e: torch.ldexp(a, e) + a.ldexp(e), t(3, 4), ints(3, 4, low=-3, high=3))
sample("torch.mvlgamma", "mvlgamma", lambda a: torch.mvlgamma(a, 2) + a.mvlgamma(1), t(3, 4, low=1.0, high=3.0))
sample("torch.frexp", "frexp", lambda a: (torch.frexp(a), a.frexp()), t(3, 4), dtypes=FLOATS_OR_SKIP)
sample("torch.polygamma", "polygamma", lambda a: torch.polygamma(1, a) + a.polygamma(2), pos(3, 4))
_SPECIAL_ARGS = {"polygamma": (1,), "multigammaln": (2,)}
for _name in ("airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "erfcx", "i0e", "i1", "i1e", "log_ndtr",
              "ndtri", "modified_bessel_i0", "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1",
              "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0", "gammaln", "psi"):
    sample(f"torch.special.{_name}", f"special_{_name}", lambda a, _n=_name: getattr(torch.special, _n)(a),
           t(3, 4, low=0.05, high=0.95), dtypes=FLOATS_OR_SKIP)
sample("torch.special.polygamma", "special_polygamma", lambda a: torch.special.polygamma(1, a), pos(3, 4),
       dtypes=FLOATS_OR_SKIP)
sample("torch.special.multigammaln", "special_multigammaln", lambda a: torch.special.multigammaln(a, 2),
       t(3, 4, low=1.0, high=3.0), dtypes=FLOATS_OR_SKIP)
sample("torch.special.zeta", "special_zeta", lambda a, b: torch.special.zeta(a, b), t(3, 4, low=1.5, high=3), pos(3, 4),
       dtypes=FLOATS_OR_SKIP)
for _name in ("chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
              "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p",
              "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
              "shifted_chebyshev_polynomial_w"):
    sample(f"torch.special.{_name}", f"special_{_name}", lambda a, _n=_name: getattr(torch.special, _n)(a, 3),
           t(3, 4, low=-1, high=1), dtypes=FLOATS_OR_SKIP)

# summaries, scans and sorts
sample("torch.all", "all", lambda a, m: (torch.all(m), m.all(1), a.all(), torch.all(a > 1, 0, keepdim=True)),
       t(3, 4), bools(3, 4))
sample("torch.any", "any_bool", lambda a, m: (torch.any(m), m.any(1), a.any(), torch.any(a > 1, 0, keepdim=True)),
       t(3, 4), bools(3, 4))
sample("torch.any", "any", lambda a: torch.any(a, (0, 1)), ints(3, 4, high=2, dtype=None))
sample("torch.count_nonzero", "count_nonzero", lambda a: (torch.count_nonzero(a), a.count_nonzero((0, 1)),
       a.count_nonzero(1)), ints(3, 4, high=3, dtype=None))
sample("torch.nansum", "nansum", lambda a: (torch.nansum(a.log()), a.log().nansum(1)), t(3, 4))
sample("torch.nanmean", "nanmean", lambda a: (torch.nanmean(a.log(), 0), a.log().nanmean(-1, keepdim=True)), t(3, 4))
sample("torch.aminmax", "aminmax", lambda a: (torch.aminmax(a), a.aminmax(dim=1), a.aminmax(dim=0, keepdim=True)),
       t(3, 4))
sample("torch.std_mean", "std_mean", lambda a: torch.std_mean(a, 1) + torch.std_mean(a, correction=0), t(3, 8))
sample("torch.cov", "cov", lambda a: (torch.cov(a), a.cov(correction=0)), t(3, 6))
sample("torch.corrcoef", "corrcoef", lambda a: (torch.corrcoef(a), a.corrcoef()), t(2, 5))
for _name, _extra in (("cumsum", (1,)), ("cumprod", (1,)), ("cummax", (0,)), ("cummin", (1,)), ("logcumsumexp", (1,)),
                      ("sort", ()), ("argsort", (0,)), ("msort", ()), ("topk", (2,)), ("kthvalue", (2,)),
                      ("median", ()), ("nanmedian", (1,)), ("mode", (1,)), ("histc", (4,))):
    sample(f"torch.{_name}", f"{_name}_library", lambda a, _n=_name, _x=_extra: (getattr(torch, _n)(a, *_x),
           getattr(a, _n)(*_x)), t(3, 5))
sample("torch.quantile", "quantile", lambda a, q: (torch.quantile(a, 0.3), a.quantile(q, 1)), t(3, 5), T((2,), low=0,
       high=1), dtypes=ONLY_F32)
sample("torch.nanquantile", "nanquantile", lambda a: (torch.nanquantile(a.log(), 0.5), a.nanquantile(0.5, 0, keepdim=True)),
       t(3, 5), dtypes=ONLY_F32)
sample("torch.unique", "unique", lambda a: (torch.unique(a), a.unique(return_counts=True)), ints(3, 5, high=3, dtype=None))
sample("torch.unique_consecutive", "unique_consecutive", lambda a: (torch.unique_consecutive(a, dim=0),
       a.unique_consecutive(return_inverse=True)), ints(4, 2, high=2))
sample("torch.searchsorted", "searchsorted", lambda v: torch.searchsorted(torch.tensor([-1.0, 0.0, 1.0]), v), t(3, 4))
sample("torch.bucketize", "bucketize", lambda v: torch.bucketize(v, torch.tensor([-1.0, 0.0, 1.0])), t(3, 4))
sample("torch.isin", "isin", lambda a, b: torch.isin(a, b), ints(3, 4, high=6), ints(3, high=6), dtypes=FLOATS_OR_SKIP)
sample("torch.histogram", "histogram", lambda a: (torch.histogram(a, 4), a.histogram(3)), t(3, 5), dtypes=FLOATS_OR_SKIP)
sample("torch.bincount", "bincount", lambda a: (torch.bincount(a), a.bincount(minlength=6)), ints(8, high=5),
       dtypes=FLOATS_OR_SKIP)
each("integral", {"torch.cumulative_trapezoid": lambda a: torch.cumulative_trapezoid(a),
                  "torch.trapezoid": lambda a: torch.trapezoid(a, dx=0.5), "torch.trapz": lambda a: torch.trapz(a)}, t(3, 5))

# linear algebra
sample("torch.dot", "dot", lambda a, b: torch.dot(a, b) + a.dot(b) + torch.vdot(a, b) + a.vdot(b), t(5), t(5))
sample("torch.linalg.vecdot", "vecdot", lambda a, b: torch.linalg.vecdot(a, b) + torch.linalg.vecdot(a, b, dim=0).sum(),
       t(3, 4), t(3, 4))
sample("torch.addr", "addr", lambda m, a, b: torch.addr(m, a, b) + m.addr(a, b, beta=0.5, alpha=2)
       + torch.addr(m, a, b, beta=0), t(3, 4), t(3), t(4))
_SPD = lambda a: a @ a.mT + torch.eye(a.shape[-1])  # noqa: E731  (symmetric positive definite)
each("mv", {
    "torch.mv": lambda m, v, c, b1, b2: (torch.mv(m, v), m.mv(v)),
    "torch.addmv": lambda m, v, c, b1, b2: (torch.addmv(c, m, v), c.addmv(m, v, beta=0.5)),
    "torch.addbmm": lambda m, v, c, b1, b2: (torch.addbmm(m[:, :3], b1, b2), m[:, :3].addbmm(b1, b2)),
    "torch.inner": lambda m, v, c, b1, b2: (torch.inner(v, v), m.inner(v)),
    "torch.kron": lambda m, v, c, b1, b2: (torch.kron(m, c[:2]), m.kron(v)),
    "torch.trace": lambda m, v, c, b1, b2: (torch.trace(m), m.trace()),
    "torch.tensordot": lambda m, v, c, b1, b2: torch.tensordot(b1, b2, 1),
    "torch.chain_matmul": lambda m, v, c, b1, b2: torch.chain_matmul(m[:, :3], m[:, :3])},
     t(3, 4), t(4), t(3), t(2, 3, 2), t(2, 2, 3), dtypes=FLOATS_OR_SKIP)
_UPPER = lambda a: a.triu() + 3 * torch.eye(3)  # noqa: E731  (well conditioned, upper triangular)
each("matrix", {
    "torch.cholesky": lambda a: (torch.cholesky(_SPD(a)), _SPD(a).cholesky()),
    "torch.cholesky_inverse": lambda a: (torch.cholesky_inverse(_UPPER(a).mT), _UPPER(a).mT.cholesky_inverse()),
    "torch.cholesky_solve": lambda a: (torch.cholesky_solve(a, _UPPER(a).mT), a.cholesky_solve(_UPPER(a).mT)),
    "torch.qr": lambda a: (torch.qr(a), a.qr()), "torch.svd": lambda a: (torch.svd(a)[1], a.svd()[1]),
    "torch.pinverse": lambda a: (torch.pinverse(a), a.pinverse()),
    "torch.matrix_exp": lambda a: (torch.matrix_exp(a), a.matrix_exp()),
    "torch.logdet": lambda a: (torch.logdet(_SPD(a)), _SPD(a).logdet()), "torch.det": lambda a: (torch.det(a), a.det()),
    "torch.slogdet": lambda a: (torch.slogdet(a), a.slogdet()),
    "torch.triangular_solve": lambda a: (torch.triangular_solve(a, _UPPER(a)), a.triangular_solve(_UPPER(a))),
    "torch.geqrf": lambda a: (torch.geqrf(a), a.geqrf()), "torch.norm": lambda a: (torch.norm(a), a.norm(p=1)),
    "torch.matrix_power": lambda a: (torch.matrix_power(a, 2), a.matrix_power(3)),
    "torch.inverse": lambda a: (torch.inverse(_SPD(a)), _SPD(a).inverse()),
    "torch.renorm": lambda a: (torch.renorm(a, 2, 0, 1.0), a.renorm(1, 1, 0.5)),
    "torch.cross": lambda a: (torch.cross(a, a.flip(0), 0), a.cross(a.flip(0), 1)),
    "torch.dist": lambda a: (torch.dist(a, a.t()), a.dist(a, 1)), "torch.cdist": lambda a: torch.cdist(a, a),
    "torch.lu": lambda a: torch.lu(a)}, t(3, 3), dtypes=FLOATS_OR_SKIP)
_LU = lambda a: torch.linalg.lu_factor(_SPD(a))  # noqa: E731
each("lu", {"torch.lu_solve": lambda a, b: (torch.lu_solve(b, *_LU(a)), b.lu_solve(*_LU(a))),
            "torch.lu_unpack": lambda a, b: torch.lu_unpack(*_LU(a)),
            "torch.linalg.lu_solve": lambda a, b: torch.linalg.lu_solve(*_LU(a), b),
            "torch.ormqr": lambda a, b: (torch.ormqr(*torch.geqrf(a), b), torch.geqrf(a)[0].ormqr(torch.geqrf(a)[1], b))},
     t(3, 3), t(3, 2), dtypes=FLOATS_OR_SKIP)
each("linalg", {f"torch.linalg.{name}": fn for name, fn in {
    "cholesky": lambda a, b: torch.linalg.cholesky(_SPD(a)), "cholesky_ex": lambda a, b: torch.linalg.cholesky_ex(_SPD(a)),
    "cond": lambda a, b: torch.linalg.cond(_SPD(a)), "cross": lambda a, b: torch.linalg.cross(a, a.flip(0)),
    "det": lambda a, b: torch.linalg.det(a), "eig": lambda a, b: torch.linalg.eig(_SPD(a)),
    "eigh": lambda a, b: torch.linalg.eigh(_SPD(a)), "eigvals": lambda a, b: torch.linalg.eigvals(_SPD(a)),
    "eigvalsh": lambda a, b: torch.linalg.eigvalsh(_SPD(a)), "inv": lambda a, b: torch.linalg.inv(_SPD(a)),
    "inv_ex": lambda a, b: torch.linalg.inv_ex(_SPD(a)), "ldl_factor": lambda a, b: torch.linalg.ldl_factor(_SPD(a)),
    "ldl_factor_ex": lambda a, b: torch.linalg.ldl_factor_ex(_SPD(a)),
    "ldl_solve": lambda a, b: torch.linalg.ldl_solve(*torch.linalg.ldl_factor(_SPD(a)), b),
    "lstsq": lambda a, b: torch.linalg.lstsq(_SPD(a), b).solution, "lu": lambda a, b: torch.linalg.lu(a),
    "lu_factor": lambda a, b: torch.linalg.lu_factor(a), "lu_factor_ex": lambda a, b: torch.linalg.lu_factor_ex(a),
    "matrix_norm": lambda a, b: torch.linalg.matrix_norm(a), "matrix_power": lambda a, b: torch.linalg.matrix_power(a, 2),
    "matrix_rank": lambda a, b: torch.linalg.matrix_rank(_SPD(a)), "multi_dot": lambda a, b: torch.linalg.multi_dot(
        [a, a, b]), "norm": lambda a, b: torch.linalg.norm(a), "pinv": lambda a, b: torch.linalg.pinv(_SPD(a)),
    "qr": lambda a, b: torch.linalg.qr(a), "slogdet": lambda a, b: torch.linalg.slogdet(a),
    "solve": lambda a, b: torch.linalg.solve(_SPD(a), b), "solve_ex": lambda a, b: torch.linalg.solve_ex(_SPD(a), b),
    "solve_triangular": lambda a, b: torch.linalg.solve_triangular(_UPPER(a), b, upper=True),
    "svd": lambda a, b: torch.linalg.svd(a)[1], "svdvals": lambda a, b: torch.linalg.svdvals(a),
    "tensorinv": lambda a, b: torch.linalg.tensorinv(_SPD(a), 1),
    "tensorsolve": lambda a, b: torch.linalg.tensorsolve(_SPD(a), b[:, 0]),
    "vander": lambda a, b: torch.linalg.vander(b[:, 0]), "matrix_exp": lambda a, b: torch.linalg.matrix_exp(a),
    "householder_product": lambda a, b: torch.linalg.householder_product(*torch.geqrf(a))}.items()},
     t(3, 3), t(3, 2), dtypes=FLOATS_OR_SKIP)

_MHA = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
sample("torch.nn.functional.multi_head_attention_forward", "multihead_attention", lambda q, k: (_MHA(q, q, q),
       _MHA(q, k, k, average_attn_weights=False)[1]), t(2, 3, 8), t(2, 5, 8), dtypes=ONLY_F32)

# complex numbers, Fourier transforms, small integer casts
for _op in ("byte", "char", "short"):
    sample(f"torch.Tensor.{_op}", f"{_op}_cast", lambda a, _n=_op: getattr(a * 4, _n)() + 1, pos(3, 4))
each("complex", {
    "torch.view_as_complex": lambda a, b: torch.view_as_complex(a),
    "torch.view_as_real": lambda a, b: torch.view_as_real(torch.view_as_complex(a)),
    "torch.complex": lambda a, b: torch.complex(b, b), "torch.polar": lambda a, b: torch.polar(b.abs(), b),
    "torch.Tensor.cfloat": lambda a, b: b.cfloat(), "torch.Tensor.cdouble": lambda a, b: b.cdouble(),
    "torch.Tensor.chalf": lambda a, b: b.chalf().cfloat(),
    "torch.real": lambda a, b: torch.real(b.cfloat()), "torch.imag": lambda a, b: torch.imag(b.cfloat()),
    "torch.conj": lambda a, b: (torch.conj(b.cfloat()), b.cfloat().conj()),
    "torch.conj_physical": lambda a, b: (torch.conj_physical(b.cfloat()), b.cfloat().conj_physical()),
    "torch.resolve_conj": lambda a, b: (torch.resolve_conj(b.cfloat()), b.cfloat().resolve_conj()),
    "torch.resolve_neg": lambda a, b: (torch.resolve_neg(b), b.resolve_neg())}, t(3, 2), t(4), dtypes=FLOATS_OR_SKIP)
_FFT = ("fft", "fft2", "fftn", "ifft", "ifft2", "ifftn", "rfft", "rfft2", "rfftn", "irfft", "irfft2", "irfftn", "hfft",
        "hfft2", "hfftn", "ihfft", "ihfft2", "ihfftn", "fftshift", "ifftshift")
for _name in _FFT:
    sample(f"torch.fft.{_name}", f"fft_{_name}", lambda a, _n=_name: getattr(torch.fft, _n)(a), t(4, 6), dtypes=FLOATS_OR_SKIP)
_STFT = lambda a: torch.stft(a, 8, return_complex=True, window=torch.ones(8))  # noqa: E731
each("spectrogram", {"torch.stft": lambda a: (_STFT(a), a.stft(8, return_complex=True, window=torch.ones(8))),
                     "torch.istft": lambda a: (torch.istft(_STFT(a), 8, window=torch.ones(8)),
                                               _STFT(a).istft(8, window=torch.ones(8)))}, t(32), dtypes=FLOATS_OR_SKIP)

# made from arguments
each("new", {"torch.Tensor.new_zeros": lambda a: (a.new_zeros(2, 3), a.new_zeros(2, dtype=torch.int64)),
             "torch.Tensor.new_ones": lambda a: (a.new_ones((3,)), a.new_ones(1, 4) + a),
             "torch.Tensor.new_full": lambda a: a.new_full((2,), 3.5)}, t(3, 4))
sample("torch.scalar_tensor", "scalar_tensor", lambda a: a + torch.scalar_tensor(2.5) + torch.scalar_tensor(
       3, dtype=torch.int64), t(3, 4))
sample("torch.fill", "fill", lambda a, v: (torch.fill(a, 1.5), torch.fill(a, v)), t(3, 4), t())
sample("torch.eye", "eye", lambda a: a + torch.eye(3, 4) + torch.eye(4, dtype=torch.bool)[:3], t(3, 4))
each("data", {"torch.tensor": lambda a: a + torch.tensor([1.0, 2.0, 3.0, 4.0]),
              "torch.as_tensor": lambda a: a + torch.as_tensor([1, 2, 3, 4]),
              "torch.Tensor.new_tensor": lambda a: a + a.new_tensor([0.5, 0.5, 0.5, 0.5])}, t(3, 4))
each("uninitialised", {"torch.empty": lambda a: torch.empty(2, 3), "torch.empty_like": lambda a: torch.empty_like(a),
                       "torch.empty_strided": lambda a: torch.empty_strided((2, 2), (1, 2)),
                       "torch.empty_permuted": lambda a: torch.empty_permuted((2, 3), (1, 0)),
                       "torch.Tensor.new_empty": lambda a: a.new_empty((2,)),
                       "torch.Tensor.new_empty_strided": lambda a: a.new_empty_strided((2,), (1,))}, t(3, 4), random=True)
sample("torch.linspace", "linspace", lambda a: a + torch.linspace(0, 1, 4), t(3, 4))
sample("torch.logspace", "logspace", lambda a: a * torch.logspace(-1, 1, 4, base=2.0), t(3, 4))
each("random", {
    "torch.rand": lambda a, p: torch.rand(3), "torch.randn": lambda a, p: torch.randn(2, 2),
    "torch.randint": lambda a, p: torch.randint(5, (3,)), "torch.randperm": lambda a, p: torch.randperm(4),
    "torch.rand_like": lambda a, p: torch.rand_like(a), "torch.randn_like": lambda a, p: torch.randn_like(a),
    "torch.randint_like": lambda a, p: torch.randint_like(a, 3), "torch.normal": lambda a, p: torch.normal(a, 1.0),
    "torch.poisson": lambda a, p: torch.poisson(p), "torch.bernoulli": lambda a, p: (torch.bernoulli(p / 3),
                                                                                    (p / 3).bernoulli()),
    "torch.multinomial": lambda a, p: (torch.multinomial(p, 2), p.multinomial(1))},
     t(3, 4), pos(3, 4), random=True, dtypes=FLOATS_OR_SKIP)


# --- running and inspecting samples --------------------------------------------------------

class _Seen(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.funcs = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.funcs.append(func)
        return func(*args, **(kwargs or {}))


def funcs_called(s: Sample) -> list:
    """The torch callables `s.fn` reaches (what the frontend's mode sees), in float32."""
    mode = _Seen()
    with torch.no_grad(), warnings.catch_warnings(), mode:
        warnings.simplefilter("ignore")
        s.fn(*s.make(F32))
    return mode.funcs


def clone_args(args):
    """A copy of the arguments: same values, same strides (non-contiguity preserved)."""
    def copy(x):
        if not isinstance(x, torch.Tensor):
            return x
        y = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)
        y.copy_(x)
        return y
    return pytree.tree_map(copy, args)


# --- docs/ops.md ------------------------------------------------------------------------------

def _prims_of(s: Sample, dtype) -> tuple:
    """(prims the sample's own op decomposes into, fallback notes) when traced in `dtype`."""
    from compiler import frontend, passes

    args = s.make(dtype)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s.fn(*clone_args(args))
    except (RuntimeError, NotImplementedError):  # the CPU lacks this dtype for the op (the tests skip it too)
        return [], []
    res = frontend.trace(s.fn, args)
    dec = passes.decompose(res.trace)
    prims_used, notes = [], []
    if not any(b.sym.name == s.op for b in dec.bound_symbols):
        return None, []  # the frontend records the call as something else (setitem: an opaque call)
    for b in dec.bound_symbols:
        if b.sym.name != s.op:
            continue
        if b.note:
            notes.append(b.note)
        for leaf in passes.flatten(b.subsymbols):
            if leaf.sym.name not in prims_used:
                prims_used.append(leaf.sym.name)
    return prims_used, notes


def markdown() -> str:
    from compiler.ops import prims, torch_ops

    aliases: dict = {}
    for fn, (sym, _adapter) in torch_ops.REGISTRY.items():
        label = torch_ops.qualified_name(fn) or getattr(fn, "__qualname__", repr(fn))
        aliases.setdefault(sym.name, []).append(f"`{label}`")
    by_op: dict = {}
    for s in SAMPLES:
        by_op.setdefault(s.op, []).append(s)
    lines = [
        "# Supported ops",
        "",
        "Generated by `python tests/op_samples.py --markdown > docs/ops.md`; do not edit by hand.",
        "",
        "Every torch-level symbol FusionLens records (`compiler/ops/torch_ops/`), the torch",
        "callables the frontend maps to it, and how it decomposes. The prims column lists the",
        "prims that the op's samples in `tests/op_samples.py` decompose into (traced in each",
        "dtype the sample runs in); a *library call* has no decomposition and runs whole in the",
        "torch executor. Calls a decomposition does not cover stay library calls too; the last",
        "column says which. An op whose decomposition fails for every sample says so (a bug,",
        "see the xfail list in tests/test_ops.py). In-place forms (`x.add_(y)`, `x += y`,",
        "`relu(x, inplace=True)`) are traced as the functional op producing a new value;",
        "`x[...] = v` (setitem) is an opaque call. Operators (`a + b`, `a @ b`, `-a`, `a[i]`)",
        "reach the frontend as the Tensor method and map like it.",
        "",
        "How torch's own OpInfo database of ops fares (native, library call, fallback, ...):",
        "[opinfo.md](opinfo.md), generated by `python tests/opinfo_sweep.py --markdown`.",
        "",
        "| op | torch callables | decomposes into | not decomposed when |",
        "|---|---|---|---|",
    ]
    for name, sym in torch_ops.SYMBOLS.items():
        used, unexpected, expected, recorded = [], [], [], False
        for s in by_op.get(name, []):
            for dtype in s.dtypes:
                got, notes = _prims_of(s, dtype)
                recorded = recorded or got is not None
                used += [p for p in got or [] if p not in used]
                if s.decomposes:
                    unexpected += notes
            if not s.decomposes and s.why_not not in expected:
                expected.append(s.why_not)
        if sym.decomposition is None:
            how = "library call"
        elif used:
            how = ", ".join(f"`{p.removeprefix('prims.')}`" for p in sorted(used))
        elif unexpected:
            how = "library call for now: its decomposition fails on every sample"
        elif not recorded:
            how = "not recorded as this symbol yet (the frontend records these calls another way)"
        else:
            how = "an alias of its input (no op)"
        names = ", ".join(aliases.get(name, []))
        lines.append(f"| `{name}` | {names} | {how} | {'; '.join(expected)} |")
    lines += ["", "## Prims", "",
              "Elementwise prims take operands of one shape and dtype (python scalars allowed);",
              "broadcasts and casts are explicit; reductions drop the reduced dims.", "",
              "| prim | kind | meaning |", "|---|---|---|"]
    for name, sym in prims.ALL.items():
        kind = ", ".join(sorted(sym.tags))
        lines.append(f"| `prims.{name}` | {kind} | {PRIM_DOCS.get(name, '')} |")
    return "\n".join(lines) + "\n"


PRIM_DOCS = {
    "abs": "absolute value", "neg": "negation", "exp": "e**x", "exp2": "2**x", "log": "natural log",
    "log2": "base-2 log", "log1p": "log(1 + x)", "expm1": "exp(x) - 1", "sqrt": "square root",
    "rsqrt": "1 / sqrt(x)", "sin": "sine", "cos": "cosine", "tan": "tangent", "tanh": "hyperbolic tangent",
    "sigmoid": "1 / (1 + exp(-x))", "erf": "error function", "floor": "round down", "ceil": "round up",
    "round": "round half to even", "trunc": "round toward zero", "sign": "-1, 0 or 1",
    "reciprocal": "1 / x", "logical_not": "not (bool)", "bitwise_not": "~x (integers)",
    "isnan": "x != x", "add": "a + b", "sub": "a - b", "mul": "a * b", "div": "true division a / b",
    "pow": "a ** b", "remainder": "a % b (Python sign convention)", "maximum": "elementwise max (NaN-propagating)",
    "minimum": "elementwise min (NaN-propagating)", "eq": "a == b", "ne": "a != b", "lt": "a < b",
    "le": "a <= b", "gt": "a > b", "ge": "a >= b", "bitwise_and": "a & b", "bitwise_or": "a | b",
    "bitwise_xor": "a ^ b", "where": "where(cond, a, b)", "convert_element_type": "cast to a dtype",
    "broadcast_in_dim": "place a's dims at broadcast_dims of shape; the other dims broadcast",
    "reshape": "reshape (row-major)", "permute": "reorder dims", "slice": "strided slice per dim",
    "cat": "concatenate along a dim", "take_along_axis": "gather values at indices along a dim",
    "sum": "sum over dims", "amax": "max over dims", "amin": "min over dims", "prod": "product over dims",
    "var_mean": "(variance with correction, mean) over dims", "argmax": "index of the max along a dim",
    "argmin": "index of the min along a dim", "full": "a tensor filled with a value",
    "iota": "start, start + step, ... (length values)",
}


if __name__ == "__main__":
    if "--markdown" in sys.argv:
        torch.manual_seed(0)
        sys.stdout.write(markdown())
    else:
        print(f"{len(SAMPLES)} samples; `--markdown` prints docs/ops.md")
