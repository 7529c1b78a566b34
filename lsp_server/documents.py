"""The open documents: what each parses to (its targets, via `compiler.discovery.find_targets`,
pure ast), the View it shows (the results that annotate it, mapped onto its current text),
and publishing its diagnostics."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from typing import Any
from collections.abc import Iterator

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from compiler.discovery import TargetInfo, find_targets
from compiler.report import Boundary, Region, SavedTensor
from lsp_server.annotations import DiagNote, FileAnnotations, LineNote, Result, norm_path
from lsp_server.linemap import LineMap
from lsp_server.results import Results
from lsp_server.settings import Settings

logger = logging.getLogger("fusionlens.lsp")

_SEVERITY = {"error": T.DiagnosticSeverity.Error, "warning": T.DiagnosticSeverity.Warning,
             "information": T.DiagnosticSeverity.Information, "info": T.DiagnosticSeverity.Information,
             "hint": T.DiagnosticSeverity.Hint}


def capability(server: LanguageServer, *path: str) -> Any:
    """A field of the client's capabilities (`"window", "show_document", "support"`), or None."""
    obj: Any = server.client_capabilities
    for p in path:
        obj = getattr(obj, p, None) if obj is not None else None
    return obj


@dataclasses.dataclass
class View:
    """Everything a document shows, in the document's current line numbers."""

    lines: dict[int, list[LineNote]]
    boundaries: dict[int, list[tuple[Region, Boundary]]]
    region_lines: dict[tuple[int, str], list[int]]  # (result seq, region id) -> lines
    saved: dict[int, list[SavedTensor]]  # activations a line's training forward saves for the backward
    diags: list[tuple[int, DiagNote]]
    hint_lines: list[int]  # sorted lines that carry hints
    hints: list[tuple[int, T.InlayHint]] | None = None  # built on the first inlay request

    def region_lines_of(self, result: Result, region_id: str) -> list[int]:
        return self.region_lines.get((result.seq, region_id), [])


class DocState:
    def __init__(self, uri: str, fs_path: str | None = None):
        self.uri = uri
        self.fs_path = fs_path or to_fs_path(uri) or uri  # an untitled buffer gets a path of its own
        self.path = norm_path(self.fs_path) or uri
        self.parsed_text: str | None = None
        self.targets: list[TargetInfo] = []
        self.syntax_error: tuple[int, int, str] | None = None  # (line0, col0, message)
        self.notes: dict[str, str] = {}  # target -> message (e.g. why it was not compiled)
        self.cancelled: set[str] = set()  # targets whose latest run was cancelled
        self.view: View | None = None
        self.view_key: tuple[int, Any, int] | None = None

    def parse(self, text: str) -> None:
        self.parsed_text = text
        try:
            self.targets = find_targets(text, self.fs_path)
            self.syntax_error = None
        except SyntaxError as e:
            self.syntax_error = (max((e.lineno or 1) - 1, 0), max((e.offset or 1) - 1, 0), f"SyntaxError: {e.msg}")
        except Exception as e:  # noqa: BLE001 (e.g. ValueError: null bytes)
            self.syntax_error = (0, 0, f"cannot parse: {e}")
        self.view = None


class Documents:
    """The documents the client has open, keyed by URI."""

    def __init__(self, server: LanguageServer, settings: Settings, results: Results):
        self._server = server
        self._settings = settings
        self._results = results
        self._docs: dict[str, DocState] = {}

    def __iter__(self) -> Iterator[DocState]:
        return iter(list(self._docs.values()))

    def uris(self) -> list[str]:
        return list(self._docs)

    def get(self, uri: str) -> DocState | None:
        """The document's state as last parsed, None when it is not open."""
        return self._docs.get(uri)

    def text_document(self, uri: str) -> TextDocument:
        return self._server.workspace.get_text_document(uri)

    def doc(self, uri: str) -> DocState:
        """The document's state, parsed again if its text changed."""
        state = self._docs.get(uri)
        if state is None:
            state = self._docs[uri] = DocState(uri, None if to_fs_path(uri) else self.untitled_path(uri))
        try:
            text = self.text_document(uri).source
        except (OSError, UnicodeDecodeError):
            text = ""
        if state.parsed_text != text:
            state.parse(text)
        return state

    def close(self, uri: str) -> None:
        self._docs.pop(uri, None)

    def forget_views(self) -> None:
        for state in self._docs.values():
            state.view = None

    def untitled_path(self, uri: str) -> str:
        """Where an untitled buffer is said to live (its report's file): never written."""
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", uri.split(":", 1)[-1]).strip("_") or "untitled"
        return os.path.join(self._settings.cache_root(), "untitled", name if name.endswith(".py") else name + ".py")

    def workspace_root(self, doc: DocState) -> str:
        """The workspace folder holding the document (the innermost one), else the root."""
        best = None
        try:
            folders = [to_fs_path(f.uri) for f in self._server.workspace.folders.values()]
        except Exception:  # noqa: BLE001
            folders = []
        for folder in folders:
            if folder and (doc.fs_path + os.sep).startswith(folder.rstrip(os.sep) + os.sep):
                if best is None or len(folder) > len(best):
                    best = folder
        if best is None:
            try:
                best = self._server.workspace.root_path
            except Exception:  # noqa: BLE001
                best = None
        return best or os.path.dirname(doc.fs_path)

    # --- what a document shows ----------------------------------------------------------------

    def results_for(self, state: DocState) -> list[Result]:
        names = {t.name for t in state.targets}
        out = []
        for (path, target), res in self._results.all_shown():
            if path == state.path and state.syntax_error is None and target not in names:
                continue  # the target was removed or renamed
            if state.path in res.files():
                out.append(res)
        out.sort(key=lambda r: (r.path != state.path, r.target_line if r.target_line is not None else 1 << 30,
                                r.seq))
        return out

    def view(self, state: DocState) -> View:
        text_doc = self.text_document(state.uri)
        key = (text_doc.version or 0, state.parsed_text is not None and hash(state.parsed_text),
               self._results.generation)
        if state.view is not None and state.view_key == key:
            return state.view
        current = [line.rstrip("\r\n") for line in text_doc.lines]
        view = View({}, {}, {}, {}, [], [])
        maps: dict[int, LineMap] = {}
        for res in self.results_for(state):
            snap = res.snapshots.get(state.path)
            if snap is None:
                continue
            lm = maps.get(id(snap))
            if lm is None:
                lm = maps[id(snap)] = LineMap(snap.splitlines(), current)
            _add(view, res, res.annotations(state.path), lm)
        view.hint_lines = sorted(set(view.lines) | set(view.boundaries) | set(view.saved))
        state.view, state.view_key = view, key
        return view

    # --- publishing ---------------------------------------------------------------------------

    def publish(self, state: DocState) -> None:
        text_doc = self.text_document(state.uri)
        lines = text_doc.lines
        out = [] if state.syntax_error is None else [_syntax_diagnostic(text_doc, state.syntax_error)]
        seen = set()
        for line, d in self.view(state).diags:
            if (line, d.message) in seen or line >= len(lines):
                continue
            seen.add((line, d.message))
            out.append(_diagnostic(text_doc, line, d))
        self._server.text_document_publish_diagnostics(
            T.PublishDiagnosticsParams(uri=state.uri, diagnostics=out, version=text_doc.version))

    def refresh(self, uri: str | None = None) -> None:
        """Push what changed: diagnostics now, and ask the client to re-pull lenses/hints."""
        for state in list(self._docs.values()):
            if uri is None or state.uri == uri or self._results.mention(state.path):
                try:
                    self.doc(state.uri)
                    self.publish(state)
                except Exception:  # noqa: BLE001
                    logger.exception("publishing diagnostics failed")
        if capability(self._server, "workspace", "code_lens", "refresh_support"):
            _quiet(self._server.workspace_code_lens_refresh(None))
        if capability(self._server, "workspace", "inlay_hint", "refresh_support"):
            _quiet(self._server.workspace_inlay_hint_refresh(None))


