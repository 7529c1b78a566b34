"""The HTML report of every example file in headless Chromium (Debian's, driven by playwright):
no console error, nothing fetched, one graph node and one roofline point a region drawn, the
timeline's slices, a click on a line selecting its regions, a kernel line leading back to its
source line, the editor's cursor message followed. Screenshots go to test-output/html/.

Distributed targets (@compiler.example(nproc=N)) are left out: they need their ranks, and
their pages are drawn by the same code from the same report fields.
"""

from __future__ import annotations

import glob
import os
import shutil

import pytest
import torch

from fusionlens.report import html as html_report
from fusionlens.report.discovery import find_targets
from fusionlens.driver.targets import compile_target

pytestmark = pytest.mark.browser
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "test-output", "html")
CHROMIUM = "/usr/bin/chromium"
# Chromium as CI runs it: no sandbox (root in a container), nothing of its own reaching out.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]


def _targets() -> list[tuple[str, str]]:
    """Each example file's first target that runs in one process (a page takes seconds to load:
    plotly.js is 4.8 MB; tests/test_html_report.py reads the pages of others without a browser)."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.py"))):
        with open(path, encoding="utf-8") as f:
            out += [(path, t.name) for t in find_targets(f.read(), path) if not t.nproc][:1]
    return out


TARGETS = _targets()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no {CHROMIUM} (apt-get install chromium; vscode-extension/ci.sh does)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def pages():
    """Each example's page, compiled once: the first benchmarked (measured times), the rest not
    (roofline estimates), so both kinds of page are opened."""
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    out = {}
    with torch.random.fork_rng():
        for i, (path, name) in enumerate(TARGETS):
            report = compile_target(path, name, benchmark=i == 0, repeats=2)
            assert report.status == "ok", report.error
            file = os.path.join(OUT, f"{os.path.basename(path)[:-3]}_{name}.html")
            html_report.write(report, file)
            out[name] = (report, file)
    return out


def _open(browser, file: str, init: str | None = None):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    if init:
        page.add_init_script(init)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    url = "file://" + file
    page.on("request", lambda r: problems.append(f"fetched {r.url}") if r.url != url else None)
    page.goto(url)
    page.wait_for_function("window.fusionlens !== undefined")
    return page, problems


# What each picture drew, counted in the page: its traces' points (Plotly's calcdata) and the
# SVG marks in the DOM.
_COUNTS = """() => {
  const gd = (id) => document.getElementById(id);
  const ids = (id, meta) => gd(id).data.filter((t) => t.meta === meta).map((t) => Array.from(t.customdata));
  return {
    nodes: ids("fusion-graph", "nodes"), calls: ids("fusion-graph", "calls"),
    estimate: ids("roofline", "estimate"), slices: ids("timeline", "slices"),
    stages: ids("timeline", "stages"),
    graphMarks: gd("fusion-graph").querySelectorAll(".scatterlayer path.point").length,
    tensorMarks: gd("fusion-graph").data.filter((t) => t.meta === "tensors").reduce((n, t) => n + t.x.length, 0),
    rooflineMarks: gd("roofline").querySelectorAll(".scatterlayer path.point").length,
    measured: ids("roofline", "measured").flat().length,
    bars: gd("timeline").querySelectorAll(".barlayer path").length,
  };
}"""


@pytest.mark.parametrize("name", [n for _, n in TARGETS])
def test_the_page_draws_every_region_and_links_a_line_to_its_regions(browser, pages, name):
    report, file = pages[name]
    page, problems = _open(browser, file)
    try:
        c = page.evaluate(_COUNTS)
        programs = [[r.id for r in p.regions] for p in report.programs if p.regions]
        assert [sorted(n) for n in c["nodes"]] == [sorted(p) for p in programs]
        assert c["graphMarks"] == sum(map(len, programs)) + c["tensorMarks"]
        assert sorted(sum(c["estimate"], [])) == sorted(sum(programs, []))
        assert c["rooflineMarks"] == sum(map(len, programs)) + c["measured"]
        assert c["slices"] == programs and c["bars"] >= sum(map(len, programs))
        assert c["stages"] and c["stages"][0]
        _click_a_line(page, report)
        page.screenshot(path=file[:-5] + ".png", full_page=True)
        _the_preview_draws_its_regions_and_the_calls_between(page, report)
        assert not problems, problems
    finally:
        page.close()


def _the_preview_draws_its_regions_and_the_calls_between(page, report) -> None:
    """The first preview's graph: a node a region and one a library call of the program between
    them (a region of what ran), every one of them drawn."""
    preview = next((pv.executor for p in report.programs for pv in p.previews if pv.regions), None)
    if preview is None:
        return
    page.select_option("#plan", preview)
    c = page.evaluate(_COUNTS)
    regions = [[r.id for pv in p.previews if pv.executor == preview for r in pv.regions] for p in report.programs]
    assert [sorted(n) for n in c["nodes"]] == [sorted(ids) for ids in regions if ids]
    ran = {r.id for p in report.programs for r in p.regions}
    assert set(sum(c["calls"], [])) <= ran
    assert c["graphMarks"] == sum(map(len, regions)) + sum(map(len, c["calls"])) + c["tensorMarks"]


def _click_a_line(page, report) -> None:
    """The most expensive line with ops: clicking it selects its regions (and shows them); a
    kernel line of one leads back to its source line; a cursor message moves the selection."""
    lines = [(s.file, s.line) for p in report.programs for r in p.regions for s in r.source_lines]
    file, line = max(set(lines), key=lambda fl: (lines.count(fl), -fl[1]))
    row = page.locator(f'#source .ln[data-file="{file}"][data-line="{line}"]')
    row.scroll_into_view_if_needed()
    row.click()
    selected = page.evaluate("window.fusionlens.selected()")
    want = [r.id for p in report.programs for r in p.regions
            if (file, line) in [(s.file, s.line) for s in r.source_lines]]
    assert selected["file"] == file and selected["line"] == line and selected["regions"] == want
    assert page.locator("#details .region").count() == len(want)
    assert page.locator("#source .ln.selected").count() == 1
    link = page.locator("#details .src-link").first
    if link.count():
        back = int(link.get_attribute("data-line"))
        link.click()
        assert page.evaluate("window.fusionlens.selected()")["line"] == back
    page.evaluate("([f, n]) => window.postMessage({type: 'cursor', file: f, line: n}, '*')", [file, line])
    page.wait_for_function(f"window.fusionlens.selected().line === {line}")


def test_a_preview_plan_redraws_every_picture(browser, pages):
    report, file = pages["gpt_block_example"]
    previews = sorted((pv for pv in report.forward.previews if pv.regions), key=lambda pv: pv.executor != "triton")
    if not previews:
        pytest.skip("no executor previewed code here (every fusion executor ran)")
    page, problems = _open(browser, file)
    try:
        page.select_option("#plan", previews[0].executor)
        c = page.evaluate(_COUNTS)
        assert [sorted(n) for n in c["nodes"]] == [sorted(r.id for r in previews[0].regions)]
        # the program's library calls between the kernels are nodes too (grey): linear, matmul
        calls = sum(map(len, c["calls"]))
        assert calls and set(sum(c["calls"], [])) <= {r.id for r in report.forward.regions}
        assert c["graphMarks"] == len(previews[0].regions) + calls + c["tensorMarks"]
        page.evaluate("(id) => { const gd = document.getElementById('fusion-graph'); const t = gd.data.find("
                      "(d) => d.meta === 'calls'); gd.emit('plotly_click', {points: [{customdata: id, data: t}]}); }",
                      c["calls"][0][0])
        assert page.evaluate("window.fusionlens.selected()")["region"] == c["calls"][0][0]
        assert page.locator("#details .region").count() == 1
        assert "estimate" in page.inner_text("#heat-note")
        page.screenshot(path=file[:-5] + f"_{previews[0].executor}.png", full_page=True)
        assert not problems, problems
    finally:
        page.close()


def test_under_a_webview_csp_nothing_is_blocked(browser, pages):
    """VS Code's policy (script-src 'nonce-X'; style-src 'nonce-X' 'unsafe-inline'): with the
    nonce, the page runs and Plotly draws without one violation."""
    report, _ = pages["gpt_loss_example"]
    policy = ("default-src 'none'; script-src 'nonce-t3st'; style-src 'nonce-t3st' 'unsafe-inline'; "
              "img-src data:;")
    meta = f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
    charset = '<meta charset="utf-8">'
    text = html_report.render(report, nonce="t3st").replace(charset, charset + meta, 1)
    file = os.path.join(OUT, "csp_gpt_loss_example.html")
    with open(file, "w", encoding="utf-8") as f:
        f.write(text)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.add_init_script("window.__violations = []; document.addEventListener('securitypolicyviolation', "
                         "(e) => window.__violations.push(e.violatedDirective + ' ' + e.sample));")
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        page.goto("file://" + file)
        page.wait_for_function("window.fusionlens !== undefined")
        c = page.evaluate(_COUNTS)
        assert sum(map(len, c["nodes"])) == sum(len(p.regions) for p in report.programs)
        page.locator("#source .ln.has-ops").first.click()
        assert page.evaluate("window.__violations") == [] and not errors, errors
    finally:
        page.close()


def test_in_a_webview_clicks_post_reveal_to_the_host(browser, pages):
    """With acquireVsCodeApi (as a VS Code webview has it), a click on a line or on a region's
    node posts {type: "reveal", file, line}; the host's cursor message posts nothing back."""
    report, file = pages["gpt_block_example"]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.add_init_script("window.__posted = []; window.acquireVsCodeApi = () => "
                         "({postMessage: (m) => window.__posted.push(m), getState: () => null, setState: () => {}});")
    try:
        page.goto("file://" + file)
        page.wait_for_function("window.fusionlens !== undefined")
        region = report.forward.regions[-1]
        where = region.source_lines[0]
        page.locator(f'#source .ln[data-file="{where.file}"][data-line="{where.line}"]').click()
        # a click on the region's node, as Plotly reports it
        page.evaluate("(id) => { const gd = document.getElementById('fusion-graph'); const t = gd.data.find("
                      "(d) => d.meta === 'nodes'); gd.emit('plotly_click', {points: [{customdata: id, data: t}]}); }",
                      region.id)
        assert page.evaluate("window.fusionlens.selected()")["region"] == region.id
        page.evaluate("([f, n]) => window.postMessage({type: 'cursor', file: f, line: n}, '*')", [where.file, 1])
        page.wait_for_function("window.fusionlens.selected().line === 1")
        posted = page.evaluate("window.__posted")
        assert posted == [{"type": "reveal", "file": where.file, "line": where.line}] * 2
    finally:
        page.close()


