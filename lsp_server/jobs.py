"""Compile jobs: debounced scheduling, the one-at-a-time queue, cancelling, running a job in
the worker process, and keeping its result (lsp_server.results).

`Jobs` owns the queue and the running job; the documents, results and worker it uses are
the server's, and it tells the user through the server's `Ui` (messages, status, progress,
refreshing what the editor shows). A compile request is answered once its jobs are queued;
its progress (cancellable: that kills the running job's worker) follows them.

A result knows the workspace files its compile imported (the worker says, with the digest of
the text each was loaded from): once one of them differs, in its open buffer or on disk, the
result is stale: the cache does not answer with it, and its target says so. The worker gets
the text of other open buffers that differ from their files (overlays) to import from."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import tempfile
from typing import Any, Protocol
from collections.abc import Callable

from lsprotocol import types as T

from lsp_server.annotations import Result, ResultKey, load_plan, load_report, norm_path
from lsp_server.documents import Documents, DocState
from lsp_server.protocol import CompileAnswer, CompileRequest, Failure, Where, text_digest
from lsp_server.reading import read_text_or_none
from lsp_server.results import Results
from lsp_server.settings import Settings
from lsp_server.views import report_summary
from lsp_server.worker_client import Worker, WorkerError

logger = logging.getLogger("fusionlens.lsp")

EXECUTION_DISABLED = "not compiled: running user code is disabled (fusionlens.allowExecution is false)"
CompileAnswerDict = dict[str, Any]  # fusionlens.compile's answer: {"targets", "ok", "message"?}


class Ui(Protocol):
    """How jobs reach the user (FusionLensServer implements it)."""

    def tell(self, kind: T.MessageType, message: str) -> None: ...

    def log(self, kind: T.MessageType, message: str) -> None: ...

    def notify_status(self, state: str, message: str, uri: str | None, speedup: float | None = None) -> None: ...

    def refresh(self, uri: str | None = None) -> None: ...

    async def progress_begin(self, token: Any, title: str, message: str,
                             cancellable: bool = False) -> T.ProgressToken | None: ...

    def progress_report(self, token: T.ProgressToken, message: str, percentage: int | None = None) -> None: ...

    def progress_end(self, token: T.ProgressToken, message: str) -> None: ...


@dataclasses.dataclass
class Job:
    uri: str
    path: str  # normalised
    fs_path: str
    target: str
    key: ResultKey
    version: int | None
    snapshot: str
    target_line: int | None
    future: asyncio.Future[Result | None]
    source: str | None = None  # the buffer's text when it differs from the saved file
    command: bool = False  # the user asked for it (tell them how it ended)
    task: asyncio.Task[Result] | None = None
    started: bool = False
    on_start: list[Callable[[], None]] = dataclasses.field(default_factory=list)  # run when user code starts

    def mark_started(self) -> None:
        self.started = True
        for callback in self.on_start:
            try:
                callback()
            except Exception:  # noqa: BLE001
                pass


class Jobs:
    def __init__(self, settings: Settings, documents: Documents, results: Results, worker: Worker, ui: Ui):
        self._settings = settings
        self._docs = documents
        self._results = results
        self._worker = worker
        self._ui = ui
        self.queue: list[Job] = []  # pending
        self.running: Job | None = None
        self.active: dict[tuple[str, str], Job] = {}  # (path, target) -> its pending or running Job
        self._runner: asyncio.Task[None] | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}  # uri -> debounce
        self.last_device = "unknown"  # the device name the worker or a report last gave
        self._progress: dict[Any, list[Job]] = {}  # progress token -> the jobs it follows
        self._followers: set[asyncio.Task[list[Result | None]]] = set()  # requests' progress
        self._texts = _Texts(documents)

    # --- scheduling and cancelling ------------------------------------------------------------

    def schedule(self, uri: str, reason: str) -> None:
        """Debounced automatic compile of every target in the document."""
        old = self._timers.pop(uri, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.pop(uri, None)
            loop.create_task(self.compile_targets(uri, None, reason=reason, force=False))

        self._timers[uri] = loop.call_later(self._settings.debounceMs / 1000.0, fire)

    def cancel(self, uri: str, reason: str, older_than: int | None = None) -> list[Job]:
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
        running = self.running
        if running is not None and running.uri == uri and running.task is not None and (
                older_than is None or running.version is None or running.version < older_than):
            running.task.cancel(reason)
            cancelled.append(running)
        return cancelled

    def cancel_job(self, job: Job, reason: str) -> None:
        if job in self.queue:
            self.queue.remove(job)
            self._finish(job, None, reason)
        elif job is self.running and job.task is not None:
            job.task.cancel(reason)  # Worker.request kills the worker; the next compile starts one

    def cancel_jobs(self, jobs: list[Job], reason: str) -> list[str]:
        """Cancel those of `jobs` still queued or running: the names of their targets."""
        out = []
        for job in jobs:
            if self.active.get((job.path, job.target)) is job:
                self.cancel_job(job, reason)
                out.append(job.target)
        return out

    def cancel_all(self, uri: str | None, reason: str) -> list[str]:
        """fusionlens.cancel: what is pending or running, of one document or of all."""
        uris = [uri] if uri is not None else list(dict.fromkeys(
            [*self._timers, *(j.uri for j in self.queue), *([self.running.uri] if self.running else [])]))
        return [job.target for u in uris for job in self.cancel(u, reason)]

    def cancel_progress(self, token: Any, reason: str) -> list[str]:
        """window/workDoneProgress/cancel: the jobs that progress follows."""
        return self.cancel_jobs(self._progress.get(token, []), reason)

    def target_state(self, state: DocState, name: str) -> tuple[str, str]:
        """(status, message) of a target (docs/lsp.md, fusionlens/regions): compiling; not
        compiled when its latest run was cancelled (the message says so); not allowed
        (execution off: its results, if any, are stale); ok or error (its latest result)."""
        job = self.active.get((state.path, name))
        if job is not None:
            return "compiling", ("running" if job.started else "queued")
        res = self._results.shown(state.path, name)
        if not self._settings.allowExecution:  # before "cancelled": turning execution off cancels
            stale = " (the results shown are stale)" if res is not None else ""
            return "not allowed", EXECUTION_DISABLED + stale
        if name in state.cancelled:
            return "not compiled", state.notes.get(name, "compile cancelled")
        if res is not None:
            changed = self.changed_imports(res)
            if changed:
                again = "saving compiles it again" if self._settings.compileTrigger != "manual" else "compile it again"
                names = ", ".join(os.path.basename(p) for p in changed)
                return res.status, f"stale: {names} changed since this compile; {again}"
            return res.status, res.message
        return "not compiled", state.notes.get(name, "")

    def changed_imports(self, res: Result) -> list[str]:
        """The files `res`'s compile imported whose text (open buffer, else file) is not the
        text it imported."""
        return [p for p, digest in res.imports.items() if self._texts.digest(p) != digest]

    def dependents(self, state: DocState) -> list[str]:
        """The open documents whose shown results imported the document's file (saving it
        makes them stale)."""
        paths = {res.path for _key, res in self._results.all_shown()
                 if state.path in res.imports and res.path != state.path}
        return [s.uri for s in self._docs if s.path in paths]

    # --- a compile request --------------------------------------------------------------------

    async def compile_targets(self, uri: str, names: list[str] | None, reason: str = "command",
                              force: bool = True, token: Any = None, wait: bool = False,
                              request: Any = None) -> CompileAnswerDict:
        """Compile the document's targets (all when `names` is None) as the buffer holds them:
        an edited or untitled buffer compiles its own text. Answers once the jobs are queued
        (`"queued": true`; progress on `token`, status, diagnostics and lenses follow them);
        with `wait`, once they are done, and then the cancel of `request` (the LSP request's
        future, pygls') cancels them. A request the user made (a command) that is refused or
        fails says so with window/showMessage as well as in the lens and the answer."""
        command = reason == "command"
        state = self._docs.lookup(uri)  # a document not open is compiled from disk, its state not kept
        if state is None:
            msg = f"no such document: {uri}"
            if command:
                self._ui.tell(T.MessageType.Warning, msg)
            return {"targets": [] if names is None else names, "ok": False, "message": msg}
        all_names = [t.name for t in state.targets]
        wanted = all_names if names is None else names
        unknown = [n for n in wanted if n not in all_names]
        wanted = [n for n in wanted if n in all_names]
        refused = self._refusal(state, wanted, unknown, command)
        if refused is not None:
            return refused
        futures, jobs = self._enqueue(state, wanted, force, command)
        loop = asyncio.get_running_loop()
        if self._runner is None or self._runner.done():
            self._runner = loop.create_task(self._run_queue())
        self._ui.refresh(uri)
        follow = loop.create_task(self._follow(state, futures, jobs, token))
        self._followers.add(follow)
        follow.add_done_callback(self._followers.discard)
        if not wait:
            return {"targets": wanted, "ok": not unknown, "queued": True}
        if request is not None and jobs:
            request.add_done_callback(lambda f: self.cancel_jobs(
                jobs, "asked by the client ($/cancelRequest)") if f.cancelled() else None)
        results = await asyncio.shield(follow)
        ok = all(r is not None and r.status == "ok" for r in results) and not unknown
        return {"targets": wanted, "ok": ok}

    def _refusal(self, state: DocState, names: list[str], unknown: list[str],
                 command: bool) -> CompileAnswerDict | None:
        """The answer when nothing is to be compiled (a syntax error, execution off, no such
        target); None when `names` can be."""
        if state.syntax_error is not None:
            line, _, msg = state.syntax_error
            return self._refuse(state, names, f"not compiled: {msg} (line {line + 1})", command)
        if not self._settings.allowExecution:
            return self._refuse(state, names, EXECUTION_DISABLED, command)
        if unknown:
            found = ", ".join(t.name for t in state.targets) or "none"
            msg = (f"no @fusionlens.example target named {', '.join(unknown)} in "
                   f"{os.path.basename(state.fs_path)} (found: {found})")
            if command:
                self._ui.tell(T.MessageType.Warning, msg)
            if not names:
                return {"targets": [], "ok": False, "message": msg}
        if not names:
            msg = "no @fusionlens.example targets in this file"
            if command:
                self._ui.tell(T.MessageType.Info, msg)
            return {"targets": [], "ok": True, "message": msg}
        return None

    def _refuse(self, state: DocState, names: list[str], msg: str, command: bool) -> CompileAnswerDict:
        """Nothing is compiled: the lens of each target says why, and so does a message when
        the user asked."""
        for n in names:
            state.notes[n] = msg
        if command:
            self._ui.tell(T.MessageType.Warning, msg)
        self._ui.refresh(state.uri)
        return {"targets": names, "ok": False, "message": msg}

    def _enqueue(self, state: DocState, names: list[str], force: bool,
                 command: bool) -> tuple[list[asyncio.Future[Result | None]], list[Job]]:
        """A future of each target's result: a cached one (unless `force`, or stale), the job
        already queued for the same text, or a new job (which supersedes an older one); and
        the jobs among them."""
        text = state.parsed_text or ""
        saved = read_text_or_none(state.fs_path)  # None: untitled, or not on disk (yet)
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        infos = {t.name: t for t in state.targets}
        settings = self._settings.options_key()
        version = self._docs.text_document(state.uri).version
        futures, jobs = [], []
        for name in names:
            key = ResultKey(digest, state.path, name, settings)
            cached = self._results.cached(key)
            if cached is not None and not force and not self.changed_imports(cached):
                self._results.show(cached)
                futures.append(_done(cached))
                continue
            job = self.active.get((state.path, name))
            if job is not None and job.key == key:
                futures.append(job.future)
                jobs.append(job)
                continue
            if job is not None:  # an older version of this target is queued or running
                self.cancel_job(job, "superseded by a newer compile")
            info = infos.get(name)
            job = Job(uri=state.uri, path=state.path, fs_path=state.fs_path, target=name, key=key, version=version,
                      snapshot=text, target_line=(info.line - 1) if info else None,
                      future=asyncio.get_running_loop().create_future(),
                      source=None if saved == text else text,  # the worker compiles the buffer, not the file
                      command=command)
            state.notes.pop(name, None)
            state.cancelled.discard(name)
            self.queue.append(job)
            self.active[(state.path, name)] = job
            futures.append(job.future)
            jobs.append(job)
        return futures, jobs

    async def _follow(self, state: DocState, futures: list[asyncio.Future[Result | None]], jobs: list[Job],
                      token: Any) -> list[Result | None]:
        """Wait for every future, reporting progress where the client shows it; the client
        can cancel the progress, which cancels its jobs (cancel_progress)."""
        progress = await self._ui.progress_begin(token, f"FusionLens: compiling {os.path.basename(state.fs_path)}",
                                                 f"compiling and benchmarking {len(futures)} target(s)",
                                                 cancellable=bool(jobs))
        if progress is not None:
            self._progress[progress] = jobs
            for job in jobs:
                if not job.future.done():
                    report = _reporter(self._ui, progress, f"running, tracing and benchmarking {job.target}")
                    if job.started:
                        report()
                    job.on_start.append(report)
        results: list[Result | None] = []
        try:
            for fut in asyncio.as_completed(futures):
                res = await fut
                results.append(res)
                if progress is not None:
                    label = "cancelled" if res is None else f"{res.target}: {res.status}"
                    self._ui.progress_report(progress, f"{label} ({len(results)}/{len(futures)})",
                                             int(100 * len(results) / len(futures)))
        finally:
            if progress is not None:
                self._progress.pop(progress, None)
                done = len(results) == len(futures) and None not in results
                try:
                    self._ui.progress_end(progress, "done" if done else "cancelled")
                except Exception:  # noqa: BLE001 - the client is gone
                    pass
        return results

    # --- running ------------------------------------------------------------------------------

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
                current = asyncio.current_task()
                if current is not None and current.cancelling():  # the runner itself is going down
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
        self._ui.notify_status("compiling", f"compiling and benchmarking {name}", job.uri)
        root = self._docs.workspace_root(self._docs.get(job.uri) or DocState(job.uri))
        folders = [root] if os.path.isdir(root) else []  # an untitled buffer's folder is never made
        self._worker.cwd = root if folders else existing_cwd()
        s = job.key.settings
        overlays = self.overlays(job.path)
        request = CompileRequest(job.fs_path, job.target, list(s.executors) if s.executors is not None else None,
                                 s.device, job.source, folders, self._worker.cwd, repeats=s.repeats, gpu=s.gpu,
                                 benchmark=True, overlays=overlays)
        try:
            answer = await self._worker.request(request, self._settings.timeoutSeconds, job.mark_started)
        except WorkerError as e:
            self._note_device(self._worker.device_name)
            return self._failure(job, e.kind, e.message, e.where)
        self._note_device(self._worker.device_name)
        if isinstance(answer, Failure):
            if answer.traceback:
                # its end (a message of a bounded size: the exception's text can be anything)
                self._ui.log(T.MessageType.Error, f"compiling {name} raised:\n{answer.traceback[-16_000:]}")
            return self._failure(job, "internal", f"the compiler raised {answer.error}")
        if not isinstance(answer, CompileAnswer):
            return self._failure(job, "internal", f"the worker answered a compile with {type(answer).__name__}")
        try:
            report = load_report(answer.report)
        except Exception as e:  # noqa: BLE001
            return self._failure(job, "internal", f"unreadable compile report: {e}")
        self._note_device(report.device_name)
        ok = report.status == "ok"
        message = report_summary(report) if ok else (
            report.error.message if report.error is not None else "compile failed")
        imports = {norm_path(p) or p: digest for p, digest in answer.imports.items()}
        res = Result(job.target, job.path, job.key, "ok" if ok else "error", message, report,
                     {job.path: job.snapshot}, job.target_line, "report", self._results.next_seq(), imports=imports)
        try:
            res.plan = load_plan(answer.plan)
        except Exception as e:  # noqa: BLE001 - the compile's result stands without its plan
            answer.plan_error = f"unreadable plan: {e}"
        if answer.plan_error:
            self._ui.log(T.MessageType.Warning, f"planning {name} at scale: {answer.plan_error}")
        return _with_snapshots(res, {norm_path(p) or p: text for p, text in overlays.items()})

    def overlays(self, path: str) -> dict[str, str]:
        """The other open buffers of files (.py) whose text is not their file's: what a
        compile of `path` imports instead of those files (the worker's overlays)."""
        out = {}
        for state in self._docs:
            if state.path == path or not state.uri.startswith("file:") or not state.fs_path.endswith(".py"):
                continue
            text = self._docs.text_document(state.uri).source
            if text != read_text_or_none(state.fs_path):
                out[state.fs_path] = text
        return out

    def _note_device(self, name: str | None) -> None:
        if name and name != "unknown":
            self.last_device = name

    def _failure(self, job: Job, kind: str, message: str, where: Where | None = None) -> Result:
        """A compile without a report; `where`: the user's position when the worker timed
        out or died (its file, if another, gets a diagnostic too)."""
        res = Result(job.target, job.path, job.key, "error", message, None, {job.path: job.snapshot},
                     job.target_line, kind, self._results.next_seq(), where=where)
        return _with_snapshots(res)

    def _finish(self, job: Job, result: Result | None, reason: str) -> None:
        if self.active.get((job.path, job.target)) is job:
            del self.active[(job.path, job.target)]
        if result is None:
            state = self._docs.get(job.uri)
            if state is not None:
                state.notes[job.target] = f"compile cancelled: {reason}"
                state.cancelled.add(job.target)
            self._ui.notify_status("idle", f"cancelled {job.target}: {reason}", job.uri)
            if job.command:
                self._ui.tell(T.MessageType.Info, f"compiling {job.target} was cancelled: {reason}")
        else:
            self._results.keep(result, self._settings.cacheEntries)
            self._results.show(result)
            timings = result.report.forward.timings if result.report is not None else None
            if result.status == "ok":
                self._ui.notify_status("idle", f"{job.target}: {result.message}", job.uri,
                                       timings.speedup_vs_eager if timings is not None else None)
            else:
                msg = f"{job.target} failed: {result.message.splitlines()[0] if result.message else 'error'}"
                if job.command:
                    self._ui.tell(T.MessageType.Error, f"compiling {msg}")
                self._ui.notify_status("failed", msg, job.uri, timings.speedup_vs_eager if timings else None)
        if not job.future.done():
            job.future.set_result(result)
        self._ui.refresh(job.uri)


def _reporter(ui: Ui, token: T.ProgressToken, message: str) -> Callable[[], None]:
    return lambda: ui.progress_report(token, message)


def _with_snapshots(res: Result, overlays: dict[str, str] | None = None) -> Result:
    """The result with the text of every other file it annotates: the overlay it was compiled
    with, else the file as it is now (the compiled file's snapshot is the text that was
    compiled). An imported file that changed since the worker loaded it gets none: its
    annotations are not shown rather than shown on the wrong lines."""
    for path in res.files():
        if path not in res.snapshots:
            text = (overlays or {}).get(path)
            text = read_text_or_none(path) if text is None else text
            if text is not None and (path not in res.imports or text_digest(text) == res.imports[path]):
                res.snapshots[path] = text
    return res


def existing_cwd() -> str:
    """A working folder that exists, for a compile with no folder of its own (an untitled
    buffer outside any workspace folder): the server's, else the home folder, else tmp."""
    for folder in (_getcwd(), os.path.expanduser("~"), tempfile.gettempdir()):
        if folder and os.path.isdir(folder):
            return folder
    return os.sep


def _getcwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # it was removed
        return None


class _Texts:
    """The digest of a file's text as a compile would import it now: its open buffer's, else
    the file's; memoised by buffer version and file stat (targets' states ask often)."""

    def __init__(self, docs: Documents):
        self._docs = docs
        self._memo: dict[str, tuple[Any, str | None]] = {}

    def digest(self, path: str) -> str | None:
        state = next((s for s in self._docs if s.path == path and s.uri.startswith("file:")), None)
        text: str | None = None
        if state is not None:
            text = self._docs.text_document(state.uri).source
            key: Any = ("buffer", self._docs.text_document(state.uri).version, len(text))
        else:
            try:
                st = os.stat(path)
            except OSError:
                return None
            key = ("file", st.st_mtime_ns, st.st_size)
        memo = self._memo.get(path)
        if memo is not None and memo[0] == key:
            return memo[1]
        text = read_text_or_none(path) if state is None else text
        value = text_digest(text) if text is not None else None
        self._memo[path] = (key, value)
        return value


def _done(value: Result | None) -> asyncio.Future[Result | None]:
    fut: asyncio.Future[Result | None] = asyncio.get_running_loop().create_future()
    fut.set_result(value)
    return fut
