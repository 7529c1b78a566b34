"""The fusion graph's data: each program's regions (and a preview's torch calls between them)
as nodes with their module path, the tensors between them as edges, and the saved tensors
that link a forward region to the backward regions that read them.

Nothing here places a node: graph.js lays the graph out in the page with dagre (a layered,
Sugiyama-style layout; vendor/), so a group the user opens or closes is laid out again there.
"""

from __future__ import annotations

from typing import Any

from fusionlens.report import schema as R
from fusionlens.report.html import dataflow
from fusionlens.report.html.figures import color, hover_text
from fusionlens.report.html.model import Plan, RegionView

# how many of a node's distinct ops its label names before "+N"
_LABEL_OPS = 3


def ops_label(ops: list[str]) -> str:
    """`layer_norm`, `mul, add, tanh +4`: a region's distinct ops as people say them (a view or
    a conversion only where it does nothing else)."""
    names = list(dict.fromkeys(dataflow.short_op(o) for o in ops))
    plain = [n for n in names if n not in _MINOR] or names
    more = len(plain) - _LABEL_OPS
    return ", ".join(plain[:_LABEL_OPS]) + (f" +{more}" if more > 0 else "") if plain else "-"


_MINOR = {"broadcast_in_dim", "reshape", "view", "convert_element_type", "transpose", "squeeze", "unsqueeze",
          "expand", "permute", "contiguous"}


def _node(r: RegionView, kind: str, issues: dict[str, str]) -> dict[str, Any]:
    label = ops_label(r.ops)
    if r.id in issues:
        label = f"{issues[r.id]} · {label}"
    return {"id": r.id, "kind": kind, "label": label, "time": R.format_ms(r.time_ms, missing="-"),
            "ms": r.time_ms, "basis": r.basis, "executor": r.executor, "color": color(r.executor),
            "module": r.module, "saved": bool(r.saved), "bound": r.bound,
            "ends": r.boundary.split(":", 1)[0] if r.boundary else None, "hover": hover_text(r)}


def _edge(e: dataflow.Edge) -> dict[str, Any]:
    t = e.tensor
    size = R.format_bytes(t["bytes"]) if t["bytes"] is not None else "?"
    via = f" (through {', '.join(e.via)})" if e.via else ""
    shape = "[" + ", ".join(str(d) for d in t["shape"]) + "]"
    return {"src": e.src, "dst": e.dst, "shape": f"{t['dtype']}{shape}",
            "text": f"{t['name']}: {t['dtype']}{shape} · {size}{via}"}


def _links(plan: Plan) -> list[dict[str, Any]]:
    """Each saved tensor from the forward node that makes it to each backward node that reads it."""
    forward = [r for r in plan.programs.get("forward", []) + plan.calls.get("forward", []) if r.saved]
    backward = [r for r in plan.programs.get("backward", []) + plan.calls.get("backward", []) if r.saved]
    readers: dict[str, list[str]] = {}
    for r in backward:
        for name in r.saved:
            readers.setdefault(name, []).append(r.id)
    return [{"src": f.id, "dst": b, "tensor": name} for f in forward for name in f.saved for b in readers.get(name, [])]


def graph(plan: Plan, collectives: list[R.Collective] | None = None) -> dict[str, Any]:
    """The plan's programs side by side (forward, then backward) for graph.js to lay out."""
    issues = {c.region: f"{c.op} {R.format_bytes(c.bytes)}" for c in collectives or [] if plan.ran and c.region}
    programs = []
    for kind, regions in plan.programs.items():
        calls = plan.calls.get(kind, [])
        if not regions and not calls:
            continue
        title = f"{kind} ({len(regions)} regions" + (f", {len(calls)} torch calls between them)" if calls else ")")
        programs.append({
            "kind": kind, "title": title,
            "nodes": [_node(r, "region", issues) for r in regions] + [_node(r, "call", issues) for r in calls],
            "edges": [_edge(e) for e in dataflow.edges(regions + calls, plan.views.get(kind, []))]})
    executors = sorted({r.executor for rs in plan.programs.values() for r in rs})
    return {"programs": programs, "links": _links(plan),
            "legend": [{"name": e, "color": color(e)} for e in executors]}