# What VS Code's webview sets in a dark theme: the body's class and the theme's colours as variables
_DARK = """document.addEventListener("DOMContentLoaded", () => {
  const s = document.documentElement.style;
  s.setProperty("--vscode-editor-background", "#1e1e1e");
  s.setProperty("--vscode-editor-foreground", "#d4d4d4");
  s.setProperty("--vscode-panel-border", "#444444");
  document.body.classList.add("vscode-dark");
});"""

_INK = """() => {
  const gd = document.getElementById("roofline");
  return {pane: getComputedStyle(document.querySelector(".pane")).backgroundColor,
          text: getComputedStyle(document.querySelector("#source .ln code")).color,
          paper: gd._fullLayout.paper_bgcolor, font: gd._fullLayout.font.color,
          tick: getComputedStyle(gd.querySelector(".xtick text")).fill,
          graph: document.getElementById("fusion-graph")._fullLayout.paper_bgcolor};
}"""


def test_in_a_dark_webview_the_page_takes_the_themes_colours(browser, pages):
    """body.vscode-dark (set after the page drew, as VS Code does): the panes and Plotly's figures
    take the editor's background and foreground, a selection survives the redraw; back in a
    light theme (as in a browser), the page's own light colours."""
    report, file = pages["gpt_block_example"]
    page, problems = _open(browser, file, init=_DARK)
    try:
        page.wait_for_function("document.getElementById('roofline')._fullLayout.paper_bgcolor === '#1e1e1e'")
        ink = page.evaluate(_INK)
        assert ink["pane"] == "rgb(30, 30, 30)" and ink["text"] == "rgb(212, 212, 212)", ink
        assert ink["paper"] == ink["graph"] == "#1e1e1e" and ink["font"] == "#d4d4d4", ink
        assert ink["tick"] == "rgb(212, 212, 212)", ink
        region = report.forward.regions[0].id
        page.evaluate("(id) => window.fusionlens.selectRegion(id)", region)
        page.screenshot(path=file[:-5] + "_dark.png", full_page=True)
        page.evaluate("document.body.classList.remove('vscode-dark')")
        page.wait_for_function("document.getElementById('roofline')._fullLayout.paper_bgcolor === '#ffffff'")
        light = page.evaluate(_INK)
        assert light["pane"] == "rgb(255, 255, 255)" and light["font"] == "#24292f", light
        assert page.evaluate("window.fusionlens.selected()")["region"] == region
        assert not problems, problems
    finally:
        page.close()
