"""No stale results, and compiles that can be stopped (issue 22, items 2, 7, 8 and 9):
imported modules as they are now (two folders with a same-named module, an edited and saved
import, an unsaved buffer of one), `fusionlens.compile` answering at once, cancelling
(fusionlens.cancel, $/cancelRequest, window/workDoneProgress/cancel) that kills the worker,
`exit` without `shutdown`, an untitled buffer outside any folder."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from lsprotocol import types as T
from pygls.exceptions import JsonRpcRequestCancelled

from lsp_helpers import FIXTURES, REPO, server_env

MODEL = '''import torch
import compiler
from helpers import act


def f(x):
    return act(x) + 1


@compiler.example
def f_example():
    return f, (torch.randn(16),)
'''


def _helpers(op: str) -> str:
    return f"import torch\n\n\ndef act(x):\n    return torch.{op}(x)\n"


def _folder(root: Path, op: str) -> Path:
    """A folder with model.py, whose target calls helpers.act: torch.<op>."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "helpers.py").write_text(_helpers(op))
    (root / "model.py").write_text(MODEL)
    return root / "model.py"


async def _ops(s, uri: str) -> set:
    regions = await s.regions(uri)
    return {op for t in regions.targets for r in t.regions for op in r.ops}


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] == "Z"
    except OSError:
        return True


async def _worker_running(s, uri: str, target: str) -> int:
    """Wait until the target's user code runs in the worker: the worker's pid."""
    async def running():
        regions = await s.regions(uri)
        t = next(t for t in regions.targets if t.name == target)
        return t.status == "compiling" and t.message == "running"

    deadline = time.monotonic() + 120
    while not await running():
        assert time.monotonic() < deadline, "the compile never started running"
        await asyncio.sleep(0.1)
    return (await s.command("fusionlens.debugInfo"))["workerPid"]


async def _assert_cancelled(s, uri: str, target: str, pid: int, why: str) -> None:
    await s.wait_for(lambda: _gone(pid), 15, f"worker {pid} killed")
    regions = await s.wait_targets(uri, ("not compiled",), timeout=15, names=[target])
    message = next(t.message for t in regions.targets if t.name == target)
    assert message.startswith("compile cancelled") and why in message, message
    assert (await s.command("fusionlens.debugInfo"))["workerPid"] is None
    assert s.statuses[-1].state == "idle" and s.statuses[-1].message.startswith("cancelled"), s.statuses[-1]


# --- imported modules -------------------------------------------------------------------------

@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_two_folders_with_a_same_named_module(start_server, tmp_path):
    a, b = _folder(tmp_path / "a", "sin"), _folder(tmp_path / "b", "cos")
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path / "a")  # b is in no folder
    ua, ub = s.open(a), s.open(b)
    assert (await s.compile(ua, "f_example"))["ok"]
    assert "torch.sin" in await _ops(s, ua)
    assert (await s.compile(ub, "f_example"))["ok"]
    assert "torch.cos" in await _ops(s, ub), "b/model.py compiled with a's helpers"
    assert "torch.sin" not in await _ops(s, ub)
    assert (await s.compile(ua, "f_example"))["ok"]
    assert "torch.sin" in await _ops(s, ua)


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_edited_and_saved_import_recompiles(start_server, tmp_path):
    model = _folder(tmp_path, "sin")
    helpers = tmp_path / "helpers.py"
    s = await start_server({"compileTrigger": "onOpen"}, root=tmp_path)
    uri = s.open(model)
    await s.wait_targets(uri)
    assert "torch.sin" in await _ops(s, uri)
    huri = s.open(helpers)
    s.change(huri, [T.TextDocumentContentChangeWholeDocument(text=_helpers("cos"))])
    regions = await s.regions(uri)  # the result imported the old text: stale, and says so
    assert regions.targets[0].message.startswith("stale: helpers.py changed"), regions.targets[0].message
    helpers.write_text(_helpers("cos"))
    s.client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(huri)))
    deadline = time.monotonic() + 120  # saving the import compiles its dependent again
    while "torch.cos" not in await _ops(s, uri):
        assert time.monotonic() < deadline, f"not compiled again after the save: {await _ops(s, uri)}"
        await asyncio.sleep(0.2)
    assert "torch.sin" not in await _ops(s, uri)
    regions = await s.wait_targets(uri)
    assert not regions.targets[0].message.startswith("stale"), regions.targets[0].message


