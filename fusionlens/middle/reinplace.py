"""Reinplacing (Trace -> Trace): an update of an input written into the input itself.

The frontend functionalises an in-place update (views.py): `cache.index_copy_(2, pos, k)`,
`cache[:, :, p] = k` or `out[:, :n] += y` becomes an out-of-place scatter into a copy of the
whole base, which the program then copies back into the caller's tensor (`write_back`). That
is two copies of the base per call where eager writes only the window: for a KV cache of 4,096
positions and 32 layers, about a gigabyte of memory traffic per decoded token.

This pass runs on the fusion-stage trace (prims, or torch-level ops no executor fuses) and
turns each chain `S1 = scatter(X, w1); ...; Sn = scatter(Sn-1, wn)` whose end is written back
into the input `X` into in-place scatters into X itself (`index_copy_`, `setitem_`, the prims
`scatter_` and `strided_scatter_`, whose Triton kernel stores only the window into X's
addresses): the work is the window's, as in eager. The write-back `write_back(X, Sn)` stays,
and copies nothing (Sn is X: ir/program_calls.py returns at once); it keeps Sn a result of the
program, so that fusion keeps the in-place scatter as a region's output (a region stores only
its outputs) and nothing drops the write as dead. Like torch's
functionalization reinplace pass (torch/fx/passes/reinplace.py), it changes nothing where it
cannot prove the rewrite safe:

- the old value of each base (and every value that may share its memory: a view of it made
  before the scatter, found by following every op not known to make a fresh tensor) is read by
  no op after the scatter, nor returned, nor written back elsewhere; no other operand of the
  scatter shares its memory (the source of `x[:, 0] = x[:, 1]`); nor is a value made from it
  before the write (elementwise, or by an op the write does not wait for) used after it: fusion
  may compute that value again there, from the written memory (regroup.py's recompute);
- inputs that share memory with one another (aliasing.py's synthetic base) are left alone;
- no op after the first write may stop the program with ShapeChanged (jit then runs the call
  eagerly on the caller's tensors, which must not have been written yet);
- a training forward keeps its copy where the updated tensor (or a view of it) is a result
  or saved for the backward: a later in-place update of the caller's tensor would change it;
- a scatter a fusion executor takes is rewritten only where that executor stores in place
  (`stores_in_place`: Triton); nvFuser keeps its out-of-place scatter and the write-back.

The checked first call and the float64 second opinion (driver/checking.py) run the program on
copies of the inputs it updates, so it writes into those copies, never the caller's tensors.
"""

from __future__ import annotations

import torch

from fusionlens.frontend import aliasing
from fusionlens.ir.trace import BoundSymbol, OpTag, Symbol, SymbolKind, Trace, Value, values_in
from fusionlens.ops import prims as P, torch_ops
from fusionlens.ops.torch_ops import fallbacks
from fusionlens.middle import passes


# --- the in-place forms (each returns the tensor it wrote into) -----------------------------

def setitem_(input, key, value):
    input[key] = value
    return input


def index_copy_(input, dim, index, source):
    return input.index_copy_(dim, index, source)


def slice_scatter_(input, src, dim=0, start=None, end=None, step=1):
    input[(slice(None),) * (dim % input.ndim) + (slice(start, end, step),)] = src
    return input


def select_scatter_(input, src, dim, index):
    input.select(dim, index).copy_(src)
    return input


def diagonal_scatter_(input, src, offset=0, dim1=0, dim2=1):
    input.diagonal(offset, dim1, dim2).copy_(src)
    return input


def scatter_(a, index, src, dim):
    return a.scatter_(dim, index, src)


def strided_scatter_(a, src, offset, strides):
    """prims.strided_scatter's window (of a's row-major element numbers) written into `a`."""
    if a.is_contiguous():
        flat = a.view(-1)
        torch.as_strided(flat, tuple(src.shape), tuple(strides), flat.storage_offset() + offset).copy_(src)
    else:  # row-major numbers are not addresses: the window written into a copy, copied in
        a.copy_(P.strided_scatter.impl(a, src, offset, strides))
    return a


