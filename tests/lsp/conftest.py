"""pytest-lsp fixtures: the real `fusionlens-lsp` server process, driven by a test client
with the capabilities of a real editor (VS Code, Neovim)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, client_capabilities

from lsp_helpers import PROFILES, REPO, Session, server_env


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
