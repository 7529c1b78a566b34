"""A PlanReport's pictures (docs/plan.md): the pipeline schedule (stages against time: forward,
backward, bubble), memory per GPU as stacked bars by kind, and the search's frontier (step
time against memory). Plotly figures, and one self-contained page (`fusionlens plan --html`).
No torch."""

from __future__ import annotations

import html
import re

import plotly.graph_objects as go
import plotly.io as pio

from fusionlens.report.html import page
from fusionlens.report.html.figures import BG, FONT, GRID
from fusionlens.report.plan import PlanReport

SPAN_COLORS = {"forward": "#3b7dd8", "backward": "#e0823d", "bubble": "#d0d4da", "comm": "#9c6ade"}
MEMORY_KINDS = ("params", "grads", "optimizer", "activations", "buffers", "transient")
MEMORY_COLORS = ("#3b7dd8", "#4caf50", "#9c6ade", "#e0823d", "#8c96a5", "#d6b656")


def _layout(fig: go.Figure, title: str, x: str, y: str) -> go.Figure:
    fig.update_layout(title=title, font=FONT, paper_bgcolor=BG, plot_bgcolor=BG, height=360,
                      margin=dict(l=60, r=20, t=50, b=50), xaxis=dict(title=x, gridcolor=GRID),
                      yaxis=dict(title=y, gridcolor=GRID), barmode="stack")
    return fig


def schedule_figure(r: PlanReport) -> go.Figure:
    """One row a pipeline stage, a bar a span (forward and backward labelled by micro-batch)."""
    fig = go.Figure()
    for kind, color in SPAN_COLORS.items():
        spans = [s for s in r.schedule if s.kind == kind]
        if not spans:
            continue
        fig.add_trace(go.Bar(
            name=kind, orientation="h", y=[f"stage {s.stage}" for s in spans], x=[s.end_s - s.start_s for s in spans],
            base=[s.start_s for s in spans], marker_color=color, meta=kind,
            text=[str(s.micro_batch) if s.micro_batch >= 0 else "" for s in spans],
            hovertemplate="%{y}: " + kind + " %{text}<br>%{base:.3g} s + %{x:.3g} s<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig = _layout(fig, "Pipeline schedule (1F1B, one step)", "seconds", "")
    fig.update_layout(barmode="overlay")
    return fig


def memory_figure(r: PlanReport, others: list[PlanReport] | None = None) -> go.Figure:
    """Memory of the busiest GPU by kind, one bar a plan (this one, then `others`), with capacity."""
    plans = [r] + list(others or [])
    names = [f"{p.name} · TP{p.options['tp']} PP{p.options['pp']} Z{p.options['zero']} {p.options['recompute']}"
             for p in plans]
    fig = go.Figure()
    for kind, color in zip(MEMORY_KINDS, MEMORY_COLORS):
        fig.add_trace(go.Bar(name=kind, x=names, y=[getattr(p.memory_gib, kind) for p in plans], marker_color=color,
                             hovertemplate=kind + ": %{y:.2f} GiB<extra></extra>"))
    fig.add_trace(go.Scatter(name="capacity", x=names, y=[p.memory_gib.capacity for p in plans], mode="markers",
                             marker=dict(symbol="line-ew-open", size=40, color="#c0392b")))
    return _layout(fig, "Memory a GPU (GiB)", "", "GiB")


def frontier_figure(r: PlanReport) -> go.Figure:
    """Each plan the search costed: step time against memory; the ones that fit filled."""
    fig = go.Figure()
    for fits in (True, False):
        pts = [p for p in r.frontier if p.fits == fits]
        if not pts:
            continue
        labels = [html.escape(" ".join(f"{k}={v}" for k, v in p.options.items()
                                       if k in ("tp", "pp", "vpp", "cp", "dp", "zero", "micro_batch", "recompute")))
                  for p in pts]
        fig.add_trace(go.Scatter(
            name="fits" if fits else "does not fit", x=[p.memory_gib for p in pts], y=[p.step_s for p in pts],
            mode="markers", text=labels, marker=dict(size=8, symbol="circle" if fits else "circle-open"),
            hovertemplate="%{text}<br>%{x:.1f} GiB, %{y:.3g} s<extra></extra>"))
    return _layout(fig, "Search: step time against memory", "GiB a GPU", "seconds a step")


def render(r: PlanReport, nonce: str | None = None) -> str:
    """One self-contained HTML page (plotly.js's basic bundle inlined once) of the plan's pictures; with a
    nonce every script carries it (an editor webview's Content-Security-Policy)."""
    figures = [schedule_figure(r), memory_figure(r)] + ([frontier_figure(r)] if r.frontier else [])
    # plotly's basic bundle (bar and scatter: all these charts draw), inlined once, as the report page does
    plotly = "<script>" + page.vendored("plotly-basic.min.js") + "</script>"
    parts = [plotly] + [pio.to_html(f, include_plotlyjs=False, full_html=False) for f in figures]
    if nonce is not None:
        parts = [re.sub(r"<script(?=[ >])", f"<script nonce='{html.escape(nonce)}'", p) for p in parts]
    title = html.escape(f"{r.name} on {r.cluster}: {r.step_s:.3g} s a step, MFU {r.mfu:.1%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body style='font-family:system-ui,sans-serif'><h2>{title}</h2>{''.join(parts)}</body></html>")
