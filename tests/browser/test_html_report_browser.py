"""The HTML report of every example file in headless Chromium (Debian's, driven by playwright):
no console error, nothing fetched, one graph node and one roofline point a region drawn, the
timeline's slices, a click on a line selecting its regions, a kernel line leading back to its
source line, the editor's cursor message followed; a file's targets on one page and its menu;
the fusion graph's layout (no overlap, few crossings, groups that open and close, readable at a
webview's width); the GPU's plan first on a CPU. Screenshots go to test-output/html/.

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
    """Each example file's first target that runs in one process (tests/test_html_report.py
    reads the pages of the others without a browser)."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.py"))):
        with open(path, encoding="utf-8") as f:
            # planned at scale (plan=...: a 22B model on the meta device) is `fusionlens plan`'s, not a page's
            out += [(path, t.name) for t in find_targets(f.read(), path) if not t.nproc and not t.plan][:1]
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
    page.wait_for_function("window.fusionlens !== undefined && window.fusionlens.chartsAt !== undefined")
    return page, problems


# What each picture drew, counted in the page: the fusion graph's SVG nodes (every group opened
# first), the charts' traces' points (Plotly's calcdata) and their SVG marks in the DOM.
_COUNTS = """() => {
  const gd = (id) => document.getElementById(id);
  const ids = (id, meta) => gd(id).data.filter((t) => t.meta === meta).map((t) => Array.from(t.customdata));
  window.fusionlens.graph().expandAll();
  const drawn = (cls) => Array.from(document.querySelectorAll("#fusion-graph .program")).map(
    (p) => Array.from(p.querySelectorAll(".node." + cls)).map((n) => n.dataset.id));
  return {
    nodes: drawn("region"), calls: drawn("call"),
    groups: document.querySelectorAll("#fusion-graph .node.group").length,
    estimate: ids("roofline", "estimate"), slices: ids("timeline", "slices"),
    stages: ids("timeline", "stages"),
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
        page.evaluate("window.fusionlens.setPlan('ran')")
        c = page.evaluate(_COUNTS)
        programs = [[r.id for r in p.regions] for p in report.programs if p.regions]
        assert [sorted(n) for n in c["nodes"]] == [sorted(p) for p in programs]
        assert c["groups"] == 0 and c["calls"] == [[] for _ in programs]  # every group open: only regions
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
        page.locator(f'#fusion-graph .node.call[data-id="{c["calls"][0][0]}"]').click()
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
        page.wait_for_function("window.fusionlens !== undefined && window.fusionlens.chartsAt !== undefined")
        page.evaluate("window.fusionlens.setPlan('ran')")
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
        page.wait_for_function("window.fusionlens !== undefined && window.fusionlens.chartsAt !== undefined")
        page.evaluate("window.fusionlens.setPlan('ran')")
        region = report.forward.regions[-1]
        where = region.source_lines[0]
        page.locator(f'#source .ln[data-file="{where.file}"][data-line="{where.line}"]').click()
        # a click on the region's node (its groups opened: a click on a line leaves them as they are)
        page.evaluate("(id) => window.fusionlens.graph().reveal(id)", region.id)
        page.locator(f'#fusion-graph .node[data-id="{region.id}"]').click()
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
          graph: getComputedStyle(document.querySelector("#fusion-graph .node.region > rect")).fill};
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
        assert ink["paper"] == "#1e1e1e" and ink["font"] == "#d4d4d4", ink
        assert ink["graph"] == "rgb(30, 30, 30)", ink  # the graph's SVG takes the page's variables
        assert ink["tick"] == "rgb(212, 212, 212)", ink
        region = report.forward.regions[0].id
        page.evaluate("window.fusionlens.setPlan('ran')")
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


# --- issue 31: one page a file, the graph's layout, the GPU's plan first -----------------------

# The graph of one program as drawn: its nodes' boxes (regions, torch calls, closed groups) on
# the screen, how many pairs of them overlap, and how many pairs of its edges cross (edges as the
# polylines of their SVG paths; two edges meeting at a node do not cross there).
_GEOMETRY = """(kind) => {
  const program = document.querySelector(`#fusion-graph .program[data-program="${kind}"]`);
  const boxes = Array.from(program.querySelectorAll(".node")).map(
    (n) => n.querySelector("rect").getBoundingClientRect());
  let overlaps = 0;
  boxes.forEach((a, i) => boxes.slice(i + 1).forEach((b) => {
    if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) overlaps++;
  }));
  const edges = Array.from(program.querySelectorAll("path.edge")).map((p) => {
    const pts = p.getAttribute("d").slice(1).split(" L").map((xy) => xy.split(",").map(Number));
    return pts.slice(1).map((q, i) => [pts[i], q]);
  });
  const side = (a, b, c) => (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]);
  const cross = (s, t) => side(t[0], t[1], s[0]) * side(t[0], t[1], s[1]) < 0
    && side(s[0], s[1], t[0]) * side(s[0], s[1], t[1]) < 0;
  let crossings = 0;
  edges.forEach((e, i) => edges.slice(i + 1).forEach((f) => {
    if (e.some((s) => f.some((t) => cross(s, t)))) crossings++;
  }));
  const scale = window.fusionlens.graph().state().transform.k;
  return {nodes: boxes.length, edges: edges.length, overlaps: overlaps, crossings: crossings, scale: scale,
          regions: program.querySelectorAll(".node.region").length,
          groups: program.querySelectorAll(".node.group").length};
}"""

# What networkx's layered layout (rows of at most three nodes a layer, the page before issue 31)
# drew for examples/train_gpt.py's gpt_loss_example, counted from its figure's edge segments on
# this CPU: the backward of what ran (142 regions, 159 edges) crossed 512 times, the Triton
# preview's backward (69 nodes with its torch calls, 80 edges) 77 times.
_CROSSINGS_BEFORE = {"ran": 512, "triton": 77}


def _page_of(example: str, target: str, **kwargs):
    with torch.random.fork_rng():
        report = compile_target(os.path.join(ROOT, "examples", example), target, benchmark=False, **kwargs)
    assert report.status == "ok", report.error
    os.makedirs(OUT, exist_ok=True)
    file = os.path.join(OUT, f"{example[:-3]}_{target}.html")
    html_report.write(report, file)
    return report, file


@pytest.fixture(scope="module")
def train_page():
    """examples/train_gpt.py's gpt_loss_example (62 forward, 142 backward regions here)."""
    return _page_of("train_gpt.py", "gpt_loss_example")


