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
    the last dim: non-contiguous and not dense).
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
sample("operator.getitem", "getitem_tensor_index", lambda a, i: a[i] * 2, t(5, 3), ints(4, high=5),
       decomposes=False, why_not="indexing with tensors")
sample("operator.getitem", "getitem_bool_mask", lambda a, m: a[m] * 2, t(3, 4), bools(3, 4), dtypes=ONLY_F32,
       decomposes=False, why_not="indexing with tensors")
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

    res = frontend.trace(s.fn, s.make(dtype))
    dec = passes.decompose(res.trace)
    prims_used, notes = [], []
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
        "| op | torch callables | decomposes into | not decomposed when |",
        "|---|---|---|---|",
    ]
    for name, sym in torch_ops.SYMBOLS.items():
        used, unexpected, expected = [], [], []
        for s in by_op.get(name, []):
            for dtype in s.dtypes:
                got, notes = _prims_of(s, dtype)
                used += [p for p in got if p not in used]
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
