"""The open documents: what each parses to (its targets, via `fusionlens.report.discovery.find_targets`,
pure ast), the View it shows (the results that annotate it, mapped onto its current text),
and publishing its diagnostics.

Lines are LSP's (`\n`, `\r\n`, `\r`: lsp_server.linemap), in pygls' documents too
(LspWorkspace), so incremental edits land where the client made them. An edit costs what
it touches: parsing waits until something asks for the targets or the typing pauses
(PARSE_DELAY_S), a view maps annotations with one pass over the lines, and inlay hints are
made for the lines asked for (features.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
from typing import Any
from collections.abc import Iterator, Sequence
from urllib.parse import unquote

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import PositionCodec, TextDocument, Workspace

from fusionlens.report.discovery import TargetInfo, find_targets
from fusionlens.report.plan import LineCost, PlanReport
from fusionlens.report.schema import Boundary, Collective, Region, SavedTensor
from lsp_server.annotations import DiagNote, FileAnnotations, LineNote, Result, norm_path
from lsp_server.linemap import LineMap, split_lines, split_lines_keepends
from lsp_server.reading import NotReadable, read_source
from lsp_server.results import Results
from lsp_server.settings import Settings

logger = logging.getLogger("fusionlens.lsp")

PARSE_DELAY_S = 0.2  # after an edit, diagnostics wait this long for the typing to pause

_SEVERITY = {"error": T.DiagnosticSeverity.Error, "warning": T.DiagnosticSeverity.Warning,
             "information": T.DiagnosticSeverity.Information, "info": T.DiagnosticSeverity.Information,
             "hint": T.DiagnosticSeverity.Hint}


def capability(server: LanguageServer, *path: str) -> Any:
    """A field of the client's capabilities (`"window", "show_document", "support"`), or None."""
    obj: Any = server.client_capabilities
    for p in path:
        obj = getattr(obj, p, None) if obj is not None else None
    return obj


class LspTextDocument(TextDocument):
    """pygls' TextDocument with LSP's lines. pygls splits with `str.splitlines`, which also
    ends a line at a form feed, `\x1c` or U+2028, so an incremental edit below one would be
    applied lines above where the client made it (and positions converted on the wrong line)."""

    _lines_of: str | None = None
    _lines: tuple[str, ...] = ()

    @property
    def lines(self) -> Sequence[str]:
        source = self.source
        if source is not self._lines_of:  # split once per text: pygls asks per edit and position
            self._lines, self._lines_of = tuple(split_lines_keepends(source)), source
        return self._lines


class LspWorkspace(Workspace):
    """pygls' Workspace, whose documents are LspTextDocuments."""

    def _create_text_document(self, doc_uri: str, source: str | None = None, version: int | None = None,
                              language_id: str | None = None) -> TextDocument:
        return LspTextDocument(doc_uri, source=source, version=version, language_id=language_id,
                               sync_kind=self._sync_kind, position_codec=self.position_codec)


def client_units(codec: PositionCodec, text: str) -> int:
    """The length of `text` in the client's position units (pygls counts char by char)."""
    if text.isascii():
        return len(text)
    encoding = codec.encoding
    if encoding == T.PositionEncodingKind.Utf32:
        return len(text)
    if encoding == T.PositionEncodingKind.Utf8:
        return len(text.encode("utf-8", "surrogatepass"))
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


@dataclasses.dataclass
class View:
    """Everything a document shows, in the document's current line numbers."""

    lines: dict[int, list[LineNote]]
    boundaries: dict[int, list[tuple[Region, Boundary]]]
    region_lines: dict[tuple[int, str], list[int]]  # (result seq, region id) -> lines, as asked for
    saved: dict[int, list[SavedTensor]]  # activations a line's training forward saves for the backward
    diags: list[tuple[int, DiagNote]]
    hint_lines: list[int]  # sorted lines that carry hints
    text: list[str] = dataclasses.field(default_factory=list)  # the document's lines, without their ends
    codec: PositionCodec = dataclasses.field(default_factory=PositionCodec)  # the client's position units
    hints: dict[int, list[T.InlayHint]] = dataclasses.field(default_factory=dict)  # line -> its hints, made when asked
    lazy_hints: dict[int, list[T.InlayHint]] = dataclasses.field(default_factory=dict)  # the same, tooltips left out
    # result seq -> its annotations and the map of their lines onto these
    maps: dict[int, tuple[FileAnnotations, LineMap]] = dataclasses.field(default_factory=dict)
    collectives: dict[int, list[Collective]] = dataclasses.field(default_factory=dict)  # torch.distributed, a line's
    plans: dict[int, tuple[PlanReport, LineCost]] = dataclasses.field(default_factory=dict)  # a line at scale

    def region_lines_of(self, result: Result, region_id: str) -> list[int]:
        """A region's lines in this text (mapped when first asked: a file has thousands)."""
        key = (result.seq, region_id)
        lines = self.region_lines.get(key)
        if lines is None:
            ann, lm = self.maps.get(result.seq, (None, None))
            olds = ann.region_lines.get(region_id, []) if ann is not None else []
            lines = self.region_lines[key] = [n for n in map(lm, olds) if n is not None] if lm is not None else []
        return lines

    def line_end(self, line: int) -> int:
        """The end of a line in the client's units (0 past the end)."""
        return client_units(self.codec, self.text[line]) if 0 <= line < len(self.text) else 0


