"""The fusion graph and the roofline as Plotly figures (plain JSON for plotly.js to draw; the
timeline is timeline.py's), and what the three share: colours, the light ink, a region's hover.

The fusion graph's layout is networkx's: regions layered by their data dependencies
(`topological_generations`), placed by `multipartite_layout`. Every point, node and bar of
region carries its id as `customdata`, which is how the page links a click to a region; each
trace's `meta` says what it is ("nodes", "calls": a preview's torch calls between its kernels,
"measured", "estimate", "slices", "collectives", "stages").
"""

from __future__ import annotations

import html
import math
from typing import Any

import networkx as nx
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from fusionlens.report import schema as R
from fusionlens.report.html import dataflow
from fusionlens.report.html.dataflow import Edge
from fusionlens.report.html.model import Plan, RegionView

EXECUTOR_COLORS = {"torch": "#8c96a5", "triton": "#3b7dd8", "nvfuser": "#4caf50"}
SAVED_COLOR = "#e8833a"
CALL_COLOR = "#a5adb8"  # a preview's torch calls between its kernels
EDGE_COLOR = "#c3c9d1"
NODE_LINE = "#ffffff"  # BG: a node outlined in the background colour
BOUND_SYMBOLS = {"memory": "square", "compute": "diamond"}  # a node's symbol: which roof bounds it
# The light page's ink: page.js swaps these very strings for a dark theme's (VS Code's dark webview)
FG, GRID, BG = "#24292f", "#eef0f3", "#ffffff"
FONT = dict(family="ui-sans-serif, system-ui, sans-serif", size=12, color=FG)
# Roofline axes: points with no FLOPs (or no bytes) are drawn at the floor, said in their hover.
_FLOOR = 1e-3
# The most regions the fusion graph puts side by side in one row (of one program; of each of two
# side by side), so labels do not overlap.
_ROW = {1: 4, 2: 3}


def color(executor: str) -> str:
    return EXECUTOR_COLORS.get(executor, "#9c6ade")


def _ms(ms: float | None) -> str:
    return R.format_ms(ms, missing="-")


def hover(r: RegionView) -> str:
    """A region in Plotly's hover markup: its texts escaped (Plotly reads `<`, `&` as markup)."""
    lines = ", ".join(f"{f.rsplit('/', 1)[-1]}:{n}" for f, n in r.lines[:6]) + (" …" if len(r.lines) > 6 else "")
    ops = ", ".join(o.removeprefix("torch.nn.functional.").removeprefix("torch.").removeprefix("prims.")
                    for o in r.ops[:8]) + (" …" if len(r.ops) > 8 else "")
    out = [f"<b>{r.id}</b> {r.executor}", f"time: {_ms(r.time_ms)} ({r.basis})", f"lines: {lines or '-'}",
           f"ops: {ops}"]
    if r.bound:
        out.append(f"bound: {r.bound} · roofline {_ms(r.roof_ms)}")
    if r.bytes is not None:
        out.append(f"bytes: {R.format_bytes(r.bytes)} · FLOPs: {r.flops:,}")
    if r.boundary:
        out.append(f"ends: {r.boundary}")
    if r.saved:
        out.append(("saves " if r.program == "forward" else "reads saved ") + ", ".join(r.saved[:6]))
    return "<br>".join(html.escape(line, quote=False) if i else line for i, line in enumerate(out))


def _layout(nodes: list[RegionView], edges: list[Edge], row: int) -> tuple[nx.DiGraph, dict[str, tuple[float, float]]]:
    """The nodes layered top to bottom in dependency order, each edge a tensor between two."""
    g: nx.DiGraph = nx.DiGraph()
    order = {r.id: i for i, r in enumerate(nodes)}
    g.add_nodes_from(order)
    for e in edges:
        g.add_edge(e.src, e.dst, edge=e)
    layer = 0
    for generation in nx.topological_generations(g):
        # a wide generation is drawn as rows of at most `row` nodes
        for i, n in enumerate(sorted(generation, key=order.__getitem__)):
            g.nodes[n]["layer"] = layer + i // row
        layer += (len(generation) + row - 1) // row
    pos = nx.multipartite_layout(g, subset_key="layer", align="horizontal") if len(g) > 1 else {
        n: (0.0, 0.0) for n in g}
    # networkx scales both axes by the longer one: stretch each row across the width again
    xs = [float(x) for x, _ in pos.values()] or [0.0]
    mid, half = (max(xs) + min(xs)) / 2, (max(xs) - min(xs)) / 2 or 1.0
    return g, {n: ((float(x) - mid) / half, float(y)) for n, (x, y) in pos.items()}


