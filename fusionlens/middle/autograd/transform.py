"""The autograd transform (Trace -> forward and backward Traces).

`differentiate` takes the optimised trace and which inputs require grad, and builds:

- the joint trace: the forward ops (an op with no rule of its own is replaced by its
  decomposition, so every value its backward reads exists), then the backward ops, made by
  each op's rule in reverse order, each with the provenance of the forward op it
  differentiates (so backward regions name the user lines they come from);
- its split: a forward trace returning the results and what the backward saves, and a
  backward trace from the saved values and the results' cotangents to the inputs' gradients.

Rules (found by `rules.lookup`, by symbol): prim_rules for prims, torch_rules for library
calls (and softmax), composite_rules for activations and norms; an op with none and no
decomposition gets the generic rule (its torch call differentiated by torch.autograd in the
backward). An op tagged NON_DIFFERENTIABLE passes no gradient. An op tagged RANDOM with no
rule cannot be replayed, and an input that requires grad and is updated in place is not
functionalised: both raise Unsupported (jit then runs the signature eagerly and the report
says why at the op's line). `Differentiated.notes` is what the user is told at an op's line
(an SDPA whose backward holds its [B, H, L, S] scores: attention_rules.backward_note); the
pipeline adds them to the compile's notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fusionlens.middle import passes
from fusionlens.frontend.notes import Note, Severity
from fusionlens.middle.autograd import attention_rules, prim_rules, remat, rules, simplify, torch_rules
from fusionlens.ir.trace import (BoundSymbol, NameGen, OpTag, Trace, TraceContext, Value, external_inputs, tracing,
                                 values_in)
from fusionlens.ops import prims as P
from fusionlens.ir.provenance import Provenance
from fusionlens.ir.vocabulary import Stage, ValueRole
from fusionlens.report.schema import DiagnosticCode


class Unsupported(Exception):
    def __init__(self, message: str, where: Provenance | None = None):
        super().__init__(message)
        self.message, self.where = message, where


@dataclass
class Differentiated:
    joint: Trace
    forward: Trace  # returns (*results, *saved)
    backward: Trace  # takes ([*saved], *cotangents), returns the gradients of `grad_inputs`
    n_results: int  # the forward's first n outputs are the call's tensors (values_in order)
    differentiable: list[bool]  # per result: whether it gets a cotangent
    grad_inputs: list[int]  # indices into the trace's inputs that get a gradient
    saved: list[Value]  # what the backward reads from the forward
    recomputed: list[str] = field(default_factory=list)  # names the backward recomputes instead
    # inputs that require grad and are updated in place: their final values are the last results
    written: list[int] = field(default_factory=list)
    # every input that requires grad (a differentiable dtype), those no gradient reaches too:
    # what checking and benchmarking differentiate for (eager must give those none)
    wrt: list[int] = field(default_factory=list)
    # per result the call builds: the input it is (eager returns the caller's tensor), else None
    returned: list[int | None] = field(default_factory=list)
    # what the user is told at an op's line (an SDPA whose backward holds its [B, H, L, S] scores)
    notes: list[Note] = field(default_factory=list)


def _differentiable(v: Value) -> bool:
    return v.dtype.is_floating_point or v.dtype.is_complex


def _wider(a: torch.dtype, b: torch.dtype) -> bool:
    """Whether floating dtype `a` holds every value of floating dtype `b` (float32 of bfloat16)."""
    return a.is_floating_point and b.is_floating_point and a.itemsize > b.itemsize


def _has_rule(b) -> bool:
    return rules.lookup(b.sym) is not None


def _expand(bsyms, needs: set, out: list, frozen: frozenset, names: NameGen) -> None:
    """The forward ops: ops that get a gradient and have no rule become their decomposition,
    and ops whose backward needs what the whole op hides become explicit torch-level ops
    (torch_rules.explicit_forward). A value in `frozen` (eager's autograd did not track it)
    gets no gradient."""
    for b in bsyms:
        if not any(v.name in needs for v in b.inputs()):
            out.append(b)
            continue
        if OpTag.NON_DIFFERENTIABLE in b.sym.tags:
            out.append(b)
            continue
        explicit = _explicit(b, names, needs)
        if explicit is not None or (not _has_rule(b) and b.subsymbols):
            _expand(explicit if explicit is not None else b.subsymbols, needs, out, frozen, names)
            # as eager's: differentiable though its decomposition may not read the input
            # (x[0] = 1 overwriting all of x), its gradient then zeros
            needs.update(o.name for o in b.outputs if _differentiable(o) and o.name not in frozen)
            continue
        if not _has_rule(b) and torch_rules.draws_dropout(b):
            fn = getattr(b.sym.impl, "__wrapped__", b.sym.impl)
            name = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__name__', b.sym.name)}"
            raise Unsupported(f"{name} draws its dropout mask inside itself and has no backward rule: the mask "
                              "cannot be replayed in the backward (F.scaled_dot_product_attention's dropout is "
                              "differentiated)", b.provenance)
        if not _has_rule(b) and OpTag.RANDOM in b.sym.tags:
            raise Unsupported(f"{b.sym.name} is random and has no backward rule: its draws cannot be replayed "
                              "in the backward", b.provenance)
        out.append(_out_of_place(b))
        needs.update(o.name for o in b.outputs if _differentiable(o) and o.name not in frozen)


def _explicit(b, names: NameGen, needs: set) -> list | None:
    """torch_rules.explicit_forward's ops for `b`, recorded under its line, its results
    renamed to b's outputs (the ops after it read those names)."""
    if b.sym not in torch_rules.EXPLICIT:  # most ops: no trace context to set up
        return None
    ctx = TraceContext(names, b.provenance)
    with tracing(ctx):
        result = torch_rules.explicit_forward(b, needs)
    if result is None:
        return None
    flat = values_in(result)
    if len(flat) != len(b.outputs) or any(n.shape != o.shape or n.dtype != o.dtype for n, o in zip(flat, b.outputs)):
        return None
    mapping = {n.name: o for n, o in zip(flat, b.outputs)}
    return [s.replace(mapping) for s in ctx.bound_symbols]


def _out_of_place(b):
    """`b` with `inplace=True` turned off (F.silu(x, inplace=True), nn.Hardswish(inplace=True)):
    in SSA its input is still its own value, which the backward may read; in place, the call
    would overwrite it."""
    try:
        bound = b.sym.decomposition_signature.bind(*b.args, **b.kwargs) if b.sym.decomposition else None
    except TypeError:
        return b
    if bound is None or bound.arguments.get("inplace") is not True:
        return b
    bound.arguments["inplace"] = False
    return BoundSymbol(b.sym, bound.args, bound.kwargs, b.outputs, b.out_spec, b.provenance, b.subsymbols, b.note)


def _vjp(b, cots: list, needs: set) -> list:
    """(input Value, cotangent) pairs of forward op `b`."""
    if any(v.dtype.is_complex for v in b.inputs() + list(b.outputs)):
        # complex values: torch's own conjugate-Wirtinger convention, op by op, as eager
        return torch_rules.Generic(b, needs).apply(b, cots)
    rule = rules.lookup(b.sym)
    if rule is not None:
        try:
            return rule(b, cots)
        except torch_rules.NoRule:
            pass
    return torch_rules.Generic(b, needs).apply(b, cots)


def differentiate(trace: Trace, requires_grad: list) -> Differentiated:
    """`requires_grad[i]`: whether trace input i gets a gradient."""
    needs = {v.name for v, r in zip(trace.inputs, requires_grad) if r and _differentiable(v)}
    taken = {v.name for v in trace.inputs}
    names = NameGen("t", passes.max_index(trace) + 1, taken)
    forward: list = []
    _expand(trace.bound_symbols, needs, forward, trace.frozen, names)
    # an input updated in place whose final value requires grad (it did, or a KV cache written
    # from values that do): that value is a result too, so the caller's tensor takes its
    # gradient's history, as in eager (runtime copies it in with autograd on)
    written = [(i, src) for dst, src in trace.writeback
               if requires_grad[(i := trace.inputs.index(dst))] or src.name in needs]
    results = values_in(trace.output) + [src for _, src in written]
    differentiable = [v.name in needs for v in results]
    cot_gen = NameGen("g", 0, taken)  # g0, g1, ... unless an input is named so
    cotangents = [Value(cot_gen.next(), v.shape, v.dtype, v.device, ValueRole.INPUT)
                  for v in results if v.name in needs]
    grads: dict = {}
    backward: list = []

    def accumulate(v: Value, g: Value) -> None:
        # a cotangent is of its value's dtype, or wider where a rule carries it so: FSDP2's
        # reduce_dtype, a bfloat16 gathered parameter's gradient reduced and kept in float32
        if tuple(g.shape) != v.shape or (g.dtype != v.dtype and not _wider(g.dtype, v.dtype)):
            raise Unsupported(f"internal: the cotangent of {v.name} is {g.type_str()}, not {v.type_str()}")
        grads[v.name] = g if v.name not in grads else P.add(grads[v.name], g)

    ctx = TraceContext(names)
    with tracing(ctx):
        for v, g in zip([r for r, d in zip(results, differentiable) if d], cotangents):
            accumulate(v, g)
    backward += ctx.bound_symbols
    for b in reversed(forward):
        cots = [grads.get(o.name) for o in b.outputs]
        if all(c is None for c in cots) or not any(v.name in needs for v in b.inputs()):
            continue
        ctx = TraceContext(names, b.provenance)
        with tracing(ctx):
            for v, g in _vjp(b, cots, needs):
                if v.name in needs:
                    accumulate(v, g)
        backward += ctx.bound_symbols

    # an input eager's autograd graph does not connect to a differentiable result (unused, or
    # only through non-differentiable ops) gets no gradient: its .grad stays None, as in eager
    # (an optimizer skips it); a connected one gets zeros where no gradient flows (floor)
    connected = _connected(trace.bound_symbols, needs, [r for r, d in zip(results, differentiable) if d])
    grad_inputs = [i for i, v in enumerate(trace.inputs) if v.name in needs and v.name in connected]
    ctx = TraceContext(names)
    with tracing(ctx):
        outs = [grads.get(trace.inputs[i].name) or prim_rules.zeros_like(trace.inputs[i]) for i in grad_inputs]
    backward += ctx.bound_symbols

    backward = simplify.pads_to_cat(backward, outs)
    cot_names = {g.name for g in cotangents}
    saved = _saved(backward, outs, cot_names)
    backward, recomputed = remat.recompute(forward, backward, saved, {v.name for v in trace.inputs})
    if recomputed:
        saved = _saved(backward, outs, cot_names)
    # an input that needs no gradient, updated in place and read by the backward (a generic
    # rule's recompute of hypot(x0, x2) before x2.add_(x2), fuzz backward 10359): the backward
    # needs its value before the update, so the runtime hands the forward a copy and writes the
    # caller's tensor after, as it does for those that require grad
    saved_names = {v.name for v in saved}
    kept_old = [(i, src) for dst, src in trace.writeback if dst.name in saved_names
                and not requires_grad[(i := trace.inputs.index(dst))] and src.name not in needs]
    written += kept_old
    results += [src for _, src in kept_old]
    differentiable += [False] * len(kept_old)
    if written:  # written after the Function runs (runtime.training_program), not by the forward program
        updated = {trace.inputs[i].name for i, _ in written}
        trace = trace.with_(trace.stage, trace.bound_symbols)
        trace.writeback = [(dst, src) for dst, src in trace.writeback if dst.name not in updated]
    d = _split(trace, forward, backward, results, differentiable, cotangents, grad_inputs, saved, outs)
    d.recomputed, d.written = recomputed, [i for i, _ in written]
    d.returned = _returned(trace, written)
    d.wrt = [i for i, v in enumerate(trace.inputs) if v.name in needs]
    d.notes = _notes(trace.bound_symbols, needs)
    return d


def _notes(bsyms, needs: set) -> list[Note]:
    """What the user is told at the lines of ops that get a gradient: an SDPA whose backward
    holds its [B, H, L, S] scores, and why the fused kernel does not apply (attention_rules)."""
    return [Note(Severity.INFORMATION, message, b.provenance, DiagnosticCode.ATTENTION_BACKWARD)
            for b in bsyms if any(v.name in needs for v in b.inputs())
            and (message := attention_rules.backward_note(b, needs)) is not None]


def _returned(trace: Trace, written: list) -> list[int | None]:
    """Per result the call builds: the input it is, or whose final value it is (updated in place
    by the forward program or after the Function), whose caller's tensor is returned; else None."""
    final = {src.name: trace.inputs.index(dst) for dst, src in trace.writeback}
    final |= {src.name: i for i, src in written} | {v.name: i for i, v in enumerate(trace.inputs)}
    return [final.get(v.name) for v in values_in(trace.output)]


def _connected(bsyms, needs: set, results: list) -> set[str]:
    """The values from which eager's autograd graph reaches one of `results`: the trace's ops
    (torch-level, as autograd records them) over values that require grad, walked back."""
    reached = {v.name for v in results}
    for b in reversed(bsyms):
        if OpTag.NON_DIFFERENTIABLE not in b.sym.tags and any(o.name in reached for o in b.outputs):
            reached.update(v.name for v in b.inputs() if v.name in needs)
    return reached


def _saved(backward: list, outs: list, cotangents: set) -> list:
    """The forward values the backward reads (gradients that are forward values included)."""
    made = {o.name for b in backward for o in b.outputs}
    saved = [v for v in external_inputs(backward) if v.name not in cotangents]
    return saved + [v for v in outs if v.name not in made and v.name not in cotangents and v not in saved]


def _split(trace, forward, backward, results, differentiable, cotangents, grad_inputs, saved, outs):
    # the backward starts with the forward ops it recomputes (remat): the joint trace has them once
    made = {o.name for f in forward for o in f.outputs}
    joint_backward = [b for b in backward if not b.outputs or not all(o.name in made for o in b.outputs)]
    joint = Trace(f"{trace.name}_joint", list(trace.inputs) + cotangents, forward + joint_backward,
                  (tuple(results), tuple(outs)), Stage.JOINT, trace.signature, dict(trace.extra_globals),
                  list(trace.writeback))
    # what each half's printed program names as a global: a training forward's
    # layer_norm_with_stats or batch_norm_with_update, a backward rule's symbols
    own = lambda ops: {b.sym.name: b.sym.impl for b in passes.iter_all(ops) if OpTag.PROGRAM_GLOBAL in b.sym.tags}  # noqa: E731
    fwd = passes.dce(Trace(f"{trace.name}_forward", list(trace.inputs), forward, tuple(results) + tuple(saved),
                           Stage.FORWARD, trace.signature, {**trace.extra_globals, **own(forward)},
                           list(trace.writeback)))
    bwd_inputs = [Value(v.name, v.shape, v.dtype, v.device, ValueRole.SAVED) for v in saved] + cotangents
    # the forward's globals too: what the backward's arguments print as (a collective's Group)
    bwd = Trace(f"{trace.name}_backward", bwd_inputs, backward, tuple(outs), Stage.BACKWARD, [],
                {**trace.extra_globals, **own(backward)})
    bwd = passes.dce(passes.cse(bwd))
    bwd.packed = len(saved)  # the saved tensors arrive in one list (runtime.training_program)
    used = {v.name for v in external_inputs(bwd.bound_symbols)} | {v.name for v in bwd.results()}
    kept = [v for v in saved if v.name in used]
    if len(kept) != len(saved):  # CSE or DCE left some saved values unread
        return _split(trace, forward, backward, results, differentiable, cotangents, grad_inputs, kept, outs)
    return Differentiated(joint, fwd, bwd, len(results), differentiable, grad_inputs, saved)
