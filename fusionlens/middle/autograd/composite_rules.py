"""Backward rules that emit torch-level backward symbols: activations and normalisations.

Each backward symbol has torch's own backward kernel as its impl (`aten.gelu_backward`,
`aten.native_layer_norm_backward`, ...) and a decomposition into prims, like every
torch-level symbol: where a fusion executor takes it, the fusion stage flattens it into
prims and it fuses with its neighbours; where none does (the torch executor on a CPU), it
runs whole, one call, as fast as eager's backward. Its forward op then runs whole too (a
rule of its own keeps it from being decomposed in the forward).

A training forward runs F.layer_norm as `layer_norm_with_stats` (torch_rules.EXPLICIT):
eager's native_layer_norm, which also returns the mean and rstd, 8 bytes a row; the backward
reads them, as eager's autograd does, instead of reading x once more to recompute them.

A training forward runs F.batch_norm(training=True) as `batch_norm_with_update` (running
statistics: aten's native_batch_norm whole, which updates them in place once a call, as eager
does; nn.BatchNorm's momentum=None, `batch_norm_cumulative`, as `batch_norm_cumulative_with_update`,
its factor read from num_batches_tracked as it runs) or `batch_norm_with_stats` (none: its prims
where fused); all also return save_mean and
save_invstd ((C,) each), which the backward reads instead of a second pass over x for them
(torch's native_batch_norm again, or a var_mean). Evaluation-mode batch_norm
(a frozen backbone, a model in eval mode fine-tuned) runs whole too, so its forward is
eager's to the bit; its backward reads the running statistics.
"""

from __future__ import annotations

import functools
import inspect
import math

import torch

from fusionlens.middle.autograd.torch_rules import EXPLICIT, NoRule, Rule, rule_targets
from fusionlens.ir.trace import OpTag, Symbol, Value
from fusionlens.ops import prims as P
from fusionlens.ops.torch_ops import normalization as N
from fusionlens.ops.torch_ops.registry import registered

RULES: dict[Symbol, Rule] = {}  # registered symbol -> its rule (rules.lookup reads it)


def _register(name: str, rule: Rule) -> None:
    """`rule` for the registered symbol `name` (a misspelt name fails at import)."""
    for sym in rule_targets((name,), RULES):
        RULES[sym] = rule


def _cast(x: Value, dtype) -> Value:
    return x if x.dtype == dtype else P.convert_element_type(x, dtype)


