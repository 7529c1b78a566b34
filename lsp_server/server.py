"""The FusionLens language server (pygls 2.x).

Run `fusionlens-lsp` (stdio; `--stdio` is accepted) or `fusionlens-lsp --tcp HOST:PORT`.
The contract with clients is docs/lsp.md. This process imports neither torch nor user code:
targets come from `compiler.targets.find_targets` (pure ast) and compiling happens in the
worker process (lsp_server.worker) driven by lsp_server.worker_client.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import dataclasses
import hashlib
import logging
import os
import re
import sys
import tempfile
import time
import uuid
from typing import Any, Optional

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path

from compiler.report import CompileReport
from compiler.targets import find_targets
from lsp_server import __version__
from lsp_server.linemap import LineMap
from lsp_server.views import (DiagNote, Result, load_report, boundary_label, hint_label, hover_markdown, lens_title,
                              norm_path, region_tooltip, report_summary, target_hover)
from lsp_server.worker_client import Worker, WorkerError

logger = logging.getLogger("fusionlens.lsp")

CMD_COMPILE = "fusionlens.compile"
CMD_SHOW_TRACE = "fusionlens.showTrace"
CMD_SHOW_KERNEL = "fusionlens.showKernel"
CMD_CLEAR_CACHE = "fusionlens.clearCache"
CMD_DEBUG_INFO = "fusionlens.debugInfo"
STATUS_NOTIFICATION = "fusionlens/status"
REGIONS_REQUEST = "fusionlens/regions"
MAX_WORKER_LOG_LINES = 200

_SEVERITY = {"error": T.DiagnosticSeverity.Error, "warning": T.DiagnosticSeverity.Warning,
             "information": T.DiagnosticSeverity.Information, "info": T.DiagnosticSeverity.Information,
             "hint": T.DiagnosticSeverity.Hint}


# --- settings ---------------------------------------------------------------------------

@dataclasses.dataclass
class Settings:
    allowExecution: bool = True
    compileTrigger: str = "onOpen"  # "onOpen" | "onSave" | "manual"
    executors: Optional[list] = None
    benchmarkRepeats: int = 20
    device: str = "auto"
    timeoutSeconds: float = 60.0
    inlayHints: bool = True
    debounceMs: int = 300
    cacheFolder: Optional[str] = None

    def update(self, data: Any) -> list:
        """Apply a settings object (flat, or wrapped in {"fusionlens": {...}}); returns the
        names that changed. Unknown keys and ill-typed values are ignored."""
        if not isinstance(data, dict):
            return []
        if isinstance(data.get("fusionlens"), dict):
            data = data["fusionlens"]
        changed = []
        for f in dataclasses.fields(self):
            if f.name not in data:
                continue
            value = data[f.name]
            try:
                if f.name in ("allowExecution", "inlayHints"):
                    value = bool(value)
                elif f.name == "compileTrigger":
                    if value not in ("onOpen", "onSave", "manual"):
                        continue
                elif f.name == "executors":
                    value = None if value is None else [str(v) for v in value]
                elif f.name in ("benchmarkRepeats", "debounceMs"):
                    value = max(0 if f.name == "debounceMs" else 1, int(value))
                elif f.name == "timeoutSeconds":
                    value = max(0.1, float(value))
                elif f.name == "device":
                    value = str(value)
                elif f.name == "cacheFolder":
                    value = str(value) if value else None
            except (TypeError, ValueError):
                continue
            if getattr(self, f.name) != value:
                setattr(self, f.name, value)
                changed.append(f.name)
        return changed

    def options_key(self) -> tuple:
        """The options a compile result depends on (part of the cache key)."""
        return (tuple(self.executors) if self.executors is not None else None,
                self.benchmarkRepeats, self.device)


# --- per-document state -----------------------------------------------------------------

class DocState:
    def __init__(self, uri: str):
        self.uri = uri
        self.fs_path = to_fs_path(uri) or uri
        self.path = norm_path(self.fs_path) or uri
        self.parsed_text: Optional[str] = None
        self.targets: list = []  # [compiler.targets.TargetInfo]
        self.syntax_error: Optional[tuple] = None  # (line0, col0, message)
        self.notes: dict = {}  # target -> message (e.g. why it was not compiled)
        self.view = None
        self.view_key = None


@dataclasses.dataclass
class View:
    """Everything a document shows, in the document's current line numbers."""

    lines: dict  # line -> [LineNote]
    boundaries: dict  # line -> [(region, boundary)]
    region_lines: dict  # (result seq, region id) -> [line]
    diags: list  # [(line, DiagNote)]
    hint_lines: list  # sorted lines that carry hints
    hints: Optional[list] = None  # [(line, InlayHint)], built on the first inlay request


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
    task: Optional[asyncio.Task] = None
    started: bool = False
    on_start: list = dataclasses.field(default_factory=list)  # callables, run when user code starts


