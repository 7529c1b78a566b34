"""The report page for an editor's webview (`fusionlens.reportHtml`) and the collectives of
`fusionlens/regions`, through the real server. The worker's compiler is this module's
stand-in (FUSIONLENS_WORKER_COMPILE): the fake compiler's report plus the collectives a
distributed target's report has, so no ranks are launched."""

from __future__ import annotations

import dataclasses

import os
import re

import pytest

from fusionlens.report.schema import Collective, RankSpread
from lsp_helpers import EXAMPLES, FAKE, line_of

pytestmark = pytest.mark.asyncio

WITH_COLLECTIVES = {"FUSIONLENS_WORKER_COMPILE": "test_show_report:compile_with_collectives"}
NONCE = "c2hvdy1yZXBvcnQtbm9uY2U0Mg"
SOURCE = '''import torch
import torch.distributed as dist
import compiler


def forward(x):
    y = torch.relu(x)
    dist.all_reduce(y)
    return torch.sigmoid(y)


@compiler.example
def model_example():
    return forward, (torch.randn(4),)
'''


def compile_with_collectives(path, target_name, *args, **kwargs):
    """The fake compiler's report with two collectives: one traced at the `all_reduce` line,
    timed over 2 ranks and overlapped by R1; one DDP bucket of the backward, with no line."""
    from lsp_fake_compile import compile_target

    report = compile_target(path, target_name, *args, **kwargs)
    with open(path, encoding="utf-8") as f:
        line = next(i for i, text in enumerate(f.read().splitlines(), 1) if "all_reduce(" in text)
    return dataclasses.replace(report, collectives=[  # a report is a value: a new one with these collectives
        Collective("all_reduce", "traced", 16, 2, "forward", "R0", os.path.abspath(path), line,
                   "est 8.1 µs on 8xH100 (ring)", 0.0081, RankSpread(0.2, 0.25, 0.31), ["R1"], 0.0, 0.004),
        Collective("all_reduce", "ddp-bucket", 4096, 2, "backward", "", None, None, "", None, None, []),
    ])


def _field(obj, name):
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_regions_list_each_collective_at_its_line(start_server, tmp_path):
    path = tmp_path / "model.py"
    path.write_text(SOURCE)
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=WITH_COLLECTIVES)
    uri = s.open(path)
    assert (await s.compile(uri, "model_example"))["ok"]
    target = (await s.regions(uri)).targets[0]
    traced, bucket = [_field(target, "collectives")[i] for i in (0, 1)]
    assert len(_field(target, "collectives")) == 2
    assert _field(traced, "op") == "all_reduce" and _field(traced, "kind") == "traced"
    assert _field(traced, "line") == line_of(path, "dist.all_reduce(y)")  # 0-based in the document
    assert _field(traced, "bytes") == 16 and _field(traced, "groupSize") == 2
    assert _field(_field(traced, "timeMs"), "max") == pytest.approx(0.31)
    assert list(_field(traced, "overlappedBy")) == ["R1"]
    assert _field(traced, "estimate") == "est 8.1 µs on 8xH100 (ring)"
    assert _field(traced, "program") == "forward" and _field(traced, "region") == "R0"
    assert _field(bucket, "program") == "backward" and _field(bucket, "line") is None
    assert _field(bucket, "timeMs") is None and list(_field(bucket, "overlappedBy")) == []

    # two lines inserted above: the collective's line moves with its text
    s.insert(uri, 0, "# one\n# two\n")
    moved = _field((await s.regions(uri)).targets[0], "collectives")[0]
    assert _field(moved, "line") == line_of(path, "dist.all_reduce(y)") + 2


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_report_html_needs_a_result_and_a_good_nonce(start_server, tmp_path):
    path = tmp_path / "model.py"
    path.write_text(SOURCE)
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE)
    uri = s.open(path)
    answer = await s.command("fusionlens.reportHtml", uri, None, NONCE)
    assert answer["html"] is None and "compile a target first" in answer["message"], answer
    answer = await s.command("fusionlens.reportHtml", uri, "model_example", NONCE)
    assert answer["html"] is None and "no compile result yet" in answer["message"], answer
    assert (await s.compile(uri, "model_example"))["ok"]
    for bad in ('x" onload="alert(1)', "short", 42):
        answer = await s.command("fusionlens.reportHtml", uri, "model_example", bad)
        assert answer["html"] is None and "nonce" in answer["message"], (bad, answer)


