"""Backward rules of torch-level symbols that keep their own (library calls, and softmax
whose rule saves its output only), the ones whose decomposition would differentiate to another
subgradient than eager's (max/min along a dim, hardtanh, relu6, hardsigmoid, hardswish at their
kinks; vector_norm at 0), and the generic rule of every other op that runs whole.

A rule takes the forward op and its outputs' cotangents and returns (input Value, cotangent)
pairs. Rules call torch-level symbols (matmul, softmax) and prims; both are recorded into the
backward trace with their decompositions, so backward regions fuse like forward ones.
`NoRule` from a rule means "not for these arguments": the generic rule takes the op instead.
"""

from __future__ import annotations

import functools
import inspect
import math
from types import SimpleNamespace
from collections.abc import Callable

import torch
from torch.utils import _pytree as pytree

from fusionlens.middle.autograd import prim_rules
from fusionlens.ir.trace import BoundSymbol, OpTag, Symbol, Value
from fusionlens.ops import prims as P
from fusionlens.ops.torch_ops import library_calls as L, normalization as N, reductions as R
from fusionlens.ops.torch_ops.registry import registered

# A rule: (forward op, its outputs' cotangents) -> (input Value, cotangent) pairs
Rule = Callable[[BoundSymbol, list], list]

RULES: dict[Symbol, Rule] = {}  # registered symbol -> its rule (rules.lookup reads it)


class NoRule(Exception):
    """The op's rule does not cover these arguments."""


def rule_targets(names: tuple[str, ...], table: dict) -> list[Symbol]:
    """The registered symbols `names` name, none with a rule in `table` yet: a misspelt name
    or a second rule for one symbol fails at import, not silently at run time."""
    syms = [registered(n) for n in names]
    taken = [s.name for s in syms if s in table]
    if taken:
        raise ValueError(f"a backward rule is registered already for {', '.join(taken)}")
    return syms


def rule(*names: str, signature=None):
    sig = inspect.signature(signature) if signature is not None else None
    targets = rule_targets(names, RULES)

    def deco(fn):
        def apply(b, cots):
            if sig is None:
                return fn(b, cots)
            try:
                bound = sig.bind(*b.args, **b.kwargs)
            except TypeError as e:
                raise NoRule(str(e)) from e
            bound.apply_defaults()
            return fn(b, cots, **bound.arguments)
        for s in targets:
            RULES[s] = apply
        return fn
    return deco


def _library(name: str, impl, meta=None) -> Symbol:
    return Symbol(name, impl, tags=(OpTag.LIBRARY_CALL, OpTag.PROGRAM_GLOBAL), meta=meta)


def _value(x) -> bool:
    return isinstance(x, Value)


def _cast(x: Value, dtype) -> Value:
    return x if x.dtype == dtype else P.convert_element_type(x, dtype)


def _t(x: Value) -> Value:
    """Swap the last two dims."""
    dims = list(range(x.ndim))
    dims[-2], dims[-1] = dims[-1], dims[-2]
    return P.permute(x, dims)


def reduce_to(g: Value, shape) -> Value:
    """`g` summed over the dims a broadcast to g's shape added (leading, or size 1 in `shape`)."""
    shape = tuple(shape)
    lead = g.ndim - len(shape)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1]
    if dims:
        g = P.sum(g, tuple(dims))
    return g if tuple(g.shape) == shape else P.reshape(g, shape)


# --- matmul family -------------------------------------------------------------------------

def matmul_grads(a: Value, b: Value, g: Value, need_a: bool, need_b: bool):
    a2 = a if a.ndim > 1 else P.reshape(a, (1, a.shape[0]))
    b2 = b if b.ndim > 1 else P.reshape(b, (b.shape[0], 1))
    batch = _broadcast(a2.shape[:-2], b2.shape[:-2])
    g2 = P.reshape(g, batch + (a2.shape[-2], b2.shape[-1])) if g.shape != batch + (a2.shape[-2], b2.shape[-1]) else g
    ga = gb = None
    if need_a:
        ga = reduce_to(L.matmul(g2, _t(b2)), a2.shape)
        ga = ga if a.ndim > 1 else P.reshape(ga, a.shape)
    if need_b:
        gb = reduce_to(L.matmul(_t(a2), g2), b2.shape)
        gb = gb if b.ndim > 1 else P.reshape(gb, b.shape)
    return ga, gb


