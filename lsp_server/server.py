"""The FusionLens language server object (pygls 2.x): its state and the services handlers use.

This process imports neither torch nor user code: targets come from
`compiler.discovery.find_targets` (pure ast) and compiling happens in the worker process
(lsp_server.worker) driven by lsp_server.worker_client. The server is assembled from
settings (Settings), documents (DocumentsMixin: parsing, views, publishing) and jobs
(CompileJobsMixin: the compile queue and result cache); lsp_server.app attaches the
handlers (features, commands) and runs it. Importing this module creates nothing.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import re
import tempfile
from typing import Any, Optional

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path

from lsp_server import __version__
from lsp_server.documents import DocumentsMixin
from lsp_server.jobs import CompileJobsMixin, Job
from lsp_server.settings import Settings
from lsp_server.worker_client import Worker

STATUS_NOTIFICATION = "fusionlens/status"
MAX_WORKER_LOG_LINES = 200


class FusionLensServer(DocumentsMixin, CompileJobsMixin, LanguageServer):
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

    def cache_root(self) -> str:
        """fusionlens.cacheFolder, else a folder of this user's under the temporary directory."""
        return self.settings.cacheFolder or os.path.join(
            tempfile.gettempdir(), f"fusionlens-lsp-{os.getuid() if hasattr(os, 'getuid') else 'user'}")

    def cache_folder(self) -> str:
        folder = os.path.join(self.cache_root(), "generated")
        os.makedirs(folder, exist_ok=True)
        return folder

    def tell(self, kind: T.MessageType, message: str) -> None:
        """window/showMessage: how a request the user made ended, when it is not what they asked."""
        self.window_show_message(T.ShowMessageParams(type=kind, message=f"FusionLens: {message}"))

    def untitled_path(self, uri: str) -> str:
        """Where an untitled buffer is said to live (its report's file): never written."""
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", uri.split(":", 1)[-1]).strip("_") or "untitled"
        return os.path.join(self.cache_root(), "untitled", name if name.endswith(".py") else name + ".py")

    def notify_status(self, state: str, message: str, uri: Optional[str], speedup: Optional[float] = None):
        self.protocol.notify(STATUS_NOTIFICATION, {
            "state": state, "device": self.last_device, "message": message,
            "speedup": speedup, "uri": uri})


    # --- generated documents -------------------------------------------------------------

    async def show_generated(self, text: str, name: str) -> dict:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        path = os.path.join(self.cache_folder(), safe)
        if os.path.exists(path):
            os.chmod(path, 0o644)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(path, 0o444)  # a hint to editors that it is read-only
        return await self.show_path(path)

    async def show_path(self, path: str) -> dict:
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