TWO_TARGETS = SOURCE + '''

@compiler.example
def other_example():
    return forward, (torch.randn(8),)
'''


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_report_html_lists_the_targets_and_their_result_versions(start_server, tmp_path):
    """What a webview host picks a page by (docs/lsp.md): each target's lines in the text as
    it is now and the number of the result it shows, without a page or a warning asked for."""
    path = tmp_path / "model.py"
    path.write_text(TWO_TARGETS)
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE)
    uri = s.open(path)
    listed = await s.command("fusionlens.reportHtml", uri, None, None, {"render": False})
    first = line_of(path, "@compiler.example")
    second = line_of(path, "@compiler.example", first + 1)
    assert listed["html"] is None and listed["file"] == str(path), listed
    assert listed["targets"] == [
        {"name": "model_example", "line": first, "endLine": line_of(path, "return forward, (torch.randn(4),)"),
         "version": None},
        {"name": "other_example", "line": second, "endLine": line_of(path, "return forward, (torch.randn(8),)"),
         "version": None},
    ]
    assert not [m for m in s.client.messages if "compile" in m.message]  # listing warns of nothing
    assert (await s.compile(uri, "model_example"))["ok"]
    v1 = (await s.command("fusionlens.reportHtml", uri, None, None, {"render": False}))["targets"][0]["version"]
    assert isinstance(v1, int)
    assert (await s.compile(uri, "other_example"))["ok"]
    assert (await s.compile(uri, "model_example"))["ok"]  # compiled again: a newer result
    versions = [t["version"] for t in (await s.command("fusionlens.reportHtml", uri, None, None,
                                                       {"render": False}))["targets"]]
    assert versions[0] > versions[1] > v1, versions
    # two lines inserted above: the lines are the buffer's now
    s.insert(uri, 0, "# one\n# two\n")
    moved = (await s.command("fusionlens.reportHtml", uri, None, None, {"render": False}))["targets"]
    assert [t["line"] for t in moved] == [first + 2, second + 2]
    missing = await s.command("fusionlens.reportHtml", s.uri(tmp_path / "gone.py"), None, None, {"render": False})
    assert missing["html"] is None and missing["targets"] == [] and "no such document" in missing["message"]


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_report_html_renders_the_shown_report_in_the_server(start_server, tmp_path):
    pytest.importorskip("fusionlens.report.html")
    path = tmp_path / "model.py"
    path.write_text(SOURCE)
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=WITH_COLLECTIVES)
    uri = s.open(path)
    assert (await s.compile(uri, "model_example"))["ok"]
    # an edit after the compile: the page shows the text that was compiled, whose lines the report's are
    s.insert(uri, 0, "# an edit after the compile\n")
    answer = await s.command("fusionlens.reportHtml", uri, None, NONCE)
    html = answer["html"]
    assert isinstance(html, str) and answer["target"] == "model_example", answer.get("message")
    assert answer["version"] == answer["targets"][0]["version"] and answer["files"] == [str(path)]
    tags = re.findall(r"<(script|style)\b([^>]*)>", html)
    assert tags and all(f'nonce="{NONCE}"' in attrs for _tag, attrs in tags), [t for t in tags if NONCE not in t[1]]
    assert "dist.all_reduce(y)" in html and "an edit after the compile" not in html
    line = line_of(path, "dist.all_reduce(y)") + 1
    assert re.search(rf'data-line="{line}"', html), "no source line element"
    info = await s.command("fusionlens.debugInfo")
    assert info["torchImported"] is False and info["userModules"] == []  # rendered here, nothing ran
    without = await s.command("fusionlens.reportHtml", uri, "model_example", None)
    assert "nonce=" not in without["html"]


@pytest.mark.distributed
@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_a_launched_targets_collective_is_in_the_regions_answer(start_server):
    """The real launcher on 2 ranks: the traced all_reduce at its line, timed on every rank."""
    ddp = EXAMPLES / "ddp_train.py"
    s = await start_server({"compileTrigger": "manual"})
    uri = s.open(ddp)
    assert (await s.compile(uri, "all_reduce_sum"))["ok"]
    target = next(t for t in (await s.regions(uri)).targets if t.name == "all_reduce_sum")
    [c] = _field(target, "collectives")
    assert _field(c, "op") == "all_reduce" and _field(c, "kind") == "traced"
    assert _field(c, "line") == line_of(ddp, "dist.all_reduce(y)")
    assert _field(c, "bytes") == 1024 * 4 and _field(c, "groupSize") == 2
    spread = _field(c, "timeMs")
    assert 0 < _field(spread, "min") <= _field(spread, "median") <= _field(spread, "max")
