"""What a compile looks like in an editor: hint labels, hover Markdown, tooltips, lens titles.
Pure functions over annotations.py's notes; no LSP transport here.

Any program is rendered by the same functions; its kind only chooses words (`bwd ` before a
backward program's hint, "backward region" in its hover). What a training forward saves for
the backward (report.training.saved) goes with the backward's hint and hover.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence

from fusionlens.report import kernels as kernel_notes, roofline
from fusionlens.report.schema import (Boundary, Collective, CompileReport, DiagnosticCode, ProgramReport, Region,
                                      SavedTensor, Training, format_bytes, format_ms)
from lsp_server.annotations import LineNote, Result
from lsp_server.linemap import split_lines

HINT_MAX = 40  # "P1 · triton (preview) · est 3.2 µs" fits
HOVER_CODE_LINES = 60
TOOLTIP_REGIONS = 8  # a line that calls into many regions (`x = block(x)`) lists this many in its hint
# the program whose inputs are what a training forward saves: its hint shows them
SAVED_FOR = "backward"
# kind -> (its hints' prefix, what its regions are called)
_WORDS = {"forward": ("", "region"), "backward": ("bwd ", "backward region")}


def words(kind: str) -> tuple[str, str]:
    """(hint prefix, noun) for a program kind; a kind to come reads `<kind> R3`."""
    return _WORDS.get(kind, (f"{kind} ", f"{kind} region"))


def shorten(text: str, limit: int = HINT_MAX) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def region_time(region: Region) -> float | None:
    t = region.timing
    return t.median_ms if t is not None else None


# --- cost and roofline ------------------------------------------------------------------------

def estimated_here(report: CompileReport | None) -> bool:
    """Whether the report ran on a CPU, its rooflines the target GPU's: what the editor shows
    then is estimated GPU time, not the CPU's."""
    return report is not None and report.device == "cpu" and report.peaks is not None


def _si(n: float, unit: str) -> str:
    n = float(n or 0)
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g} {prefix}{unit}"
    return f"{n:.3g} {unit}"


def roofline_text(region: Region) -> str:
    """"est. 4.1 µs on H100 (memory-bound: 1.2 MB, 3.4 MFLOP)", or where it was measured on
    that GPU "45% of peak on H100 (roofline 1.2 µs, memory-bound: ...)"; "" without one."""
    line, cost = region.roofline, region.cost
    if line is None:
        return ""
    work = f": {_si(cost.bytes, 'B')}, {_si(cost.flops, 'FLOP')}" if cost is not None else ""
    how = f"{line.bound}-bound{work}"
    at = f"on {line.device}"
    if line.estimate:
        return f"est. {format_ms(line.min_ms)} {at} ({how})"
    if line.pct_of_peak is None:
        return f"roofline {format_ms(line.min_ms)} {at} ({how})"
    return f"{line.pct_of_peak:.0f}% of peak {at} (roofline {format_ms(line.min_ms)}, {how})"


def headroom_ms(region: Region) -> float | None:
    """What can be won in a region: its measured time minus its roofline minimum (None for
    an estimate: the time was measured on another device)."""
    return roofline.headroom_ms(region_time(region), region.roofline)


def furthest_from_roofline(regions: list[Region]) -> Region | None:
    """The measured region with the most time above its roofline, or None."""
    won = [(h, r) for r in regions if (h := headroom_ms(r))]
    return max(won, key=lambda hr: hr[0])[1] if won else None


# --- inlay hints ------------------------------------------------------------------------------

def _hint_time(region: Region, report: CompileReport | None) -> str:
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


def _regions_parts(notes: list[LineNote]) -> list[str]:
    """The parts of a hint naming regions: what, where, how fast."""
    report = notes[0].result.report
    preview = next((n.preview for n in notes if n.preview is not None), None)
    if preview is not None and estimated_here(report):
        p, region = preview
        est = [f"est {format_ms(region.roofline.min_ms)}"] if region.roofline is not None else []
        return [region.id, f"{p.executor} (preview)", *est]
    regions: list[Region] = []
    for n in notes:
        if n.region not in regions:
            regions.append(n.region)
    ids = "+".join(r.id for r in regions) if len(regions) <= 2 else f"{regions[0].id} +{len(regions) - 1} more"
    executors = {r.executor for r in regions}
    when = _hint_time(regions[0], report) if len(regions) == 1 else ""
    return [ids, executors.pop() if len(executors) == 1 else "mixed", *([when] if when else [])]