def test_the_html_of_a_file_of_two_targets_is_one_page_whose_menu_switches(browser, tmp_path):
    from fusionlens import cli

    out = tmp_path / "out.html"
    code = cli.main(["compile", os.path.join(ROOT, "examples", "gpt_block.py"), "--no-benchmark", "--html", str(out)])
    assert code == 0 and os.listdir(tmp_path) == ["out.html"]  # exactly the file asked for
    assert out.stat().st_size <= 2_000_000  # issue 31: a page of gpt_block.py weighs at most 2 MB
    page, problems = _open(browser, str(out))
    try:
        options = page.eval_on_selector_all("#target option", "(os) => os.map((o) => o.textContent)")
        assert options == ["gpt_block_example", "gpt_block_sdpa_example"]
        assert page.evaluate("window.fusionlens.target()") == "gpt_block_example"
        first = page.evaluate(_COUNTS)
        page.select_option("#target", "1")
        assert page.evaluate("window.fusionlens.target()") == "gpt_block_sdpa_example"
        assert page.inner_text("#target-name") == "gpt_block_sdpa_example"
        second = page.evaluate(_COUNTS)
        # the SDPA block's preview: fewer kernels and torch calls than the block with its own attention
        assert sum(map(len, second["nodes"])) and second["nodes"] != first["nodes"]
        assert second["slices"] != first["slices"] and page.locator("#source .ln").count()
        page.locator("#source .ln.has-ops").first.click()
        assert page.evaluate("window.fusionlens.selected()")["regions"]
        os.makedirs(OUT, exist_ok=True)
        page.screenshot(path=os.path.join(OUT, "two_targets.png"), full_page=True)
        assert not problems, problems
    finally:
        page.close()


@pytest.mark.parametrize("plan", ["ran", "triton"])
def test_the_backward_of_train_gpt_has_no_overlap_and_fewer_crossings(browser, train_page, plan):
    report, file = train_page
    page, problems = _open(browser, file)
    try:
        page.evaluate("(key) => window.fusionlens.setPlan(key)", plan)
        closed = page.evaluate(_GEOMETRY, "backward")
        page.evaluate("window.fusionlens.graph().expandAll()")
        opened = page.evaluate(_GEOMETRY, "backward")
        if plan == "ran":
            assert opened["regions"] == len(report.programs[1].regions)
        assert opened["groups"] == 0 and opened["overlaps"] == 0 and closed["overlaps"] == 0, (closed, opened)
        assert opened["crossings"] < _CROSSINGS_BEFORE[plan], opened
        assert closed["nodes"] < opened["nodes"] and closed["crossings"] <= opened["crossings"]
        page.locator("#fusion-graph").screenshot(path=file[:-5] + f"_{plan}_graph.png")
        assert not problems, problems
    finally:
        page.close()


