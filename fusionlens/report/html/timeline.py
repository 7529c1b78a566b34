"""The timeline picture: each program's regions in execution order, as long as their times (a
preview's with the program's torch calls between its kernels), each collective on a lane under
its program's (its time from its issue, the part the regions between its issue and its wait
hide, the part they do not), and the compile's own stages below."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import networkx as nx
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from fusionlens.report import schema as R
from fusionlens.report.html import dataflow
from fusionlens.report.html.figures import BG, CALL_COLOR, FONT, GRID, color, hover
from fusionlens.report.html.model import Plan, RegionView

COLLECTIVE_COLOR = "#cf222e"
SLICE_LINE = "#24292e"  # FG's near twin: a dark theme draws the slices' outlines in its border colour
HIDDEN_COLOR = "rgba(207, 34, 46, 0.3)"  # a collective's time the overlapping regions hide


def _unit(total_ms: float) -> tuple[str, float]:
    """The timeline's unit: ms, or µs / ns for a program of estimates on a GPU (nanoseconds)."""
    for unit, scale in (("ms", 1.0), ("µs", 1e3)):
        if total_ms * scale >= 0.5:
            return unit, scale
    return "ns", 1e6


def run_order(plan: Plan, kind: str) -> list[RegionView]:
    """A program's regions as they run; a preview's kernels and the torch calls between them in
    an order their dataflow allows, nearest the program's own."""
    regions, calls = plan.programs.get(kind, []), plan.calls.get(kind, [])
    if not calls:
        return regions
    nodes = {r.id: r for r in regions + calls}
    g: nx.DiGraph = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from((e.src, e.dst) for e in dataflow.edges(regions + calls, plan.views.get(kind, [])))
    at = {i: n for n, i in enumerate(plan.order.get(kind, []))}
    return [nodes[i] for i in nx.lexicographical_topological_sort(g, key=lambda i: at.get(i, len(at)))]


def _bar(regions: list[RegionView], lane: str, starts: dict[str, float], scale: float, meta: str) -> go.Bar:
    """One bar a region at its start (hatched and outlined: an estimate)."""
    fill = [CALL_COLOR if meta == "calls" else color(r.executor) for r in regions]
    return go.Bar(y=[lane] * len(regions), x=[(r.time_ms or 0.0) * scale for r in regions],
                  base=[starts[r.id] for r in regions], orientation="h", customdata=[r.id for r in regions],
                  marker=dict(color=fill, line=dict(width=[0 if r.basis == "measured" else 1 for r in regions],
                                                    color=SLICE_LINE),
                              pattern=dict(shape=["" if r.basis == "measured" else "/" for r in regions], size=6)),
                  hovertext=[hover(r) for r in regions], hovertemplate="%{hovertext}<extra></extra>",
                  text=[r.id for r in regions], textposition="inside", insidetextanchor="middle",
                  showlegend=False, meta=meta, name=lane)


def _stages(stage_ms: dict[str, float], compile_ms: float | None) -> go.Bar:
    """The compile's own stages, one bar each in pipeline order (the whole compile where the
    report has no stage times: an older writer's)."""
    stages = {k: v for k, v in stage_ms.items() if v} or ({"compile": compile_ms} if compile_ms else {})
    starts, s = [], 0.0
    for v in stages.values():
        starts.append(s)
        s += v
    # no red: red is a collective's on the lane above
    palette = ["#6f42c1", "#0a7ea4", "#2da44e", "#bf8700", "#bf3989", "#8250df", "#1b7c83", "#953800"]
    return go.Bar(y=["compile"] * len(stages), x=list(stages.values()), base=starts, orientation="h",
                  customdata=list(stages), text=list(stages), textposition="inside", insidetextanchor="middle",
                  marker=dict(color=[palette[i % len(palette)] for i in range(len(stages))]),
                  hovertemplate="%{customdata}: %{x:.1f} ms<extra>compile stage</extra>",
                  showlegend=False, meta="stages", name="compile")


@dataclass
class _Lane:
    """A program's lane: its regions as they run, where each starts and where the lane ends."""

    regions: list[RegionView]
    starts: dict[str, float]
    end: float


