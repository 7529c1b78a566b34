"""Workspace commands (`fusionlens.*`) and the custom `fusionlens/regions` request.
`register_commands(server)` attaches them to a FusionLensServer."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import os
import re
import sys
from collections.abc import Generator
from typing import Any

from lsprotocol import types as T
from pygls.exceptions import JsonRpcInvalidParams

from fusionlens.report.schema import PROGRAM_KINDS, Collective, CompileReport, Preview, ProgramReport, Region, RegionRef
from lsp_server import __version__
from lsp_server.annotations import Result, norm_path
from lsp_server.documents import DocState, View
from lsp_server.jobs import existing_cwd
from lsp_server.protocol import Failure, ReproAnswer, ReproRequest
from lsp_server.reading import read_text_or_none
from lsp_server.server import SETTINGS_PENDING, FusionLensServer
from lsp_server.views import headroom_ms, roofline_text
from lsp_server.worker_client import WorkerError

CMD_COMPILE = "fusionlens.compile"
CMD_SHOW_TRACE = "fusionlens.showTrace"
CMD_SHOW_KERNEL = "fusionlens.showKernel"
CMD_CLEAR_CACHE = "fusionlens.clearCache"
CMD_DEBUG_INFO = "fusionlens.debugInfo"
CMD_EXPORT_REPRO = "fusionlens.exportRepro"
CMD_CANCEL = "fusionlens.cancel"
CMD_REPORT_HTML = "fusionlens.reportHtml"
REGIONS_REQUEST = "fusionlens/regions"
Answer = dict[str, Any]  # a command's JSON answer


# The params of the workspace/executeCommand request being handled (pygls gives a command its
# arguments only): its workDoneToken is where a compile reports progress.
_COMMAND_PARAMS: contextvars.ContextVar[Any] = contextvars.ContextVar("fusionlens_command_params", default=None)


async def cmd_compile(ls: FusionLensServer, *args: Any) -> Answer:
    """[uri, target | null, {"wait": true}?]: queue the compile and answer at once (results
    come through progress, status, diagnostics and lenses); with wait, answer when done."""
    uri = _arg(args, 0)
    if not uri:
        raise ValueError("fusionlens.compile needs [uri, target | null]")
    target = _arg(args, 1)
    options = _arg(args, 2)
    wait = isinstance(options, dict) and options.get("wait") is True
    if not await ls.settings_ready():  # they may say allowExecution false: nothing runs before
        ls.tell(T.MessageType.Warning, SETTINGS_PENDING)
        return {"targets": [] if target is None else [target], "ok": False, "message": SETTINGS_PENDING}
    token = getattr(_COMMAND_PARAMS.get(), "work_done_token", None)
    return await ls.jobs.compile_targets(uri, None if target is None else [target], reason="command", force=True,
                                         token=token, wait=wait, request=_request_future(ls) if wait else None)


def _request_future(ls: FusionLensServer) -> Any:
    """pygls' future of the request being handled: $/cancelRequest cancels it (and answers
    -32800), but not the command's own task, so a waiting compile watches it."""
    protocol: Any = ls.protocol
    try:
        return protocol._request_futures.get(protocol.msg_id)
    except AttributeError:  # another pygls: no cancel then
        return None


def cmd_cancel(ls: FusionLensServer, *args: Any) -> Answer:
    """[uri?]: cancel the compiles of one document (all documents without a uri), queued and
    running; a running compile's worker is killed (the next compile starts a new one)."""
    uri = _arg(args, 0)
    names = ls.jobs.cancel_all(uri or None, "asked by fusionlens.cancel")
    return {"cancelled": names, "ok": True} if names else {"cancelled": [], "ok": True, "message": "nothing to cancel"}


