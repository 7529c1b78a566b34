"""The page's three pictures as Plotly figures (plain JSON for plotly.js to draw).

The fusion graph's layout is networkx's: regions layered by their data dependencies
(`topological_generations`), placed by `multipartite_layout`. Every point, node and bar of
region carries its id as `customdata`, which is how the page links a click to a region; each
trace's `meta` says what it is ("nodes", "measured", "estimate", "slices", "stages").
"""

from __future__ import annotations

import html
import math
from typing import Any

import networkx as nx
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from compiler import report as R
from compiler.html_report.model import Plan, RegionView

EXECUTOR_COLORS = {"torch": "#8c96a5", "triton": "#3b7dd8", "nvfuser": "#4caf50"}
SAVED_COLOR = "#e8833a"
BOUND_SYMBOLS = {"memory": "square", "compute": "diamond"}  # a node's symbol: which roof bounds it
_FONT = dict(family="ui-sans-serif, system-ui, sans-serif", size=12, color="#24292f")
# Roofline axes: points with no FLOPs (or no bytes) are drawn at the floor, said in their hover.
_FLOOR = 1e-3
# The most regions the fusion graph puts side by side in one row.
_ROW = 4


def color(executor: str) -> str:
    return EXECUTOR_COLORS.get(executor, "#9c6ade")


def _ms(ms: float | None) -> str:
    return R.format_ms(ms, missing="-")


def _hover(r: RegionView) -> str:
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


def _layout(regions: list[RegionView]) -> tuple[nx.DiGraph, dict[str, tuple[float, float]]]:
    """Regions as nodes, each tensor one region makes and another reads as an edge; layered
    top to bottom in dependency order."""
    g: nx.DiGraph = nx.DiGraph()
    made: dict[str, str] = {}
    order = {r.id: i for i, r in enumerate(regions)}
    for r in regions:
        g.add_node(r.id)
        for t in r.inputs:
            if t["name"] in made and made[t["name"]] != r.id:
                g.add_edge(made[t["name"]], r.id, tensor=t)
        for t in r.outputs:
            made[t["name"]] = r.id
    layer = 0
    for nodes in nx.topological_generations(g):
        # a wide generation is drawn as rows of at most _ROW nodes, so labels do not overlap
        for i, n in enumerate(sorted(nodes, key=order.__getitem__)):
            g.nodes[n]["layer"] = layer + i // _ROW
        layer += (len(nodes) + _ROW - 1) // _ROW
    pos = nx.multipartite_layout(g, subset_key="layer", align="horizontal") if len(g) > 1 else {
        n: (0.0, 0.0) for n in g}
    # networkx scales both axes by the longer one: stretch each row across the width again
    xs = [float(x) for x, _ in pos.values()] or [0.0]
    mid, half = (max(xs) + min(xs)) / 2, (max(xs) - min(xs)) / 2 or 1.0
    return g, {n: ((float(x) - mid) / half, float(y)) for n, (x, y) in pos.items()}


def _graph_traces(regions: list[RegionView], kind: str) -> list[go.Scatter]:
    g, pos = _layout(regions)
    ex, ey, mx, my, mtext = [], [], [], [], []
    for a, b, data in g.edges(data=True):
        (xa, ya), (xb, yb) = pos[a], pos[b]
        ex += [xa, xb, None]
        ey += [ya, yb, None]
        t = data["tensor"]
        mx.append((xa + xb) / 2)
        my.append((ya + yb) / 2)
        size = R.format_bytes(t["bytes"]) if t["bytes"] is not None else "?"
        mtext.append(html.escape(f"{t['name']}: {t['dtype']}{list(t['shape'])} · {size}", quote=False)
                     + f"<br>{a} → {b}")
    by_id = {r.id: r for r in regions}
    ids = list(g.nodes)
    nodes = [by_id[i] for i in ids]
    label = [r.id + html.escape(f" · {r.boundary.split(':', 1)[0]}" if r.boundary else "", quote=False)
             for r in nodes]
    return [
        go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#c3c9d1", width=1), hoverinfo="skip",
                   showlegend=False, meta="edges"),
        go.Scatter(x=mx, y=my, mode="markers", marker=dict(size=6, color="#c3c9d1", opacity=0.6), text=mtext,
                   hovertemplate="%{text}<extra>tensor</extra>", showlegend=False, meta="tensors"),
        go.Scatter(x=[pos[i][0] for i in ids], y=[pos[i][1] for i in ids], mode="markers+text",
                   text=label, textposition="middle right", textfont=dict(size=10), customdata=ids,
                   hovertext=[_hover(r) for r in nodes], hovertemplate="%{hovertext}<extra></extra>",
                   marker=dict(size=_sizes(nodes), color=[color(r.executor) for r in nodes],
                               symbol=[BOUND_SYMBOLS.get(r.bound or "", "circle") for r in nodes],
                               line=dict(width=[3 if r.saved else 1 for r in nodes],
                                         color=[SAVED_COLOR if r.saved else "#ffffff" for r in nodes])),
                   name=f"{kind} regions", showlegend=False, meta="nodes"),
    ]