def test_groups_open_and_close_on_click_and_the_graph_pans_and_zooms(browser, train_page):
    _, file = train_page
    page, problems = _open(browser, file)
    try:
        page.evaluate("window.fusionlens.setPlan('ran')")
        program = '#fusion-graph .program[data-program="backward"]'

        def click(selector):  # what a user does: pan the graph to it, click it
            page.evaluate("(s) => window.fusionlens.graph().panTo(document.querySelector(s))", selector)
            page.locator(selector).click()

        group = page.locator(f'{program} .node.group[data-group="h"]')
        assert group.count() == 1 and page.locator(f'{program} .node.region').count() < 30  # closed: one node
        click(f'{program} .node.group[data-group="h"]')
        assert page.locator(f'{program} .box[data-group="h"]').count() == 1  # open: a box around its parts
        assert page.locator(f'{program} .node.group[data-group="h.0"]').count() == 1  # whose groups are closed
        click(f'{program} .node.group[data-group="h.0"]')
        inside = page.locator(f'{program} .node').count()
        assert page.locator(f'{program} .box[data-group="h.0"]').count() == 1
        click(f'{program} .box[data-group="h"] .box-head')  # its header closes it
        assert page.locator(f'{program} .node.group[data-group="h"]').count() == 1
        assert page.locator(f'{program} .node').count() < inside
        # an edge's tensor on hover: its dtype and shape
        page.evaluate("(s) => window.fusionlens.graph().panTo(document.querySelector(s))", f"{program} path.edge")
        page.locator(f"{program} path.edge-hit").first.hover(force=True)
        assert "[" in page.inner_text("#fusion-graph .graph-tip")
        # wheel zooms, drag pans
        before = page.evaluate("window.fusionlens.graph().state().transform")
        box = page.locator("#fusion-graph svg").bounding_box()
        page.mouse.move(box["x"] + 40, box["y"] + 40)
        page.mouse.wheel(0, -300)
        zoomed = page.evaluate("window.fusionlens.graph().state().transform")
        assert zoomed["k"] > before["k"]
        page.mouse.down()
        page.mouse.move(box["x"] + 140, box["y"] + 90)
        page.mouse.up()
        panned = page.evaluate("window.fusionlens.graph().state().transform")
        assert panned["x"] == pytest.approx(zoomed["x"] + 100) and panned["y"] == pytest.approx(zoomed["y"] + 50)
        assert not problems, problems
    finally:
        page.close()


def test_on_a_cpu_the_page_opens_on_the_gpus_plan_with_what_ran_one_click_away(browser):
    report, file = _page_of("gpt_block.py", "gpt_block_example")
    if set(report.executors) != {"torch"}:
        pytest.skip("a fusion executor ran here: the page opens on what ran")
    page, problems = _open(browser, file)
    try:
        assert page.evaluate("window.fusionlens.plan()") == "triton"
        assert page.input_value("#plan") == "triton"
        note = page.inner_text("#plan-note")
        assert "triton preview" in note and "not run on this machine" in note, note
        assert "estimate" in page.inner_text("#heat-note")
        page.locator("#plan-note button").click()
        assert page.evaluate("window.fusionlens.plan()") == "ran"
        assert "what ran here" in page.inner_text("#plan-note")
        assert not problems, problems
    finally:
        page.close()


_BIG = """import sys
sys.path.insert(0, {examples!r})
import torch
import compiler
from gpt_block import GPTConfig
from train_gpt import GPT


@compiler.example(train=True)
def gpt6_loss_example():
    model = GPT(GPTConfig(n_embd=64, n_head=4, block_size=32, dropout=0.0, use_sdpa=True), n_layer=6)
    idx = torch.randint(0, 512, (2, 32))
    return model, (idx, torch.roll(idx, -1, dims=1))
"""


def test_a_250_region_backward_is_readable_at_a_webviews_width(browser, tmp_path):
    """A 6-layer GPT's training step (its attention's backward one fused call a layer): its backward's
    regions, grouped, at the width of an editor's side panel (800 px): few nodes, none overlapping,
    labels drawn at 9 px or more."""
    path = tmp_path / "gpt6.py"
    path.write_text(_BIG.format(examples=os.path.join(ROOT, "examples")), encoding="utf-8")
    with torch.random.fork_rng():
        report = compile_target(str(path), "gpt6_loss_example", benchmark=False)
    assert report.status == "ok", report.error
    assert len(report.programs[1].regions) >= 250
    os.makedirs(OUT, exist_ok=True)
    file = os.path.join(OUT, "gpt6_loss_example.html")
    html_report.write(report, file)
    page = browser.new_page(viewport={"width": 800, "height": 900})
    try:
        page.goto("file://" + file)
        page.wait_for_function("window.fusionlens !== undefined && window.fusionlens.chartsAt !== undefined")
        page.evaluate("window.fusionlens.setPlan('ran')")
        shown = page.evaluate(_GEOMETRY, "backward")
        assert shown["nodes"] <= 40 and shown["overlaps"] == 0, shown
        assert shown["scale"] * 11 >= 9, shown  # 11 px labels, never drawn smaller than 9 px
        page.locator("#fusion-graph").screenshot(path=file[:-5] + "_graph.png")
        page.evaluate("window.fusionlens.graph().expandAll()")
        opened = page.evaluate(_GEOMETRY, "backward")
        assert opened["regions"] == len(report.programs[1].regions) and opened["overlaps"] == 0, opened
    finally:
        page.close()
