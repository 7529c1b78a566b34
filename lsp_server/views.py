"""From CompileReports to what an editor shows: per-line notes, hint labels, hover Markdown,
lens titles and diagnostics. Pure functions and plain data, no LSP transport here."""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Optional

from compiler import roofline
from compiler.report import CompileReport, format_ms
from lsp_server import backward_views

HINT_MAX = 40  # "P1 · triton (preview) · est 3.2 µs" fits
HOVER_CODE_LINES = 60


def norm_path(path: Optional[str]) -> Optional[str]:
    if not path:
        return None
    return os.path.normcase(os.path.realpath(path))


@dataclasses.dataclass
class Result:
    """A finished compile of one target (a report, or a failure without one)."""

    target: str
    path: str  # normalised path of the file that defines the target
    key: tuple
    status: str  # "ok" | "error"
    message: str
    report: Optional[CompileReport]
    snapshots: dict  # normalised path -> the text that was compiled
    target_line: Optional[int]  # 0-based line of the target's `def` in that text
    kind: str = "report"  # "report" | "timeout" | "crashed" | "internal" | "startup"
    seq: int = 0
    # where the user's code was when the worker timed out or died (WorkerError.where):
    # {"file", "line" (1-based), "function", "stack": [user frames, innermost first], "note"}
    where: Optional[dict] = None
    _files: dict = dataclasses.field(default_factory=dict, repr=False)

    def files(self) -> set:
        if "__files__" not in self._files:
            self._files["__files__"] = self._compute_files()
        return self._files["__files__"]

    def _compute_files(self) -> set:
        out = {self.path}
        if self.where and self.where.get("file"):
            out.add(norm_path(self.where["file"]))
        if self.report is None:
            return out
        for op in self.report.ops:
            for f in [op, *op.stack]:  # every file its call stack passes through
                if f.file:
                    out.add(norm_path(f.file))
        for r in self.report.regions:
            for s in r.source_lines:
                if s.file:
                    out.add(norm_path(s.file))
        for d in [self.report.error, *self.report.diagnostics, *self.report.fallbacks]:
            if d is not None and d.file:
                out.add(norm_path(d.file))
        return out

    def annotations(self, path: str) -> "FileAnnotations":
        ann = self._files.get(path)
        if ann is None:
            ann = self._files[path] = build_annotations(self, path)
        return ann


@dataclasses.dataclass
class LineNote:
    result: Result
    region: object  # compiler.report.Region
    ops: list  # OpRecords of this region on this line


@dataclasses.dataclass
class DiagNote:
    line: int  # 0-based, in the compiled text
    severity: str  # "error" | "warning" | "information" | "hint"
    message: str
    col: Optional[int] = None
    end_col: Optional[int] = None
    code: Optional[str] = None
    # LSP relatedInformation: [(normalised path, 0-based line in the compiled text, message)]
    related: list = dataclasses.field(default_factory=list)

    def related_uris(self) -> list:
        """`related` as [(file URI, 0-based line, message)]."""
        return [(pathlib.Path(p).as_uri(), ln, m) for p, ln, m in self.related]


@dataclasses.dataclass
class FileAnnotations:
    lines: dict  # old 0-based line -> [LineNote]
    boundaries: dict  # old 0-based line -> [(region, boundary)]
    region_lines: dict  # region id -> sorted old 0-based lines in this file
    diags: list  # [DiagNote]
    backward: dict = dataclasses.field(default_factory=dict)  # old 0-based line -> BackwardNote


def _same(path_a: Optional[str], path_b: str) -> bool:
    return bool(path_a) and norm_path(path_a) == path_b