def _sizes(nodes: list[RegionView]) -> list[float]:
    """A node's area grows with its region's time: the costly regions stand out."""
    top = max((r.time_ms or 0.0 for r in nodes), default=0.0)
    return [10 + 14 * math.sqrt((r.time_ms or 0.0) / top) if top else 14 for r in nodes]


def _legend(executors: list[str], saved: bool) -> list[go.Scatter]:
    """Legend entries only (no points): the executor colours, the bound's symbols and the
    saved-tensor outline."""
    out = [go.Scatter(x=[None], y=[None], mode="markers", name=e, marker=dict(size=10, symbol="square",
                      color=color(e)), meta="legend") for e in executors]
    out += [go.Scatter(x=[None], y=[None], mode="markers", name=f"{bound}-bound", meta="legend",
                       marker=dict(size=10, symbol=symbol, color="#ffffff", line=dict(width=1.5, color="#57606a")))
            for bound, symbol in BOUND_SYMBOLS.items()]
    if saved:
        out.append(go.Scatter(x=[None], y=[None], mode="markers", name="saves / reads a saved tensor",
                              marker=dict(size=10, symbol="square", color="#ffffff",
                                          line=dict(width=3, color=SAVED_COLOR)), meta="legend"))
    return out


def graph(plan: Plan) -> dict[str, Any]:
    """The fusion graph of each program of `plan`, side by side (forward, then backward)."""
    kinds = [k for k, rs in plan.programs.items() if rs] or ["forward"]
    titles = [f"{k} program ({len(plan.programs.get(k, []))} regions)" for k in kinds]
    fig = make_subplots(rows=1, cols=len(kinds), subplot_titles=titles, horizontal_spacing=0.06)
    for col, kind in enumerate(kinds, 1):
        for trace in _graph_traces(plan.programs.get(kind, []), kind):
            fig.add_trace(trace, row=1, col=col)
        # room on the right of the last column for its labels
        fig.update_xaxes(visible=False, range=[-1.15, 1.75], row=1, col=col)
        fig.update_yaxes(visible=False, autorange="reversed", row=1, col=col)  # the first region on top
    regions = [r for rs in plan.programs.values() for r in rs]
    for trace in _legend(sorted({r.executor for r in regions}), any(r.saved for r in regions)):
        fig.add_trace(trace, row=1, col=1)
    depth = max((1 + max((d.get("layer", 0) for _, d in _layout(plan.programs.get(k, []))[0].nodes(data=True)),
                         default=0) for k in kinds), default=1)
    # a deep program is drawn compressed: drag a box to zoom in, double-click to zoom out
    fig.update_layout(height=max(360, min(900, 34 * depth + 120)), margin=dict(l=10, r=10, t=40, b=30),
                      font=_FONT, plot_bgcolor="#ffffff", paper_bgcolor="#ffffff", hovermode="closest",
                      legend=dict(orientation="h", x=0, y=0, yanchor="top", itemclick=False, itemdoubleclick=False),
                      dragmode="zoom")
    return fig.to_plotly_json()


def _perf_gflops(r: RegionView, ms: float | None) -> float:
    """FLOP/s in GFLOP/s at `ms`; the floor for a region of no FLOPs or no time (views only)."""
    if not ms or not r.flops:
        return _FLOOR
    return max(r.flops / (ms * 1e-3) / 1e9, _FLOOR)


