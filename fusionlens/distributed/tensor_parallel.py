"""Tensor parallelism compiled natively: torch's `parallelize_module` with ColwiseParallel and
RowwiseParallel on nn.Linear layers, traced as Megatron-LM's local program, not through
DTensor's dispatch.

Under the default layouts of those two styles a parallel Linear is plain math on each rank's
shard: a colwise layer takes the replicated input and returns its columns of the output (the
input's gradient is the sum over the ranks of each rank's part: Megatron's f, identity forward
and all-reduce backward); a rowwise layer takes its shard of the input and returns the sum over
the ranks of each rank's partial product, the bias added once after it (Megatron's g, all-reduce
forward and identity backward). While fusionlens.jit compiles such a module (`compiling`), each
DTensor parameter is replaced by its local shard (`p.to_local()`, in the caller's grad mode, so
autograd carries the shard's gradient into `p.grad` as a DTensor with the parameter's
placements), and each parallel Linear's hooks by a forward that runs f or g as autograd
Functions and records them at the line that calls the layer: g as the shared all-reduce and its
wait (distributed/symbols.py, `grad=Grad.IDENTITY`), f as GRAD_ALL_REDUCE, an identity whose
backward issues the all-reduce; their backward rules are in distributed/autograd_rules.py. The program takes the shards
as inputs, fresh at each call (`Compiling.settle`). Any other style, layout or DTensor parameter
keeps the eager path, the reason naming it (`unsupported`).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from fusionlens.distributed import symbols as S, vocabulary as V
from fusionlens.distributed.staging import CompileTransform, ReportInputs
from fusionlens.frontend import recorder
from fusionlens.ir.trace import BoundSymbol, OpTag, Symbol, SymbolKind

# --- Megatron's f and g: g the shared all-reduce (distributed/symbols.py), f an identity op -------


def grad_all_reduce(x: torch.Tensor, group: V.Group) -> torch.Tensor:
    """`x` itself (a view): the input of a colwise layer, whose gradient is all-reduced."""
    return x.view_as(x)


def _like(x: torch.Tensor, group: V.Group) -> torch.Tensor:
    return torch.empty_like(x)


# f: communicates nothing forward, so no collective there; its backward issues the all-reduce
# (distributed/autograd_rules.py)
GRAD_ALL_REDUCE = Symbol("tp_grad_all_reduce", grad_all_reduce, kind=SymbolKind.OPAQUE, meta=_like,
                         tags=(OpTag.LIBRARY_CALL, OpTag.PROGRAM_GLOBAL))


def _summed(x: torch.Tensor, group: V.Group) -> torch.Tensor:
    return S.wait(S.all_reduce(x, group, V.ReduceOp.SUM))


class _ReduceForward(torch.autograd.Function):
    """Megatron's g, for eager runs (tracing, checking): the sum forward, identity backward (the
    cotangent of a replicated result is the same on every rank)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: V.Group) -> torch.Tensor:
        return _summed(x, group)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return g, None


