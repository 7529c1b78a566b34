"""The HTML of the report page: one self-contained file (a partial plotly.js bundle, dagre,
the page's script and style inlined; no network at view time) holding every target of a file
with a menu, every <script> and <style> carrying the nonce a webview's Content-Security-Policy
names."""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
from importlib import resources
from typing import Any

from fusionlens.report import schema as R
from fusionlens.report.html import figures, graph, kernels, model, timeline


def _asset(name: str) -> str:
    return resources.files("fusionlens.report.html").joinpath(name).read_text(encoding="utf-8")


def vendored(name: str) -> str:
    """A bundle of vendor/ (README.md there says what, where from, and its licence), less its
    source-map comment (the map is not shipped)."""
    return re.sub(r"//# sourceMappingURL=\S+\s*$", "", _asset(f"vendor/{name}"))


# plotly.js adds style elements of its own where none with their id exists: its rules' (which it
# then fills by insertRule) and the map library's (a text it sets, unused here: no map traces).
# Made here with the nonce, they are what it finds, so nothing it does violates a webview's CSP.
_PLOTLY_STYLE = re.compile(r'getElementById\("([0-9a-f]{16,})"\)\)\{var \w+=document\.createElement\("style"\)')


def _plotly_styles(js: str, n: str) -> str:
    ids = ["plotly.js-style-global"] + _PLOTLY_STYLE.findall(js)
    return "".join(f'<style id="{i}"{n}></style>' for i in ids)


def _json_for_script(value: Any) -> str:
    """JSON safe inside a <script> element: no `<` that could close it or open a comment (and,
    json's default, every non-ASCII character escaped)."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


def _region_dict(r: model.RegionView) -> dict[str, Any]:
    out = dataclasses.asdict(r)
    out.update(time=R.format_ms(r.time_ms, missing="-"), roof=R.format_ms(r.roof_ms, missing="-"))
    return out


def _note(plan: model.Plan, report: R.CompileReport) -> str:
    """What the shading and the times of a plan are: measured, or roofline estimates."""
    bases = {r.basis for rs in plan.programs.values() for r in rs}
    gpu = report.peaks.device if report.peaks else "the target GPU"
    if bases == {"measured"}:
        return f"shaded by measured time on {report.device_name} (median per region)"
    if "measured" in bases:
        return (f"shaded by measured time on {report.device_name}; unmeasured regions by their roofline "
                f"estimate on {gpu}")
    return f"shaded by roofline estimate on {gpu} (not measured: the least time each region can take there)"


def page_data(report: R.CompileReport, sources: dict[str, str] | None) -> tuple[dict[str, Any], dict[str, str]]:
    """The page's JSON and the text of every file it shows."""
    files = model.report_files(report)
    texts = model.read_sources(files, sources)
    plans = model.plans(report, files)
    stage_ms = dict(report.stage_ms)
    ops: dict[str, list[dict[str, Any]]] = {}
    for o in report.ops:
        ops.setdefault(f"{o.file}:{o.line}", []).append({"name": o.name, "trace": o.trace, "region": o.region})
    data = {
        "plans": [{"key": p.key, "label": p.label, "ran": p.ran, "note": _note(p, report), "heat": p.heat,
                   "heat_text": {k: R.format_ms(v) for k, v in p.heat.items()},
                   "programs": {k: [_region_dict(r) for r in rs] for k, rs in p.programs.items()},
                   "calls": {k: [_region_dict(r) for r in rs] for k, rs in p.calls.items()}} for p in plans],
        "figures": {p.key: {"roofline": figures.roofline(p, report.peaks, report.device_name),
                            "timeline": timeline.timeline(p, stage_ms, report.compile_ms, report.collectives)}
                    for p in plans},
        "graphs": {p.key: graph.graph(p, report.collectives) for p in plans},
        "ops": ops,
        "default": model.default_plan(plans),
        "gpu": report.peaks.device if report.peaks else "the target GPU",
        "device": report.device_name or report.device,
    }
    return data, texts


