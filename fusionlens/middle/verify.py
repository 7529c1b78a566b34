"""The verifier: the IR's invariants, checked between stages.

`verify(trace, stage)` checks one trace; `verify_group(group)` one FusionGroup against the
contract in fusionlens/middle/contract.py. Each rule is a function of its own, linear in the ops (and
their decompositions), so it can run after every stage. A broken rule raises `VerifyError`
naming the op and the user line it came from:

    verify (fusion): t12 = prims.add(t3, t99): t99 is used before it is defined (model.py:41)

The rules:
- defined before use: an op reads trace inputs and earlier ops' outputs only; an op's
  decomposition (its subsymbols) reads the op's arguments and earlier subsymbols' outputs,
  and makes the op's outputs;
- SSA: every name is defined once (no output shadows an input, a decomposition's
  intermediates are fresh names);
- results: what the trace returns and writes back is defined; write-backs go into inputs;
- asynchronous work (ir.pending: a collective issued ahead): what an issue makes is pending
  until exactly one wait takes it; no other op reads it, and nothing returns it;
- the stage's vocabulary: no region call before lowering; the fusion stage holds prims and
  the ops it leaves whole (none of them holding a prim a fusion executor would fuse); the
  execution stage holds region calls and ops the torch executor runs, each named so the
  printed program finds it.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Protocol

import torch

from fusionlens.middle.contract import FusionGroup
from fusionlens.middle.reinplace import IN_PLACE_SCATTERS
from fusionlens.ir.trace import PROFILE_RANGE, BoundSymbol, OpTag, SymbolKind, Trace, Value, format_call, values_in
from fusionlens.ops import prims as P
from fusionlens.ir.provenance import Provenance
from fusionlens.ir.pending import Phase, phase_of
from fusionlens.ir.vocabulary import Stage
from fusionlens.ir.sizes import dim_text


class Fuser(Protocol):
    """What the fusion-stage rule asks of an executor (fusionlens/executors/base.py, which sits
    above this module): its name, and whether it takes a prim."""

    name: str

    def can_take(self, bsym: BoundSymbol) -> str | None: ...


class VerifyError(Exception):
    """A broken invariant: `message`, the offending `op` (None for the trace as a whole) and
    `where`, the op's user line."""

    def __init__(self, stage: str, message: str, op: BoundSymbol | None = None,
                 where: Provenance | None = None):
        self.stage, self.message, self.op = stage, message, op
        self.where = where if where is not None else (op.provenance if op is not None else None)
        super().__init__(self._text())

    def _text(self) -> str:
        text = f"verify ({self.stage}): "
        if self.op is not None:
            call = format_call(self.op)
            text += (call if len(call) <= 160 else call[:157] + "...") + ": "
        text += self.message
        if self.where is not None:
            text += f" ({self.where.short()})"
        return text

    def __str__(self) -> str:
        return self._text()


def verify(trace: Trace, stage: Stage | str, fusers: Sequence[Fuser] | None = None) -> None:
    """Raise VerifyError where `trace`, made by `stage`, breaks an invariant. `fusers`: the
    fusion executors the fusion stage was prepared for (then no op it left whole may hold a
    prim one of them fuses); None skips that check."""
    if stage not in Stage.__members__.values():
        raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(Stage)}")
    stage = Stage(stage)
    if trace.stage is not stage:
        raise VerifyError(stage, f"the trace {trace.name} says it is at stage '{trace.stage}'")
    check_names_unique(trace, stage)  # first: a name defined twice misleads every later rule
    check_defined_before_use(trace, stage)
    check_results_defined(trace, stage)
    check_pending_waited(trace, stage)
    check_stage_ops(trace, stage, fusers)


def _shape(v: Value) -> list[int]:
    return list(v.shape)


_PLAIN = (int, float, bool, str, type(None), slice, type(Ellipsis), torch.dtype, torch.device, torch.memory_format)


