"""The FusionLens language server object (pygls 2.x): the parts it is made of, and the ways
they reach the user.

This process imports neither torch nor user code: targets come from
`fusionlens.report.discovery.find_targets` (pure ast) and compiling happens in the worker process
(lsp_server.worker) driven by lsp_server.worker_client. The server composes objects that
own their state: `settings` (Settings), `results` (the cache and the results shown),
`documents` (the open documents and their views), `worker` (the worker process) and `jobs`
(the compile queue); it is itself their `Ui`. lsp_server.app attaches the handlers
(features, commands) and runs it. Importing this module creates nothing.

LSP's order is kept on every transport (lsp_server.rpc.FusionLensProtocol): before
`initialize`, requests are answered ServerNotInitialized and notifications dropped. Messages
are read with bounds (lsp_server.transport); over a socket the server takes one client.
Generated documents go to the private cache folder (lsp_server.files).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import re
import uuid
from collections.abc import Callable
from typing import Any

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path

from lsp_server import __version__
from lsp_server.documents import Documents, capability
from lsp_server.files import write_private
from lsp_server.jobs import Jobs
from lsp_server.results import Results
from lsp_server.rpc import FusionLensProtocol
from lsp_server.settings import Settings
from lsp_server.worker_client import Worker

STATUS_NOTIFICATION = "fusionlens/status"
SETTINGS_PENDING = ("not compiled: waiting for the client's settings (its answer to workspace/configuration); "
                    "nothing runs until they arrive")
logger = logging.getLogger("fusionlens.lsp")


class FusionLensServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("fusionlens-lsp", __version__, protocol_cls=FusionLensProtocol)
        self.settings = Settings()
        # Set once the client's settings are known (its workspace/configuration answer, or
        # initializationOptions where it has none); nothing runs before.
        self.settings_known = asyncio.Event()
        self.settings_overdue = asyncio.Event()  # set when the answer is late (said once)
        self.pending_triggers: dict[str, str] = {}  # uri -> "opened" | "saved": compiles waiting for it
        self.results = Results()
        self.documents = Documents(self, self.settings, self.results)
        self.worker = Worker(on_stderr=self._worker_output)
        self.cleanups: list[Callable[[], None]] = [self.worker.discard]  # run_cleanups, last first
        atexit.register(self.run_cleanups)
        self.jobs = Jobs(self.settings, self.documents, self.results, self.worker, self)

    def run_cleanups(self) -> None:
        """End what must not outlive the server (the worker's processes, a socket), at once:
        `exit`, a signal, interpreter exit."""
        for cleanup in reversed(self.cleanups):
            try:
                cleanup()
            except Exception:  # noqa: BLE001 - the next one still runs
                logger.exception("cleaning up failed")

    def caps(self, *path: str) -> Any:
        return capability(self, *path)

    async def settings_ready(self) -> bool:
        """Wait for the client's settings, until they come or are overdue: True when known."""
        if not self.settings_known.is_set() and not self.settings_overdue.is_set():
            waits = [asyncio.ensure_future(e.wait()) for e in (self.settings_known, self.settings_overdue)]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
        return self.settings_known.is_set()

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

    async def progress_begin(self, token: Any, title: str, message: str,
                             cancellable: bool = False) -> T.ProgressToken | None:
        """Begin a $/progress sequence on `token` (the request's), else on one the server
        creates where the client supports it; None where there is none. `cancellable`: the
        client may cancel it (window/workDoneProgress/cancel, features.on_progress_cancel)."""
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
                                                                         percentage=0, cancellable=cancellable))
        except Exception:  # noqa: BLE001
            return None
        return token

    def progress_report(self, token: T.ProgressToken, message: str, percentage: int | None = None) -> None:
        self.work_done_progress.report(token, T.WorkDoneProgressReport(message=message, percentage=percentage))

    def progress_end(self, token: T.ProgressToken, message: str) -> None:
        self.work_done_progress.end(token, T.WorkDoneProgressEnd(message=message))

    # --- generated documents ------------------------------------------------------------------

    def write_generated(self, sub: str, name: str, text: str, mode: int = 0o444) -> str:
        """Write a generated file to the cache folder's `sub` folder, privately and atomically
        (lsp_server.files); returns its path. Raises UnsafeFolder (told) or OSError."""
        root, ours = self.settings.cache_location()
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).lstrip(".") or "generated.py"
        try:
            return write_private(root, sub, safe, text, ours, mode)
        except OSError as e:  # UnsafeFolder among them
            self.tell(T.MessageType.Error, f"not written: {e}")
            self.log(T.MessageType.Error, f"not written: {e}")
            raise

    async def show_generated(self, text: str, name: str) -> dict[str, Any]:
        """Write a generated document (0444: a hint to editors that it is read-only) and ask
        the client to open it; {"uri": None, "message"} where it cannot be written."""
        try:
            path = self.write_generated("generated", name, text)
        except OSError as e:
            return {"uri": None, "message": f"FusionLens: not written: {e}"}
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