class FusionLensServer(LanguageServer):
    def __init__(self):
        super().__init__("fusionlens-lsp", __version__)
        self.settings = Settings()
        self.docs: dict = {}
        self.cache: dict = {}  # (hash, path, target, options) -> Result
        self.latest: dict = {}  # (path, target) -> Result shown in the editor
        self.generation = 0  # bumps whenever `latest` changes
        self._seq = 0
        self.queue: list = []  # pending Jobs
        self.running: Optional[Job] = None
        self.active: dict = {}  # (path, target) -> Job (pending or running)
        self._runner: Optional[asyncio.Task] = None
        self._timers: dict = {}  # uri -> asyncio.TimerHandle (debounce)
        self._output_lines = 0
        self.worker = Worker(on_stderr=self._worker_output)
        atexit.register(self.worker.kill_now)
        self.last_device = "unknown"

    # --- helpers -------------------------------------------------------------------------

    def _worker_output(self, line: str) -> None:
        self._output_lines += 1
        if self._output_lines > MAX_WORKER_LOG_LINES:
            if self._output_lines == MAX_WORKER_LOG_LINES + 1:
                line = f"(more worker output dropped; at most {MAX_WORKER_LOG_LINES} lines per compile)"
            else:
                return
        try:
            self.window_log_message(T.LogMessageParams(type=T.MessageType.Log, message=f"[worker] {line}"))
        except Exception:  # noqa: BLE001
            pass

    def caps(self, *path: str) -> Any:
        obj: Any = self.client_capabilities
        for p in path:
            obj = getattr(obj, p, None) if obj is not None else None
        return obj

    def workspace_root(self, doc: DocState) -> str:
        """The workspace folder holding the document (the innermost one), else the root."""
        best = None
        try:
            folders = [to_fs_path(f.uri) for f in self.workspace.folders.values()]
        except Exception:  # noqa: BLE001
            folders = []
        for folder in folders:
            if folder and (doc.fs_path + os.sep).startswith(folder.rstrip(os.sep) + os.sep):
                if best is None or len(folder) > len(best):
                    best = folder
        if best is None:
            try:
                best = self.workspace.root_path
            except Exception:  # noqa: BLE001
                best = None
        return best or os.path.dirname(doc.fs_path)

    def cache_folder(self) -> str:
        folder = self.settings.cacheFolder or os.path.join(
            tempfile.gettempdir(), f"fusionlens-lsp-{os.getuid() if hasattr(os, 'getuid') else 'user'}")
        folder = os.path.join(folder, "generated")
        os.makedirs(folder, exist_ok=True)
        return folder

    def doc(self, uri: str) -> DocState:
        state = self.docs.get(uri)
        if state is None:
            state = self.docs[uri] = DocState(uri)
        text_doc = self.workspace.get_text_document(uri)
        try:
            text = text_doc.source
        except (OSError, UnicodeDecodeError):
            text = ""
        if state.parsed_text != text:
            self._parse(state, text)
        return state

    def _parse(self, state: DocState, text: str) -> None:
        state.parsed_text = text
        try:
            state.targets = find_targets(text, state.fs_path)
            state.syntax_error = None
        except SyntaxError as e:
            line = max((e.lineno or 1) - 1, 0)
            col = max((e.offset or 1) - 1, 0)
            state.syntax_error = (line, col, f"SyntaxError: {e.msg}")
        except Exception as e:  # noqa: BLE001 (e.g. ValueError: null bytes)
            state.syntax_error = (0, 0, f"cannot parse: {e}")
        state.view = None

    def results_for(self, state: DocState) -> list:
        names = {t.name for t in state.targets}
        out = []
        for (path, target), res in self.latest.items():
            if path == state.path and state.syntax_error is None and target not in names:
                continue  # the target was removed or renamed
            if state.path in res.files():
                out.append(res)
        out.sort(key=lambda r: (r.path != state.path, r.target_line if r.target_line is not None else 1 << 30,
                                r.seq))
        return out

    def view(self, state: DocState) -> View:
        text_doc = self.workspace.get_text_document(state.uri)
        key = (text_doc.version, state.parsed_text is not None and hash(state.parsed_text), self.generation)
        if state.view is not None and state.view_key == key:
            return state.view
        current = text_doc.lines
        current = [l.rstrip("\r\n") for l in current]
        lines: dict = {}
        boundaries: dict = {}
        region_lines: dict = {}
        diags: list = []
        maps: dict = {}
        for res in self.results_for(state):
            snap = res.snapshots.get(state.path)
            if snap is None:
                continue
            lm = maps.get(id(snap))
            if lm is None:
                lm = maps[id(snap)] = LineMap(snap.splitlines(), current)
            ann = res.annotations(state.path)
            for old, notes in ann.lines.items():
                new = lm(old)
                if new is not None:
                    lines.setdefault(new, []).extend(notes)
            for old, items in ann.boundaries.items():
                new = lm(old)
                if new is not None:
                    boundaries.setdefault(new, []).extend(items)
            for rid, olds in ann.region_lines.items():
                region_lines[(res.seq, rid)] = [n for n in (lm(o) for o in olds) if n is not None]
            for d in ann.diags:
                new = lm(d.line)
                if new is not None:
                    diags.append((new, d))
        view = View(lines, boundaries, region_lines, diags, sorted(set(lines) | set(boundaries)))
        state.view, state.view_key = view, key
        return view

    def target_state(self, state: DocState, name: str) -> tuple:
        if (state.path, name) in self.active:
            job = self.active[(state.path, name)]
            return "compiling", ("running" if job.started else "queued")
        res = self.latest.get((state.path, name))
        if res is not None:
            return res.status, res.message
        if not self.settings.allowExecution:
            return "not allowed", "not compiled: running user code is disabled (fusionlens.allowExecution is false)"
        return "not compiled", state.notes.get(name, "")

    # --- publishing ----------------------------------------------------------------------

    def publish(self, state: DocState) -> None:
        text_doc = self.workspace.get_text_document(state.uri)
        lines = text_doc.lines
        out = []
        if state.syntax_error is not None:
            line, col, msg = state.syntax_error
            line = min(line, max(len(lines) - 1, 0))
            end = len(lines[line].rstrip("\r\n")) if lines else 0
            out.append(T.Diagnostic(range=T.Range(T.Position(line, min(col, end)), T.Position(line, max(end, col))),
                                    message=msg, severity=T.DiagnosticSeverity.Error, source="fusionlens",
                                    code="syntax-error"))
        seen = set()
        for line, d in self.view(state).diags:
            if (line, d.message) in seen or line >= len(lines):
                continue
            seen.add((line, d.message))
            text = lines[line].rstrip("\r\n")
            start = d.col if d.col is not None else len(text) - len(text.lstrip())
            end = d.end_col if d.end_col is not None and d.end_col > start else len(text)
            codec = text_doc.position_codec
            rng = T.Range(T.Position(line, codec.client_num_units(text[:start])),
                          T.Position(line, codec.client_num_units(text[:end])))
            out.append(T.Diagnostic(range=rng, message=d.message,
                                    severity=_SEVERITY.get(d.severity, T.DiagnosticSeverity.Information),
                                    source="fusionlens", code=d.code))
        self.text_document_publish_diagnostics(
            T.PublishDiagnosticsParams(uri=state.uri, diagnostics=out, version=text_doc.version))

    def refresh(self, uri: Optional[str] = None) -> None:
        """Push what changed: diagnostics now, and ask the client to re-pull lenses/hints."""
        for state in list(self.docs.values()):
            if uri is None or state.uri == uri or self._mentions(state):
                try:
                    self.doc(state.uri)
                    self.publish(state)
                except Exception:  # noqa: BLE001
                    logger.exception("publishing diagnostics failed")
        if self.caps("workspace", "code_lens", "refresh_support"):
            _quiet(self.workspace_code_lens_refresh(None))
        if self.caps("workspace", "inlay_hint", "refresh_support"):
            _quiet(self.workspace_inlay_hint_refresh(None))

    def _mentions(self, state: DocState) -> bool:
        return any(state.path in r.files() for r in self.latest.values())

    def notify_status(self, state: str, message: str, uri: Optional[str], speedup: Optional[float] = None):
        self.protocol.notify(STATUS_NOTIFICATION, {
            "state": state, "device": self.last_device, "message": message,
            "speedup": speedup, "uri": uri})

    # --- compiling -----------------------------------------------------------------------

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
        state = self.doc(uri)
        all_names = [t.name for t in state.targets]
        if names is None:
            names = all_names
        unknown = [n for n in names if n not in all_names]
        names = [n for n in names if n in all_names]
        if state.syntax_error is not None:
            return {"targets": names, "ok": False, "message": state.syntax_error[2]}
        if not self.settings.allowExecution:
            msg = "not compiled: running user code is disabled (fusionlens.allowExecution is false)"
            for n in names:
                state.notes[n] = msg
            if reason == "command":
                self.window_show_message(T.ShowMessageParams(type=T.MessageType.Warning,
                                                             message=f"FusionLens: {msg}"))
            self.refresh(uri)
            return {"targets": names, "ok": False, "message": msg}
        if not names:
            msg = f"no target named {', '.join(unknown)}" if unknown else "no @compiler.example targets in this file"
            return {"targets": [], "ok": not unknown, "message": msg}
        try:
            with open(state.fs_path, encoding="utf-8") as f:
                disk = f.read()
        except OSError as e:
            msg = f"cannot compile an unsaved file ({e.strerror}); save it first"
            for n in names:
                state.notes[n] = msg
            self.refresh(uri)
            return {"targets": names, "ok": False, "message": msg}
        digest = hashlib.sha256(disk.encode("utf-8")).hexdigest()
        try:
            disk_targets = {t.name: t for t in find_targets(disk, state.fs_path)}
        except SyntaxError:
            disk_targets = {}
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
            info = disk_targets.get(name)
            job = Job(uri=uri, path=state.path, fs_path=state.fs_path, target=name, key=key, version=version,
                      snapshot=disk, target_line=(info.line - 1) if info else None, options=opts,
                      future=asyncio.get_running_loop().create_future())
            state.notes.pop(name, None)
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
        executors, repeats, device = job.options
        payload = {"cmd": "compile", "path": job.fs_path, "target": job.target,
                   "executors": list(executors) if executors is not None else None,
                   "repeats": repeats, "device": device, "benchmark": True,
                   "sys_path": [root], "cwd": root}

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
            return self._failure(job, e.kind, e.message)
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
        for path in res.files():
            if path not in res.snapshots:
                try:
                    with open(path, encoding="utf-8") as f:
                        res.snapshots[path] = f.read()
                except (OSError, UnicodeDecodeError):
                    pass
        return res

    def _failure(self, job: Job, kind: str, message: str) -> Result:
        self._seq += 1
        return Result(job.target, job.path, job.key, "error", message, None, {job.path: job.snapshot},
                      job.target_line, kind, self._seq)

    def _finish(self, job: Job, result: Optional[Result], reason: str) -> None:
        if self.active.get((job.path, job.target)) is job:
            del self.active[(job.path, job.target)]
        state = self.docs.get(job.uri)
        if result is None:
            if state is not None:
                state.notes[job.target] = f"compile cancelled: {reason}"
            self.notify_status("idle", f"cancelled {job.target}: {reason}", job.uri)
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
            self.notify_status(state_name, msg, job.uri, speedup)
        if not job.future.done():
            job.future.set_result(result)
        self.refresh(job.uri)

    def _set_latest(self, result: Result) -> None:
        key = (result.path, result.target)
        if self.latest.get(key) is not result:
            self.latest[key] = result
            self.generation += 1

    # --- generated documents -------------------------------------------------------------

    async def show_generated(self, text: str, name: str) -> dict:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        path = os.path.join(self.cache_folder(), safe)
        if os.path.exists(path):
            os.chmod(path, 0o644)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(path, 0o444)  # a hint to editors that it is read-only
        uri = from_fs_path(path)
        shown = False
        if self.caps("window", "show_document", "support"):
            try:
                res = await asyncio.wait_for(self.window_show_document_async(
                    T.ShowDocumentParams(uri=uri, take_focus=True)), 10)
                shown = bool(getattr(res, "success", False))
            except Exception:  # noqa: BLE001
                shown = False
        return {"uri": uri, "shown": shown}


