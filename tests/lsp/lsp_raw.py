"""A raw JSON-RPC client of the real server, for tests that decide what the client sends and
when (or whether) it answers the server's requests: settings races, transports, malformed
messages. Its stdio server runs the stand-in compiler (lsp_fake_compile.py) unless told."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path

from lsp_helpers import FAKE, REPO, server_env

CAPS = {"workspace": {"configuration": True}, "window": {"showDocument": {"support": False}}}


class Raw:
    """A JSON-RPC client over a stream: answers the server's requests with `answers[method]`
    (an async function of the params), keeps every notification."""

    def __init__(self, reader: asyncio.StreamReader, writer) -> None:
        self.reader, self.writer = reader, writer
        self.notes: list[dict] = []
        self.answers: dict = {}
        self._ids = 0
        self._waiting: dict = {}
        self.unmatched: list[dict] = []  # answers with no request waiting (id null)
        self.proc = None  # the server's process, where this client started it
        self._task = asyncio.get_running_loop().create_task(self._read())

    def send(self, obj: dict) -> None:
        body = json.dumps(obj).encode()
        self.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def errors(self) -> list[dict]:
        """The error answers to no request of ours (id null): what the server refused to read."""
        return [m for m in self.unmatched if "error" in m]

    def notify(self, method: str, params: dict) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params, timeout: float = 90) -> dict:
        """The whole response: {"result": ...} or {"error": {...}}."""
        self._ids += 1
        fut = self._waiting[self._ids] = asyncio.get_running_loop().create_future()
        self.send({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        return await asyncio.wait_for(fut, timeout)

    async def command(self, name: str, *args, timeout: float = 90) -> dict:
        return await self.request("workspace/executeCommand", {"command": name, "arguments": list(args)}, timeout)

    async def initialize(self, root: Path, options: dict | None, caps: dict = CAPS) -> dict:
        resp = await self.request("initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": caps,
                                                 "initializationOptions": options})
        self.notify("initialized", {})
        return resp

    def open(self, path: Path, text: str) -> str:
        uri = path.as_uri()
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                              "text": text}})
        return uri

    def texts(self, method: str) -> list[str]:
        return [m["params"].get("message", "") for m in self.notes if m.get("method") == method]

    async def _read(self) -> None:
        while True:
            headers = {}
            while True:
                line = await self.reader.readline()
                if not line:
                    return
                if not line.strip():
                    break
                key, _, value = line.decode().partition(":")
                headers[key.strip().lower()] = value.strip()
            msg = json.loads(await self.reader.readexactly(int(headers["content-length"])))
            if "method" not in msg:
                fut = self._waiting.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
                else:
                    self.unmatched.append(msg)
            elif "id" in msg:
                asyncio.get_running_loop().create_task(self._answer(msg))
            else:
                self.notes.append(msg)

    async def _answer(self, msg: dict) -> None:
        handler = self.answers.get(msg["method"])
        result = await handler(msg.get("params")) if handler else None
        self.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(Exception):
            self.writer.close()


async def debug_info(c: Raw) -> dict:
    return (await c.command("fusionlens.debugInfo"))["result"]


@contextlib.asynccontextmanager
async def stdio_server(tmp_path: Path, env: dict | None = None, args: tuple = ("-m", "lsp_server"),
                       cwd: Path = REPO, fake: bool = True):
    """The server over stdio (`python ARGS`, in `cwd`), its process as `client.proc`."""
    err = open(tmp_path / "server.stderr", "wb")
    proc = await asyncio.create_subprocess_exec(sys.executable, *args, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, stderr=err, cwd=cwd,
                                                env=server_env({**(FAKE if fake else {}), **(env or {})}))
    client = Raw(proc.stdout, proc.stdin)
    client.proc = proc
    try:
        yield client
    finally:
        await client.close()
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        err.close()


@contextlib.asynccontextmanager
async def server_process(*args: str, stderr: int | None = asyncio.subprocess.PIPE):
    """`python -P -m lsp_server ARGS` (a TCP or socket server) with the fake compiler, killed at the end."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-P", "-m", "lsp_server", *args, cwd=REPO,
                                                env=server_env(FAKE), stderr=stderr)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


async def connect_tcp(port: int, deadline: float):
    """A connection to the server's port, retried until it listens (or `deadline` passes)."""
    while True:
        try:
            return await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            assert time.monotonic() < deadline, "the server did not listen"
            await asyncio.sleep(0.1)