def _shown(ls: FusionLensServer, uri: Any, target: Any) -> tuple[DocState | None, Result | None, str]:
    """The document, the result of `target` it shows (None, told, when there is no report yet,
    or no such document) and the message that says so."""
    if not isinstance(uri, str) or not uri or not isinstance(target, str) or not target:
        return None, None, "FusionLens: this command needs [uri, target, ...]"
    state = ls.documents.lookup(uri)
    if state is None:
        return None, None, f"FusionLens: no such document: {uri}"
    res = ls.results.shown(state.path, target)
    if res is None or res.report is None:
        msg = f"{target} has no compile result yet; compile it first"
        ls.tell(T.MessageType.Warning, msg)
        return state, None, f"FusionLens: {msg}"
    return state, res, ""


def _trace(report: CompileReport, stage: str | None, kind: str | None) -> tuple[str | None, str]:
    """(program kind, stage) of the trace asked for: `stage` of program `kind` (the first
    program with that stage when `kind` is None; the forward's execution trace when both are
    None), or (None, why not)."""
    programs = [p for p in report.programs if p.traces and (kind is None or p.kind == kind)]
    if not programs:
        return None, f"no {kind} program in the report" if kind else "the report has no traces"
    if stage is None:
        stage = "execution" if "execution" in programs[0].traces else list(programs[0].traces)[-1]
    program = next((p for p in programs if stage in p.traces), None)
    if program is None:
        have = ", ".join(f"{p.kind}: {', '.join(p.traces)}" for p in programs)
        return None, f"no trace stage {stage!r}; have {have}"
    return program.kind, stage


async def cmd_show_trace(ls: FusionLensServer, *args: Any) -> Answer:
    """[uri, target, stage?, program?]: a trace of the compile shown (docs/lsp.md)."""
    uri, target, stage, kind = _arg(args, 0), _arg(args, 1), _arg(args, 2), _arg(args, 3)
    state, res, msg = _shown(ls, uri, target)
    if state is None or res is None or res.report is None:
        return {"uri": None, "message": msg}
    program, stage_or_why = _trace(res.report, stage, kind)
    if program is None:
        return {"uri": None, "message": stage_or_why}
    stage = stage_or_why
    text = next(p.traces[stage] for p in res.report.programs if p.kind == program)
    stem = os.path.splitext(os.path.basename(state.fs_path))[0]
    what = stage if program == PROGRAM_KINDS[0] else f"{program} {stage}"
    header = (f"# FusionLens trace ({what}) of {target} in {state.fs_path}\n"
              f"# generated by the language server; read-only, regenerated on every compile\n\n")
    name = f"{stem}.{target}.{stage}.py" if program == PROGRAM_KINDS[0] else f"{stem}.{target}.{program}.{stage}.py"
    return await ls.show_generated(header + text, name)


async def cmd_show_kernel(ls: FusionLensServer, *args: Any) -> Answer:
    """[uri, target, region]: a region's generated code; any program's region or preview."""
    uri, target, rid = _arg(args, 0), _arg(args, 1), _arg(args, 2)
    state, res, msg = _shown(ls, uri, target)
    if state is None or res is None or res.report is None:
        return {"uri": None, "message": msg}
    ref = RegionRef.parse(str(rid or ""))
    region = res.report.find(ref) if ref is not None else None
    if region is None:
        return {"uri": None, "message": f"no region {rid!r} in {target}"}
    stem = os.path.splitext(os.path.basename(state.fs_path))[0]
    header = (f"# FusionLens region {rid} ({region.executor}) of {target} in {state.fs_path}\n"
              f"# ops: {', '.join(region.ops)}\n"
              f"# generated by the language server; read-only, regenerated on every compile\n\n")
    return await ls.show_generated(header + (region.code or "# (no generated code)\n"),
                                   f"{stem}.{target}.{rid}.py")


