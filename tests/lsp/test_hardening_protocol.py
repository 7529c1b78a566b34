"""Issue 32, items 2, 3, 5 and 8, through the real server over raw JSON-RPC (lsp_raw.Raw, the
stand-in compiler): one settings schema whatever the shape; files that are not regular
files; no per-notification growth; malformed requests and absurd lengths."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from lsp_helpers import MODEL, write_model
from lsp_raw import debug_info, stdio_server


# --- 2. one settings schema -------------------------------------------------------------------

@pytest.mark.asyncio
@pytest.mark.parametrize("init,answer,allowed", [
    ({"allowExecution": False, "fusionlens": {"benchmarkRepeats": 2}}, {}, False),  # the case
    ({}, {"allowExecution": False, "fusionlens": {"benchmarkRepeats": 2}}, False),  # the same, answered
    ({}, {"allowExecution": True, "fusionlens": {"benchmarkRepeats": 2}}, False),  # the nested part has none
    ({}, {"allowExecution": True, "fusionlens": {"allowExecution": False}}, False),  # they disagree
    ({"fusionlens": {"allowExecution": True}}, {"fusionlens": {"benchmarkRepeats": 2}}, True),  # one shape
    ({}, {"allowExecution": True, "benchmarkRepeats": 2}, True),
], ids=["init-flat-false", "answer-flat-false", "answer-flat-true", "disagree", "nested", "flat"])
async def test_allow_execution_only_where_a_true_stands_for_it(tmp_path, init, answer, allowed):
    async with stdio_server(tmp_path) as c:
        c.answers["workspace/configuration"] = lambda params: asyncio.sleep(0, [answer])
        nested = "fusionlens" in init and len(init) == 1
        await c.initialize(tmp_path, {"fusionlens": {"compileTrigger": "manual", **init["fusionlens"]}} if nested
                           else {"compileTrigger": "manual", **init})
        uri = c.open(write_model(tmp_path), MODEL)
        result = (await c.command("fusionlens.compile", uri, None, {"wait": True}, timeout=120))["result"]
        info = await debug_info(c)
        assert info["settings"]["allowExecution"] is allowed and result["ok"] is allowed, (result, info)
        assert (info["workerPid"] is not None) is allowed
        warnings = [t for t in c.texts("window/showMessage") if "ambiguous" in t]
        mixed = "fusionlens" in answer and len(answer) > 1 or "fusionlens" in init and len(init) > 1
        assert bool(warnings) == mixed, c.texts("window/showMessage")


# --- 3. files that are not regular files --------------------------------------------------------

@pytest.mark.asyncio
async def test_files_that_are_not_files_are_refused_at_once(tmp_path):
    """A FIFO named notes.py, a symlink zero.py -> /dev/zero and /dev/stdin, never opened by the
    client: each request about them is answered at once with an error naming what the file
    is, and the server keeps answering (a regular file still reads)."""
    os.mkfifo(tmp_path / "notes.py")
    (tmp_path / "zero.py").symlink_to("/dev/zero")
    write_model(tmp_path)
    uris = {"FIFO": (tmp_path / "notes.py").as_uri(), "character device": (tmp_path / "zero.py").as_uri(),
            "stdin": "file:///dev/stdin"}
    doc = lambda uri: {"textDocument": {"uri": uri}}  # noqa: E731
    requests = [("textDocument/hover", lambda u: {**doc(u), "position": {"line": 0, "character": 0}}),
                ("textDocument/inlayHint", lambda u: {**doc(u), "range": {"start": {"line": 0, "character": 0},
                                                                          "end": {"line": 50, "character": 0}}}),
                ("textDocument/codeLens", doc), ("textDocument/codeAction", lambda u: {
                    **doc(u), "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
                    "context": {"diagnostics": []}}),
                ("fusionlens/regions", lambda u: {"uri": u})]
    async with stdio_server(tmp_path) as c:
        c.answers["workspace/configuration"] = lambda params: asyncio.sleep(0, [{}])
        await c.initialize(tmp_path, {"compileTrigger": "manual"})
        for kind, uri in uris.items():
            for method, params in requests:
                started = time.monotonic()
                answer = await c.request(method, params(uri), timeout=10)
                assert time.monotonic() - started < 5, (method, uri)
                assert answer.get("error", {}).get("code") == -32803, (method, uri, answer)
                assert "not read" in answer["error"]["message"], answer
                if kind != "stdin":
                    assert kind in answer["error"]["message"], answer
            compiled = await c.command("fusionlens.compile", uri, None)
            assert compiled.get("error", {}).get("code") == -32803, compiled
        regions = (await c.request("fusionlens/regions", {"uri": (tmp_path / "model.py").as_uri()}))["result"]
        assert [t["name"] for t in regions["targets"]] == ["model_example"]
        assert (await c.request("shutdown", None))["result"] is None


# --- 5. no per-notification growth ----------------------------------------------------------

@pytest.mark.asyncio
async def test_notifications_leave_nothing_behind(tmp_path):
    async with stdio_server(tmp_path) as c:
        c.answers["workspace/configuration"] = lambda params: asyncio.sleep(0, [{}])
        await c.initialize(tmp_path, {"compileTrigger": "manual"})
        uri = c.open(write_model(tmp_path), MODEL)
        for version in range(2, 20_002):  # 20k keystrokes
            c.notify("textDocument/didChange", {
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [{"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
                                    "text": "#" if version % 2 else ""}]})
            if version % 1000 == 0:
                await c.writer.drain()
        c.notify("workspace/didChangeConfiguration", {"settings": {"benchmarkRepeats": 3}})  # an async handler
        deadline = time.monotonic() + 30
        while (info := await debug_info(c))["settings"]["benchmarkRepeats"] != 3:
            assert time.monotonic() < deadline, "the notifications were not all handled"
            await asyncio.sleep(0.05)
        assert info["requestFutures"] < 50, info["requestFutures"]


# --- 8. malformed requests ------------------------------------------------------------------------

@pytest.mark.asyncio
async def test_positions_out_of_range_are_answered(tmp_path):
    async with stdio_server(tmp_path) as c:
        c.answers["workspace/configuration"] = lambda params: asyncio.sleep(0, [{}])
        await c.initialize(tmp_path, {"compileTrigger": "manual"})
        uri = c.open(write_model(tmp_path), MODEL)
        for line, character in ((-1, 0), (0, 10**12), (10**9, 10**9), (0, -5)):
            answer = await c.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                            "position": {"line": line, "character": character}},
                                     timeout=10)
            assert answer.get("error", {}).get("code") == -32602 or answer.get("result", 0) is None, answer
        assert (await debug_info(c))["pid"] == c.proc.pid


@pytest.mark.asyncio
async def test_absurd_frames_are_refused_and_the_server_goes_on(tmp_path):
    """A header line over 64 KiB, a body that is no JSON: answered with errors (id null),
    then the next request is answered; `Content-Length: 100000000000`: an error, no crash."""
    async with stdio_server(tmp_path) as c:
        c.answers["workspace/configuration"] = lambda params: asyncio.sleep(0, [{}])
        await c.initialize(tmp_path, {"compileTrigger": "manual"})
        c.writer.write(b"X-Long: " + b"x" * (100 * 1024) + b"\r\nContent-Length: 2\r\n\r\n{}")
        c.writer.write(b"Content-Length: 5\r\n\r\nnope!")
        assert (await debug_info(c))["pid"] == c.proc.pid
        codes = [e["error"]["code"] for e in c.errors()]
        assert codes == [-32600, -32700], c.errors()
        c.writer.write(b"Content-Length: 100000000000\r\n\r\n" + b"{" * 1000)
        deadline = time.monotonic() + 10
        while len(c.errors()) < 3:
            assert time.monotonic() < deadline and c.proc.returncode is None, "no answer to the absurd length"
            await asyncio.sleep(0.05)
        assert "100000000000" in c.errors()[2]["error"]["message"]
        await asyncio.sleep(0.5)
        assert c.proc.returncode is None  # still running (reading past what it skips)
