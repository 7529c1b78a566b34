"""Helpers for the language-server tests (a uniquely named module: tests/ has its own conftest)."""

from __future__ import annotations

import ast
import asyncio
import os
import re
import time
from pathlib import Path

from lsprotocol import types as T

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
FIXTURES = REPO / "tests" / "fixtures"
# the worker's stand-in compilers (lsp_fake_compile.py): no user code runs, a compile is quick
FAKE = {"FUSIONLENS_WORKER_COMPILE": "lsp_fake_compile:compile_target"}
HANGS = {"FUSIONLENS_WORKER_COMPILE": "lsp_fake_compile:hanging_compile_target"}
# a small model file for those tests: two ops on two lines and one example target
MODEL = '''import torch
import compiler


def forward(x):
    y = torch.relu(x)
    return torch.sigmoid(y)


@compiler.example
def model_example():
    return forward, (torch.randn(4),)
'''


def write_model(folder: Path, text: str = MODEL) -> Path:
    path = folder / "model.py"
    path.write_text(text)
    return path
PROFILES = ["visual-studio-code", "neovim"]


def server_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    paths = [str(REPO), str(REPO / "tests" / "lsp"), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
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

    def insert(self, uri: str, line: int, text: str) -> int:
        """An incremental edit that inserts `text` at the start of `line`."""
        return self.change(uri, [T.TextDocumentContentChangePartial(
            range=T.Range(T.Position(line, 0), T.Position(line, 0)), text=text)])

    async def command(self, name: str, *args):
        return await self.client.workspace_execute_command_async(
            T.ExecuteCommandParams(command=name, arguments=list(args)))

    async def compile(self, uri: str, target: str | None = None, timeout: float = 240):
        """fusionlens.compile, answered once the compile is done (`wait`)."""
        return await asyncio.wait_for(self.command("fusionlens.compile", uri, target, {"wait": True}), timeout)

    async def queue_compile(self, uri: str, target: str | None = None, timeout: float = 10):
        """fusionlens.compile as editors send it: answered once the compile is queued."""
        return await asyncio.wait_for(self.command("fusionlens.compile", uri, target), timeout)

    async def hover(self, uri: str, line: int, character: int = 4):
        return await self.client.text_document_hover_async(
            T.HoverParams(T.TextDocumentIdentifier(uri), T.Position(line, character)))

    async def hints(self, uri: str, first: int = 0, last: int = 10_000, resolve: bool = True):
        """The hints of lines first..last; a tooltip the server left for inlayHint/resolve is
        resolved, as an editor does when it shows one (`resolve=False`: as sent)."""
        hints = await self.client.text_document_inlay_hint_async(T.InlayHintParams(
            T.TextDocumentIdentifier(uri), T.Range(T.Position(first, 0), T.Position(last, 0)))) or []
        if resolve:
            hints = [await self.client.inlay_hint_resolve_async(h) if h.tooltip is None and h.data else h
                     for h in hints]
        return hints

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


# `R3 · torch · 0.12 ms`, `R3 · triton · 12.1 µs · 45% peak`, on a CPU `R3 · torch · est 4.1 µs`
# or the preview region the line would join, `P1 · triton (preview) · est 3.2 µs` (`est < 0.1 µs`)
HINT_RE = re.compile(r"^\S+( \+\d+ more)? · [\w./-]+( \(preview\))?( · (est )?(< )?[\d.]+ (ms|µs))?( · \d+% peak)?$")
SUMMARY_RE = re.compile(r"^(fwd\+bwd ([\d.]+x vs eager|· \d+ backward regions?) · [\d.]+ [KMG]?B saved · )?"
                        r"\d+ regions? · \d+ kernels?( · [\d.]+ (ms|µs))?( · [\d.]+x vs eager)?"
                        r"( · \S+ at \d+% of peak)?$")
HINT_MAX = 40  # lsp_server.views.HINT_MAX


def line_of(path: Path, needle: str, start: int = 0) -> int:
    """0-based line of the first line (from `start`) that contains `needle`."""
    for i, line in enumerate(Path(path).read_text().splitlines()):
        if i >= start and needle in line:
            return i
    raise AssertionError(f"{needle!r} not in {path}")


def marked_lines(path: Path, marker: str) -> set:
    return {i for i, line in enumerate(Path(path).read_text().splitlines()) if marker in line}


def command_of(action) -> T.Command:
    """pygls' client parses a CodeAction with a command as `Command | CodeAction` and may pick
    Command, leaving the nested command dict as a string; undo that."""
    cmd = action.command
    if isinstance(cmd, str) and cmd.startswith("{"):
        data = ast.literal_eval(cmd)
        return T.Command(title=data["title"], command=data["command"], arguments=data.get("arguments"))
    return cmd


def hover_text(hover) -> str:
    assert hover is not None, "no hover"
    contents = hover.contents
    return contents.value if hasattr(contents, "value") else str(contents)


def tooltip_text(hint) -> str:
    tip = hint.tooltip
    return tip.value if hasattr(tip, "value") else str(tip or "")


def assert_line_hover(text: str) -> None:
    """The hover of a compiled line: one region in detail, or a table of several regions;
    both with the line's ops, the trace from this line and timings."""
    assert text.startswith("### FusionLens · "), text[:200]
    if text.startswith("### FusionLens · region `"):
        assert "**ops from this line:**" in text and "**region ops:**" in text
        assert "**same region:**" in text
        assert "vs eager" in text or "not measured" in text
        assert "**kernel code (" in text and "```python" in text
    else:
        assert "| region | executor | ops from this line | time | eager |" in text
        assert "**these regions also cover:**" in text
    assert "**trace from this line:**\n\n```python\n" in text
