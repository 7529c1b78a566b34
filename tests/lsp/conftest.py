"""pytest-lsp fixtures: the real `fusionlens-lsp` server process, driven by a test client
with the capabilities of a real editor (VS Code, Neovim)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, client_capabilities

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
FIXTURES = REPO / "tests" / "fixtures"
PROFILES = ["visual-studio-code", "neovim"]


def server_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    paths = [str(REPO), str(REPO / "tests" / "lsp"), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    if env.get("FUSIONLENS_LSP_TEST_FAKE"):  # developing without the real compiler only
        env["FUSIONLENS_WORKER_COMPILE"] = "fake_compile:compile_target"
    env.update(extra or {})
    return env


class Session:
    """A started server plus helpers to wait on what it pushes."""

    def __init__(self, client, profile: str, root: Path):
        self.client = client
        self.profile = profile
        self.root = root
        self.statuses: list = []
        self.versions: dict = {}
        self.lens_refreshes = 0
        self.hint_refreshes = 0

    def uri(self, path: Path | str) -> str:
        return Path(path).resolve().as_uri()

    async def wait_for(self, predicate, timeout: float = 60.0, what: str = "condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")

    async def wait_targets(self, uri: str, statuses=("ok", "error"), timeout: float = 240, names=None):
        """Poll fusionlens/regions until every (named) target has one of `statuses`."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = await self.regions(uri)
            wanted = [t for t in last.targets if names is None or t.name in names]
            if wanted and all(t.status in statuses for t in wanted):
                return last
            await asyncio.sleep(0.2)
        raise AssertionError(f"targets did not reach {statuses} in {timeout} s: {last}")

    def open(self, path: Path | str, text: str | None = None) -> str:
        path = Path(path)
        uri = self.uri(path)
        self.versions[uri] = 1
        self.client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(
            uri=uri, language_id="python", version=1, text=path.read_text() if text is None else text)))
        return uri

    def change(self, uri: str, changes: list) -> int:
        self.versions[uri] += 1
        self.client.text_document_did_change(T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]), changes))
        return self.versions[uri]

    async def command(self, name: str, *args):
        return await self.client.workspace_execute_command_async(
            T.ExecuteCommandParams(command=name, arguments=list(args)))

    async def compile(self, uri: str, target: str | None = None, timeout: float = 240):
        return await asyncio.wait_for(self.command("fusionlens.compile", uri, target), timeout)

    async def hover(self, uri: str, line: int, character: int = 4):
        return await self.client.text_document_hover_async(
            T.HoverParams(T.TextDocumentIdentifier(uri), T.Position(line, character)))

    async def hints(self, uri: str, first: int = 0, last: int = 10_000):
        return await self.client.text_document_inlay_hint_async(T.InlayHintParams(
            T.TextDocumentIdentifier(uri), T.Range(T.Position(first, 0), T.Position(last, 0)))) or []

    async def lenses(self, uri: str):
        return await self.client.text_document_code_lens_async(
            T.CodeLensParams(T.TextDocumentIdentifier(uri))) or []

    async def actions(self, uri: str, line: int):
        return await self.client.text_document_code_action_async(T.CodeActionParams(
            T.TextDocumentIdentifier(uri), T.Range(T.Position(line, 0), T.Position(line, 0)),
            T.CodeActionContext(diagnostics=[]))) or []

    async def regions(self, uri: str):
        return await self.client.protocol.send_request_async("fusionlens/regions", {"uri": uri})

    def diagnostics(self, uri: str) -> list:
        return list(self.client.diagnostics.get(uri, []))


@pytest.fixture(params=PROFILES)
def profile(request):
    return request.param


@pytest_asyncio.fixture
async def start_server(profile, tmp_path):
    """`await start_server(settings)` -> Session; every server is shut down afterwards."""
    sessions = []

    async def start(settings: dict | None = None, root: Path = REPO, env: dict | None = None,
                    capabilities: T.ClientCapabilities | None = None) -> Session:
        config = ClientServerConfig(server_command=[sys.executable, "-m", "lsp_server", "--stdio"],
                                    server_env=server_env(env))
        client = await config.start()
        session = Session(client, profile, root)

        @client.feature("fusionlens/status")
        def _status(params):
            session.statuses.append(params)

        @client.feature(T.WORKSPACE_CODE_LENS_REFRESH)
        def _lens_refresh(params):
            session.lens_refreshes += 1

        @client.feature(T.WORKSPACE_INLAY_HINT_REFRESH)
        def _hint_refresh(params):
            session.hint_refreshes += 1

        opts = {"benchmarkRepeats": 2, "debounceMs": 50, "cacheFolder": str(tmp_path / "cache")}
        opts.update(settings or {})
        await client.initialize_session(T.InitializeParams(
            capabilities=capabilities or client_capabilities(profile),
            root_uri=root.as_uri(),
            workspace_folders=[T.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
            initialization_options=opts))
        sessions.append(session)
        return session

    yield start
    for s in sessions:
        try:
            await asyncio.wait_for(s.client.shutdown_session(), 30)
        except Exception:  # noqa: BLE001
            pass
        await s.client.stop()
