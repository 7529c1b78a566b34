"""Lowering (Trace -> Plan): the fusion-stage trace becomes regions and the execution trace.

Each Cluster the partitioner made goes to its fusion executor, which generates its kernel
(or declines: its prims then run through torch one by one); every op nobody fused runs
through the torch executor as one torch call, which is its own region. The execution trace
calls region kernels and torch ops in order; it is printed like every other trace and
compiled once into a Python function.

In its source-only mode (`lower(..., source_only=True)`), for an executor that cannot run
here but can write its code (a preview), each Cluster's executor writes its code without
building a kernel (`definition_source`): the Plan's regions are only the fused ones, named
P0, P1, ... (PB0 for a backward program's), each with its code in `generated` and no `fn`;
their ops in the execution trace run the prims through torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from collections.abc import Callable

from torch.utils import _pytree as pytree

from fusionlens.middle import fusion
from fusionlens.executors import profiling
from fusionlens.middle.contract import Boundary, BoundaryCode, Decline, FusionGroup, boundary
from fusionlens.executors.base import FusionExecutor, Generated
from fusionlens.ir.interpret import ops_callable, run_ops
from fusionlens.ir.sizes import SIZES
from fusionlens.ir.trace import PROFILE_RANGE, BoundSymbol, Symbol, SymbolKind, Trace, Value, distinct_lines
from fusionlens.ir.vocabulary import Stage


@dataclass
class Region:
    id: str
    executor: str
    bsyms: list[BoundSymbol]  # the ops it runs (prims for fusion regions, torch-level ops for torch)
    inputs: list[Value]  # Values read from outside
    outputs: list[Value]  # Values used outside
    bound: BoundSymbol  # its op in the execution trace
    boundary: Boundary | None = None
    note: str = ""  # why it is not fused (torch regions)
    generated: Generated | None = None  # fusion regions: the executor's code and callable
    group: FusionGroup | None = None  # fusion regions: what the executor was given

    @property
    def fn(self) -> Callable | None:
        return self.generated.fn if self.generated is not None else None


@dataclass
class Plan:
    trace: Trace  # the execution trace
    regions: list[Region]


def torch_region(rid: str, b: BoundSymbol) -> Region:
    return Region(rid, "torch", [b], b.inputs(), list(b.outputs), b, note=b.note)


class _Lowering:
    """The regions and execution-trace ops of one `lower` call, as they are made."""

    def __init__(self, fusers: list[FusionExecutor], device, prefix: str, source_only: bool, verify: bool):
        self.fusers, self.device, self.prefix, self.source_only = fusers, device, prefix, source_only
        self.verify = verify
        self.regions: list[Region] = []
        self.exec_bsyms: list[BoundSymbol] = []
        self.extra: dict[str, Callable] = {}  # region callables the execution trace names

    def next_id(self) -> str:
        return f"{self.prefix}{len(self.regions)}"

    def unfused(self, b: BoundSymbol):
        """An op no fusion executor took: a torch region of its own (none in source-only mode)."""
        self.exec_bsyms.append(b)
        if not self.source_only:
            r = torch_region(self.next_id(), b)
            r.boundary, why = fusion.unfused(b, self.fusers)
            if why and not b.note:
                r.note = why
            self.regions.append(r)

    def one_by_one(self, ops: list[BoundSymbol], decline: str):
        """A Cluster without a kernel (declined, or broadcasts only): its prims through torch."""
        for b in ops:
            self.exec_bsyms.append(b)
            if self.source_only:
                continue
            r = torch_region(self.next_id(), b)
            if decline:
                r.note = decline
                r.boundary = boundary(BoundaryCode.SHAPE_REFUSED, decline, b.provenance)
            self.regions.append(r)

    def cluster(self, n: fusion.Cluster, make_group: Callable[[fusion.Cluster, str], FusionGroup]):
        """A Cluster: its executor's region, or its prims one by one when there is no kernel."""
        rid = self.next_id()
        group = make_group(n, rid)
        if self.verify:
            from fusionlens.middle import verify  # only when asked

            verify.verify_group(group)
        generated, decline = None, ""
        if n.has_work():
            try:
                generated = self.code_of(n.ex, group)
            except Decline as e:
                decline = f"{n.ex.name} declined: {e}"
        if generated is None:
            self.one_by_one(n.ops, decline)
            return
        call_name = f"{n.ex.name}_{rid}"
        fn = generated.fn if generated.fn is not None else generated.eager_fn  # eager_fn: source-only
        if fn is None:
            raise RuntimeError(f"{n.ex.name} gave region {rid} nothing to call (a FusionLens bug)")
        sym = Symbol(call_name, fn, kind=SymbolKind.REGION)
        lines = sorted({(b.provenance.file, b.provenance.line) for b in n.ops if b.provenance})
        where = ", ".join(f"{os.path.basename(f)}:{ln}" for f, ln in lines)
        bound = BoundSymbol(sym, tuple(group.inputs), {}, list(group.outputs), _tuple_spec(len(group.outputs)),
                            n.ops[0].provenance, note=f"{len(n.ops)} ops from {where}")
        self.extra[call_name] = fn
        ends = n.boundary or boundary(BoundaryCode.END_OF_PROGRAM, "no later op reads it")
        self.regions.append(Region(rid, n.ex.name, list(n.ops), group.inputs, list(group.outputs), bound,
                                   boundary=ends, generated=generated, group=group))
        self.exec_bsyms.append(bound)

    def code_of(self, ex: FusionExecutor, group: FusionGroup) -> Generated:
        """The executor's kernel of `group`; in source-only mode its code only, whose region
        op runs the prims through torch."""
        if not self.source_only:
            return ex.generate(group, self.device)
        eager = ops_callable(group.bsyms, group.inputs, group.outputs)
        source, kernels = ex.preview(group)  # a split or two-axis region launches two
        return Generated(source, None, kernels, eager)


