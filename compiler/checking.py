"""Comparing compiled results with eager PyTorch: one tolerance per dtype, used everywhere."""

from __future__ import annotations

from typing import Optional

import torch
from torch.utils import _pytree as pytree

# (rtol, atol). Compiled programs reorder and fuse float math, so these are those of a
# compiler, not of one op: float32 results may differ in the last few bits of a long chain.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}


def tolerance(dtype: torch.dtype):
    return TOLERANCES.get(dtype, (0.0, 0.0))


def mismatch(actual, expected) -> Optional[str]:
    """None when every tensor in `actual` matches `expected`; else what differs, in words."""
    a_flat, a_spec = pytree.tree_flatten(actual)
    e_flat, e_spec = pytree.tree_flatten(expected)
    if len(a_flat) != len(e_flat):
        return f"the compiled program returned {len(a_flat)} values, eager returned {len(e_flat)}"
    for i, (a, e) in enumerate(zip(a_flat, e_flat)):
        if not isinstance(e, torch.Tensor):
            if a != e:
                return f"output {i}: {a!r} != {e!r}"
            continue
        if not isinstance(a, torch.Tensor):
            return f"output {i}: expected a tensor, got {type(a).__name__}"
        if a.shape != e.shape or a.dtype != e.dtype:
            return (f"output {i}: got {a.dtype}{list(a.shape)}, eager gives {e.dtype}{list(e.shape)}")
        rtol, atol = tolerance(e.dtype)
        # torch.isclose rather than torch.testing.assert_close: the latter imports
        # torch.distributed on first use, which costs half a second in every process.
        close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True) if e.numel() else torch.ones(())
        if not bool(close.all()):
            bad = int((~close).sum())
            diff = (a.double() - e.double()).abs()
            diff = diff[~close]
            return (f"output {i}: {bad} of {e.numel()} elements differ beyond rtol={rtol}, atol={atol}"
                    f" (largest difference {float(diff.max()):.3g})")
    return None