def _reads(b: BoundSymbol) -> list[Value]:
    """The Values among an op's arguments, as `BoundSymbol.inputs` finds them (with repeats):
    plain tuples, lists and dicts walked here, anything else through pytree (values_in).
    Walking pytree for every op was nine tenths of a verify."""
    out: list[Value] = []
    todo: list[object] = [b.kwargs, b.args]
    while todo:
        x = todo.pop()
        t = type(x)
        if t is Value:
            out.append(x)  # type: ignore[arg-type]
        elif t is tuple or t is list:
            todo.extend(reversed(x))  # type: ignore[call-overload]
        elif t is dict:
            todo.extend(reversed(list(x.values())))  # type: ignore[attr-defined]
        elif t not in _PLAIN:
            out.extend(values_in(x))
    return out


# --- defined before use -------------------------------------------------------------------

def check_defined_before_use(trace: Trace, stage: str) -> None:
    """Each op reads only trace inputs and earlier ops' outputs, as the Values defined there."""
    made_anywhere = {o.name for b in trace.bound_symbols for o in b.outputs}
    defined: dict[str, Value] = {v.name: v for v in trace.inputs}
    for b in trace.bound_symbols:
        for v in _reads(b):
            if v.name not in defined:
                why = "is used before it is defined" if v.name in made_anywhere else (
                    "is not defined (no trace input or op makes it)")
                raise VerifyError(stage, f"{v.name} {why}", b)
            _same_value(v, defined[v.name], stage, b)
        if b.subsymbols:
            _check_decomposition_reads(b, stage)
        for o in b.outputs:
            defined.setdefault(o.name, o)  # a second definition is check_names_unique's


def _same_value(read: Value, made: Value, stage: str, b: BoundSymbol) -> None:
    """A name stands for one value: what an op reads has the shape and dtype it was made with."""
    if read is not made and (_key(read.shape) != _key(made.shape) or read.dtype != made.dtype):
        raise VerifyError(stage, f"{read.name} is read as {read.type_str()} but defined as {made.type_str()}", b)


def _check_decomposition_reads(parent: BoundSymbol, stage: str) -> None:
    """The subsymbols read the op's arguments and earlier subsymbols' outputs only (passes
    such as DCE see an op's reads through its arguments), and make the op's outputs (which
    flattening the op into its prims relies on)."""
    scope: dict[str, Value] = {v.name: v for v in _reads(parent)}
    for s in parent.subsymbols:
        for v in _reads(s):
            if v.name not in scope:
                raise VerifyError(stage, f"inside {parent.sym.name} ({_outs(parent)}): {v.name} is neither an "
                                         "argument of the op nor made by an earlier op of its decomposition", s)
            _same_value(v, scope[v.name], stage, s)
        if s.subsymbols:
            _check_decomposition_reads(s, stage)
        for o in s.outputs:
            scope.setdefault(o.name, o)
    made = {o.name for s in parent.subsymbols for o in s.outputs}
    for o in parent.outputs:
        if o.name not in made:
            raise VerifyError(stage, f"its decomposition does not make its output {o.name}", parent)


def _outs(b: BoundSymbol) -> str:
    return ", ".join(o.name for o in b.outputs) or "no outputs"


# --- SSA: every name defined once ---------------------------------------------------------

def check_names_unique(trace: Trace, stage: str) -> None:
    """Inputs and op outputs are distinct names; a decomposition's intermediates are fresh."""
    inputs: set[str] = set()
    for v in trace.inputs:
        if v.name in inputs:
            raise VerifyError(stage, f"the trace input {v.name} appears twice among {trace.name}'s inputs")
        inputs.add(v.name)
    first: dict[str, BoundSymbol] = {}  # name -> the op that made it
    fresh: set[str] = set()  # names of decompositions' intermediate values
    for b in trace.bound_symbols:
        for o in b.outputs:
            if o.name in inputs:
                raise VerifyError(stage, f"{o.name} shadows the trace input of that name", b)
            if o.name in first:
                raise VerifyError(stage, f"{o.name} is defined twice (first by {first[o.name].sym.name})", b)
            if o.name in fresh:
                raise VerifyError(stage, f"{o.name} is also the name of a value inside an earlier op's "
                                         "decomposition", b)
            first[o.name] = b
        if b.subsymbols:
            _check_decomposition_names(b, inputs, first, fresh, stage)


