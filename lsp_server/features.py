"""The LSP features: lifecycle and configuration, document sync, hover, inlay hints, code
lenses and code actions. `register_features(server)` attaches them to a FusionLensServer."""

from __future__ import annotations

import asyncio
from typing import Any

from lsprotocol import types as T
from pygls.uris import from_fs_path

from lsp_server.commands import CMD_COMPILE, CMD_EXPORT_REPRO, CMD_SHOW_KERNEL, CMD_SHOW_TRACE
from lsp_server import backward_views
from lsp_server.documents import View
from lsp_server.server import FusionLensServer
from lsp_server.views import (boundary_label, hint_label, hover_markdown, lens_title, preview_region,
                              region_tooltip, shorten, target_hover)


# --- lifecycle ----------------------------------------------------------------------------

def on_initialize(ls: FusionLensServer, params: T.InitializeParams):
    _changed, warnings = ls.settings.update(params.initialization_options)
    _warn(ls, warnings)


def _warn(ls: FusionLensServer, warnings: list) -> None:
    """Settings refused: say so where the user looks (LSP allows this before `initialized`)."""
    for w in warnings:
        ls.tell(T.MessageType.Warning, w)
        ls.window_log_message(T.LogMessageParams(type=T.MessageType.Warning, message=w))


async def on_initialized(ls: FusionLensServer, params: T.InitializedParams):
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
    for state in ls.docs.values():
        state.view = None
    if "allowExecution" in changed and not ls.settings.allowExecution:
        for uri in list(ls.docs):
            ls.cancel(uri, "execution was disabled")
    ls.refresh()  # lenses, hints and diagnostics under the new settings (stale once execution is off)


async def on_config(ls: FusionLensServer, params: T.DidChangeConfigurationParams):
    settings = params.settings
    if isinstance(settings, dict) and settings:
        apply_settings(ls, settings)
    else:
        await pull_configuration(ls)


async def on_shutdown(ls: FusionLensServer, params: Any):
    for uri in list(ls.docs):
        ls.cancel(uri, "server shutting down")
    await ls.worker.kill()


# --- documents ----------------------------------------------------------------------------

def did_open(ls: FusionLensServer, params: T.DidOpenTextDocumentParams):
    state = ls.doc(params.text_document.uri)
    ls.publish(state)
    if ls.settings.compileTrigger == "onOpen" and state.targets and state.syntax_error is None:
        if ls.settings.allowExecution:
            ls.schedule(state.uri, "opened")


def did_change(ls: FusionLensServer, params: T.DidChangeTextDocumentParams):
    uri = params.text_document.uri
    ls.cancel(uri, "the document changed", older_than=params.text_document.version)
    state = ls.doc(uri)
    ls.publish(state)


def did_save(ls: FusionLensServer, params: T.DidSaveTextDocumentParams):
    state = ls.doc(params.text_document.uri)
    ls.publish(state)
    if ls.settings.compileTrigger in ("onOpen", "onSave") and ls.settings.allowExecution \
            and state.targets and state.syntax_error is None:
        ls.schedule(state.uri, "saved")


def did_close(ls: FusionLensServer, params: T.DidCloseTextDocumentParams):
    uri = params.text_document.uri
    ls.cancel(uri, "the document was closed")
    ls.docs.pop(uri, None)
    ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


# --- features -----------------------------------------------------------------------------

def _line_range(text_doc, line: int) -> T.Range:
    lines = text_doc.lines
    text = lines[line].rstrip("\r\n") if line < len(lines) else ""
    return T.Range(T.Position(line, 0), T.Position(line, text_doc.position_codec.client_num_units(text)))


def hover(ls: FusionLensServer, params: T.HoverParams):
    state = ls.doc(params.text_document.uri)
    text_doc = ls.workspace.get_text_document(state.uri)
    line = params.position.line
    view = ls.view(state)
    notes = view.lines.get(line, [])
    bounds = view.boundaries.get(line, [])
    if notes or bounds:
        value = hover_markdown(notes, bounds, lambda res, rid: view.region_lines.get((res.seq, rid), []), line)
        value = "\n\n".join([value, *backward_views.hover_section(view.backward.get(line))])
    else:
        target = next((t for t in state.targets if t.decorator_line - 1 <= line <= t.line - 1), None)
        if target is None:
            return None
        status, message = ls.target_state(state, target.name)
        value = target_hover(target.name, status, message, ls.latest.get((state.path, target.name)))
    formats = ls.caps("text_document", "hover", "content_format")
    kind = T.MarkupKind.PlainText if formats and T.MarkupKind.Markdown not in formats else T.MarkupKind.Markdown
    return T.Hover(contents=T.MarkupContent(kind=kind, value=value), range=_line_range(text_doc, line))


def inlay_hints(ls: FusionLensServer, params: T.InlayHintParams):
    if not ls.settings.inlayHints:
        return []
    state = ls.doc(params.text_document.uri)
    text_doc = ls.workspace.get_text_document(state.uri)
    view = ls.view(state)
    if view.hints is None:
        view.hints = build_hints(view, text_doc, stale=not ls.settings.allowExecution)
    first, last = params.range.start.line, params.range.end.line
    return [hint for line, hint in view.hints if first <= line <= last]