def _edge_traces(g: nx.DiGraph, pos: dict[str, tuple[float, float]]) -> list[go.Scatter]:
    """The edges as lines, and a dot at each one's middle whose hover is its tensor."""
    ex: list[float | None] = []
    ey: list[float | None] = []
    mx, my, mtext = [], [], []
    for a, b, data in g.edges(data=True):
        (xa, ya), (xb, yb) = pos[a], pos[b]
        ex += [xa, xb, None]
        ey += [ya, yb, None]
        e: Edge = data["edge"]
        t = e.tensor
        mx.append((xa + xb) / 2)
        my.append((ya + yb) / 2)
        size = R.format_bytes(t["bytes"]) if t["bytes"] is not None else "?"
        via = f" (through {', '.join(e.via)})" if e.via else ""
        mtext.append(html.escape(f"{t['name']}: {t['dtype']}{list(t['shape'])} · {size}", quote=False)
                     + f"<br>{a} → {b}{html.escape(via, quote=False)}")
    return [
        go.Scatter(x=ex, y=ey, mode="lines", line=dict(color=EDGE_COLOR, width=1), hoverinfo="skip",
                   showlegend=False, meta="edges"),
        go.Scatter(x=mx, y=my, mode="markers", marker=dict(size=6, color=EDGE_COLOR, opacity=0.6), text=mtext,
                   hovertemplate="%{text}<extra>tensor</extra>", showlegend=False, meta="tensors"),
    ]


def _call_hover(r: RegionView) -> str:
    return hover(r) + "<br>a torch call of the program between the preview's kernels"


def _graph_traces(regions: list[RegionView], calls: list[RegionView], views: list[RegionView],
                  kind: str, issues: dict[str, str], row: int) -> tuple[list[go.Scatter], int]:
    """A program's graph (its edges, its regions, the library calls between a preview's regions)
    and how many layers deep it is."""
    g, pos = _layout(regions + calls, dataflow.edges(regions + calls, views), row)
    out = _edge_traces(g, pos)
    # after the id: the collective a region issues, else why the region ended
    label = [r.id + html.escape(f" · {issues[r.id]}" if r.id in issues else
                                f" · {r.boundary.split(':', 1)[0]}" if r.boundary else "", quote=False)
             for r in regions]
    out.append(go.Scatter(
        x=[pos[r.id][0] for r in regions], y=[pos[r.id][1] for r in regions], mode="markers+text",
        text=label, textposition="middle right", textfont=dict(size=10), customdata=[r.id for r in regions],
        hovertext=[hover(r) for r in regions], hovertemplate="%{hovertext}<extra></extra>",
        marker=dict(size=_sizes(regions), color=[color(r.executor) for r in regions],
                    symbol=[BOUND_SYMBOLS.get(r.bound or "", "circle") for r in regions],
                    line=dict(width=[3 if r.saved else 1 for r in regions],
                              color=[SAVED_COLOR if r.saved else NODE_LINE for r in regions])),
        name=f"{kind} regions", showlegend=False, meta="nodes"))
    if calls:
        # grey and small: what the preview leaves to torch, labelled with the op and its line
        out.append(go.Scatter(
            x=[pos[r.id][0] for r in calls], y=[pos[r.id][1] for r in calls], mode="markers+text",
            text=[html.escape(_call_label(r), quote=False) for r in calls], textposition="middle right",
            textfont=dict(size=10, color=CALL_COLOR), customdata=[r.id for r in calls],
            hovertext=[_call_hover(r) for r in calls], hovertemplate="%{hovertext}<extra></extra>",
            marker=dict(size=9, color=CALL_COLOR, symbol="circle",
                        line=dict(width=[3 if r.saved else 1 for r in calls],
                                  color=[SAVED_COLOR if r.saved else NODE_LINE for r in calls])),
            name=f"{kind} library calls", showlegend=False, meta="calls"))
    return out, 1 + max((d.get("layer", 0) for _, d in g.nodes(data=True)), default=0)


