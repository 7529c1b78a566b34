"""What a training compile adds in an editor: each line's backward kernels and the
activation memory saved for its backward, and the training step in the target's lens.

A backward region's `source_lines` are the forward lines it differentiates, and a saved
activation's line is the one that produced it (docs/report.md, `backward`), so both land on
the user's own lines: hover shows them, a second inlay hint carries the backward regions beside
the forward one, the lens reads `fwd+bwd 1.4x vs eager · 12 MB saved`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

from compiler.report import CompileReport, format_bytes, format_ms


@dataclasses.dataclass
class BackwardNote:
    regions: list  # backward Regions that differentiate this line
    saved: list  # SavedTensors this line produced
    target: str = ""  # the training target compiled, and the file it is in
    target_path: str = ""
    previews: list = dataclasses.field(default_factory=list)  # (executor, preview region id), Triton first


def annotate(report: Optional[CompileReport], path: str, same: Callable, target: str = "",
             target_path: str = "") -> dict:
    """0-based line of `path` -> BackwardNote; `same(file, path)` compares paths."""
    b = report.backward if report is not None else None
    if b is None:
        return {}
    out: dict = {}

    def note(line: int) -> BackwardNote:
        return out.setdefault(line - 1, BackwardNote([], [], target, target_path))
    for r in b.regions:
        for s in r.source_lines:
            if s.line and same(s.file, path) and r not in note(s.line).regions:
                note(s.line).regions.append(r)
    for t in b.saved:
        if t.kind == "activation" and t.line and same(t.file, path):
            note(t.line).saved.append(t)
    for p in sorted(b.previews or [], key=lambda p: p.get("executor") != "triton"):
        for region in p.get("regions", []):
            for s in region.get("source_lines", []):
                if s.get("line") and same(s.get("file"), path) and (p["executor"], region["id"]) not in note(s["line"]).previews:
                    note(s["line"]).previews.append((p["executor"], region["id"]))
    return out


def repro_of(note: Optional[BackwardNote]) -> Optional[tuple]:
    """(target, region spec, target path, label) of the backward kernel a line's repro script
    is written for: its first fused backward region, else the first preview it joins."""
    if note is None:
        return None
    for r in note.regions:
        if r.executor in ("triton", "nvfuser"):
            return note.target, r.id, note.target_path, r.id
    if note.previews:
        executor, rid = note.previews[0]
        return note.target, f"{executor}:{rid}", note.target_path, f"{executor} preview {rid}"
    return None


def _time(regions: list) -> Optional[float]:
    times = [r.timing.median_ms for r in regions if r.timing is not None and r.timing.median_ms is not None]
    return sum(times) if len(times) == len(regions) and times else None


def hint_label(note: BackwardNote) -> str:
    """`bwd B3 · 12 µs · 1.2 MB saved` (`bwd B3 +4 · triton · ...` untimed): the backward regions
    that differentiate a line, their time, and what the line saves for them."""
    parts = []
    rs = note.regions
    if rs:
        ids = "+".join(r.id for r in rs) if len(rs) <= 2 else f"{rs[0].id} +{len(rs) - 1}"
        parts.append(f"bwd {ids}")
        t = _time(rs)
        if t is not None:
            parts.append(format_ms(t))
        else:
            executors = {r.executor for r in rs}
            parts.append(executors.pop() if len(executors) == 1 else "mixed")
    if note.saved:
        saved = format_bytes(sum(t.bytes for t in note.saved), compact=True)
        parts.append(f"{saved} saved" if rs else f"bwd {saved} saved")
    return " · ".join(parts)


def hover_section(note: Optional[BackwardNote]) -> list:
    """Markdown paragraphs: the line's backward kernels, then what its backward saves."""
    if note is None or not (note.regions or note.saved):
        return []
    out = []
    if note.regions:
        rows = ["| backward region | executor | ops | time |", "|---|---|---|---|"]
        for r in note.regions:
            ops = ", ".join(f"`{o.removeprefix('prims.')}`" for o in r.ops[:4]) + (" …" if len(r.ops) > 4 else "")
            t = r.timing.median_ms if r.timing is not None else None
            rows.append(f"| `{r.id}` | {r.executor} | {ops} | {format_ms(t, missing='—')} |")
        out.append("**backward of this line:**\n\n" + "\n".join(rows))
    if note.saved:
        total = sum(t.bytes for t in note.saved)
        items = ", ".join(f"`{t.name}` {t.dtype}{t.shape}" for t in note.saved[:4]) + (
            " …" if len(note.saved) > 4 else "")
        out.append(f"**saved for backward:** {len(note.saved)} activation{'s' if len(note.saved) != 1 else ''}, "
                   f"{format_bytes(total)} ({items})")
    return out


def step_summary(report: CompileReport) -> Optional[str]:
    """`fwd+bwd 1.4x vs eager · 12 MB saved` for a training compile, else None."""
    b = report.backward
    if b is None:
        return None
    parts = []
    t = b.timings
    if t is not None and t.speedup_vs_eager:
        parts.append(f"fwd+bwd {t.speedup_vs_eager:.1f}x vs eager")
    else:
        parts.append(f"fwd+bwd · {len(b.regions)} backward regions")
    parts.append(f"{format_bytes(b.saved_bytes)} saved")
    return " · ".join(parts)


def target_lines(report: CompileReport) -> list:
    """Lines for the target's hover: the step's timings, the largest saved activations."""
    b = report.backward
    if b is None:
        return []
    out = [step_summary(report)]
    t = b.timings
    if t is not None and t.compiled is not None and t.eager is not None:
        out.append(f"training step: compiled {format_ms(t.compiled.median_ms)} vs eager {format_ms(t.eager.median_ms)}"
                   + (f", torch.compile {format_ms(t.torch_compile.median_ms)}" if t.torch_compile else ""))
    biggest = sorted((s for s in b.saved if s.kind == "activation"), key=lambda s: -s.bytes)[:3]
    if biggest:
        out.append("largest saved: " + ", ".join(
            f"`{s.name}` {format_bytes(s.bytes)} ({os.path.basename(s.file or '?')}:{s.line})" for s in biggest))
    return out