def _check_decomposition_names(parent: BoundSymbol, inputs: set[str], first: dict[str, BoundSymbol],
                               fresh: set[str], stage: str) -> None:
    """A subsymbol's output is one of its op's outputs, made once by the decomposition, or a
    name used nowhere else: flattening the op into its prims must keep the trace in SSA."""
    own = {o.name for o in parent.outputs}
    made: set[str] = set()
    for s in parent.subsymbols:
        for o in s.outputs:
            if o.name in own:
                if o.name in made:
                    raise VerifyError(stage, f"inside {parent.sym.name}: {o.name} is made twice by its "
                                             "decomposition", s)
                made.add(o.name)
            elif o.name in inputs or o.name in first or o.name in fresh:
                raise VerifyError(stage, f"inside {parent.sym.name} ({_outs(parent)}): {o.name} is defined "
                                         "again (names inside a decomposition must be fresh)", s)
            else:
                fresh.add(o.name)
        if s.subsymbols:
            _check_decomposition_names(s, inputs, first, fresh, stage)


# --- results and write-backs --------------------------------------------------------------

def check_results_defined(trace: Trace, stage: str) -> None:
    """What the trace returns and writes back is defined; each write-back goes into a trace
    input once, from a value of its shape and dtype (the program copies it in at its end)."""
    maker = {o.name: b for b in trace.bound_symbols for o in b.outputs}
    inputs = {v.name: v for v in trace.inputs}
    for v in values_in(trace.output):
        if v.name not in inputs and v.name not in maker:
            raise VerifyError(stage, f"{trace.name} returns {v.name}, which no trace input or op defines")
    written: set[str] = set()
    for dst, src in trace.writeback:
        b = maker.get(src.name)
        if dst.name not in inputs:
            raise VerifyError(stage, f"{src.name} is written back into {dst.name}, which is not a trace input", b)
        if dst.name in written:
            raise VerifyError(stage, f"{dst.name} is written back twice", b)
        written.add(dst.name)
        if src.name not in inputs and b is None:
            raise VerifyError(stage, f"{dst.name} is written back from {src.name}, which no trace input or op "
                                     "defines")
        if _key(src.shape) != _key(dst.shape) or src.dtype != dst.dtype:
            raise VerifyError(stage, f"{dst.name} ({dst.type_str()}) is written back from {src.name} "
                                     f"({src.type_str()})", b)
    if trace.packed is not None and not 0 <= trace.packed <= len(trace.inputs):
        raise VerifyError(stage, f"{trace.packed} packed inputs, but {trace.name} has {len(trace.inputs)} inputs")
    for i in trace.ranges:
        if not 0 <= i < len(trace.bound_symbols):
            raise VerifyError(stage, f"a profiler range at op {i}, but {trace.name} has "
                                     f"{len(trace.bound_symbols)} ops")


# --- asynchronous work: issued, waited for once, before its first use ---------------------

