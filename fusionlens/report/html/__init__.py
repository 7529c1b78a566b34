"""The HTML report: one self-contained page of a compile (issue 20, docs/pictures.md).

    html = render(report)                       # sources read from the report's files
    html = render(report, {path: text}, nonce="abc")   # a webview's: every script/style nonce'd

The page shows the user's source shaded by the time each line costs, the fusion graph of
each program, a roofline chart and a timeline (regions, and the compile's stages); clicking
a line or a region links them all. Plotly draws the pictures (plotly.js inlined), networkx
lays out the graph; this package imports no torch, so the language server renders it too.
"""

from __future__ import annotations

from fusionlens.report import schema as R


def render(report: R.CompileReport, sources: dict[str, str] | None = None, *, nonce: str | None = None) -> str:
    """The page of `report`. `sources` maps a file path in the report to its text (an editor's
    buffers); the files it does not hold (all of them for None) are read from disk. With
    `nonce`, every <script> and <style> carries it and nothing needs eval (VS Code's CSP:
    script-src 'nonce-X')."""
    from fusionlens.report.html import page

    return page.render_page(report, sources, nonce)


def write(report: R.CompileReport, path: str, sources: dict[str, str] | None = None) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(report, sources))