def build_annotations(result: Result, path: str) -> FileAnnotations:
    lines: dict = {}
    boundaries: dict = {}
    region_lines: dict = {}
    diags: list = []
    report = result.report
    tl = result.target_line if path == result.path else None
    if report is not None:
        ops_by_region_line: dict = {}
        calls_by_region_line: dict = {}  # lines of this file that call into another file's ops
        for op in report.ops:
            if op.region is None or not op.line:
                continue
            if _same(op.file, path):
                ops_by_region_line.setdefault((op.region, op.line - 1), []).append(op)
                continue
            for f in op.stack[1:]:  # e.g. the user's `model(x)` line of ops in modeling_llama.py
                if _same(f.file, path) and f.line:
                    calls_by_region_line.setdefault((op.region, f.line - 1), []).append(op)
        for region in report.regions:
            rl = {s.line - 1 for s in region.source_lines if _same(s.file, path) and s.line}
            rl |= {ln for (rid, ln) in ops_by_region_line if rid == region.id}
            calls = sorted({ln for (rid, ln) in calls_by_region_line if rid == region.id} - rl)
            for ln in calls:
                lines.setdefault(ln, []).append(LineNote(result, region, calls_by_region_line[(region.id, ln)]))
            if not rl:
                continue
            region_lines[region.id] = sorted(rl)
            for ln in sorted(rl):
                lines.setdefault(ln, []).append(
                    LineNote(result, region, ops_by_region_line.get((region.id, ln), [])))
            b = region.boundary
            if b is not None:
                bl = b.line - 1 if (b.line and _same(b.file, path)) else (
                    max(rl) if (not b.file or _same(b.file, path)) else None)
                if bl is not None:
                    boundaries.setdefault(bl, []).append((region, b))
        for fb in report.fallbacks:
            if _same(fb.file, path) and fb.line:
                diags.append(DiagNote(fb.line - 1, "information",
                                      f"`{fb.op}` fell back to eager PyTorch: {fb.reason}",
                                      code="fallback"))
            elif tl is not None and not fb.file:
                diags.append(DiagNote(tl, "information",
                                      f"{result.target}: `{fb.op}` fell back to eager PyTorch: {fb.reason}",
                                      code="fallback"))
        for d in report.diagnostics:
            if _same(d.file, path) and d.line:
                diags.append(DiagNote(d.line - 1, d.severity or "information", d.message,
                                      d.col, d.end_col if d.end_line in (None, d.line) else None))
            elif tl is not None and not (d.file and d.line):
                diags.append(DiagNote(tl, d.severity or "information", f"{result.target}: {d.message}"))
    if result.status == "error":
        err = report.error if report is not None else None
        msg = (err.message if err is not None else "") or result.message or "compile failed"
        code = result.kind if result.kind != "report" else "compile-error"
        # the user's line where it failed: the error's (an exception in the example's call), or
        # where the code was when the worker timed out or died
        wh = result.where if result.where and result.where.get("file") and result.where.get("line") else None
        at_file, at_line, at_msg = None, None, None
        if err is not None and err.file and err.line:
            at_file, at_line, at_msg = norm_path(err.file), err.line, f"{result.target}: {msg}"
        elif wh is not None:
            func = f" (in {wh['function']})" if wh.get("function") else ""
            at_file, at_line = norm_path(wh["file"]), int(wh["line"])
            at_msg = f"compiling {result.target} {wh.get('note') or 'failed here'}{func}"
        at_error = None
        if at_file == path:
            at_error = at_line - 1
            # the whole line: the error's column is where Python noticed it, rarely the whole cause
            diags.append(DiagNote(at_error, "error", at_msg, code=code))
        if tl is not None and at_error != tl:
            where, related = "", []
            if at_file is not None:
                where = f" (at {os.path.basename(at_file)}:{at_line}"
                where += f" in {wh['function']})" if wh is not None and wh.get("function") else ")"
                related = [(at_file, at_line - 1, at_msg)]
            diags.append(DiagNote(tl, "error", f"compiling {result.target} failed{where}: {msg}",
                                  code=code, related=related))
    return FileAnnotations(lines, boundaries, region_lines, diags,
                           backward_views.annotate(report, path, _same, result.target, result.path))


def load_report(data: dict) -> CompileReport:
    """The worker's report dict as a CompileReport (unknown keys from a newer compiler are
    ignored by from_dict)."""
    return CompileReport.from_dict(data)