def check_pending_waited(trace: Trace, stage: Stage | str) -> None:
    """What an issue (ir.pending: a collective issued ahead) makes is pending: exactly one wait
    takes it (its first argument), and no other op reads it, before or after; a wait takes a
    pending value. The execution stage holds region calls, not these ops: it is not checked."""
    if stage == Stage.EXECUTION:
        return
    pending: dict[str, BoundSymbol] = {}  # pending value -> the op that issued it
    waited: dict[str, BoundSymbol] = {}  # once pending -> the wait that took it
    for b in trace.bound_symbols:
        phase = phase_of(b.sym)
        taken = b.args[0] if phase is Phase.WAIT and b.args and isinstance(b.args[0], Value) else None
        if phase is Phase.WAIT and taken is None:
            raise VerifyError(stage, f"{b.sym.name} waits for no value", b)
        for v in _reads(b):
            if v is taken or (taken is not None and v.name == taken.name):
                continue
            if v.name in pending or v.name in waited:
                issuer = (pending.get(v.name) or waited[v.name]).sym.name
                raise VerifyError(stage, f"{v.name} is pending (issued by {issuer}): only its wait may read it, "
                                         "the others read the wait's result", b)
        if taken is not None:
            if taken.name in waited:
                raise VerifyError(stage, f"{taken.name} is waited for twice (first by "
                                         f"{waited[taken.name].sym.name})", b)
            if taken.name not in pending:
                raise VerifyError(stage, f"{b.sym.name} waits for {taken.name}, which no issue made pending", b)
            waited[taken.name] = pending.pop(taken.name)
        if phase is Phase.ISSUE and b.outputs:
            pending[b.outputs[0].name] = b
    for name, issue in pending.items():
        raise VerifyError(stage, f"{name}, issued by {issue.sym.name}, is never waited for", issue)
    returned = {v.name for v in values_in(trace.output)} & waited.keys()
    if returned:
        raise VerifyError(stage, f"{trace.name} returns the pending {', '.join(sorted(returned))}, not its wait's "
                                 "result")


# --- the stage's vocabulary ---------------------------------------------------------------

_PROGRAM_NAMES = frozenset({"torch", "operator", "math", "prims"})  # ir.program_globals and the printed imports


def check_stage_ops(trace: Trace, stage: str, fusers: Sequence[Fuser] | None = None) -> None:
    """The ops a stage may hold (see the module docstring)."""
    if stage is Stage.EXECUTION:
        _check_execution_ops(trace, stage)
        return
    for b in trace.bound_symbols:
        if b.sym.kind is SymbolKind.REGION:
            raise VerifyError(stage, "a region call before lowering", b)
    if stage is Stage.FUSION:
        _check_fusion_ops(trace, stage, fusers)


def _check_fusion_ops(trace: Trace, stage: str, fusers: Sequence[Fuser] | None) -> None:
    """Prims (leaves) and the ops fusion.prepare leaves whole: library calls, opaque ops and
    torch-level ops none of whose prims an executor fuses (prepare flattens the others)."""
    for b in trace.bound_symbols:
        if b.sym.kind is SymbolKind.PRIM:
            if b.subsymbols:
                raise VerifyError(stage, "a prim with a decomposition", b)
            continue
        if b.sym.kind not in (SymbolKind.TORCH, SymbolKind.OPAQUE):
            raise VerifyError(stage, f"{b.sym.name} is of kind {b.sym.kind!r}, neither a prim nor a torch op", b)
        if fusers and b.subsymbols:
            taken = _fused_prim(b.subsymbols, fusers)
            if taken is not None:
                leaf, ex = taken
                raise VerifyError(stage, f"{b.sym.name} is left whole, but {ex.name} fuses its {leaf.sym.name}: "
                                         "fusion.prepare flattens such an op into its prims", b)


def _fused_prim(bsyms: Iterable[BoundSymbol],
                fusers: Sequence[Fuser]) -> tuple[BoundSymbol, Fuser] | None:
    """The first leaf of a decomposition that does work a fusion executor takes, and that
    executor (the question fusion.prepare asks of an op before flattening it)."""
    for b in bsyms:
        if b.subsymbols:
            found = _fused_prim(b.subsymbols, fusers)
            if found is not None:
                return found
        elif b.sym.kind is SymbolKind.PRIM and b.sym.tags & {OpTag.ELEMENTWISE, OpTag.REDUCTION}:
            for ex in fusers:
                if ex.can_take(b) is None:
                    return b, ex
    return None