def _points(regions: list[RegionView], which: str, name: str, symbol: str) -> go.Scatter:
    """A point a region: every region at its estimate, or those measured at their measured time."""
    shown = [r for r in regions if which == "estimate" or r.measured_ms is not None]
    ms = [r.roof_ms if which == "estimate" else r.measured_ms for r in shown]
    return go.Scatter(
        x=[max(r.intensity or 0.0, _FLOOR) for r in shown], y=[_perf_gflops(r, t) for r, t in zip(shown, ms)],
        mode="markers", name=name, customdata=[r.id for r in shown], meta=which,
        hovertext=[_hover(r) + ("" if r.intensity else "<br>(no FLOPs: drawn at the floor)") for r in shown],
        hovertemplate="%{hovertext}<br>%{x:.3g} FLOP/B · %{y:.3g} GFLOP/s<extra></extra>",
        marker=dict(size=10, symbol=symbol, color=[color(r.executor) for r in shown],
                    line=dict(width=1.5, color="#24292f")))


def roofline(plan: Plan, peaks: R.DevicePeaks | None, device: str) -> dict[str, Any]:
    """Each region at its arithmetic intensity: its FLOP/s at its roofline estimate (on the
    roof, by construction) and, where it ran, at its measured time; the target GPU's memory and
    compute roofs, and the copy bandwidth measured here as a dashed roof."""
    regions = [r for rs in plan.programs.values() for r in rs]
    xs = [max(r.intensity or 0.0, _FLOOR) for r in regions] or [1.0]
    lo, hi = min(xs + [0.01]) / 2, max(xs + [1000.0]) * 2
    fig = go.Figure()
    if peaks is not None:
        where = f"{peaks.device}{' (target GPU, estimate)' if peaks.estimate else ''}"
        maths = sorted({r.math for r in regions if r.flops}) or ["fp32"]
        for kind in maths:
            top = {"fp32": peaks.fp32_tflops, "tf32": peaks.tf32_tflops, "bf16": peaks.bf16_tflops}[kind] * 1e3
            knee = top / peaks.hbm_gbs
            fig.add_trace(go.Scatter(x=[lo, knee, hi], y=[lo * peaks.hbm_gbs, top, top], mode="lines",
                                     name=f"{where} roof, {kind}", line=dict(color="#24292f", width=2),
                                     meta="roof", hoverinfo="name"))
        if peaks.copy_gbs:
            fig.add_trace(go.Scatter(x=[lo, hi], y=[lo * peaks.copy_gbs, hi * peaks.copy_gbs], mode="lines",
                                     name=f"memory roof measured on {peaks.copy_device} ({peaks.copy_gbs:g} GB/s)",
                                     line=dict(color="#8c96a5", width=1.5, dash="dash"), meta="roof",
                                     hoverinfo="name"))
    fig.add_trace(_points(regions, "estimate", f"roofline estimate{f' on {peaks.device}' if peaks else ''}",
                          "circle-open"))
    if plan.ran:
        fig.add_trace(_points(regions, "measured", f"measured on {device}", "diamond"))
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP / byte)", range=_log_range(lo, hi),
                     gridcolor="#eef0f3")
    fig.update_yaxes(type="log", title="performance (GFLOP/s)", gridcolor="#eef0f3")
    fig.update_layout(height=460, margin=dict(l=60, r=10, t=10, b=20), font=_FONT, plot_bgcolor="#ffffff",
                      paper_bgcolor="#ffffff", legend=dict(orientation="h", x=0, y=-0.18, yanchor="top"),
                      hovermode="closest")
    return fig.to_plotly_json()


def _log_range(lo: float, hi: float) -> list[float]:
    return [math.log10(lo), math.log10(hi)]


def _unit(total_ms: float) -> tuple[str, float]:
    """The timeline's unit: ms, or µs / ns for a program of estimates on a GPU (nanoseconds)."""
    for unit, scale in (("ms", 1.0), ("µs", 1e3)):
        if total_ms * scale >= 0.5:
            return unit, scale
    return "ns", 1e6


def _slices(regions: list[RegionView], lane: str, start: float, scale: float) -> tuple[go.Bar, float]:
    """One bar a region, in program order from `start` (in the unit `scale` makes of ms)."""
    starts, durs = [], []
    t = start
    for r in regions:
        starts.append(t)
        durs.append((r.time_ms or 0.0) * scale)
        t += (r.time_ms or 0.0) * scale
    bar = go.Bar(y=[lane] * len(regions), x=durs, base=starts, orientation="h", customdata=[r.id for r in regions],
                 marker=dict(color=[color(r.executor) for r in regions],
                             line=dict(width=[0 if r.basis == "measured" else 1 for r in regions], color="#24292f"),
                             pattern=dict(shape=["" if r.basis == "measured" else "/" for r in regions], size=6)),
                 hovertext=[_hover(r) for r in regions], hovertemplate="%{hovertext}<extra></extra>",
                 text=[r.id for r in regions], textposition="inside", insidetextanchor="middle",
                 showlegend=False, meta="slices", name=lane)
    return bar, t


