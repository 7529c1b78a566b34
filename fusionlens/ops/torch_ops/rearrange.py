"""Ops that only move elements: the shuffles of channels and pixels (a reshape, a permute and
a reshape) and F.unfold (im2col: one strided slice of the zero-padded input per kernel
offset, stacked)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fusionlens.ops import prims
from fusionlens.ops.torch_ops.common import _scalar_as
from fusionlens.ops.torch_ops.registry import NoDecomposition, register
from fusionlens.ops.torch_ops.shapes import permute, reshape, stack

_MAX_KERNEL_OFFSETS = 64  # im2col takes a slice per kernel offset


@register(F.pixel_shuffle, torch.pixel_shuffle, name="torch.nn.functional.pixel_shuffle")
def pixel_shuffle(input, upscale_factor):
    """(*, C r^2, H, W) -> (*, C, H r, W r)."""
    r, lead = upscale_factor, tuple(input.shape[:-3])
    c, h, w = input.shape[-3:]
    n = len(lead)
    x = reshape(input, lead + (c // (r * r), r, r, h, w))
    x = permute(x, tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2))
    return reshape(x, lead + (c // (r * r), h * r, w * r))


@register(F.pixel_unshuffle, torch.pixel_unshuffle, name="torch.nn.functional.pixel_unshuffle")
def pixel_unshuffle(input, downscale_factor):
    """(*, C, H r, W r) -> (*, C r^2, H, W)."""
    r, lead = downscale_factor, tuple(input.shape[:-3])
    c, h, w = input.shape[-3:]
    n = len(lead)
    x = reshape(input, lead + (c, h // r, r, w // r, r))
    x = permute(x, tuple(range(n)) + (n, n + 2, n + 4, n + 1, n + 3))
    return reshape(x, lead + (c * r * r, h // r, w // r))


@register(F.channel_shuffle, torch.channel_shuffle, name="torch.nn.functional.channel_shuffle")
def channel_shuffle(input, groups):
    """(N, g * k, *) -> the channels read as (k, g): channel i of group j moves to i * g + j."""
    n, c, rest = input.shape[0], input.shape[1], tuple(input.shape[2:])
    x = reshape(input, (n, groups, c // groups) + rest)
    x = permute(x, (0, 2, 1) + tuple(range(3, x.ndim)))
    return reshape(x, (n, c) + rest)


def _pair(v) -> tuple:
    return (v, v) if isinstance(v, int) else tuple(v)


@register(F.unfold)
def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """(N, C, H, W) -> (N, C * kh * kw, L), column l holding the patch at output position l,
    its rows ordered (channel, kernel row, kernel column) as torch's im2col."""
    if input.ndim not in (3, 4):
        raise NoDecomposition("an input that is not 3-d or 4-d")  # torch raises
    if input.ndim == 3:
        out = unfold(reshape(input, (1,) + tuple(input.shape)), kernel_size, dilation, padding, stride)
        return reshape(out, tuple(out.shape[1:]))
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = map(_pair, (kernel_size, dilation, padding, stride))
    if kh * kw > _MAX_KERNEL_OFFSETS:
        raise NoDecomposition(f"a {kh}x{kw} kernel")
    n, c, h, w = input.shape
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise NoDecomposition("a kernel larger than the padded input")  # torch raises
    x = input
    if ph or pw:
        x = prims.pad(x, _scalar_as(0, x.dtype), [(0, 0, 0), (0, 0, 0), (ph, ph, 0), (pw, pw, 0)])
    patches = []
    for i in range(kh):
        for j in range(kw):
            top, left = i * dh, j * dw
            patches.append(prims.slice(x, [0, 0, top, left], [n, c, top + (oh - 1) * sh + 1, left + (ow - 1) * sw + 1],
                                       [1, 1, sh, sw]))
    columns = stack(patches, 2)  # (N, C, kh * kw, oh, ow)
    return reshape(columns, (n, c * kh * kw, oh * ow))