class _ReduceBackward(torch.autograd.Function):
    """Megatron's f: identity forward, the sum of the ranks' gradients backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: V.Group) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _summed(g, ctx.group), None


def _run(function: type[torch.autograd.Function], x: torch.Tensor, group_name: str) -> torch.Tensor:
    """`function` on `x`, recorded at the user's line when a trace records (the frontend's
    current recorder): g as the all-reduce's issue and wait (its gradient unchanged: Grad.IDENTITY),
    f as GRAD_ALL_REDUCE; torch ops inside it are not recorded."""
    tracer = recorder.current()
    group = V.Group.named(group_name)
    if tracer is None or not tracer.records():
        return function.apply(x, group)
    with tracer.unrecorded():  # its collective's own ops
        out = function.apply(x, group)
    where = tracer.where()
    S.declare(tracer)  # f's backward issues the all-reduce: the program names it too
    if function is _ReduceBackward:
        tracer.program_global(GRAD_ALL_REDUCE.name, GRAD_ALL_REDUCE.impl)
        tracer.emit(BoundSymbol(GRAD_ALL_REDUCE, (tracer.value(x), group), {}, [tracer.output(out)], None, where))
        return out
    issued = tracer.pending(out)
    tracer.emit(BoundSymbol(S.ALL_REDUCE, (tracer.value(x), group), {"op": V.ReduceOp.SUM, "grad": S.Grad.IDENTITY},
                            [issued], None, where))
    tracer.emit(BoundSymbol(S.WAIT, (issued,), {}, [tracer.output(out)], None, where))
    return out


def _colwise_forward(layer: Layer, x: torch.Tensor) -> torch.Tensor:
    m = layer.module
    if torch.is_grad_enabled() and x.requires_grad:  # else no gradient reaches x: f has nothing to do
        x = _run(_ReduceBackward, x, layer.group_name)
    return F.linear(x, m.weight, m.bias)


def _rowwise_forward(layer: Layer, x: torch.Tensor) -> torch.Tensor:
    m = layer.module
    y = _run(_ReduceForward, F.linear(x, m.weight), layer.group_name)
    return y if m.bias is None else y + m.bias  # once, after the sum (DTensor adds it once too)


# --- which modules are tensor parallel, and how ---------------------------------------------------


@dataclass
class Layer:
    """A parallel nn.Linear: its style ("colwise" or "rowwise"), its process group's name and
    the ids of the style's hooks (which compiling replaces by the layer's local forward)."""

    path: str
    module: torch.nn.Linear
    style: str
    group_name: str
    pre_hook: int
    hook: int


@dataclass
class Plan:
    """A module whose DTensor parameters all belong to supported parallel Linears."""

    module: torch.nn.Module
    layers: list[Layer] = field(default_factory=list)


def _laid_out(style: str) -> tuple[tuple, tuple, list[tuple]]:
    """The style's default (input layouts, desired input layouts), (output layouts,
    use_local_output) and its parameters' placements (weight, bias), as placement objects."""
    from torch.distributed.tensor import Replicate, Shard

    if style == "colwise":
        return ((Replicate(),), (Replicate(),)), ((Shard(-1),), True), [(Shard(0),), (Shard(0),)]
    return ((Shard(-1),), (Shard(-1),)), ((Replicate(),), True), [(Shard(1),), (Replicate(),)]


