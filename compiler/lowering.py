"""Lowering (Trace -> Plan): the fusion-stage trace becomes regions and the execution trace.

Each Cluster the partitioner made goes to its fusion executor, which generates its kernel
(or declines: its prims then run through torch one by one); every op nobody fused runs
through the torch executor as one torch call, which is its own region. The execution trace
calls region kernels and torch ops in order; it is printed like every other trace and
compiled once into a Python function.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from torch.utils import _pytree as pytree

from compiler import cost, fusion, profiling
from compiler.executors.base import Generated
from compiler.ir import PROFILE_RANGE, BoundSymbol, Symbol, Trace, distinct_lines, run_ops
from compiler.report import Boundary


@dataclass
class Region:
    id: str
    executor: str
    bsyms: list  # the ops it runs (prims for fusion regions, torch-level ops for torch)
    inputs: list  # Values read from outside
    outputs: list  # Values used outside
    bound: BoundSymbol  # its op in the execution trace
    boundary: Optional[Boundary] = None
    note: str = ""  # why it is not fused (torch regions)
    generated: Optional[Generated] = None  # fusion regions: the executor's code and callable

    @property
    def fn(self):
        return self.generated.fn if self.generated is not None else None


@dataclass
class Plan:
    trace: Trace  # the execution trace
    regions: list
    notes: list = field(default_factory=list)  # (severity, message, provenance)
    previews: list = field(default_factory=list)  # code of executors that cannot run here


def torch_region(rid: str, b: BoundSymbol) -> Region:
    return Region(rid, "torch", [b], b.inputs(), list(b.outputs), b, note=b.note)


def lower(flat: Trace, fusers: list, device, notes: list, prefix: str = "R") -> Plan:
    """The Plan of the fusion-stage trace `flat` for these fusion executors (maybe none);
    its regions are named `prefix` and a number (R0, R1; B0 for a backward program's)."""
    if not fusers:
        regions = [torch_region(f"{prefix}{i}", b) for i, b in enumerate(flat.bound_symbols)]
        return Plan(_profiled(flat.with_("execution", list(flat.bound_symbols)), regions, device), regions, notes)
    nodes, make_group = fusion.clusters(flat, fusers)
    regions, exec_bsyms, extra = [], [], {}
    for n in nodes:
        rid = f"{prefix}{len(regions)}"
        if not isinstance(n, fusion.Cluster):
            r = torch_region(rid, n)
            r.boundary, why = fusion.unfused(n, fusers)
            if why and not n.note:
                r.note = why
            regions.append(r)
            exec_bsyms.append(n)
            continue
        group = make_group(n, rid)
        generated, decline = None, ""
        if n.has_work():
            try:
                generated = n.ex.generate(group, device)
            except fusion.Decline as e:
                decline = f"{n.ex.name} declined: {e}"
        if generated is None:
            for b in n.ops:  # run the group's prims one by one through torch
                r = torch_region(f"{prefix}{len(regions)}", b)
                if decline:
                    r.note = decline
                    r.boundary = Boundary("shape the executor refuses", decline,
                                          b.provenance.file if b.provenance else None,
                                          b.provenance.line if b.provenance else None)
                regions.append(r)
                exec_bsyms.append(b)
            continue
        call_name = f"{n.ex.name}_{rid}"
        sym = Symbol(call_name, generated.fn, kind="region", tags=(n.ex.name,))
        lines = sorted({(b.provenance.file, b.provenance.line) for b in n.ops if b.provenance})
        where = ", ".join(f"{os.path.basename(f)}:{ln}" for f, ln in lines)
        bound = BoundSymbol(sym, tuple(group.inputs), {}, list(group.outputs), _tuple_spec(len(group.outputs)),
                            n.ops[0].provenance, note=f"{len(n.ops)} ops from {where}")
        extra[call_name] = generated.fn
        regions.append(Region(rid, n.ex.name, list(n.ops), group.inputs, list(group.outputs), bound,
                              boundary=n.boundary or Boundary("end of the program", "no later op reads it"),
                              generated=generated))
        exec_bsyms.append(bound)
    trace = flat.with_("execution", exec_bsyms)
    trace.extra_globals.update(extra)
    return Plan(_profiled(trace, regions, device), regions, notes)


def _profiled(trace: Trace, regions: list, device) -> Trace:
    """Under FUSIONLENS_PROFILE=1, each region's op in the execution trace runs inside a
    profiler range named after the region and its first user line (compiler/profiling.py);
    otherwise the trace is left as it is, and costs nothing more."""
    if not profiling.enabled():
        return trace
    index = {id(b): i for i, b in enumerate(trace.bound_symbols)}
    trace.ranges = {index[id(r.bound)]: profiling.range_name(r.id, distinct_lines(r.bsyms))
                    for r in regions if id(r.bound) in index}
    trace.extra_globals[PROFILE_RANGE] = profiling.range_for(device)
    return trace


def preview(optimised: Trace, ex, prefix: str = "P") -> list:
    """For a fusion executor that cannot run here but can still write its code (nvFuser
    without a GPU): the regions it would take and the code it would run, as plain dicts
    (named P0, P1, ...; PB0 for a backward program's)."""
    return [_preview_region(group, ex) for group in preview_groups(optimised, ex, prefix)[1]]


def _preview_region(group, ex) -> dict:
    """A preview region with a report Region's fields; its roofline is the report's to fill
    (compiler/reporting.py: it depends on the target GPU)."""
    c = cost.region_cost(group.bsyms, group.inputs, group.outputs)
    return {"id": group.id, "ops": [b.sym.name for b in group.bsyms],
            "source_lines": [{"file": p.file, "line": p.line} for p in distinct_lines(group.bsyms)],
            "code": ex.definition_source(group),
            "inputs": [_tensor_info(v) for v in group.inputs], "outputs": [_tensor_info(v) for v in group.outputs],
            "cost": {"bytes": c.bytes, "flops": c.flops, "math": c.math}, "roofline": None}


def _tensor_info(v) -> dict:
    return {"name": v.name, "shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch."),
            "device": str(v.device)}


def preview_groups(optimised: Trace, ex, prefix: str = "P") -> tuple:
    """(the fusion-stage trace for `ex` alone, the FusionGroups P0, P1, ... it would take):
    what `preview` describes (compiler/repro.py writes a script of one)."""
    flat = fusion.prepare(optimised, [ex])
    nodes, make_group = fusion.clusters(flat, [ex])
    groups = []
    for n in nodes:
        if isinstance(n, fusion.Cluster) and n.has_work():
            groups.append(make_group(n, f"{prefix}{len(groups)}"))
    return flat, groups


def _tuple_spec(n: int):
    return pytree.tree_flatten(tuple(range(n)))[1]


def interpret(trace: Trace, inputs: list) -> dict:
    """Run a trace op by op and keep every value: name -> tensor (for per-region timing)."""
    return run_ops(trace.bound_symbols, {v.name: x for v, x in zip(trace.inputs, inputs)})