def _symbol(fn, kind: SymbolKind) -> Symbol:
    return Symbol(fn.__name__, fn, kind=kind, tags=(OpTag.IN_PLACE, OpTag.SCATTER) if kind is SymbolKind.PRIM
                  else (OpTag.IN_PLACE,))


# the prims' in-place forms: fusion takes them as scatters (a Triton kernel stores the window into a)
SCATTER_ = _symbol(scatter_, SymbolKind.PRIM)
STRIDED_SCATTER_ = _symbol(strided_scatter_, SymbolKind.PRIM)
PRIMS_IN_PLACE = {P.scatter: SCATTER_, P.strided_scatter: STRIDED_SCATTER_}
IN_PLACE_SCATTERS = (SCATTER_, STRIDED_SCATTER_)
# torch-level write-backs (views.py's) and scatters, by the torch callable their symbol runs
_TORCH_IN_PLACE = {
    torch_ops.registered("setitem").impl: _symbol(setitem_, SymbolKind.TORCH),
    torch.index_copy: _symbol(index_copy_, SymbolKind.TORCH),
    torch.slice_scatter: _symbol(slice_scatter_, SymbolKind.TORCH),
    torch.select_scatter: _symbol(select_scatter_, SymbolKind.TORCH),
    torch.diagonal_scatter: _symbol(diagonal_scatter_, SymbolKind.TORCH),
}
IN_PLACE = set(IN_PLACE_SCATTERS) | set(_TORCH_IN_PLACE.values())  # every in-place form

# the code of every shape-checked op's callable (fallbacks.shape_checked): it may raise ShapeChanged
_CHECKED_CODE = fallbacks.shape_checked(Symbol("probe", lambda: None), "probe", [], "", None).impl.__code__
# torch calls whose result may be their input itself (or a view of it) though their prims are elementwise
_MAY_RETURN_INPUT = {"torch.positive", "torch.real", "torch.conj", "torch.Tensor.conj", "torch.resolve_conj",
                     "torch.resolve_neg", "torch.Tensor.contiguous", "torch.Tensor.to", "torch.Tensor.type_as"}
_FRESH_PRIM_TAGS = {OpTag.ELEMENTWISE, OpTag.REDUCTION, OpTag.GATHER, OpTag.FACTORY, OpTag.CAT, OpTag.SCATTER}


def in_place_form(b: BoundSymbol) -> Symbol | None:
    """The in-place symbol for scatter `b` into its first operand, or None where it is none."""
    if b.sym.kind is SymbolKind.PRIM:
        return PRIMS_IN_PLACE.get(b.sym)
    if b.sym.kind is not SymbolKind.TORCH or not b.args or not isinstance(b.args[0], Value):
        return None
    base, out = b.args[0], b.outputs[0] if len(b.outputs) == 1 else None
    if out is None or out.dtype != base.dtype or tuple(out.shape) != tuple(base.shape):
        return None
    return _TORCH_IN_PLACE.get(getattr(b.sym.impl, "__wrapped__", b.sym.impl))  # (a cast_result: its op's)


def window_of(b: BoundSymbol) -> Value | None:
    """The values in-place scatter `b` writes (its source) where they are a tensor of the
    window's shape; None where that is not known (a setitem of a scalar, or at tensor indices,
    or of a source broadcast into its box)."""
    at = {"scatter_": 2, "index_copy_": 3, "setitem_": 2}.get(b.sym.name, 1)
    value = b.args[at] if len(b.args) > at else None
    if not isinstance(value, Value) or b.sym.name != "setitem_":
        return value if isinstance(value, Value) else None
    key = b.args[1] if isinstance(b.args[1], tuple) else (b.args[1],)
    plain = (type(None), type(Ellipsis), int, slice)
    if not all(type(d) is int for d in b.args[0].shape) or not all(
            type(k) in plain and (type(k) is not slice or all(type(i) in (int, type(None)) for i in
                                                               (k.start, k.stop, k.step))) for k in key):
        return None  # (a symbolic size or index: not worked out here)
    try:
        box = torch.empty(tuple(b.args[0].shape), device="meta")[key]
    except (IndexError, TypeError, ValueError, RuntimeError):
        return None
    return value if tuple(box.shape) == tuple(value.shape) else None