def _add(view: View, res: Result, ann: FileAnnotations, lm: LineMap) -> None:
    """A result's annotations of the document, on the lines they have now."""
    for old, notes in ann.lines.items():
        new = lm(old)
        if new is not None:
            view.lines.setdefault(new, []).extend(notes)
    for old, items in ann.boundaries.items():
        new = lm(old)
        if new is not None:
            view.boundaries.setdefault(new, []).extend(items)
    for rid, olds in ann.region_lines.items():
        view.region_lines[(res.seq, rid)] = [n for n in (lm(o) for o in olds) if n is not None]
    for old, saved in ann.saved.items():
        new = lm(old)
        if new is not None:
            view.saved.setdefault(new, saved)  # the first result's (its notes are the ones hinted)
    for d in ann.diags:
        new = lm(d.line)
        if new is not None:
            view.diags.append((new, d))


def _syntax_diagnostic(text_doc: TextDocument, error: tuple[int, int, str]) -> T.Diagnostic:
    lines = text_doc.lines
    line, col, msg = error  # col: characters (SyntaxError.offset)
    line = min(line, max(len(lines) - 1, 0))
    text = lines[line].rstrip("\r\n") if lines else ""
    codec = text_doc.position_codec
    start, end = codec.client_num_units(text[:col]), codec.client_num_units(text)
    return T.Diagnostic(range=T.Range(T.Position(line, min(start, end)), T.Position(line, max(end, start))),
                        message=msg, severity=T.DiagnosticSeverity.Error, source="fusionlens", code="syntax-error")


def _diagnostic(text_doc: TextDocument, line: int, d: DiagNote) -> T.Diagnostic:
    text = text_doc.lines[line].rstrip("\r\n")
    codec = text_doc.position_codec
    # report columns count UTF-8 bytes; the client counts its own units (UTF-16 mostly)
    start = _chars(text, d.col) if d.col is not None else len(text) - len(text.lstrip())
    end = _chars(text, d.end_col) if d.end_col is not None else len(text)
    end = end if end > start else len(text)
    rng = T.Range(T.Position(line, codec.client_num_units(text[:start])),
                  T.Position(line, codec.client_num_units(text[:end])))
    related = [T.DiagnosticRelatedInformation(T.Location(u, T.Range(T.Position(ln, 0), T.Position(ln + 1, 0))), m)
               for u, ln, m in d.related_uris()]
    severity = _SEVERITY.get(d.severity, T.DiagnosticSeverity.Information)
    return T.Diagnostic(range=rng, message=d.message, severity=severity, source="fusionlens", code=d.code or None,
                        related_information=related or None)


def _chars(text: str, utf8_col: int) -> int:
    """The character index of a UTF-8 byte offset into `text`."""
    return len(text.encode("utf-8")[:utf8_col].decode("utf-8", errors="ignore"))


def _quiet(future: Any) -> None:
    """Fire-and-forget a request to the client: a client that answers with an error (or
    never implemented the method) must not produce 'exception never retrieved' noise."""
    def swallow(f: Any) -> None:
        try:
            f.exception()
        except BaseException:  # noqa: BLE001
            pass
    try:
        future.add_done_callback(swallow)
    except Exception:  # noqa: BLE001
        pass
