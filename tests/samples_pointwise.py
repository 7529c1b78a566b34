"""Op samples: elementwise binary and unary ops, where/clamp, activations, dtype conversions.

Imported by tests/op_samples.py, in a fixed order: the order of SAMPLES (test ids, docs/ops.md).
"""

import operator

import torch
import torch.nn.functional as F

from samples_common import BF16, F16, F32, ONLY_F32, bools, cl, each, ints, nt, pos, sample, sl, t


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
sample("torch.div", "div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), t(3, 4), pos(3, 4), dtypes=ONLY_F32)
sample("torch.div", "div_floor_low_precision", lambda a, b: torch.div(a, b, rounding_mode="floor"), t(3, 4), pos(3, 4),
       dtypes=(F16, BF16), decomposes=False, why_not="floor division of low-precision floats on a CPU")
sample("torch.fmod", "fmod", lambda a, b: torch.fmod(a, b) + a.fmod(-0.7) + torch.fmod(a, b.neg()), t(3, 4, low=-9, high=9),
       pos(3, 4))
sample("torch.fmod", "fmod_int", lambda i, j: torch.fmod(i, j) + i.fmod(-3), ints(3, 4, low=-9, high=9),
       ints(3, 4, low=1, high=4), dtypes=ONLY_F32)
sample("torch.div", "div_trunc",
       lambda a, b: torch.div(a, b, rounding_mode="trunc") + a.div(-0.3, rounding_mode="trunc"),
       t(3, 4, low=-9, high=9), pos(3, 4))
sample("torch.div", "div_integer_rounding", lambda i, j: (torch.div(i, j, rounding_mode="floor"), i // 3,
       torch.div(i, j, rounding_mode="trunc"), torch.floor_divide(i, j)), ints(3, 4, low=-9, high=9),
       ints(4, low=1, high=4), dtypes=ONLY_F32)  # integers divide in a torch call of their own
sample("torch.round", "round_decimals", lambda a: (torch.round(a, decimals=2), a.round(decimals=-1),
       torch.round(a, decimals=0)), t(3, 4, low=-300, high=300))
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
    # floor and round of an integer tensor are their input; the program hands that out, so it
    # runs as one torch call (a fresh tensor, as eager's), not as prims that would return the input
    identity = _name in ("floor", "round")
    sample(f"torch.{_name}", f"{_name}_int", lambda a, _n=_name: getattr(torch, _n)(a),
           ints(3, 4, low=0 if _name == "sqrt" else -3, high=4), dtypes=ONLY_F32,
           decomposes=not identity, why_not="is its input here" if identity else "")
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
       random=True)  # bernoulli.p (eager's draw) and a multiply
sample("torch.nn.functional.dropout2d", "feature_dropouts_eval", lambda a: F.dropout2d(a, 0.5, training=False) * 2,
       t(2, 3, 4, 4))
sample("torch.nn.functional.dropout1d", "dropout1d", lambda c: (F.dropout1d(c, training=False) - 1, F.dropout1d(c, 0.5),
       F.dropout1d(c[0], 0.5)), t(2, 3, 5), dtypes=ONLY_F32, random=True)
sample("torch.nn.functional.dropout2d", "feature_dropouts_train", lambda a: F.dropout2d(a, 0.5), t(2, 3, 4, 4),
       dtypes=ONLY_F32, random=True)
sample("torch.nn.functional.dropout3d", "dropout3d",
       lambda b: (F.dropout3d(b, 0.25, True), F.dropout3d(b, 0.5, False) * 2),
       t(2, 3, 2, 2, 2), dtypes=ONLY_F32, random=True)
each("alpha_dropout", {"torch.nn.functional.alpha_dropout": lambda a: (F.alpha_dropout(a, 0.5) * 2,
                                                                      F.alpha_dropout(a, 0.2, True)),
                       "torch.nn.functional.feature_alpha_dropout": lambda a: (F.feature_alpha_dropout(a, 0.5) + 1,
                                                                              F.feature_alpha_dropout(a, 0.4, True)),
                       "torch.feature_dropout": lambda a: (torch.feature_dropout(a, 0.0, True) * 3,
                                                           torch.feature_dropout(a, 0.5, True)),
                       "torch.alpha_dropout": lambda a: torch.alpha_dropout(a, 0.3, True),
                       "torch.feature_alpha_dropout": lambda a: torch.feature_alpha_dropout(a, 0.3, True)},
     t(2, 3, 4), dtypes=ONLY_F32, random=True)
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
       random=True)  # a uniform draw of slopes (aten's uniform) and a where
sample("torch.nn.functional.threshold", "threshold", lambda a: F.threshold(a, 0.5, -1.0) + torch.threshold(a, -0.2, 3)
       + torch.nn.Threshold(0.0, 2.0)(a), t(3, 4))
sample("torch.ops.aten.native_dropout_backward.default", "native_dropout_backward",
       lambda g, m: torch.ops.aten.native_dropout_backward.default(g, m, 2.0), t(3, 4), bools(3, 4))
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