def _broadcast(*shapes) -> tuple:
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, n in enumerate(s, ndim - len(s)):
            out[i] = n if n != 1 else out[i]
    return tuple(out)


def _pairs(*items):
    return [(v, g) for v, g in items if _value(v) and g is not None]


@rule("torch.matmul", "torch.mm", "torch.bmm")
def _matmul(b, cots):
    a, c = b.args[0], b.args[1] if len(b.args) > 1 else b.kwargs.get("other", b.kwargs.get("mat2"))
    if not (_value(a) and _value(c)) or b.kwargs.get("out") is not None:
        raise NoRule("matmul with a non-tensor operand")
    ga, gc = matmul_grads(a, c, cots[0], True, True)
    return _pairs((a, ga), (c, gc))


@rule("torch.Tensor.__rmatmul__")
def _rmatmul(b, cots):
    c, a = b.args  # c.__rmatmul__(a) is a @ c
    ga, gc = matmul_grads(a, c, cots[0], True, True)
    return _pairs((a, ga), (c, gc))


def _addmm_signature(input, mat1, mat2, *, beta=1, alpha=1, out=None): ...


@rule("torch.addmm", signature=_addmm_signature)
def _addmm(b, cots, input, mat1, mat2, beta, alpha, out):
    """beta * input + alpha * mat1 @ mat2 (GPT-2's Conv1D)."""
    if out is not None or not (_value(mat1) and _value(mat2)) or mat1.ndim != 2 or mat2.ndim != 2:
        raise NoRule("addmm with out= or a non-tensor operand")
    g = cots[0]
    ga, gb = matmul_grads(mat1, mat2, P.mul(g, alpha) if alpha != 1 else g, True, True)
    gi = None
    if _value(input) and beta != 0:
        gi = reduce_to(P.mul(g, beta) if beta != 1 else g, input.shape)
    return _pairs((input, gi), (mat1, ga), (mat2, gb))


def _linear_signature(input, weight, bias=None): ...


@rule("torch.nn.functional.linear", signature=_linear_signature)
def _linear(b, cots, input, weight, bias):
    if weight.ndim != 2 or input.ndim < 1:
        raise NoRule("a 1-d weight")
    g = cots[0]
    out_features, in_features = weight.shape
    gx = L.matmul(g, weight) if _value(input) else None
    g2 = P.reshape(g, (math.prod(g.shape[:-1]), out_features)) if g.ndim != 2 else g
    x2 = P.reshape(input, (math.prod(input.shape[:-1]), in_features)) if input.ndim != 2 else input
    gw = L.matmul(_t(g2), x2)
    gb = reduce_to(g, bias.shape) if _value(bias) else None
    return _pairs((input, gx), (weight, gw), (bias, gb))


# --- embedding ----------------------------------------------------------------------------

_embedding_backward = _library("embedding_dense_backward", torch.ops.aten.embedding_dense_backward)


def _embedding_signature(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
                         scale_grad_by_freq=False, sparse=False): ...


@rule("torch.nn.functional.embedding", signature=_embedding_signature)
def _embedding(b, cots, input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse):
    if max_norm is not None or sparse:
        raise NoRule("max_norm renormalises the weight in place; sparse gradients")
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    gw = _embedding_backward(cots[0], input, weight.shape[0], -1 if padding_idx is None else padding_idx,
                             scale_grad_by_freq)
    return _pairs((weight, gw))


# --- convolution --------------------------------------------------------------------------

# The input's gradient and the parameters' are separate calls (as cuDNN's dgrad and wgrad are):
# dead-code elimination then drops the input's where nothing needs it (a stem conv's images).
def _conv_input_grad_impl(g, x, w, stride, padding, dilation, groups):
    return torch.ops.aten.convolution_backward(g, x, w, None, stride, padding, dilation, False,
                                               [0] * len(stride), groups, [True, False, False])[0]


def _conv_params_grad_impl(g, x, w, has_bias, stride, padding, dilation, groups):
    _, gw, gb = torch.ops.aten.convolution_backward(
        g, x, w, [w.shape[0]] if has_bias else None, stride, padding, dilation, False, [0] * len(stride), groups,
        [False, True, has_bias])
    return (gw, gb) if has_bias else (gw,)


def _conv_params_grad_meta(g, x, w, has_bias, *rest):
    gw = torch.empty_like(w)
    return (gw, torch.empty((w.shape[0],), dtype=w.dtype, device="meta")) if has_bias else (gw,)