def hint_label(notes: list[LineNote], prefix: str = "", saved: Sequence[SavedTensor] = (),
               kind: str = SAVED_FOR) -> str:
    """The hint of one program's regions on a line: `R3 · triton · 0.12 ms` (`· 45% peak`
    when measured on a GPU), `R3+R4 · torch` or `R3 +8 more · torch` for several regions
    (the time only when it is one region's). On a CPU the preview region the line would join
    where Triton (else nvFuser) can run, `P1 · triton (preview) · est 3.2 µs`, else the
    target GPU's estimate, `R3 · torch · est 4.1 µs`. A backward program's hints start `bwd `, and
    the activations the line saves for it come last (`bwd B3 · torch · 512 KB saved`; alone,
    `bwd 512 KB saved`), the time and then the executor left out where all would not fit.
    `kind`: the program's, when `notes` is empty."""
    head = prefix + words(notes[0].program.kind if notes else kind)[0]
    parts = _regions_parts(notes) if notes else []
    if saved:
        memory = f"{format_bytes(sum(t.bytes for t in saved), compact=True)} saved"
        while len(parts) > 1 and len(head + " · ".join([*parts, memory])) > HINT_MAX:
            parts.pop()
        parts.append(memory)
    return shorten(head + " · ".join(parts))


def boundary_label(items: list[tuple[Region, Boundary]]) -> str:
    region, b = items[0]
    return shorten(f"┆ {region.id} ends: {b.reason}")


def boundary_tooltip(items: list[tuple[Region, Boundary]]) -> str:
    return "\n\n".join(f"region `{r.id}` ends here: **{b.reason}**" + (f" — {b.detail}" if b.detail else "")
                       for r, b in items)


def timing_text(region: Region) -> str:
    t = region.timing
    if t is None or t.median_ms is None:
        return "not measured"
    text = format_ms(t.median_ms)
    if t.eager_median_ms:
        text += f" vs eager {format_ms(t.eager_median_ms)}"
        if t.median_ms:
            text += f" ({t.eager_median_ms / t.median_ms:.2f}x)"
    return text


def region_tooltip(note: LineNote, region_lines: list[int]) -> str:
    """A region's part of a hint's tooltip: what it is, its time and roofline, its ops, the
    preview it would join, its lines here now. All but the lines is made once per note (a
    view is made again after every edit; the notes are the result's)."""
    if note.tooltip_parts is None:
        note.tooltip_parts = _tooltip_parts(note)
    head, tail = note.tooltip_parts
    lines = ("\n\nlines: " + ", ".join(str(ln + 1) for ln in region_lines)) if region_lines else ""
    return head + lines + tail


def _tooltip_parts(note: LineNote) -> tuple[str, str]:
    r = note.region
    rep = note.result.report
    noun = words(note.program.kind)[1]
    parts = [f"**FusionLens** {noun} `{r.id}` of `{note.result.target}` · executor `{r.executor}`",
             f"time: {timing_text(r)} · {_plural(r.kernels, 'kernel')}"
             + (f" ({rep.device_name})" if rep is not None and rep.device_name else ""),
             "ops: " + ", ".join(f"`{o}`" for o in r.ops[:12]) + (" …" if len(r.ops) > 12 else "")]
    if roofline_text(r):
        parts.insert(2, f"roofline: {roofline_text(r)}")
    if note.preview is not None and estimated_here(rep):
        p, region = note.preview
        parts.append(f"where {p.executor} can run: `{region.id}` · {roofline_text(region)}")
    return "\n\n".join(parts), (f"\n\nnote: {r.note}" if r.note else "")


def hint_tooltip(notes: list[LineNote], region_lines_of: Callable[[Result, str], list[int]],
                 saved: Sequence[SavedTensor] = ()) -> str:
    """The tooltip of a line's hint: its regions (the first TOOLTIP_REGIONS; the hover has
    them all), what the line saves for the backward."""
    tips = [region_tooltip(n, region_lines_of(n.result, n.region.id)) for n in notes[:TOOLTIP_REGIONS]]
    if len(notes) > TOOLTIP_REGIONS:
        tips.append(f"… and {_plural(len(notes) - TOOLTIP_REGIONS, 'more region')}: hover the line for all")
    return "\n\n---\n\n".join(tips + ([saved_section(saved)] if saved else []))


