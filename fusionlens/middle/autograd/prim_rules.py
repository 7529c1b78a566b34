"""Vector-Jacobian products of the prims.

A rule takes the forward op (a BoundSymbol: its argument Values and output Values) and the
cotangent of each output (a Value, or None where no gradient reaches it), and returns the
cotangent of each positional argument (None for non-tensors and non-differentiable ones).
Rules run inside a trace context, so the prims they call are recorded into the backward
trace. Prims are explicit (one shape and one dtype per elementwise op, broadcasts are their
own prims), so every rule returns a cotangent of its argument's exact shape and dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from fusionlens.ir.trace import Symbol, SymbolKind, Value
from fusionlens.ops import prims as P

# prim -> rule: (forward op, cotangents) -> a cotangent per positional argument (rules.lookup reads it)
RULES: dict[Symbol, Callable] = {}


def rule(*syms: Symbol):
    wrong = [s for s in syms if s.kind is not SymbolKind.PRIM or P.ALL.get(s.name.removeprefix("prims.")) is not s]
    if wrong:
        raise ValueError(f"prim rules are for prims, not {wrong}")

    def deco(fn):
        for s in syms:
            RULES[s] = fn
        return fn
    return deco


def _is_value(x) -> bool:
    return isinstance(x, Value)


def zeros_like(v: Value) -> Value:
    return P.full(v.shape, 0.0 if v.dtype.is_floating_point else 0, dtype=v.dtype, device=v.device)


def broadcast_like(g: Value, like: Value, kept: tuple) -> Value:
    """`g` (over `kept` dims of `like`) broadcast back to like's shape."""
    return P.broadcast_in_dim(g, like.shape, kept)


# --- elementwise: (x, y, g) -> dx ----------------------------------------------------------

def _unary(fn):
    def apply(b, cots):
        return [fn(b.args[0], b.output, cots[0])]
    return apply


_UNARY = {
    P.abs: lambda x, y, g: P.mul(g, P.sign(x)),
    P.neg: lambda x, y, g: P.neg(g),
    P.exp: lambda x, y, g: P.mul(g, y),
    P.exp2: lambda x, y, g: P.mul(g, P.mul(y, math.log(2.0))),
    P.log: lambda x, y, g: P.div(g, x),
    P.log2: lambda x, y, g: P.div(g, P.mul(x, math.log(2.0))),
    P.log1p: lambda x, y, g: P.div(g, P.add(x, 1.0)),
    P.expm1: lambda x, y, g: P.mul(g, P.add(y, 1.0)),
    P.sqrt: lambda x, y, g: P.div(g, P.mul(y, 2.0)),
    P.rsqrt: lambda x, y, g: P.mul(g, P.mul(P.mul(y, P.mul(y, y)), -0.5)),
    P.sin: lambda x, y, g: P.mul(g, P.cos(x)),
    P.cos: lambda x, y, g: P.neg(P.mul(g, P.sin(x))),
    P.tan: lambda x, y, g: P.mul(g, P.add(P.mul(y, y), 1.0)),
    P.tanh: lambda x, y, g: P.mul(g, P.sub(1.0, P.mul(y, y))),
    P.sigmoid: lambda x, y, g: P.mul(g, P.mul(y, P.sub(1.0, y))),
    P.erf: lambda x, y, g: P.mul(g, P.mul(P.exp(P.neg(P.mul(x, x))), 2.0 / math.sqrt(math.pi))),
    P.reciprocal: lambda x, y, g: P.neg(P.mul(g, P.mul(y, y))),
}
for _sym, _fn in _UNARY.items():
    RULES[_sym] = _unary(_fn)


@rule(P.floor, P.ceil, P.round, P.trunc, P.sign)
def _step(b, cots):  # piecewise constant: zero almost everywhere, as in eager
    return [None]


def _neg_or_none(g):
    return None if g is None else P.neg(g)


@rule(P.add)
def _add(b, cots):
    a, c = b.args
    g = cots[0]
    return [g if _is_value(a) else None, g if _is_value(c) else None]


@rule(P.sub)
def _sub(b, cots):
    a, c = b.args
    g = cots[0]
    return [g if _is_value(a) else None, P.neg(g) if _is_value(c) else None]


@rule(P.mul)
def _mul(b, cots):
    a, c = b.args
    g = cots[0]
    return [P.mul(g, c) if _is_value(a) else None, P.mul(g, a) if _is_value(c) else None]


@rule(P.div)
def _div(b, cots):
    a, c = b.args
    g = cots[0]
    da = P.div(g, c) if _is_value(a) else None
    dc = P.neg(P.div(P.mul(g, b.output), c)) if _is_value(c) else None
    return [da, dc]


