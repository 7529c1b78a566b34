"""The LSP features: lifecycle and configuration, document sync, hover, inlay hints, code
lenses and code actions. `register_features(server)` attaches them to a FusionLensServer."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, NamedTuple

from lsprotocol import types as T
from pygls.uris import from_fs_path
from pygls.workspace import TextDocument

from compiler.report import RegionRef
from lsp_server.annotations import LineNote
from lsp_server.commands import CMD_COMPILE, CMD_EXPORT_REPRO, CMD_SHOW_KERNEL, CMD_SHOW_TRACE
from lsp_server.documents import View
from lsp_server.server import FusionLensServer
from lsp_server.views import (SAVED_FOR, boundary_label, boundary_tooltip, hint_label, hint_tooltip, hover_markdown,
                              lens_title, program_groups, target_hover)

FUSION_EXECUTORS = ("triton", "nvfuser")  # the executors whose regions have a kernel to export


# --- lifecycle ----------------------------------------------------------------------------

def on_initialize(ls: FusionLensServer, params: T.InitializeParams) -> None:
    _changed, warnings = ls.settings.update(params.initialization_options)
    _warn(ls, warnings)


def _warn(ls: FusionLensServer, warnings: list[str]) -> None:
    """Settings refused: say so where the user looks (LSP allows this before `initialized`)."""
    for w in warnings:
        ls.tell(T.MessageType.Warning, w)
        ls.log(T.MessageType.Warning, w)


async def on_initialized(ls: FusionLensServer, params: T.InitializedParams) -> None:
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
    changed, warnings = ls.settings.update(data)
    _warn(ls, warnings)
    if not changed:
        return
    ls.documents.forget_views()
    if "allowExecution" in changed and not ls.settings.allowExecution:
        for uri in ls.documents.uris():
            ls.jobs.cancel(uri, "execution was disabled")
    ls.refresh()  # lenses, hints and diagnostics under the new settings (stale once execution is off)


async def on_config(ls: FusionLensServer, params: T.DidChangeConfigurationParams) -> None:
    settings = params.settings
    if isinstance(settings, dict) and settings:
        apply_settings(ls, settings)
    else:
        await pull_configuration(ls)


async def on_shutdown(ls: FusionLensServer, params: Any) -> None:
    for uri in ls.documents.uris():
        ls.jobs.cancel(uri, "server shutting down")
    await ls.worker.kill()


# --- documents ----------------------------------------------------------------------------

def did_open(ls: FusionLensServer, params: T.DidOpenTextDocumentParams) -> None:
    state = ls.documents.doc(params.text_document.uri)
    ls.documents.publish(state)
    if ls.settings.compileTrigger == "onOpen" and state.targets and state.syntax_error is None:
        if ls.settings.allowExecution:
            ls.jobs.schedule(state.uri, "opened")


def did_change(ls: FusionLensServer, params: T.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.jobs.cancel(uri, "the document changed", older_than=params.text_document.version)
    ls.documents.publish(ls.documents.doc(uri))


def did_save(ls: FusionLensServer, params: T.DidSaveTextDocumentParams) -> None:
    state = ls.documents.doc(params.text_document.uri)
    ls.documents.publish(state)
    if ls.settings.compileTrigger in ("onOpen", "onSave") and ls.settings.allowExecution \
            and state.targets and state.syntax_error is None:
        ls.jobs.schedule(state.uri, "saved")


def did_close(ls: FusionLensServer, params: T.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.jobs.cancel(uri, "the document was closed")
    ls.documents.close(uri)
    ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


# --- features -----------------------------------------------------------------------------

def _line_range(text_doc: TextDocument, line: int) -> T.Range:
    lines = text_doc.lines
    text = lines[line].rstrip("\r\n") if line < len(lines) else ""
    return T.Range(T.Position(line, 0), T.Position(line, text_doc.position_codec.client_num_units(text)))


def hover(ls: FusionLensServer, params: T.HoverParams) -> T.Hover | None:
    state = ls.documents.doc(params.text_document.uri)
    text_doc = ls.documents.text_document(state.uri)
    line = params.position.line
    view = ls.documents.view(state)
    notes = view.lines.get(line, [])
    bounds = view.boundaries.get(line, [])
    saved = view.saved.get(line, [])
    if notes or bounds or saved:
        value = hover_markdown(notes, bounds, view.region_lines_of, line, saved)
    else:
        target = next((t for t in state.targets if t.decorator_line - 1 <= line <= t.line - 1), None)
        if target is None:
            return None
        status, message = ls.jobs.target_state(state, target.name)
        value = target_hover(target.name, status, message, ls.results.shown(state.path, target.name))
    formats = ls.caps("text_document", "hover", "content_format")
    kind = T.MarkupKind.PlainText if formats and T.MarkupKind.Markdown not in formats else T.MarkupKind.Markdown
    return T.Hover(contents=T.MarkupContent(kind=kind, value=value), range=_line_range(text_doc, line))


def inlay_hints(ls: FusionLensServer, params: T.InlayHintParams) -> list[T.InlayHint]:
    if not ls.settings.inlayHints:
        return []
    state = ls.documents.doc(params.text_document.uri)
    text_doc = ls.documents.text_document(state.uri)
    view = ls.documents.view(state)
    if view.hints is None:
        view.hints = build_hints(view, text_doc, stale=not ls.settings.allowExecution)
    first, last = params.range.start.line, params.range.end.line
    return [hint for line, hint in view.hints if first <= line <= last]


def build_hints(view: View, text_doc: TextDocument, stale: bool = False) -> list[tuple[int, T.InlayHint]]:
    """Inlay hints of a document's View, at the end of each line: one per program of the
    line's first result (the activations a line saves go with the backward's), then where a
    region ends. `stale`: execution was turned off after they were made."""
    lines = text_doc.lines
    out = []
    for line in view.hint_lines:
        if line >= len(lines):
            continue
        text = lines[line].rstrip("\r\n")
        pos = T.Position(line, text_doc.position_codec.client_num_units(text))
        notes = view.lines.get(line, [])
        saved = view.saved.get(line, [])
        groups = program_groups([n for n in notes if n.result is notes[0].result])
        if saved and not any(g[0].program.kind == SAVED_FOR for g in groups):
            groups.append([])  # a line that only saves activations
        for group in groups:
            kind = group[0].program.kind if group else SAVED_FOR
            mine = saved if kind == SAVED_FOR else []
            label = hint_label(group, "stale · " if stale else "", mine, kind)
            tip = hint_tooltip([n for n in notes if n.program.kind == kind], view.region_lines_of, mine)
            out.append((line, _hint(pos, label, tip)))
        bounds = view.boundaries.get(line)
        if bounds:
            out.append((line, _hint(pos, boundary_label(bounds), boundary_tooltip(bounds))))
    return out


def _hint(pos: T.Position, label: str, tooltip: str) -> T.InlayHint:
    return T.InlayHint(position=pos, label=label, padding_left=True,
                       tooltip=T.MarkupContent(kind=T.MarkupKind.Markdown, value=tooltip))


def code_lens(ls: FusionLensServer, params: T.CodeLensParams) -> list[T.CodeLens]:
    state = ls.documents.doc(params.text_document.uri)
    out = []
    for t in state.targets:
        status, message = ls.jobs.target_state(state, t.name)
        if state.syntax_error is not None and status != "compiling":
            status, message = "syntax error", f"syntax error on line {state.syntax_error[0] + 1}"
        title = lens_title(status, ls.results.shown(state.path, t.name), message, t.name in state.cancelled)
        line = t.decorator_line - 1
        out.append(T.CodeLens(range=T.Range(T.Position(line, 0), T.Position(line, 0)),
                              command=T.Command(title=title, command=CMD_COMPILE, arguments=[state.uri, t.name])))
    return out


class Repro(NamedTuple):
    """What "Export repro script" of a line's note asks the worker for."""

    target: str
    spec: str  # the region as fusionlens.exportRepro takes it: "R3", "B1", "triton:P0"
    path: str  # the file of the target
    label: str