def _check_execution_ops(trace: Trace, stage: str) -> None:
    """Region calls (their kernel a program global) and ops the torch executor runs by their
    torch call; every name the printed program calls must resolve there."""
    names: dict[str, object] = trace.extra_globals
    if trace.ranges and PROFILE_RANGE not in names:
        raise VerifyError(stage, f"ops run in profiler ranges, but {PROFILE_RANGE} is no program global")
    for b in trace.bound_symbols:
        name = b.sym.name
        if b.sym.kind is SymbolKind.REGION:
            if names.get(name) is not b.sym.impl:
                raise VerifyError(stage, f"the region's kernel {name} is not the program global of that name", b)
            if b.subsymbols:
                raise VerifyError(stage, "a region call with a decomposition", b)
            continue
        if b.sym.kind not in (SymbolKind.PRIM, SymbolKind.TORCH, SymbolKind.OPAQUE):
            raise VerifyError(stage, f"{name} is of kind {b.sym.kind!r}, neither a region call nor a torch op", b)
        root = name.split(".", 1)[0]
        if not (name in names or root in names or root in _PROGRAM_NAMES or hasattr(builtins, root)):
            raise VerifyError(stage, f"the program cannot find {name}: {root} is no program global", b)


# --- FusionGroup --------------------------------------------------------------------------

_GROUP_REDUCTIONS = (P.sum, P.amax, P.amin, P.prod, P.var_mean)


def verify_group(group: FusionGroup) -> None:
    """Raise VerifyError where `group` breaks the FusionGroup contract (fusionlens/middle/contract.py)."""
    label = f"group {group.id}"
    check_group_ops(group, label)
    check_group_dataflow(group, label)
    check_group_shapes(group, label)


def check_group_ops(group: FusionGroup, label: str) -> None:
    """Elementwise prims, broadcast_in_dim and the reductions a kernel writes, nothing else."""
    for b in group.bsyms:
        kernel_op = OpTag.ELEMENTWISE in b.sym.tags or b.sym is P.broadcast_in_dim or b.sym in _GROUP_REDUCTIONS \
            or b.sym in P.SCATTERS or b.sym in IN_PLACE_SCATTERS
        ok = b.sym.kind is SymbolKind.PRIM and kernel_op
        if not ok or b.subsymbols:
            raise VerifyError(label, f"{b.sym.name} may not be in a fusion group (elementwise prims, "
                                     "broadcast_in_dim, sum, amax, amin, prod, var_mean, a scatter)", b)


def check_group_dataflow(group: FusionGroup, label: str) -> None:
    """Topological order; `inputs` are exactly what the ops read from outside, `outputs`
    values made inside, each named once."""
    made = {o.name: b for b in group.bsyms for o in b.outputs}
    defined = _unique(group.inputs, label, "input")
    unread = dict(defined)
    for name in defined:
        if name in made:
            raise VerifyError(label, f"{name} is an input of the group but made inside it", made[name])
    for b in group.bsyms:
        for v in _reads(b):
            unread.pop(v.name, None)
            if v.name not in defined:
                why = "is read before the op that makes it (not in topological order)" if v.name in made else (
                    "is read but is not an input of the group")
                raise VerifyError(label, f"{v.name} {why}", b)
        for o in b.outputs:
            if o.name in defined:
                raise VerifyError(label, f"{o.name} is defined twice in the group", b)
            defined[o.name] = o
    if unread:
        raise VerifyError(label, f"the input {next(iter(unread))} is read by no op of the group")
    for name in _unique(group.outputs, label, "output"):
        if name not in made:
            raise VerifyError(label, f"the output {name} is not made inside the group")


def _unique(values: Sequence[Value], label: str, what: str) -> dict[str, Value]:
    out: dict[str, Value] = {}
    for v in values:
        if v.name in out:
            raise VerifyError(label, f"{v.name} is listed twice among the group's {what}s")
        out[v.name] = v
    return out


def _key(shape) -> tuple[int | str, ...]:
    """A shape compared as written: a dynamic program's symbolic dims by their expressions
    (comparing SymInts would record a guard, and the verifier must not change the program)."""
    return tuple(dim_text(d) for d in shape)