def lower(flat: Trace, fusers: list[FusionExecutor], device, prefix: str = "R", *, source_only: bool = False,
          profile: bool = False, verify: bool = False) -> Plan:
    """The Plan of the fusion-stage trace `flat` for these fusion executors (maybe none);
    its regions are named `prefix` and a number (R0, R1; B0 for a backward program's).
    `source_only`: the executors write their code and build nothing (a preview, named P0 or
    PB0): only fused regions, each with its code and no `fn` (see the module's docstring).
    `profile`: each region runs in a profiler range (fusionlens/executors/profiling.py); `verify`: each
    FusionGroup is checked against its contract (fusionlens/middle/verify.py) before its executor sees it."""
    if not fusers:
        regions = [] if source_only else [torch_region(f"{prefix}{i}", b) for i, b in enumerate(flat.bound_symbols)]
        trace = flat.with_(Stage.EXECUTION, list(flat.bound_symbols))
        return Plan(_profiled(trace, regions, device) if profile and not source_only else trace, regions)
    nodes, make_group = fusion.clusters(flat, fusers)
    state = _Lowering(fusers, device, prefix, source_only, verify)
    for n in nodes:
        if isinstance(n, fusion.Cluster):
            state.cluster(n, make_group)
        else:
            state.unfused(n)
    trace = flat.with_(Stage.EXECUTION, state.exec_bsyms)
    trace.extra_globals.update(state.extra)
    return Plan(_profiled(trace, state.regions, device) if profile and not source_only else trace, state.regions)


def _profiled(trace: Trace, regions: list[Region], device) -> Trace:
    """Each region's op in the execution trace runs inside a profiler range named after the
    region and its first user line (fusionlens/executors/profiling.py); without profiling the trace is
    left as it is, and costs nothing more."""
    index = {id(b): i for i, b in enumerate(trace.bound_symbols)}
    trace.ranges = {index[id(r.bound)]: profiling.range_name(r.id, distinct_lines(r.bsyms))
                    for r in regions if id(r.bound) in index}
    trace.extra_globals[PROFILE_RANGE] = profiling.range_for(device)
    return trace


def _tuple_spec(n: int):
    return pytree.tree_flatten(tuple(range(n)))[1]


def interpret(trace: Trace, inputs: list) -> dict:
    """Run a trace op by op and keep every value: name -> tensor (for per-region timing)."""
    return run_ops(trace.bound_symbols, {v.name: x for v, x in zip(trace.inputs, inputs)},
                   trace.extra_globals.get(SIZES))
