"""Trace-to-trace passes: decomposition into prims, flattening, DCE and CSE."""

from __future__ import annotations

from torch.utils import _pytree as pytree

from fusionlens.ir.trace import BoundSymbol, NameGen, OpTag, SymbolKind, Trace, TraceContext, Value, format_arg, tracing
from fusionlens.ops.torch_ops import NoDecomposition
from fusionlens.ir.sizes import same_shape
from fusionlens.ir.vocabulary import Stage


def max_index(trace: Trace) -> int:
    """The largest n of the trace's `t<n>` names: new names start after it."""
    best = -1
    for b in iter_all(trace.bound_symbols):
        for v in b.outputs:
            if v.name[:1] == "t" and v.name[1:].isdecimal():  # re's t(\d+), without compiling it
                best = max(best, int(v.name[1:]))
    return best


def iter_all(bsyms):
    for b in bsyms:
        yield b
        yield from iter_all(b.subsymbols)


def decompose(trace: Trace) -> Trace:
    """Attach to each torch-level op its decomposition into prims (as subsymbols).

    The decomposition's results take the recorded names, so the trace keeps its SSA names.
    An op whose decomposition returns one of its inputs (contiguous, eval dropout) is an
    alias: it is dropped and its uses read the input, unless the program hands its result out
    and the input may share memory with the caller's tensors: then it runs as its torch call,
    aliasing as eager's does; a value the program hands out a view of counts as handed out
    (`x.clone()[0]`: eager's is a view of the copy, which a later `x.relu_()` leaves alone).
    Ops that cannot be decomposed keep `note` saying why: they fall back to running as one
    torch call.
    """
    handed = {v.name for v in trace.results()}
    done = _decompose(trace, handed)
    made = {o.name for b in done.bound_symbols for o in b.outputs}
    dropped = {o.name for b in trace.bound_symbols for o in b.outputs} - made  # the aliases
    if not dropped:  # most programs: one pass
        return done
    # and what a library call takes, which it may update in place (batch_norm's running statistics:
    # fuzz default 208, x0.roll(1, -1) of one element is x0 here, and the call updated x0)
    made_by = {o.name: b for b in trace.bound_symbols for o in b.outputs}
    called = {v.name for b in done.bound_symbols if _may_update(b)
              and b.outputs and b.outputs[0].name in made_by for v in made_by[b.outputs[0].name].inputs()}
    viewed = _viewed(trace, done, handed | called)
    return _decompose(trace, viewed) if viewed & dropped - handed else done


_KEPT_ALIAS = "is its input here, and the program hands it out"  # an alias run whole (a view in eager)


def _viewed(trace: Trace, done: Trace, handed: set[str]) -> set[str]:
    """`handed` and what a handed-out value is a view of: through ops that decomposed into
    shape prims only, the aliases `done` dropped or ran whole (fuzz triton 17764:
    x1.roll(1, -2)[0], the roll over a size-1 dim; default 18542: x0.contiguous().squeeze(-1))."""
    # an op's output name -> which of its inputs (by position) it moves the data of; None: not a
    # view. Shape prims only, and of the op's inputs those they read (a fill broadcasts its
    # value, not its tensor); positions, as `done` reads the inputs of aliases it dropped
    view: dict[str, tuple[int, set[int] | None]] = {}
    for b in done.bound_symbols:
        flat, ins = flatten([b]), [v.name for v in b.inputs()]
        moved: set[int] | None = None
        if _KEPT_ALIAS in (b.note or ""):
            moved = set(range(len(ins)))
        elif b.subsymbols and all(OpTag.SHAPE in s.sym.tags for s in flat):
            read = {v.name for s in flat for v in s.inputs()}
            moved = {i for i, n in enumerate(ins) if n in read}
        view.update({o.name: (len(ins), moved) for o in b.outputs})
    viewed = set(handed)
    for b in reversed(trace.bound_symbols):
        if not b.outputs or not any(o.name in viewed for o in b.outputs):
            continue
        ins = [v.name for v in b.inputs()]
        everything = (len(ins), set(range(len(ins))))  # a dropped alias: its input is its output
        kinds = [view.get(o.name, everything) for o in b.outputs]
        if all(moved is not None for _, moved in kinds):
            for n, moved in kinds:
                viewed.update(ins if n != len(ins) else [ins[i] for i in moved or ()])
    return viewed