# --- formatting -------------------------------------------------------------------------

def shorten(text: str, limit: int = HINT_MAX) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def region_time(region) -> Optional[float]:
    t = region.timing
    return t.median_ms if t is not None else None


# --- cost and roofline (report.Region fields, or the same keys of a preview region's dict) ----

def _field(obj, name: str):
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def estimated_here(report: Optional[CompileReport]) -> bool:
    """Whether the report ran on a CPU, its rooflines the target GPU's: what the editor shows
    then is estimated GPU time, not the CPU's."""
    return report is not None and report.device == "cpu" and report.peaks is not None


def _si(n, unit: str) -> str:
    n = float(n or 0)
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g} {prefix}{unit}"
    return f"{n:.3g} {unit}"


def roofline_text(region) -> str:
    """"est. 4.1 µs on H100 (memory-bound: 1.2 MB, 3.4 MFLOP)", or where it was measured on
    that GPU "45% of peak on H100 (roofline 1.2 µs, memory-bound: ...)"; "" without one."""
    line, cost = _field(region, "roofline"), _field(region, "cost")
    if line is None:
        return ""
    work = f": {_si(_field(cost, 'bytes'), 'B')}, {_si(_field(cost, 'flops'), 'FLOP')}" if cost is not None else ""
    how = f"{_field(line, 'bound')}-bound{work}"
    at = f"on {_field(line, 'device')}"
    if _field(line, "estimate"):
        return f"est. {format_ms(_field(line, 'min_ms'))} {at} ({how})"
    pct = _field(line, "pct_of_peak")
    if pct is None:
        return f"roofline {format_ms(_field(line, 'min_ms'))} {at} ({how})"
    return f"{pct:.0f}% of peak {at} (roofline {format_ms(_field(line, 'min_ms'))}, {how})"


def headroom_ms(region) -> Optional[float]:
    """What can be won in a region: its measured time minus its roofline minimum (None for
    an estimate: the time was measured on another device)."""
    return roofline.headroom_ms(region_time(region), region.roofline)


def furthest_from_roofline(report: CompileReport):
    """The measured region with the most time above its roofline, or None."""
    won = [(headroom_ms(r), r) for r in report.regions]
    won = [(h, r) for h, r in won if h]
    return max(won, key=lambda hr: hr[0])[1] if won else None


def preview_region(report: Optional[CompileReport], ops: list):
    """(executor, preview region dict) a line's ops would join where that executor can run
    (Triton first), matched by the ops' lines; None when no preview holds them."""
    if report is None or not report.previews or not ops:
        return None
    lines = {(norm_path(o.file), o.line) for o in ops}
    for p in sorted(report.previews, key=lambda p: p.get("executor") != "triton"):
        for region in p.get("regions", []):
            if lines & {(norm_path(s["file"]), s["line"]) for s in region.get("source_lines", [])}:
                return p["executor"], region
    return None


def _hint_time(region, report) -> str:
    """The time part of a region's hint: "est 4.1 µs" (on a CPU: the target GPU's roofline),
    "12.1 µs · 45% peak" (measured on a GPU of the table), else the measured time."""
    line = region.roofline
    if line is not None and line.estimate and estimated_here(report):
        return f"est {format_ms(line.min_ms)}"
    t = region_time(region)
    if t is None:
        return ""
    if line is not None and line.pct_of_peak is not None:
        return f"{format_ms(t)} · {line.pct_of_peak:.0f}% peak"
    return format_ms(t)


