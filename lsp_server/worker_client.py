"""The server's side of the worker: start it, send a request (lsp_server/protocol.py), time
it out, restart it, and say where the user's code was when it hung or died.

Everything here runs on the server's asyncio loop; the worker is an asyncio subprocess in
its own session (process group), and a kill ends its whole tree (lsp_server/process_tree.py:
the processes user code started, those that left the group too). It starts with `python -P`
in a neutral folder, so neither the workspace nor the server's folder comes before
FusionLens and torch on its sys.path (worker_imports.py adds the user's folders per compile).
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import itertools
import logging
import os
import re
import signal
import sys
import tempfile
from collections.abc import Callable

from fusionlens.report.discovery import CodeRoots, is_model_code
from lsp_server import process_tree
from lsp_server.protocol import (Answer, CompileAnswer, CompileRequest, Failure, Message, PingAnswer, PingRequest,
                                 Ready, ReproAnswer, ReproRequest, Stacks, Started, UserFrame, Where, WhereEvent,
                                 decode, encode)
from lsp_server.worker_output import READ_BYTES, OutputLines

logger = logging.getLogger(__name__)

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTUP_TIMEOUT_S = 180.0  # importing torch on a cold, busy machine can take a while
NEUTRAL_CWD = os.path.abspath(os.sep)  # the worker's folder until a compile says which (no user modules there)


class WorkerError(Exception):
    """A compile that produced no report: the worker timed out, died, or failed to start."""

    def __init__(self, kind: str, message: str, where: Where | None = None):
        super().__init__(message)
        self.kind = kind  # "timeout" | "crashed" | "startup"
        self.message = message
        self.where = where  # where the user's code was, its `note` saying what happened there


class Worker:
    """One worker process, started on demand and replaced when it dies or is killed."""

    def __init__(self, on_stderr: Callable[[str], None] | None = None,
                 cwd: str | None = None):
        self.proc: asyncio.subprocess.Process | None = None
        self.device = "unknown"
        self.device_name = "unknown"
        self.startup_error: str | None = None
        self._ids = itertools.count(1)
        self._output = OutputLines(on_stderr)  # the worker's stderr, bounded
        self._stderr_task: asyncio.Task[None] | None = None
        self.cwd = cwd
        self.restarts = 0  # processes started after the first one (after a kill or a death)
        self._started = False
        self._lock = asyncio.Lock()
        self._stacks_path: str | None = None  # faulthandler dumps of the worker (worker.py)
        self._stacks: Stacks | None = None  # the Ready message's: main thread id, non-user roots

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc and self.proc.returncode is None else None

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env["FUSIONLENS_LSP_PID"] = str(os.getpid())  # the worker ends itself when this one is gone
        if self._stacks_path is None:
            try:
                fd, self._stacks_path = tempfile.mkstemp(prefix="fusionlens-stacks-", suffix=".txt")
                os.close(fd)
                atexit.register(_remove, self._stacks_path)
            except OSError:
                self._stacks_path = None
        if self._stacks_path:
            env["FUSIONLENS_WORKER_STACKS"] = self._stacks_path
        return env

    async def _start(self) -> None:
        self._stacks = None
        self._output.clear()
        # -P: `-m` would put the working folder first on sys.path (a workspace's own `compiler`
        # or `torch.py` would replace FusionLens's); each compile chdirs to its folder later
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-P", "-m", "lsp_server.worker",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=self._environment(), cwd=NEUTRAL_CWD,
            start_new_session=(os.name == "posix"), limit=1 << 28)
        self._stderr_task = asyncio.get_running_loop().create_task(self._pump_stderr(self.proc))
        try:
            msg = await asyncio.wait_for(self._read_message(), STARTUP_TIMEOUT_S)
        except TimeoutError:
            await self.kill()
            raise WorkerError("startup", f"compile worker did not start in {STARTUP_TIMEOUT_S:.0f} s") from None
        if not isinstance(msg, Ready):
            code = self.proc.returncode if self.proc else None
            await self.kill()
            raise WorkerError("startup", f"compile worker exited during start-up (exit code {code})"
                              + self._tail_text())
        self.device = msg.device or "cpu"
        self.device_name = msg.device_name or self.device
        self.startup_error = msg.error
        self._stacks = msg.stacks

    async def _pump_stderr(self, proc: asyncio.subprocess.Process) -> None:
        """Read the worker's stderr to its end, in chunks (never a whole line: one can be a
        gigabyte), so the worker never blocks on a full pipe; OutputLines keeps what is bounded."""
        assert proc.stderr is not None
        while True:
            chunk = await proc.stderr.read(READ_BYTES)
            if not chunk:
                self._output.close()
                return
            self._output.feed(chunk)

    def _tail_text(self) -> str:
        return self._output.tail_text()

    async def _read_message(self) -> Message | None:
        """The worker's next message; None when its stdout ends (it died)."""
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                return None
            msg = decode(line)  # a line of no message is logged and skipped
            if msg is not None:
                return msg

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
            except OSError:
                pass

    def discard(self) -> None:
        """At exit: kill the worker now and remove its stacks file (no event loop needed)."""
        self.kill_now()
        if self._stacks_path:
            _remove(self._stacks_path)

    async def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.returncode is None:
            try:
                _kill_group(proc.pid)
            except OSError:
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            pass
        if self._stderr_task:
            # let the pump drain what is left, then drop it
            try:
                await asyncio.wait_for(self._stderr_task, 1)
            except (TimeoutError, asyncio.CancelledError):
                self._stderr_task.cancel()
            self._stderr_task = None

    async def request(self, request: CompileRequest | ReproRequest | PingRequest, timeout: float,
                      on_started: Callable[[], None] | None = None) -> Answer:
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
            request = dataclasses.replace(request, id=next(self._ids))
            self._output.restart()
            if not isinstance(request, PingRequest):
                request = dataclasses.replace(request, timeout=timeout)
            cwd = request.cwd if not isinstance(request, PingRequest) and request.cwd else self.cwd
            try:
                proc.stdin.write((encode(request) + "\n").encode())
                await proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                await proc.wait()
                code = proc.returncode
                await self.kill()
                raise WorkerError("crashed", f"compile worker died (exit code {code})" + self._tail_text()) from None
            seen: dict[str, Where] = {}  # the worker's latest WhereEvents: "sample", "exit"
            try:
                msg = await asyncio.wait_for(self._answer(request.id, seen, on_started), timeout)
            except TimeoutError:
                await self.kill()
                where = self._dumped_where("Timeout", cwd) or seen.get("sample")
                raise WorkerError("timeout", f"compile timed out after {timeout:g} s "
                                  "(setting fusionlens.timeoutSeconds); the worker was killed",
                                  _noted(where, f"timed out after {timeout:g} s here")) from None
            except asyncio.CancelledError:
                await self.kill()
                raise
            finally:
                self._output.restart()  # what the worker writes between compiles has a cap of its own
            if msg is None:
                raise await self._died(proc, seen, cwd)
            return msg

    async def _answer(self, msg_id: int, seen: dict[str, Where],
                      on_started: Callable[[], None] | None) -> Answer | None:
        """The answer to request `msg_id`, taking its events on the way; None if the worker died."""
        while True:
            msg = await self._read_message()
            if msg is None:
                return None
            if getattr(msg, "id", None) != msg_id:
                continue
            if isinstance(msg, Started):
                if on_started:
                    on_started()
            elif isinstance(msg, WhereEvent):
                seen["exit" if msg.where.exit is not None else "sample"] = msg.where
            elif isinstance(msg, (CompileAnswer, Failure, PingAnswer, ReproAnswer)):
                return msg

    async def _died(self, proc: asyncio.subprocess.Process, seen: dict[str, Where],
                    cwd: str | None) -> WorkerError:
        """The worker ended during a request: how, and where its user code was."""
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            pass
        code = proc.returncode
        await self.kill()
        how = _describe_exit(code)
        where = self._dumped_where("Fatal Python error", cwd) or seen.get("exit")
        note = f"crashed the compile worker ({how}) here"
        if where is None and seen.get("sample"):
            where, note = seen["sample"], f"crashed the compile worker ({how}); it was last seen here"
        return WorkerError("crashed", f"compile worker died ({how}) while compiling; "
                           "it will be restarted" + self._tail_text(), _noted(where, note))

    def _dumped_where(self, kind: str, cwd: str | None) -> Where | None:
        """The user position in the worker's last faulthandler dump of `kind` ("Timeout",
        "Fatal Python error") for the compile that just ended, if any."""
        if not self._stacks_path or self._stacks is None:
            return None
        try:
            with open(self._stacks_path, encoding="utf-8", errors="replace") as f:
                text = f.read(4 << 20)
        except OSError:
            return None
        roots = CodeRoots(**{k: tuple(v) for k, v in self._stacks.roots.items()})
        return parse_stack_dump(text, kind, self._stacks.thread, roots, cwd)


