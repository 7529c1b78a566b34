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