def _repro_request(ls: FusionLensServer, state: DocState, res: Result, target: str, rid: str) -> ReproRequest:
    """The worker's request for a repro script of the compile shown: its text, and the
    executor and device settings it was compiled with."""
    compiled = res.snapshots.get(res.path)  # the text whose regions are shown
    saved = read_text_or_none(state.fs_path)
    settings = res.key.settings if res.key is not None else ls.settings.options_key()
    root = ls.documents.workspace_root(state)
    folders = [root] if os.path.isdir(root) else []  # an untitled buffer's folder is never made
    ls.worker.cwd = root if folders else existing_cwd()
    return ReproRequest(state.fs_path, target, list(settings.executors) if settings.executors is not None else None,
                        settings.device, None if compiled is None or compiled == saved else compiled,
                        folders, ls.worker.cwd, region=rid, overlays=ls.jobs.overlays(state.path))


async def cmd_export_repro(ls: FusionLensServer, *args: Any) -> Answer:
    """[uri, target, region]: the worker writes a standalone script of one fusion region or
    preview ("R3", "B1", "triton:P1"; fusionlens/driver/repro.py) of the compile shown, which the
    server saves under the cache folder's repro/ and asks the client to open. It runs the
    user's code again, so only where fusionlens.allowExecution is true."""
    uri, target, rid = _arg(args, 0), _arg(args, 1), _arg(args, 2)
    if not uri or not target or not rid:
        raise ValueError("fusionlens.exportRepro needs [uri, target, region id]")
    if not await ls.settings_ready():
        ls.tell(T.MessageType.Warning, SETTINGS_PENDING)
        return {"uri": None, "message": f"FusionLens: {SETTINGS_PENDING}"}
    if not ls.settings.allowExecution:
        msg = "no repro script: running user code is disabled (fusionlens.allowExecution is false)"
        ls.tell(T.MessageType.Warning, msg)
        return {"uri": None, "message": f"FusionLens: {msg}"}  # told already (as _shown's)
    state, res, msg = _shown(ls, uri, target)
    if state is None or res is None:
        return {"uri": None, "message": msg}
    request = _repro_request(ls, state, res, target, rid)
    progress = await ls.progress_begin(None, f"FusionLens: repro script of {rid}", f"running {target}")
    try:
        answer: Any = await ls.worker.request(request, ls.settings.timeoutSeconds)
    except WorkerError as e:
        answer = Failure(0, e.message)
    finally:
        if progress is not None:
            ls.progress_end(progress, "done")
    if not isinstance(answer, ReproAnswer) or answer.script is None:
        problem = answer.problem if isinstance(answer, ReproAnswer) else (
            f"the compiler raised {answer.error if isinstance(answer, Failure) else answer}")
        ls.tell(T.MessageType.Warning if isinstance(answer, ReproAnswer) else T.MessageType.Error,
                f"no repro script of {rid}: {problem}")
        return {"uri": None, "message": f"FusionLens: no repro script of {rid}: {problem}"}
    r = answer.script
    try:
        path = ls.write_generated("repro", r.file_name, r.text, mode=0o644)  # a script to edit and run
    except OSError as e:
        return {"uri": None, "message": f"FusionLens: no repro script of {rid}: not written: {e}"}
    shown = await ls.show_path(path)
    if not shown["shown"]:
        ls.tell(T.MessageType.Info, f"wrote {path}: {r.summary}")
    return dict(shown, path=path, region=r.region, executor=r.executor, summary=r.summary)


# A Content-Security-Policy nonce goes into the page's attributes as it is: base64 (or
# base64url) characters only, as VS Code's webview examples make them.
_NONCE = re.compile(r"[A-Za-z0-9+/=_-]{16,128}")


def _first_compiled(ls: FusionLensServer, uri: str) -> str | None:
    """The first target of the document (in file order) that has a report shown."""
    state = ls.documents.lookup(uri)
    if state is None:
        return None
    for t in state.targets:
        res = ls.results.shown(state.path, t.name)
        if res is not None and res.report is not None:
            return t.name
    return None


def _sources(res: Result) -> dict[str, str]:
    """Each file the report names -> the text that was compiled (the page's lines are the
    report's, so it shows that text, not the buffer as edited since)."""
    report = res.report
    if report is None:
        return {}
    named = [report.target.file, *(op.file for op in report.ops),
             *(s.file for r in report.all_regions() for s in r.source_lines), *(c.file for c in report.collectives)]
    out: dict[str, str] = {}
    for f in dict.fromkeys(f for f in named if f):
        text = res.snapshots.get(norm_path(f) or f)
        if text is not None:
            out[f] = text
    return out