def _source_html(report: R.CompileReport, texts: dict[str, str]) -> str:
    """Each file's lines (`[data-line]` rows under #source); the target's whole file first."""
    wanted: dict[str, set[int]] = {}
    for o in report.ops:
        wanted.setdefault(o.file, set()).add(o.line)
    for p in report.programs:
        for r in p.regions:
            for s in r.source_lines:
                wanted.setdefault(s.file, set()).add(s.line)
    out = []
    for path, text in texts.items():
        rows, last = [], 0
        for n, line in model.shown_lines(path, text, wanted.get(path, set()), path == report.target.file):
            if last and n > last + 1:
                rows.append('<div class="gap">⋯</div>')
            f = html.escape(path, quote=True)
            rows.append(f'<div class="ln" data-file="{f}" data-line="{n}"><span class="no">{n}</span>'
                        f'<span class="ms"></span><code>{html.escape(line) or " "}</code></div>')
            last = n
        name = html.escape(model.short_path(path, report.target.file))
        out.append(f'<div class="file" data-file="{html.escape(path, quote=True)}"><div class="file-name">{name}</div>'
                   + "".join(rows) + "</div>")
    return "".join(out) or '<p class="muted">The source is not available.</p>'


def _summary(report: R.CompileReport) -> str:
    """The header's facts: where it ran, the executors, compile time, speedups, training."""
    facts = [f"{html.escape(report.device_name)}", "executors: " + html.escape(", ".join(report.executors))]
    if report.compile_ms is not None:
        facts.append(f"compile {R.format_ms(report.compile_ms)}")
    for what, tm in (("call", report.forward.timings), ("training step", report.training and report.training.step)):
        if tm and tm.compiled and tm.eager and tm.speedup_vs_eager:
            facts.append(f"{what}: {R.format_ms(tm.compiled.median_ms)} vs eager {R.format_ms(tm.eager.median_ms)} "
                         f"({tm.speedup_vs_eager:.2f}x)")
    if report.training is not None:
        facts.append(f"saved for backward: {R.format_bytes(report.training.saved_bytes)}")
    if report.ranks:
        facts.append(f"{len(report.ranks)} ranks")
    if report.collectives:
        facts.append(f"{len(report.collectives)} collective(s), "
                     f"{R.format_bytes(sum(c.bytes for c in report.collectives))} a rank")
    if report.peaks is not None:
        facts.append(f"rooflines: {report.peaks.device}{' (estimate)' if report.peaks.estimate else ''}")
    return "".join(f"<span>{f}</span>" for f in facts)


def _diagnostics(report: R.CompileReport) -> str:
    shown = [d for d in report.diagnostics if d.severity in ("error", "warning")]
    if not shown:
        return ""
    items = "".join(f'<li class="{d.severity}">{html.escape(d.severity)}: '
                    f'{html.escape(os.path.basename(d.file) + ":" + str(d.line) + ": ") if d.file else ""}'
                    f"{html.escape(d.message)}</li>" for d in shown)
    return f'<details class="diagnostics"><summary>{len(shown)} warning(s)</summary><ul>{items}</ul></details>'


def _target(report: R.CompileReport, sources: dict[str, str] | None) -> tuple[dict[str, Any], str, str]:
    """A target's entry of the page's JSON, its header (summary, warnings) and its source."""
    t = report.target
    entry: dict[str, Any] = {"name": t.name, "where": f"{model.short_path(t.file, t.file)}:{t.line}" if t.file else ""}
    if report.status != "ok":
        e = report.error
        entry["error"] = f"{e.file}:{e.line}: {e.message}" if e else "compile failed"
        return entry, "", ""
    data, texts = page_data(report, sources)
    entry["data"] = data
    head = f'<div class="summary">{_summary(report)}</div>{_diagnostics(report)}{kernels.table(report)}'
    return entry, head, _source_html(report, texts)