# --- hover ------------------------------------------------------------------------------------

def code_block(code: str, limit: int = HOVER_CODE_LINES, more: str = "") -> str:
    lines = split_lines(code.rstrip())
    extra = ""
    if len(lines) > limit:
        extra = f"\n\n… {len(lines) - limit} more lines{more}"
        lines = lines[:limit]
    body = "\n".join(lines).replace("```", "`​``")
    return f"```python\n{body}\n```{extra}"


def _ends_here(region: Region, b: Boundary, named: bool = True) -> str:
    what = f"region `{region.id}` ends here:" if named else "region ends here:"
    return f"**{what}** {b.reason}" + (f" — {b.detail}" if b.detail else "")


def _region_section(n: LineNote, other: list[int], boundaries: list[tuple[Region, Boundary]]) -> list[str]:
    r = n.region
    rep = n.result.report
    out = [f"### FusionLens · {words(n.program.kind)[1]} `{r.id}` · `{r.executor}`"]
    dev = f" on {rep.device_name}" if rep is not None and rep.device_name else ""
    out.append(f"target `{n.result.target}` · {timing_text(r)}{dev} · {_plural(r.kernels, 'kernel')}")
    if roofline_text(r):
        out.append(f"**roofline:** {roofline_text(r)}")
    out += kernel_notes.markdown(r)  # its Triton kernels: launch, sm_90 compile, findings (docs/kernels.md)
    if n.ops:
        out.append("**ops from this line:** " + ", ".join(f"`{o.name}`" for o in n.ops))
    out.append("**region ops:** " + ", ".join(f"`{o}`" for o in r.ops[:20])
               + (f" … ({len(r.ops)} in all)" if len(r.ops) > 20 else ""))
    out.append("**same region:** " + (", ".join(f"line {ln + 1}" for ln in other) if other
                                      else "only this line"))
    out += [_ends_here(region, b, named=False) for region, b in boundaries if region is r]
    if r.note:
        out.append(f"**note:** {r.note}")
    return out


def _ops_cell(n: LineNote) -> str:
    """The line's traced ops in the region, else (a backward region) the region's own."""
    names = [o.name for o in n.ops] or [o.removeprefix("prims.") for o in n.region.ops]
    return ", ".join(f"`{o}`" for o in names[:4]) + (" …" if len(names) > 4 else "")


def _regions_table(group: list[LineNote], boundaries: list[tuple[Region, Boundary]],
                   others: list[int]) -> list[str]:
    """Several regions of one program on a line: a table, the lines they also cover."""
    res = group[0].result
    rep = res.report
    dev = f" on {rep.device_name}" if rep is not None and rep.device_name else ""
    ops = "ops from this line" if any(n.ops for n in group) else "ops"
    rows = [f"| region | executor | {ops} | time | eager | roofline |", "|---|---|---|---|---|---|"]
    for n in group:
        t = n.region.timing
        rows.append(f"| `{n.region.id}` | {n.region.executor} | {_ops_cell(n)}"
                    f" | {format_ms(t.median_ms if t else None, missing='—')}"
                    f" | {format_ms(t.eager_median_ms if t else None, missing='—')}"
                    f" | {_roofline_cell(n.region)} |")
    out = [f"### FusionLens · {len(group)} {words(group[0].program.kind)[1]}s · target `{res.target}`",
           "\n".join(rows),
           f"times{dev}; **these regions also cover:** "
           + (", ".join(f"line {ln + 1}" for ln in others) if others else "no other line")]
    out += [_ends_here(region, b) for region, b in boundaries if any(n.region is region for n in group)]
    return out