def _report_targets(ls: FusionLensServer, state: DocState) -> list[dict[str, Any]]:
    """The document's targets for a report page's host: 0-based `line` (the decorator) to
    `endLine` (the function's last line) in the text as it is now, and `version`, the number
    of the result with a report it shows (larger is newer; null: none)."""
    out: list[dict[str, Any]] = []
    for t in state.targets:
        res = ls.results.shown(state.path, t.name)
        version = res.seq if res is not None and res.report is not None else None
        out.append({"name": t.name, "line": t.decorator_line - 1, "endLine": t.end_line - 1, "version": version})
    return out


async def cmd_report_html(ls: FusionLensServer, *args: Any) -> Answer:
    """[uri, target | null, nonce | null, {"render": false}?]: the HTML report page
    (fusionlens.report.html) of the compile the document shows for `target` (null: its first
    target that has one), rendered here from the report that result holds, with the text it
    compiled: nothing runs. With {"plan": true}: the page of the target's plan at scale
    (fusionlens.report.html.plan: pipeline schedule, memory per GPU, the search's frontier).
    With a nonce every script and style carries it (a webview's Content-Security-Policy).
    Every answer about a document lists its `targets`; with render false that is all it does
    (no page, no warning), so a host can tell whether the page it holds is still the result's."""
    uri, target, nonce, options = _arg(args, 0), _arg(args, 1), _arg(args, 2), _arg(args, 3)
    if nonce is not None and (not isinstance(nonce, str) or not _NONCE.fullmatch(nonce)):
        return {"html": None, "message": "FusionLens: fusionlens.reportHtml: the nonce must be 16 to 128 "
                                         "base64 characters"}
    known = ls.documents.lookup(uri) if isinstance(uri, str) and uri else None
    targets = _report_targets(ls, known) if known is not None else []
    if isinstance(options, dict) and options.get("render") is False:
        if known is None:
            return {"html": None, "targets": [], "message": f"FusionLens: no such document: {uri}"}
        return {"html": None, "targets": targets, "uri": uri, "file": known.fs_path}
    if target is None and known is not None:
        target = _first_compiled(ls, uri)
        if target is None:
            msg = "nothing in this file has a compile result yet; compile a target first"
            ls.tell(T.MessageType.Warning, msg)
            return {"html": None, "targets": targets, "message": f"FusionLens: {msg}"}
    state, res, msg = _shown(ls, uri, target)
    if state is None or res is None or res.report is None:
        return {"html": None, "targets": targets, "message": msg}
    try:
        from fusionlens.report import html as html_report
    except ImportError as e:  # a compiler without the page
        return {"html": None, "targets": targets, "message": f"FusionLens: this compiler has no HTML report ({e})"}
    report, sources = res.report, _sources(res)
    planned = res.plan if isinstance(options, dict) and options.get("plan") is True else None
    if isinstance(options, dict) and options.get("plan") is True and planned is None:
        return {"html": None, "targets": targets,
                "message": f"FusionLens: {target} has no plan (plan= in its decorator)"}
    try:  # off the event loop: a big report's page takes a while, and edits keep coming
        if planned is not None:  # the target's plan at scale: its pictures
            from fusionlens.report.html import plan as plan_page

            html = await asyncio.to_thread(plan_page.render, planned, nonce)
        else:
            html = await asyncio.to_thread(html_report.render, report, sources, nonce=nonce)
    except Exception as e:  # noqa: BLE001 - a bug of the page must not take the server down
        logging.getLogger("fusionlens.lsp").exception("rendering the report of %s", target)
        return {"html": None, "targets": targets,
                "message": f"FusionLens: the report page of {target} failed: {type(e).__name__}: {e}"}
    return {"html": html, "target": target, "uri": uri, "file": state.fs_path, "version": res.seq,
            "files": sorted(sources), "targets": targets}