_conv_input_grad = _library("convolution_backward_input", _conv_input_grad_impl,
                            lambda g, x, *rest: torch.empty_like(x))
_conv_params_grad = _library("convolution_backward_weight", _conv_params_grad_impl, _conv_params_grad_meta)


def _conv_signature(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1): ...


@rule("torch.nn.functional.conv1d", "torch.nn.functional.conv2d", "torch.nn.functional.conv3d",
      signature=_conv_signature)
def _conv(b, cots, input, weight, bias, stride, padding, dilation, groups):
    n = weight.ndim - 2
    if isinstance(padding, str):
        if padding != "valid":
            raise NoRule("padding='same'")
        padding = 0
    if not _value(input) or input.ndim != n + 2:
        raise NoRule("unbatched input")
    as_list = lambda x: list(x) if isinstance(x, (tuple, list)) else [x] * n  # noqa: E731
    geometry = (as_list(stride), as_list(padding), as_list(dilation), groups)
    gx = _conv_input_grad(cots[0], input, weight, *geometry)
    params = _conv_params_grad(cots[0], input, weight, _value(bias), *geometry)
    return _pairs((input, gx), (weight, params[0]), (bias, params[1] if _value(bias) else None))


# --- softmax: the rule needs only the output --------------------------------------------

def _softmax_signature(input, dim=None, _stacklevel=3, dtype=None): ...