@rule(P.pow)
def _pow(b, cots):
    a, c = b.args
    g, y = cots[0], b.output
    da = dc = None
    if _is_value(a):
        if _is_value(c):  # c * a**(c - 1), taken as 0 where c == 0 (as torch: 0**-1 would make it nan)
            da = P.where(P.eq(c, 0.0), 0.0, P.mul(g, P.mul(c, P.pow(a, P.sub(c, 1.0)))))
        elif c == 0:
            da = None
        else:
            da = P.mul(g, P.mul(P.pow(a, c - 1.0), float(c)))
    if _is_value(c) and c.dtype.is_floating_point:
        # d/dc a**c = a**c * log(a); torch takes it as 0 where a == 0 and c >= 0
        if not _is_value(a):
            log_a = math.log(a) if a > 0 else -math.inf if a == 0 else math.nan
            dc = P.mul(P.mul(g, y), log_a)
            if a == 0:
                dc = P.where(P.ge(c, 0.0), 0.0, dc)
        else:
            zero = P.bitwise_and(P.eq(a, 0.0), P.ge(c, 0.0))
            dc = P.where(zero, 0.0, P.mul(P.mul(g, y), P.log(a)))
    return [da, dc]


@rule(P.remainder)
def _remainder(b, cots):
    a, c = b.args
    g = cots[0]
    dc = P.neg(P.mul(g, P.floor(P.div(a, c)))) if _is_value(c) else None
    return [g if _is_value(a) else None, dc]


@rule(P.fmod)
def _fmod(b, cots):
    a, c = b.args
    g = cots[0]
    dc = P.neg(P.mul(g, P.trunc(P.div(a, c)))) if _is_value(c) else None
    return [g if _is_value(a) else None, dc]


def _extremum(pick):
    def apply(b, cots):
        a, c = b.args
        g = cots[0]
        if not (_is_value(a) and _is_value(c)):  # clamp_min / clamp_max: ties pass the gradient
            x, bound = (a, c) if _is_value(a) else (c, a)
            keep = P.ge(x, bound) if pick is P.gt else P.le(x, bound)
            dx = P.where(keep, g, 0.0)
            return [dx, None] if _is_value(a) else [None, dx]
        half = P.mul(g, 0.5)  # torch.maximum splits a tie's gradient between both
        ties = P.eq(a, c)
        da = P.where(ties, half, P.where(pick(a, c), g, 0.0))
        dc = P.where(ties, half, P.where(pick(c, a), g, 0.0))
        return [da, dc]
    return apply


RULES[P.maximum] = _extremum(P.gt)
RULES[P.minimum] = _extremum(P.lt)


@rule(P.where)
def _where(b, cots):
    cond, a, c = b.args
    g = cots[0]
    da = P.where(cond, g, 0.0) if _is_value(a) else None
    dc = P.where(cond, 0.0, g) if _is_value(c) else None
    return [None, da, dc]


@rule(P.convert_element_type)
def _convert(b, cots):
    a = b.args[0]
    if not a.dtype.is_floating_point:
        return [None, None]
    return [P.convert_element_type(cots[0], a.dtype), None]


# --- shapes -------------------------------------------------------------------------------

@rule(P.broadcast_in_dim)
def _broadcast(b, cots):
    a, shape, bdims = b.args[0], b.args[1], b.args[2]
    g = cots[0]
    summed = [d for d in range(len(shape)) if d not in bdims]
    summed += [bdims[i] for i, s in enumerate(a.shape) if s == 1 and shape[bdims[i]] != 1]
    if summed:
        g = P.sum(g, tuple(sorted(summed)))
    if tuple(g.shape) != a.shape:
        g = P.reshape(g, a.shape)
    return [g, None, None]


@rule(P.reshape)
def _reshape(b, cots):
    return [P.reshape(cots[0], b.args[0].shape), None]


@rule(P.permute)
def _permute(b, cots):
    dims = list(b.args[1])
    inverse = [dims.index(i) for i in range(len(dims))]
    return [P.permute(cots[0], inverse), None]


@rule(P.slice)
def _slice(b, cots):
    a, starts = b.args[0], b.args[1]
    strides = b.args[3] if len(b.args) > 3 and b.args[3] else [1] * a.ndim
    g = cots[0]
    config = []
    for size, start, st, n in zip(a.shape, starts, strides, g.shape):
        last = start + (n - 1) * st if n else start - 1
        config.append((start, size - last - 1, st - 1) if n else (size, 0, 0))
    if all(c == (0, 0, 0) for c in config):
        return [g, None, None, None][:len(b.args)]
    if any(n == 0 for n in g.shape):
        return [zeros_like(a)] + [None] * (len(b.args) - 1)
    return [P.pad(g, 0.0, config)] + [None] * (len(b.args) - 1)


@rule(P.cat)
def _cat(b, cots):
    tensors, dim = b.args
    g = cots[0]
    out, offset = [], 0
    for t in tensors:
        n = t.shape[dim]
        starts = [offset if d == dim else 0 for d in range(g.ndim)]
        ends = [offset + n if d == dim else s for d, s in enumerate(g.shape)]
        out.append(P.slice(g, starts, ends) if t.dtype.is_floating_point else None)
        offset += n
    return [out, None]