def cmd_clear_cache(ls: FusionLensServer, *args: Any) -> Answer:
    """Drop every result, and cancel what is queued or running (a running compile's worker is
    killed, as fusionlens.cancel does): a compile landing after the clear would show again."""
    ls.jobs.cancel_all(None, "the cache was cleared (fusionlens.clearCache)")
    ls.results.clear()
    for state in ls.documents:
        state.notes.clear()
        state.view = None
    ls.refresh()
    return {"ok": True}


def cmd_debug_info(ls: FusionLensServer, *args: Any) -> Answer:
    """Internal (tests, bug reports): what this process has loaded and what it holds."""
    return {"pid": os.getpid(), "version": __version__,
            "torchImported": "torch" in sys.modules,
            "userModules": sorted(m for m in sys.modules if m.startswith("_fusionlens_user")),
            "workerPid": ls.worker.pid, "workerRestarts": ls.worker.restarts,
            "cacheEntries": ls.results.cached_count(), "documents": len(ls.documents),
            "settings": dataclasses.asdict(ls.settings), "device": ls.jobs.last_device,
            "requestFutures": len(ls.protocol._request_futures)}  # pygls' table: small (lsp_server.rpc)


# --- fusionlens/regions -----------------------------------------------------------------------

def regions_request(ls: FusionLensServer, params: Any) -> Answer:
    """{uri}: the document's targets and regions (docs/lsp.md); none for a document that is
    neither open nor on disk."""
    uri = _get(params, "uri")
    if not isinstance(uri, str) or not uri:
        raise JsonRpcInvalidParams("fusionlens/regions needs {\"uri\": <document URI>}")
    state = ls.documents.lookup(uri)
    if state is None:
        return {"uri": uri, "version": None, "targets": []}
    view = ls.documents.view(state)
    targets = []
    for t in state.targets:
        status, message = ls.jobs.target_state(state, t.name)
        res = ls.results.shown(state.path, t.name)
        entry: dict[str, Any] = {"name": t.name, "line": t.line - 1, "status": status, "message": message,
                                 "speedup": None, "compiledMs": None, "eagerMs": None, "regions": []}
        if res is not None and res.report is not None:
            entry.update(_target_entry(res, res.report, view, state.path))
        targets.append(entry)
    return {"uri": uri, "version": ls.documents.text_document(uri).version, "targets": targets}


def _target_entry(res: Result, report: CompileReport, view: View, path: str) -> dict[str, Any]:
    """A compiled target's timings (its forward program's), the regions of every program
    (most to win first), the previews, and the collectives (in the report's order)."""
    entry: dict[str, Any] = {}
    tm = report.forward.timings
    if tm is not None:
        entry["speedup"] = tm.speedup_vs_eager
        entry["compiledMs"] = tm.compiled.median_ms if tm.compiled else None
        entry["eagerMs"] = tm.eager.median_ms if tm.eager else None
    regions = [_region_entry(p, r, view.region_lines_of(res, r.id)) for p in report.programs for r in p.regions]
    entry["regions"] = sorted(regions, key=_by_what_can_be_won)
    entry["previews"] = [_preview_entry(p, preview, r, path)
                         for p in report.programs for preview in p.previews for r in preview.regions]
    entry["collectives"] = [_collective_entry(c, _collective_line(res, c, view, path)) for c in report.collectives]
    return entry


def _collective_line(res: Result, c: Collective, view: View, path: str) -> int | None:
    """A collective's 0-based line in the document as it is now (None: another file's, run by
    a hook with no line, or a line edited since the compile)."""
    if not c.line or norm_path(c.file) != path:
        return None
    _ann, lm = view.maps.get(res.seq, (None, None))
    return lm(c.line - 1) if lm is not None else None


