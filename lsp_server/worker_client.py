"""The server's side of the worker: start it, send a compile, time it out, restart it.

Everything here runs on the server's asyncio loop; the worker is an asyncio subprocess in
its own session (process group), so a kill also takes down anything it started.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import itertools
import json
import logging
import os
import re
import signal
import sys
import tempfile
from typing import Callable, Optional

from compiler.discovery import CodeRoots, is_model_code

logger = logging.getLogger(__name__)

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTUP_TIMEOUT_S = 180.0  # importing torch on a cold, busy machine can take a while


class WorkerError(Exception):
    """A compile that produced no report: the worker timed out, died, or failed to start."""

    def __init__(self, kind: str, message: str, where: Optional[dict] = None):
        super().__init__(message)
        self.kind = kind  # "timeout" | "crashed" | "startup"
        self.message = message
        # where the user's code was: {"file", "line", "function", "stack": [{"file", "line",
        # "function"}, ...] (user frames, innermost first), "note": "timed out after 4 s here"}
        self.where = where


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
        self._stacks_path: Optional[str] = None  # faulthandler dumps of the worker (worker.py)
        self._stacks: dict = {}  # the ready message's "stacks": main thread id, non-user roots

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc and self.proc.returncode is None else None

    async def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self._stacks_path is None:
            try:
                fd, self._stacks_path = tempfile.mkstemp(prefix="fusionlens-stacks-", suffix=".txt")
                os.close(fd)
                atexit.register(_remove, self._stacks_path)
            except OSError:
                self._stacks_path = None
        if self._stacks_path:
            env["FUSIONLENS_WORKER_STACKS"] = self._stacks_path
        self._stacks = {}
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
        self._stacks = msg.get("stacks") or {}

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
            payload = dict(payload, id=msg_id, timeout=timeout)
            seen: dict = {}  # the worker's latest "where" events: "sample", "exit"
            cwd = payload.get("cwd") or self.cwd
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
                    if msg.get("event") == "where":
                        where = msg.get("where")
                        if isinstance(where, dict):
                            seen["exit" if "exit" in where else "sample"] = where
                        continue
                    return msg

            try:
                msg = await asyncio.wait_for(answer(), timeout)
            except asyncio.TimeoutError:
                await self.kill()
                where = self._dumped_where("Timeout", cwd) or seen.get("sample")
                raise WorkerError("timeout", f"compile timed out after {timeout:g} s "
                                  "(setting fusionlens.timeoutSeconds); the worker was killed",
                                  _noted(where, f"timed out after {timeout:g} s here"))
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
                where = self._dumped_where("Fatal Python error", cwd) or seen.get("exit")
                note = f"crashed the compile worker ({how}) here"
                if where is None and seen.get("sample"):
                    where, note = seen["sample"], f"crashed the compile worker ({how}); it was last seen here"
                raise WorkerError("crashed", f"compile worker died ({how}) while compiling; "
                                  "it will be restarted" + self._tail_text(), _noted(where, note))
            return msg

    def _dumped_where(self, kind: str, cwd: Optional[str]) -> Optional[dict]:
        """The user position in the worker's last faulthandler dump of `kind` ("Timeout",
        "Fatal Python error") for the compile that just ended, if any."""
        if not self._stacks_path or not self._stacks:
            return None
        try:
            with open(self._stacks_path, encoding="utf-8", errors="replace") as f:
                text = f.read(4 << 20)
        except OSError:
            return None
        roots = CodeRoots(**{k: tuple(v) for k, v in (self._stacks.get("roots") or {}).items()})
        return parse_stack_dump(text, kind, self._stacks.get("thread"), roots, cwd)


def _kill_group(pid: int) -> None:
    """SIGKILL the worker's process group (it is a session leader: pgid == pid); where there
    are no process groups (Windows), kill the process."""
    if hasattr(os, "killpg"):
        os.killpg(pid, signal.SIGKILL)
    else:
        os.kill(pid, signal.SIGTERM)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _noted(where: Optional[dict], note: str) -> Optional[dict]:
    return dict(where, note=note) if where else None


_DUMP_START = re.compile(r"^(Timeout \(|Fatal Python error)", re.M)
_THREAD = re.compile(r"^(?:(Current thread|Thread) (0x[0-9a-fA-F]+)|Stack) \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*?)\s*$')


def parse_stack_dump(text: str, kind: str, main_thread: Optional[int], roots: CodeRoots,
                     cwd: Optional[str] = None) -> Optional[dict]:
    """The innermost user frame of the last `faulthandler` dump of `kind` in `text`: in the
    thread that crashed (a fatal signal), else in the main thread. A frame is a user frame
    when it is model code by `compiler.discovery.is_model_code` with the worker's `roots`
    (the folders compiler.provenance classifies by). Returns {"file", "line",
    "function", "stack"} (stack: the user frames, innermost first) or None."""
    starts = [m.start() for m in _DUMP_START.finditer(text)]
    dumps = [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]

    for dump in reversed([d for d in dumps if d.startswith(kind)]):
        threads: list = []  # (is current, thread id, frames innermost first)
        for line in dump.splitlines():
            m = _THREAD.match(line)
            if m:
                ident = int(m.group(2), 16) if m.group(2) else None
                threads.append((m.group(1) != "Thread", ident, []))
                continue
            m = _FRAME.match(line)
            if m and threads:
                path = _unescape(m.group(1))
                if not path.startswith("<") and not os.path.isabs(path) and cwd:
                    path = os.path.join(cwd, path)
                threads[-1][2].append({"file": os.path.abspath(path) if not path.startswith("<") else path,
                                       "line": int(m.group(2)), "function": m.group(3)})
        ranked = sorted(threads, key=lambda t: (not t[0], t[1] != main_thread))
        for current, ident, frames in ranked:
            if not current and ident != main_thread:
                continue
            stack = [f for f in frames if is_model_code(f["file"], roots)]
            if stack:
                return dict(stack[0], stack=stack)
    return None


def _unescape(path: str) -> str:
    """faulthandler writes non-ASCII characters as \\xNN, \\uNNNN or \\UNNNNNNNN."""
    if "\\" not in path:
        return path
    return re.sub(r"\\(x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})", lambda m: chr(int(m.group(1)[1:], 16)), path)


def _describe_exit(code: Optional[int]) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
