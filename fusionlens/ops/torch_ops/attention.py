"""Attention's fused kernels as library calls of their own: what a training forward runs instead
of F.scaled_dot_product_attention where torch's dispatcher would pick its fused kernel, and
that kernel's backward.

On a CPU, torch's SDPA picks `aten._scaled_dot_product_flash_attention_for_cpu` (flash
attention, blocked over keys) whenever `_fused_sdp_choice` says so; it returns the output and
each query row's logsumexp ([B, H, L], float32 for 16-bit inputs), and its backward
(`..._for_cpu_backward`) computes dq, dk, dv from those, a block of scores at a time: the
[B, H, L, S] scores are never held. `flash_cpu` and `flash_cpu_backward` are those two kernels
(eager's own, so a compiled step's gradients are eager's bits), and `flash_cpu_applies` asks
the dispatcher whether eager would run them for a call's operands. A GPU's flash and
memory-efficient kernels are not here yet (their choice needs the device's properties).
"""

from __future__ import annotations

import math

import torch

from fusionlens.ir.sizes import hint
from fusionlens.ir.trace import OpTag, Symbol, Value

_ATEN = torch.ops.aten
FLASH = torch.nn.attention.SDPBackend.FLASH_ATTENTION.value  # what _fused_sdp_choice returns for it


def _last_dim_unit_stride(t: torch.Tensor) -> torch.Tensor:
    # the kernel reads each row's head dim as contiguous; eager's dispatcher sends any other
    # layout to the math path (check_last_dim_stride_equals_1), where a compile cannot see strides
    return t if t.ndim == 0 or t.stride(-1) == 1 else t.contiguous()


def _additive(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean mask as eager's SDPA hands its kernels one (convert_boolean_attn_mask): 0 where
    True, -inf where False, in the query's dtype; a float mask as it is."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    zero, minus_inf = torch.zeros((), dtype=dtype, device=mask.device), torch.tensor(-math.inf, dtype=dtype,
                                                                                    device=mask.device)
    return torch.where(mask, zero, minus_inf)


def _flash_cpu_impl(query, key, value, attn_mask, is_causal, scale):
    q, k, v = (_last_dim_unit_stride(t) for t in (query, key, value))
    return _ATEN._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, is_causal, attn_mask=_additive(attn_mask, query.dtype), scale=scale)


def _flash_cpu_backward_impl(grad, query, key, value, out, logsumexp, attn_mask, is_causal, scale):
    g, q, k, v, o = (_last_dim_unit_stride(t) for t in (grad, query, key, value, out))
    return _ATEN._scaled_dot_product_flash_attention_for_cpu_backward(
        g, q, k, v, o, logsumexp, 0.0, is_causal, attn_mask=_additive(attn_mask, query.dtype), scale=scale)


def _scores(query: Value, key: Value, is_causal: bool) -> int:
    """Scores a call computes per batch and head: a causal mask (top-left aligned) skips those it hides."""
    L, S = query.shape[-2], key.shape[-2]
    if not is_causal:
        return L * S
    m = min(L, S)
    return m * (m + 1) // 2 + (L - m) * S


def _flops(args: tuple, kwargs: dict, outputs: list) -> float:
    """As F.scaled_dot_product_attention's (flops.attention): Q K^T, P V and ~5 a score for the softmax."""
    q, k, v, _, is_causal, _ = args
    return math.prod(q.shape[:-2]) * _scores(q, k, is_causal) * (2 * q.shape[-1] + 2 * v.shape[-1] + 5)


def _backward_flops(args: tuple, kwargs: dict, outputs: list) -> float:
    """Flash attention's backward: the scores again (Q K^T, 2E), dV = P^T dO and dP = dO V^T (2Ev
    each), dQ = dS K and dK = dS^T Q (2E each), and ~8 a score for P and dS: 2.5x the forward's
    matmuls, as FlashAttention-2 counts it."""
    _, q, k, v, _, _, _, is_causal, _ = args
    return math.prod(q.shape[:-2]) * _scores(q, k, is_causal) * (6 * q.shape[-1] + 4 * v.shape[-1] + 8)


_TAGS = (OpTag.LIBRARY_CALL, OpTag.PROGRAM_GLOBAL, OpTag.MATMUL)
# (query, key, value, attn_mask, is_causal, scale) -> (output, logsumexp)
flash_cpu = Symbol("sdpa_flash_cpu", _flash_cpu_impl, tags=_TAGS, flops=_flops)
# (grad, query, key, value, output, logsumexp, attn_mask, is_causal, scale) -> (dq, dk, dv)
flash_cpu_backward = Symbol("sdpa_flash_cpu_backward", _flash_cpu_backward_impl, tags=_TAGS, flops=_backward_flops)


def _stand_in(v: Value, requires_grad: bool = False) -> torch.Tensor:
    """A CPU tensor of `v`'s sizes (the example's, for a symbolic size), dtype and a unit last
    stride, holding one row: what the dispatcher's checks read, allocated for nothing more."""
    sizes = [hint(s) for s in v.shape]
    row = torch.empty(sizes[-1] if sizes else 1, dtype=v.dtype, device="cpu", requires_grad=requires_grad)
    return row.expand(sizes) if sizes else row[0]


def flash_cpu_applies(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                      mask_needs_grad: bool) -> bool:
    """Whether eager's F.scaled_dot_product_attention runs the CPU flash kernel for these
    operands: torch's own `_fused_sdp_choice` asked on stand-ins of their sizes and dtypes (so
    `torch.nn.attention.sdpa_kernel` and the backend switches are heeded, as at the call's
    compile). It says no to dropout, fewer or more than 4 dims, broadcast batch or heads (but
    GQA), unequal head dims, a mask that requires grad, a strided last dim; yes to float64,
    float32 and 16-bit, causal or not, boolean and float masks, `scale`, GQA."""
    tensors = [query, key, value] + ([attn_mask] if attn_mask is not None else [])
    if not all(isinstance(t, Value) and t.device.type == "cpu" for t in tensors):
        return False
    if not (isinstance(dropout_p, (int, float)) and isinstance(is_causal, bool) and isinstance(enable_gqa, bool)
            and (scale is None or isinstance(scale, (int, float)))):
        return False
    q, k, v = (_stand_in(t) for t in (query, key, value))
    with torch.enable_grad():  # a mask that requires grad sends eager to the math path
        mask = _stand_in(attn_mask, mask_needs_grad and attn_mask.dtype.is_floating_point) \
            if attn_mask is not None else None
        choice = _ATEN._fused_sdp_choice(q, k, v, mask, float(dropout_p), is_causal, scale=scale,
                                         enable_gqa=enable_gqa)
    return choice == FLASH