def _quiet(future) -> None:
    """Fire-and-forget a request to the client: a client that answers with an error (or
    never implemented the method) must not produce 'exception never retrieved' noise."""
    def swallow(f):
        try:
            f.exception()
        except BaseException:  # noqa: BLE001
            pass
    try:
        future.add_done_callback(swallow)
    except Exception:  # noqa: BLE001
        pass


def _done(value) -> asyncio.Future:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(value)
    return fut


def _arg(args: tuple, i: int, default=None):
    return args[i] if len(args) > i else default


def _get(obj: Any, name: str, default=None):
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


server = FusionLensServer()


# --- lifecycle ----------------------------------------------------------------------------

@server.feature(T.INITIALIZE)
def on_initialize(ls: FusionLensServer, params: T.InitializeParams):
    ls.settings.update(params.initialization_options or {})


@server.feature(T.INITIALIZED)
async def on_initialized(ls: FusionLensServer, params: T.InitializedParams):
    await pull_configuration(ls)


async def pull_configuration(ls: FusionLensServer) -> None:
    if not ls.caps("workspace", "configuration"):
        return
    try:
        items = await asyncio.wait_for(ls.workspace_configuration_async(
            T.ConfigurationParams(items=[T.ConfigurationItem(section="fusionlens")])), 10)
    except Exception:  # noqa: BLE001
        return
    if items and isinstance(items[0], dict):
        apply_settings(ls, items[0])


