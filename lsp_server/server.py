"""The FusionLens language server object (pygls 2.x): the parts it is made of, and the ways
they reach the user.

This process imports neither torch nor user code: targets come from
`compiler.discovery.find_targets` (pure ast) and compiling happens in the worker process
(lsp_server.worker) driven by lsp_server.worker_client. The server composes objects that
own their state: `settings` (Settings), `results` (the cache and the results shown),
`documents` (the open documents and their views), `worker` (the worker process) and `jobs`
(the compile queue); it is itself their `Ui`. lsp_server.app attaches the handlers
(features, commands) and runs it. Importing this module creates nothing.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import re
import uuid
from typing import Any

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path

from lsp_server import __version__
from lsp_server.documents import Documents, capability
from lsp_server.jobs import Jobs
from lsp_server.results import Results
from lsp_server.settings import Settings
from lsp_server.worker_client import Worker

STATUS_NOTIFICATION = "fusionlens/status"


class FusionLensServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("fusionlens-lsp", __version__)
        self.settings = Settings()
        self.results = Results()
        self.documents = Documents(self, self.settings, self.results)
        self.worker = Worker(on_stderr=self._worker_output)
        atexit.register(self.worker.kill_now)
        self.jobs = Jobs(self.settings, self.documents, self.results, self.worker, self)

    def caps(self, *path: str) -> Any:
        return capability(self, *path)

    def _worker_output(self, line: str) -> None:
        self.log(T.MessageType.Log, f"[worker] {line}")

    # --- Ui: how the parts reach the user ------------------------------------------------------

    def tell(self, kind: T.MessageType, message: str) -> None:
        """window/showMessage: how a request the user made ended, when it is not what they asked."""
        self.window_show_message(T.ShowMessageParams(type=kind, message=f"FusionLens: {message}"))

    def log(self, kind: T.MessageType, message: str) -> None:
        try:
            self.window_log_message(T.LogMessageParams(type=kind, message=message))
        except Exception:  # noqa: BLE001 - no client to log to (shutting down)
            pass

    def notify_status(self, state: str, message: str, uri: str | None, speedup: float | None = None) -> None:
        self.protocol.notify(STATUS_NOTIFICATION, {
            "state": state, "device": self.jobs.last_device, "message": message,
            "speedup": speedup, "uri": uri})

    def refresh(self, uri: str | None = None) -> None:
        self.documents.refresh(uri)

    async def progress_begin(self, token: Any, title: str, message: str) -> T.ProgressToken | None:
        """Begin a $/progress sequence on `token` (the request's), else on one the server
        creates where the client supports it; None where there is none."""
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

    def progress_report(self, token: T.ProgressToken, message: str, percentage: int | None = None) -> None:
        self.work_done_progress.report(token, T.WorkDoneProgressReport(message=message, percentage=percentage))

    def progress_end(self, token: T.ProgressToken, message: str) -> None:
        self.work_done_progress.end(token, T.WorkDoneProgressEnd(message=message))

    # --- generated documents ------------------------------------------------------------------

    def cache_folder(self) -> str:
        folder = os.path.join(self.settings.cache_root(), "generated")
        os.makedirs(folder, exist_ok=True)
        return folder

    async def show_generated(self, text: str, name: str) -> dict[str, Any]:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        path = os.path.join(self.cache_folder(), safe)
        if os.path.exists(path):
            os.chmod(path, 0o644)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(path, 0o444)  # a hint to editors that it is read-only
        return await self.show_path(path)

    async def show_path(self, path: str) -> dict[str, Any]:
        """Ask the client to open a file (window/showDocument, where it can): {uri, shown}."""
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