def _compute_dtype(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _softmax_vjp(b, cots, input, dim, grad):
    """Softmax and log-softmax need only their output `y`: dx = grad(y, g, sum over dim)."""
    dim = N._softmax_dim(input, dim) % max(input.ndim, 1)
    compute = _compute_dtype(b.output.dtype)
    y, g = _cast(b.output, compute), _cast(cots[0], compute)
    kept = tuple(d for d in range(input.ndim) if d != dim)
    total = lambda x: P.broadcast_in_dim(P.sum(x, (dim,)), input.shape, kept)  # noqa: E731
    return _pairs((input, _cast(grad(y, g, total), input.dtype)))


@rule("torch.nn.functional.softmax", signature=_softmax_signature)
def _softmax(b, cots, input, dim, _stacklevel, dtype):
    return _softmax_vjp(b, cots, input, dim, lambda y, g, total: P.mul(y, P.sub(g, total(P.mul(g, y)))))


@rule("torch.nn.functional.log_softmax", signature=_softmax_signature)
def _log_softmax(b, cots, input, dim, _stacklevel, dtype):
    return _softmax_vjp(b, cots, input, dim, lambda y, g, total: P.sub(g, P.mul(P.exp(y), total(g))))


# --- where eager's subgradient differs from the decomposition's: at ties and kinks -----------

def _max_signature(input, dim=None, keepdim=False): ...


@rule("torch.max", "torch.min", signature=_max_signature)
def _max_min(b, cots, input, dim, keepdim):
    """torch.max(x, dim) gives the gradient to the index it returns (one of tied values), not
    shared as amax; torch.max(x) shares it between ties, torch.max(a, b) splits it as maximum."""
    g = cots[0]
    if g is None or not _value(input):
        return []
    is_max = b.sym is R.max
    if _value(dim):  # elementwise: the maximum prim's rule on both operands spread to the output
        out = b.outputs[0]
        spread = [_right_aligned(_cast(t, out.dtype), out.shape) if tuple(t.shape) != tuple(out.shape)
                  else _cast(t, out.dtype) for t in (input, dim)]
        binary = SimpleNamespace(args=tuple(spread), output=out)
        grads = prim_rules.RULES[P.maximum if is_max else P.minimum](binary, [g])
        return _pairs(*((t, _cast(reduce_to(gt, t.shape), t.dtype)) for t, gt in zip((input, dim), grads)
                        if t.dtype.is_floating_point))
    if input.ndim == 0:
        return _pairs((input, g))
    if dim is None:  # the whole tensor: ties share the gradient, as amax
        all_dims = tuple(range(input.ndim))
        hit = P.eq(input, P.broadcast_in_dim(b.outputs[0], input.shape, ()))
        count = P.sum(P.convert_element_type(hit, input.dtype), all_dims)
        share = P.broadcast_in_dim(P.div(g, count), input.shape, ())
        return _pairs((input, P.where(hit, share, 0.0)))
    d = dim % input.ndim
    kept = tuple(i for i in range(input.ndim) if i != d)
    reduced = tuple(input.shape[i] for i in kept)
    indices = b.outputs[1]
    if keepdim:
        g, indices = P.reshape(g, reduced), P.reshape(indices, reduced)
    position = P.broadcast_in_dim(P.iota(input.shape[d], start=0, step=1, dtype=indices.dtype, device=input.device),
                                  input.shape, (d,))
    hit = P.eq(position, P.broadcast_in_dim(indices, input.shape, kept))
    return _pairs((input, P.where(hit, P.broadcast_in_dim(g, input.shape, kept), 0.0)))


def _vector_norm_signature(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None): ...


@rule("torch.linalg.vector_norm", signature=_vector_norm_signature)
def _vector_norm(b, cots, x, ord, dim, keepdim, dtype, out):
    """x / |x| * g, and 0 where |x| is 0 (as torch: through sqrt it would be 0 / 0, so
    F.normalize of a zero row, whose clamp_min sends no gradient, would make nan)."""
    if ord != 2 or out is not None or not _value(x) or not x.dtype.is_floating_point:
        raise NoRule("a norm other than the 2-norm")
    dims = range(x.ndim) if dim is None else (dim,) if isinstance(dim, int) else dim
    dims = {d % max(x.ndim, 1) for d in dims}
    kept = tuple(d for d in range(x.ndim) if d not in dims)
    reduced = tuple(x.shape[d] for d in kept)
    y, g = b.output, cots[0]
    if keepdim and tuple(y.shape) != reduced:
        y, g = P.reshape(y, reduced), P.reshape(g, reduced)
    compute = _compute_dtype(x.dtype)
    y, g = _cast(y, compute), _cast(g, compute)
    scale = P.where(P.eq(y, 0.0), 0.0, P.div(g, y))
    return _pairs((x, _cast(P.mul(_cast(x, compute), P.broadcast_in_dim(scale, x.shape, kept)), x.dtype)))


def _hardtanh_signature(input, min_val=-1.0, max_val=1.0, inplace=False): ...


def _activation_signature(input, inplace=False): ...


def _inside(x: Value, low, high) -> Value:
    return P.bitwise_and(P.gt(x, low), P.lt(x, high))


@rule("torch.nn.functional.hardtanh", signature=_hardtanh_signature)
def _hardtanh(b, cots, input, min_val, max_val, inplace):
    """Eager passes the gradient strictly inside the bounds (clamp passes it at them too)."""
    return _pairs((input, P.where(_inside(input, min_val, max_val), cots[0], 0.0)))


@rule("torch.nn.functional.relu6", signature=_activation_signature)
def _relu6(b, cots, input, inplace):
    return _pairs((input, P.where(_inside(input, 0.0, 6.0), cots[0], 0.0)))


@rule("torch.nn.functional.hardsigmoid", signature=_activation_signature)
def _hardsigmoid(b, cots, input, inplace):
    compute = _compute_dtype(input.dtype)
    g = P.div(_cast(cots[0], compute), 6.0)
    return _pairs((input, _cast(P.where(_inside(input, -3.0, 3.0), g, 0.0), input.dtype)))


@rule("torch.nn.functional.hardswish", signature=_activation_signature)
def _hardswish(b, cots, input, inplace):
    """As torch's kernel: 0 up to -3 inclusive, g * (x / 3 + 1/2) inside, g from 3 on."""
    compute = _compute_dtype(input.dtype)
    x, g = _cast(input, compute), _cast(cots[0], compute)
    middle = P.mul(g, P.add(P.div(x, 3.0), 0.5))
    out = P.where(P.le(x, -3.0), 0.0, P.where(P.lt(x, 3.0), middle, g))
    return _pairs((input, _cast(out, input.dtype)))


@rule("torch.ops.aten.copy.default")
def _copy(b, cots):
    """`x.copy_(src)` kept whole (its result, src itself, is handed out: passes.decompose):
    torch has no derivative for aten.copy, so the generic rule cannot run it. x's old values
    are overwritten (no gradient); src's is the cotangent in its dtype, summed over broadcast."""
    src, g = b.args[1], cots[0]
    if not _value(src) or g is None or not src.dtype.is_floating_point:
        return []
    return _pairs((src, reduce_to(_cast(g, src.dtype), src.shape)))


# --- scaled dot-product attention: its rules are attention_rules.py's -----------------------

def _sdpa_signature(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                    enable_gqa=False): ...


def _right_aligned(x: Value, shape) -> Value:
    lead = len(shape) - x.ndim
    return P.broadcast_in_dim(x, tuple(shape), tuple(range(lead, len(shape))))


# --- forward rewrites: what a whole op hides from its backward -----------------------------

@functools.lru_cache(maxsize=1024)  # torch callables: a few hundred; user functions must not pile up
def _signature_of(fn):
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def draws_dropout(b) -> bool:
    """Whether op `b` draws a dropout mask inside itself: a `dropout_p` argument that is not 0
    (SDPA; multi_head_attention_forward, unless `training` is off)."""
    sdpa = b.sym is L.sdpa  # a builtin: no signature
    sig = _signature_of(_sdpa_signature if sdpa else b.sym.impl)
    if sig is None or "dropout_p" not in sig.parameters:
        return False
    try:
        bound = sig.bind(*b.args, **b.kwargs)
    except TypeError:
        return False
    bound.apply_defaults()
    p, training = bound.arguments.get("dropout_p"), bound.arguments.get("training", True)
    return isinstance(p, (int, float)) and p > 0 and training is not False


EXPLICIT: dict[Symbol, Callable] = {}  # registered symbol -> its explicit forward (see explicit_forward)
# the explicit forwards that also read which values get a gradient: make(b, needs)
READS_NEEDS: set[Callable] = set()


def explicit_forward(b, needs: set[str] | frozenset[str] = frozenset()):
    """In a training forward, the torch-level ops to run instead of `b` (called inside a
    trace) where its backward needs what the whole op keeps to itself, or None. `needs`: the
    names of the values that get a gradient (SDPA's fused kernel gives its mask none)."""
    make = EXPLICIT.get(b.sym)
    if make is None:
        return None
    return make(b, needs) if make in READS_NEEDS else make(b)


# --- every other op that runs whole: torch's autograd on its call, in the backward -------

class Generic:
    """The backward of an op with no rule: its torch call re-run with grad enabled in the
    backward, and torch.autograd.grad of it. It recomputes the op (its inputs are saved, not
    its graph), so it is correct for any deterministic op and costs one more forward."""

    count = 0

    def __init__(self, b, needs: set):
        leaves, self.spec = pytree.tree_flatten((b.args, b.kwargs))
        self.leaves = leaves
        self.slots = [i for i, x in enumerate(leaves) if isinstance(x, Value)]
        self.diff = [i for i in self.slots if leaves[i].name in needs
                     and (leaves[i].dtype.is_floating_point or leaves[i].dtype.is_complex)]
        self.float_outputs = [i for i, o in enumerate(b.outputs) if o.dtype.is_floating_point or o.dtype.is_complex]
        self.impl = b.sym.impl
        Generic.count += 1
        short = b.sym.name.rsplit(".", 1)[-1].strip("_") or "op"
        self.name = f"vjp_{short}_{Generic.count}"
        metas = [leaves[i] for i in self.diff]
        self.symbol = Symbol(self.name, self.__call__, tags=(OpTag.LIBRARY_CALL, OpTag.PROGRAM_GLOBAL),
                             meta=lambda *a: tuple(v.meta() for v in metas))

    def __call__(self, *tensors_and_cotangents):
        n = len(self.slots)
        tensors, cots = tensors_and_cotangents[:n], tensors_and_cotangents[n:]
        leaves, wrt = list(self.leaves), []
        with torch.enable_grad():
            for slot, t in zip(self.slots, tensors):
                if slot in self.diff:
                    t = t.detach().requires_grad_()
                    wrt.append(t)
                leaves[slot] = t
            args, kwargs = pytree.tree_unflatten(leaves, self.spec)
            out = self.impl(*args, **kwargs)
            outs = [x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]
            pairs = [(outs[i], c) for i, c in zip(self.float_outputs, cots) if outs[i].requires_grad]
            grads = torch.autograd.grad([o for o, _ in pairs], wrt, [c for _, c in pairs], allow_unused=True) \
                if pairs else [None] * len(wrt)
        return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, wrt))

    def apply(self, b, cots):
        if not self.diff:
            return []
        filled = [c if c is not None else P.full(b.outputs[i].shape, 0.0, dtype=b.outputs[i].dtype,
                                                 device=b.outputs[i].device)
                  for i, c in zip(self.float_outputs, [cots[i] for i in self.float_outputs])]
        values = [self.leaves[i] for i in self.slots]
        result = self.symbol(*values, *filled)
        grads = result if isinstance(result, tuple) else (result,)
        return list(zip([self.leaves[i] for i in self.diff], grads))