def _stages(stage_ms: dict[str, float], compile_ms: float | None) -> go.Bar:
    """The compile's own stages, one bar each in pipeline order (the whole compile where the
    report has no stage times: an older writer's)."""
    stages = {k: v for k, v in stage_ms.items() if v} or ({"compile": compile_ms} if compile_ms else {})
    starts, s = [], 0.0
    for v in stages.values():
        starts.append(s)
        s += v
    palette = ["#6f42c1", "#0a7ea4", "#2da44e", "#bf8700", "#cf222e", "#8250df", "#1b7c83", "#953800"]
    return go.Bar(y=["compile"] * len(stages), x=list(stages.values()), base=starts, orientation="h",
                  customdata=list(stages), text=list(stages), textposition="inside", insidetextanchor="middle",
                  marker=dict(color=[palette[i % len(palette)] for i in range(len(stages))]),
                  hovertemplate="%{customdata}: %{x:.1f} ms<extra>compile stage</extra>",
                  showlegend=False, meta="stages", name="compile")


def _collectives(collectives: list[R.Collective], bars: dict[str, go.Bar]) -> go.Scatter | None:
    """A mark a collective, at the start of the region that runs it (the end of its program's
    lane where DDP's hooks run it), over that lane."""
    xs, ys, texts = [], [], []
    for c in collectives:
        bar = bars.get(c.program)
        if bar is None:
            continue
        ids = list(bar.customdata)
        i = ids.index(c.region) if c.region in ids else None
        xs.append(bar.base[i] if i is not None else (bar.base[-1] + bar.x[-1] if ids else 0.0))
        ys.append(c.program)
        took = f"<br>measured {R.format_ms(c.time_ms.max)} (slowest rank)" if c.time_ms else ""
        texts.append(html.escape(f"{c.op} {R.format_bytes(c.bytes)} over {c.group_size} ranks ({c.kind})"
                                 + (f", {c.estimate}" if c.estimate else ""), quote=False) + took)
    if not xs:
        return None
    return go.Scatter(x=xs, y=ys, mode="markers", marker=dict(symbol="triangle-down", size=12, color="#cf222e"),
                      hovertext=texts, hovertemplate="%{hovertext}<extra>collective</extra>", name="collectives",
                      showlegend=False, meta="collectives")


def timeline(plan: Plan, stage_ms: dict[str, float], compile_ms: float | None,
             collectives: list[R.Collective] | None = None) -> dict[str, Any]:
    """The programs' regions in order (a training step: the forward, then the backward), each
    as long as its time (hatched: a roofline estimate), the collectives that ran (red marks),
    and the compile's own stages below."""
    unit, scale = _unit(sum(r.time_ms or 0.0 for rs in plan.programs.values() for r in rs))
    fig = make_subplots(rows=2, cols=1, row_heights=[0.6, 0.4], vertical_spacing=0.3,
                        subplot_titles=[f"regions in execution order ({unit}; hatched: roofline estimate)",
                                        "the compile's stages (ms)"])
    t, bars = 0.0, {}
    for kind, regions in plan.programs.items():
        if regions:
            bars[kind], t = _slices(regions, kind, t, scale)
            fig.add_trace(bars[kind], row=1, col=1)
    marks = _collectives(collectives or [], bars) if plan.ran else None
    if marks is not None:
        fig.add_trace(marks, row=1, col=1)
    fig.add_trace(_stages(stage_ms, compile_ms), row=2, col=1)
    fig.update_xaxes(title=unit, gridcolor="#eef0f3", exponentformat="none", row=1, col=1)
    fig.update_xaxes(title="ms", gridcolor="#eef0f3", row=2, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_layout(height=380, margin=dict(l=70, r=10, t=30, b=40), font=_FONT, plot_bgcolor="#ffffff",
                      paper_bgcolor="#ffffff", barmode="overlay", bargap=0.25, hovermode="closest", dragmode="zoom")
    return fig.to_plotly_json()