def _call_label(r: RegionView) -> str:
    """`linear :35`: the call's op (its first that computes) and its first user line."""
    ops = [dataflow.short_op(o) for o in r.ops]
    where = f" :{r.lines[0][1]}" if r.lines else ""
    return (ops[0] if ops else r.id) + (" …" if len(set(ops)) > 1 else "") + where


def _sizes(nodes: list[RegionView]) -> list[float]:
    """A node's area grows with its region's time: the costly regions stand out."""
    top = max((r.time_ms or 0.0 for r in nodes), default=0.0)
    return [10 + 14 * math.sqrt((r.time_ms or 0.0) / top) if top else 14 for r in nodes]


def _legend(executors: list[str], saved: bool, calls: bool) -> list[go.Scatter]:
    """Legend entries only (no points): the executor colours, the bound's symbols, the
    saved-tensor outline and a preview's torch calls."""
    out = [go.Scatter(x=[None], y=[None], mode="markers", name=e, marker=dict(size=10, symbol="square",
                      color=color(e)), meta="legend") for e in executors]
    out += [go.Scatter(x=[None], y=[None], mode="markers", name=f"{bound}-bound", meta="legend",
                       marker=dict(size=10, symbol=symbol, color="#ffffff", line=dict(width=1.5, color="#57606a")))
            for bound, symbol in BOUND_SYMBOLS.items()]
    if calls:
        out.append(go.Scatter(x=[None], y=[None], mode="markers", name="torch call between kernels (not previewed)",
                              marker=dict(size=9, color=CALL_COLOR), meta="legend"))
    if saved:
        out.append(go.Scatter(x=[None], y=[None], mode="markers", name="saves / reads a saved tensor",
                              marker=dict(size=10, symbol="square", color="#ffffff",
                                          line=dict(width=3, color=SAVED_COLOR)), meta="legend"))
    return out


def graph(plan: Plan, collectives: list[R.Collective] | None = None) -> dict[str, Any]:
    """The fusion graph of each program of `plan`, side by side (forward, then backward); a
    preview's with the program's library calls between its kernels; the regions that issue a
    collective (of the plan that ran) named after it."""
    issues = {c.region: f"{c.op} {R.format_bytes(c.bytes)}" for c in collectives or [] if plan.ran and c.region}
    kinds = [k for k, rs in plan.programs.items() if rs] or ["forward"]
    titles = [f"{k} program ({len(plan.programs.get(k, []))} regions"
              + (f", {len(plan.calls[k])} torch calls between them)" if plan.calls.get(k) else ")") for k in kinds]
    fig = make_subplots(rows=1, cols=len(kinds), subplot_titles=titles, horizontal_spacing=0.06)
    depth = 1
    for col, kind in enumerate(kinds, 1):
        traces, layers = _graph_traces(plan.programs.get(kind, []), plan.calls.get(kind, []),
                                       plan.views.get(kind, []), kind, issues, _ROW.get(len(kinds), 3))
        depth = max(depth, layers)
        for trace in traces:
            fig.add_trace(trace, row=1, col=col)
        # room on the right of the last column for its labels
        fig.update_xaxes(visible=False, range=[-1.15, 1.75], row=1, col=col)
        fig.update_yaxes(visible=False, autorange="reversed", row=1, col=col)  # the first region on top
    regions = [r for rs in [*plan.programs.values(), *plan.calls.values()] for r in rs]
    for trace in _legend(sorted({r.executor for rs in plan.programs.values() for r in rs}),
                         any(r.saved for r in regions), any(plan.calls.values())):
        fig.add_trace(trace, row=1, col=1)
    # a deep program is drawn compressed: drag a box to zoom in, double-click to zoom out
    fig.update_layout(height=max(360, min(1500, 30 * depth + 120)), margin=dict(l=10, r=10, t=40, b=30),
                      font=FONT, plot_bgcolor=BG, paper_bgcolor=BG, hovermode="closest",
                      legend=dict(orientation="h", x=0, y=0, yanchor="top", itemclick=False, itemdoubleclick=False),
                      dragmode="zoom")
    return fig.to_plotly_json()