def _style_functions() -> dict[Any, tuple[type, str]]:
    """Each ParallelStyle's input and output function (what the partials distribute_module's
    hooks call hold) -> (the style's class, "input" or "output"), found by identity."""
    from torch.distributed.tensor.parallel.style import ParallelStyle

    found: dict[Any, tuple[type, str]] = {}
    todo: list[type] = list(ParallelStyle.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        for attr, kind in (("_prepare_input_fn", "input"), ("_prepare_output_fn", "output")):
            fn = cls.__dict__.get(attr)
            if fn is not None:
                found[getattr(fn, "__func__", fn)] = (cls, kind)
    return found


def _style_hook(hook) -> tuple[type | str, str, tuple, Any] | None:
    """(style class, "input" or "output", the partial's layout arguments, the mesh) of a hook
    distribute_module registered for a ParallelStyle (or the class of one that registered its
    own, PrepareModuleInput's); None for a hook that is no DTensor's. Known by what its closure
    holds (a DeviceMesh, a style's function, a ParallelStyle), never by a file or a name."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel.style import ParallelStyle

    code = getattr(hook, "__code__", None)
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in hook.__closure__ or ()))) if code else {}
    owner = cells.get("self")
    if isinstance(owner, ParallelStyle):
        return type(owner), "", (), None
    mesh = cells.get("device_mesh")
    if not isinstance(mesh, DeviceMesh):
        return None
    fn = cells.get("input_fn", cells.get("output_fn"))
    if not isinstance(fn, functools.partial) or (style := _style_functions().get(fn.func)) is None:
        return "a hand-written input_fn or output_fn", "", (), mesh
    return style[0], style[1], tuple(fn.args), mesh


def _layer(path: str, m: torch.nn.Module, dtensor: Any) -> Layer | str:
    """The parallel Linear `m`, or why FusionLens does not compile it natively."""
    found: dict[str, tuple[Any, ...]] = {}  # "input" or "output" -> (hook id, *its _style_hook)
    for hooks, kind in ((m._forward_pre_hooks, "input"), (m._forward_hooks, "output")):
        for hid, hook in hooks.items():
            made = _style_hook(hook)
            if made is not None:
                found[kind] = (hid, *made)
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    styles = {v[1] for v in found.values()}
    where = path or "the module"
    if styles - {ColwiseParallel, RowwiseParallel}:
        named = sorted(getattr(s, "__name__", str(s)) for s in styles)
        return f"{where} is parallelized with {', '.join(named)}, which FusionLens does not compile yet"
    if set(found) != {"input", "output"} or len(styles) != 1:
        return f"{where} has DTensor parameters but no ColwiseParallel or RowwiseParallel hooks"
    style = "colwise" if styles == {ColwiseParallel} else "rowwise"
    name = "ColwiseParallel" if style == "colwise" else "RowwiseParallel"
    if not isinstance(m, torch.nn.Linear) or type(m).forward is not torch.nn.Linear.forward:
        return f"{where} ({type(m).__name__}) uses {name}, which FusionLens compiles on nn.Linear only"
    (pre, _, _, inputs, mesh), (post, _, _, outputs, _) = found["input"], found["output"]
    want_inputs, want_outputs, want_placements = _laid_out(style)
    if (inputs, outputs) != (want_inputs, want_outputs):
        return (f"{where} uses {name} with non-default layouts or use_local_output=False "
                f"(input {inputs}, output {outputs}), which FusionLens does not compile yet")
    params: list[Any] = [p for p in (m.weight, m.bias) if p is not None]  # DTensors, or not
    placements = [tuple(p.placements) if isinstance(p, dtensor) else None for p in params]
    if mesh is None or mesh.ndim != 1 or placements != want_placements[:len(placements)]:
        return f"{where}'s parameters are not laid out as {name} lays them out on a 1-D mesh"
    return Layer(path, m, style, mesh.get_group().group_name, pre, post)


def survey(module: torch.nn.Module) -> Plan | str | None:
    """The module's tensor-parallel Plan; a reason when it has DTensor parameters FusionLens
    does not compile natively; None when it has none."""
    tensor = sys.modules.get("torch.distributed.tensor")
    if tensor is None or not any(isinstance(p, tensor.DTensor) for p in module.parameters()):
        return None
    fsdp = sys.modules.get("torch.distributed.fsdp")
    if fsdp is not None and any(isinstance(m, fsdp.FSDPModule) for m in module.modules()):
        return ("the module combines FSDP2 with DTensor parameters (2-D parallelism), which FusionLens does not "
                "compile yet")
    plan = Plan(module)
    for path, m in module.named_modules():
        local = [p for p in m._parameters.values() if isinstance(p, tensor.DTensor)]
        styled = any(_style_hook(h) is not None for h in (*m._forward_pre_hooks.values(), *m._forward_hooks.values()))
        if not local and not styled:
            continue
        layer = _layer(path, m, tensor.DTensor)
        if isinstance(layer, str):
            return layer
        plan.layers.append(layer)
    return plan


def find(fn) -> Plan | None:
    """The Plan of `fn`'s module when fusionlens.jit compiles it natively, else None."""
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    if not isinstance(module, torch.nn.Module):
        return None
    plan = survey(module)
    return plan if isinstance(plan, Plan) else None


def unsupported(module: torch.nn.Module) -> str | None:
    """Why a module with DTensor parameters runs eagerly (collectives.unsupported_wrapping)."""
    plan = survey(module)
    if plan is None:
        return None
    if isinstance(plan, str):
        return f"{plan}: calls run eagerly, DTensor communicating as it does without FusionLens"
    return ("the module is tensor parallel (ColwiseParallel / RowwiseParallel), which FusionLens compiles when the "
            "module is what is compiled (fusionlens.jit(model), fusionlens.compile(model, ...), a target returning "
            "it); called inside another function it runs eagerly")


# --- compiling a Plan's module ------------------------------------------------------------------

_FORWARDS = {"colwise": _colwise_forward, "rowwise": _rowwise_forward}


class Compiling:
    """What `compiling` swapped in: each local shard traced (kept alive: the program's constants
    are found by id) and its DTensor parameter."""

    def __init__(self, plan: Plan | None):
        self.plan = plan
        self.shards: list[tuple[torch.Tensor, Any]] = []  # (local shard, its DTensor parameter)

    def finish(self, call, constants: list[torch.Tensor]):
        """`call` (user tensors, then `constants`) given each DTensor parameter's local shard
        afresh at every call (in the caller's grad mode: its gradient reaches `p.grad`)."""
        by_id = {id(local): p for local, p in self.shards}
        at = [(i, by_id[id(t)]) for i, t in enumerate(constants) if id(t) in by_id]
        return _with_shards(call, at, len(constants)) if at else call


@dataclass
class Parallel(CompileTransform):
    """Tensor parallelism as a transform of the compile (transform.CompileTransform): traced and
    checked under `compiling` (each parallel Linear's local forward, recording f and g), the
    compiled call taking the local shards afresh at each call."""

    plan: Plan
    name: str = "tensor_parallel"
    state: Compiling | None = None  # the latest `tracing`'s

    def groups(self) -> list[str]:
        return list(dict.fromkeys(layer.group_name for layer in self.plan.layers))

    @contextlib.contextmanager
    def tracing(self) -> Iterator[Compiling]:
        with compiling(self.plan) as state:
            self.state = state
            yield state

    def rewrite_backward(self, d, inputs, constants, backward):
        return None

    def finish(self, call, constants: list[torch.Tensor]):
        return self.state.finish(call, constants) if self.state is not None else call

    def report(self, rewritten, failed: bool, training: bool) -> ReportInputs:
        return ReportInputs()


def _with_shards(run, at: list[tuple[int, Any]], n_constants: int):
    """`run(*user tensors, *constants)` with the constants at `at` replaced by their DTensor
    parameter's `to_local()` of this call."""
    def call(*inputs):
        fresh = list(inputs)
        first = len(fresh) - n_constants
        for i, p in at:
            fresh[first + i] = p.to_local()
        return run(*fresh)
    return call


@contextlib.contextmanager
def compiling(plan: Plan | None) -> Iterator[Compiling]:
    """While active, the Plan's parallel Linears hold their local shards as parameters and run
    their local forward (`_colwise_forward`, `_rowwise_forward`) instead of the style's hooks:
    what tracing records and checking compares with. Everything is put back after."""
    state = Compiling(plan)
    undo: list[tuple[torch.nn.Module, dict, dict, dict, Any]] = []
    try:
        for layer in plan.layers if plan is not None else []:
            m = layer.module
            undo.append((m, dict(m._parameters), dict(m._forward_pre_hooks), dict(m._forward_hooks),
                         vars(m).get("forward")))
            params: dict[str, Any] = dict(m._parameters)  # DTensors, every one (survey checked)
            for name, p in params.items():
                if p is not None:
                    local = p.to_local()
                    state.shards.append((local, p))
                    m._parameters[name] = local  # not a Parameter: assigned past register_parameter's check
            del m._forward_pre_hooks[layer.pre_hook], m._forward_hooks[layer.hook]
            m.forward = functools.partial(_FORWARDS[layer.style], layer)  # type: ignore[method-assign]
        yield state
    finally:
        for m, params, pre_hooks, hooks, forward in reversed(undo):
            m._parameters.clear()
            m._parameters.update(params)
            m._forward_pre_hooks.clear()
            m._forward_pre_hooks.update(pre_hooks)
            m._forward_hooks.clear()
            m._forward_hooks.update(hooks)
            vars(m).pop("forward", None)
            if forward is not None:
                vars(m)["forward"] = forward