def _code_sections(group: list[LineNote], budget: list[int]) -> list[str]:
    """The regions' generated code, as much as `budget[0]` lines allow (shared by the hover)."""
    out = []
    skipped = []
    plain = [n.region.id for n in group if n.region.executor == "torch"] if len(group) > 1 else []
    if plain:
        out.append(", ".join(f"`{r}`" for r in plain) + " run as plain torch calls: their code is the trace above")
    for n in group:
        code = n.region.code
        if not code or n.region.id in plain:
            continue
        if budget[0] <= 0:
            skipped.append(n.region.id)
            continue
        out.append(f"**kernel code ({n.region.id}):**\n\n"
                   + code_block(code, budget[0], more=" — code action “Show kernel code for this region”"))
        budget[0] -= len(split_lines(code.strip()))
    if skipped:
        out.append("kernel code of " + ", ".join(f"`{r}`" for r in skipped)
                   + ": code action “Show kernel code for this region”")
    return out


def preview_section(group: list[LineNote]) -> list[str]:
    """What a fusion executor that cannot run here (Triton or nvFuser without a GPU) would
    make of this line: the preview region its regions' notes join."""
    n = next((n for n in group if n.preview is not None), None)
    if n is None or n.preview is None:
        return []
    p, region = n.preview
    lines = {o.line for m in group for o in m.ops} or {m.line + 1 for m in group}
    others = sorted({s.line for s in region.source_lines} - lines)
    also = f" with line{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}" if others else ""
    est = f" · {roofline_text(region)}" if roofline_text(region) else ""
    return [f"**where {p.executor} can run** (not here: {p.reason}), it would fuse this line{also} into one "
            f"kernel `{region.id}` ({len(region.ops)} ops){est}:",
            *kernel_notes.markdown(region),  # its launch, its compile for the target GPU, findings
            code_block(region.code, HOVER_CODE_LINES)]


def collective_label(found: Sequence[Collective]) -> str:
    """`all_reduce 2.0 MB · 0.31 ms (slowest rank) · overlapped`: a line's communication, at its
    end; outside a launch (nothing measured) its estimate on the cluster instead of the time."""
    parts = []
    for c in found:
        took = f" · {format_ms(c.time_ms.max)} (slowest rank)" if c.time_ms is not None else ""
        est = f" · {c.estimate}" if c.estimate and c.time_ms is None else ""
        overlapped = " · overlapped" if c.overlapped_by else ""
        parts.append(f"{c.op} {format_bytes(c.bytes, compact=True)}{took}{est}{overlapped}")
    return "; ".join(parts)


