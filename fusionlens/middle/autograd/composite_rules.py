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

Training-mode batch_norm runs whole in the forward (torch's kernel updates the running
statistics in place, once, as eager does); its backward never calls it again, and
recomputes the batch statistics from the saved input instead. Evaluation-mode batch_norm
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
    `dims`; `stats` is the forward's (mean, rstd), kept over `dims` (size 1 there), or the eps
    to recompute them from x with; weight broadcast-ready (or None)."""
    compute = _compute(x.dtype)
    xc, gc = _cast(x, compute), _cast(g, compute)
    kept = tuple(d for d in range(x.ndim) if d not in dims)
    spread = lambda v: P.broadcast_in_dim(v, x.shape, kept)  # noqa: E731
    n = float(math.prod(x.shape[d] for d in dims))
    if isinstance(stats, tuple):  # saved: [rows, 1] values broadcast along their size-1 dims
        mean, rstd = (P.broadcast_in_dim(_cast(s, compute), x.shape, tuple(range(x.ndim))) for s in stats)
        xhat = P.mul(P.sub(xc, mean), rstd)
        rstd_full = rstd
    else:
        var, mean = P.var_mean(xc, dims, 0)
        rstd = P.rsqrt(P.add(var, stats))
        rstd_full = spread(rstd)
        xhat = P.mul(P.sub(xc, spread(mean)), rstd_full)
    gxhat = P.mul(gc, weight(compute)) if weight is not None else gc
    sum_g = P.sum(gxhat, dims)
    sum_gx = P.sum(P.mul(gxhat, xhat), dims)
    # dx = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat))
    inner = P.sub(P.sub(gxhat, spread(P.div(sum_g, n))), P.mul(xhat, spread(P.div(sum_gx, n))))
    return _cast(P.mul(inner, rstd_full), x.dtype), gc, xhat


# The whole-op backwards recompute the batch statistics with torch's own normalisation kernel
# (no running statistics to update), called as eager's forward is, so the statistics have
# eager's dtype (float32 for a bfloat16 input with float32 weights): 3-10x faster than var_mean.
def _batch_norm_backward_impl(grad, x, weight, has_bias, eps):
    _, mean, invstd = torch.ops.aten.native_batch_norm(x, weight, None, None, None, True, 0.0, eps)
    gx, gw, gb = torch.ops.aten.native_batch_norm_backward(
        grad, x, weight, None, None, mean, invstd, True, eps, [True, weight is not None, has_bias])
    return tuple(t for t in (gx, gw, gb) if t is not None)


def _batch_norm_backward(grad, x, weight, has_bias, eps):
    dims = (0,) + tuple(range(2, x.ndim))
    w = (lambda dt: P.broadcast_in_dim(_cast(weight, dt), x.shape, (1,))) if weight is not None else None
    dx, gc, xhat = _norm_backward(grad, x, w, dims, eps)
    out = [dx]
    if weight is not None:
        out.append(_cast(P.sum(P.mul(gc, xhat), dims), weight.dtype))
    if has_bias:
        out.append(_cast(P.sum(gc, dims), x.dtype))
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


def _batch_norm(b, cots):
    a = _bind(_batch_norm_sig, b)
    x, weight, bias = a["input"], a["weight"], a["bias"]
    if not isinstance(x, Value) or x.ndim < 2:
        raise NoRule("an input of fewer than 2 dims")
    weight = weight if isinstance(weight, Value) else None
    has_bias = isinstance(bias, Value)
    if a["training"]:
        grads = batch_norm_backward(cots[0], x, weight, has_bias, a["eps"])
    elif isinstance(a["running_mean"], Value) and isinstance(a["running_var"], Value):
        grads = batch_norm_eval_backward(cots[0], x, weight, a["running_mean"], a["running_var"], has_bias, a["eps"])
    else:
        raise NoRule("evaluation mode without running statistics")
    grads = grads if isinstance(grads, tuple) else (grads,)
    pairs, i = [(x, grads[0])], 1
    if weight is not None:
        pairs.append((weight, grads[i]))
        i += 1
    if has_bias:
        pairs.append((bias, _cast(grads[i], bias.dtype)))
    return pairs


_register("torch.nn.functional.batch_norm", _batch_norm)


# LayerNorm saves its statistics, as eager's native_layer_norm does: in a training forward
# F.layer_norm runs as layer_norm_with_stats (torch_rules.EXPLICIT), whose mean and rstd
# ([rows, 1] each, float32 for low-precision inputs: 8 bytes a row) the backward reads. A
# backward recomputing them would read x once more, a third pass over long rows.
def _kernel_stats_dtype(x, weight, bias):
    """The dtype of the statistics eager's native_layer_norm gives, which its backward kernel
    takes: on a CPU a low-precision input's own unless every parameter is float32 (a "mixed"
    call); float32 (the accumulating type) on a GPU."""
    if x.device.type != "cpu" or x.dtype not in (torch.float16, torch.bfloat16):
        return _compute(x.dtype)
    params = [t for t in (weight, bias) if t is not None]
    return torch.float32 if params and all(t.dtype == torch.float32 for t in params) else x.dtype


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