_NOT_PARSED = object()  # DocState's parse of no text yet


class DocState:
    """An open document: its text as last read and what it parses to. Parsing a big file is
    the dearest thing an edit asks for, so it happens when `targets`, `syntax_error` or
    `parsed_text` are read (they are always of the current text), not on each edit."""

    def __init__(self, uri: str, fs_path: str | None = None):
        self.uri = uri
        self.fs_path = fs_path or to_fs_path(uri) or uri  # an untitled buffer gets a path of its own
        self.path = norm_path(self.fs_path) or uri
        self.text = ""
        self._parsed: object = _NOT_PARSED  # the text _targets and _syntax_error are of
        self._targets: list[TargetInfo] = []
        self._syntax_error: tuple[int, int, str] | None = None  # (line0, col0, message)
        self.parses = 0  # how many times it was parsed (views depend on the parse)
        self.notes: dict[str, str] = {}  # target -> message (e.g. why it was not compiled)
        self.cancelled: set[str] = set()  # targets whose latest run was cancelled
        self.view: View | None = None
        self.view_key: tuple[int, int] | None = None

    def set_text(self, text: str) -> None:
        if text is not self.text and text != self.text:
            self.text = text
            self.view = None

    @property
    def parsed(self) -> bool:
        """Whether the parse is of the current text."""
        return self._parsed is self.text

    def _fresh(self) -> None:
        if self._parsed is not self.text:
            self.parse(self.text)

    @property
    def targets(self) -> list[TargetInfo]:
        self._fresh()
        return self._targets

    @property
    def syntax_error(self) -> tuple[int, int, str] | None:
        self._fresh()
        return self._syntax_error

    @property
    def parsed_text(self) -> str:
        self._fresh()
        return self.text

    def last_parse(self) -> tuple[list[TargetInfo], tuple[int, int, str] | None]:
        """(targets, syntax error) as last parsed, maybe of an earlier text (parsed if never)."""
        if self._parsed is _NOT_PARSED:
            self._fresh()
        return self._targets, self._syntax_error

    def parse(self, text: str) -> None:
        self.text = text
        try:
            self._targets = find_targets(text, self.fs_path)
            self._syntax_error = None
        except SyntaxError as e:
            self._syntax_error = (max((e.lineno or 1) - 1, 0), max((e.offset or 1) - 1, 0), f"SyntaxError: {e.msg}")
        except Exception as e:  # noqa: BLE001 (e.g. ValueError: null bytes)
            self._syntax_error = (0, 0, f"cannot parse: {e}")
        self._parsed = text
        self.parses += 1
        self.view = None