def _compute(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _bind(signature, b):
    try:
        bound = inspect.signature(signature).bind(*b.args, **b.kwargs)
    except TypeError as e:
        raise NoRule(str(e)) from e
    bound.apply_defaults()
    return bound.arguments


def backward_symbol(name: str, impl, decomposition, program_global: bool = False) -> Symbol:
    tags = (OpTag.LIBRARY_CALL, OpTag.PROGRAM_GLOBAL) if program_global else (OpTag.LIBRARY_CALL,)
    return Symbol(name, impl, decomposition=decomposition, tags=tags)


def _opmath(fn):
    """Compute in float32 for half-precision tensors and round once, as torch's kernels do."""
    @functools.wraps(fn)
    def run(grad, x, *rest, **kwargs):
        compute = _compute(x.dtype)
        return _cast(fn(_cast(grad, compute), _cast(x, compute), *rest, **kwargs), x.dtype)
    return run


# --- activations --------------------------------------------------------------------------

@_opmath
def _gelu_backward(grad, x, approximate="none"):
    if approximate == "tanh":
        k, c = math.sqrt(2.0 / math.pi), 0.044715
        x2 = P.mul(x, x)
        t = P.tanh(P.mul(P.add(x, P.mul(P.mul(x2, x), c)), k))
        left = P.mul(P.add(t, 1.0), 0.5)
        right = P.mul(P.mul(P.mul(x, 0.5), P.sub(1.0, P.mul(t, t))), P.mul(P.add(P.mul(x2, 3.0 * c), 1.0), k))
        return P.mul(grad, P.add(left, right))
    cdf = P.mul(P.add(P.erf(P.mul(x, 1.0 / math.sqrt(2.0))), 1.0), 0.5)
    pdf = P.mul(P.exp(P.mul(P.mul(x, x), -0.5)), 1.0 / math.sqrt(2.0 * math.pi))
    return P.mul(grad, P.add(cdf, P.mul(x, pdf)))


@_opmath
def _silu_backward(grad, x):
    s = P.sigmoid(x)
    return P.mul(grad, P.mul(s, P.add(P.mul(x, P.sub(1.0, s)), 1.0)))


@_opmath
def _tanh_backward(grad, y):
    return P.mul(grad, P.sub(1.0, P.mul(y, y)))


@_opmath
def _sigmoid_backward(grad, y):
    return P.mul(grad, P.mul(y, P.sub(1.0, y)))


def _threshold_backward(grad, x, threshold):
    return P.where(P.le(x, threshold), 0.0, grad)


gelu_backward = backward_symbol("torch.ops.aten.gelu_backward", torch.ops.aten.gelu_backward, _gelu_backward)
silu_backward = backward_symbol("torch.ops.aten.silu_backward", torch.ops.aten.silu_backward, _silu_backward)
tanh_backward = backward_symbol("torch.ops.aten.tanh_backward", torch.ops.aten.tanh_backward, _tanh_backward)
sigmoid_backward = backward_symbol("torch.ops.aten.sigmoid_backward", torch.ops.aten.sigmoid_backward,
                                   _sigmoid_backward)
threshold_backward = backward_symbol("torch.ops.aten.threshold_backward", torch.ops.aten.threshold_backward,
                                     _threshold_backward)


def _unary_rule(name, signature, make):
    def rule(b, cots):
        a = _bind(signature, b)
        x = a["input"]
        if not isinstance(x, Value) or not x.dtype.is_floating_point:
            raise NoRule("not a float tensor")
        return [(x, make(b, cots[0], a))]
    _register(name, rule)


def _gelu_sig(input, approximate="none"): ...
def _plain_sig(input, inplace=False): ...  # noqa: E302
def _tensor_sig(input, *, out=None): ...  # noqa: E302


_unary_rule("torch.nn.functional.gelu", _gelu_sig,
            lambda b, g, a: gelu_backward(g, a["input"], approximate=a["approximate"]))
_unary_rule("torch.nn.functional.silu", _plain_sig, lambda b, g, a: silu_backward(g, a["input"]))
_unary_rule("torch.nn.functional.relu", _plain_sig, lambda b, g, a: threshold_backward(g, b.output, 0))
_unary_rule("torch.tanh", _tensor_sig, lambda b, g, a: tanh_backward(g, b.output))
_unary_rule("torch.sigmoid", _tensor_sig, lambda b, g, a: sigmoid_backward(g, b.output))


# --- normalisations -----------------------------------------------------------------------

def _norm_backward(g, x, weight, dims, stats):
    """(dx, g in the computing dtype, xhat) of out = (x - mean) * rstd * weight + bias over
    `dims`, from the forward's saved `stats` (mean, rstd): kept over `dims` (LayerNorm's
    [rows, 1]) or over the other dims only (batch_norm's (C,)); weight broadcast-ready (or None)."""
    compute = _compute(x.dtype)
    xc, gc = _cast(x, compute), _cast(g, compute)
    kept = tuple(d for d in range(x.ndim) if d not in dims)
    spread = lambda v: P.broadcast_in_dim(v, x.shape, kept)  # noqa: E731
    n = math.prod(x.shape[d] for d in dims)  # not float(): a symbolic size would be guarded
    mean, rstd = (P.broadcast_in_dim(_cast(s, compute), x.shape, tuple(range(x.ndim)) if s.ndim == x.ndim else kept)
                  for s in stats)
    xhat = P.mul(P.sub(xc, mean), rstd)
    gxhat = P.mul(gc, weight(compute)) if weight is not None else gc
    sum_g = P.sum(gxhat, dims)
    sum_gx = P.sum(P.mul(gxhat, xhat), dims)
    # dx = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat))
    inner = P.sub(P.sub(gxhat, spread(P.div(sum_g, n))), P.mul(xhat, spread(P.div(sum_gx, n))))
    return _cast(P.mul(inner, rstd), x.dtype), gc, xhat


# Training-mode batch_norm saves its batch statistics, as aten's native_batch_norm does: the
# backward reads the forward's save_mean and save_invstd ((C,) each) instead of reading x once
# more to recompute them (a var_mean, or torch's normalisation kernel again).
def _batch_norm_backward_impl(grad, x, weight, mean, invstd, bias_dtype, stats_dtype):
    gx, gw, gb = torch.ops.aten.native_batch_norm_backward(
        grad, x, weight, None, None, mean.to(stats_dtype), invstd.to(stats_dtype), True, 0.0,
        [True, weight is not None, bias_dtype is not None])
    return (gx,) + ((gw.to(weight.dtype),) if weight is not None else ()) + (
        (gb.to(bias_dtype),) if bias_dtype is not None else ())


def _batch_norm_backward(grad, x, weight, mean, invstd, bias_dtype, stats_dtype):
    """From the saved (C,) statistics: no reduction over x alone (stats_dtype is the kernel's)."""
    dims = (0,) + tuple(range(2, x.ndim))
    w = (lambda dt: P.broadcast_in_dim(_cast(weight, dt), x.shape, (1,))) if weight is not None else None
    dx, gc, xhat = _norm_backward(grad, x, w, dims, (mean, invstd))
    out = [dx]
    if weight is not None:
        out.append(_cast(P.sum(P.mul(gc, xhat), dims), weight.dtype))
    if bias_dtype is not None:
        out.append(_cast(P.sum(gc, dims), bias_dtype))
    return tuple(out)


batch_norm_backward = backward_symbol("batch_norm_backward", _batch_norm_backward_impl, _batch_norm_backward,
                                      program_global=True)


def _batch_norm_eval_backward_impl(grad, x, weight, running_mean, running_var, has_bias, eps):
    gx, gw, gb = torch.ops.aten.native_batch_norm_backward(
        grad, x, weight, running_mean, running_var, None, None, False, eps, [True, weight is not None, has_bias])
    return tuple(t for t in (gx, gw, gb) if t is not None)


def _batch_norm_eval_backward(grad, x, weight, running_mean, running_var, has_bias, eps):
    """Evaluation mode normalises by the running statistics, constants of the call: dx is
    g * weight * rstd, with no terms through the statistics."""
    compute = _compute(x.dtype)
    g = _cast(grad, compute)
    spread = lambda v: P.broadcast_in_dim(_cast(v, compute), x.shape, (1,))  # noqa: E731
    rstd = P.rsqrt(P.add(_cast(running_var, compute), eps))
    out = [_cast(P.mul(g, spread(P.mul(rstd, _cast(weight, compute)) if weight is not None else rstd)), x.dtype)]
    dims = (0,) + tuple(range(2, x.ndim))
    if weight is not None:
        xhat = P.mul(P.sub(_cast(x, compute), spread(running_mean)), spread(rstd))
        out.append(_cast(P.sum(P.mul(g, xhat), dims), weight.dtype))
    if has_bias:
        out.append(_cast(P.sum(g, dims), x.dtype))
    return tuple(out)


batch_norm_eval_backward = backward_symbol("batch_norm_eval_backward", _batch_norm_eval_backward_impl,
                                           _batch_norm_eval_backward, program_global=True)


def _batch_norm_sig(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                    eps=1e-5): ...


def _batch_norm_pairs(x, weight, bias, grads):
    grads = grads if isinstance(grads, tuple) else (grads,)
    pairs, i = [(x, grads[0])], 1
    if weight is not None:
        pairs.append((weight, grads[i]))
        i += 1
    if bias is not None:
        pairs.append((bias, _cast(grads[i], bias.dtype)))
    return pairs


def _batch_norm(b, cots):
    """Evaluation mode's gradients (training mode runs as batch_norm_with_stats or
    batch_norm_with_update in a training forward: _batch_norm_explicit)."""
    a = _bind(_batch_norm_sig, b)
    x, weight, bias = a["input"], a["weight"], a["bias"]
    if not isinstance(x, Value) or x.ndim < 2:
        raise NoRule("an input of fewer than 2 dims")
    if a["training"]:  # unreachable for a tensor input: the explicit forward takes it
        raise NoRule("training mode runs as batch_norm_with_stats in a training forward")
    if not (isinstance(a["running_mean"], Value) and isinstance(a["running_var"], Value)):
        raise NoRule("evaluation mode without running statistics")
    weight = weight if isinstance(weight, Value) else None
    bias = bias if isinstance(bias, Value) else None
    grads = batch_norm_eval_backward(cots[0], x, weight, a["running_mean"], a["running_var"], bias is not None,
                                     a["eps"])
    return _batch_norm_pairs(x, weight, bias, grads)


_register("torch.nn.functional.batch_norm", _batch_norm)


# In a training forward F.batch_norm(training=True) runs as an op that also returns its
# save_mean and save_invstd ((C,), the computing dtype), as aten's native_batch_norm:
# batch_norm_with_update where it has running statistics (torch's kernel whole: it updates
# them in place, once a call, as eager's does; momentum and the unbiased variance are its),
# batch_norm_with_stats where it has none (its prims where a fusion executor takes it).
def _batch_norm_with_update_impl(x, weight, bias, running_mean, running_var, momentum, eps):
    out, mean, invstd = torch.ops.aten.native_batch_norm(x, weight, bias, running_mean, running_var, True,
                                                         momentum, eps)
    compute = _compute(x.dtype)  # exact: a CPU's low-precision statistics widened
    return out, mean.to(compute), invstd.to(compute)


def _batch_norm_with_stats_impl(x, weight, bias, eps):
    return _batch_norm_with_update_impl(x, weight, bias, None, None, 0.0, eps)


def _batch_norm_cumulative_with_update_impl(x, weight, bias, running_mean, running_var, num_batches_tracked, eps):
    # momentum=None: the factor nn.BatchNorm's forward computes, from the buffer as it is now
    return _batch_norm_with_update_impl(x, weight, bias, running_mean, running_var,
                                        1.0 / float(num_batches_tracked), eps)


batch_norm_with_update = Symbol("batch_norm_with_update", _batch_norm_with_update_impl,
                                tags=(OpTag.LIBRARY_CALL, OpTag.PROGRAM_GLOBAL))
batch_norm_cumulative_with_update = Symbol(
    "batch_norm_cumulative_with_update", _batch_norm_cumulative_with_update_impl,
    tags=(OpTag.LIBRARY_CALL, OpTag.PROGRAM_GLOBAL),  # a meta tensor has no value: the factor's is no matter
    meta=lambda x, w, b, mean, var, _, eps: _batch_norm_with_update_impl(x, w, b, mean, var, 0.1, eps))
batch_norm_with_stats = Symbol("batch_norm_with_stats", _batch_norm_with_stats_impl,
                               decomposition=N.batch_norm_with_stats, tags=(OpTag.LIBRARY_CALL, OpTag.PROGRAM_GLOBAL))


def _explicit_operands(a):
    """(x, weight, bias, running_mean, running_var) of a training-mode batch_norm the explicit
    forward takes, or None (torch's own call: an empty input, a non-tensor operand)."""
    x, weight, bias, mean, var = (a[k] for k in ("input", "weight", "bias", "running_mean", "running_var"))
    if not isinstance(x, Value) or x.ndim < 2:
        return None
    if any(type(s) is int and s == 0 for s in x.shape):
        return None  # empty: F.batch_norm returns it as is (native_batch_norm raises), no update
    if any(t is not None and not isinstance(t, Value) for t in (weight, bias, mean, var)):
        return None
    if (mean is None) != (var is None):
        return None  # torch's own call (and its error)
    return x, weight, bias, mean, var


def _batch_norm_explicit(b):
    """F.batch_norm in a training forward: the op that returns its statistics, its output the op's."""
    try:
        a = _bind(_batch_norm_sig, b)
    except NoRule:
        return None
    operands = _explicit_operands(a) if a["training"] and isinstance(a["momentum"], (int, float)) else None
    if operands is None:
        return None
    x, weight, bias, mean, var = operands
    if mean is None:
        return batch_norm_with_stats(x, weight, bias, a["eps"])[0]
    return batch_norm_with_update(x, weight, bias, mean, var, float(a["momentum"]), a["eps"])[0]


def _batch_norm_cumulative_explicit(b):
    """batch_norm_cumulative (nn.BatchNorm's momentum=None) in a training forward: as F.batch_norm's,
    the factor read from num_batches_tracked when the program runs."""
    try:
        a = _bind(N.batch_norm_cumulative.decomposition, b)
    except NoRule:
        return None
    operands = _explicit_operands({**a, "training": True})
    if operands is None or operands[3] is None or not isinstance(a["num_batches_tracked"], Value):
        return None
    return batch_norm_cumulative_with_update(*operands, a["num_batches_tracked"], a["eps"])[0]


def _batch_norm_train(b, cots):
    """The gradients of batch_norm_with_stats / _with_update from the saved statistics (their
    own outputs get no cotangent: nothing but the backward reads them)."""
    x, weight, bias = b.args[:3]
    params = [t for t in b.args[1:5] if isinstance(t, Value)]  # weight, bias, running statistics
    _, mean, invstd = b.outputs
    if cots[0] is None:
        return []
    grads = batch_norm_backward(cots[0], x, weight, mean, invstd, bias.dtype if bias is not None else None,
                                _kernel_stats_dtype(x, *params))
    return _batch_norm_pairs(x, weight, bias, grads)


RULES[batch_norm_with_update] = _batch_norm_train
RULES[batch_norm_cumulative_with_update] = _batch_norm_train
RULES[batch_norm_with_stats] = _batch_norm_train


def _native_batch_norm_args(b):
    """(x, weight, bias, running_mean, running_var, training, eps) of aten's native forms:
    native_batch_norm, _native_batch_norm_legit (with or without running statistics) and
    _batch_norm_with_update (training, always)."""
    if b.kwargs:
        raise NoRule("keyword arguments")
    a = b.args
    if b.sym.name == "torch.ops.aten._batch_norm_with_update":
        return (*a[:5], True, a[6])
    if len(a) == 6:  # _native_batch_norm_legit(input, weight, bias, training, momentum, eps)
        return (*a[:3], None, None, a[3], a[5])
    return (*a[:6], a[7])


def _native_batch_norm(b, cots):
    """aten's native forms called directly return the statistics their backward reads; the
    generic rule would run them again in the backward, a second update of the running statistics."""
    x, weight, bias, mean_r, var_r, training, eps = _native_batch_norm_args(b)
    if not isinstance(x, Value) or x.ndim < 2 or any(t is not None and not isinstance(t, Value)
                                                     for t in (weight, bias, mean_r, var_r)):
        raise NoRule("a non-tensor argument")
    if cots[0] is None:
        return []
    if training:
        params = [t for t in (weight, bias, mean_r, var_r) if t is not None]
        grads = batch_norm_backward(cots[0], x, weight, b.outputs[1], b.outputs[2],
                                    bias.dtype if bias is not None else None, _kernel_stats_dtype(x, *params))
    elif mean_r is not None and var_r is not None:
        grads = batch_norm_eval_backward(cots[0], x, weight, mean_r, var_r, bias is not None, eps)
    else:
        raise NoRule("evaluation mode without running statistics")  # torch raises
    return _batch_norm_pairs(x, weight, bias, grads)


_register("torch.native_batch_norm", _native_batch_norm)
_register("torch._native_batch_norm_legit", _native_batch_norm)
_register("torch.ops.aten._batch_norm_with_update", _native_batch_norm)
EXPLICIT[registered("torch.nn.functional.batch_norm")] = _batch_norm_explicit
EXPLICIT[N.batch_norm_cumulative] = _batch_norm_cumulative_explicit


# LayerNorm saves its statistics, as eager's native_layer_norm does: in a training forward
# F.layer_norm runs as layer_norm_with_stats (torch_rules.EXPLICIT), whose mean and rstd
# ([rows, 1] each, float32 for low-precision inputs: 8 bytes a row) the backward reads. A
# backward recomputing them would read x once more, a third pass over long rows.
def _kernel_stats_dtype(x, *params):
    """The dtype of the statistics eager's native_layer_norm (native_batch_norm) gives, which its
    backward kernel takes: on a CPU a low-precision input's own unless every parameter (running
    statistics included) is float32 (a "mixed" call); float32 (the accumulating type) on a GPU."""
    if x.device.type != "cpu" or x.dtype not in (torch.float16, torch.bfloat16):
        return _compute(x.dtype)
    given = [t for t in params if t is not None]
    return torch.float32 if given and all(t.dtype == torch.float32 for t in given) else x.dtype


def _layer_norm_with_stats_impl(x, normalized_shape, weight, bias, eps):
    out, mean, rstd = torch.native_layer_norm(x, normalized_shape, weight, bias, eps)
    compute = _compute(x.dtype)  # exact: a CPU's low-precision statistics widened
    return out, mean.to(compute), rstd.to(compute)


layer_norm_with_stats = Symbol("layer_norm_with_stats", _layer_norm_with_stats_impl,
                               decomposition=N.layer_norm_with_stats,
                               tags=(OpTag.LIBRARY_CALL, OpTag.PROGRAM_GLOBAL))


def _layer_norm_backward_impl(grad, x, mean, rstd, normalized_shape, weight, bias):
    stats = _kernel_stats_dtype(x, weight, bias)
    gx, gw, gb = torch.ops.aten.native_layer_norm_backward(
        grad, x, normalized_shape, mean.to(stats), rstd.to(stats), weight, bias,
        [True, weight is not None, bias is not None])
    return tuple(t for t in (gx, gw, gb) if t is not None)


def _layer_norm_backward(grad, x, mean, rstd, normalized_shape, weight, bias):
    axis = x.ndim - len(normalized_shape)
    dims = tuple(range(axis, x.ndim))
    lead = tuple(range(axis))
    w = (lambda dt: P.broadcast_in_dim(_cast(weight, dt), x.shape, dims)) if weight is not None else None
    dx, gc, xhat = _norm_backward(grad, x, w, dims, (mean, rstd))
    out = [dx]
    if weight is not None:
        out.append(_cast(P.sum(P.mul(gc, xhat), lead), weight.dtype) if lead else _cast(P.mul(gc, xhat), weight.dtype))
    if bias is not None:
        out.append(_cast(P.sum(gc, lead), bias.dtype) if lead else _cast(gc, bias.dtype))
    return tuple(out)


layer_norm_backward = backward_symbol("layer_norm_backward", _layer_norm_backward_impl, _layer_norm_backward,
                                      program_global=True)


def _layer_norm_sig(input, normalized_shape, weight=None, bias=None, eps=1e-5): ...


def _layer_norm_explicit(b):
    """F.layer_norm in a training forward: layer_norm_with_stats, its output the op's."""
    try:
        a = _bind(_layer_norm_sig, b)
    except NoRule:
        return None
    x, weight, bias = a["input"], a["weight"], a["bias"]
    if not isinstance(x, Value) or any(w is not None and not isinstance(w, Value) for w in (weight, bias)):
        return None  # a non-tensor weight: its prims differentiated
    shape = [a["normalized_shape"]] if isinstance(a["normalized_shape"], int) else list(a["normalized_shape"])
    return layer_norm_with_stats(x, shape, weight, bias, a["eps"])[0]


def _layer_norm(b, cots):
    """The gradients of layer_norm_with_stats from its saved mean and rstd (its statistics'
    own outputs get no cotangent: nothing but the backward reads them)."""
    x, shape, weight, bias, _ = b.args
    _, mean, rstd = b.outputs
    if cots[0] is None:
        return []
    grads = layer_norm_backward(cots[0], x, mean, rstd, shape, weight, bias)
    grads = grads if isinstance(grads, tuple) else (grads,)
    return list(zip([v for v in (x, weight, bias) if v is not None], grads))


RULES[layer_norm_with_stats] = _layer_norm
EXPLICIT[registered("torch.nn.functional.layer_norm")] = _layer_norm_explicit