def _kill_group(pid: int) -> None:
    """SIGKILL the worker's process tree: its group (it is a session leader: pgid == pid) and
    every process below it, those that called setsid too; where there are no process groups
    (Windows), kill the process."""
    if hasattr(os, "killpg"):
        process_tree.kill_tree(pid)
    else:
        os.kill(pid, signal.SIGTERM)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _noted(where: Where | None, note: str) -> Where | None:
    return dataclasses.replace(where, note=note) if where else None


_DUMP_START = re.compile(r"^(Timeout \(|Fatal Python error)", re.M)
_THREAD = re.compile(r"^(?:(Current thread|Thread) (0x[0-9a-fA-F]+)|Stack) \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*?)\s*$')


@dataclasses.dataclass
class _Thread:
    current: bool  # the thread that crashed ("Current thread")
    ident: int | None
    frames: list[UserFrame]  # innermost first: every frame, user code or not


def parse_stack_dump(text: str, kind: str, main_thread: int | None, roots: CodeRoots,
                     cwd: str | None = None) -> Where | None:
    """The innermost user frame of the last `faulthandler` dump of `kind` in `text`: in the
    thread that crashed (a fatal signal), else in the main thread. A frame is a user frame
    when it is model code by `fusionlens.report.discovery.is_model_code` with the worker's `roots`
    (the folders fusionlens.ir.provenance classifies by); the Where's stack is the user frames."""
    starts = [m.start() for m in _DUMP_START.finditer(text)]
    dumps = [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]
    for dump in reversed([d for d in dumps if d.startswith(kind)]):
        threads = _threads(dump, cwd)
        for thread in sorted(threads, key=lambda t: (not t.current, t.ident != main_thread)):
            if not thread.current and thread.ident != main_thread:
                continue
            stack = [f for f in thread.frames if is_model_code(f.file, roots)]
            if stack:
                return Where(stack[0].file, stack[0].line, stack[0].function, stack)
    return None


def _threads(dump: str, cwd: str | None) -> list[_Thread]:
    threads: list[_Thread] = []
    for line in dump.splitlines():
        m = _THREAD.match(line)
        if m:
            threads.append(_Thread(m.group(1) != "Thread", int(m.group(2), 16) if m.group(2) else None, []))
            continue
        m = _FRAME.match(line)
        if m and threads:
            path = _unescape(m.group(1))
            if not path.startswith("<") and not os.path.isabs(path) and cwd:
                path = os.path.join(cwd, path)
            path = os.path.abspath(path) if not path.startswith("<") else path
            threads[-1].frames.append(UserFrame(path, int(m.group(2)), m.group(3)))
    return threads


def _unescape(path: str) -> str:
    """faulthandler writes non-ASCII characters as \\xNN, \\uNNNN or \\UNNNNNNNN."""
    if "\\" not in path:
        return path
    return re.sub(r"\\(x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})", lambda m: chr(int(m.group(1)[1:], 16)), path)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