def apply_settings(ls: FusionLensServer, data: Any) -> None:
    before = ls.settings.allowExecution
    changed = ls.settings.update(data)
    if not changed:
        return
    for state in ls.docs.values():
        state.view = None
    if "allowExecution" in changed and not ls.settings.allowExecution:
        for uri in list(ls.docs):
            ls.cancel(uri, "execution was disabled")
    ls.refresh()
    if "allowExecution" in changed and ls.settings.allowExecution and not before \
            and ls.settings.compileTrigger == "onOpen":
        for uri in list(ls.docs):
            ls.schedule(uri, "execution allowed")


@server.feature(T.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def on_config(ls: FusionLensServer, params: T.DidChangeConfigurationParams):
    settings = params.settings
    if isinstance(settings, dict) and settings:
        apply_settings(ls, settings)
    else:
        await pull_configuration(ls)


@server.feature(T.SHUTDOWN)
async def on_shutdown(ls: FusionLensServer, params: Any):
    for uri in list(ls.docs):
        ls.cancel(uri, "server shutting down")
    await ls.worker.kill()


# --- documents ----------------------------------------------------------------------------

@server.feature(T.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: FusionLensServer, params: T.DidOpenTextDocumentParams):
    state = ls.doc(params.text_document.uri)
    ls.publish(state)
    if ls.settings.compileTrigger == "onOpen" and state.targets and state.syntax_error is None:
        if ls.settings.allowExecution:
            ls.schedule(state.uri, "opened")


@server.feature(T.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: FusionLensServer, params: T.DidChangeTextDocumentParams):
    uri = params.text_document.uri
    ls.cancel(uri, "the document changed", older_than=params.text_document.version)
    state = ls.doc(uri)
    ls.publish(state)


@server.feature(T.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: FusionLensServer, params: T.DidSaveTextDocumentParams):
    state = ls.doc(params.text_document.uri)
    ls.publish(state)
    if ls.settings.compileTrigger in ("onOpen", "onSave") and ls.settings.allowExecution \
            and state.targets and state.syntax_error is None:
        ls.schedule(state.uri, "saved")


@server.feature(T.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: FusionLensServer, params: T.DidCloseTextDocumentParams):
    uri = params.text_document.uri
    ls.cancel(uri, "the document was closed")
    ls.docs.pop(uri, None)
    ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


# --- features -----------------------------------------------------------------------------

def _line_range(text_doc, line: int) -> T.Range:
    lines = text_doc.lines
    text = lines[line].rstrip("\r\n") if line < len(lines) else ""
    return T.Range(T.Position(line, 0), T.Position(line, text_doc.position_codec.client_num_units(text)))


@server.feature(T.TEXT_DOCUMENT_HOVER)
def hover(ls: FusionLensServer, params: T.HoverParams):
    state = ls.doc(params.text_document.uri)
    text_doc = ls.workspace.get_text_document(state.uri)
    line = params.position.line
    view = ls.view(state)
    notes = view.lines.get(line, [])
    bounds = view.boundaries.get(line, [])
    if notes or bounds:
        value = hover_markdown(notes, bounds, lambda res, rid: view.region_lines.get((res.seq, rid), []), line)
    else:
        target = next((t for t in state.targets if t.decorator_line - 1 <= line <= t.line - 1), None)
        if target is None:
            return None
        status, message = ls.target_state(state, target.name)
        value = target_hover(target.name, status, message, ls.latest.get((state.path, target.name)))
    return T.Hover(contents=T.MarkupContent(kind=T.MarkupKind.Markdown, value=value),
                   range=_line_range(text_doc, line))


@server.feature(T.TEXT_DOCUMENT_INLAY_HINT, T.InlayHintOptions(resolve_provider=False))
def inlay_hints(ls: FusionLensServer, params: T.InlayHintParams):
    if not ls.settings.inlayHints:
        return []
    state = ls.doc(params.text_document.uri)
    text_doc = ls.workspace.get_text_document(state.uri)
    view = ls.view(state)
    if view.hints is None:
        view.hints = build_hints(view, text_doc)
    first, last = params.range.start.line, params.range.end.line
    return [hint for line, hint in view.hints if first <= line <= last]


def build_hints(view: View, text_doc) -> list:
    lines = text_doc.lines
    out = []
    for line in view.hint_lines:
        if line >= len(lines):
            continue
        text = lines[line].rstrip("\r\n")
        pos = T.Position(line, text_doc.position_codec.client_num_units(text))
        notes = view.lines.get(line)
        if notes:
            shown = [n for n in notes if n.result is notes[0].result]
            tip = "\n\n---\n\n".join(
                region_tooltip(n, view.region_lines.get((n.result.seq, n.region.id), [])) for n in notes)
            out.append((line, T.InlayHint(position=pos, label=hint_label(shown), padding_left=True,
                                          tooltip=T.MarkupContent(kind=T.MarkupKind.Markdown, value=tip))))
        bounds = view.boundaries.get(line)
        if bounds:
            tip = "\n\n".join(f"region `{r.id}` ends here: **{b.reason}**" + (f" — {b.detail}" if b.detail else "")
                              for r, b in bounds)
            out.append((line, T.InlayHint(position=pos, label=boundary_label(bounds), padding_left=True,
                                          tooltip=T.MarkupContent(kind=T.MarkupKind.Markdown, value=tip))))
    return out


@server.feature(T.TEXT_DOCUMENT_CODE_LENS, T.CodeLensOptions(resolve_provider=False))
def code_lens(ls: FusionLensServer, params: T.CodeLensParams):
    state = ls.doc(params.text_document.uri)
    out = []
    for t in state.targets:
        status, message = ls.target_state(state, t.name)
        title = lens_title(status, ls.latest.get((state.path, t.name)), message)
        if status == "not compiled" and message.startswith("compile cancelled"):
            title = "Compile & benchmark (last run cancelled)"
        line = t.decorator_line - 1
        out.append(T.CodeLens(range=T.Range(T.Position(line, 0), T.Position(line, 0)),
                              command=T.Command(title=title, command=CMD_COMPILE, arguments=[state.uri, t.name])))
    return out


@server.feature(T.TEXT_DOCUMENT_CODE_ACTION,
                T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.Empty], resolve_provider=False))
