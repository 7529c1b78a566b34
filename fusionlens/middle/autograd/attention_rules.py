"""Backward rules of F.scaled_dot_product_attention, and what a training forward runs it as.

Where eager's dispatcher would run torch's fused CPU kernel (flash attention: `attention.
flash_cpu_applies`, torch's own `_fused_sdp_choice` asked), a training forward runs SDPA as
`sdpa_flash_cpu` (explicit_forward), which returns the output and each query row's logsumexp
([B, H, L], float32 for 16-bit inputs); both are saved, and the backward is one call of the
fused backward (`sdpa_flash_cpu_backward`: dq, dk, dv), as eager's autograd does: no
[B, H, L, S] scores or probabilities are ever held, and the gradients are eager's bits.

Elsewhere the backward is the math rule (`_sdpa`): the scores and probabilities recomputed from
q and k, [B, H, L, S] each, float32 for 16-bit inputs. It serves what the CPU kernel does not
take (fewer than 4 dims, broadcast batch or heads, unequal head dims, a float mask that requires
grad: its gradient is the scores'), `sdpa_kernel(SDPBackend.MATH)`, and every device but the CPU:
a GPU's flash, memory-efficient and cuDNN kernels are not chosen here (their choice reads the
device's properties; no GPU to check them against). With dropout the forward runs as torch's
math path does, its mask drawn in the open (`_sdpa_explicit`): the CPU kernel takes no dropout
(eager's dispatcher sends it to the math path), and a GPU kernel's Philox draws are not
replayed here.

`backward_note` says so at the SDPA call's line where a training forward does not run the fused
kernel: the [B, H, L, S] tensors its backward holds, and why the kernel does not apply (the
report's `attention-backward` information diagnostic, the editor's hover).
"""

from __future__ import annotations

import inspect
import math

import torch

from fusionlens.middle.autograd.torch_rules import (EXPLICIT, READS_NEEDS, RULES, NoRule, _broadcast, _cast,
                                                    _compute_dtype, _pairs, _right_aligned, _sdpa_signature, _t,
                                                    _value, reduce_to, rule)
from fusionlens.ir.trace import Value
from fusionlens.ops import prims as P
from fusionlens.ops.torch_ops import attention as A, library_calls as L, normalization as N
from fusionlens.ops.torch_ops.registry import symbol_for


# --- the math rule: the scores recomputed in the backward ------------------------------------

def _batched(x: Value, batch: tuple) -> Value:
    """`x` (..., n, d) broadcast over the batch dims `batch`."""
    shape = tuple(batch) + tuple(x.shape[-2:])
    return x if tuple(x.shape) == shape else _right_aligned(x, shape)