def _decompose(trace: Trace, handed: set[str]) -> Trace:
    names = NameGen("t", max_index(trace) + 1, {v.name for v in trace.inputs})
    alias: dict = {}
    exposed = handed | {v.name for v in trace.inputs}  # what may share memory with those (_expose)
    out: list[BoundSymbol] = []
    checked = 0  # out[:checked] are in `exposed`
    for b in trace.bound_symbols:
        b = b.replace(alias)
        if b.sym.decomposition is None:
            out.append(b)
            continue
        ctx = TraceContext(names, b.provenance)
        try:
            with tracing(ctx):
                result = b.sym.decomposition(*b.args, **b.kwargs)
        except NoDecomposition as e:
            out.append(_with_note(b, f"{b.sym.name} is not decomposed ({e}); it runs as one torch call"))
            continue
        except Exception as e:  # a gap in our decomposition must not lose the op
            out.append(_with_note(b, f"{b.sym.name}: decomposition failed ({type(e).__name__}: {e}); "
                                     "it runs as one torch call"))
            continue
        flat = [v for v in pytree.tree_leaves(result) if isinstance(v, Value)]
        mismatch = len(flat) != len(b.outputs) or any(
            not same_shape(n.shape, o.shape) or n.dtype != o.dtype for n, o in zip(flat, b.outputs))
        if mismatch:
            out.append(_with_note(b, f"{b.sym.name}: decomposition does not match torch's result "
                                     "for these arguments; it runs as one torch call"))
            continue
        produced = {v.name for s in ctx.bound_symbols for v in s.outputs}
        if all(v.name not in produced for v in flat):  # pure alias
            if any(o.name in trace.frozen and n.name not in trace.frozen for n, o in zip(flat, b.outputs)):
                out.append(b)  # detach(): the alias where eager's gradient stops is kept, whole
                continue
            _expose(exposed, out[checked:])
            checked = len(out)
            if (any(o.name in handed and n.name in exposed for n, o in zip(flat, b.outputs))
                    and OpTag.RANDOM not in b.sym.tags):
                # handed out, the alias would be a tensor the caller has (or sees updated) too:
                # the torch call makes eager's, the input itself, a view or a copy (round of an
                # integer tensor is a new one); dropout not training is the input itself in eager
                out.append(_with_note(b, f"{b.sym.name} {_KEPT_ALIAS}: "
                                         "it runs as one torch call, which makes eager's tensor"))
                continue
            alias.update({o.name: n for n, o in zip(flat, b.outputs)})
            exposed.update(n.name for n, o in zip(flat, b.outputs) if o.name in handed)
            continue
        if any(v.name not in produced for v in flat):  # partly aliasing: keep the op whole
            out.append(b)
            continue
        mapping = {n.name: o for n, o in zip(flat, b.outputs)}
        out.append(BoundSymbol(b.sym, b.args, b.kwargs, b.outputs, b.out_spec, b.provenance,
                               [s.replace(mapping) for s in ctx.bound_symbols], b.note))
    return trace.with_(Stage.DECOMPOSED, out, rename=alias)


def _expose(exposed: set[str], done: list[BoundSymbol]) -> None:
    """Add to `exposed` the outputs in `done` that may share memory with a value in it (an
    input's, or one the program hands out): a view's (shape prims only) or a torch call's."""
    for b in done:
        # (x[i] of a 0-d integer tensor i gathers here but is a view in the torch call the torch
        # executor runs: fuzz default 35235, x.flatten()[x.flatten().argmax()].sum())
        view = not b.subsymbols or all(OpTag.SHAPE in s.sym.tags for s in flatten([b])) \
            or b.sym.name == "operator.getitem"
        if view and any(v.name in exposed for v in b.inputs()):
            exposed.update(o.name for o in b.outputs)