class Documents:
    """The documents the client has open, keyed by URI."""

    def __init__(self, server: LanguageServer, settings: Settings, results: Results):
        self._server = server
        self._settings = settings
        self._results = results
        self._docs: dict[str, DocState] = {}
        self._publish_later: dict[str, asyncio.TimerHandle] = {}  # uri -> publishing once parsed

    def adopt_workspace(self) -> None:
        """Give pygls' workspace LSP's lines (LspWorkspace): called in `initialize`, once pygls
        has made the workspace and before any document is opened."""
        workspace = self._server.workspace
        if type(workspace) is Workspace:
            workspace.__class__ = LspWorkspace  # the same object (pygls holds it), LSP's lines

    def __iter__(self) -> Iterator[DocState]:
        return iter(list(self._docs.values()))

    def uris(self) -> list[str]:
        return list(self._docs)

    def get(self, uri: str) -> DocState | None:
        """The document's state as last read, None when it is not open."""
        return self._docs.get(uri)

    def text_document(self, uri: str) -> TextDocument:
        return self._server.workspace.get_text_document(uri)

    def _read(self, uri: str) -> str | None:
        """The document's text: the client's when open, else a file's on disk; None for
        neither (a file that is gone, an untitled buffer the client never opened). Raises
        NotReadable for a file that is no regular file or too large (lsp_server.reading)."""
        doc = self._server.workspace.text_documents.get(unquote(uri))
        if doc is not None:
            return doc.source
        path = to_fs_path(uri)
        if not path:
            return None  # pygls would read the URI's path relative to the cwd
        try:
            return read_source(path)
        except (OSError, UnicodeDecodeError, ValueError):
            return None

    def _text(self, uri: str) -> str:
        """_read for a document the client opened (or just closed): "" where unreadable."""
        try:
            return self._read(uri) or ""
        except NotReadable:
            return ""

    def doc(self, uri: str) -> DocState:
        """The document's state with its current text (parsed when its targets are asked for;
        a new document at once)."""
        state = self._docs.get(uri)
        if state is None:
            state = self._docs[uri] = DocState(uri, None if to_fs_path(uri) else self.untitled_path(uri))
            state.parse(self._text(uri))
            return state
        state.set_text(self._text(uri))
        return state

    def lookup(self, uri: str | None) -> DocState | None:
        """`doc(uri)` where there is a text to show things on, else None (a hover on a missing
        file answers nothing). A document that is not open is read from disk into a state
        that is not kept: a request about it must not leave state behind (didClose removes
        an open one's). Raises NotReadable (answered as the request's error) for a file that
        is no regular file or too large."""
        if not isinstance(uri, str) or not uri:
            return None
        if uri in self._docs:
            return self.doc(uri)
        text = self._read(uri)
        if text is None:
            return None
        state = DocState(uri, None if to_fs_path(uri) else self.untitled_path(uri))
        state.parse(text)
        return state

    def __len__(self) -> int:
        return len(self._docs)

    def close(self, uri: str) -> None:
        self._docs.pop(uri, None)
        timer = self._publish_later.pop(uri, None)
        if timer is not None:
            timer.cancel()

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
        """The results that annotate the document, by its latest parse (a view after an edit
        does not wait for a parse: a target removed shows until the next one)."""
        targets, syntax_error = state.last_parse()
        names = {t.name for t in targets}
        out = []
        for (path, target), res in self._results.all_shown():
            if path == state.path and syntax_error is None and target not in names:
                continue  # the target was removed or renamed
            if state.path in res.files():
                out.append(res)
        out.sort(key=lambda r: (r.path != state.path, r.target_line if r.target_line is not None else 1 << 30,
                                r.seq))
        return out

    def view(self, state: DocState) -> View:
        """What the document shows, for its current text (made once per text, parse and
        results shown)."""
        key = (state.parses, self._results.generation)
        if state.view is not None and state.view_key == key:
            return state.view
        current = split_lines(state.text)
        view = View({}, {}, {}, {}, [], [], current, self._server.workspace.position_codec)
        maps: dict[int, LineMap] = {}
        for res in self.results_for(state):
            snap = res.snapshot_lines(state.path)
            if snap is None:
                continue
            lm = maps.get(id(snap))
            if lm is None:
                lm = maps[id(snap)] = LineMap(snap, current)
            _add(view, res, res.annotations(state.path), lm, state.path)
        view.hint_lines = sorted(set(view.lines) | set(view.boundaries) | set(view.saved) | set(view.collectives)
                                 | set(view.plans))
        state.view, state.view_key = view, key
        return view

    # --- publishing ---------------------------------------------------------------------------

    def publish(self, state: DocState) -> None:
        """Send the document's diagnostics. Right after an edit (the text not parsed yet) they
        are sent once the typing pauses: parsing a big file on every keystroke would hold up
        every request behind it."""
        if not state.parsed and self._defer(state.uri):
            return
        view = self.view(state)
        lines = view.text
        out = [] if state.syntax_error is None else [_syntax_diagnostic(view, state.syntax_error)]
        seen = set()
        for line, d in view.diags:
            if (line, d.message) in seen or line >= len(lines):
                continue
            seen.add((line, d.message))
            out.append(_diagnostic(view, line, d))
        opened = self._server.workspace.text_documents.get(unquote(state.uri))
        self._server.text_document_publish_diagnostics(T.PublishDiagnosticsParams(
            uri=state.uri, diagnostics=out, version=opened.version if opened is not None else None))

    def _defer(self, uri: str) -> bool:
        """Publish `uri` PARSE_DELAY_S after its last edit; False where there is no loop to wait on."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        timer = self._publish_later.pop(uri, None)
        if timer is not None:
            timer.cancel()
        self._publish_later[uri] = loop.call_later(PARSE_DELAY_S, self._publish_parsed, uri)
        return True

    def _publish_parsed(self, uri: str) -> None:
        """The typing paused: parse, publish, and where the targets changed ask for new lenses."""
        self._publish_later.pop(uri, None)
        state = self._docs.get(uri)
        if state is None:
            return
        try:
            self.doc(uri)
            before = _outline(*state.last_parse())
            after = _outline(state.targets, state.syntax_error)  # parses
            self.publish(state)
            if before != after:
                self._ask_refresh()
        except Exception:  # noqa: BLE001
            logger.exception("publishing diagnostics failed")

    def refresh(self, uri: str | None = None) -> None:
        """Push what changed: diagnostics now, and ask the client to re-pull lenses/hints."""
        for state in list(self._docs.values()):
            if uri is None or state.uri == uri or self._results.mention(state.path):
                try:
                    self.doc(state.uri)
                    self.publish(state)
                except Exception:  # noqa: BLE001
                    logger.exception("publishing diagnostics failed")
        self._ask_refresh()

    def _ask_refresh(self) -> None:
        if capability(self._server, "workspace", "code_lens", "refresh_support"):
            _quiet(self._server.workspace_code_lens_refresh(None))
        if capability(self._server, "workspace", "inlay_hint", "refresh_support"):
            _quiet(self._server.workspace_inlay_hint_refresh(None))


def _outline(targets: list[TargetInfo], error: tuple[int, int, str] | None) -> tuple[Any, ...]:
    """What a document's lenses depend on: its targets' names and lines, its syntax error."""
    return tuple((t.name, t.decorator_line) for t in targets), error


def _add(view: View, res: Result, ann: FileAnnotations, lm: LineMap, path: str) -> None:
    """A result's annotations of the document, on the lines they have now."""
    for old, notes in ann.lines.items():
        new = lm(old)
        if new is not None:
            view.lines.setdefault(new, []).extend(notes)
    for old, items in ann.boundaries.items():
        new = lm(old)
        if new is not None:
            view.boundaries.setdefault(new, []).extend(items)
    view.maps[res.seq] = (ann, lm)  # region_lines_of maps a region's lines when asked
    for old, saved in ann.saved.items():
        new = lm(old)
        if new is not None:
            view.saved.setdefault(new, saved)  # the first result's (its notes are the ones hinted)
    for old, found in ann.collectives.items():
        new = lm(old)
        if new is not None:
            view.collectives.setdefault(new, found)  # the first result's
    for old, planned in ann.plans.items():
        new = lm(old)
        if new is not None:
            view.plans.setdefault(new, planned)  # the first result's
    for d in ann.diags:
        new = lm(d.line)
        if new is not None:
            view.diags.append((new, _moved_related(d, lm, path)))