def collective_section(found: Sequence[Collective]) -> str:
    """A hover's words on a line's collectives: bytes per rank over the group, each rank's time,
    the model on this machine beside the measurement, the estimate on the cluster with its
    exposed part, and the regions it overlaps."""
    blocks = []
    for c in found:
        lines = [f"**{c.op}** ({c.program} program, region `{c.region or '-'}`): {format_bytes(c.bytes)} a rank "
                 f"over {c.group_size} ranks"]
        if c.time_ms is not None:
            lines.append(f"- {format_ms(c.time_ms.min)} / {format_ms(c.time_ms.median)} / "
                         f"{format_ms(c.time_ms.max)} (fastest / median / slowest rank)")
        timed = [(rank, t) for rank, t in enumerate(c.rank_ms) if t is not None]
        if timed:
            lines.append("- per rank: " + " · ".join(f"rank {rank} {format_ms(t)}" for rank, t in timed))
        if c.time_ms is not None and c.model_ms is not None:
            lines.append(f"- measured {format_ms(c.time_ms.max)} · model {format_ms(c.model_ms)} "
                         "(the cost model on this machine's calibrated link)")
        if c.estimate:
            lines.append(f"- {c.estimate}")
        if c.overlapped_by:
            lines.append(f"- overlapped by {', '.join(f'`{r}`' for r in c.overlapped_by)}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def saved_section(saved: Sequence[SavedTensor]) -> str:
    total = sum(t.bytes for t in saved)
    shown = [f"`{t.name}` {t.dtype}[{', '.join(map(str, t.shape))}]" for t in saved[:4]]  # a symbol's dims: s0
    items = ", ".join(shown) + (" …" if len(saved) > 4 else "")
    return (f"**saved for backward:** {_plural(len(saved), 'activation')}, {format_bytes(total)} ({items})")


def program_groups(notes: list[LineNote]) -> list[list[LineNote]]:
    """A line's notes by result and program, in their order."""
    groups: dict[tuple[int, str], list[LineNote]] = {}
    for n in notes:
        groups.setdefault((id(n.result), n.program.kind), []).append(n)
    return list(groups.values())


def guard_section(messages: list[str]) -> str:
    """A line whose branch read a tensor's value: what the program checks at each call."""
    items = "\n".join(f"- {m}" for m in dict.fromkeys(messages))
    return f"**value guard** (checked at each call; another value compiles the other branch):\n\n{items}"


def hover_markdown(notes: list[LineNote], boundaries: list[tuple[Region, Boundary]],
                   region_lines_of: Callable[[Result, str], list[int]], line: int,
                   saved: Sequence[SavedTensor] = ()) -> str:
    """Markdown for a compiled line, a section per program of each result: one region's
    details, or a table of several (a line whose ops went to several regions); the trace from
    this line, as much kernel code as fits; then what the line saves for the backward.
    `region_lines_of(result, region_id)`: the region's current lines (0-based) here."""
    out: list[str] = []
    budget = [HOVER_CODE_LINES]
    for group in program_groups(notes):
        res = group[0].result
        others = sorted({ln for n in group for ln in region_lines_of(res, n.region.id)} - {line})
        if len(group) == 1:
            out += _region_section(group[0], others, boundaries)
        else:
            out += _regions_table(group, boundaries, others)
        trace = "\n".join(o.trace for n in group for o in n.ops if o.trace)
        if trace:
            out.append("**trace from this line:**\n\n" + code_block(trace, 30))
        out += _code_sections(group, budget)
        if all(n.region.executor == "torch" for n in group):
            out += preview_section(group)
        out.append("---")
    if saved:
        out.append(saved_section(saved))
    out += [_ends_here(region, b) for region, b in boundaries if not any(n.region is region for n in notes)]
    while out and out[-1] == "---":
        out.pop()
    return "\n\n".join(out)


_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]*)`")


def plain_text(markdown: str) -> str:
    """A hover's Markdown as plain text, for a client that shows none (eglot without
    markdown-mode asks for plaintext): no markup characters, code blocks indented, tables
    aligned in columns, rules drawn."""
    out: list[str] = []
    table: list[list[str]] = []
    in_code = False
    for line in markdown.split("\n"):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            out.append("    " + line.replace("`\u200b``", "```"))  # code_block's escape of a fence
            continue
        if line.startswith("|"):
            cells = [_plain_inline(c.strip()) for c in line.strip().strip("|").split("|")]
            if not all(c and set(c) <= set("-:") for c in cells):  # not the header's underline
                table.append(cells)
            continue
        if table:
            out += _columns(table)
            table = []
        if line == "---":
            out.append("─" * 40)
        else:
            out.append(_plain_inline(line.lstrip("#").lstrip() if line.startswith("#") else line))
    return "\n".join(out + _columns(table))


def _plain_inline(text: str) -> str:
    return _CODE.sub(r"\1", _BOLD.sub(r"\1", text))


def _columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) if i < len(r) else 0 for r in rows) for i in range(max((len(r) for r in rows), default=0))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _roofline_cell(region: Region) -> str:
    line = region.roofline
    if line is None:
        return "—"
    if line.estimate:
        return f"est. {format_ms(line.min_ms)} on {line.device}"
    return f"{line.pct_of_peak:.0f}% of peak" if line.pct_of_peak is not None else format_ms(line.min_ms)


# --- lens and the target's hover --------------------------------------------------------------

def program_summary(program: ProgramReport) -> list[str]:
    """`3 regions · 4 kernels · 0.12 ms · 2.1x vs eager` as parts (timings where it has them)."""
    parts = [_plural(len(program.regions), words(program.kind)[1]),
             _plural(sum(int(r.kernels or 0) for r in program.regions), "kernel")]
    t = program.timings
    if t is not None and t.compiled is not None:
        parts.append(format_ms(t.compiled.median_ms))
    if t is not None and t.speedup_vs_eager:
        parts.append(f"{t.speedup_vs_eager:.1f}x vs eager")
    return parts


def step_summary(report: CompileReport) -> str | None:
    """`fwd+bwd 1.4x vs eager · 12 MB saved` for a training compile, else None."""
    training = report.training
    if training is None:
        return None
    t = training.step
    if t is not None and t.speedup_vs_eager:
        step = f"fwd+bwd {t.speedup_vs_eager:.1f}x vs eager"
    else:
        backward = report.program(SAVED_FOR)
        step = f"fwd+bwd · {_plural(len(backward.regions) if backward else 0, words(SAVED_FOR)[1])}"
    return f"{step} · {format_bytes(training.saved_bytes)} saved"


def report_summary(report: CompileReport) -> str:
    """The training step where there is one, then the forward program's summary, and where
    measured on a GPU the region furthest from its roofline: `· R3 at 12% of peak`."""
    parts = program_summary(report.forward)
    worst = furthest_from_roofline(report.all_regions())
    if worst is not None and worst.roofline is not None:
        parts.append(f"{worst.id} at {worst.roofline.pct_of_peak:.0f}% of peak")
    step = step_summary(report)
    return " · ".join(parts if step is None else [step, *parts])


def nothing_compiled(report: CompileReport) -> str | None:
    """Why a report that compiled has no region (its call returned no tensor), else None."""
    if report.all_regions():
        return None
    diag = next((d for d in report.diagnostics if d.code == DiagnosticCode.NOTHING_TO_COMPILE), None)
    why = diag.message.split(": ")[0] if diag is not None else "the call ran no tensor op"
    return "Nothing to compile: " + shorten(why, 60)


def lens_title(status: str, result: Result | None, message: str = "", cancelled: bool = False) -> str:
    """The target's code lens, from `Jobs.target_state`'s (status, message); `cancelled`: the
    target's latest run was cancelled."""
    if status == "compiling":
        return "Compiling…"
    if status == "not compiled" and cancelled:
        return "Compile & benchmark (last run cancelled)"
    if status == "syntax error":
        return "Not compiled: " + shorten(message, 60)
    report = result.report if result is not None and result.status == "ok" else None
    if status == "not allowed":
        if report is not None and report.all_regions():
            return "Stale (execution disabled): " + report_summary(report)
        return "Not compiled: execution disabled (fusionlens.allowExecution)"
    if report is not None:
        return nothing_compiled(report) or report_summary(report)
    if result is not None:
        return "Compile failed: " + shorten(result.message or "error", 60) + " · retry"
    return "Compile & benchmark"


def _training_lines(report: CompileReport, training: Training) -> list[str]:
    """The target's hover of a training compile: the step's timings, the largest saved activations."""
    out = [step_summary(report) or ""]
    t = training.step
    if t is not None and t.compiled is not None and t.eager is not None:
        out.append(f"training step: compiled {format_ms(t.compiled.median_ms)} vs eager {format_ms(t.eager.median_ms)}"
                   + (f", torch.compile {format_ms(t.torch_compile.median_ms)}" if t.torch_compile else ""))
    biggest = sorted((s for s in training.saved if s.kind == "activation"), key=lambda s: -s.bytes)[:3]
    if biggest:
        out.append("largest saved: " + ", ".join(
            f"`{s.name}` {format_bytes(s.bytes)} ({os.path.basename(s.file or '?')}:{s.line})" for s in biggest))
    return out


def target_hover(name: str, status: str, message: str, result: Result | None) -> str:
    out = [f"### FusionLens target `{name}`", f"status: **{status}**" + (f" — {message}" if message else "")]
    if result is not None and result.report is not None:
        rep = result.report
        out.append(report_summary(rep) + f" · device {rep.device_name or rep.device}")
        t = rep.forward.timings
        if t is not None and t.compiled is not None and t.eager is not None:
            out.append(f"compiled {format_ms(t.compiled.median_ms)} vs eager {format_ms(t.eager.median_ms)}"
                       f" ({t.compiled.method}, {t.compiled.repeats} repeats)")
        for program in rep.programs:
            if program.regions:
                out.append("\n".join(f"- `{r.id}` {r.executor}: {len(r.ops)} ops, {timing_text(r)}"
                                     + (f" · {roofline_text(r)}" if r.roofline is not None else "")
                                     for r in program.regions))
        if rep.training is not None:
            out += _training_lines(rep, rep.training)
        if rep.fallbacks:
            out.append(f"{len(rep.fallbacks)} op(s) fell back to eager PyTorch")
    elif result is not None:
        out.append(f"last compile failed: {result.message}")
    return "\n\n".join(out)
