"""Collectives the user's code calls while it is traced: symbols of the trace, at their lines.

torch.distributed's collectives (`dist.all_reduce(t)`, ...) are no torch functions: a
TorchFunctionMode never sees them, so a trace would leave out the communication and the
program compute on each rank's own values. While a call is traced with a process group up,
`recording` puts a wrapper in front of each of them (in `torch.distributed` and its
`distributed_c10d` module, where `dist.x` finds them): the collective runs as eager runs it,
and the tracer records its functional form (the tensor it updates in place gets a new Value,
written back as any in-place update is). Those it cannot record (lists of tensors, objects,
point-to-point) make the signature run eagerly, with the reason at the user's line.
The functional collectives (`torch.distributed._functional_collectives`): `all_reduce`,
`all_gather_tensor` and `reduce_scatter_tensor` (module attributes, as `funcol.all_reduce(...)`
finds them) are recorded as two symbols each, the collective at its line and its wait right
before the first op that reads the result (where eager's AsyncCollectiveTensor waits); funcol's
other functions, and `torch.ops._c10d_functional` called directly, are torch ops the tracer
records anyway (ops/torch_ops/fallbacks.py tags them collective).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fusionlens.ir.trace import BoundSymbol, OpTag, Symbol, Trace, Value

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
    waits: list[BoundSymbol] = []  # the functional collectives' waits, placed once the call returned
    replaced = [(m, name, wrap(name, fn)) for m, name, fn in saved]
    funcol = _funcol_saved()
    replaced += [(m, name, _funcol_traced(tracer, name, fn, waits)) for m, name, fn in funcol]
    saved += funcol
    try:
        for m, name, fn in replaced:
            setattr(m, name, fn)
        yield
        _place_waits(tracer, waits)
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
    from fusionlens.distributed import fsdp  # FSDP2: fusionlens.jit compiles the module through fsdp.Sharded

    if fsdp.is_sharded(module):
        if isinstance(fn, fsdp.Sharded):
            return None
        why = fsdp.unsupported(module)
        return (f"the module is sharded by FSDP2 (fully_shard) with {why}, which FusionLens does not compile: "
                "calls run eagerly, FSDP communicating as it does without FusionLens" if why is not None else
                "the module is sharded by FSDP2 (fully_shard), which FusionLens compiles when the module is what is "
                "compiled (fusionlens.jit(model), fusionlens.compile(model, ...), a target returning it: each rank's "
                "program gathers its shards); called inside another function it runs eagerly")
    # DTensor parameters: compiled under jit when their plan is supported
    from fusionlens.distributed import tensor_parallel

    return tensor_parallel.unsupported(module)


# --- the functional collectives (torch.distributed._functional_collectives) -------------------
# Eager funcol issues the collective and returns an AsyncCollectiveTensor, which waits for it at
# its first use. Traced, each is two symbols: the collective, at its line, and its wait, placed
# right before the first op that reads the result (the user line of that op), so that the
# report sees which regions run between them. The traced run waits at once.

_FUNCOL = "torch.distributed._functional_collectives"
_FUNCOL_TAGS = (OpTag.LIBRARY_CALL, OpTag.COLLECTIVE, OpTag.NON_DIFFERENTIABLE, OpTag.PROGRAM_GLOBAL)


def _c10d(name: str) -> Callable:
    return getattr(torch.ops._c10d_functional, name)


def _all_reduce(x: torch.Tensor, op: str, group_name: str) -> torch.Tensor:
    return _c10d("all_reduce")(x, op, group_name)


def _all_gather(x: torch.Tensor, group_size: int, group_name: str) -> torch.Tensor:
    return _c10d("all_gather_into_tensor")(x, group_size, group_name)


def _reduce_scatter(x: torch.Tensor, op: str, group_size: int, group_name: str) -> torch.Tensor:
    return _c10d("reduce_scatter_tensor")(x, op, group_size, group_name)


def _wait_tensor(t: torch.Tensor) -> torch.Tensor:
    return _c10d("wait_tensor")(t)


FUNCOL_ALL_REDUCE = Symbol("funcol_all_reduce", _all_reduce, tags=_FUNCOL_TAGS,
                           meta=lambda x, op, name: torch.empty_like(x))
FUNCOL_ALL_GATHER = Symbol("funcol_all_gather_into_tensor", _all_gather, tags=_FUNCOL_TAGS,
                           meta=lambda x, n, name: x.new_empty((x.shape[0] * n, *x.shape[1:])))
FUNCOL_REDUCE_SCATTER = Symbol("funcol_reduce_scatter_tensor", _reduce_scatter, tags=_FUNCOL_TAGS,
                               meta=lambda x, op, n, name: x.new_empty((x.shape[0] // n, *x.shape[1:])))
FUNCOL_WAIT = Symbol("funcol_wait_tensor", _wait_tensor, tags=_FUNCOL_TAGS, meta=lambda t: torch.empty_like(t))
# the funcol functions traced so (the module attribute a user's `funcol.all_reduce(...)` finds)
FUNCOL_TRACED = ("all_reduce", "all_gather_tensor", "all_gather_single", "reduce_scatter_tensor",
                 "reduce_scatter_single")


def _funcol_saved() -> list[tuple[ModuleType, str, Callable]]:
    funcol = sys.modules.get(_FUNCOL)
    return [(funcol, n, getattr(funcol, n)) for n in FUNCOL_TRACED if hasattr(funcol, n)] if funcol else []


def _issue(tracer, sym: Symbol, args: tuple, waits: list[BoundSymbol]) -> torch.Tensor:
    """`sym(*args)` run and waited for, recorded as the collective here and its wait, to place."""
    tracer.inside_collective = True
    try:
        issued = sym.impl(*args)
        waited = _wait_tensor(issued)
    finally:
        tracer.inside_collective = False
    where = tracer.where()
    for each in (sym, FUNCOL_WAIT):
        tracer.taken.add(each.name)
        tracer.extra_globals[each.name] = each.impl
    value = Value(tracer.names.next(), issued.shape, issued.dtype, issued.device)
    tracer.bound_symbols.append(BoundSymbol(sym, tuple(map(tracer.argument, args)), {}, [value], None, where))
    waits.append(BoundSymbol(FUNCOL_WAIT, (value,), {}, [tracer.new_output(waited)], None, where))
    return waited


def _funcol_traced(tracer, name: str, real: Callable, waits: list[BoundSymbol]) -> Callable:
    """funcol's `name` recorded as its collective and wait; the other dims of a gather or a
    scatter as funcol makes them, chunks and a cat traced around the dim-0 collective."""
    signature = inspect.signature(real)

    @functools.wraps(real)
    def traced(*args, **kwargs):
        if tracer.inside_collective or not tracer.recording:
            return real(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        funcol = sys.modules[_FUNCOL]
        group_name = funcol._resolve_group_name(a["group"], a.get("tag", ""))
        if name == "all_reduce":
            return _issue(tracer, FUNCOL_ALL_REDUCE, (a["self"], a["reduceOp"].lower(), group_name), waits)
        n = torch.distributed.get_world_size(torch.distributed.distributed_c10d._resolve_process_group(group_name))
        if name.startswith("all_gather"):
            out = _issue(tracer, FUNCOL_ALL_GATHER, (a["self"], n, group_name), waits)
            return out if a["gather_dim"] == 0 else torch.cat(torch.chunk(out, n), dim=a["gather_dim"])
        x, dim = a["self"], a["scatter_dim"]
        if x.size(dim) % n != 0:
            raise ValueError(f"reduce_scatter_tensor: dim {dim} of the input ({x.size(dim)}) is no multiple of "
                             f"the group's size ({n})")
        x = x if dim == 0 else torch.cat(torch.chunk(x, n, dim=dim))
        return _issue(tracer, FUNCOL_REDUCE_SCATTER, (x, a["reduceOp"].lower(), n, group_name), waits)
    return traced


def _place_waits(tracer, waits: list[BoundSymbol]) -> None:
    """Each wait right before the first op that reads its result, at that op's line (at the
    end, where the result is only returned)."""
    for wait in waits:
        name = wait.outputs[0].name
        at = next((i for i, b in enumerate(tracer.bound_symbols) if any(v.name == name for v in b.inputs())),
                  len(tracer.bound_symbols))
        where = tracer.bound_symbols[at].provenance if at < len(tracer.bound_symbols) else wait.provenance
        tracer.bound_symbols.insert(at, BoundSymbol(wait.sym, wait.args, {}, wait.outputs, None, where))


def dtensor_arguments(args, kwargs) -> str | None:
    """Why a call whose arguments hold DTensors runs eagerly, or None: a program traces and
    runs plain tensors (a tensor-parallel module's program takes the local shards of its
    parameters and a replicated input), so DTensor's dispatch, its redistributions and their
    communication stay DTensor's own."""
    tensor = sys.modules.get("torch.distributed.tensor")
    if tensor is None or not any(isinstance(x, tensor.DTensor) for x in pytree.tree_leaves((args, kwargs))):
        return None
    return ("the call takes DTensor arguments, which FusionLens does not compile: calls with them run eagerly, "
            "DTensor communicating as it does without FusionLens")


