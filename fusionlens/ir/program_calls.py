"""What a printed program calls at run time beyond torch and prims (fusionlens/ir/trace.py prints
`from fusionlens.ir.program_calls import no_grad, write_back` at its top)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch


def write_back(dst: torch.Tensor, src: torch.Tensor) -> None:
    """`dst.copy_(src)`, and where dst's elements share memory (an expanded input, stride 0),
    as eager's in-place op left it: each memory location written once, from the first of the
    elements that alias it (copy_ refuses a destination that overlaps itself). Nothing to copy
    where src is dst: an update written into the input itself (fusionlens/middle/reinplace.py)."""
    if src is dst:
        return
    try:
        dst.copy_(src)
    except RuntimeError:
        if not any(st == 0 and n > 1 for n, st in zip(dst.shape, dst.stride())):
            raise
        key = tuple(slice(0, 1) if st == 0 else slice(None) for st in dst.stride())
        dst[key].copy_(src[key])


def no_grad(program: Callable) -> Callable:
    """What `@torch.no_grad()` does to a printed program (no autograd graph; grad mode as it
    was after, however the call ends) for a fraction of its cost a call: grad mode is
    switched off only when it is on."""
    def run(*args):
        if not torch.is_grad_enabled():
            return program(*args)
        torch._C._set_grad_enabled(False)
        try:
            return program(*args)
        finally:
            torch._C._set_grad_enabled(True)
    return functools.wraps(program)(run)
