"""DistributedDataParallel around a compiled module: what compiler.jit and compile_target share.

A DDP wrapper is not traced: its module is compiled, and DDP's own forward runs around the
compiled call (`call`), so its reducer's hooks all-reduce the gradients as they do eagerly.
"""

from __future__ import annotations

import sys

import torch

from compiler import report as R


def is_ddp(fn) -> bool:
    parallel = sys.modules.get("torch.nn.parallel")  # imported with torch; DDP itself only if used
    return parallel is not None and isinstance(fn, parallel.DistributedDataParallel)


def call(ddp, compiled, args, kwargs):
    """DDP's own forward (torch/nn/parallel/distributed.py) with the compiled module in it: its
    buffer broadcast and bucket rebuild before, and after, prepare_for_backward, which readies
    the backward's gradient all-reduces (a program that skipped it trained each rank on its own
    gradients from the second step). DDP communicates as it does eagerly: its reducer's hooks
    fire as the compiled backward accumulates each parameter's gradient."""
    with torch.autograd.profiler.record_function("DistributedDataParallel.forward"):
        args, kwargs = ddp._pre_forward(*args, **kwargs)
        if ddp._delay_all_reduce_all_params or ddp._use_python_reducer:
            output = compiled(*args, **kwargs)
        else:
            with ddp._inside_ddp_forward():
                output = compiled(*args, **kwargs)
        return ddp._post_forward(output)


def buckets(ddp) -> list[R.Collective]:
    """The all-reduce of each of DDP's gradient buckets, in the backward (DDP's own logging data
    has their sizes; the buckets are rebuilt after the first step, in the order gradients came)."""
    try:
        sizes = [int(s) for s in str(ddp._get_ddp_logging_data().get("bucket_sizes", "")).split(",") if s.strip()]
    except Exception:  # noqa: BLE001 - a DDP without logging data: nothing to list
        return []
    group = ddp.process_group.size() if ddp.process_group is not None else 1
    return [R.Collective("all_reduce", "ddp-bucket", size, group, "backward") for size in sizes]