def _perf_gflops(r: RegionView, ms: float | None) -> float:
    """FLOP/s in GFLOP/s at `ms`; the floor for a region of no FLOPs or no time (views only)."""
    if not ms or not r.flops:
        return _FLOOR
    return max(r.flops / (ms * 1e-3) / 1e9, _FLOOR)


def _points(regions: list[RegionView], which: str, name: str, symbol: str, meta: str = "") -> go.Scatter:
    """A point a region: every region at its estimate, or those measured at their measured time."""
    shown = [r for r in regions if which == "estimate" or r.measured_ms is not None]
    ms = [r.roof_ms if which == "estimate" else r.measured_ms for r in shown]
    return go.Scatter(
        x=[max(r.intensity or 0.0, _FLOOR) for r in shown], y=[_perf_gflops(r, t) for r, t in zip(shown, ms)],
        mode="markers", name=name, customdata=[r.id for r in shown], meta=meta or which,
        hovertext=[hover(r) + ("" if r.intensity else "<br>(no FLOPs: drawn at the floor)") for r in shown],
        hovertemplate="%{hovertext}<br>%{x:.3g} FLOP/B · %{y:.3g} GFLOP/s<extra></extra>",
        marker=dict(size=10, symbol=symbol, color=[color(r.executor) for r in shown],
                    line=dict(width=1.5, color=FG)))


def roofline(plan: Plan, peaks: R.DevicePeaks | None, device: str) -> dict[str, Any]:
    """Each region at its arithmetic intensity: its FLOP/s at its roofline estimate (on the
    roof, by construction) and, where it ran, at its measured time; the target GPU's memory and
    compute roofs, and the copy bandwidth measured here as a dashed roof."""
    regions = [r for rs in plan.programs.values() for r in rs]
    drawn = regions + [r for rs in plan.calls.values() for r in rs]
    xs = [max(r.intensity or 0.0, _FLOOR) for r in drawn] or [1.0]
    lo, hi = min(xs + [0.01]) / 2, max(xs + [1000.0]) * 2
    fig = go.Figure()
    if peaks is not None:
        where = f"{peaks.device}{' (target GPU, estimate)' if peaks.estimate else ''}"
        maths = sorted({r.math for r in drawn if r.flops}) or ["fp32"]
        for kind in maths:
            top = {"fp32": peaks.fp32_tflops, "tf32": peaks.tf32_tflops, "bf16": peaks.bf16_tflops}[kind] * 1e3
            knee = top / peaks.hbm_gbs
            fig.add_trace(go.Scatter(x=[lo, knee, hi], y=[lo * peaks.hbm_gbs, top, top], mode="lines",
                                     name=f"{where} roof, {kind}", line=dict(color=FG, width=2),
                                     meta="roof", hoverinfo="name"))
        if peaks.copy_gbs:
            fig.add_trace(go.Scatter(x=[lo, hi], y=[lo * peaks.copy_gbs, hi * peaks.copy_gbs], mode="lines",
                                     name=f"memory roof measured on {peaks.copy_device} ({peaks.copy_gbs:g} GB/s)",
                                     line=dict(color="#8c96a5", width=1.5, dash="dash"), meta="roof",
                                     hoverinfo="name"))
    fig.add_trace(_points(regions, "estimate", f"roofline estimate{f' on {peaks.device}' if peaks else ''}",
                          "circle-open"))
    calls = [r for rs in plan.calls.values() for r in rs if r.flops]
    if calls:  # a preview's linears, SDPA: where the program's FLOPs are
        fig.add_trace(_points(calls, "estimate", "torch calls between the kernels (estimate)", "circle-open", "calls"))
    if plan.ran:
        fig.add_trace(_points(regions, "measured", f"measured on {device}", "diamond"))
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP / byte)", range=_log_range(lo, hi),
                     gridcolor=GRID)
    fig.update_yaxes(type="log", title="performance (GFLOP/s)", gridcolor=GRID)
    fig.update_layout(height=460, margin=dict(l=60, r=10, t=10, b=20), font=FONT, plot_bgcolor=BG,
                      paper_bgcolor=BG, legend=dict(orientation="h", x=0, y=-0.18, yanchor="top"),
                      hovermode="closest")
    return fig.to_plotly_json()


def _log_range(lo: float, hi: float) -> list[float]:
    return [math.log10(lo), math.log10(hi)]