def code_actions(ls: FusionLensServer, params: T.CodeActionParams):
    state = ls.doc(params.text_document.uri)
    uri = state.uri
    first, last = params.range.start.line, params.range.end.line
    view = ls.view(state)
    targets: list = []  # names, in order
    regions: list = []  # (target, region id)
    for t in state.targets:
        if t.decorator_line - 1 <= last and first <= t.end_line - 1:
            targets.append(t.name)
    for line in range(first, last + 1):
        for n in view.lines.get(line, []):
            if n.result.path == state.path and n.result.target not in targets:
                targets.append(n.result.target)
            if (n.result.target, n.region.id) not in regions:
                regions.append((n.result.target, n.region.id, n.result.path))
    many = len(targets) > 1
    out = []
    for name in targets:
        suffix = f" ({name})" if many else ""
        out.append(T.CodeAction(title="Compile and benchmark" + suffix, kind=T.CodeActionKind.Empty,
                                command=T.Command(title="Compile and benchmark", command=CMD_COMPILE, arguments=[uri, name])))
        if (state.path, name) in ls.latest and ls.latest[(state.path, name)].report is not None:
            out.append(T.CodeAction(title="Show generated trace" + suffix, kind=T.CodeActionKind.Empty,
                                    command=T.Command(title="Show generated trace", command=CMD_SHOW_TRACE, arguments=[uri, name])))
    many_regions = len(regions) > 1
    for target, rid, path in regions:
        target_uri = uri if path == state.path else from_fs_path(path)
        out.append(T.CodeAction(title="Show kernel code for this region" + (f" ({rid})" if many_regions else ""),
                                kind=T.CodeActionKind.Empty,
                                command=T.Command(title="Show kernel code for this region", command=CMD_SHOW_KERNEL,
                                                  arguments=[target_uri, target, rid])))
    return out


