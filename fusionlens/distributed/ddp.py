"""DistributedDataParallel around a compiled module: what fusionlens.jit and compile_target share.

A DDP wrapper is not traced: its module is compiled, and DDP's own forward runs around the
compiled call (`call`). Its reducer's hooks all-reduce the gradients as they do eagerly, unless
the compiled backward issues them itself (fusionlens/distributed/ddp_overlap.py): then DDP's forward runs as
under `no_sync()` for the reducer, its buffer broadcast kept.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

import torch

from fusionlens.report import schema as R


def is_ddp(fn) -> bool:
    parallel = sys.modules.get("torch.nn.parallel")  # imported with torch; DDP itself only if used
    return parallel is not None and isinstance(fn, parallel.DistributedDataParallel)


def call(ddp, compiled, args, kwargs, synchronising: Callable[..., tuple[Any, bool]] | None = None):
    """DDP's own forward (torch/nn/parallel/distributed.py) with the compiled module in it: its
    buffer broadcast and bucket rebuild before, and after, prepare_for_backward, which readies
    the backward's gradient all-reduces (a program that skipped it trained each rank on its own
    gradients from the second step). DDP communicates as it does eagerly: its reducer's hooks
    fire as the compiled backward accumulates each parameter's gradient.

    `synchronising(sync, *args, **kwargs) -> (output, whether its backward all-reduces the
    gradients itself)` instead of `compiled` (fusionlens/distributed/ddp_overlap.py): where it does, DDP's
    reducer is left out as under `ddp.no_sync()` (its buffer broadcast kept)."""
    with torch.autograd.profiler.record_function("DistributedDataParallel.forward"):
        if synchronising is not None:
            return _call_synchronising(ddp, synchronising, args, kwargs)
        args, kwargs = ddp._pre_forward(*args, **kwargs)
        if ddp._delay_all_reduce_all_params or ddp._use_python_reducer:
            output = compiled(*args, **kwargs)
        else:
            with ddp._inside_ddp_forward():
                output = compiled(*args, **kwargs)
        return ddp._post_forward(output)


@contextlib.contextmanager
def _reducer_off(ddp):
    """DDP's forward steps as under no_sync: its reducer readies nothing for the backward."""
    sync = ddp.require_backward_grad_sync
    ddp.require_backward_grad_sync = False
    try:
        yield
    finally:
        ddp.require_backward_grad_sync = sync


def _call_synchronising(ddp, synchronising: Callable[..., tuple[Any, bool]], args: tuple, kwargs: dict) -> Any:
    sync = torch.is_grad_enabled() and ddp.require_backward_grad_sync
    with _reducer_off(ddp):
        args, kwargs = ddp._pre_forward(*args, **kwargs)
    with ddp._inside_ddp_forward():
        output, synced = synchronising(sync, *args, **kwargs)
    if sync and not synced:  # the module's program (or eager) ran: the reducer all-reduces, as eagerly
        ddp.logger.set_runtime_stats_and_log()
        ddp.reducer.prepare_for_forward()
        return ddp._post_forward(output)
    with _reducer_off(ddp):
        output = ddp._post_forward(output)
    ddp.require_forward_param_sync = sync  # as eager sets it: buffers are broadcast before the next forward
    return output


def buckets(ddp) -> list[R.Collective]:
    """The all-reduce of each of DDP's gradient buckets, in the backward (DDP's own logging data
    has their sizes; the buckets are rebuilt after the first step, in the order gradients came)."""
    try:
        sizes = [int(s) for s in str(ddp._get_ddp_logging_data().get("bucket_sizes", "")).split(",") if s.strip()]
    except Exception:  # noqa: BLE001 - a DDP without logging data: nothing to list
        return []
    group = ddp.process_group.size() if ddp.process_group is not None else 1
    return [R.Collective("all_reduce", "ddp-bucket", size, group, "backward") for size in sizes]
