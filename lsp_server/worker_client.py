"""The server's side of the worker: start it, send a compile, time it out, restart it.

Everything here runs on the server's asyncio loop; the worker is an asyncio subprocess in
its own session (process group), so a kill also takes down anything it started.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import os
import signal
import sys
from typing import Callable, Optional

logger = logging.getLogger(__name__)

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTUP_TIMEOUT_S = 180.0  # importing torch on a cold, busy machine can take a while


class WorkerError(Exception):
    """A compile that produced no report: the worker timed out, died, or failed to start."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # "timeout" | "crashed" | "startup"
        self.message = message


class Worker:
    """One worker process, started on demand and replaced when it dies or is killed."""

    def __init__(self, on_stderr: Optional[Callable[[str], None]] = None,
                 cwd: Optional[str] = None):
        self.proc: Optional[asyncio.subprocess.Process] = None
        self.device = "unknown"
        self.device_name = "unknown"
        self.startup_error: Optional[str] = None
        self._ids = itertools.count(1)
        self._stderr_tail: collections.deque = collections.deque(maxlen=30)
        self._stderr_task: Optional[asyncio.Task] = None
        self._on_stderr = on_stderr
        self.cwd = cwd
        self.restarts = 0  # processes started after the first one (after a kill or a death)
        self._started = False
        self._lock = asyncio.Lock()

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc and self.proc.returncode is None else None

    async def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._stderr_tail.clear()
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "lsp_server.worker",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, cwd=self.cwd or None,
            start_new_session=(os.name == "posix"), limit=1 << 28)
        self._stderr_task = asyncio.get_running_loop().create_task(self._pump_stderr(self.proc))
        try:
            msg = await asyncio.wait_for(self._read_message(), STARTUP_TIMEOUT_S)
        except asyncio.TimeoutError:
            await self.kill()
            raise WorkerError("startup", f"compile worker did not start in {STARTUP_TIMEOUT_S:.0f} s")
        if msg is None:
            code = self.proc.returncode if self.proc else None
            await self.kill()
            raise WorkerError("startup", f"compile worker exited during start-up (exit code {code})"
                              + self._tail_text())
        self.device = msg.get("device") or "cpu"
        self.device_name = msg.get("device_name") or self.device
        self.startup_error = msg.get("error")

    async def _pump_stderr(self, proc) -> None:
        assert proc.stderr is not None
        while True:
            line = await proc.stderr.readline()
            if not line:
                return
            text = line.decode("utf-8", "replace").rstrip("\n")
            self._stderr_tail.append(text)
            if self._on_stderr:
                try:
                    self._on_stderr(text)
                except Exception:  # noqa: BLE001
                    pass

    def _tail_text(self) -> str:
        lines = [l for l in self._stderr_tail if l.strip()][-8:]
        return ("\nlast worker output:\n" + "\n".join(lines)) if lines else ""

    async def _read_message(self) -> Optional[dict]:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                return None
            try:
                return json.loads(line)
            except ValueError:
                logger.warning("worker wrote a non-JSON line: %r", line[:200])

    async def ensure_started(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            if self._started:
                self.restarts += 1
            self._started = True
            await self._start()

    def kill_now(self) -> None:
        """Synchronous kill for interpreter exit (no event loop needed)."""
        proc = self.proc
        if proc is not None and proc.returncode is None:
            try:
                _kill_group(proc.pid)
            except (ProcessLookupError, PermissionError, OSError):
                pass

    async def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.returncode is None:
            try:
                _kill_group(proc.pid)
            except (ProcessLookupError, PermissionError, OSError):
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except asyncio.TimeoutError:
            pass
        if self._stderr_task:
            # let the pump drain what is left, then drop it
            try:
                await asyncio.wait_for(self._stderr_task, 1)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._stderr_task.cancel()
            self._stderr_task = None

    async def request(self, payload: dict, timeout: float,
                      on_started: Optional[Callable[[], None]] = None) -> dict:
        """Send one request and wait for its answer. Raises WorkerError on timeout (the
        worker is killed) or when the worker dies; on cancellation the worker is killed."""
        async with self._lock:
            try:
                await self.ensure_started()
            except asyncio.CancelledError:
                await self.kill()
                raise
            proc = self.proc
            assert proc is not None and proc.stdin is not None
            msg_id = next(self._ids)
            payload = dict(payload, id=msg_id)
            try:
                proc.stdin.write((json.dumps(payload) + "\n").encode())
                await proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                await proc.wait()
                code = proc.returncode
                await self.kill()
                raise WorkerError("crashed", f"compile worker died (exit code {code})" + self._tail_text())

            async def answer():
                while True:
                    msg = await self._read_message()
                    if msg is None:
                        return None
                    if msg.get("id") != msg_id:
                        continue
                    if msg.get("event") == "started":
                        if on_started:
                            on_started()
                        continue
                    return msg

            try:
                msg = await asyncio.wait_for(answer(), timeout)
            except asyncio.TimeoutError:
                await self.kill()
                raise WorkerError("timeout", f"compile timed out after {timeout:g} s "
                                  "(setting fusionlens.timeoutSeconds); the worker was killed")
            except asyncio.CancelledError:
                await self.kill()
                raise
            if msg is None:
                try:
                    await asyncio.wait_for(proc.wait(), 5)
                except asyncio.TimeoutError:
                    pass
                code = proc.returncode
                await self.kill()
                how = _describe_exit(code)
                raise WorkerError("crashed", f"compile worker died ({how}) while compiling; "
                                  "it will be restarted" + self._tail_text())
            return msg


def _kill_group(pid: int) -> None:
    """SIGKILL the worker's process group (it is a session leader: pgid == pid); where there
    are no process groups (Windows), kill the process."""
    if hasattr(os, "killpg"):
        os.killpg(pid, signal.SIGKILL)
    else:
        os.kill(pid, signal.SIGTERM)


def _describe_exit(code: Optional[int]) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