# --- commands and custom requests ---------------------------------------------------------

@server.command(CMD_COMPILE)
async def cmd_compile(ls: FusionLensServer, *args):
    uri = _arg(args, 0)
    if not uri:
        raise ValueError("fusionlens.compile needs [uri, target | null]")
    target = _arg(args, 1)
    return await ls.compile_targets(uri, None if target is None else [target], reason="command", force=True)


def _latest_report(ls: FusionLensServer, uri: str, target: str):
    state = ls.doc(uri)
    res = ls.latest.get((state.path, target))
    if res is None or res.report is None:
        msg = f"FusionLens: {target} has no compile result yet; compile it first"
        ls.window_show_message(T.ShowMessageParams(type=T.MessageType.Warning, message=msg))
        return state, None, msg
    return state, res.report, ""


@server.command(CMD_SHOW_TRACE)
async def cmd_show_trace(ls: FusionLensServer, *args):
    uri, target, stage = _arg(args, 0), _arg(args, 1), _arg(args, 2)
    state, report, msg = _latest_report(ls, uri, target)
    if report is None:
        return {"uri": None, "message": msg}
    traces = report.traces or {}
    if not traces:
        return {"uri": None, "message": "the report has no traces"}
    if stage is None:
        stage = next((s for s in ("execution", "final", "optimized") if s in traces), list(traces)[-1])
    if stage not in traces:
        return {"uri": None, "message": f"no trace stage {stage!r}; have {', '.join(traces)}"}
    stem = os.path.splitext(os.path.basename(state.fs_path))[0]
    header = (f"# FusionLens trace ({stage}) of {target} in {state.fs_path}\n"
              f"# generated by the language server; read-only, regenerated on every compile\n\n")
    return await ls.show_generated(header + traces[stage], f"{stem}.{target}.{stage}.py")