@pytest.mark.parametrize("profile", ["neovim"])
async def test_import_changed_on_disk_or_in_a_buffer(start_server, tmp_path):
    model = _folder(tmp_path, "sin")
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path)
    uri = s.open(model)
    assert (await s.compile(uri, "f_example"))["ok"]
    assert "torch.sin" in await _ops(s, uri)
    (tmp_path / "helpers.py").write_text(_helpers("cos"))  # by another program: no editor event
    assert (await s.compile(uri, "f_example"))["ok"]
    assert "torch.cos" in await _ops(s, uri), "the worker kept the helpers it imported first"
    huri = s.open(tmp_path / "helpers.py")
    s.change(huri, [T.TextDocumentContentChangeWholeDocument(text=_helpers("tanh"))])  # unsaved
    assert (await s.compile(uri, "f_example"))["ok"]
    assert "torch.tanh" in await _ops(s, uri), "the compile did not import the open buffer's text"


# --- answering at once, cancelling --------------------------------------------------------------

@pytest.mark.parametrize("profile", ["neovim"])
async def test_compile_answers_at_once_and_cancel_kills_the_worker(start_server):
    s = await start_server({"compileTrigger": "manual", "timeoutSeconds": 300})
    uri = s.open(FIXTURES / "loops_forever.py")
    t0 = time.monotonic()
    answer = await s.queue_compile(uri, "sleeps_forever_example")  # a compile that never ends
    assert answer == {"targets": ["sleeps_forever_example"], "ok": True, "queued": True}
    assert time.monotonic() - t0 < 5
    pid = await _worker_running(s, uri, "sleeps_forever_example")
    assert (await s.command("fusionlens.cancel", uri)) == {"cancelled": ["sleeps_forever_example"], "ok": True}
    await _assert_cancelled(s, uri, "sleeps_forever_example", pid, "fusionlens.cancel")
    lens = next(x for x in await s.lenses(uri) if x.command.arguments[1] == "sleeps_forever_example")
    assert "cancelled" in lens.command.title
    assert (await s.command("fusionlens.cancel"))["cancelled"] == []
    await s.queue_compile(uri, "sleeps_forever_example")  # the next compile starts a new worker
    pid = await _worker_running(s, uri, "sleeps_forever_example")
    assert (await s.command("fusionlens.debugInfo"))["workerRestarts"] == 1
    assert (await s.command("fusionlens.cancel"))["cancelled"] == ["sleeps_forever_example"]
    await _assert_cancelled(s, uri, "sleeps_forever_example", pid, "fusionlens.cancel")


@pytest.mark.parametrize("profile", ["neovim"])
async def test_cancel_request_kills_a_waiting_compile(start_server):
    s = await start_server({"compileTrigger": "manual", "timeoutSeconds": 300})
    uri = s.open(FIXTURES / "loops_forever.py")
    params = T.ExecuteCommandParams(command="fusionlens.compile",
                                    arguments=[uri, "sleeps_forever_example", {"wait": True}])
    answer = asyncio.ensure_future(
        s.client.protocol.send_request_async(T.WORKSPACE_EXECUTE_COMMAND, params, msg_id="waiting-compile"))
    pid = await _worker_running(s, uri, "sleeps_forever_example")
    s.client.protocol.notify("$/cancelRequest", T.CancelParams(id="waiting-compile"))
    with pytest.raises(JsonRpcRequestCancelled):
        await asyncio.wait_for(answer, 15)
    await _assert_cancelled(s, uri, "sleeps_forever_example", pid, "$/cancelRequest")


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_progress_cancel_and_the_clients_token(start_server):
    s = await start_server({"compileTrigger": "manual", "timeoutSeconds": 300})
    uri = s.open(FIXTURES / "loops_forever.py")
    s.client.progress_reports["editor-token"] = []  # the client's own token: no create
    answer = await asyncio.wait_for(s.client.workspace_execute_command_async(T.ExecuteCommandParams(
        command="fusionlens.compile", arguments=[uri, "sleeps_forever_example"], work_done_token="editor-token")), 10)
    assert answer["queued"] is True
    pid = await _worker_running(s, uri, "sleeps_forever_example")
    reports = s.client.progress_reports["editor-token"]
    assert isinstance(reports[0], T.WorkDoneProgressBegin) and reports[0].cancellable is True, reports
    s.client.window_work_done_progress_cancel(T.WorkDoneProgressCancelParams(token="editor-token"))
    await _assert_cancelled(s, uri, "sleeps_forever_example", pid, "workDoneProgress/cancel")
    await s.wait_for(lambda: isinstance(reports[-1], T.WorkDoneProgressEnd), 10, "the progress' end")
    assert reports[-1].message == "cancelled"


# --- exit, untitled buffers (raw JSON-RPC) ------------------------------------------------------

