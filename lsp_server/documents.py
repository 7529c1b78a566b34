"""Per-document state: what a document parses to, the View it shows and publishing it.

DocumentsMixin is part of FusionLensServer (lsp_server.server); it reads the server's
`docs`, `latest`, `generation`, `active` and `settings`. Targets come from
`compiler.discovery.find_targets` (pure ast).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Optional

from lsprotocol import types as T
from pygls.uris import to_fs_path

from compiler.discovery import find_targets
from lsp_server.linemap import LineMap
from lsp_server.views import norm_path

logger = logging.getLogger("fusionlens.lsp")

_SEVERITY = {"error": T.DiagnosticSeverity.Error, "warning": T.DiagnosticSeverity.Warning,
             "information": T.DiagnosticSeverity.Information, "info": T.DiagnosticSeverity.Information,
             "hint": T.DiagnosticSeverity.Hint}


class DocState:
    def __init__(self, uri: str, fs_path: Optional[str] = None):
        self.uri = uri
        self.fs_path = fs_path or to_fs_path(uri) or uri  # an untitled buffer gets a path of its own
        self.path = norm_path(self.fs_path) or uri
        self.parsed_text: Optional[str] = None
        self.targets: list = []  # [compiler.discovery.TargetInfo]
        self.syntax_error: Optional[tuple] = None  # (line0, col0, message)
        self.notes: dict = {}  # target -> message (e.g. why it was not compiled)
        self.cancelled: set = set()  # targets whose latest run was cancelled
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
    backward: dict = dataclasses.field(default_factory=dict)  # line -> BackwardNote (training compiles)
    hints: Optional[list] = None  # [(line, InlayHint)], built on the first inlay request


class DocumentsMixin:
    """Parsing, viewing and publishing open documents (methods of FusionLensServer)."""

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

    def doc(self, uri: str) -> DocState:
        state = self.docs.get(uri)
        if state is None:
            state = self.docs[uri] = DocState(uri, None if to_fs_path(uri) else self.untitled_path(uri))
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
        backward: dict = {}
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
            for old, note in ann.backward.items():
                new = lm(old)
                if new is not None:
                    backward.setdefault(new, note)
            for d in ann.diags:
                new = lm(d.line)
                if new is not None:
                    diags.append((new, d))
        view = View(lines, boundaries, region_lines, diags, sorted(set(lines) | set(boundaries)), backward)
        state.view, state.view_key = view, key
        return view

    def target_state(self, state: DocState, name: str) -> tuple:
        """(status, message) of a target (docs/lsp.md, fusionlens/regions): compiling; not
        compiled when its latest run was cancelled (the message says so); not allowed
        (execution off: its results, if any, are stale); ok or error (its latest result)."""
        if (state.path, name) in self.active:
            job = self.active[(state.path, name)]
            return "compiling", ("running" if job.started else "queued")
        if name in state.cancelled:
            return "not compiled", state.notes.get(name, "compile cancelled")
        res = self.latest.get((state.path, name))
        if not self.settings.allowExecution:
            stale = " (the results shown are stale)" if res is not None else ""
            return "not allowed", "not compiled: running user code is disabled (fusionlens.allowExecution is false)" + stale
        if res is not None:
            return res.status, res.message
        return "not compiled", state.notes.get(name, "")

    # --- publishing ----------------------------------------------------------------------

    def publish(self, state: DocState) -> None:
        text_doc = self.workspace.get_text_document(state.uri)
        lines = text_doc.lines
        out = []
        codec = text_doc.position_codec
        if state.syntax_error is not None:
            line, col, msg = state.syntax_error  # col: characters (SyntaxError.offset)
            line = min(line, max(len(lines) - 1, 0))
            text = lines[line].rstrip("\r\n") if lines else ""
            start, end = codec.client_num_units(text[:col]), codec.client_num_units(text)
            out.append(T.Diagnostic(range=T.Range(T.Position(line, min(start, end)), T.Position(line, max(end, start))),
                                    message=msg, severity=T.DiagnosticSeverity.Error, source="fusionlens",
                                    code="syntax-error"))
        seen = set()
        for line, d in self.view(state).diags:
            if (line, d.message) in seen or line >= len(lines):
                continue
            seen.add((line, d.message))
            text = lines[line].rstrip("\r\n")
            # report columns count UTF-8 bytes; the client counts its own units (UTF-16 mostly)
            start = _chars(text, d.col) if d.col is not None else len(text) - len(text.lstrip())
            end = _chars(text, d.end_col) if d.end_col is not None else len(text)
            end = end if end > start else len(text)
            rng = T.Range(T.Position(line, codec.client_num_units(text[:start])),
                          T.Position(line, codec.client_num_units(text[:end])))
            out.append(T.Diagnostic(range=rng, message=d.message,
                                    severity=_SEVERITY.get(d.severity, T.DiagnosticSeverity.Information),
                                    source="fusionlens", code=d.code,
                                    related_information=[T.DiagnosticRelatedInformation(
                                        T.Location(u, T.Range(T.Position(ln, 0), T.Position(ln + 1, 0))), m)
                                        for u, ln, m in d.related_uris()] or None))
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


def _chars(text: str, utf8_col: int) -> int:
    """The character index of a UTF-8 byte offset into `text`."""
    return len(text.encode("utf-8")[:utf8_col].decode("utf-8", errors="ignore"))


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