def hint_label(notes: list, prefix: str = "") -> str:
    """`R3 · triton · 0.12 ms` (`· 45% peak` when measured on a GPU) for one region;
    `R3+R4 · torch` or `R3 +8 more · torch` when the line's ops went to several regions
    (time only when it is one region's). On a CPU the preview region the line would join,
    `P1 · triton (preview) · est 3.2 µs`, else `R3 · torch · est 4.1 µs` (target GPU)."""
    report = notes[0].result.report if notes else None
    if estimated_here(report):
        found = preview_region(report, [o for n in notes for o in n.ops])
        if found is not None:
            executor, p = found
            line = p.get("roofline")
            est = f" · est {format_ms(line['min_ms'])}" if line else ""
            return shorten(f"{prefix}{p['id']} · {executor} (preview){est}")
    regions = []
    for n in notes:
        if n.region not in regions:
            regions.append(n.region)
    if len(regions) <= 2:
        ids = "+".join(r.id for r in regions)
    else:
        ids = f"{regions[0].id} +{len(regions) - 1} more"
    executors = {r.executor for r in regions}
    label = f"{ids} · {executors.pop() if len(executors) == 1 else 'mixed'}"
    when = _hint_time(regions[0], report) if len(regions) == 1 else ""
    if when:
        label += f" · {when}"
    return shorten(prefix + label)


def boundary_label(items: list) -> str:
    region, b = items[0]
    return shorten(f"┆ {region.id} ends: {b.reason}")


def timing_text(region) -> str:
    t = region.timing
    if t is None or t.median_ms is None:
        return "not measured"
    text = format_ms(t.median_ms)
    if t.eager_median_ms:
        text += f" vs eager {format_ms(t.eager_median_ms)}"
        if t.median_ms:
            text += f" ({t.eager_median_ms / t.median_ms:.2f}x)"
    return text


def region_tooltip(note: LineNote, region_lines: list) -> str:
    r = note.region
    rep = note.result.report
    parts = [f"**FusionLens** region `{r.id}` of `{note.result.target}` · executor `{r.executor}`",
             f"time: {timing_text(r)} · {_plural(r.kernels, 'kernel')}"
             + (f" ({rep.device_name})" if rep is not None and rep.device_name else ""),
             "ops: " + ", ".join(f"`{o}`" for o in r.ops[:12]) + (" …" if len(r.ops) > 12 else "")]
    if roofline_text(r):
        parts.insert(2, f"roofline: {roofline_text(r)}")
    found = preview_region(rep, note.ops) if estimated_here(rep) else None
    if found is not None:
        parts.append(f"where {found[0]} can run: `{found[1]['id']}` · {roofline_text(found[1])}")
    if region_lines:
        parts.append("lines: " + ", ".join(str(ln + 1) for ln in region_lines))
    if r.note:
        parts.append(f"note: {r.note}")
    return "\n\n".join(parts)


def code_block(code: str, limit: int = HOVER_CODE_LINES, more: str = "") -> str:
    lines = code.rstrip().splitlines()
    extra = ""
    if len(lines) > limit:
        extra = f"\n\n… {len(lines) - limit} more lines{more}"
        lines = lines[:limit]
    body = "\n".join(lines).replace("```", "`​``")
    return f"```python\n{body}\n```{extra}"


def _region_section(n: LineNote, other: list, boundaries: list) -> list:
    r = n.region
    rep = n.result.report
    out = [f"### FusionLens · region `{r.id}` · `{r.executor}`"]
    dev = f" on {rep.device_name}" if rep is not None and rep.device_name else ""
    out.append(f"target `{n.result.target}` · {timing_text(r)}{dev} · {_plural(r.kernels, 'kernel')}")
    if roofline_text(r):
        out.append(f"**roofline:** {roofline_text(r)}")
    if n.ops:
        out.append("**ops from this line:** " + ", ".join(f"`{o.name}`" for o in n.ops))
    out.append("**region ops:** " + ", ".join(f"`{o}`" for o in r.ops[:20])
               + (f" … ({len(r.ops)} in all)" if len(r.ops) > 20 else ""))
    out.append("**same region:** " + (", ".join(f"line {ln + 1}" for ln in other) if other
                                      else "only this line"))
    for region, b in boundaries:
        if region is r:
            out.append(f"**region ends here:** {b.reason}" + (f" — {b.detail}" if b.detail else ""))
    if r.note:
        out.append(f"**note:** {r.note}")
    return out