# --- as the report lists them ----------------------------------------------------------------

_SENT = {"all_gather_into_tensor": "input_tensor", "reduce_scatter_tensor": "input", "all_to_all_single": "input"}


def op_name(symbol: str) -> str:
    """The collective's name from its symbol's (dist_all_reduce_1, op_all_reduce -> all_reduce)."""
    name = symbol.rsplit(".", 1)[-1]
    for prefix in ("dist_", "op_", "tp_", "fsdp_", "funcol_"):  # tensor_parallel's, fsdp's, funcol's symbols
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


# --- ranks that agree on a compile -----------------------------------------------------------

def _initialised() -> ModuleType | None:
    """torch.distributed where a process group is up (its import is not forced), else None."""
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() and dist.is_initialized() else None


def wrapping_groups(fn: Any, wrapper: Any = None) -> list[str]:
    """The process groups (by name) `fn`'s wrapping communicates on: DDP's (`wrapper`), each FSDP
    unit's (`fn` an fsdp.Sharded), each tensor-parallel layer's. Call it before tensor_parallel's
    `compiling`, which hides the DTensor parameters its plan is found by."""
    if _initialised() is None:
        return []
    from fusionlens.distributed import fsdp, tensor_parallel

    names = [wrapper.process_group.group_name] if wrapper is not None else []
    if isinstance(fn, fsdp.Sharded):
        names += [u.group_name for u in fn.units]
    plan = tensor_parallel.find(fn)
    names += [layer.group_name for layer in plan.layers] if plan is not None else []
    return list(dict.fromkeys(names))


