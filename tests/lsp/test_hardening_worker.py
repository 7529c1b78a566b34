"""Issue 32, items 4 and 6: the worker's output is bounded in bytes and always drained; the
processes user code starts end with the worker, whichever way the server stops.

The worker runs stand-ins of the compiler (tests/lsp/lsp_fake_compile.py): one floods its
output, one starts children (one in a session of its own, one a daemon whose parent exits)
and hangs."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from lsp_helpers import MODEL, write_model
from lsp_raw import debug_info, stdio_server
from lsp_server import worker_output

TWO_TARGETS = MODEL + '''

@compiler.example
def crash_example():
    return forward, (torch.randn(4),)
'''


def _worker_lines(c) -> list[str]:
    return [t for t in c.texts("window/logMessage") if t.startswith("[worker]")]


@pytest.mark.asyncio
async def test_worker_output_is_bounded_and_drained(tmp_path):
    """32 MiB without a newline, then the compile: it ends ok (the pipe was drained), and what
    reached the client is a few KiB. Lines of 1 MiB, then the worker dies: the target's
    message holds the last lines, cut."""
    env = {"FUSIONLENS_WORKER_COMPILE": "lsp_fake_compile:flooding_compile_target", "FL_FLOOD_MIB": "32"}
    async with stdio_server(tmp_path, env=env) as c:
        c.answers["workspace/configuration"] = lambda params: asyncio.sleep(0, [{}])
        await c.initialize(tmp_path, {"compileTrigger": "manual", "timeoutSeconds": 120})
        uri = c.open(write_model(tmp_path, TWO_TARGETS), TWO_TARGETS)
        ok = (await c.command("fusionlens.compile", uri, "model_example", {"wait": True}, timeout=150))["result"]
        assert ok["ok"], ok
        lines = _worker_lines(c)
        assert sum(map(len, lines)) < worker_output.MAX_BYTES + 4096, sum(map(len, lines))
        assert any("more bytes of this line cut" in t for t in lines), lines[:3]
        crashed = (await c.command("fusionlens.compile", uri, "crash_example", {"wait": True}, timeout=150))["result"]
        assert crashed["ok"] is False
        target = next(t for t in (await c.request("fusionlens/regions", {"uri": uri}))["result"]["targets"]
                      if t["name"] == "crash_example")
        message = target["message"]
        assert "compile worker died" in message and "line 11 yyy" in message, message[:500]
        assert len(message) < worker_output.TAIL_LINES * (worker_output.MAX_LINE_BYTES + 100) + 500, len(message)
        assert sum(map(len, _worker_lines(c))) < 2 * (worker_output.MAX_BYTES + 4096)
        diags = [m["params"] for m in c.notes if m.get("method") == "textDocument/publishDiagnostics"]
        assert max(len(str(d)) for d in diags) < 40_000


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL", "shutdown", "timeout"])
async def test_no_process_outlives_the_server_or_its_compile(tmp_path, how):
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {"FUSIONLENS_WORKER_COMPILE": "lsp_fake_compile:forking_compile_target", "FL_PIDS": str(pids)}
    timeout = 6 if how == "timeout" else 300
    async with stdio_server(tmp_path, env=env, args=("-P", "-m", "lsp_server")) as c:
        c.answers["workspace/configuration"] = lambda params: asyncio.sleep(0, [{}])
        await c.initialize(tmp_path, {"compileTrigger": "manual", "timeoutSeconds": timeout})
        uri = c.open(write_model(tmp_path), MODEL)
        assert (await c.command("fusionlens.compile", uri, None))["result"]["queued"]
        deadline = time.monotonic() + 60
        while len(os.listdir(pids)) < 3:  # the child, the one in its own session, the daemon's
            assert time.monotonic() < deadline, os.listdir(pids)
            await asyncio.sleep(0.1)
        worker = (await debug_info(c))["workerPid"]
        started = [worker, *map(int, os.listdir(pids))]
        assert all(map(_running, started))
        if how == "SIGTERM":
            c.proc.send_signal(signal.SIGTERM)
        elif how == "SIGKILL":
            c.proc.kill()
        elif how == "shutdown":
            assert (await c.request("shutdown", None))["result"] is None
            c.notify("exit", None)
        else:
            compiled = await c.command("fusionlens.compile", uri, None, {"wait": True}, timeout=60)
            assert compiled["result"]["ok"] is False
            assert (await debug_info(c))["workerPid"] is None  # the server lives on; the worker went
        deadline = time.monotonic() + 20
        while left := [p for p in started if _running(p)]:
            assert time.monotonic() < deadline, f"still running after {how}: {left}"
            await asyncio.sleep(0.2)