def check_group_shapes(group: FusionGroup, label: str) -> None:
    """Every value computed has shape `domain` or (with reductions) `reduced_shape`, or the
    keepdim shape between them that the contract lets a broadcast go through; reductions
    run over `domain` and exactly `reduction_dims`; what an op other than a broadcast reads
    has one of those shapes too."""
    domain, rdims = tuple(group.domain), tuple(group.reduction_dims)
    if rdims and (list(rdims) != sorted(set(rdims)) or not all(0 <= d < len(domain) for d in rdims)):
        raise VerifyError(label, f"reduction_dims {list(rdims)} are not sorted distinct dims of {list(domain)}")
    keep = tuple(1 if i in rdims else s for i, s in enumerate(domain))
    allowed = {_key(domain), _key(group.reduced_shape), _key(keep)} if rdims else {_key(domain)}
    cdims = tuple(group.column_dims)  # a two-axis group's column sums: their values are outputs only
    columns: set[str] = set()
    if cdims:
        allowed |= {_key(group.column_shape), _key(tuple(1 if i in cdims else s for i, s in enumerate(domain)))}
    spaces = f"the domain {list(domain)}" + (f" or the reduced shape {list(group.reduced_shape)}" if rdims else "")
    # Broadcasts of an input, one after another (x[4, 8] -> [1, 4, 8] -> [2, 4, 8]), are one
    # index map from the input into the domain: the partitioner pulls such a chain in whole
    # and the executors compose it (triton's emitter, nvFuser's broadcast_in_dim), so its
    # steps may have any shape. What reads them as data (_check_operands) may not.
    views = {v.name for v in group.inputs}
    computed: set[str] = set()
    reduces = False
    for b in group.bsyms:
        is_view = b.sym is P.broadcast_in_dim and b.args[0].name in views
        if b.sym in P.SCATTERS or b.sym in IN_PLACE_SCATTERS:
            _check_scatter(b, group, allowed, spaces, label)
            continue
        if cdims and (b.sym in _GROUP_REDUCTIONS and tuple(sorted(b.args[1])) == cdims
                      or any(v.name in columns for v in _reads(b))):
            _check_column_op(b, columns, computed, domain, label)
            continue
        if b.sym in _GROUP_REDUCTIONS:  # first: a reduction over other dims makes another shape
            reduces = True
            _check_reduction(b, domain, rdims, label)
        for o in b.outputs:
            if _key(o.shape) not in allowed and not is_view:
                raise VerifyError(label, f"{o.name} has shape {_shape(o)}, not {spaces}", b)
        if b.sym is P.broadcast_in_dim:
            _check_broadcast(b, computed, domain, rdims, label)
        else:
            _check_operands(b, allowed, spaces, label)
        (views if is_view else computed).update(o.name for o in b.outputs)
    if rdims and not reduces:
        raise VerifyError(label, f"reduction_dims {list(rdims)}, but no op of the group reduces")


def _check_operands(b: BoundSymbol, allowed: set[tuple[int | str, ...]], spaces: str, label: str) -> None:
    """An elementwise prim's tensor operands have its result's shape (prims broadcast only
    through broadcast_in_dim); a reduction reads the domain (checked in _check_reduction)."""
    if b.sym in _GROUP_REDUCTIONS:
        return
    for v in _reads(b):
        if _key(v.shape) not in allowed:
            raise VerifyError(label, f"it reads {v.name} of shape {_shape(v)}, not {spaces}", b)
        if _key(v.shape) != _key(b.outputs[0].shape):
            raise VerifyError(label, f"its operand {v.name} has shape {_shape(v)}, its result "
                                     f"{_shape(b.outputs[0])}", b)


def _check_scatter(b: BoundSymbol, group: FusionGroup, allowed: set, spaces: str, label: str) -> None:
    """A scatter (contract: its window over the domain, its base an input, its result read by no
    op of the group) in a group without reductions."""
    base = b.args[0]
    if group.reduction_dims:
        raise VerifyError(label, "a scatter in a group that reduces", b)
    if base.name not in {v.name for v in group.inputs}:
        raise VerifyError(label, f"it scatters into {base.name}, which is not an input of the group", b)
    for v in _reads(b):
        if v is not base and _key(v.shape) not in allowed:
            raise VerifyError(label, f"its window {v.name} has shape {_shape(v)}, not {spaces}", b)
    if any(o.name in {v.name for c in group.bsyms for v in _reads(c)} for o in b.outputs):
        raise VerifyError(label, f"{b.outputs[0].name}, a scatter's result, is read inside the group", b)


