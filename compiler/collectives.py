"""Collectives the user's code calls while it is traced: symbols of the trace, at their lines.

torch.distributed's collectives (`dist.all_reduce(t)`, ...) are no torch functions: a
TorchFunctionMode never sees them, so a trace would leave out the communication and the
program compute on each rank's own values. While a call is traced with a process group up,
`recording` puts a wrapper in front of each of them (in `torch.distributed` and its
`distributed_c10d` module, where `dist.x` finds them): the collective runs as eager runs it,
and the tracer records its functional form (the tensor it updates in place gets a new Value,
written back as any in-place update is). Those it cannot record (lists of tensors, objects,
point-to-point) make the signature run eagerly, with the reason at the user's line.
The functional collectives (`torch.distributed._functional_collectives`) are torch ops the
tracer records anyway (ops/torch_ops/fallbacks.py tags them collective).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable

import torch

# name -> position of the tensor the collective writes (its output, updated in place)
RECORDED = {"all_reduce": 0, "broadcast": 0, "reduce": 0, "all_gather_into_tensor": 0,
            "reduce_scatter_tensor": 0, "all_to_all_single": 0}
NOT_RECORDED = ("all_gather", "all_gather_object", "gather", "gather_object", "scatter", "scatter_object_list",
                "reduce_scatter", "all_to_all", "broadcast_object_list", "send", "recv", "isend", "irecv",
                "batch_isend_irecv", "barrier", "monitored_barrier")
def functional(name: str, real: Callable) -> Callable:
    """The collective `name` as a function returning what it writes, on a copy (the program's
    form: its input Value is not changed), its arguments by keyword. Runs synchronously."""
    written = list(inspect.signature(real).parameters)[RECORDED[name]]

    @functools.wraps(real)
    def run(**kwargs):
        kwargs[written] = kwargs[written].clone()
        real(**{**kwargs, "async_op": False})
        return kwargs[written]
    run.__name__ = f"dist_{name}"
    return run


@contextlib.contextmanager
def recording(tracer):
    """While active, each collective of RECORDED runs and is handed to `tracer.collective(name,
    functional form, its arguments by name, the tensor it wrote)`; each of NOT_RECORDED to
    `tracer.refuse_collective(name)`; `tracer.inside_collective` is set while one runs.
    Nothing is patched when no process group is up (tracing pays nothing)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        yield
        return
    modules = [dist, sys.modules["torch.distributed.distributed_c10d"]]
    saved = [(m, name, getattr(m, name)) for m in modules for name in (*RECORDED, *NOT_RECORDED) if hasattr(m, name)]
    originals = {name: fn for m, name, fn in saved if m is dist}

    def wrap(name: str, real: Callable) -> Callable:
        @functools.wraps(real)
        def traced(*args, **kwargs):
            if tracer.inside_collective:  # one collective calling another's module attribute
                return real(*args, **kwargs)
            if name not in RECORDED:
                tracer.refuse_collective(name)
                return real(*args, **kwargs)
            tracer.inside_collective = True
            try:
                work = real(*args, **kwargs)
            finally:
                tracer.inside_collective = False
            if isinstance(work, torch.distributed.Work):
                work.wait()  # the program runs it synchronously: so does the traced run
            bound = inspect.signature(real).bind(*args, **kwargs)
            arguments = {k: v for k, v in bound.arguments.items() if k != "async_op"}
            tracer.collective(name, functional(name, originals.get(name, real)), arguments,
                              list(bound.arguments.values())[RECORDED[name]])
            return work
        return traced
    try:
        for m, name, fn in saved:
            setattr(m, name, wrap(name, fn))
        yield
    finally:
        for m, name, fn in saved:
            setattr(m, name, fn)


def unsupported_wrapping(fn) -> str | None:
    """Why a distributed wrapping of `fn`'s module is not compiled (its calls run eagerly), or
    None: FSDP2's hooks gather each block's parameters before it runs and free them after, and
    DTensor parameters shard every op; a program traced through either would keep storage the
    hooks free, or run DTensor's dispatch as if it were plain ops."""
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    if not isinstance(module, torch.nn.Module):
        return None
    from compiler import fsdp  # FSDP2: compiler.jit compiles the module through fsdp.Sharded

    if fsdp.is_sharded(module):
        if isinstance(fn, fsdp.Sharded):
            return None
        why = fsdp.unsupported(module)
        return (f"the module is sharded by FSDP2 (fully_shard) with {why}, which FusionLens does not compile: "
                "calls run eagerly, FSDP communicating as it does without FusionLens" if why is not None else
                "the module is sharded by FSDP2 (fully_shard): compiler.jit compiles it (each rank's program "
                "gathers its shards); traced any other way its calls run eagerly")
    from compiler import tensor_parallel  # DTensor parameters: compiled under jit when their plan is supported

    return tensor_parallel.unsupported(module)


# --- as the report lists them ----------------------------------------------------------------

_SENT = {"all_gather_into_tensor": "input_tensor", "reduce_scatter_tensor": "input", "all_to_all_single": "input"}


def op_name(symbol: str) -> str:
    """The collective's name from its symbol's (dist_all_reduce_1, op_all_reduce -> all_reduce)."""
    name = symbol.rsplit(".", 1)[-1]
    for prefix in ("dist_", "op_", "tp_", "fsdp_"):  # tp_, fsdp_: tensor_parallel's and fsdp's symbols
        name = name.removeprefix(prefix)
    head, _, tail = name.rpartition("_")
    name = head if tail.isdigit() and head else name
    return name.removesuffix("_")  # an in-place funcol (all_reduce_, ddp_overlap's) is the same collective


def sent(symbol: str, args: tuple, kwargs: dict):
    """The argument whose elements each rank sends in (the input, not the output it writes)."""
    key = _SENT.get(op_name(symbol))
    if key is not None and key in kwargs:
        return kwargs[key]
    return next((x for x in (*args, *kwargs.values()) if hasattr(x, "dtype") and hasattr(x, "shape")), None)


def group_size(args: tuple, kwargs: dict) -> int:
    """How many ranks take part: the group's size (the default group's where none is given)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return 1
    group = kwargs.get("group")
    if isinstance(group, dist.ProcessGroup):
        return dist.get_world_size(group)
    if len(args) > 2 and isinstance(args[2], str):  # a functional collective's group name
        try:
            return dist.get_world_size(dist.distributed_c10d._resolve_process_group(args[2]))
        except Exception:  # noqa: BLE001 - a name this torch resolves otherwise: the world's
            pass
    return dist.get_world_size()