@server.command(CMD_SHOW_KERNEL)
async def cmd_show_kernel(ls: FusionLensServer, *args):
    uri, target, rid = _arg(args, 0), _arg(args, 1), _arg(args, 2)
    state, report, msg = _latest_report(ls, uri, target)
    if report is None:
        return {"uri": None, "message": msg}
    region = next((r for r in report.regions if r.id == rid), None)
    if region is None:
        return {"uri": None, "message": f"no region {rid!r} in {target}"}
    stem = os.path.splitext(os.path.basename(state.fs_path))[0]
    header = (f"# FusionLens region {rid} ({region.executor}) of {target} in {state.fs_path}\n"
              f"# ops: {', '.join(region.ops)}\n"
              f"# generated by the language server; read-only, regenerated on every compile\n\n")
    return await ls.show_generated(header + (region.code or "# (no generated code)\n"),
                                   f"{stem}.{target}.{rid}.py")


@server.command(CMD_CLEAR_CACHE)
def cmd_clear_cache(ls: FusionLensServer, *args):
    ls.cache.clear()
    ls.latest.clear()
    ls.generation += 1
    for state in ls.docs.values():
        state.notes.clear()
        state.view = None
    ls.refresh()
    return {"ok": True}


@server.command(CMD_DEBUG_INFO)
def cmd_debug_info(ls: FusionLensServer, *args):
    """Internal (tests, bug reports): what this process has loaded and what it holds."""
    return {"pid": os.getpid(), "version": __version__,
            "torchImported": "torch" in sys.modules,
            "userModules": sorted(m for m in sys.modules if m.startswith("_fusionlens_user")),
            "workerPid": ls.worker.pid, "workerRestarts": ls.worker.restarts,
            "cacheEntries": len(ls.cache), "settings": dataclasses.asdict(ls.settings),
            "device": ls.last_device}