def _lane(regions: list[RegionView], t0: float, scale: float) -> _Lane:
    starts, t = {}, t0
    for r in regions:
        starts[r.id] = t
        t += (r.time_ms or 0.0) * scale
    return _Lane(regions, starts, t)


def _collective_ms(c: R.Collective) -> tuple[float, str]:
    """A collective's time: measured (its slowest rank: the step waits for it), else the comm
    model on this machine's calibration, else the estimate on the report's cluster."""
    if c.time_ms is not None:
        return c.time_ms.max, "measured, slowest rank"
    if c.model_ms is not None:
        return c.model_ms, "model on this machine's calibration"
    return c.estimate_ms or 0.0, "estimate" if c.estimate_ms is not None else "no time"


def _wait(c: R.Collective, lane: _Lane, scale: float) -> tuple[str | None, float]:
    """Where the program waits for `c`: at the first region after its issue that reads what the
    issue made, else after the last region that overlaps it, else at its issue."""
    ids = [r.id for r in lane.regions]
    issue = lane.starts.get(c.region, lane.end)
    if c.region in ids:
        i = ids.index(c.region)
        made = {t["name"] for t in lane.regions[i].outputs}
        for r in lane.regions[i + 1:]:
            if made & {t["name"] for t in r.inputs}:
                return r.id, lane.starts[r.id]
    over = [r for r in lane.regions if r.id in c.overlapped_by]
    return None, (lane.starts[over[-1].id] + (over[-1].time_ms or 0.0) * scale) if over else issue


def _collective_text(c: R.Collective, ms: float, basis: str, span: str, exposed: float, unit: str) -> str:
    ranks = ", ".join(f"rank {i}: {R.format_ms(t, missing='-')}" for i, t in enumerate(c.rank_ms))
    lines = [f"{c.op} {R.format_bytes(c.bytes)} over {c.group_size} ranks ({c.kind})",
             f"{R.format_ms(ms)} ({basis})" + (f"; {ranks}" if ranks else ""), span,
             f"exposed (not hidden by the regions it overlaps): {exposed:.3g} {unit}"]
    if c.estimate:
        lines.append(c.estimate + (f", exposed {R.format_ms(c.exposed_ms)}" if c.exposed_ms is not None else ""))
    return "<br>".join(html.escape(line, quote=False) for line in lines if line)


def _collectives(collectives: list[R.Collective], lanes: dict[str, _Lane], scale: float,
                 unit: str) -> list[go.Bar]:
    """Each collective on its program's comm lane, from its issue (the start of the region that
    issues it; the lane's end for DDP's own hooks) for its time: light where the regions between
    its issue and its wait hide it, solid where they do not; and over its program's lane, the
    span from its issue to its wait outlined (the regions that overlap it)."""
    full: dict[str, list[Any]] = {k: [] for k in ("y", "base", "x", "id", "text")}
    exposed: dict[str, list[Any]] = {k: [] for k in ("y", "base", "x", "text")}
    spans: dict[str, list[Any]] = {k: [] for k in ("y", "base", "x", "text")}
    free = 0.0  # collectives of a group run one after another: one starts when the last is done
    for c in collectives:
        lane = lanes.get(c.program)
        if lane is None:
            continue
        ms, basis = _collective_ms(c)
        issue, (wait_id, x1), d = lane.starts.get(c.region, lane.end), _wait(c, lane, scale), ms * scale
        x0 = max(issue, free)
        free = x0 + d
        hidden = max(0.0, min(x0 + d, x1) - x0) if c.overlapped_by else 0.0
        span = (f"in flight from {c.region or 'the hook'} to its wait{f' {wait_id}' if wait_id else ''}, "
                f"overlapped by {', '.join(c.overlapped_by)}" if c.overlapped_by else "synchronous: nothing overlaps it"
                )
        text = _collective_text(c, ms, basis, span, d - hidden, unit)
        for key, value in (("y", f"{c.program} comm"), ("base", x0), ("x", d), ("id", c.region), ("text", text)):
            full[key].append(value)
        for key, value in (("y", f"{c.program} comm"), ("base", x0 + hidden), ("x", d - hidden), ("text", text)):
            exposed[key].append(value)
        if c.overlapped_by and x1 > issue:
            for key, value in (("y", c.program), ("base", issue), ("x", x1 - issue), ("text", text)):
                spans[key].append(value)
    if not full["y"]:
        return []
    common = dict(orientation="h", hovertemplate="%{hovertext}<extra>collective</extra>", showlegend=False)
    return [
        go.Bar(y=exposed["y"], x=exposed["x"], base=exposed["base"], hovertext=exposed["text"],
               marker=dict(color=COLLECTIVE_COLOR), meta="exposed", name="exposed", **common),
        go.Bar(y=full["y"], x=full["x"], base=full["base"], customdata=full["id"], hovertext=full["text"],
               marker=dict(color=HIDDEN_COLOR, line=dict(width=1, color=COLLECTIVE_COLOR)), meta="collectives",
               name="collectives", text=[c.op for c in collectives if c.program in lanes],
               textposition="inside", insidetextanchor="start", insidetextfont=dict(color="white"), **common),
        go.Bar(y=spans["y"], x=spans["x"], base=spans["base"], hovertext=spans["text"],
               marker=dict(color="rgba(0, 0, 0, 0)", line=dict(width=2, color=COLLECTIVE_COLOR)),
               meta="overlap", name="issue to wait", **common),
    ]