def render_page(report: R.CompileReport, sources: dict[str, str] | None, nonce: str | None) -> str:
    return render_pages([report], sources, nonce)


def render_pages(reports: list[R.CompileReport], sources: dict[str, str] | None, nonce: str | None,
                 selected: str | None = None) -> str:
    """One page of every report (a file's targets), a menu choosing among them; `selected` the
    target shown first (default: the first)."""
    n = f' nonce="{html.escape(nonce, quote=True)}"' if nonce else ""
    if len(reports) == 1 and reports[0].status != "ok":
        e, t = reports[0].error, reports[0].target
        body = (f'<p class="error">{html.escape(f"{e.file}:{e.line}: {e.message}" if e else "compile failed")}</p>')
        return _TEMPLATE_ERROR.format(n=n, title=html.escape(t.name), css=_asset("page.css"), body=body)
    entries, templates = [], []
    for i, report in enumerate(reports):
        entry, head, source = _target(report, sources)
        entries.append(entry)
        templates.append(f'<template id="head-{i}">{head}</template><template id="source-{i}">'
                         f'{source or "<p class=muted>The source is not available.</p>"}</template>')
    names = [e["name"] for e in entries]
    first = names.index(selected) if selected in names else 0
    targets = "".join(f'<option value="{i}"{" selected" if i == first else ""}>{html.escape(name)}</option>'
                      for i, name in enumerate(names))
    plotly = vendored("plotly-basic.min.js")
    return _TEMPLATE.format(
        n=n, plotly_styles=_plotly_styles(plotly, n), title=html.escape(" · ".join(names)), css=_asset("page.css"),
        targets=targets, single=" hidden" if len(reports) == 1 else "", templates="".join(templates),
        data=_json_for_script({"targets": entries, "first": first}), plotly=plotly, dagre=vendored("dagre.min.js"),
        graph_js=_asset("graph.js"), js=_asset("page.js"))


_TEMPLATE_ERROR = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>FusionLens · {title}</title>
<style{n}>{css}</style></head><body><header><h1>{title}</h1></header>{body}</body></html>
"""

_TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>FusionLens · {title}</title>
{plotly_styles}
<style{n}>{css}</style>
</head>
<body>
<header>
  <h1><span id="target-name"></span> <span class="muted" id="target-where"></span></h1>
  <label class="target"{single}>target <select id="target">{targets}</select></label>
  <div id="target-head"></div>
  <div class="plan-bar"><label class="plan">show <select id="plan"></select></label>
    <span id="plan-note"></span></div>
</header>
<p class="error" id="target-error" hidden></p>
<main id="main">
  <div class="top">
    <section class="pane source-pane">
      <h2>Source <span id="heat-note" class="muted"></span></h2>
      <div id="source"></div>
    </section>
    <aside class="pane" id="details"></aside>
  </div>
  <section class="pane graph-pane"><h2>Fusion graph <span class="muted">regions grouped by module (click a group to
    open it, its header to close it); hover an edge for its tensor; drag to pan, wheel to zoom</span>
    <span class="graph-tools"><button type="button" data-graph="expand">open all</button><button type="button"
    data-graph="collapse">close all</button><button type="button" data-graph="fit">fit</button></span></h2>
    <div id="graph-legend" class="legend"></div>
    <div id="fusion-graph" class="graph"></div></section>
  <div class="bottom">
    <section class="pane"><h2>Roofline</h2><div id="roofline" class="chart"></div></section>
    <section class="pane"><h2>Timeline</h2><div id="timeline" class="chart"></div></section>
  </div>
</main>
{templates}
<script type="application/json" id="fl-data"{n}>{data}</script>
<script{n}>{dagre}</script>
<script{n}>{graph_js}</script>
<script{n}>{js}</script>
<script type="text/plain" id="plotly-js"{n}>{plotly}</script>
</body>
</html>
"""