def preview_section(report: Optional[CompileReport], ops: list) -> list:
    """What a fusion executor that cannot run here (Triton or nvFuser without a GPU) would
    make of this line: report.previews, matched through the line's own ops."""
    found = preview_region(report, ops)
    if found is None:
        return []
    executor, region = found
    reason = next((p.get("reason", "") for p in report.previews if p.get("executor") == executor), "")
    lines = {ln for o in ops for ln in [o.line]}
    others = sorted({s["line"] for s in region.get("source_lines", [])} - lines)
    also = f" with line{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}" if others else ""
    est = f" · {roofline_text(region)}" if roofline_text(region) else ""
    return [f"**where {executor} can run** (not here: {reason}), it would fuse this line{also} into one "
            f"kernel `{region['id']}` ({len(region.get('ops', []))} ops){est}:",
            code_block(region.get("code", ""), HOVER_CODE_LINES)]


def hover_markdown(notes: list, boundaries: list, region_lines_of, line: int) -> str:
    """Markdown for a compiled line. `region_lines_of(result, region_id)` gives the region's
    current lines (0-based) in this document. One region: its details; several (a line whose
    ops went to several regions): a table, then the trace and as much kernel code as fits."""
    out = []
    by_result: dict = {}
    for n in notes:
        by_result.setdefault(id(n.result), []).append(n)
    for group in by_result.values():
        res = group[0].result
        if len(group) == 1:
            n = group[0]
            other = [ln for ln in region_lines_of(res, n.region.id) if ln != line]
            out += _region_section(n, other, boundaries)
        else:
            rep = res.report
            dev = f" on {rep.device_name}" if rep is not None and rep.device_name else ""
            out.append(f"### FusionLens · {len(group)} regions · target `{res.target}`")
            rows = ["| region | executor | ops from this line | time | eager | roofline |", "|---|---|---|---|---|---|"]
            for n in group:
                t = n.region.timing
                rows.append(f"| `{n.region.id}` | {n.region.executor} | "
                            + ", ".join(f"`{o.name}`" for o in n.ops[:4]) + (" …" if len(n.ops) > 4 else "")
                            + f" | {format_ms(t.median_ms if t else None, missing='—')}"
                            + f" | {format_ms(t.eager_median_ms if t else None, missing='—')}"
                            + f" | {_roofline_cell(n.region)} |")
            out.append("\n".join(rows))
            others = sorted({ln for n in group for ln in region_lines_of(res, n.region.id)} - {line})
            out.append(f"times{dev}; **these regions also cover:** "
                       + (", ".join(f"line {ln + 1}" for ln in others) if others else "no other line"))
            for region, b in boundaries:
                if any(n.region is region for n in group):
                    out.append(f"**region `{region.id}` ends here:** {b.reason}"
                               + (f" — {b.detail}" if b.detail else ""))
        trace = "\n".join(o.trace for n in group for o in n.ops if o.trace)
        if trace:
            out.append("**trace from this line:**\n\n" + code_block(trace, 30))
        budget = HOVER_CODE_LINES
        skipped = []
        plain = [n.region.id for n in group if n.region.executor == "torch"] if len(group) > 1 else []
        if plain:
            out.append(", ".join(f"`{r}`" for r in plain) + " run as plain torch calls: their code is the trace above")
        for n in group:
            code = n.region.code
            if not code or n.region.id in plain:
                continue
            if budget <= 0:
                skipped.append(n.region.id)
                continue
            out.append(f"**kernel code ({n.region.id}):**\n\n"
                       + code_block(code, budget, more=" — code action “Show kernel code for this region”"))
            budget -= len(code.strip().splitlines())
        if skipped:
            out.append("kernel code of " + ", ".join(f"`{r}`" for r in skipped)
                       + ": code action “Show kernel code for this region”")
        if all(n.region.executor == "torch" for n in group):
            out += preview_section(res.report, [o for n in group for o in n.ops])
        out.append("---")
    for region, b in boundaries:
        if not any(n.region is region for n in notes):
            out.append(f"**region `{region.id}` ends here:** {b.reason}"
                       + (f" — {b.detail}" if b.detail else ""))
    while out and out[-1] == "---":
        out.pop()
    return "\n\n".join(out)


