"""The LSP features: lifecycle and configuration, document sync, hover, inlay hints, code
lenses and code actions. `register_features(server)` attaches them to a FusionLensServer."""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import logging
import os
from typing import Any, NamedTuple

from lsprotocol import types as T
from pygls.uris import from_fs_path

from fusionlens.report import plan_text
from fusionlens.report.schema import DiagnosticCode, RegionRef, SavedTensor
from lsp_server.annotations import LineNote
from lsp_server.commands import CMD_COMPILE, CMD_EXPORT_REPRO, CMD_SHOW_KERNEL, CMD_SHOW_TRACE
from lsp_server.documents import DocState, View
from lsp_server.server import SETTINGS_PENDING, FusionLensServer
from lsp_server.views import (SAVED_FOR, boundary_label, boundary_tooltip, collective_label, collective_section,
                              guard_section, hint_label, hint_tooltip, hover_markdown,
                              lens_title, plain_text, program_groups, shorten, target_hover)

FUSION_EXECUTORS = ("triton", "nvfuser")  # the executors whose regions have a kernel to export


# --- lifecycle and configuration ---------------------------------------------------------

# No answer to workspace/configuration after this long: say so (once), and commands waiting
# for the settings are refused; an answer that comes later still counts.
CONFIG_NOTICE_S = 10.0


def on_initialize(ls: FusionLensServer, params: T.InitializeParams) -> None:
    ls.documents.adopt_workspace()  # LSP's line ends in pygls' documents (issue 22, item 5)
    _changed, warnings = ls.settings.update(params.initialization_options)
    _warn(ls, warnings)
    if not ls.caps("workspace", "configuration"):
        ls.settings_known.set()  # initializationOptions are all the client will send
    else:  # counted from here: a client that never sends `initialized` is late too
        asyncio.get_running_loop().call_later(CONFIG_NOTICE_S, _settings_overdue, ls)


def _warn(ls: FusionLensServer, warnings: list[str]) -> None:
    """Settings refused: say so where the user looks (LSP allows this before `initialized`)."""
    for w in warnings:
        ls.tell(T.MessageType.Warning, w)
        ls.log(T.MessageType.Warning, w)


async def on_initialized(ls: FusionLensServer, params: T.InitializedParams) -> None:
    await pull_configuration(ls)


def _settings_overdue(ls: FusionLensServer) -> None:
    if ls.settings_known.is_set():
        return
    ls.settings_overdue.set()
    msg = (f"no answer to workspace/configuration after {CONFIG_NOTICE_S:g} s: nothing runs until the "
           "client sends its settings")
    ls.log(T.MessageType.Warning, msg)
    ls.notify_status("idle", f"waiting for the client's settings: {msg}", None)


async def pull_configuration(ls: FusionLensServer) -> None:
    """Ask the client for the `fusionlens` section and apply the answer whenever it comes (no
    timeout: a late answer counts); the settings are known then."""
    if not ls.caps("workspace", "configuration"):
        return
    try:
        items = await ls.workspace_configuration_async(
            T.ConfigurationParams(items=[T.ConfigurationItem(section="fusionlens")]))
    except Exception as e:  # noqa: BLE001 - an error answer: the client has no settings to give
        ls.log(T.MessageType.Warning, f"workspace/configuration failed ({e}); using initializationOptions only")
        items = None
    if isinstance(items, (list, tuple)) and items:  # pygls gives the answer's array as a tuple
        apply_settings(ls, items[0])
    _settings_arrived(ls)


def _settings_arrived(ls: FusionLensServer) -> None:
    """The settings are known: run the compiles that opens and saves asked for meanwhile."""
    if ls.settings_known.is_set():
        return
    ls.settings_known.set()
    if ls.settings_overdue.is_set():
        ls.log(T.MessageType.Info, "the client's settings arrived")
        ls.notify_status("idle", "the client's settings arrived", None)
    pending, ls.pending_triggers = ls.pending_triggers, {}
    for uri, reason in pending.items():
        if uri in ls.documents.uris():
            state = ls.documents.doc(uri)
            for name in [n for n, note in state.notes.items() if note == SETTINGS_PENDING]:
                del state.notes[name]
            _auto_compile(ls, state, reason)
    ls.refresh()


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


def on_exit(ls: FusionLensServer, params: Any) -> None:
    """`exit`: end now and quietly, the worker killed: status 0 after `shutdown`, else 1
    (LSP). Not through pygls' sys.exit, which its loop swallows (status 0), and whose
    teardown of running compiles wrote tracebacks to a closed client."""
    code = 0 if getattr(ls.protocol, "_shutdown", False) else 1
    ls.run_cleanups()  # the worker's processes, a socket
    logging.shutdown()
    os._exit(code)


def on_progress_cancel(ls: FusionLensServer, params: T.WorkDoneProgressCancelParams) -> None:
    """The client cancels a compile's progress: its jobs are cancelled (the worker killed)."""
    ls.jobs.cancel_progress(params.token, "asked by the client (window/workDoneProgress/cancel)")


# --- documents ----------------------------------------------------------------------------