def trace_groups(trace: Trace) -> list[str]:
    """The process groups (by name) of the collectives recorded in `trace`: a `group=` argument,
    a functional collective's group name, the world's where none is named."""
    dist = _initialised()
    if dist is None:
        return []
    names: list[str] = []
    for b in trace.bound_symbols:
        if OpTag.COLLECTIVE not in b.sym.tags or op_name(b.sym.name) == "wait_tensor":
            continue  # a wait names no group: its collective does
        passed = (*b.args[1:], *b.kwargs.values())
        group = next((a for a in passed if isinstance(a, dist.ProcessGroup)), None)
        named = next((a for a in b.args[1:] if isinstance(a, str) and a not in _OPS), None)
        if group is not None:
            names.append(group.group_name)
        elif named is not None:
            names.append(named)
        else:
            names.append(dist.group.WORLD.group_name)
    return list(dict.fromkeys(names))


_OPS = frozenset({"sum", "avg", "max", "min", "product", "prod", "band", "bor", "bxor", "premul_sum"})


def any_rank(failed: bool, groups: list[str]) -> bool:
    """Whether `failed` holds on any rank of `groups`: one all-reduce (MAX) of a flag on each
    group, in order. Every rank of a group must call it at the same point, or it waits for the
    others: compile_checked does, after each step of the check that may differ between ranks,
    so that all of them run the same checks (each communicates) and decide alike."""
    dist = _initialised()
    if dist is None or not groups:
        return failed
    flag = None
    for name in groups:
        group = dist.distributed_c10d._resolve_process_group(name)
        nccl = "nccl" in str(dist.get_backend(group)) and torch.cuda.is_available()
        device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
        flag = torch.tensor([float(failed) if flag is None else float(flag.item())], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return bool(flag is not None and flag.item())