@rule(P.take_along_axis)
def _take(b, cots):
    a, index, dim = b.args
    g = cots[0]
    if tuple(index.shape) != tuple(g.shape):  # take_along_dim broadcasts the index and a
        index = P.broadcast_in_dim(index, g.shape, tuple(range(g.ndim)))
    spread = [a.shape[d] if d == dim else g.shape[d] for d in range(a.ndim)]
    target = P.full(spread, 0.0, dtype=a.dtype, device=a.device)
    return [_sum_to(P.scatter_add(target, index, g, dim), a.shape), None, None]


def _sum_to(g: Value, shape) -> Value:
    dims = tuple(d for d, (s, t) in enumerate(zip(g.shape, shape)) if t == 1 and s != 1)
    if dims:
        g = P.reshape(P.sum(g, dims), shape)
    return g


# --- reductions ---------------------------------------------------------------------------

def _kept(a: Value, dims) -> tuple:
    return tuple(d for d in range(a.ndim) if d not in dims)


@rule(P.sum)
def _sum(b, cots):
    a, dims = b.args
    return [broadcast_like(cots[0], a, _kept(a, dims)), None]


def _extreme_reduction(b, cots):
    a, dims = b.args
    kept = _kept(a, dims)
    hit = P.eq(a, broadcast_like(b.output, a, kept))
    count = P.sum(P.convert_element_type(hit, a.dtype), tuple(dims))  # ties share it, as in eager
    share = broadcast_like(P.div(cots[0], count), a, kept)
    return [P.where(hit, share, 0.0), None]


RULES[P.amax] = RULES[P.amin] = _extreme_reduction


@rule(P.prod)
def _prod(b, cots):
    """d prod / d a_i is the product of the others: prod / a_i without zeros; with one zero in
    the slice, that product at the zero and 0 elsewhere; with two or more, 0 (as torch)."""
    a, dims = b.args
    kept = _kept(a, dims)
    zero = P.eq(a, 0.0)
    safe = P.where(zero, 1.0, a)
    others = broadcast_like(P.prod(safe, tuple(dims)), a, kept)  # the product of the nonzero ones
    zeros = broadcast_like(P.sum(P.convert_element_type(zero, a.dtype), tuple(dims)), a, kept)
    g = broadcast_like(cots[0], a, kept)
    at_zero = P.where(P.eq(zeros, 1.0), P.mul(g, others), 0.0)
    elsewhere = P.where(P.eq(zeros, 0.0), P.div(P.mul(g, others), safe), 0.0)
    return [P.where(zero, at_zero, elsewhere), None]


@rule(P.var_mean)
def _var_mean(b, cots):
    a, dims, correction = b.args
    kept = _kept(a, dims)
    n = math.prod(a.shape[d] for d in dims)
    g_var, g_mean = cots
    out = None
    if g_mean is not None:
        out = broadcast_like(P.div(g_mean, float(n)), a, kept)
    if g_var is not None:
        centred = P.sub(a, broadcast_like(b.outputs[1], a, kept))
        scale = 2.0 / max(n - correction, 0) if n - correction > 0 else math.inf
        term = P.mul(centred, broadcast_like(P.mul(g_var, scale), a, kept))
        out = term if out is None else P.add(out, term)
    return [out, None, None]


@rule(P.scatter_add)
def _scatter_add(b, cots):
    a, index, src, dim = b.args
    g = cots[0]
    return [g if _is_value(a) else None, None, P.take_along_axis(g, index, dim) if _is_value(src) else None, None]


@rule(P.pad)
def _pad(b, cots):
    a, value, config = b.args
    starts = [lo for lo, hi, interior in config]
    ends = [lo + s + max(s - 1, 0) * interior for s, (lo, hi, interior) in zip(a.shape, config)]
    strides = [interior + 1 for lo, hi, interior in config]
    return [P.slice(cots[0], starts, ends, strides), None, None]


# --- scatters: the window's cotangent goes to src, the rest to the base --------------------

@rule(P.strided_scatter)
def _strided_scatter(b, cots):
    a, src, offset, strides = b.args
    g = cots[0]
    if g is None or not g.dtype.is_floating_point:
        return [None, None, None, None]
    return [P.strided_scatter(g, zeros_like(src), offset, strides),
            P.strided_window(g, src.shape, offset, strides), None, None]


@rule(P.strided_window)
def _strided_window(b, cots):
    a, shape, offset, strides = b.args
    return [P.strided_scatter(zeros_like(a), cots[0], offset, strides), None, None, None]


@rule(P.scatter)
def _scatter(b, cots):
    a, index, src, dim = b.args
    g = cots[0]
    if g is None or not g.dtype.is_floating_point:
        return [None, None, None, None]
    return [P.scatter(g, index, zeros_like(src), dim), None, P.take_along_axis(g, index, dim), None]
