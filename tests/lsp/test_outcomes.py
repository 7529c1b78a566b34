"""Every outcome of a compile is shown where the user looks; buffers compile as they are.

These use the stand-in compiler (tests/lsp/lsp_fake_compile.py: every call in a function
body is an op, lines in groups of three make a region), so they test the server, fast.
"""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types as T

from lsp_helpers import FAKE, HANGS, MODEL, hover_text, line_of, write_model

pytestmark = pytest.mark.asyncio






def _messages(s, kind=None) -> list:
    return [m.message for m in s.client.messages if kind is None or m.type == kind]


async def test_an_unsaved_buffer_compiles_the_buffers_text(start_server, tmp_path):
    path = write_model(tmp_path)
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE)
    uri = s.open(path)
    # two new lines, one of them a new call, typed and not saved
    s.insert(uri, 5, "    x = torch.tanh(x)\n    x = torch.exp(x)\n")
    result = await s.compile(uri, "model_example")
    assert result == {"targets": ["model_example"], "ok": True}
    hint_lines = {h.position.line for h in await s.hints(uri)}
    assert {5, 6} <= hint_lines  # the buffer's new lines: the file on disk has no call there
    regions = await s.regions(uri)
    ops = [op for t in regions.targets for r in t.regions for op in r.ops]
    assert "torch.tanh" in ops and "torch.exp" in ops
    assert path.read_text() == MODEL  # nothing was written


async def test_an_untitled_buffer_compiles(start_server, tmp_path):
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE)
    uri = "untitled:Untitled-1"
    s.versions[uri] = 1
    s.client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(
        uri=uri, language_id="python", version=1, text=MODEL)))
    lenses = await s.lenses(uri)
    assert [l.command.title for l in lenses] == ["Compile & benchmark"]
    assert (await s.compile(uri, "model_example"))["ok"] is True
    assert {h.position.line for h in await s.hints(uri)} >= {5, 6}
    assert "vs eager" in (await s.lenses(uri))[0].command.title


async def test_refused_requests_say_why(start_server, tmp_path):
    path = write_model(tmp_path)
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE)
    uri = s.open(path)
    result = await s.compile(uri, "no_such_target")
    assert result["ok"] is False and "no_such_target" in result["message"]
    assert any("no @fusionlens.example target named no_such_target" in m
               for m in _messages(s, T.MessageType.Warning))

    # a syntax error below the target: the lens and a message say so, nothing runs
    s.insert(uri, 12, "def broken(:\n")
    result = await s.compile(uri, "model_example")
    assert result["ok"] is False and "SyntaxError" in result["message"]
    assert any("SyntaxError" in m for m in _messages(s, T.MessageType.Warning))
    assert (await s.lenses(uri))[0].command.title == "Not compiled: syntax error on line 13"
    titles = [a.title for a in await s.actions(uri, line_of(path, "def model_example"))]
    assert "Compile and benchmark" not in titles  # it cannot run
    assert (await s.command("fusionlens.debugInfo"))["workerPid"] is None


async def test_a_cancelled_retry_after_a_timeout_says_cancelled(start_server, tmp_path):
    path = write_model(tmp_path)
    s = await start_server({"compileTrigger": "manual", "timeoutSeconds": 1}, root=tmp_path, env=HANGS)
    uri = s.open(path)
    result = await s.compile(uri, "model_example")
    assert result["ok"] is False
    assert (await s.lenses(uri))[0].command.title.startswith("Compile failed: ")
    assert any("timed out" in m for m in _messages(s, T.MessageType.Error)), _messages(s)
    retry = asyncio.ensure_future(s.compile(uri, "model_example"))
    await s.wait_for(lambda: sum(st.state == "compiling" for st in s.statuses) >= 2, 30, "second compile")
    s.insert(uri, 0, "# edited\n")  # an edit cancels the running compile
    assert (await retry)["ok"] is False
    await s.wait_for(lambda: any("cancelled" in m for m in _messages(s, T.MessageType.Info)), 20, "message")
    assert (await s.lenses(uri))[0].command.title == "Compile & benchmark (last run cancelled)"


async def test_turning_execution_off_marks_results_stale(start_server, tmp_path):
    path = write_model(tmp_path)
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE)
    uri = s.open(path)
    assert (await s.compile(uri, "model_example"))["ok"] is True
    before = (await s.lenses(uri))[0].command.title
    s.client.workspace_did_change_configuration(T.DidChangeConfigurationParams(
        settings={"fusionlens": {"allowExecution": False}}))
    for _ in range(200):  # the notification is handled asynchronously
        lens = (await s.lenses(uri))[0].command.title
        if lens != before:
            break
        await asyncio.sleep(0.05)
    assert lens == f"Stale (execution disabled): {before}"
    hints = await s.hints(uri)
    regions = [h for h in hints if not h.label.startswith("┆")]  # region hints, not boundaries
    assert regions and all(h.label.startswith("stale · ") for h in regions)
    hover = hover_text(await s.hover(uri, line_of(path, "def model_example")))
    assert "stale" in hover
    titles = [a.title for a in await s.actions(uri, line_of(path, "def model_example"))]
    assert "Compile and benchmark" not in titles and "Show generated trace" in titles


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_columns_are_utf16(start_server, tmp_path):
    path = tmp_path / "emoji.py"
    path.write_text('x = "😀" )\n')
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE)
    uri = s.open(path)
    (diag,) = await s.wait_for(lambda: s.diagnostics(uri), 20, "syntax error")
    # ")" is character 8 in Python's count, 9 in UTF-16 units (the emoji is a surrogate pair)
    assert diag.range.start.character == 9 and diag.range.end.character == 10
