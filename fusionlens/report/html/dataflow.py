"""The fusion graph's edges: each tensor one node makes and another reads, directly or through
views. A preview's nodes are its regions and the program's library calls between them
(`model.Plan.calls`); the views between them (`Plan.views`: no bytes, no FLOPs) are drawn as
the edges they pass on, so a kernel -> linear -> reshape -> kernel flow is two edges."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fusionlens.report.html.model import RegionView


@dataclass
class Edge:
    """A tensor `src` makes and `dst` reads, through the views in `via` (none: directly)."""

    src: str
    dst: str
    tensor: dict[str, Any]
    via: list[str] = field(default_factory=list)


def edges(nodes: list[RegionView], views: list[RegionView]) -> list[Edge]:
    """Each tensor a node makes and another reads, directly or through `views` (in program
    order, so a view's inputs are resolved before it)."""
    made: dict[str, list[tuple[str, dict[str, Any], list[str]]]] = {}
    for n in nodes:
        for t in n.outputs:
            made[t["name"]] = [(n.id, t, [])]
    for v in views:
        op = short_op(v.ops[0]) if v.ops else "view"
        sources = [(src, t, via + [op]) for i in v.inputs for src, t, via in made.get(i["name"], [])]
        for t in v.outputs:
            made.setdefault(t["name"], sources)
    out: list[Edge] = []
    for n in nodes:
        for t in n.inputs:
            for src, made_t, via in made.get(t["name"], []):
                if src != n.id:
                    out.append(Edge(src, n.id, t if via else made_t, list(dict.fromkeys(via))))
    return out


def short_op(name: str) -> str:
    """`torch.nn.functional.linear` as people say it: `linear`."""
    for prefix in ("torch.nn.functional.", "torch.", "prims.", "operator."):
        name = name.removeprefix(prefix)
    return name
