"""What a finished compile puts on the lines of one file, as plain data (no LSP, no words):
each line's regions of every program, where regions end, what a training forward saves there
for the backward, and diagnostics.

Every program of a report is annotated by the same function: a region lands on the lines of
its ops and its `source_lines`, so a backward region lands on the forward lines it
differentiates (docs/report.md). views.py turns this into words, documents.py maps it onto
the current text of a buffer.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
from typing import Any, NamedTuple

from fusionlens.report.plan import LineCost, PlanReport
from fusionlens.report.schema import (Boundary, Collective, CompileReport, Diagnostic, OpRecord, Preview, ProgramReport,
                                      Region, SavedTensor)
from lsp_server.linemap import split_lines
from lsp_server.protocol import Where
from lsp_server.settings import CompileSettings

Location = tuple[str, int]  # (normalised path, 1-based line)


def norm_path(path: str | None) -> str | None:
    if not path:
        return None
    return _norm_path(path)


@functools.lru_cache(maxsize=16384)
def _norm_path(path: str) -> str:
    # memoised: a report names the same few files in every op and frame, and realpath is a
    # syscall per path component
    return os.path.normcase(os.path.realpath(path))


def _same(path_a: str | None, path_b: str) -> bool:
    return bool(path_a) and norm_path(path_a) == path_b


class ResultKey(NamedTuple):
    """What a result depends on: the text compiled, the target and the compile settings."""

    digest: str  # sha256 of the text
    path: str  # normalised path of the file that defines the target
    target: str
    settings: CompileSettings


@dataclasses.dataclass
class Result:
    """A finished compile of one target (a report, or a failure without one)."""

    target: str
    path: str  # normalised path of the file that defines the target
    key: ResultKey | None
    status: str  # "ok" | "error"
    message: str
    report: CompileReport | None
    snapshots: dict[str, str]  # normalised path -> the text that was compiled
    target_line: int | None  # 0-based line of the target's `def` in that text
    kind: str = "report"  # "report" | "timeout" | "crashed" | "internal" | "startup"
    seq: int = 0
    # where the user's code was when the worker timed out or died (WorkerError.where)
    where: Where | None = None
    imports: dict[str, str] = dataclasses.field(default_factory=dict)  # workspace file -> text digest (jobs.py)
    plan: PlanReport | None = None  # the target's plan at scale (`plan=` in its decorator)
    _file_set: set[str] | None = dataclasses.field(default=None, repr=False)
    _annotations: dict[str, FileAnnotations] = dataclasses.field(default_factory=dict, repr=False)
    _lines: dict[str, list[str]] = dataclasses.field(default_factory=dict, repr=False)

    def files(self) -> set[str]:
        """The normalised paths of every file the result annotates."""
        if self._file_set is None:
            self._file_set = self._compute_files()
        return self._file_set

    def _compute_files(self) -> set[str]:
        out = {self.path}
        if self.where is not None and self.where.file:
            out.add(norm_path(self.where.file) or self.where.file)
        report = self.report
        if report is None:
            return out
        named: list[str | None] = [op.file for op in report.ops]
        named += [f.file for op in report.ops for f in op.stack]  # every frame's file
        named += [s.file for r in report.all_regions() for s in r.source_lines]
        named += [d.file for d in [report.error, *report.diagnostics] if d is not None]
        named += [fb.file for fb in report.fallbacks]
        named += [t.file for t in report.training.saved] if report.training is not None else []
        return out | {p for p in map(norm_path, named) if p}

    def annotations(self, path: str) -> FileAnnotations:
        """What the result puts on the file's lines, built once."""
        ann = self._annotations.get(path)
        if ann is None:
            ann = self._annotations[path] = build_annotations(self, path)
        return ann

    def snapshot_lines(self, path: str) -> list[str] | None:
        """The lines (LSP's) of the text of `path` this result was compiled from, split once."""
        lines = self._lines.get(path)
        if lines is None:
            snap = self.snapshots.get(path)
            if snap is None:
                return None
            lines = self._lines[path] = split_lines(snap)
        return lines


@dataclasses.dataclass
class LineNote:
    """A region of one of a result's programs on one line."""

    result: Result
    program: ProgramReport
    region: Region
    line: int  # 0-based, in the compiled text
    ops: list[OpRecord]  # the region's traced ops from this line (a backward region's ops are no traced op)
    # the preview region (and its preview) this line's ops would join where a fusion executor
    # that cannot run here can (Triton's first); None where there is none
    preview: tuple[Preview, Region] | None = None
    # made on first use, kept with the result (a view is made again after every edit):
    # views.region_tooltip's text of the note but its lines, and the hint labels of the line's
    # group of notes this note leads, by (prefix, id of the saved tensors' list)
    tooltip_parts: tuple[str, str] | None = dataclasses.field(default=None, repr=False, compare=False)
    labels: dict[tuple[str, int], str] = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass
class DiagNote:
    line: int  # 0-based, in the compiled text
    severity: str  # "error" | "warning" | "information" | "hint"
    message: str
    col: int | None = None
    end_col: int | None = None
    code: str = ""
    # LSP relatedInformation: (normalised path, 0-based line in the compiled text, message)
    related: list[tuple[str, int, str]] = dataclasses.field(default_factory=list)

    def related_uris(self) -> list[tuple[str, int, str]]:
        """`related` as (file URI, 0-based line, message)."""
        return [(pathlib.Path(p).as_uri(), ln, m) for p, ln, m in self.related]


@dataclasses.dataclass
class FileAnnotations:
    """A result's annotations of one file; lines are 0-based lines of the compiled text."""

    lines: dict[int, list[LineNote]] = dataclasses.field(default_factory=dict)  # every program's, in order
    boundaries: dict[int, list[tuple[Region, Boundary]]] = dataclasses.field(default_factory=dict)
    region_lines: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # region id -> its lines here
    saved: dict[int, list[SavedTensor]] = dataclasses.field(default_factory=dict)  # activations a line produced
    collectives: dict[int, list[Collective]] = dataclasses.field(default_factory=dict)  # a line's communication
    plans: dict[int, tuple[PlanReport, LineCost]] = dataclasses.field(default_factory=dict)  # a line at scale
    diags: list[DiagNote] = dataclasses.field(default_factory=list)


def build_annotations(result: Result, path: str) -> FileAnnotations:
    ann = FileAnnotations()
    report = result.report
    target_line = result.target_line if path == result.path else None
    if report is not None:
        ops = _OpsByLine(report.ops, path)
        for program in report.programs:
            _annotate_program(ann, result, program, ops, path)
        if report.training is not None:
            for t in report.training.saved:
                if t.kind == "activation" and t.line and _same(t.file, path):
                    ann.saved.setdefault(t.line - 1, []).append(t)
        for c in report.collectives:
            if c.line and _same(c.file, path):
                ann.collectives.setdefault(c.line - 1, []).append(c)
        ann.diags += _report_diagnostics(report, result.target, path, target_line)
    if result.plan is not None:
        for lc in result.plan.lines:
            if lc.line and _same(lc.file, path):
                ann.plans.setdefault(lc.line - 1, (result.plan, lc))
    if result.status == "error":
        ann.diags += _failure_diagnostics(result, path, target_line)
    return ann


class _OpsByLine:
    """A report's traced ops by (region id, 0-based line of `path`): the lines they come from,
    and the lines of `path` that call into another file's ops (a user's `model(x)` line of
    ops in modeling_llama.py)."""

    def __init__(self, ops: list[OpRecord], path: str):
        self.here: dict[tuple[str, int], list[OpRecord]] = {}
        self.calls: dict[tuple[str, int], list[OpRecord]] = {}
        self.lines: dict[str, set[int]] = {}  # region id -> lines of `path` its ops come from
        self.call_lines: dict[str, set[int]] = {}  # region id -> lines of `path` that call its ops
        for op in ops:
            if op.region is None or not op.line:
                continue
            if _same(op.file, path):
                self.here.setdefault((op.region, op.line - 1), []).append(op)
                self.lines.setdefault(op.region, set()).add(op.line - 1)
                continue
            for f in op.stack[1:]:
                if _same(f.file, path) and f.line:
                    self.calls.setdefault((op.region, f.line - 1), []).append(op)
                    self.call_lines.setdefault(op.region, set()).add(f.line - 1)