@server.feature(REGIONS_REQUEST)
def regions_request(ls: FusionLensServer, params: Any):
    uri = _get(params, "uri")
    state = ls.doc(uri)
    text_doc = ls.workspace.get_text_document(uri)
    view = ls.view(state)
    targets = []
    for t in state.targets:
        status, message = ls.target_state(state, t.name)
        res = ls.latest.get((state.path, t.name))
        entry = {"name": t.name, "line": t.line - 1, "status": status, "message": message,
                 "speedup": None, "compiledMs": None, "eagerMs": None, "regions": []}
        rep = res.report if res is not None else None
        if rep is not None:
            tm = rep.timings
            if tm is not None:
                entry["speedup"] = tm.speedup_vs_eager
                entry["compiledMs"] = tm.compiled.median_ms if tm.compiled else None
                entry["eagerMs"] = tm.eager.median_ms if tm.eager else None
            for r in rep.regions:
                b = r.boundary
                entry["regions"].append({
                    "id": r.id, "executor": r.executor, "ops": list(r.ops),
                    "lines": view.region_lines.get((res.seq, r.id), []),
                    "timeMs": r.timing.median_ms if r.timing else None,
                    "eagerMs": r.timing.eager_median_ms if r.timing else None,
                    "boundary": None if b is None else {"reason": b.reason, "detail": b.detail}})
        targets.append(entry)
    return {"uri": uri, "version": text_doc.version, "targets": targets}


# --- entry point --------------------------------------------------------------------------

def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(prog="fusionlens-lsp", description="FusionLens language server")
    parser.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the default)")
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on TCP instead of stdio")
    parser.add_argument("--log-level", default="WARNING", help="log level for stderr (default WARNING)")
    parser.add_argument("--log-file", help="log to this file instead of stderr")
    parser.add_argument("--version", action="version", version=f"fusionlens-lsp {__version__}")
    args, _unknown = parser.parse_known_args(argv)  # clients add flags of their own (--clientProcessId=...)
    target = {"filename": args.log_file} if args.log_file else {"stream": sys.stderr}
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", **target)
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        server.start_tcp(host or "127.0.0.1", int(port))
    else:
        server.start_io()


if __name__ == "__main__":
    main()