def _gqa(x: Value, heads: int) -> Value:
    """Key or value heads shared by groups of query heads (enable_gqa): kv head j serves query
    heads j*G ... j*G+G-1, as torch's repeat_interleave along dim -3."""
    kv = x.shape[-3]
    if kv == heads:
        return x
    lead, (n, d) = tuple(x.shape[:-3]), tuple(x.shape[-2:])
    kept = tuple(range(len(lead) + 1)) + (len(lead) + 2, len(lead) + 3)
    spread = P.broadcast_in_dim(x, lead + (kv, heads // kv, n, d), kept)
    return P.reshape(spread, lead + (heads, n, d))


def _gqa_grad(g: Value, like: Value) -> Value:
    """The gradient of `_gqa(like)` summed back over each group."""
    kv, heads = like.shape[-3], g.shape[-3]
    if kv == heads:
        return g
    lead = tuple(g.shape[:-3])
    grouped = P.reshape(g, lead + (kv, heads // kv) + tuple(g.shape[-2:]))
    return P.sum(grouped, (len(lead) + 1,))


def _default_scale(query: Value) -> float:
    """1/sqrt(E), as torch's; where E is 0 (an empty head dim: fuzz backward 161, 32629) the scores
    are zeros whatever the scale (eager's math path scales the empty q and k by its root), so 1,
    not 1/0 (raised) nor inf (0 * inf is NaN)."""
    return 1.0 / math.sqrt(query.shape[-1]) if query.shape[-1] != 0 else 1.0


def _masked(scores: Value, attn_mask, is_causal: bool) -> Value:
    """Attention scores with the causal mask (-inf above the diagonal, aligned top-left as
    torch's) and `attn_mask` (boolean: -inf where False; float: added) applied."""
    L_, S = scores.shape[-2], scores.shape[-1]
    if is_causal:
        iota = lambda n: P.iota(n, start=0, step=1, dtype=torch.int64, device=scores.device)  # noqa: E731
        rows, cols = P.broadcast_in_dim(iota(L_), (L_, S), (0,)), P.broadcast_in_dim(iota(S), (L_, S), (1,))
        scores = P.where(_right_aligned(P.ge(rows, cols), scores.shape), scores, -math.inf)
    if attn_mask is not None:
        mask = _right_aligned(attn_mask, scores.shape)
        scores = P.where(mask, scores, -math.inf) if attn_mask.dtype == torch.bool \
            else P.add(scores, _cast(mask, scores.dtype))
    return scores


@rule("torch.nn.functional.scaled_dot_product_attention", signature=_sdpa_signature)
def _sdpa(b, cots, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    if dropout_p:
        raise NoRule("dropout (the training forward runs it explicitly: _sdpa_explicit)")
    if query.ndim < 2 or (enable_gqa and (query.ndim < 3 or query.shape[-3] % key.shape[-3])):
        raise NoRule("fewer than 2 dims, or query heads not a multiple of key heads")
    if attn_mask is not None and not _value(attn_mask):
        raise NoRule("a non-tensor mask")
    compute = _compute_dtype(query.dtype)
    heads = query.shape[-3] if enable_gqa else None
    k_, v_ = (_gqa(t, heads) if heads else t for t in (key, value))
    batch = _broadcast(query.shape[:-2], k_.shape[:-2], v_.shape[:-2])
    if any(n != 1 and n != m for t in (query, k_, v_) for n, m in zip(reversed(t.shape[:-2]), reversed(batch))):
        raise NoRule("batch dims that do not broadcast (eager returns an empty head dim's result unchecked)")
    q, k, v = (_cast(_batched(t, batch), compute) for t in (query, k_, v_))
    g = _cast(cots[0], compute)
    scale = _default_scale(query) if scale is None else scale
    scores = _masked(P.mul(L.matmul(q, _t(k)), scale), attn_mask, is_causal)
    p = N.softmax(scores, -1)
    kept = tuple(range(scores.ndim - 1))
    if attn_mask is not None and scores.shape[-1] != 0:  # a row the mask hides whole: zeros, as torch's
        # _safe_softmax (fuzz backward 25027)
        hidden = P.eq(P.amax(scores, (scores.ndim - 1,)), -math.inf)
        p = P.where(P.broadcast_in_dim(hidden, scores.shape, kept), 0.0, p)
    gv = L.matmul(_t(p), g)
    gp = L.matmul(g, _t(v))
    gs = P.mul(p, P.sub(gp, P.broadcast_in_dim(P.sum(P.mul(gp, p), (scores.ndim - 1,)), scores.shape, kept)))
    gq = P.mul(L.matmul(gs, k), scale)
    gk = P.mul(L.matmul(_t(gs), q), scale)
    # back to each input's own shape and dtype: summed over broadcast batch dims and query groups
    gq = reduce_to(gq, query.shape)
    # (groups only with enable_gqa: a 2-d key has no heads dim to group: fuzz backward 25005)
    gk, gv = (_gqa_grad(reduce_to(gt, t_.shape), t) if heads else reduce_to(gt, t.shape)
              for gt, t_, t in ((gk, k_, key), (gv, v_, value)))
    # operands that are one value (q = k = v = x) get their gradients summed before the one
    # rounding to its dtype, not each rounded and the roundings summed (fuzz backward 253, bf16)
    summed: dict[str, list] = {}
    for t, gt in ((query, gq), (key, gk), (value, gv)):
        if t.name in summed:
            summed[t.name][1] = P.add(summed[t.name][1], gt)
        else:
            summed[t.name] = [t, gt]
    gmask = None
    if attn_mask is not None and attn_mask.dtype.is_floating_point:
        gmask = _cast(reduce_to(gs, attn_mask.shape), attn_mask.dtype)
    return _pairs(*((t, _cast(gt, t.dtype)) for t, gt in summed.values()), (attn_mask, gmask))


# --- the fused kernel: its output and logsumexp saved, its backward one call ----------------

def _flash_cpu(b, cots):
    """dq, dk, dv from the saved output and logsumexp: one call of eager's fused backward (the
    logsumexp's own output gets no cotangent: nothing but the backward reads it)."""
    query, key, value, attn_mask, is_causal, scale = b.args
    out, logsumexp = b.outputs
    if cots[0] is None:
        return []
    grads = A.flash_cpu_backward(cots[0], query, key, value, out, logsumexp, attn_mask, is_causal, scale)
    return _pairs(*zip((query, key, value), grads))


RULES[A.flash_cpu] = _flash_cpu


def _operands(b) -> tuple | None:
    """SDPA call `b`'s (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa), bound
    as torch binds them; None where they do not bind or q, k, v are not Values of 2 dims or more."""
    try:
        a = inspect.signature(_sdpa_signature).bind(*b.args, **b.kwargs)
    except TypeError:
        return None
    a.apply_defaults()
    operands = tuple(a.arguments.values())
    query, key, value = operands[:3]
    return operands if all(_value(t) for t in (query, key, value)) and query.ndim >= 2 else None


def _sdpa_explicit(b, needs):
    """SDPA in a training forward: `sdpa_flash_cpu` where eager runs the fused CPU kernel (the
    module's docstring); with dropout, torch's math path (scores, softmax, F.dropout, matmul),
    eager's draws made in the open, saved, and differentiated (on a CPU the results are eager's);
    else None (the op whole, its backward the math rule)."""
    operands = _operands(b)
    if operands is None:
        return None
    query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa = operands
    if not dropout_p:
        mask_needs_grad = _value(attn_mask) and attn_mask.name in needs
        if A.flash_cpu_applies(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                               mask_needs_grad):
            return A.flash_cpu(query, key, value, attn_mask, is_causal, scale)[0]
        return None
    if enable_gqa:
        key, value = _gqa(key, query.shape[-3]), _gqa(value, query.shape[-3])
    scale = _default_scale(query) if scale is None else scale
    if scale > 0:  # as torch's math path: q and k scaled by sqrt(scale) each
        scores = L.matmul(P.mul(query, math.sqrt(scale)), _t(P.mul(key, math.sqrt(scale))))
    else:
        scores = P.mul(L.matmul(query, _t(key)), scale)
    attention = symbol_for(torch.nn.functional.dropout)(N.softmax(_masked(scores, attn_mask, is_causal), -1), dropout_p)
    return L.matmul(attention, value)


EXPLICIT[L.sdpa] = _sdpa_explicit
READS_NEEDS.add(_sdpa_explicit)


# --- what the user is told where the fused kernel does not apply -----------------------------

_SDPA_NAME = "torch.nn.functional.scaled_dot_product_attention"


def _why_not_flash(query, key, value, attn_mask, enable_gqa, mask_needs_grad: bool) -> str:
    """Why eager's dispatcher does not pick the fused CPU kernel for these operands (without
    dropout), in the order torch's checks (sdp_utils_cpp) read them."""
    devices = {str(t.device) for t in (query, key, value, attn_mask) if _value(t)}
    if devices != {"cpu"}:
        return (f"the operands are on {', '.join(sorted(devices))} (FusionLens picks none of a GPU's flash, "
                "memory-efficient or cuDNN kernels: the math rule serves every device but the CPU)")
    if not torch.backends.cuda.flash_sdp_enabled():
        return ("the flash backend is off (torch.nn.attention.sdpa_kernel without FLASH_ATTENTION, or "
                "enable_flash_sdp(False))")
    if not all(_value(t) and t.ndim == 4 for t in (query, key, value)):
        return (f"the operands are not 4-d [batch, heads, length, head dim] (query {list(query.shape)}, "
                f"key {list(key.shape)})")
    heads_shared = enable_gqa and query.shape[1] % key.shape[1] == 0
    if any(t.shape[0] != query.shape[0] or (t.shape[1] != query.shape[1] and not heads_shared) for t in (key, value)):
        return (f"the batch or heads broadcast (query {list(query.shape)}, key {list(key.shape)}, value "
                f"{list(value.shape)}): the fused kernel takes equal batch and head dims")
    if not (query.shape[-1] == key.shape[-1] == value.shape[-1]):
        return f"the head dims differ (query {query.shape[-1]}, key {key.shape[-1]}, value {value.shape[-1]})"
    if mask_needs_grad:
        return "the mask requires grad (its gradient is the scores')"
    return "torch's dispatcher (_fused_sdp_choice) picks the math path for these operands"


def backward_note(b, needs: set) -> str | None:
    """What the user is told at an SDPA call a training forward differentiates without the fused
    CPU kernel (dropout, or the math rule): the [B, H, L, S] tensors its backward holds and why
    the kernel does not apply; None for any other op, or where the fused kernel runs."""
    if b.sym.name != _SDPA_NAME:
        return None
    operands = _operands(b)
    if operands is None:
        return None
    query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa = operands
    # [B, H, L, S]: the query's heads where key and value are shared by groups of them (GQA)
    scores = list(_broadcast(key.shape[:-2], query.shape[:-2])) + [query.shape[-2], key.shape[-2]]
    if dropout_p:
        return (f"scaled_dot_product_attention's backward reads the {scores} attention probabilities and "
                "dropout mask its forward saved (torch's math path, run in the open): the fused CPU kernel, "
                f"which saves only the output and logsumexp, takes no dropout (dropout_p={dropout_p})")
    mask_needs_grad = _value(attn_mask) and attn_mask.name in needs
    if A.flash_cpu_applies(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, mask_needs_grad):
        return None
    why = _why_not_flash(query, key, value, attn_mask, enable_gqa, mask_needs_grad)
    return (f"scaled_dot_product_attention's backward recomputes the {scores} attention scores and "
            "probabilities from q and k (the math rule; float32 for 16-bit inputs): the fused CPU kernel, "
            f"which saves only the output and logsumexp, does not apply: {why}")