def repro_of(note: LineNote) -> Repro | None:
    """The kernel a line's note can be exported as: its region where a fusion executor made it,
    else the preview region its line would join (on a CPU: Triton's); None for neither."""
    res = note.result
    if note.region.executor in FUSION_EXECUTORS:
        return Repro(res.target, note.region.id, res.path, note.region.id)
    if note.preview is None:
        return None
    preview, region = note.preview
    ref = RegionRef.parse(region.id, default_preview=preview.executor)
    if ref is None:
        return None
    return Repro(res.target, ref.spelt(default_preview=""), res.path, f"{preview.executor} preview {region.id}")


@dataclasses.dataclass
class _Offers:
    """What the code actions of a range are about, in order, without repeats."""

    targets: list[str] = dataclasses.field(default_factory=list)
    regions: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)  # (target, region id, path)
    repros: list[Repro] = dataclasses.field(default_factory=list)

    def add(self, items: list[Any], item: Any) -> None:
        if item is not None and item not in items:
            items.append(item)


def code_actions(ls: FusionLensServer, params: T.CodeActionParams) -> list[T.CodeAction]:
    state = ls.documents.doc(params.text_document.uri)
    first, last = params.range.start.line, params.range.end.line
    view = ls.documents.view(state)
    offers = _Offers()
    for t in state.targets:
        if t.decorator_line - 1 <= last and first <= t.end_line - 1:
            offers.add(offers.targets, t.name)
    for line in range(first, last + 1):
        for n in view.lines.get(line, []):
            if n.result.path == state.path:
                offers.add(offers.targets, n.result.target)
            offers.add(offers.regions, (n.result.target, n.region.id, n.result.path))
            offers.add(offers.repros, repro_of(n))
    can_run = ls.settings.allowExecution and state.syntax_error is None  # offer only what can run
    names = {t.name for t in state.targets}
    out = []
    for name in offers.targets:
        suffix = f" ({name})" if len(offers.targets) > 1 else ""
        if can_run and name in names:
            out.append(_action("Compile and benchmark" + suffix, CMD_COMPILE, [state.uri, name]))
        shown = ls.results.shown(state.path, name)
        if shown is not None and shown.report is not None:
            out.append(_action("Show generated trace" + suffix, CMD_SHOW_TRACE, [state.uri, name]))
    for target, rid, path in offers.regions:
        which = f" ({rid})" if len(offers.regions) > 1 else ""
        out.append(_action("Show kernel code for this region" + which, CMD_SHOW_KERNEL,
                           [state.uri if path == state.path else from_fs_path(path), target, rid]))
    if ls.settings.allowExecution:  # the worker runs the target again to write it
        for r in offers.repros:
            out.append(_action(f"Export repro script ({r.label})", CMD_EXPORT_REPRO,
                               [state.uri if r.path == state.path else from_fs_path(r.path), r.target, r.spec]))
    return out