def timeline(plan: Plan, stage_ms: dict[str, float], compile_ms: float | None,
             collectives: list[R.Collective] | None = None) -> dict[str, Any]:
    """The programs' regions in order (a training step: the forward, then the backward), each
    as long as its time (hatched: a roofline estimate), a preview's torch calls between its
    kernels (grey), the collectives that ran (red, on a lane under their program's), and the
    compile's own stages below."""
    comms = (collectives or []) if plan.ran else []
    orders = {k: run_order(plan, k) for k, rs in plan.programs.items() if rs}
    unit, scale = _unit(sum(r.time_ms or 0.0 for rs in orders.values() for r in rs)
                        + sum(_collective_ms(c)[0] for c in comms))
    fig = make_subplots(rows=2, cols=1, row_heights=[0.6, 0.4], vertical_spacing=0.3,
                        subplot_titles=[f"regions in execution order ({unit}; hatched: roofline estimate)"
                                        + ("<br>red: collectives (solid: exposed; outlined: issue to wait)"
                                           if comms else ""),
                                        "the compile's stages (ms)"])
    t, lanes = 0.0, {}
    for kind, order in orders.items():
        lanes[kind] = _lane(order, t, scale)
        t = lanes[kind].end
        fig.add_trace(_bar(plan.programs[kind], kind, lanes[kind].starts, scale, "slices"), row=1, col=1)
        if plan.calls.get(kind):
            fig.add_trace(_bar(plan.calls[kind], kind, lanes[kind].starts, scale, "calls"), row=1, col=1)
    for trace in _collectives(comms, lanes, scale, unit):
        fig.add_trace(trace, row=1, col=1)
    with_comm = {c.program for c in comms if c.program in lanes}
    categories = [y for k in lanes for y in ([k, f"{k} comm"] if k in with_comm else [k])]
    fig.add_trace(_stages(stage_ms, compile_ms), row=2, col=1)
    fig.update_annotations(font_size=13)  # the subplot titles: one line in half the page's width
    fig.update_xaxes(title=unit, gridcolor=GRID, exponentformat="none", row=1, col=1)
    fig.update_xaxes(title="ms", gridcolor=GRID, row=2, col=1)
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=categories, row=1, col=1)
    fig.update_layout(height=380 + 40 * len(with_comm), margin=dict(l=90, r=10, t=50 if comms else 30, b=40),
                      font=FONT, plot_bgcolor=BG, paper_bgcolor=BG, barmode="overlay", bargap=0.25,
                      hovermode="closest", dragmode="zoom")
    return fig.to_plotly_json()
