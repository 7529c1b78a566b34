"""The HTML report: one self-contained page of a compile (issue 20, docs/pictures.md).

    html = render(report)                       # sources read from the report's files
    html = render(report, {path: text}, nonce="abc")   # a webview's: every script/style nonce'd
    html = render_all(reports)                  # a file's targets on one page, a menu between them

The page shows the user's source shaded by the time each line costs, the fusion graph of
each program, a roofline chart and a timeline (regions, and the compile's stages); clicking
a line or a region links them all. Plotly draws the roofline and the timeline (a partial
plotly.js bundle inlined), dagre lays out the fusion graph in the page (graph.js, vendor/);
this package imports no torch, so the language server renders it too.
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


def render_all(reports: list[R.CompileReport], sources: dict[str, str] | None = None, *, nonce: str | None = None,
               target: str | None = None) -> str:
    """One page of several reports (a file's targets) with a menu choosing among them; `target`
    the one shown first (default: the first)."""
    from fusionlens.report.html import page

    return page.render_pages(reports, sources, nonce, target)


def write(report: R.CompileReport, path: str, sources: dict[str, str] | None = None) -> None:
    write_all([report], path, sources)


def write_all(reports: list[R.CompileReport], path: str, sources: dict[str, str] | None = None) -> None:
    """Exactly `path`: the page of every report."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_all(reports, sources))
