"""The language server's rough edges (issue 21, item 7), each through the real server with
the stand-in compiler (tests/lsp/lsp_fake_compile.py) or the stand-ins below, which the
worker imports from this module (FUSIONLENS_WORKER_COMPILE=test_rough_edges:...)."""

from __future__ import annotations

import asyncio
import os

import pytest
from lsprotocol import types as T
from pygls.exceptions import JsonRpcException

from lsp_fake_compile import compile_target
from lsp_helpers import FAKE, HANGS, write_model

pytestmark = pytest.mark.asyncio

FAILS = {"FUSIONLENS_WORKER_COMPILE": "test_rough_edges:failing_compile_target"}
TALKS = {"FUSIONLENS_WORKER_COMPILE": "test_rough_edges:talking_compile_target"}

MODEL = '''import torch
import compiler


def forward(x):
    y = torch.relu(x)
    return torch.sigmoid(y)  # FAILS HERE


@compiler.example
def model_example():
    return forward, (torch.randn(4),)


@compiler.example
def other_example():
    return forward, (torch.randn(2),)
'''
FAIL_LINE = 6  # 0-based: "# FAILS HERE"
DEF_LINE = 10  # 0-based: def model_example


def failing_compile_target(path, target_name, *args, **kwargs):
    """A compile that fails in `forward` (the error is on FAIL_LINE, not on the target's def)."""
    from fusionlens.report.schema import CompileReport, Diagnostic, Target

    path = os.path.abspath(path)
    return CompileReport(Target(target_name, path, DEF_LINE + 1, DEF_LINE + 2), status="error",
                         error=Diagnostic("error", "RuntimeError: boom", path, FAIL_LINE + 1))


def talking_compile_target(*args, **kwargs):
    """compile_target after 150 lines of output (under the 200-line cap of one compile) and a
    worker thread that writes 150 more once the compile is over (between compiles)."""
    import sys
    import threading
    import time

    for i in range(150):
        print(f"TALK during {i}", file=sys.stderr)
    sys.stderr.flush()

    def later() -> None:
        time.sleep(0.3)
        for i in range(150):
            print(f"TALK between {i}", file=sys.stderr)
        sys.stderr.flush()

    threading.Thread(target=later, daemon=True).start()
    return compile_target(*args, **kwargs)




async def _debug(s) -> dict:
    return await s.command("fusionlens.debugInfo")


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_related_information_moves_with_its_line(start_server, tmp_path):
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAILS)
    uri = s.open(write_model(tmp_path, MODEL))
    result = await s.compile(uri, "model_example")
    assert result["ok"] is False
    d = next(d for d in s.diagnostics(uri) if d.range.start.line == DEF_LINE)
    assert d.related_information[0].location.range.start.line == FAIL_LINE
    s.insert(uri, 0, "# one\n# two\n")  # two lines above everything

    def moved():
        return next((d for d in s.diagnostics(uri) if d.range.start.line == DEF_LINE + 2), None)

    d = await s.wait_for(moved, 10, "the diagnostic moved")
    assert d.related_information[0].location.range.start.line == FAIL_LINE + 2


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_a_missing_or_unopened_uri_is_answered_not_raised(start_server, tmp_path):
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE)
    gone = (tmp_path / "never_opened.py").as_uri()
    for command in ("fusionlens.showTrace", "fusionlens.showKernel"):
        for args in ([], [None, "model_example"], [gone, "model_example", "R0"]):
            answer = await s.command(command, *args)
            assert answer["uri"] is None and answer["message"], (command, args, answer)
    assert (await s.regions(gone)).targets == []
    with pytest.raises(JsonRpcException) as e:
        await s.regions(None)
    assert "uri" in str(e.value) and "Traceback" not in str(e.value)
    with pytest.raises(JsonRpcException) as e:
        await s.client.protocol.send_request_async("fusionlens/regions", {})
    assert "uri" in str(e.value)
    assert (await _debug(s))["documents"] == 0


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_requests_about_unopened_documents_hold_no_state(start_server, tmp_path):
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE)
    path = write_model(tmp_path, MODEL)
    uri = s.uri(path)
    # a file on disk, never opened: answered from disk, nothing kept
    assert [t.name for t in (await s.regions(uri)).targets] == ["model_example", "other_example"]
    await s.lenses(uri)
    await s.hover(uri, 5)
    await s.actions(uri, 5)
    await s.hints(uri)
    assert (await _debug(s))["documents"] == 0
    s.open(path)
    assert (await _debug(s))["documents"] == 1
    s.client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri)))
    assert (await _debug(s))["documents"] == 0  # handled in order: the close came first


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_the_result_cache_is_bounded_but_keeps_what_is_shown(start_server, tmp_path):
    s = await start_server({"compileTrigger": "manual", "cacheEntries": 1}, root=tmp_path, env=FAKE)
    uri = s.open(write_model(tmp_path, MODEL))
    assert (await s.compile(uri))["ok"] is True
    assert (await _debug(s))["cacheEntries"] == 2  # both are shown: over the bound, none dropped
    s.insert(uri, 0, "# edited\n")
    assert (await s.compile(uri, "model_example"))["ok"] is True
    # the old model_example result is shown nowhere now: dropped; other_example is still shown
    assert (await _debug(s))["cacheEntries"] == 2
    assert all(t.status == "ok" for t in (await s.regions(uri)).targets)


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_clear_cache_cancels_the_running_compile(start_server, tmp_path):
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=HANGS)
    uri = s.open(write_model(tmp_path, MODEL))
    await s.queue_compile(uri, "model_example")

    async def running():
        return (await _debug(s))["workerPid"] is not None and any(
            t.status == "compiling" and t.message == "running" for t in (await s.regions(uri)).targets)

    for _ in range(400):  # the worker starts (seconds), then the job runs
        if await running():
            break
        await asyncio.sleep(0.05)
    assert await running()
    assert (await s.command("fusionlens.clearCache"))["ok"] is True
    regions = await s.wait_targets(uri, ("not compiled",), timeout=10, names=["model_example"])
    assert regions.targets[0].status == "not compiled"
    assert (await _debug(s))["workerPid"] is None  # killed, as fusionlens.cancel does


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_output_between_compiles_does_not_count_against_the_next(start_server, tmp_path):
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=TALKS)
    uri = s.open(write_model(tmp_path, MODEL))

    def talk() -> list[str]:
        return [m.message for m in s.client.log_messages if "TALK" in m.message or "dropped" in m.message]

    assert (await s.compile(uri, "model_example"))["ok"] is True
    await s.wait_for(lambda: sum("TALK between" in m for m in talk()) == 150, 10, "the output between compiles")
    assert (await s.compile(uri, "model_example"))["ok"] is True
    await s.wait_for(lambda: sum("TALK during" in m for m in talk()) == 300, 10, "the second compile's output")
    assert not any("dropped" in m for m in talk())