def _annotate_program(ann: FileAnnotations, result: Result, program: ProgramReport, ops: _OpsByLine,
                      path: str) -> None:
    """A program's regions on the lines of `path`: where their ops and source lines are, and
    where each ends."""
    previews = _preview_index(program)
    for region in program.regions:
        rl = {s.line - 1 for s in region.source_lines if _same(s.file, path) and s.line}
        rl |= ops.lines.get(region.id, set())
        for ln in sorted(ops.call_lines.get(region.id, set()) - rl):
            called = ops.calls[(region.id, ln)]
            ann.lines.setdefault(ln, []).append(LineNote(result, program, region, ln, called, _joins(
                previews, {(norm_path(o.file) or o.file, o.line) for o in called})))
        if not rl:
            continue
        ann.region_lines[region.id] = sorted(rl)
        for ln in sorted(rl):
            ann.lines.setdefault(ln, []).append(LineNote(result, program, region, ln, ops.here.get((region.id, ln), []),
                                                         _joins(previews, {(path, ln + 1)})))
        b = region.boundary
        if b is not None:
            bl = b.line - 1 if (b.line and _same(b.file, path)) else (
                max(rl) if (not b.file or _same(b.file, path)) else None)
            if bl is not None:
                ann.boundaries.setdefault(bl, []).append((region, b))


def _preview_index(program: ProgramReport) -> dict[Location, tuple[Preview, Region]]:
    """Each source line of a program's previews -> the preview region holding it, Triton's first."""
    index: dict[Location, tuple[Preview, Region]] = {}
    for p in sorted(program.previews, key=lambda p: p.executor != "triton"):
        for region in p.regions:
            for s in region.source_lines:
                index.setdefault((norm_path(s.file) or s.file, s.line), (p, region))
    return index


def _joins(index: dict[Location, tuple[Preview, Region]], where: set[Location]) -> tuple[Preview, Region] | None:
    return next((index[loc] for loc in sorted(where) if loc in index), None)


def _report_diagnostics(report: CompileReport, target: str, path: str, target_line: int | None) -> list[DiagNote]:
    """Fallbacks and the compiler's diagnostics on their lines of `path`; those without a line
    on the target's `def`."""
    out: list[DiagNote] = []
    for fb in report.fallbacks:
        if _same(fb.file, path) and fb.line:
            out.append(DiagNote(fb.line - 1, "information", f"`{fb.op}` fell back to eager PyTorch: {fb.reason}",
                                code="fallback"))
        elif target_line is not None and not fb.file:
            out.append(DiagNote(target_line, "information",
                                f"{target}: `{fb.op}` fell back to eager PyTorch: {fb.reason}", code="fallback"))
    for d in report.diagnostics:
        if _same(d.file, path) and d.line:
            out.append(DiagNote(d.line - 1, d.severity or "information", d.message, d.col,
                                d.end_col if d.end_line in (None, d.line) else None, code=d.code))
        elif target_line is not None and not (d.file and d.line):
            out.append(DiagNote(target_line, d.severity or "information", f"{target}: {d.message}", code=d.code))
    return out


def _failure_diagnostics(result: Result, path: str, target_line: int | None) -> list[DiagNote]:
    """A failed compile: an error at the user's line where it failed (the error's, from an
    exception in the example's call, or where the code was when the worker timed out or
    died), and one at the target's `def` that points there."""
    report = result.report
    err: Diagnostic | None = report.error if report is not None else None
    msg = (err.message if err is not None else "") or result.message or "compile failed"
    code = result.kind if result.kind != "report" else "compile-error"
    wh = result.where if result.where is not None and result.where.file and result.where.line else None
    at_file, at_line, at_msg = None, 0, ""
    if err is not None and err.file and err.line:
        at_file, at_line, at_msg = norm_path(err.file), err.line, f"{result.target}: {msg}"
    elif wh is not None:
        func = f" (in {wh.function})" if wh.function else ""
        at_file, at_line = norm_path(wh.file), int(wh.line)
        at_msg = f"compiling {result.target} {wh.note or 'failed here'}{func}"
    out: list[DiagNote] = []
    at_error = None
    if at_file == path:
        at_error = at_line - 1
        # the whole line: the error's column is where Python noticed it, rarely the whole cause
        out.append(DiagNote(at_error, "error", at_msg, code=code))
    if target_line is not None and at_error != target_line:
        where, related = "", []
        if at_file is not None:
            where = f" (at {os.path.basename(at_file)}:{at_line}"
            where += f" in {wh.function})" if wh is not None and wh.function else ")"
            related = [(at_file, at_line - 1, at_msg)]
        out.append(DiagNote(target_line, "error", f"compiling {result.target} failed{where}: {msg}",
                            code=code, related=related))
    return out


def load_plan(data: dict[str, Any] | None) -> PlanReport | None:
    """The worker's plan dict as a PlanReport (None: the target has no plan)."""
    return PlanReport.from_dict(data) if data else None


def load_report(data: dict[str, Any]) -> CompileReport:
    """The worker's report dict as a CompileReport (unknown keys from a newer compiler are
    ignored by from_dict)."""
    return CompileReport.from_dict(data)