def _collective_entry(c: Collective, line: int | None) -> dict[str, Any]:
    """A collective of the report (torch.distributed communication) for the regions view."""
    t = c.time_ms
    return {"op": c.op, "kind": c.kind, "program": c.program, "region": c.region, "bytes": c.bytes,
            "groupSize": c.group_size, "file": c.file, "line": line,
            "timeMs": None if t is None else {"min": t.min, "median": t.median, "max": t.max},
            "estimate": c.estimate, "estimateMs": c.estimate_ms, "exposedMs": c.exposed_ms,
            "overlappedBy": list(c.overlapped_by)}


def _region_entry(program: ProgramReport, r: Region, lines: list[int]) -> dict[str, Any]:
    b = r.boundary
    return {"id": r.id, "program": program.kind, "executor": r.executor, "ops": list(r.ops), "lines": lines,
            "timeMs": r.timing.median_ms if r.timing else None,
            "eagerMs": r.timing.eager_median_ms if r.timing else None,
            "boundary": None if b is None else {"reason": b.reason, "detail": b.detail, "code": b.code},
            **_roofline_fields(r)}


def _roofline_fields(region: Region) -> dict[str, Any]:
    """A region's cost and roofline for the regions view; headroomMs: what can be won
    (measured time minus the roofline minimum; null for an estimate)."""
    line, cost = region.roofline, region.cost
    return {"bytes": cost.bytes if cost else None, "flops": cost.flops if cost else None,
            "roofline": None if line is None else {
                "device": line.device, "minMs": line.min_ms, "bound": line.bound,
                "pctOfPeak": line.pct_of_peak, "estimate": line.estimate, "text": roofline_text(region)},
            "headroomMs": headroom_ms(region)}


def _by_what_can_be_won(entry: dict[str, Any]) -> tuple[int, float]:
    """Most to win first; estimates (nothing measured on that GPU) after, the largest
    roofline minimum first; stable otherwise."""
    if entry["headroomMs"] is not None:
        return (0, -entry["headroomMs"])
    line = entry["roofline"]
    return (1, -(line["minMs"] if line else 0.0))


def _preview_entry(program: ProgramReport, preview: Preview, r: Region, path: str) -> dict[str, Any]:
    """A region a fusion executor that cannot run here (a CPU) would make, with its estimated
    roofline; lines: its 0-based lines in this file (as compiled)."""
    line = r.roofline
    return {"id": r.id, "program": program.kind, "executor": preview.executor, "ops": len(r.ops),
            "lines": [s.line - 1 for s in r.source_lines if norm_path(s.file) == path],
            "estMs": line.min_ms if line else None, "device": line.device if line else None,
            "text": roofline_text(r)}


def _arg(args: tuple[Any, ...], i: int, default: Any = None) -> Any:
    return args[i] if len(args) > i else default


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _keep_command_params(server: FusionLensServer) -> None:
    """Wrap pygls' workspace/executeCommand handler (a generator it drives) so that the
    command's task sees the request's params (_COMMAND_PARAMS): the task is created while
    the handler runs, in a copy of this context."""
    features = server.protocol.fm
    builtin = features.builtin_features[T.WORKSPACE_EXECUTE_COMMAND]

    def execute_command(params: T.ExecuteCommandParams) -> Generator[Any, Any, Any]:
        _COMMAND_PARAMS.set(params)
        return (yield from builtin(params))

    features.add_builtin_feature(T.WORKSPACE_EXECUTE_COMMAND, execute_command)


def register_commands(server: FusionLensServer) -> None:
    _keep_command_params(server)
    server.command(CMD_COMPILE)(cmd_compile)
    server.command(CMD_CANCEL)(cmd_cancel)
    server.command(CMD_SHOW_TRACE)(cmd_show_trace)
    server.command(CMD_SHOW_KERNEL)(cmd_show_kernel)
    server.command(CMD_CLEAR_CACHE)(cmd_clear_cache)
    server.command(CMD_DEBUG_INFO)(cmd_debug_info)
    server.command(CMD_EXPORT_REPRO)(cmd_export_repro)
    server.command(CMD_REPORT_HTML)(cmd_report_html)
    server.feature(REGIONS_REQUEST)(regions_request)
