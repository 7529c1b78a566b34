"""The roofline as a Plotly figure (plain JSON for plotly.js to draw; the timeline is
timeline.py's, the fusion graph graph.py's and graph.js'), and what the pictures share:
colours, the light ink, a region's hover.

Every point and bar of a region carries its id as `customdata`, which is how the page links a
click to a region; each trace's `meta` says what it is ("calls": a preview's torch calls
between its kernels, "measured", "estimate", "slices", "collectives", "stages").
"""

from __future__ import annotations

import html
import math
from typing import Any

import plotly.graph_objects as go

from fusionlens.report import schema as R
from fusionlens.report.html.model import Plan, RegionView

EXECUTOR_COLORS = {"torch": "#8c96a5", "triton": "#3b7dd8", "nvfuser": "#4caf50"}
CALL_COLOR = "#a5adb8"  # a preview's torch calls between its kernels
# The light page's ink: page.js swaps these very strings for a dark theme's (VS Code's dark webview)
FG, GRID, BG = "#24292f", "#eef0f3", "#ffffff"
FONT = dict(family="ui-sans-serif, system-ui, sans-serif", size=12, color=FG)
# Roofline axes: points with no FLOPs (or no bytes) are drawn at the floor, said in their hover.
_FLOOR = 1e-3


def color(executor: str) -> str:
    return EXECUTOR_COLORS.get(executor, "#9c6ade")


def _ms(ms: float | None) -> str:
    return R.format_ms(ms, missing="-")


def _hover_lines(r: RegionView) -> list[str]:
    lines = ", ".join(f"{f.rsplit('/', 1)[-1]}:{n}" for f, n in r.lines[:6]) + (" …" if len(r.lines) > 6 else "")
    ops = ", ".join(o.removeprefix("torch.nn.functional.").removeprefix("torch.").removeprefix("prims.")
                    for o in r.ops[:8]) + (" …" if len(r.ops) > 8 else "")
    out = [f"time: {_ms(r.time_ms)} ({r.basis})", f"lines: {lines or '-'}", f"ops: {ops}"]
    if r.module:
        out.append(f"module: {r.module}")
    if r.bound:
        out.append(f"bound: {r.bound} · roofline {_ms(r.roof_ms)}")
    if r.bytes is not None:
        out.append(f"bytes: {R.format_bytes(r.bytes)} · FLOPs: {r.flops:,}")
    if r.boundary:
        out.append(f"ends: {r.boundary}")
    if r.saved:
        out.append(("saves " if r.program == "forward" else "reads saved ") + ", ".join(r.saved[:6]))
    return out


def hover(r: RegionView) -> str:
    """A region in Plotly's hover markup: its texts escaped (Plotly reads `<`, `&` as markup)."""
    return "<br>".join([f"<b>{r.id}</b> {r.executor}"] + [html.escape(line, quote=False) for line in _hover_lines(r)])


def hover_text(r: RegionView) -> str:
    """A region's hover as plain text (the fusion graph's SVG title)."""
    return "\n".join([f"{r.id} {r.executor}"] + _hover_lines(r))


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