def _roofline_cell(region) -> str:
    line = region.roofline
    if line is None:
        return "—"
    if line.estimate:
        return f"est. {format_ms(line.min_ms)} on {line.device}"
    return f"{line.pct_of_peak:.0f}% of peak" if line.pct_of_peak is not None else format_ms(line.min_ms)


def report_summary(report: CompileReport) -> str:
    """`3 regions · 4 kernels · 0.12 ms · 2.1x vs eager`, and where measured on a GPU the
    region furthest from its roofline: `· R3 at 12% of peak`."""
    parts = [_plural(len(report.regions), "region"),
             _plural(sum(int(r.kernels or 0) for r in report.regions), "kernel")]
    t = report.timings
    if t is not None and t.compiled is not None:
        parts.append(format_ms(t.compiled.median_ms))
    if t is not None and t.speedup_vs_eager:
        parts.append(f"{t.speedup_vs_eager:.1f}x vs eager")
    worst = furthest_from_roofline(report)
    if worst is not None:
        parts.append(f"{worst.id} at {worst.roofline.pct_of_peak:.0f}% of peak")
    step = backward_views.step_summary(report)
    return " · ".join(parts if step is None else [step, *parts])


def nothing_compiled(report: CompileReport) -> Optional[str]:
    """Why a report that compiled has no region (its call returned no tensor), else None."""
    if report.regions:
        return None
    why = next((d.message for d in report.diagnostics if "nothing to compile" in d.message), None)
    why = why.split(": there is nothing to compile")[0] if why else "the call ran no tensor op"
    return "Nothing to compile: " + shorten(why, 60)


def lens_title(status: str, result: Optional[Result], message: str = "") -> str:
    """The target's code lens, from `DocumentsMixin.target_state`'s (status, message)."""
    if status == "compiling":
        return "Compiling…"
    if status == "not compiled" and message.startswith("compile cancelled"):
        return "Compile & benchmark (last run cancelled)"
    if status == "syntax error":
        return "Not compiled: " + shorten(message, 60)
    ok = result is not None and result.status == "ok" and result.report is not None
    if status == "not allowed":
        if ok and result.report.regions:
            return "Stale (execution disabled): " + report_summary(result.report)
        return "Not compiled: execution disabled (fusionlens.allowExecution)"
    if ok:
        return nothing_compiled(result.report) or report_summary(result.report)
    if result is not None:
        return "Compile failed: " + shorten(result.message or "error", 60) + " · retry"
    return "Compile & benchmark"


def target_hover(name: str, status: str, message: str, result: Optional[Result]) -> str:
    out = [f"### FusionLens target `{name}`", f"status: **{status}**" + (f" — {message}" if message else "")]
    if result is not None and result.report is not None:
        rep = result.report
        out.append(report_summary(rep) + f" · device {rep.device_name or rep.device}")
        t = rep.timings
        if t is not None and t.compiled is not None and t.eager is not None:
            out.append(f"compiled {format_ms(t.compiled.median_ms)} vs eager {format_ms(t.eager.median_ms)}"
                       f" ({t.compiled.method}, {t.compiled.repeats} repeats)")
        if rep.regions:
            out.append("\n".join(f"- `{r.id}` {r.executor}: {len(r.ops)} ops, {timing_text(r)}"
                                 + (f" · {roofline_text(r)}" if r.roofline is not None else "")
                                 for r in rep.regions))
        out += backward_views.target_lines(rep)
        if rep.fallbacks:
            out.append(f"{len(rep.fallbacks)} op(s) fell back to eager PyTorch")
    elif result is not None:
        out.append(f"last compile failed: {result.message}")
    return "\n\n".join(out)
