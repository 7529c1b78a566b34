"""DDP's gradient all-reduces issued from the compiled backward as their buckets fill.

The compiled backward is one autograd.Function: it hands autograd every gradient at once when
it ends, so DDP's reducer, whose hooks fire as gradients accumulate, could start no bucket's
all-reduce before the whole backward was done. When DDP's configuration is one this module
mirrors (`unsupported`), the backward trace gets, right after the op that finishes the last
gradient of each bucket, that bucket flattened (each gradient added to what `p.grad` holds
and divided by the world size, as DDP's reducer without a comm hook does) and an asynchronous
all-reduce of it issued (distributed/symbols.py's `all_reduce`, as every collective); each is waited for
(`wait`) at the end of the program, before it returns the gradients. Buckets are made
in the order the backward produces gradients, capped as DDP caps its rebuilt buckets (the
first at DDP's first-bucket cap), a bucket per dtype and device.

The program so made (`Synced`) serves a call that synchronises gradients (grad enabled, not
under `ddp.no_sync()`); it writes each reduced gradient into `p.grad` itself (DDP's result:
the mean over the ranks of the accumulated gradient) and hands autograd nothing for it. A call
under `no_sync()` runs the program compiled and checked for the module alone (local gradients,
which autograd accumulates). DDP's reducer readies nothing for either (fusionlens/distributed/ddp.py `call`).
A signature that runs eagerly on this rank all-reduces the same buckets after its eager
backward (`Synced.after_eager_backward`): every rank issues the same all-reduces in one order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils.hooks import RemovableHandle

from fusionlens.distributed.ddp import buckets as ddp_buckets
from fusionlens.distributed.staging import CompileTransform, ReportInputs, Rewritten
from fusionlens.distributed import symbols as S, vocabulary as V
from fusionlens.report import schema as R
from fusionlens.ir.vocabulary import Stage, ValueRole
from fusionlens.ir.trace import BoundSymbol, OpTag, Symbol, SymbolKind, Trace, Value

_LOCAL = frozenset({OpTag.LIBRARY_CALL, OpTag.NON_DIFFERENTIABLE})


def unsupported(ddp) -> str | None:
    """Why DDP's own reducer must all-reduce this wrapper's gradients (what this module does not
    mirror), or None when the compiled backward may issue them itself (checked on every call: a
    comm hook may be registered after the first)."""
    reasons = [("a comm hook is registered", bool(getattr(ddp, "_comm_hooks", None))),
               ("find_unused_parameters", bool(getattr(ddp, "find_unused_parameters", False))),
               ("static_graph", bool(getattr(ddp, "static_graph", False))),
               ("gradient_as_bucket_view", bool(getattr(ddp, "gradient_as_bucket_view", False))),
               ("delay_all_reduce parameters", bool(getattr(ddp, "_delay_all_reduce_params", None))),
               ("the Python reducer", bool(getattr(ddp, "_use_python_reducer", False))),
               ("mixed precision", getattr(ddp, "mixed_precision", None) is not None),
               ("a Join context", bool(getattr(getattr(ddp, "_join_config", None), "enable", False)))]
    found = [why for why, applies in reasons if applies]
    return ", ".join(found) if found else None


@dataclass
class Bucket:
    """Gradients all-reduced together: their positions among the backward's outputs, and the
    parameters they are for."""

    outputs: list[int] = field(default_factory=list)
    params: list[torch.Tensor] = field(default_factory=list)
    nbytes: int = 0
    last: int = 0  # where its last gradient is among those `plan_buckets` was given


def _caps(ddp) -> tuple[int, int, list[int]]:
    """(the first bucket's cap, every other's, per-bucket caps if the user gave them) in bytes."""
    config = getattr(ddp, "_bucket_config", None)
    if config is not None:
        return config.first_bucket_bytes_cap, config.bucket_bytes_cap, list(config.per_bucket_bytes_caps)
    first = torch.distributed._DEFAULT_FIRST_BUCKET_BYTES if getattr(ddp, "bucket_bytes_cap_default", False) \
        else ddp.bucket_bytes_cap
    return first, ddp.bucket_bytes_cap, []


def plan_buckets(ready: list[tuple[int, torch.Tensor]], ddp) -> list[Bucket]:
    """`ready`: (output position, parameter) in the order the backward finishes the gradients.
    A bucket per dtype and device closes once it holds its cap (DDP's
    `_compute_bucket_assignment_by_size`); the buckets in the order their last gradient comes,
    the order every rank issues their all-reduces in."""
    first, cap, listed = _caps(ddp)
    open_: dict[tuple[torch.dtype, torch.device], Bucket] = {}
    made: dict[tuple[torch.dtype, torch.device], int] = {}
    closed: list[Bucket] = []
    for n_ready, (position, p) in enumerate(ready):
        key = (p.dtype, p.device)
        bucket = open_.setdefault(key, Bucket())
        bucket.last = n_ready
        bucket.outputs.append(position)
        bucket.params.append(p)
        bucket.nbytes += p.numel() * p.element_size()
        n = made.get(key, 0)
        limit = listed[min(n, len(listed) - 1)] if listed else first if n == 0 else cap
        if bucket.nbytes >= limit:
            closed.append(open_.pop(key))
            made[key] = n + 1
    return sorted(closed + list(open_.values()), key=lambda b: b.last)


def _ready_order(trace: Trace, outputs: list[Value]) -> list[int]:
    """Positions among `outputs` (the gradients) in the order the trace finishes them."""
    made = {o.name: i for i, b in enumerate(trace.bound_symbols) for o in b.outputs}
    return sorted(range(len(outputs)), key=lambda k: made.get(outputs[k].name, -1))


class _Names:
    """Fresh names for the values and program globals the pass adds (one namespace: the program's)."""

    def __init__(self, trace: Trace):
        self.taken = {v.name for v in trace.inputs} | {o.name for b in trace.bound_symbols for o in b.outputs}
        self.taken |= set(trace.extra_globals) | {"torch", "operator", "prims", "math", "inf", "nan"}

    def __call__(self, base: str) -> str:
        name, n = base, 0
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name


def _flatten(params: list[torch.Tensor], scale: float) -> Callable[..., torch.Tensor]:
    """A bucket's gradients in one flat tensor, as DDP's reducer fills its bucket: each added to
    what its parameter's `.grad` holds (autograd's accumulation) and multiplied by 1/world."""
    sizes = [p.numel() for p in params]

    def flatten(*grads: torch.Tensor) -> torch.Tensor:
        flat = torch.empty(sum(sizes), dtype=grads[0].dtype, device=grads[0].device)
        start = 0
        for p, g, n in zip(params, grads, sizes):
            held = p.grad
            total = g if held is None else held + g
            torch.mul(total, scale, out=flat[start:start + n].view(g.shape))
            start += n
        return flat
    return flatten


def _views(shapes: list[tuple[int, ...]]) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    """The reduced flat tensor as one view a gradient (DDP's bucket views)."""
    def grads(flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out, start = [], 0
        for shape in shapes:
            n = int(torch.Size(shape).numel())
            out.append(flat[start:start + n].view(shape))
            start += n
        return tuple(out)
    return grads


def _value(name: str, like: Value, numel: int) -> Value:
    return Value(name, (numel,), like.dtype, like.device)


def overlap(trace: Trace, buckets: list[Bucket], group: str, world: int) -> Trace:
    """`trace` (a backward, returning a tuple of gradients) with each bucket flattened and its
    all-reduce issued after the op that finishes its last gradient, all waited for at the end,
    and the reduced gradients returned in place of the local ones."""
    outputs: list[Value] = list(trace.output)
    made = {o.name: i for i, b in enumerate(trace.bound_symbols) for o in b.outputs}
    names, extra = _Names(trace), {**trace.extra_globals, **S.program_globals()}
    issue_after: dict[int, list[BoundSymbol]] = {}
    waits: list[BoundSymbol] = []
    unflatten: list[BoundSymbol] = []
    bucket_group = V.Group.named(group)
    for i, bucket in enumerate(buckets):
        grads = [outputs[k] for k in bucket.outputs]
        last = max(made.get(g.name, -1) for g in grads)
        where = trace.bound_symbols[last].provenance if last >= 0 else None
        numel = sum(int(p.numel()) for p in bucket.params)
        flat_name = names(f"ddp_bucket{i}")
        extra[flat_name] = _flatten(bucket.params, 1.0 / world)
        flat = _value(names(f"bucket{i}"), grads[0], numel)
        reduced = _value(names(f"bucket{i}_reducing"), grads[0], numel)
        done = _value(names(f"bucket{i}_reduced"), grads[0], numel)
        issue_after.setdefault(last, []).extend([
            BoundSymbol(Symbol(flat_name, extra[flat_name], kind=SymbolKind.OPAQUE, tags=_LOCAL), tuple(grads), {},
                        [flat], None, where),
            BoundSymbol(S.ALL_REDUCE, (flat, bucket_group), {"op": V.ReduceOp.SUM}, [reduced], None, where)])
        waits.append(BoundSymbol(S.WAIT, (reduced,), {}, [done], None, where))
        views_name = names(f"ddp_bucket{i}_grads")
        extra[views_name] = _views([tuple(g.shape) for g in grads])
        synced = [Value(names(f"{g.name}_reduced"), g.shape, g.dtype, g.device) for g in grads]
        unflatten.append(BoundSymbol(Symbol(views_name, extra[views_name], kind=SymbolKind.OPAQUE, tags=_LOCAL),
                                     (done,), {}, synced, pytree.tree_flatten(tuple(synced))[1], where))
        for k, v in zip(bucket.outputs, synced):
            outputs[k] = v
    bsyms = list(issue_after.get(-1, []))
    for j, b in enumerate(trace.bound_symbols):
        bsyms += [b, *issue_after.get(j, [])]
    out = trace.with_(Stage.BACKWARD, bsyms + waits + unflatten, tuple(outputs))
    out.extra_globals = extra
    return out


@dataclass
class Synced:
    """The backward that all-reduces DDP's gradients, and the training call that runs it."""

    program: Any  # the backward driver.pipeline lowered from the rewritten trace
    fn: Callable[..., object]
    buckets: list[Bucket]
    group: str  # the process group's name
    world: int
    armed: list[RemovableHandle] = field(default_factory=list)  # `after_eager_backward`'s hooks, until they ran

    def after_eager_backward(self) -> None:
        """The next backward, an eager one (this signature runs eagerly here), all-reduces the
        same buckets in the same order once it has accumulated every gradient: the other ranks'
        programs (whose backward issues them) meet these, not DDP's reducer's."""
        self.disarm()
        pending = {id(p) for b in self.buckets for p in b.params}

        def ready(p: torch.Tensor) -> None:
            pending.discard(id(p))
            if not pending:
                self.disarm()
                self._all_reduce_held()
        self.armed = [p.register_post_accumulate_grad_hook(ready) for b in self.buckets for p in b.params]

    def disarm(self) -> None:
        """Forget an `after_eager_backward` whose backward never came (a later call's is its own)."""
        for handle in self.armed:
            handle.remove()
        self.armed = []

    def _all_reduce_held(self) -> None:
        """Each bucket of what `.grad` holds, divided by the world and summed over it, into `.grad`."""
        reducing, group = [], V.Group.named(self.group)
        for b in self.buckets:
            flat = torch.empty(sum(p.numel() for p in b.params), dtype=b.params[0].dtype, device=b.params[0].device)
            start = 0
            for p in b.params:
                held = p.grad
                assert held is not None  # its hook ran: autograd accumulated it
                torch.mul(held, 1.0 / self.world, out=flat[start:start + p.numel()].view(p.shape))
                start += p.numel()
            reducing.append(S.all_reduce(flat, group, V.ReduceOp.SUM))
        for b, r in zip(self.buckets, reducing):
            done = S.wait(r)
            for p, g in zip(b.params, _views([tuple(p.shape) for p in b.params])(done)):
                p.grad = g


def grad_slots(d, inputs: list[Value], constants: list[torch.Tensor], backward: Trace,
               ddp) -> list[tuple[int, torch.Tensor]] | None:
    """`_grad_slots` from the parts of a compile: `d` its autograd.Differentiated, `inputs` its
    acquired trace's inputs, `constants` the tensors of those that are no user input."""
    tensor_of: dict[int, torch.Tensor] = {}
    held = iter(constants)
    for i, v in enumerate(inputs):
        if v.role is not ValueRole.INPUT:
            tensor_of[i] = next(held)
    ignored = set(getattr(ddp, "parameters_to_ignore", ()) or ())
    reduced = {id(p) for n, p in ddp.module.named_parameters() if n not in ignored and p.requires_grad}
    outputs = backward.output
    slots = [(k, tensor_of[i]) for k, i in enumerate(d.grad_inputs)
             if i in tensor_of and id(tensor_of[i]) in reduced and isinstance(outputs[k], Value)]
    return slots if {id(p) for _, p in slots} == reduced else None


def bucketed(backward: Trace, slots: list[tuple[int, torch.Tensor]], ddp) -> tuple[Trace, list[Bucket], str, int]:
    """(`backward` with DDP's bucket all-reduces issued as buckets fill, the buckets, the group's
    name, its size): DDP's gradient synchronisation as a transform of the backward trace."""
    outputs = list(backward.output)
    order = {k: n for n, k in enumerate(_ready_order(backward, outputs))}
    ready = sorted(slots, key=lambda s: order[s[0]])
    buckets = plan_buckets(ready, ddp)
    group = ddp.process_group if ddp.process_group is not None else torch.distributed.group.WORLD
    assert group is not None  # DDP was made in a process group
    return overlap(backward, buckets, group.group_name, group.size()), buckets, group.group_name, group.size()


def _writing_grads(backward: Callable, slots: list[tuple[int, torch.Tensor]]) -> Callable:
    """`backward` that puts each reduced gradient in its parameter's `.grad` (DDP's result: the
    flattening already added what `.grad` held) and hands autograd none for it."""
    def run(saved: list, *cotangents: torch.Tensor) -> list:
        grads = list(backward(saved, *cotangents))
        for k, p in slots:
            g, grads[k] = grads[k], None
            if p.grad is None:
                p.grad = g
            else:
                p.grad.copy_(g)
        return grads
    return run


@dataclass
class Synchronising(CompileTransform):
    """DDP's gradient synchronisation as a transform of the compile (transform.CompileTransform):
    the backward rewritten with the bucket all-reduces, a program of its own, which a call that
    synchronises runs (`synced`); the module's own backward is the one checked against eager."""

    ddp: Any
    name: str = "ddp"

    def groups(self) -> list[str]:
        return [self.ddp.process_group.group_name]

    def unwrap(self, fn: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The module DDP wraps (DDP's forward steps run around each compiled call: ddp.call)."""
        return self.ddp.module, kwargs

    def tracing(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def rewrite_backward(self, d, inputs: list[Value], constants: list[torch.Tensor], backward: Trace):
        """The backward with DDP's all-reduces issued as buckets fill; None where DDP's reducer
        must do it (a configuration it does not mirror, sparse gradients, a parameter DDP reduces
        that gets no gradient)."""
        if unsupported(self.ddp) or any(getattr(m, "sparse", False) for m in self.ddp.module.modules()):
            return None
        slots = grad_slots(d, inputs, constants, backward, self.ddp)
        if not slots:
            return None
        trace, buckets, group, world = bucketed(backward, slots, self.ddp)
        return Rewritten(trace, lambda fn: _writing_grads(fn, slots), (buckets, group, world))

    def finish(self, call: Callable, constants: list[torch.Tensor]) -> Callable:
        return call

    def report(self, rewritten, failed: bool, training: bool):
        """The rewritten backward shown where the program runs; where this rank runs eagerly, the
        same buckets listed (`after_eager_backward` all-reduces them); where the reducer does it,
        its buckets and why."""
        if rewritten is not None and not failed:
            return ReportInputs(rewritten=True)
        if rewritten is not None:
            buckets, _, world = rewritten.state
            return ReportInputs([R.Collective("all_reduce", "ddp-bucket", b.nbytes, world, "backward")
                                 for b in buckets])
        if not training:
            return ReportInputs()
        return ReportInputs(ddp_buckets(self.ddp), [d for d in [reducer_note(self.ddp)] if d is not None])


def synced_of(c) -> Synced | None:
    """The training call that synchronises DDP's gradients, from `c` (a pipeline.Compiled whose
    `rewritten` backward is Synchronising's), or None."""
    rewritten = c.rewritten
    if rewritten is None or rewritten.transform != Synchronising.name:
        return None
    buckets, group, world = rewritten.rewrite.state
    return Synced(rewritten.program, rewritten.fn, buckets, group, world)


def reducer_note(ddp) -> R.Diagnostic | None:
    """Why this DDP training step's all-reduces wait for the end of the backward, if they do."""
    why = unsupported(ddp)
    if why is None:
        return None
    return R.Diagnostic("information", f"DDP's reducer all-reduces the gradients, after the compiled backward "
                        f"returns them all (no overlap): the backward does not issue them itself under {why}",
                        code=R.DiagnosticCode.COLLECTIVE)