# --- what may share memory ------------------------------------------------------------------

def _fresh_leaf(b: BoundSymbol) -> bool:
    if b.sym is P.convert_element_type:  # .to() of the same dtype is the tensor itself
        return bool(b.outputs) and b.args[0].dtype != b.outputs[0].dtype if isinstance(b.args[0], Value) else True
    return b.sym.kind is SymbolKind.PRIM and bool(b.sym.tags & _FRESH_PRIM_TAGS) and OpTag.SHAPE not in b.sym.tags


def fresh(b: BoundSymbol) -> bool:
    """Whether `b`'s results are new tensors whichever executor runs it (a torch call of a
    view, an opaque call, an in-place op: not known to be)."""
    if b.sym in IN_PLACE or b.sym.kind is SymbolKind.OPAQUE or b.sym.name in _MAY_RETURN_INPUT:
        return False
    if b.sym.kind is SymbolKind.PRIM:
        return _fresh_leaf(b)
    if b.subsymbols:
        return all(_fresh_leaf(leaf) for leaf in passes.flatten(b.subsymbols))
    return bool(b.sym.tags & {OpTag.MATMUL, OpTag.CONVOLUTION})  # a library call of one of these: a new result


def _elementwise(b: BoundSymbol) -> bool:
    leaves = [b] if b.sym.kind is SymbolKind.PRIM else list(passes.flatten(b.subsymbols))
    return bool(leaves) and all(leaf.sym.kind is SymbolKind.PRIM and (
        OpTag.ELEMENTWISE in leaf.sym.tags or OpTag.SHAPE in leaf.sym.tags or leaf.sym is P.broadcast_in_dim)
        for leaf in leaves)


class _Uses:
    """Who reads each value of a trace, found once: the pass asks about every write-back's
    chain without walking the trace again (a 32-layer model has 64 cache writes)."""

    def __init__(self, trace: Trace):
        self.ops = trace.bound_symbols
        self.readers: dict[str, list[int]] = {}  # value name -> indices of the ops that read it
        for i, b in enumerate(self.ops):
            for v in b.inputs():
                self.readers.setdefault(v.name, []).append(i)
        self.made_at = {o.name: i for i, b in enumerate(self.ops) for o in b.outputs}
        self.last_check = max((i for i, b in enumerate(self.ops)  # the last op that may raise ShapeChanged
                               if getattr(b.sym.impl, "__code__", None) is _CHECKED_CODE), default=-1)

    def sharing(self, start: str, upto: int) -> set[str]:
        """`start` and the values ops[:upto] make that may share its memory (views of views...)."""
        names, todo = {start}, [start]
        while todo:
            for j in self.readers.get(todo.pop(), ()):
                if j < upto and not fresh(self.ops[j]):
                    new = [o.name for o in self.ops[j].outputs if o.name not in names]
                    names.update(new)
                    todo += new
        return names

    def ancestors(self, i: int) -> set[int]:
        """The indices of the ops whose results op i reads, directly or not."""
        out: set[int] = set()
        todo = [i]
        while todo:
            for v in self.ops[todo.pop()].inputs():
                j = self.made_at.get(v.name)
                if j is not None and j not in out:
                    out.add(j)
                    todo.append(j)
        return out

    def derived(self, names: set[str], upto: int, skip: set[int]) -> set[str]:
        """`names` and the values ops[:upto] (but those at `skip`) compute from them that fusion
        may compute again after op `upto`, reading the old memory there: through any op the write
        does not wait for (a region placed after it), and through the elementwise ops it does wait
        for (regroup.py recomputes such a chain in a later region: fuzz triton 25323)."""
        before = self.ancestors(upto)
        out, todo = set(names), list(names)
        while todo:
            for j in self.readers.get(todo.pop(), ()):
                if j < upto and j not in skip and (j not in before or _elementwise(self.ops[j])):
                    new = [o.name for o in self.ops[j].outputs if o.name not in out]
                    out.update(new)
                    todo += new
        return out

    def read_after(self, names: set[str], i: int) -> bool:
        return any(j > i for n in names for j in self.readers.get(n, ()))


