"""The HTML report page (fusionlens/report/html), read without a browser: its structure, one
graph node, one roofline point and one timeline slice a region, the nonce on every script and
style, nothing fetched from outside. tests/browser/ opens the same pages in Chromium."""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser

import pytest
import torch

from fusionlens.report import html as html_report
from fusionlens.driver.targets import compile_target

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MLP = os.path.join(ROOT, "examples", "mlp.py")
TRAIN = os.path.join(ROOT, "examples", "train_gpt.py")


@pytest.fixture(scope="module")
def mlp():
    with torch.random.fork_rng():
        return compile_target(MLP, "mlp_example", benchmark=True, repeats=2)


@pytest.fixture(scope="module")
def train():
    with torch.random.fork_rng():
        return compile_target(TRAIN, "gpt_loss_example", benchmark=False)


def page_targets(page: str) -> dict:
    """The page's JSON: {"targets": [{name, where, data | error}], "first": index}."""
    m = re.search(r'<script type="application/json" id="fl-data"[^>]*>(.*?)</script>', page, re.S)
    assert m, "the page carries its data"
    return json.loads(m.group(1))


def page_json(page: str) -> dict:
    """The data of the target the page shows first."""
    found = page_targets(page)
    return found["targets"][found["first"]]["data"]


def graph_nodes(graph: dict, kind: str = "region") -> list[list[str]]:
    """Each program's node ids of `kind` (region, or a preview's torch call)."""
    return [[n["id"] for n in p["nodes"] if n["kind"] == kind] for p in graph["programs"]]


def traces(fig: dict, meta: str) -> list[dict]:
    return [t for t in fig["data"] if t.get("meta") == meta]


class Tags(HTMLParser):
    """Every start tag with its attributes (script bodies are not parsed as markup)."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def tags_of(page: str) -> list[tuple[str, dict]]:
    parser = Tags()
    parser.feed(page)
    return parser.tags


def test_the_page_has_its_parts_and_every_line_of_the_target(mlp):
    page = html_report.render(mlp)
    ids = {a.get("id") for _, a in tags_of(page)}
    assert {"source", "fusion-graph", "roofline", "timeline", "details", "plan"} <= ids
    with open(MLP, encoding="utf-8") as f:
        n = len(f.read().splitlines())
    lines = [int(a["data-line"]) for t, a in tags_of(page) if "data-line" in a and a.get("data-file") == MLP]
    assert lines == list(range(1, n + 1))
    assert "Plotly" in page and "window.fusionlens" in page


def test_one_node_point_and_slice_a_region_in_every_plan(mlp):
    data = page_json(html_report.render(mlp))
    previews = dict.fromkeys(pv.executor for p in mlp.programs for pv in p.previews)
    assert [p["key"] for p in data["plans"]] == ["ran", *sorted(previews, key=lambda e: e != "triton")]
    for plan in data["plans"]:
        ids = {k: [r["id"] for r in rs] for k, rs in plan["programs"].items()}
        figs = data["figures"][plan["key"]]
        assert [sorted(n) for n in graph_nodes(data["graphs"][plan["key"]])] == [sorted(v) for v in ids.values() if v]
        estimate = traces(figs["roofline"], "estimate")
        assert len(estimate) == 1 and sorted(estimate[0]["customdata"]) == sorted(sum(ids.values(), []))
        assert [list(t["customdata"]) for t in traces(figs["timeline"], "slices")] == list(ids.values())
        measured = traces(figs["roofline"], "measured")
        assert len(measured) == (1 if plan["ran"] else 0)
    ran = data["plans"][0]
    assert all(r["basis"] == "measured" for r in ran["programs"]["forward"])  # benchmarked: measured times
    assert "measured" in ran["note"] and all("estimate" in p["note"] for p in data["plans"][1:])


def test_a_line_costs_its_share_of_its_regions_time(mlp):
    plan = page_json(html_report.render(mlp))["plans"][0]
    regions = plan["programs"]["forward"]
    assert sum(plan["heat"].values()) == pytest.approx(sum(r["time_ms"] for r in regions))
    first = regions[0]
    assert plan["heat"][f"{MLP}:{first['lines'][0][1]}"] == pytest.approx(first["time_ms"] / len(first["lines"]))


def test_kernel_lines_point_back_at_their_source_lines(mlp):
    plans = page_json(html_report.render(mlp))["plans"]
    region = next(r for p in plans for r in p["programs"]["forward"] if r["executor"] != "torch")
    marked = [(text, src) for text, src in zip(region["code"], region["code_lines"]) if src]
    assert marked, "the kernel names the user lines it computes"
    lines = {tuple(x) for x in region["lines"]}
    assert all(tuple(src) in lines for _, src in marked)
    assert not any(text.startswith("import ") for text, _ in marked)  # a header line names no source line


def test_the_compile_stages_are_a_lane_of_the_timeline(mlp):
    assert mlp.stage_ms and set(mlp.stage_ms) >= {"trace", "fusion", "lowering"}
    fig = page_json(html_report.render(mlp))["figures"]["ran"]["timeline"]
    (stages,) = traces(fig, "stages")
    assert list(stages["customdata"]) == [k for k, v in mlp.stage_ms.items() if v]


def test_a_training_page_puts_both_programs_side_by_side_with_saved_tensors_marked(train):
    data = page_json(html_report.render(train))
    plan = data["plans"][0]
    assert list(plan["programs"]) == ["forward", "backward"]
    graph = data["graphs"]["ran"]
    assert [p["kind"] for p in graph["programs"]] == ["forward", "backward"]  # two columns
    saved = {t.name for t in train.training.saved}
    forward, backward = plan["programs"]["forward"], plan["programs"]["backward"]
    assert any(r["saved"] for r in forward) and any(r["saved"] for r in backward)
    assert all(set(r["saved"]) <= saved for r in forward + backward)
    assert [n["saved"] for n in graph["programs"][0]["nodes"]] == [bool(r["saved"]) for r in forward]
    # a saved tensor links the forward region that makes it to each backward region that reads it
    links = graph["links"]
    assert links and {lk["tensor"] for lk in links} <= saved
    makers = {r["id"]: set(r["saved"]) for r in forward}
    readers = {r["id"]: {t["name"] for t in r["inputs"]} for r in backward}
    assert all(lk["tensor"] in makers[lk["src"]] and lk["tensor"] in readers[lk["dst"]] for lk in links)
    # grouped by module: the blocks' regions carry their module path, layer by layer
    modules = {n["module"] for p in graph["programs"] for n in p["nodes"]}
    assert {"h.0.attn", "h.1.attn", "h.0.mlp.c_fc"} <= modules, modules


def test_a_nonce_is_on_every_script_and_style_and_nothing_is_fetched(mlp):
    page = html_report.render(mlp, nonce="n0nce")
    tags = tags_of(page)
    scripts = [a for t, a in tags if t in ("script", "style")]
    assert len(scripts) >= 4 and all(a.get("nonce") == "n0nce" for a in scripts)
    assert not [a for t, a in tags if "src" in a or ("href" in a and t != "a")]  # nothing loaded from anywhere
    assert not re.search(r"\beval\(", page_json_free(page))
    plain = html_report.render(mlp)
    assert "nonce=" not in "".join(f"<{t} {a}>" for t, a in tags_of(plain))


def page_json_free(page: str) -> str:
    """The page's own scripts, without plotly.js (which holds an eval for map tiles it never runs)."""
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", page, re.S)
    return "".join(scripts[-3:-1])  # graph.js and page.js (plotly.js is the last, as text page.js runs)


