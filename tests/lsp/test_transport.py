"""Transports: `--tcp HOST:PORT`, and stdio with the flags VS Code's client adds."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

from lsp_helpers import REPO, server_env


def _frame(obj: dict) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _read_message(stream) -> dict:
    headers = {}
    while True:
        line = stream.readline()
        assert line, "connection closed"
        line = line.strip()
        if not line:
            break
        key, _, value = line.decode().partition(":")
        headers[key.strip().lower()] = value.strip()
    return json.loads(stream.read(int(headers["content-length"])))


def _initialize_over(reader, write) -> dict:
    write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"processId": None, "rootUri": REPO.as_uri(), "capabilities": {}}}))
    while True:
        msg = _read_message(reader)
        if msg.get("id") == 1:
            break
    write(_frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
    write(_frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
    while _read_message(reader).get("id") != 2:
        pass
    write(_frame({"jsonrpc": "2.0", "method": "exit"}))
    return msg["result"]


def _check_capabilities(result: dict) -> None:
    caps = result["capabilities"]
    assert caps["hoverProvider"] and caps["inlayHintProvider"] and caps["codeLensProvider"]
    assert set(caps["executeCommandProvider"]["commands"]) >= {
        "fusionlens.compile", "fusionlens.showTrace", "fusionlens.showKernel", "fusionlens.clearCache"}
    assert result["serverInfo"]["name"] == "fusionlens-lsp"


def test_stdio_accepts_vscode_flags():
    proc = subprocess.Popen([sys.executable, "-m", "lsp_server", "--stdio", "--clientProcessId=1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=REPO, env=server_env())
    try:
        def write(data):
            proc.stdin.write(data)
            proc.stdin.flush()
        _check_capabilities(_initialize_over(proc.stdout, write))
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_tcp():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "lsp_server", "--tcp", f"127.0.0.1:{port}"],
                            cwd=REPO, env=server_env(), stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=30)
                break
            except OSError:
                assert time.monotonic() < deadline, "server did not listen"
                time.sleep(0.1)
        with conn:
            reader = conn.makefile("rb")
            _check_capabilities(_initialize_over(reader, conn.sendall))
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_worker_does_not_outlive_a_killed_server():
    """SIGKILL the server mid-compile (a user loop that never ends): the worker goes too."""
    import os
    import signal

    from lsp_helpers import FIXTURES

    proc = subprocess.Popen([sys.executable, "-m", "lsp_server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=REPO, env=server_env())
    worker_pid = None
    try:
        def write(obj):
            proc.stdin.write(_frame(obj))
            proc.stdin.flush()

        def wait_for(pred):
            while True:
                msg = _read_message(proc.stdout)
                if pred(msg):
                    return msg

        write({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "processId": None, "rootUri": REPO.as_uri(), "capabilities": {},
            "initializationOptions": {"compileTrigger": "manual", "timeoutSeconds": 300}}})
        wait_for(lambda m: m.get("id") == 1)
        write({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        path = FIXTURES / "loops_forever.py"
        uri = path.as_uri()
        write({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": path.read_text()}}})
        write({"jsonrpc": "2.0", "id": 2, "method": "workspace/executeCommand",
               "params": {"command": "fusionlens.compile", "arguments": [uri, "loops_forever_example"]}})
        wait_for(lambda m: m.get("method") == "fusionlens/status" and m["params"]["state"] == "compiling")
        deadline = time.monotonic() + 60
        while worker_pid is None and time.monotonic() < deadline:
            write({"jsonrpc": "2.0", "id": 3, "method": "workspace/executeCommand",
                   "params": {"command": "fusionlens.debugInfo", "arguments": []}})
            worker_pid = wait_for(lambda m: m.get("id") == 3)["result"]["workerPid"]
            time.sleep(0.2)
        assert worker_pid is not None
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.kill(worker_pid, 0)
            except ProcessLookupError:
                return
            # a zombie of a process we do not own counts as gone
            try:
                with open(f"/proc/{worker_pid}/stat") as f:
                    if f.read().split()[2] == "Z":
                        return
            except OSError:
                return
            time.sleep(0.2)
        raise AssertionError(f"worker {worker_pid} still running 15 s after the server was killed")
    finally:
        if proc.poll() is None:
            proc.kill()
        if worker_pid is not None:
            try:
                os.killpg(worker_pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