def _check_column_op(b: BoundSymbol, columns: set[str], computed: set[str], domain: tuple[int, ...],
                     label: str) -> None:
    """A column sum reads the domain; an op on a column sum reads column values (or the group's
    inputs) only; what either makes is a column value."""
    if b.sym in _GROUP_REDUCTIONS and b.sym is not P.sum:
        raise VerifyError(label, f"a column {b.sym.name}: a two-axis group's column reductions are sums", b)
    if b.sym is P.sum and _key(b.args[0].shape) != _key(domain):
        raise VerifyError(label, f"it sums {b.args[0].name} of shape {_shape(b.args[0])}, not the domain", b)
    if b.sym is not P.sum and any(v.name in computed and v.name not in columns for v in _reads(b)):
        raise VerifyError(label, "it mixes a column sum with the rows' values", b)
    if any(_key(o.shape) == _key(domain) for o in b.outputs):
        raise VerifyError(label, "it brings a column sum back to the domain: column values are outputs only", b)
    columns.update(o.name for o in b.outputs)


def _check_reduction(b: BoundSymbol, domain: tuple[int, ...], rdims: tuple[int, ...], label: str) -> None:
    x, dims = b.args[0], tuple(sorted(b.args[1]))
    if _key(x.shape) != _key(domain):
        raise VerifyError(label, f"it reduces {x.name} of shape {_shape(x)}, not the domain {list(domain)}", b)
    if dims != rdims:
        raise VerifyError(label, f"it reduces over dims {list(dims)}, not the group's reduction_dims {list(rdims)}", b)


def _check_broadcast(b: BoundSymbol, computed: set[str], domain: tuple[int, ...], rdims: tuple[int, ...],
                     label: str) -> None:
    """broadcast_in_dim places x's dims at increasing `broadcast_dims` of a size they match or
    broadcast from 1; a reduced value computed in the group goes back to the domain by its kept
    dims."""
    x, shape, dims = b.args[0], tuple(b.args[1]), tuple(b.args[2])
    ok = len(dims) == x.ndim and list(dims) == sorted(set(dims)) and all(0 <= d < len(shape) for d in dims)
    if not ok or any(_key([x.shape[i]])[0] not in (1, _key([shape[d]])[0]) for i, d in enumerate(dims)):
        raise VerifyError(label, f"broadcast_dims {list(dims)} do not map {x.name} {_shape(x)} into {list(shape)}", b)
    if _key(b.outputs[0].shape) != _key(shape):
        raise VerifyError(label, f"it broadcasts to {list(shape)} but makes {_shape(b.outputs[0])}", b)
    if not rdims or x.name not in computed or len(shape) != len(domain):
        return  # placed in a shape of another rank (a keepdim sum over a size-1 dim, fuzz triton 6660)
    kept = tuple(i for i in range(len(domain)) if i not in rdims)
    expected: tuple[int, ...] | None = None
    if x.ndim == len(kept):  # the reduced shape
        expected = kept
    elif x.ndim == len(domain):  # the keepdim shape (or the domain itself)
        expected = tuple(range(len(domain)))
    # a dim of size 1 of x broadcasts (its one value everywhere): which domain dim it names is
    # no placement (x of [1] from a [1, 1] domain, fuzz triton 5056 and 5921)
    varies = [i for i in range(x.ndim) if _key([x.shape[i]])[0] != 1]
    if any(expected is None or dims[i] != expected[i] for i in varies):
        raise VerifyError(label, f"the reduced value {x.name} is broadcast along dims {list(dims)}, not the kept dims "
                                 f"{list(expected or kept)}", b)