def test_sources_given_replace_the_files(mlp):
    text = "\n".join(f"# line {i}" for i in range(1, 40))
    page = html_report.render(mlp, {MLP: text})
    assert "# line 21" in page and "self.fc1" not in page.split('id="fl-data"')[0]


def test_a_failed_compile_renders_its_error(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import compiler\n\n@compiler.example\ndef broken():\n    raise ValueError('no model here')\n")
    report = compile_target(str(bad), "broken", benchmark=False)
    assert report.status == "error"
    page = html_report.render(report)
    assert "no model here" in page and "<script" not in page


def test_compile_to_html_and_the_cli_write_the_page(tmp_path, capsys):
    import compiler
    from fusionlens import cli

    def f(x):
        return torch.relu(x) * 2

    out = tmp_path / "f.html"
    page = compiler.compile(f, torch.randn(8, 8)).to_html(str(out))
    assert out.read_text(encoding="utf-8") == page and 'id="fusion-graph"' in page
    path = tmp_path / "norms.html"
    code = cli.main(["compile", os.path.join(ROOT, "examples", "norms.py"), "--target", "layernorm_example",
                     "--target", "rmsnorm_example", "--no-benchmark", "--html", str(path)])
    assert code == 0 and "wrote" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["f.html", "norms.html"]  # exactly the file asked for
    found = page_targets(path.read_text(encoding="utf-8"))
    assert [t["name"] for t in found["targets"]] == ["layernorm_example", "rmsnorm_example"]
    assert all(t["data"]["plans"] for t in found["targets"])


def test_collectives_are_drawn_where_their_regions_start(mlp):
    import dataclasses

    from fusionlens.report import schema as R

    ids = [r.id for r in mlp.forward.regions]
    traced = R.Collective("all_reduce", "traced", 4096, 2, region=ids[1], file=MLP, line=21)
    bucket = R.Collective("all_reduce", "ddp-bucket", 1 << 20, 2)
    fig = page_json(html_report.render(dataclasses.replace(mlp, collectives=[traced, bucket])))["figures"]
    (marks,) = traces(fig["ran"]["timeline"], "collectives")
    (slices,) = traces(fig["ran"]["timeline"], "slices")
    assert marks["base"] == [slices["base"][1], slices["base"][-1] + slices["x"][-1]]  # its region's start; the end
    assert marks["y"] == ["forward comm"] * 2 and marks["customdata"] == [ids[1], ""]
    assert "all_reduce 4.0 KB over 2 ranks" in marks["hovertext"][0]
    assert "synchronous" in marks["hovertext"][0]
    assert not [t for k, f in fig.items() if k != "ran" for t in traces(f["timeline"], "collectives")]


def _view(rid: str, ins: list[str], outs: list[str], ms: float):
    from fusionlens.report.html.model import RegionView

    t = lambda n: {"name": n, "shape": [4], "dtype": "float32", "bytes": 16, "size": "16 B"}
    return RegionView(rid, "backward", "torch", ["torch.mul"], [], ms, "measured", None, None, 0, 16, "fp32",
                      None, ms, None, None, [], [], [t(n) for n in ins], [t(n) for n in outs])


def test_a_collective_spans_its_issue_to_its_wait_over_the_regions_that_overlap_it():
    """DDP's shape: B1 issues an all-reduce of what B0 made, B2 and B3 run while it is in flight,
    B4 waits for it. Its 3 ms from the issue: the 2 ms until the wait hidden, 1 ms exposed; a bucket
    the reducer's hook runs after the backward starts once the first is done (one stream)."""
    from fusionlens.report import schema as R
    from fusionlens.report.html import model, timeline

    regions = [_view("B0", ["g0"], ["g"], 1.0), _view("B1", ["g"], ["h"], 0.0), _view("B2", ["g0"], ["a"], 1.0),
               _view("B3", ["a"], ["b"], 1.0), _view("B4", ["h", "b"], ["out"], 0.0)]
    plan = model.Plan("ran", "what ran", True, {"backward": regions}, {})
    overlapped = R.Collective("all_reduce", "traced", 4096, 2, program="backward", region="B1",
                              time_ms=R.RankSpread(2.0, 2.5, 3.0), overlapped_by=["B2", "B3"], rank_ms=[2.0, 3.0])
    bucket = R.Collective("all_reduce", "ddp-bucket", 1024, 2, program="backward", estimate_ms=0.5)
    fig = timeline.timeline(plan, {}, None, [overlapped, bucket])
    (full,) = traces(fig, "collectives")
    (exposed,) = traces(fig, "exposed")
    (span,) = traces(fig, "overlap")
    assert list(full["base"]) == [1.0, 4.0] and list(full["x"]) == [3.0, 0.5]
    assert list(exposed["base"]) == [3.0, 4.0] and list(exposed["x"]) == [1.0, 0.5]
    assert list(span["y"]) == ["backward"] and list(span["base"]) == [1.0] and list(span["x"]) == [2.0]
    assert "overlapped by B2, B3" in full["hovertext"][0] and "rank 1: 3.00 ms" in full["hovertext"][0]
    assert fig["layout"]["yaxis"]["categoryarray"] == ["backward", "backward comm"]


def _examples() -> list[tuple[str, str]]:
    """Every single-process target of every example file."""
    import glob

    from fusionlens.report.discovery import find_targets

    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.py"))):
        with open(path, encoding="utf-8") as f:
            # not the ones planned at scale (plan=...: a 22B model on the meta device)
            out += [(path, t.name) for t in find_targets(f.read(), path) if not t.nproc and not t.plan]
    return out


def _edge_ends(graph: dict) -> set[str]:
    """Every node an edge of the graph starts or ends at."""
    return {i for p in graph["programs"] for e in p["edges"] for i in (e["src"], e["dst"])}


@pytest.mark.parametrize("path,name", _examples(), ids=[n for _, n in _examples()])
def test_a_preview_graph_is_connected_through_the_programs_library_calls(path, name):
    """A preview's kernels are joined by the program's torch calls between them (linear, SDPA):
    a region is drawn without an edge only where the program's own dataflow leaves it alone (it
    reads only inputs, and nothing reads what it makes) or the program is one region."""
    with torch.random.fork_rng():
        report = compile_target(path, name, benchmark=False)
    data = page_json(html_report.render(report))
    ran = data["plans"][0]["programs"]
    for plan in data["plans"][1:]:
        ends = _edge_ends(data["graphs"][plan["key"]])
        for kind, regions in plan["programs"].items():
            calls = plan["calls"].get(kind, [])
            assert all(r["executor"] == "torch" and r["id"] in {x["id"] for x in ran[kind]} for r in calls)
            made = {t["name"] for r in ran[kind] for t in r["outputs"]}
            read = {t["name"] for r in ran[kind] for t in r["inputs"]}
            for r in regions + calls:
                if r["id"] in ends or len(ran[kind]) == 1:
                    continue
                assert not {t["name"] for t in r["inputs"]} & made, f"{plan['key']} {r['id']}: an input has no edge"
                assert not {t["name"] for t in r["outputs"]} & read, f"{plan['key']} {r['id']}: an output has no edge"


def test_the_triton_preview_of_a_gpt_block_draws_its_linears_and_matmuls_between_kernels():
    with torch.random.fork_rng():
        report = compile_target(os.path.join(ROOT, "examples", "gpt_block.py"), "gpt_block_example", benchmark=False)
    data = page_json(html_report.render(report))
    plan = next(p for p in data["plans"] if p["key"] == "triton")
    (program,) = data["graphs"]["triton"]["programs"]
    calls = [n for n in program["nodes"] if n["kind"] == "call"]
    ops = [r["ops"][0].rsplit(".", 1)[-1] for r in plan["calls"]["forward"]]
    assert ops == ["linear", "matmul", "matmul", "linear", "linear", "linear"]
    assert [n["id"] for n in calls] == [r["id"] for r in plan["calls"]["forward"]]
    assert calls[0]["label"] == "linear" and calls[0]["module"] == "attn.c_attn"  # its op, its module
    tensors = [e["text"] for e in program["edges"]]
    assert any("(through split, reshape, transpose)" in t for t in tensors)  # views are edges, not nodes
    assert all(re.fullmatch(r"\w+\[[\w, *+]*\]", e["shape"]) for e in program["edges"])  # float32[4, 64, 128]
    # on a machine where only torch ran, the page opens on the GPU's plan: the Triton preview
    assert data["default"] == ("triton" if set(report.executors) == {"torch"} else "ran")
    assert len(html_report.render(report).encode()) <= 2_000_000  # issue 31: at most 2 MB
    # a line of a library call costs its estimate in the preview too
    linear = plan["calls"]["forward"][0]
    assert plan["heat"][f"{linear['lines'][0][0]}:{linear['lines'][0][1]}"] > 0


def test_a_region_that_ran_fused_wider_than_the_preview_hides_no_library_call():
    """On a GPU the plan that ran (Triton) may fuse P1 and P2 of the nvFuser preview into one
    region T: T is inside the preview, the linear L before it still runs between the kernels."""
    from fusionlens.report.html import model

    linear, fused = _view("R0", ["x"], ["a"], 1.0), _view("R1", ["a"], ["c"], 1.0)
    linear.bytes, linear.flops = 64, 128
    p1, p2 = _view("P1", ["a"], ["b"], 0.5), _view("P2", ["b"], ["c"], 0.5)
    calls, views, order = model.between([linear, fused], [p1, p2])
    assert [r.id for r in calls] == ["R0"] and views == [] and order[0] == "R0"


def test_the_tracer_names_each_module_as_named_modules_does():
    """The module path an op records (the fusion graph's groups): a block called from a
    ModuleList is `blocks.0`, the outermost module is "", and nothing is named outside a trace."""
    from fusionlens.frontend import modules
    from fusionlens.ir import provenance

    seen: list[str] = []

    class Leaf(torch.nn.Module):
        def forward(self, x):
            seen.append(provenance.MODULE.get())
            return x + 1

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Leaf(), Leaf()])
            self.head = Leaf()

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            seen.append(provenance.MODULE.get())
            return self.head(x)

    net, x = Net(), torch.zeros(2)
    with modules.module_paths():
        net(x)
    assert seen == ["blocks.0", "blocks.1", "", "head"] and provenance.MODULE.get() == ""
    net(x)  # no trace: no hook
    assert seen[4:] == ["", "", "", ""]


def test_a_page_of_several_targets_holds_each_with_its_error_where_it_failed(mlp, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import compiler\n\n@compiler.example\ndef broken():\n    raise ValueError('no model here')\n")
    failed = compile_target(str(bad), "broken", benchmark=False)
    page = html_report.render_all([mlp, failed], target="broken")
    found = page_targets(page)
    assert [t["name"] for t in found["targets"]] == ["mlp_example", "broken"] and found["first"] == 1
    assert "no model here" in found["targets"][1]["error"] and "data" not in found["targets"][1]
    assert found["targets"][0]["data"]["plans"]
    ids = {a.get("id") for _, a in tags_of(page)}
    assert {"target", "head-0", "source-0", "head-1", "source-1", "target-error"} <= ids