def _action(title: str, command: str, arguments: list[Any]) -> T.CodeAction:
    name = title.split(" (")[0]  # the command's own title: without what the action is about
    return T.CodeAction(title=title, kind=T.CodeActionKind.Empty,
                        command=T.Command(title=name, command=command, arguments=arguments))


def register_features(server: FusionLensServer) -> None:
    server.feature(T.INITIALIZE)(on_initialize)
    server.feature(T.INITIALIZED)(on_initialized)
    server.feature(T.WORKSPACE_DID_CHANGE_CONFIGURATION)(on_config)
    server.feature(T.SHUTDOWN)(on_shutdown)
    server.feature(T.TEXT_DOCUMENT_DID_OPEN)(did_open)
    server.feature(T.TEXT_DOCUMENT_DID_CHANGE)(did_change)
    server.feature(T.TEXT_DOCUMENT_DID_SAVE)(did_save)
    server.feature(T.TEXT_DOCUMENT_DID_CLOSE)(did_close)
    server.feature(T.TEXT_DOCUMENT_HOVER)(hover)
    server.feature(T.TEXT_DOCUMENT_INLAY_HINT, T.InlayHintOptions(resolve_provider=False))(inlay_hints)
    server.feature(T.TEXT_DOCUMENT_CODE_LENS, T.CodeLensOptions(resolve_provider=False))(code_lens)
    actions = T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.Empty], resolve_provider=False)
    server.feature(T.TEXT_DOCUMENT_CODE_ACTION, actions)(code_actions)
