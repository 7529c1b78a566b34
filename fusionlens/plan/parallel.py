"""The plan's transforms of one micro-batch's programs: which ops are sharded by tensor,
sequence and context parallelism, and the collectives each inserts at its user line.

Tensor parallel is Megatron-LM's: Linears in column/row pairs. Where the target has a
`parallelize_module` plan of its own (plan/own.py), exactly its ColwiseParallel and
RowwiseParallel layers are sharded (the others replicated). Where it gives no plan the pairs
are inferred from the forward trace: a Linear (a matmul with a
parameter operand) whose input is replicated is column-parallel (its output sharded); one
whose input is sharded is row-parallel, followed by an all-reduce (reduce-scatter with
sequence parallelism, and an all-gather before the next column Linear). Ops between them run
on shards (attention heads, the MLP's activation). The token embedding is vocab-parallel (an
all-reduce after it) and an output layer left column-parallel feeds a vocab-parallel cross
entropy. In the backward, an op is sharded as the forward ops of its line are, and each
group of column Linears that read one input all-reduces that input's gradient.

`Sharding` is what costs.py and memory.py read; the data-parallel, ZeRO and pipeline
collectives (per parameter, per stage boundary) are added by the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fusionlens.ir.trace import BoundSymbol, OpTag, Value
from fusionlens.ir.vocabulary import ValueRole
from fusionlens.plan.layout import Layout
from fusionlens.plan.trace import Traced


@dataclass(frozen=True)
class Collective:
    kind: str  # comm_model op: all_reduce, all_gather_into_tensor, reduce_scatter_tensor, send_recv
    nbytes: int  # what each rank passes in (comm_model's convention)
    group: str  # "tp", "cp", "dp", "pp"
    program: str  # forward or backward
    part: str  # pre, block, post
    line: tuple[str, int] | None
    overlap: str = "none"  # what hides it: "none" (exposed), "gemm" (the next GEMM), "attention"


@dataclass
class OpShard:
    divide: int = 1  # its work is split this many ways
    gemm: str = ""  # "column", "row", "activation" (no parameter operand), "" not a GEMM
    core: bool = False  # in the attention core (scores, softmax, dropout, context): selective recompute
    sharded: bool = False  # on tensor-parallel shards


@dataclass
class Sharding:
    ops: dict[str, list[OpShard]]  # program kind -> per source op
    collectives: list[Collective] = field(default_factory=list)  # one micro-batch, traced blocks
    linears: dict[str, list[str]] = field(default_factory=lambda: {"column": [], "row": []})  # chosen Linears
    saved_divide: dict[str, int] = field(default_factory=dict)  # saved value name -> its split


def is_gemm(b: BoundSymbol) -> bool:
    return OpTag.LIBRARY_CALL in b.sym.tags and OpTag.MATMUL in b.sym.tags


def _line(b: BoundSymbol):
    p = b.provenance
    return (p.file, p.line) if p is not None else None


def _tensors(b: BoundSymbol) -> list[Value]:
    return [v for v in b.inputs() if isinstance(v, Value)]


def _param_derived(ops: list[BoundSymbol]) -> set[str]:
    """Parameters and what only views or casts of them make (a tied weight's transpose)."""
    names = {v.name for b in ops for v in _tensors(b) if v.role is ValueRole.PARAM}
    for b in ops:
        ins = _tensors(b)
        if ins and not is_gemm(b) and all(v.name in names for v in ins):
            names.update(o.name for o in b.outputs)
    return names


def shard(traced: Traced, layout: Layout) -> Sharding:
    """The plan's tensor, sequence and context parallelism of `traced` (see the module doc).
    A small function on purpose: issue 27's `transform(program, mesh)` will stand behind it."""
    tp, cp = layout.tp, layout.cp
    fwd = traced.ops("forward")
    params = _param_derived(fwd)
    sharded: set[str] = set()  # values on tensor-parallel shards
    core: set[str] = set()
    out = Sharding({"forward": [], "backward": []})
    column_inputs: dict[str, tuple] = {}
    saved = {v.name for v in traced.saved}
    for b, part in zip(fwd, traced.parts["forward"]):
        ins = _tensors(b)
        acts = [v for v in ins if v.name not in params]
        s = OpShard()
        is_sharded = any(v.name in sharded for v in acts)
        if is_gemm(b) and len(acts) < len(ins):  # a Linear
            name = b.outputs[0].name
            style = _linear_style(b, is_sharded, traced, tp)
            if style == "row":
                s.gemm = "row"
                out.linears["row"].append(_describe(b))
                n = b.outputs[0].numel() * b.outputs[0].dtype.itemsize
                out.collectives.append(Collective("reduce_scatter_tensor" if layout.sp else "all_reduce", n, "tp",
                                                  "forward", part, _line(b)))
            elif style == "column":
                s.gemm = "column"
                sharded.add(name)
                out.linears["column"].append(_describe(b))
                x = acts[0] if acts else None
                if x is not None and x.name not in column_inputs:
                    n = x.numel() * x.dtype.itemsize
                    if x.role is not ValueRole.INPUT:  # a batch gets no gradient to sum over the shards
                        column_inputs[x.name] = (n, part, _line(b))
                    if layout.sp:
                        out.collectives.append(Collective("all_gather_into_tensor", n // tp, "tp", "forward", part,
                                                          _line(b)))
                if part == "post":  # an output layer: a vocab-parallel cross entropy (max, sum, target logit)
                    rows = b.outputs[0].numel() // b.outputs[0].shape[-1]
                    out.collectives.append(Collective("all_reduce", 3 * rows * 4, "tp", "forward", part, _line(b)))
            else:
                s.gemm = "column"
            s.sharded = style != "replicated"
        elif is_gemm(b) or b.sym.name.endswith("scaled_dot_product_attention"):
            s.gemm = "activation"
            ends = any(v.name in core for v in acts)
            s.core = True
            if not ends and not b.sym.name.endswith("scaled_dot_product_attention"):
                core.update(o.name for o in b.outputs)
            if cp > 1 and not ends:  # ring attention: K and V (the second operand) travel the ring
                kv = acts[-1].numel() * acts[-1].dtype.itemsize // cp
                kv *= 2 if b.sym.name.endswith("scaled_dot_product_attention") else 1
                out.collectives.append(Collective("ring", kv, "cp", "forward", part, _line(b), "attention"))
            s.sharded = is_sharded
            if is_sharded:
                sharded.update(o.name for o in b.outputs)
        else:
            if b.sym.name.endswith("embedding") and _vocab_parallel(b, traced, tp) and \
                    any(v.role is ValueRole.INPUT for v in acts):
                n = b.outputs[0].numel() * b.outputs[0].dtype.itemsize
                out.collectives.append(Collective("reduce_scatter_tensor" if layout.sp else "all_reduce", n, "tp",
                                                  "forward", part, _line(b)))
            elif is_sharded:
                sharded.update(o.name for o in b.outputs)
            s.sharded = is_sharded
            if any(v.name in core for v in acts):
                s.core = True
                core.update(o.name for o in b.outputs)
        s.divide = _divide(s, acts, params, layout)
        out.ops["forward"].append(s)
        for o in b.outputs:
            if o.name in saved:  # a row Linear's result is whole again (sequence-sharded under SP)
                whole = s.gemm == "row" and not layout.sp
                out.saved_divide[o.name] = layout.cp if whole else s.divide
    out.collectives += _backward_collectives(out.collectives, column_inputs, layout)
    out.ops["backward"] = _backward(traced, out.ops["forward"], layout)
    return out


def _own_style(b: BoundSymbol, traced: Traced) -> str | None:
    """The target's own style of the Linear or Embedding `b` ("colwise", "rowwise"), None if
    it has no plan of its own; "" for a layer its plan leaves replicated."""
    own = traced.own
    if own is None or own.tp is None:
        return None
    w = next((v.name for v in _tensors(b) if v.role is ValueRole.PARAM), None)
    return own.linears.get(w, "") if w is not None else ""


def _linear_style(b: BoundSymbol, is_sharded: bool, traced: Traced, tp: int) -> str:
    """"column", "row" or "replicated": the target's own parallelize_module plan where it has
    one, else Megatron's pairs inferred (a sharded input makes a row Linear)."""
    if tp == 1:
        return "replicated"
    own = _own_style(b, traced)
    if own is not None:
        return {"colwise": "column", "rowwise": "row"}.get(own, "replicated")
    return "row" if is_sharded else "column"


def _vocab_parallel(b: BoundSymbol, traced: Traced, tp: int) -> bool:
    """A token embedding split over the vocabulary (an all-reduce after it): inferred, or the
    target's own RowwiseParallel on it."""
    own = _own_style(b, traced)
    return tp > 1 and (own is None or own == "rowwise")


def _backward_collectives(forward: list[Collective], column_inputs: dict, layout: Layout) -> list[Collective]:
    """Each column Linear input's gradient summed over the shards (and, under sequence
    parallelism, the input gathered again for the weight gradient, beside the data gradient's
    GEMM); ring attention's K and V gradients travel back too."""
    out = []
    for n, part, line in column_inputs.values():
        out.append(Collective("reduce_scatter_tensor" if layout.sp else "all_reduce", n, "tp", "backward", part, line))
        if layout.sp:
            out.append(Collective("all_gather_into_tensor", n // layout.tp, "tp", "backward", part, line, "gemm"))
    out += [Collective(c.kind, c.nbytes * 2, "cp", "backward", c.part, c.line, "attention")
            for c in forward if c.group == "cp"]
    return out


def _divide(s: OpShard, acts: list[Value], params: set[str], layout: Layout) -> int:
    """How many ways the op's work is split: tensor-parallel shards, the sequence (sequence
    parallel outside the shards, context parallel everywhere), nothing for parameter-only ops."""
    if not acts:
        return 1
    d = layout.cp
    if s.sharded or layout.sp:
        d *= layout.tp
    return d


def _backward(traced: Traced, forward: list[OpShard], layout: Layout) -> list[OpShard]:
    """A backward op as the forward ops of its line: GEMMs sharded where that line's GEMMs
    are; other ops as the forward values of the line with their number of elements (a
    gradient has its value's shape), else sharded only if all of the line's forward ops are."""
    by_line: dict = {}
    flow = {v.name for b in traced.ops("forward") for v in _tensors(b) if v.role in (ValueRole.INPUT, ValueRole.PARAM)}
    for b, s in zip(traced.ops("forward"), forward):
        if not any(v.name in flow for v in _tensors(b)):
            continue  # made from constants only (a causal mask): neither sharded nor not
        flow.update(o.name for o in b.outputs)
        entry = by_line.setdefault(_line(b), {"gemm": [], "other": [], "numel": {}})
        entry["gemm" if s.gemm else "other"].append(s)
        for o in b.outputs:
            entry["numel"].setdefault(o.numel(), set()).add((s.sharded and s.gemm != "row", s.core))
    out = []
    for b in traced.ops("backward"):
        entry = by_line.get(_line(b), {"gemm": [], "other": [], "numel": {}})
        gem, other = entry["gemm"], entry["other"]
        s = OpShard()
        if is_gemm(b):
            s.gemm = "backward"
            s.sharded = any(x.sharded for x in gem) or (not gem and bool(other) and all(x.sharded for x in other))
            s.core = any(x.core for x in gem)
        else:
            seen = {x for o in b.outputs for x in entry["numel"].get(o.numel(), ())}
            if seen and len({sh for sh, _ in seen}) == 1:
                s.sharded = next(iter(seen))[0]
                s.core = all(c for _, c in seen)
            else:
                s.sharded = bool(other) and all(x.sharded for x in other)
                s.core = bool(other) and all(x.core for x in other)
        # a factory reads no tensor (the zeros a gradient is scattered into): split as what it makes
        s.divide = _divide(s, _tensors(b) or list(b.outputs), set(), layout)
        out.append(s)
    return out


def _describe(b: BoundSymbol) -> str:
    w = next((v for v in _tensors(b) if v.role is ValueRole.PARAM), None)
    where = f" ({b.provenance.short()})" if b.provenance is not None else ""
    return f"{w.name if w is not None else b.sym.name}{where}"