class _Raw:
    """A server over stdio, driven by hand: messages read on a thread, requests from the
    server answered with null."""

    def __init__(self, cwd: Path, stderr: Path, env: dict | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "lsp_server"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=stderr.open("wb"), cwd=cwd,
                                     env=server_env(env))
        self.messages: queue.Queue = queue.Queue()
        self._ids = iter(range(1, 1 << 30))
        self._lock = threading.Lock()  # the reader thread answers the server's requests too
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.proc.stdout
        while True:
            headers = {}
            while (line := stream.readline().strip()):
                key, _, value = line.decode().partition(":")
                headers[key.strip().lower()] = value.strip()
            if not headers:
                return  # closed
            msg = json.loads(stream.read(int(headers["content-length"])))
            if "method" in msg and "id" in msg:
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            self.messages.put(msg)

    def send(self, obj: dict) -> None:
        body = json.dumps(obj).encode()
        with self._lock:
            self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            self.proc.stdin.flush()

    def notify(self, method: str, params: dict) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: dict, timeout: float = 60) -> dict:
        msg_id = next(self._ids)
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return self.wait(lambda m: m.get("id") == msg_id and "method" not in m, timeout)

    def wait(self, predicate, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.messages.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"no such message in {timeout} s") from None
            if predicate(msg):
                return msg

    def start(self, root: Path | None, options: dict) -> None:
        self.request("initialize", {"processId": None, "rootUri": root.as_uri() if root else None,
                                    "workspaceFolders": None, "capabilities": {}, "initializationOptions": options})
        self.notify("initialized", {})

    def open(self, uri: str, text: str) -> None:
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                              "text": text}})

    def command(self, name: str, *args, timeout: float = 60):
        answer = self.request("workspace/executeCommand", {"command": name, "arguments": list(args)}, timeout)
        assert "error" not in answer, answer
        return answer["result"]


def test_exit_without_shutdown_during_a_compile(tmp_path):
    raw = _Raw(REPO, tmp_path / "stderr.txt")
    pid = None
    try:
        raw.start(REPO, {"compileTrigger": "manual", "cacheFolder": str(tmp_path / "cache")})
        path = FIXTURES / "loops_forever.py"
        raw.open(path.as_uri(), path.read_text())
        assert raw.command("fusionlens.compile", path.as_uri(), "sleeps_forever_example", timeout=10)["queued"]
        deadline = time.monotonic() + 120
        while True:  # until the user's code runs in the worker
            assert time.monotonic() < deadline, "the compile never started running"
            target = next(t for t in raw.request("fusionlens/regions", {"uri": path.as_uri()})["result"]["targets"]
                          if t["name"] == "sleeps_forever_example")
            if target["status"] == "compiling" and target["message"] == "running":
                break
            time.sleep(0.1)
        pid = raw.command("fusionlens.debugInfo")["workerPid"]
        time.sleep(0.5)
        raw.notify("exit", {})
        assert raw.proc.wait(timeout=20) == 1  # LSP: exit without shutdown is status 1
        deadline = time.monotonic() + 10
        while not _gone(pid):
            assert time.monotonic() < deadline, f"worker {pid} still running after exit"
            time.sleep(0.1)
        err = (tmp_path / "stderr.txt").read_text()
        assert len(err) < 2000 and "Traceback" not in err, err[-3000:]
    finally:
        if raw.proc.poll() is None:
            raw.proc.kill()
        if pid is not None and not _gone(pid):
            os.killpg(pid, 9)


def test_untitled_buffer_without_a_folder(tmp_path):
    raw = _Raw(tmp_path, tmp_path / "stderr.txt", {"FUSIONLENS_WORKER_COMPILE": "lsp_fake_compile:compile_target"})
    try:
        raw.start(None, {"compileTrigger": "manual", "cacheFolder": str(tmp_path / "cache")})
        source = MODEL.replace("from helpers import act\n", "").replace("act(x)", "torch.sin(x)")
        raw.open("untitled:Untitled-1", source)
        answer = raw.command("fusionlens.compile", "untitled:Untitled-1", "f_example", {"wait": True},
                             timeout=240)
        assert answer == {"targets": ["f_example"], "ok": True}, answer
        regions = raw.request("fusionlens/regions", {"uri": "untitled:Untitled-1"})["result"]
        assert regions["targets"][0]["status"] == "ok", regions
        raw.request("shutdown", {})
        raw.notify("exit", {})
        assert raw.proc.wait(timeout=20) == 0
    finally:
        if raw.proc.poll() is None:
            raw.proc.kill()