# --- the pass ---------------------------------------------------------------------------------

def _chain(uses: _Uses, dst: Value, src: Value) -> list[int] | None:
    """The indices of the scatters from `dst` (an input) to `src`, each into the previous one's
    result, in program order; None where src is not such a chain's end."""
    chain, v = [], src
    while v.name != dst.name:
        i = uses.made_at.get(v.name)
        if i is None or in_place_form(uses.ops[i]) is None:
            return None
        chain.append(i)
        v = uses.ops[i].args[0]
    return chain[::-1] or None


def _claimed_elsewhere(b: BoundSymbol, fusers) -> bool:
    """Whether the fusion executor that would take prim `b` keeps its scatter out of place."""
    if b.sym.kind is not SymbolKind.PRIM:
        return False
    for ex in fusers:
        if ex.can_take(b) is None:
            return not getattr(ex, "stores_in_place", False)
    return False


def _why_not(trace: Trace, uses: _Uses, chain: list[int], dst: Value, fusers, training: bool) -> str | None:
    """Why the chain of scatters into `dst` must stay out of place; None where it is safe."""
    if uses.last_check > chain[0]:
        return "a later op checks a shape and may send the call back to eager"
    others = [src for d, src in trace.writeback if d.name != dst.name]
    at_end = {v.name for v in values_in(trace.output) + others}
    for i in chain:
        b = uses.ops[i]
        if _claimed_elsewhere(b, fusers):
            return "the fusion executor that takes it stores its scatter into a copy"
        old = uses.sharing(b.args[0].name, i)  # the base before this write, and what may view it
        if any(v.name in old for v in values_in((b.args[1:], b.kwargs))):
            return "an operand of the write shares memory with what it writes into"
        if at_end & old:
            return "the value before the write is returned or written back"
        if uses.read_after(old, i):
            return "the value before the write is read after it"
        made = uses.derived(old, i, set(chain))
        if at_end & made or uses.read_after(made, i):
            return "a value made from the one before the write is used after it (fusion may compute it there)"
    if training and at_end & uses.sharing(uses.ops[chain[-1]].outputs[0].name, len(uses.ops)):
        return "the updated tensor is a result or saved for the backward"
    return None


def reinplace(trace: Trace, fusers=(), *, training: bool = False) -> Trace:
    """`trace` with each update of an input that is safe to write in place written in place,
    its write-back dropped; the trace itself where there is none (see the module docstring).
    `fusers`: the fusion executors the trace was prepared for; `training`: a training forward."""
    ops = trace.bound_symbols
    if not trace.writeback or any(b.sym.impl in (aliasing.alias_span, aliasing.span_put) for b in ops):
        return trace
    uses = _Uses(trace)
    rewrite: dict[int, Symbol] = {}
    for dst, src in trace.writeback:
        chain = _chain(uses, dst, src)
        if chain is not None and _why_not(trace, uses, chain, dst, fusers, training) is None:
            rewrite.update({i: in_place_form(ops[i]) for i in chain})  # type: ignore[misc]
    if not rewrite or any(trace.extra_globals.get(s.name, s.impl) is not s.impl for s in rewrite.values()):
        return trace  # (a program global of that name already: none here is worth a rename)
    new_ops = [with_symbol(b, rewrite[i]) if i in rewrite else b for i, b in enumerate(ops)]
    out = trace.with_(trace.stage, new_ops)  # its write-backs kept: each src is its dst now, nothing to copy
    for sym in rewrite.values():
        out.extra_globals[sym.name] = sym.impl
    return out


def with_symbol(b: BoundSymbol, sym: Symbol) -> BoundSymbol:
    """`b` as `sym` (its in-place form, or back): the same operands and result (the base itself),
    no note (a note would report it as a fallback); its decomposition says what it computes."""
    return BoundSymbol(sym, b.args, b.kwargs, list(b.outputs), b.out_spec, b.provenance, list(b.subsymbols))
