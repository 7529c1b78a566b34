"""Collectives the user's code calls while it is traced: symbols of the trace, at their lines.

torch.distributed's collectives (`dist.all_reduce(t)`, ...) are no torch functions: a
TorchFunctionMode never sees them, so a trace would leave out the communication and the
program compute on each rank's own values. While a call is traced with a process group up,
`recording` puts a wrapper in front of each of them (in `torch.distributed` and its
`distributed_c10d` module, where `dist.x` finds them): the collective runs as eager runs it,
and the tracer records it as its issue and its wait (distributed/symbols.py: the tensor it
updates in place gets the wait's result as its new Value, written back as any in-place update
is). Those it cannot record (lists of tensors, objects, point-to-point) make the signature run
eagerly, with the reason at the user's line.
The functional collectives (`torch.distributed._functional_collectives`): `all_reduce`,
`all_gather_tensor` and `reduce_scatter_tensor` (module attributes, as `funcol.all_reduce(...)`
finds them) are recorded as the same two symbols, the collective's issue at its line and its wait right
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

from fusionlens.distributed import symbols as S, vocabulary as V
from fusionlens.frontend.recorder import Recorder
from fusionlens.ir.trace import BoundSymbol, Trace

# torch.distributed's collectives recorded (as their issue and wait), and those that make the call run eagerly
RECORDED = ("all_reduce", "broadcast", "reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
            "all_to_all_single")
NOT_RECORDED = ("all_gather", "all_gather_object", "gather", "gather_object", "scatter", "scatter_object_list",
                "reduce_scatter", "all_to_all", "broadcast_object_list", "send", "recv", "isend", "irecv",
                "batch_isend_irecv", "barrier", "monitored_barrier")


def _root(a: dict, key: str, pg: Any) -> int:
    """A broadcast's or reduce's root as a rank of its group (`group_src`/`group_dst`, else the
    global `src`/`dst`)."""
    local = a.get(f"group_{key}")
    return int(local) if local is not None else torch.distributed.get_group_rank(pg, a[key])


# torch.distributed's arguments of each kind: (the tensor it writes, the tensor it sends, its root's)
_ARGUMENTS = {V.CollectiveKind.ALL_REDUCE: ("tensor", "tensor", None),
              V.CollectiveKind.BROADCAST: ("tensor", "tensor", "src"),
              V.CollectiveKind.REDUCE: ("tensor", "tensor", "dst"),
              V.CollectiveKind.ALL_GATHER: ("output_tensor", "input_tensor", None),
              V.CollectiveKind.REDUCE_SCATTER: ("output", "input", None),
              V.CollectiveKind.ALL_TO_ALL: ("output", "input", None)}


def _dist_call(name: str, a: dict) -> tuple[V.CollectiveKind, torch.Tensor, torch.Tensor, dict] | str:
    """(kind, the tensor sent, the tensor written, the issue's keywords) of torch.distributed's
    `name` (a CollectiveKind's value) called with arguments `a`, or why it is not recorded."""
    kind = V.CollectiveKind(name)
    written_at, sent_at, root_at = _ARGUMENTS[kind]
    written, sent = a[written_at], a[sent_at]
    pg = a.get("group") if a.get("group") is not None else torch.distributed.group.WORLD
    kw: dict[str, Any] = {"group": V.Group.of(pg)}
    if "op" in a:
        op = V.ReduceOp.of(a["op"] if a["op"] is not None else "sum")
        if op is V.ReduceOp.PREMUL_SUM:
            return "with a premul_sum op"
        kw["op"] = op
    if root_at is not None:
        kw["root"] = _root(a, root_at, pg)
    kw |= {k: list(a[k]) for k in ("output_split_sizes", "input_split_sizes") if a.get(k) is not None}
    with torch.device("meta"):
        made = S.ISSUE[kind].meta(sent.to("meta"), **kw)  # type: ignore[misc]
    if made.shape != written.shape:
        return f"into an output of shape {tuple(written.shape)} (not its functional form's {tuple(made.shape)})"
    return kind, sent, written, kw


def _record_dist(tracer: Recorder, name: str, a: dict) -> None:
    """torch.distributed's `name` (arguments `a`, by name), which ran, recorded as its issue and
    its wait: the tensor it wrote in place gets the wait's result as its new value."""
    with tracer.unrecorded():  # its shape check's meta tensors are no ops of the program
        call = _dist_call(name, a)
    if isinstance(call, str):
        return tracer.refuse(name, call)
    kind, sent, written, kw = call
    group = kw.pop("group")
    S.declare(tracer)
    where = tracer.where()
    issue = BoundSymbol(S.ISSUE[kind], (tracer.value(sent), group), kw, [tracer.pending(written)], None, where)
    tracer.update(name, lambda new: [issue, BoundSymbol(S.WAIT, (issue.outputs[0],), {}, [new], None, where)],
                  written)


@contextlib.contextmanager
def recording(tracer: Recorder):
    """While active, each collective of RECORDED runs and is recorded (`tracer.update`: its issue
    and wait, the wait's result the new value of the tensor it wrote); each of NOT_RECORDED makes the
    call run eagerly (`tracer.refuse`); a collective's own ops run unrecorded.
    Nothing is patched when no process group is up (tracing pays nothing)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        yield
        return
    modules = [dist, sys.modules["torch.distributed.distributed_c10d"]]
    saved = [(m, name, getattr(m, name)) for m in modules for name in (*RECORDED, *NOT_RECORDED) if hasattr(m, name)]

    def wrap(name: str, real: Callable) -> Callable:
        @functools.wraps(real)
        def traced(*args, **kwargs):
            if not tracer.records():  # one collective calling another's module attribute, or an eager call
                return real(*args, **kwargs)
            if name not in RECORDED:
                tracer.refuse(name)
                return real(*args, **kwargs)
            with tracer.unrecorded():
                work = real(*args, **kwargs)
            if isinstance(work, torch.distributed.Work):
                work.wait()  # the program waits right after the issue: so does the traced run
            bound = inspect.signature(real).bind(*args, **kwargs)
            bound.apply_defaults()
            _record_dist(tracer, name, dict(bound.arguments))
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


class TraceHook:
    """What tracing adds for torch.distributed (frontend.recorder.TraceHook; the driver passes it
    to frontend.trace): the collectives the call runs recorded, and the wrappings and arguments
    it cannot compile refused (the call runs eagerly, saying why)."""

    def refuses(self, fn: Any, args: tuple, kwargs: dict) -> str | None:
        return dtensor_arguments(args, kwargs) or unsupported_wrapping(fn)

    def recording(self, recorder: Recorder) -> contextlib.AbstractContextManager[None]:
        return recording(recorder)


HOOKS = (TraceHook(),)  # every compile traces with these


# --- the functional collectives (torch.distributed._functional_collectives) -------------------
# Eager funcol issues the collective and returns an AsyncCollectiveTensor, which waits for it at
# its first use. Traced, each is two symbols: the collective, at its line, and its wait, placed
# right before the first op that reads the result (the user line of that op), so that the
# report sees which regions run between them. The traced run waits at once.

_FUNCOL = "torch.distributed._functional_collectives"
# the funcol functions traced so (the module attribute a user's `funcol.all_reduce(...)` finds)
FUNCOL_TRACED = {"all_reduce": V.CollectiveKind.ALL_REDUCE, "all_gather_tensor": V.CollectiveKind.ALL_GATHER,
                 "all_gather_single": V.CollectiveKind.ALL_GATHER,
                 "reduce_scatter_tensor": V.CollectiveKind.REDUCE_SCATTER,
                 "reduce_scatter_single": V.CollectiveKind.REDUCE_SCATTER}


def _funcol_saved() -> list[tuple[ModuleType, str, Callable]]:
    funcol = sys.modules.get(_FUNCOL)
    return [(funcol, n, getattr(funcol, n)) for n in FUNCOL_TRACED if hasattr(funcol, n)] if funcol else []


def _issue(tracer: Recorder, kind: V.CollectiveKind, x: torch.Tensor, group_name: str, waits: list[BoundSymbol],
           **kw: Any) -> torch.Tensor:
    """`kind` issued on `x` and waited for, recorded as the collective here and its wait, to place."""
    sym, group = S.ISSUE[kind], V.Group.named(group_name)
    with tracer.unrecorded():
        issued = sym.impl(x, group, **kw)
        waited = S.wait(issued)
    where = tracer.where()
    S.declare(tracer)
    value = tracer.pending(issued)
    tracer.emit(BoundSymbol(sym, (tracer.value(x), group), kw, [value], None, where))
    waits.append(BoundSymbol(S.WAIT, (value,), {}, [tracer.output(waited)], None, where))
    return waited


def _funcol_traced(tracer: Recorder, name: str, real: Callable, waits: list[BoundSymbol]) -> Callable:
    """funcol's `name` recorded as its collective and wait; the other dims of a gather or a
    scatter as funcol makes them, chunks and a cat traced around the dim-0 collective."""
    signature = inspect.signature(real)

    @functools.wraps(real)
    def traced(*args, **kwargs):
        if not tracer.records():
            return real(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        funcol = sys.modules[_FUNCOL]
        group_name = funcol._resolve_group_name(a["group"], a.get("tag", ""))
        kind = FUNCOL_TRACED[name]
        if kind is V.CollectiveKind.ALL_REDUCE:
            return _issue(tracer, kind, a["self"], group_name, waits, op=V.ReduceOp.of(a["reduceOp"]))
        n = torch.distributed.get_world_size(torch.distributed.distributed_c10d._resolve_process_group(group_name))
        if kind is V.CollectiveKind.ALL_GATHER:
            out = _issue(tracer, kind, a["self"], group_name, waits)
            return out if a["gather_dim"] == 0 else torch.cat(torch.chunk(out, n), dim=a["gather_dim"])
        x, dim = a["self"], a["scatter_dim"]
        if x.size(dim) % n != 0:
            raise ValueError(f"reduce_scatter_tensor: dim {dim} of the input ({x.size(dim)}) is no multiple of "
                             f"the group's size ({n})")
        x = x if dim == 0 else torch.cat(torch.chunk(x, n, dim=dim))
        return _issue(tracer, kind, x, group_name, waits, op=V.ReduceOp.of(a["reduceOp"]))
    return traced


def _place_waits(tracer: Recorder, waits: list[BoundSymbol]) -> None:
    """Each wait right before the first op that reads its result, at that op's line (at the
    end, where the result is only returned)."""
    for wait in waits:
        name = wait.outputs[0].name
        ops = tracer.ops()
        at = next((i for i, b in enumerate(ops) if any(v.name == name for v in b.inputs())), len(ops))
        where = ops[at].provenance if at < len(ops) else wait.provenance
        tracer.emit(BoundSymbol(wait.sym, wait.args, {}, wait.outputs, None, where), at)


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


# --- ranks that agree on a compile -----------------------------------------------------------

def _initialised() -> ModuleType | None:
    """torch.distributed where a process group is up (its import is not forced), else None."""
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() and dist.is_initialized() else None


def trace_groups(trace: Trace) -> list[str]:
    """The process groups (by name) of the collectives recorded in `trace` (a wait names no
    group: its collective does)."""
    if _initialised() is None:
        return []
    described = ((V.describe(b.sym), b) for b in trace.bound_symbols)
    return list(dict.fromkeys(d.group_of(b).name for d, b in described if d is not None and d.kind is not None))


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