def did_open(ls: FusionLensServer, params: T.DidOpenTextDocumentParams) -> None:
    state = ls.documents.doc(params.text_document.uri)
    ls.documents.publish(state)
    _auto_compile(ls, state, "opened")


def _auto_compile(ls: FusionLensServer, state: DocState, reason: str) -> None:
    """The compile an open or a save starts (fusionlens.compileTrigger); before the client's
    settings are known it waits for them (they may say allowExecution false)."""
    if not state.targets or state.syntax_error is not None:
        return
    if not ls.settings_known.is_set():
        if ls.pending_triggers.get(state.uri) != "saved":  # a save asks for more than an open
            ls.pending_triggers[state.uri] = reason
        for t in state.targets:
            state.notes.setdefault(t.name, SETTINGS_PENDING)
        return
    triggers = ("onOpen",) if reason == "opened" else ("onOpen", "onSave")
    if ls.settings.compileTrigger in triggers and ls.settings.allowExecution:
        ls.jobs.schedule(state.uri, reason)


def did_change(ls: FusionLensServer, params: T.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.jobs.cancel(uri, "the document changed", older_than=params.text_document.version)
    ls.documents.publish(ls.documents.doc(uri))


def did_save(ls: FusionLensServer, params: T.DidSaveTextDocumentParams) -> None:
    state = ls.documents.doc(params.text_document.uri)
    ls.documents.publish(state)
    _auto_compile(ls, state, "saved")
    for uri in ls.jobs.dependents(state):  # their results imported this file: compile them again
        _auto_compile(ls, ls.documents.doc(uri), "saved")


def did_close(ls: FusionLensServer, params: T.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.pending_triggers.pop(uri, None)
    ls.jobs.cancel(uri, "the document was closed")
    ls.documents.close(uri)
    ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


# --- features -----------------------------------------------------------------------------

def _line_range(view: View, line: int) -> T.Range:
    return T.Range(T.Position(line, 0), T.Position(line, view.line_end(line)))


def hover(ls: FusionLensServer, params: T.HoverParams) -> T.Hover | None:
    state = ls.documents.lookup(params.text_document.uri)
    if state is None:
        return None  # no such file (any more), or a URI the client never opened: nothing to say
    line = params.position.line
    view = ls.documents.view(state)
    notes = view.lines.get(line, [])
    bounds = view.boundaries.get(line, [])
    saved = view.saved.get(line, [])
    found = view.collectives.get(line, [])
    planned = view.plans.get(line)
    # the values this line's branches read, checked at each call (issue 30's value guards)
    guards = [d.message for ln, d in view.diags if ln == line and d.code == DiagnosticCode.VALUE_GUARD]
    if notes or bounds or saved or found or planned or guards:
        value = hover_markdown(notes, bounds, view.region_lines_of, line, saved) if notes or bounds or saved or found \
            else ""
        if found:
            value = f"{collective_section(found)}\n\n{value}"
        if guards:
            value = f"{guard_section(guards)}\n\n{value}" if value else guard_section(guards)
        if planned:  # the line at scale (the target's plan=): after what runs here
            value = f"{value}\n\n{plan_text.hover(*planned)}" if value else plan_text.hover(*planned)
    else:
        target = next((t for t in state.targets if t.decorator_line - 1 <= line <= t.line - 1), None)
        if target is None:
            return None
        status, message = ls.jobs.target_state(state, target.name)
        value = target_hover(target.name, status, message, ls.results.shown(state.path, target.name))
    formats = ls.caps("text_document", "hover", "content_format")
    if formats and T.MarkupKind.Markdown not in formats:  # e.g. eglot without markdown-mode
        return T.Hover(contents=T.MarkupContent(kind=T.MarkupKind.PlainText, value=plain_text(value)),
                       range=_line_range(view, line))
    return T.Hover(contents=T.MarkupContent(kind=T.MarkupKind.Markdown, value=value), range=_line_range(view, line))


def inlay_hints(ls: FusionLensServer, params: T.InlayHintParams) -> list[T.InlayHint]:
    """The hints of the lines in the range asked for; each line's are made once per view (a
    view lasts until the text, its parse or the results shown change)."""
    if not ls.settings.inlayHints:
        return []
    state = ls.documents.lookup(params.text_document.uri)
    if state is None:
        return []
    view = ls.documents.view(state)
    first, last = params.range.start.line, params.range.end.line
    stale = not ls.settings.allowExecution
    # a client that resolves tooltips gets them when it shows one: a whole file's tooltips are
    # most of a hint answer's bytes (megabytes for thousands of lines) and of its time
    lazy = "tooltip" in (ls.caps("text_document", "inlay_hint", "resolve_support", "properties") or [])
    cache = view.lazy_hints if lazy else view.hints
    out: list[T.InlayHint] = []
    for line in view.hint_lines[bisect.bisect_left(view.hint_lines, first):bisect.bisect_right(view.hint_lines, last)]:
        hints = cache.get(line)
        if hints is None:
            hints = cache[line] = line_hints(view, line, stale, state.uri if lazy else None)
        out += hints
    return out


def resolve_inlay_hint(ls: FusionLensServer, hint: T.InlayHint) -> T.InlayHint:
    """A lazily sent hint's tooltip (inlayHint/resolve), while its document shows the view it
    was made from; else the hint as it is (the client asks for hints again after a change)."""
    data = hint.data if isinstance(hint.data, dict) else {}
    state = ls.documents.lookup(str(data.get("uri", "")))
    if state is None or not isinstance(data.get("line"), int) or not isinstance(data.get("i"), int):
        return hint
    view = ls.documents.view(state)
    if data.get("view") != id(view):
        return hint
    full = line_hints(view, data["line"], not ls.settings.allowExecution)
    if data["i"] < len(full):
        hint.tooltip = full[data["i"]].tooltip
    return hint


_NO_SAVED: list[SavedTensor] = []  # one list, so a label's memo key (its id) is the same each time


def line_hints(view: View, line: int, stale: bool = False, lazy_uri: str | None = None) -> list[T.InlayHint]:
    """The inlay hints of a line of a document's View, at its end: one per program of the
    line's first result (the activations a line saves go with the backward's), then where a
    region ends. `stale`: execution was turned off after they were made. `lazy_uri`: no
    tooltips, but what resolve_inlay_hint needs to make one (the document, the view, the hint)."""
    if line >= len(view.text):
        return []
    pos = T.Position(line, view.line_end(line))
    notes = view.lines.get(line, [])
    saved = view.saved.get(line, _NO_SAVED)
    groups = program_groups([n for n in notes if n.result is notes[0].result])
    if saved and not any(g[0].program.kind == SAVED_FOR for g in groups):
        groups.append([])  # a line that only saves activations
    out = []
    for group in groups:
        kind = group[0].program.kind if group else SAVED_FOR
        mine = saved if kind == SAVED_FOR else _NO_SAVED
        prefix = "stale · " if stale else ""
        label = group[0].labels.get((prefix, id(mine))) if group else None
        if label is None:
            label = hint_label(group, prefix, mine, kind)
            if group:
                group[0].labels[(prefix, id(mine))] = label
        tip = None if lazy_uri else hint_tooltip([n for n in notes if n.program.kind == kind], view.region_lines_of,
                                                 mine)
        out.append(_hint(pos, label, tip))
    bounds = view.boundaries.get(line)
    if bounds:
        out.append(_hint(pos, boundary_label(bounds), None if lazy_uri else boundary_tooltip(bounds)))
    found = view.collectives.get(line)
    if found:
        out.append(_hint(pos, collective_label(found), None if lazy_uri else collective_section(found)))
    planned = view.plans.get(line)
    if planned:
        out.append(_hint(pos, plan_text.hint(*planned), None if lazy_uri else plan_text.hover(*planned)))
    if lazy_uri:
        for i, h in enumerate(out):
            h.data = {"uri": lazy_uri, "line": line, "i": i, "view": id(view)}
    return out


def _hint(pos: T.Position, label: str, tooltip: str | None) -> T.InlayHint:
    return T.InlayHint(position=pos, label=label, padding_left=True,
                       tooltip=T.MarkupContent(kind=T.MarkupKind.Markdown, value=tooltip) if tooltip else None)


def code_lens(ls: FusionLensServer, params: T.CodeLensParams) -> list[T.CodeLens]:
    state = ls.documents.lookup(params.text_document.uri)
    if state is None:
        return []
    if not state.targets and state.syntax_error is not None and ("fusionlens.example" in state.text
                                                                   or "compiler.example" in state.text):
        # opened with a syntax error: its targets are not known yet, but it means to have some
        line, _, message = state.syntax_error
        title = "Not compiled: " + shorten(f"{message} (line {line + 1})", 60)
        return [T.CodeLens(range=T.Range(T.Position(line, 0), T.Position(line, 0)),
                           command=T.Command(title=title, command=CMD_COMPILE, arguments=[state.uri]))]
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
    state = ls.documents.lookup(params.text_document.uri)
    if state is None:
        return []
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
    server.feature(T.EXIT)(on_exit)
    server.feature(T.WINDOW_WORK_DONE_PROGRESS_CANCEL)(on_progress_cancel)
    server.feature(T.TEXT_DOCUMENT_DID_OPEN)(did_open)
    server.feature(T.TEXT_DOCUMENT_DID_CHANGE)(did_change)
    server.feature(T.TEXT_DOCUMENT_DID_SAVE)(did_save)
    server.feature(T.TEXT_DOCUMENT_DID_CLOSE)(did_close)
    server.feature(T.TEXT_DOCUMENT_HOVER)(hover)
    server.feature(T.TEXT_DOCUMENT_INLAY_HINT, T.InlayHintOptions(resolve_provider=True))(inlay_hints)
    server.feature(T.INLAY_HINT_RESOLVE)(resolve_inlay_hint)
    server.feature(T.TEXT_DOCUMENT_CODE_LENS, T.CodeLensOptions(resolve_provider=False))(code_lens)
    actions = T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.Empty], resolve_provider=False)
    server.feature(T.TEXT_DOCUMENT_CODE_ACTION, actions)(code_actions)
