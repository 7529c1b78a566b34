"""Issue 32, item 7: transports that cannot be squatted. Over --tcp a connection that closes
before `initialize` (a port probe) or says nothing within the deadline does not keep the
editor out; a second --socket server on a live path refuses to start and leaves the first's
socket alone; SIGTERM removes the socket."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time

import pytest

from lsp_helpers import FAKE, REPO, server_env
from lsp_raw import Raw, connect_tcp, debug_info, server_process


@pytest.mark.asyncio
async def test_a_port_probe_and_a_silent_connection_do_not_keep_the_editor_out(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with server_process("--tcp", f"127.0.0.1:{port}", "--initialize-timeout", "1.5") as proc:
        _, probe = await connect_tcp(port, time.monotonic() + 30)
        probe.close()  # a port probe: connects, closes
        await asyncio.sleep(0.3)
        assert proc.returncode is None, "a port probe stopped the server"
        _, silent = await connect_tcp(port, time.monotonic() + 10)  # holds the slot, says nothing
        await asyncio.sleep(2.5)  # past the deadline: dropped
        editor = Raw(*await connect_tcp(port, time.monotonic() + 10))
        editor.answers["workspace/configuration"] = lambda params: asyncio.sleep(0, [{}])
        assert "capabilities" in (await editor.initialize(tmp_path, {"compileTrigger": "manual"}))["result"]
        assert (await debug_info(editor))["workerPid"] is None
        silent.close()
        await editor.close()
        await asyncio.wait_for(proc.wait(), 20)  # its one client left: the server ends


@pytest.mark.asyncio
async def test_a_second_socket_server_refuses_and_sigterm_removes_the_socket(tmp_path):
    path = tmp_path / "run" / "fl.sock"
    async with server_process("--socket", str(path)) as first:
        deadline = time.monotonic() + 30
        while not path.exists():
            assert time.monotonic() < deadline and first.returncode is None, "no socket"
            await asyncio.sleep(0.05)
        second = subprocess.run([sys.executable, "-P", "-m", "lsp_server", "--socket", str(path)], cwd=REPO,
                                env=server_env(FAKE), capture_output=True, text=True, timeout=60)
        assert second.returncode != 0 and "not starting" in second.stderr, second.stderr
        assert path.exists()
        editor = Raw(*await asyncio.open_unix_connection(str(path)))  # the first one's socket still answers
        editor.answers["workspace/configuration"] = lambda params: asyncio.sleep(0, [{}])
        assert "result" in await editor.initialize(tmp_path, {"compileTrigger": "manual"})
        first.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(first.wait(), 20) == 128 + signal.SIGTERM
        assert not path.exists() and not (tmp_path / "run" / "fl.sock.lock").exists()
        await editor.close()