def _with_note(b: BoundSymbol, note: str) -> BoundSymbol:
    return BoundSymbol(b.sym, b.args, b.kwargs, b.outputs, b.out_spec, b.provenance, [], b.note or note)


def flatten(bsyms) -> list:
    """Leaves of the decomposition tree: prims and ops that have no decomposition."""
    out = []
    for b in bsyms:
        if b.subsymbols:
            out.extend(flatten(b.subsymbols))
        else:
            out.append(b)
    return out


def _may_update(b: BoundSymbol) -> bool:
    """Whether op `b` is a torch call left whole because it could not be decomposed (its note says
    why), which may update what it takes in place (batch_norm's running statistics); FusionLens's
    own calls (a collective, FSDP's copy-in) and decomposed ops never do."""
    return bool(b.note) and not b.subsymbols and b.sym.kind is SymbolKind.TORCH


def dce(trace: Trace) -> Trace:
    """Drop ops none of whose outputs reach the trace's output; but a torch call that could not
    be decomposed and takes an input, or a value read after it, which it may update in place
    (batch_norm's running statistics: fuzz default 26762, 33450), stays."""
    needed = {v.name for v in trace.results()}
    inputs = {v.name for v in trace.inputs}
    kept = []
    for b in reversed(trace.bound_symbols):
        if any(o.name in needed for o in b.outputs) or _may_update(b) and any(
                v.name in needed or v.name in inputs for v in b.inputs()):
            kept.append(b)
            needed.update(v.name for v in b.inputs())
    return trace.with_(trace.stage, list(reversed(kept)))


def _cse_key(b: BoundSymbol):
    if b.sym.kind is SymbolKind.OPAQUE or OpTag.RANDOM in b.sym.tags:
        return None
    args, kwargs = b.args, b.kwargs
    if b.sym.decomposition is not None:  # softmax(x, -1) and softmax(x, dim=-1) are one op
        try:
            bound = b.sym.decomposition_signature.bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = tuple(bound.arguments.items()), {}
        except TypeError:
            pass
    return (b.sym.name, format_arg(args), format_arg(kwargs))


def cse(trace: Trace) -> Trace:
    """Replace an op identical to an earlier one (same symbol, same arguments) by its result."""
    seen: dict = {}
    alias: dict = {}
    out = []
    names: set[str] = set()
    repeated: set[str] = set()  # the symbols of two ops or more: only those can match
    for b in trace.bound_symbols:
        (repeated if b.sym.name in names else names).add(b.sym.name)
    # a value a library call takes may be updated inside it (batch_norm's running statistics): not
    # one with an identical value, which the call would update too (fuzz default 25057: torch.ones
    # as the running variance and as the weight)
    updatable = {v.name for b in trace.bound_symbols if _may_update(b) for v in b.inputs()}
    # nor a value written back into an input, which is that input after the call: merged with an
    # equal result, the result would be the caller's tensor (fuzz triton 25677: sigmoid(x) and x.sigmoid_())
    updatable |= {src.name for _, src in trace.writeback}
    for b in trace.bound_symbols:
        b = b.replace(alias)
        key = _cse_key(b) if b.sym.name in repeated else None  # an op alone of its symbol matches none
        first = seen.get(key) if key is not None else None
        if first is not None and any(o.name in updatable for o in (*first.outputs, *b.outputs)):
            first = None
        if first is not None and len(first.outputs) == len(b.outputs):
            alias.update({o.name: f for o, f in zip(b.outputs, first.outputs)})
            continue
        if key is not None:
            seen[key] = b
        out.append(b)
    return trace.with_(trace.stage, out, rename=alias)


def optimise(trace: Trace) -> Trace:
    t = dce(cse(trace))
    t.stage = Stage.OPTIMISED
    return t
