"""Compile jobs: debounced scheduling, the one-at-a-time queue, cancelling, running a job in
the worker process and keeping its result (the cache and the results shown in the editor).

CompileJobsMixin is part of FusionLensServer (lsp_server.server); its state (`queue`,
`running`, `active`, `cache`, `latest`, `generation`, ...) is set up in the server's __init__.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import uuid
from typing import Any, Optional

from lsprotocol import types as T

from lsp_server.documents import DocState
from lsp_server.views import Result, load_report, report_summary
from lsp_server.worker_client import WorkerError

logger = logging.getLogger("fusionlens.lsp")

EXECUTION_DISABLED = "not compiled: running user code is disabled (fusionlens.allowExecution is false)"


@dataclasses.dataclass
class Job:
    uri: str
    path: str  # normalised
    fs_path: str
    target: str
    key: tuple
    version: Optional[int]
    snapshot: str
    target_line: Optional[int]
    options: tuple
    future: asyncio.Future
    source: Optional[str] = None  # the buffer's text when it differs from the saved file
    command: bool = False  # the user asked for it (tell them how it ended)
    task: Optional[asyncio.Task] = None
    started: bool = False
    on_start: list = dataclasses.field(default_factory=list)  # callables, run when user code starts


class CompileJobsMixin:
    """Scheduling, running and finishing compile jobs (methods of FusionLensServer)."""

    def schedule(self, uri: str, reason: str) -> None:
        """Debounced automatic compile of every target in the document."""
        old = self._timers.pop(uri, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()

        def fire():
            self._timers.pop(uri, None)
            loop.create_task(self.compile_targets(uri, None, reason=reason, force=False))

        self._timers[uri] = loop.call_later(self.settings.debounceMs / 1000.0, fire)

    def cancel(self, uri: str, reason: str, older_than: Optional[int] = None) -> list:
        """Cancel the pending debounce, queued jobs and the running job of a document."""
        timer = self._timers.pop(uri, None)
        if timer is not None:
            timer.cancel()
        cancelled = []
        for job in list(self.queue):
            if job.uri == uri and (older_than is None or job.version is None or job.version < older_than):
                self.queue.remove(job)
                cancelled.append(job)
                self._finish(job, None, reason)
        job = self.running
        if job is not None and job.uri == uri and job.task is not None and (
                older_than is None or job.version is None or job.version < older_than):
            job.task.cancel(reason)
            cancelled.append(job)
        return cancelled

    async def compile_targets(self, uri: str, names: Optional[list], reason: str = "command",
                              force: bool = True, token: Any = None) -> dict:
        """Compile the document's targets (all when `names` is None) as the buffer holds them:
        an edited or untitled buffer compiles its own text. A request the user made (a
        command) that is refused or fails says so with window/showMessage as well as in the
        lens and the return value."""
        state = self.doc(uri)
        command = reason == "command"
        all_names = [t.name for t in state.targets]
        if names is None:
            names = all_names
        unknown = [n for n in names if n not in all_names]
        names = [n for n in names if n in all_names]
        if state.syntax_error is not None:
            line, _, msg = state.syntax_error
            return self._refuse(state, names, f"not compiled: {msg} (line {line + 1})", command)
        if not self.settings.allowExecution:
            return self._refuse(state, names, EXECUTION_DISABLED, command)
        if unknown:
            msg = (f"no @compiler.example target named {', '.join(unknown)} in "
                   f"{os.path.basename(state.fs_path)} (found: {', '.join(all_names) or 'none'})")
            if command:
                self.tell(T.MessageType.Warning, msg)
            if not names:
                return {"targets": [], "ok": False, "message": msg}
        if not names:
            msg = "no @compiler.example targets in this file"
            if command:
                self.tell(T.MessageType.Info, msg)
            return {"targets": [], "ok": True, "message": msg}
        text = state.parsed_text or ""
        try:
            with open(state.fs_path, encoding="utf-8") as f:
                saved = f.read()
        except (OSError, UnicodeDecodeError):
            saved = None  # untitled, or not on disk (yet)
        source = None if saved == text else text  # the worker compiles the buffer, not the file
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        infos = {t.name: t for t in state.targets}
        opts = self.settings.options_key()
        version = self.workspace.get_text_document(uri).version
        futures = []
        for name in names:
            key = (digest, state.path, name, opts)
            cached = self.cache.get(key)
            if cached is not None and not force:
                self._set_latest(cached)
                futures.append(_done(cached))
                continue
            job = self.active.get((state.path, name))
            if job is not None and job.key == key:
                futures.append(job.future)
                continue
            if job is not None:  # an older version of this target is queued or running
                self.cancel_job(job, "superseded by a newer compile")
            info = infos.get(name)
            job = Job(uri=uri, path=state.path, fs_path=state.fs_path, target=name, key=key, version=version,
                      snapshot=text, target_line=(info.line - 1) if info else None, options=opts,
                      future=asyncio.get_running_loop().create_future(), source=source, command=command)
            state.notes.pop(name, None)
            state.cancelled.discard(name)
            self.queue.append(job)
            self.active[(state.path, name)] = job
            futures.append(job.future)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.get_running_loop().create_task(self._run_queue())
        self.refresh(uri)

        progress = await self._progress_begin(token, f"FusionLens: compiling {os.path.basename(state.fs_path)}",
                                              f"compiling and benchmarking {len(names)} target(s)")
        if progress is not None:

            def reporter(target):
                def report():
                    self.work_done_progress.report(progress, T.WorkDoneProgressReport(
                        message=f"running, tracing and benchmarking {target}"))
                return report

            for name in names:
                job = self.active.get((state.path, name))
                if job is not None and not job.future.done():
                    if job.started:
                        reporter(name)()
                    job.on_start.append(reporter(name))
        results = []
        done = 0
        for fut in asyncio.as_completed(futures):
            res = await fut
            done += 1
            results.append(res)
            if progress is not None:
                label = "cancelled" if res is None else f"{res.target}: {res.status}"
                self.work_done_progress.report(progress, T.WorkDoneProgressReport(
                    message=f"{label} ({done}/{len(futures)})", percentage=int(100 * done / len(futures))))
        if progress is not None:
            self.work_done_progress.end(progress, T.WorkDoneProgressEnd(message="done"))
        ok = all(r is not None and r.status == "ok" for r in results) and not unknown
        return {"targets": names, "ok": ok}

    def _refuse(self, state: DocState, names: list, msg: str, command: bool) -> dict:
        """Nothing is compiled: the lens of each target says why, and so does a message when
        the user asked."""
        for n in names:
            state.notes[n] = msg
        if command:
            self.tell(T.MessageType.Warning, msg)
        self.refresh(state.uri)
        return {"targets": names, "ok": False, "message": msg}

    def cancel_job(self, job: Job, reason: str) -> None:
        if job in self.queue:
            self.queue.remove(job)
            self._finish(job, None, reason)
        elif job is self.running and job.task is not None:
            job.task.cancel(reason)

    async def _progress_begin(self, token: Any, title: str, message: str):
        if token is None:
            if not self.caps("window", "work_done_progress"):
                return None
            token = f"fusionlens-{uuid.uuid4().hex[:12]}"
            try:
                await asyncio.wait_for(self.work_done_progress.create_async(token), 10)
            except Exception:  # noqa: BLE001 - no progress then
                return None
        try:
            self.work_done_progress.begin(token, T.WorkDoneProgressBegin(title=title, message=message,
                                                                         percentage=0, cancellable=False))
        except Exception:  # noqa: BLE001
            return None
        return token

    async def _run_queue(self) -> None:
        while self.queue:
            job = self.queue.pop(0)
            self.running = job
            job.task = asyncio.get_running_loop().create_task(self._execute(job))
            result = None
            reason = "cancelled"
            try:
                result = await job.task
            except asyncio.CancelledError as e:
                reason = str(e.args[0]) if e.args else "cancelled"
                if asyncio.current_task().cancelling():  # the runner itself is going down
                    self.running = None
                    self._finish(job, None, reason)
                    raise
            except Exception as e:  # noqa: BLE001 - never leave a job hanging
                logger.exception("compile job failed")
                result = self._failure(job, "internal", f"internal error in the language server: {e}")
            self.running = None
            self._finish(job, result, reason)

    async def _execute(self, job: Job) -> Result:
        name = f"{job.target} ({os.path.basename(job.fs_path)})"
        self._output_lines = 0
        self.notify_status("compiling", f"compiling and benchmarking {name}", job.uri)
        root = self.workspace_root(self.docs.get(job.uri) or DocState(job.uri))
        self.worker.cwd = root
        executors, repeats, device, gpu = job.options
        payload = {"cmd": "compile", "path": job.fs_path, "target": job.target,
                   "executors": list(executors) if executors is not None else None,
                   "repeats": repeats, "device": device, "gpu": gpu, "benchmark": True,
                   "sys_path": [root], "cwd": root, "source": job.source}

        def on_started():
            job.started = True
            for callback in job.on_start:
                try:
                    callback()
                except Exception:  # noqa: BLE001
                    pass

        try:
            msg = await self.worker.request(payload, self.settings.timeoutSeconds, on_started)
        except WorkerError as e:
            self.last_device = self.worker.device_name if self.worker.device_name != "unknown" else self.last_device
            return self._failure(job, e.kind, e.message, e.where)
        if self.worker.device_name != "unknown":
            self.last_device = self.worker.device_name
        if not msg.get("ok"):
            tb = msg.get("traceback") or ""
            if tb:
                self.window_log_message(T.LogMessageParams(type=T.MessageType.Error,
                                                           message=f"compiling {name} raised:\n{tb}"))
            return self._failure(job, "internal", f"the compiler raised {msg.get('error')}")
        try:
            report = load_report(msg["report"])
        except Exception as e:  # noqa: BLE001
            return self._failure(job, "internal", f"unreadable compile report: {e}")
        if report.device_name:
            self.last_device = report.device_name
        status = "ok" if report.status == "ok" else "error"
        message = report_summary(report) if status == "ok" else (
            report.error.message if report.error is not None else "compile failed")
        self._seq += 1
        res = Result(job.target, job.path, job.key, status, message, report, {job.path: job.snapshot},
                     job.target_line, "report", self._seq)
        return _with_snapshots(res)

    def _failure(self, job: Job, kind: str, message: str, where: Optional[dict] = None) -> Result:
        """A compile without a report; `where`: the user's position when the worker timed
        out or died (its file, if another, gets a diagnostic too)."""
        self._seq += 1
        res = Result(job.target, job.path, job.key, "error", message, None, {job.path: job.snapshot},
                     job.target_line, kind, self._seq, where=where)
        return _with_snapshots(res)

    def _finish(self, job: Job, result: Optional[Result], reason: str) -> None:
        if self.active.get((job.path, job.target)) is job:
            del self.active[(job.path, job.target)]
        state = self.docs.get(job.uri)
        if result is None:
            if state is not None:
                state.notes[job.target] = f"compile cancelled: {reason}"
                state.cancelled.add(job.target)
            self.notify_status("idle", f"cancelled {job.target}: {reason}", job.uri)
            if job.command:
                self.tell(T.MessageType.Info, f"compiling {job.target} was cancelled: {reason}")
        else:
            if result.kind == "report":
                self.cache[job.key] = result  # failures of the machinery are retried, not cached
            self._set_latest(result)
            speedup = None
            if result.report is not None and result.report.timings is not None:
                speedup = result.report.timings.speedup_vs_eager
            if result.status == "ok":
                state_name = "idle"
                msg = f"{job.target}: {result.message}"
            else:
                state_name = "failed"
                msg = f"{job.target} failed: {result.message.splitlines()[0] if result.message else 'error'}"
                if job.command:
                    self.tell(T.MessageType.Error, f"compiling {msg}")
            self.notify_status(state_name, msg, job.uri, speedup)
        if not job.future.done():
            job.future.set_result(result)
        self.refresh(job.uri)

    def _set_latest(self, result: Result) -> None:
        key = (result.path, result.target)
        if self.latest.get(key) is not result:
            self.latest[key] = result
            self.generation += 1


def _with_snapshots(res: Result) -> Result:
    """The result with the text of every other file it annotates, as it is now on disk (the
    compiled file's snapshot is the text that was compiled)."""
    for path in res.files():
        if path not in res.snapshots:
            try:
                with open(path, encoding="utf-8") as f:
                    res.snapshots[path] = f.read()
            except (OSError, UnicodeDecodeError):
                pass
    return res


def _done(value) -> asyncio.Future:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(value)
    return fut