def _moved_related(d: DiagNote, lm: LineMap, path: str) -> DiagNote:
    """`d` with its relatedInformation lines in this document moved as the document's lines
    moved (one on a line edited since is left out); other files' lines as compiled."""
    if not d.related or lm.identity or not any(p == path for p, _, _ in d.related):
        return d
    related = []
    for p, line, message in d.related:
        new = lm(line) if p == path else line
        if new is not None:
            related.append((p, new, message))
    return dataclasses.replace(d, related=related)


def _syntax_diagnostic(view: View, error: tuple[int, int, str]) -> T.Diagnostic:
    lines = view.text
    line, col, msg = error  # col: characters (SyntaxError.offset)
    line = min(line, max(len(lines) - 1, 0))
    text = lines[line] if lines else ""
    start, end = client_units(view.codec, text[:col]), client_units(view.codec, text)
    return T.Diagnostic(range=T.Range(T.Position(line, min(start, end)), T.Position(line, max(end, start))),
                        message=msg, severity=T.DiagnosticSeverity.Error, source="fusionlens", code="syntax-error")


def _diagnostic(view: View, line: int, d: DiagNote) -> T.Diagnostic:
    text = view.text[line]
    # report columns count UTF-8 bytes; the client counts its own units (UTF-16 mostly)
    start = _chars(text, d.col) if d.col is not None else len(text) - len(text.lstrip())
    end = _chars(text, d.end_col) if d.end_col is not None else len(text)
    end = end if end > start else len(text)
    rng = T.Range(T.Position(line, client_units(view.codec, text[:start])),
                  T.Position(line, client_units(view.codec, text[:end])))
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