def build_hints(view: View, text_doc, stale: bool = False) -> list:
    """Inlay hints of a document's View; `stale`: execution was turned off after they were made."""
    lines = text_doc.lines
    out = []
    for line in view.hint_lines:
        if line >= len(lines):
            continue
        text = lines[line].rstrip("\r\n")
        pos = T.Position(line, text_doc.position_codec.client_num_units(text))
        notes = view.lines.get(line)
        if notes:
            shown = [n for n in notes if n.result is notes[0].result]
            tip = "\n\n---\n\n".join(
                region_tooltip(n, view.region_lines.get((n.result.seq, n.region.id), [])) for n in notes)
            label = hint_label(shown, "stale · " if stale else "")
            out.append((line, T.InlayHint(position=pos, label=label, padding_left=True,
                                          tooltip=T.MarkupContent(kind=T.MarkupKind.Markdown, value=tip))))
        back = view.backward.get(line)
        if back is not None and (back.regions or back.saved):  # beside the forward hint
            tip = "\n\n".join(backward_views.hover_section(back))
            out.append((line, T.InlayHint(position=pos, label=shorten(backward_views.hint_label(back)),
                                          padding_left=True,
                                          tooltip=T.MarkupContent(kind=T.MarkupKind.Markdown, value=tip))))
        bounds = view.boundaries.get(line)
        if bounds:
            tip = "\n\n".join(f"region `{r.id}` ends here: **{b.reason}**" + (f" — {b.detail}" if b.detail else "")
                              for r, b in bounds)
            out.append((line, T.InlayHint(position=pos, label=boundary_label(bounds), padding_left=True,
                                          tooltip=T.MarkupContent(kind=T.MarkupKind.Markdown, value=tip))))
    return out


def code_lens(ls: FusionLensServer, params: T.CodeLensParams):
    state = ls.doc(params.text_document.uri)
    out = []
    for t in state.targets:
        status, message = ls.target_state(state, t.name)
        if state.syntax_error is not None and status != "compiling":
            status, message = "syntax error", f"syntax error on line {state.syntax_error[0] + 1}"
        title = lens_title(status, ls.latest.get((state.path, t.name)), message)
        line = t.decorator_line - 1
        out.append(T.CodeLens(range=T.Range(T.Position(line, 0), T.Position(line, 0)),
                              command=T.Command(title=title, command=CMD_COMPILE, arguments=[state.uri, t.name])))
    return out


def code_actions(ls: FusionLensServer, params: T.CodeActionParams):
    state = ls.doc(params.text_document.uri)
    uri = state.uri
    first, last = params.range.start.line, params.range.end.line
    view = ls.view(state)
    targets: list = []  # names, in order
    regions: list = []  # (target, region id)
    repros: list = []  # (target, region id or "executor:P<n>", path, label)
    for t in state.targets:
        if t.decorator_line - 1 <= last and first <= t.end_line - 1:
            targets.append(t.name)
    for line in range(first, last + 1):
        for n in view.lines.get(line, []):
            if n.result.path == state.path and n.result.target not in targets:
                targets.append(n.result.target)
            if (n.result.target, n.region.id) not in regions:
                regions.append((n.result.target, n.region.id, n.result.path))
            repro = _repro_of(n)
            if repro is not None and repro not in repros:
                repros.append(repro)
        repro = backward_views.repro_of(view.backward.get(line))  # a training target's backward kernel
        if repro is not None and repro not in repros:
            repros.append(repro)
    many = len(targets) > 1
    can_run = ls.settings.allowExecution and state.syntax_error is None  # offer only what can run
    out = []
    for name in targets:
        suffix = f" ({name})" if many else ""
        if can_run and name in {t.name for t in state.targets}:
            out.append(T.CodeAction(title="Compile and benchmark" + suffix, kind=T.CodeActionKind.Empty,
                                    command=T.Command(title="Compile and benchmark", command=CMD_COMPILE,
                                                      arguments=[uri, name])))
        if (state.path, name) in ls.latest and ls.latest[(state.path, name)].report is not None:
            out.append(T.CodeAction(title="Show generated trace" + suffix, kind=T.CodeActionKind.Empty,
                                    command=T.Command(title="Show generated trace", command=CMD_SHOW_TRACE, arguments=[uri, name])))
    many_regions = len(regions) > 1
    for target, rid, path in regions:
        target_uri = uri if path == state.path else from_fs_path(path)
        out.append(T.CodeAction(title="Show kernel code for this region" + (f" ({rid})" if many_regions else ""),
                                kind=T.CodeActionKind.Empty,
                                command=T.Command(title="Show kernel code for this region", command=CMD_SHOW_KERNEL,
                                                  arguments=[target_uri, target, rid])))
    if ls.settings.allowExecution:  # the worker runs the target again to write it
        for target, spec, path, label in repros:
            target_uri = uri if path == state.path else from_fs_path(path)
            out.append(T.CodeAction(title=f"Export repro script ({label})", kind=T.CodeActionKind.Empty,
                                    command=T.Command(title="Export repro script", command=CMD_EXPORT_REPRO,
                                                      arguments=[target_uri, target, spec])))
    return out


def _repro_of(note):
    """(target, region spec, path, label) of the kernel a line's note can be exported as: its
    fusion region, else the preview its ops would join (on a CPU: Triton's); None for neither."""
    res = note.result
    if note.region.executor in ("triton", "nvfuser"):
        return res.target, note.region.id, res.path, note.region.id
    found = preview_region(res.report, note.ops)
    if found is None:
        return None
    executor, region = found
    return res.target, f"{executor}:{region['id']}", res.path, f"{executor} preview {region['id']}"


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
    server.feature(T.TEXT_DOCUMENT_CODE_ACTION,
                   T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.Empty], resolve_provider=False))(code_actions)
