"""The page's data: what the HTML report shows, read from a CompileReport and nothing else.

A *plan* is one set of programs the page can show: the regions that ran, or an executor's
preview (the Triton kernels a CPU machine could not run). Every picture of the page (source
heat, fusion graph, roofline, timeline) is drawn for one plan at a time; the page switches.
A region's time in a plan is its measured median where it was measured, else its roofline
estimate on the report's GPU, and the region says which (`basis`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from fusionlens.report import schema as R

# A comment naming a user line in generated code: `# examples/mlp.py:21  x = self.act(x)`.
_CODE_LINE = re.compile(r"#\s+(\S+\.py):(\d+)\b")
# Lines of a file other than the target's shown around each line that has ops.
CONTEXT_LINES = 3


@dataclass
class RegionView:
    """One region as the page shows it: its numbers, its lines, its code line by line."""

    id: str
    program: str
    executor: str
    ops: list[str]
    lines: list[tuple[str, int]]  # (file, line): the user lines whose ops it holds
    time_ms: float | None
    basis: str  # "measured" | "estimate" | "none"
    bound: str | None
    intensity: float | None  # FLOPs per byte
    flops: int | None
    bytes: int | None
    math: str  # the peak that bounds its FLOPs: fp32, tf32, bf16
    roof_ms: float | None
    measured_ms: float | None
    eager_ms: float | None
    boundary: str | None  # why the region ends
    code: list[str]
    code_lines: list[tuple[str, int] | None]  # each code line's user line, where the code names one
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    # the saved tensors it makes (a forward region) or reads (a backward region)
    saved: list[str] = field(default_factory=list)
    module: str = ""  # the nn.Module path its ops share ("h.0.attn"): the fusion graph's group


@dataclass
class Plan:
    key: str  # "ran", or the previewing executor
    label: str
    ran: bool  # its regions ran here (False: a preview, estimates only)
    programs: dict[str, list[RegionView]]  # kind -> its regions in order
    heat: dict[str, float]  # "file:line" -> ms of the regions that line is part of
    # a preview's: the program's own regions that run between its kernels (estimates), by kind:
    # library calls (nodes of the graph) and views (the edges they pass on)
    calls: dict[str, list[RegionView]] = field(default_factory=dict)
    views: dict[str, list[RegionView]] = field(default_factory=dict)
    order: dict[str, list[str]] = field(default_factory=dict)  # a preview's regions and calls as they run


def tensor_bytes(t: R.TensorInfo) -> int | None:
    """numel x itemsize of a static shape; None where a dim is symbolic."""
    size = _ITEMSIZE.get(t.dtype, 4)
    for d in t.shape:
        if not isinstance(d, int):
            return None
        size *= d
    return size


_ITEMSIZE = {"float64": 8, "int64": 8, "complex64": 8, "complex128": 16, "float32": 4, "int32": 4, "float16": 2,
             "bfloat16": 2, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def _tensor(t: R.TensorInfo) -> dict[str, Any]:
    size = tensor_bytes(t)
    return {"name": t.name, "shape": t.shape, "dtype": t.dtype, "bytes": size,
            "size": R.format_bytes(size) if size is not None else None}


def _resolve(path: str, files: list[str]) -> str | None:
    """The report file a path in generated code names (relative, or only a basename)."""
    if path in files:
        return path
    tail = "/" + path.lstrip("./")
    return next((f for f in files if f.endswith(tail)), None)


def code_lines(code: str, lines: list[tuple[str, int]], files: list[str]) -> list[tuple[str, int] | None]:
    """Each line of a region's code with the user line it computes: the last `# file:line`
    comment above it inside the same body (a header comment names only itself); code that names
    no line (a torch call) of a region of one user line maps there whole."""
    out: list[tuple[str, int] | None] = []
    named = any(_CODE_LINE.search(text) for text in code.splitlines())
    whole = lines[0] if len(set(lines)) == 1 and not named else None
    current = whole
    for text in code.splitlines():
        m = _CODE_LINE.search(text)
        if m and (f := _resolve(m.group(1), files)) is not None:
            current = (f, int(m.group(2)))
        elif text[:1] not in ("", " ", "\t"):  # back at the top level: a header or a new def
            current = whole
        out.append(current)
    return out


def _region_view(r: R.Region, program: str, files: list[str], ran: bool) -> RegionView:
    lines = list(dict.fromkeys((s.file, s.line) for s in r.source_lines))
    measured = r.timing.median_ms if ran and r.timing is not None else None
    roof = r.roofline.min_ms if r.roofline is not None else None
    time_ms, basis = (measured, "measured") if measured is not None else (roof, "estimate" if roof is not None
                                                                         else "none")
    cost = r.cost
    intensity = cost.flops / cost.bytes if cost is not None and cost.bytes else None
    boundary = f"{r.boundary.reason}: {r.boundary.detail}" if r.boundary is not None else None
    return RegionView(
        r.id, program, r.executor, list(r.ops), lines, time_ms, basis, r.roofline.bound if r.roofline else None,
        intensity, cost.flops if cost else None, cost.bytes if cost else None, cost.math if cost else "fp32",
        roof, measured,
        r.timing.eager_median_ms if ran and r.timing is not None else None, boundary,
        r.code.splitlines(), code_lines(r.code, lines, files), [_tensor(t) for t in r.inputs],
        [_tensor(t) for t in r.outputs], module=r.module)


def _mark_saved(programs: dict[str, list[RegionView]], training: R.Training | None) -> None:
    """Which forward regions produce, and which backward regions read, a saved tensor."""
    if training is None:
        return
    saved = {t.name for t in training.saved}
    for kind, regions in programs.items():
        for r in regions:
            names = r.outputs if kind == "forward" else r.inputs
            r.saved = [t["name"] for t in names if t["name"] in saved]


def _heat(programs: dict[str, list[RegionView]]) -> dict[str, float]:
    """Each user line's share of its regions' time: a region's time split evenly over its lines."""
    heat: dict[str, float] = {}
    for regions in programs.values():
        for r in regions:
            if r.time_ms is None or not r.lines:
                continue
            for f, n in r.lines:
                key = f"{f}:{n}"
                heat[key] = heat.get(key, 0.0) + r.time_ms / len(r.lines)
    return heat


def is_view(r: RegionView) -> bool:
    """A region that moves no byte and computes nothing: a view, reshape or split of its input."""
    return r.bytes == 0 and not r.flops


def covered(ran: list[RegionView], preview: list[RegionView]) -> dict[str, str]:
    """Each region of `ran` a preview region computes -> that preview region: walked back from
    each preview region's outputs to the regions that make them, stopping at what any preview
    region reads or another makes (the same value names in both plans; a region that ran fused
    wider than the preview's stops there too, not at the program's inputs)."""
    maker = {t["name"]: r for r in ran for t in r.outputs}
    made_by_preview = {t["name"]: p.id for p in preview for t in p.outputs}
    read_by_preview = {t["name"] for p in preview for t in p.inputs}
    out: dict[str, str] = {}
    for p in preview:
        own = {t["name"] for t in p.outputs}
        stop = (read_by_preview | {v for v, by in made_by_preview.items() if by != p.id}) - own
        todo = [t["name"] for t in p.outputs]
        seen: set[str] = set()
        while todo:
            name = todo.pop()
            if name in seen or name in stop:
                continue
            seen.add(name)
            r = maker.get(name)
            if r is not None and r.id not in out:
                out[r.id] = p.id
                todo += [t["name"] for t in r.inputs]
    return out


def between(ran: list[RegionView], preview: list[RegionView]) -> tuple[list[RegionView], list[RegionView], list[str]]:
    """The regions of the program's plan that run between a preview's regions (a preview lists
    only its kernels; linear, SDPA stay torch calls of the program, under the same value names):
    the library calls (drawn as nodes), the views (drawn as the edges they pass on), and the
    ids of the preview's regions and calls in program order (a region where its last op was)."""
    if not preview:
        return [], [], []
    inside = covered(ran, preview)
    rest = [r for r in ran if r.id not in inside]
    at = {r.id: float(i) for i, r in enumerate(ran) if r.id not in inside}
    for i, r in enumerate(ran):
        if r.id in inside:
            at[inside[r.id]] = float(i)
    order = sorted([r.id for r in preview] + [r.id for r in rest if not is_view(r)],
                   key=lambda i: at.get(i, float(len(ran))))
    return [r for r in rest if not is_view(r)], [r for r in rest if is_view(r)], order


def plans(report: R.CompileReport, files: list[str]) -> list[Plan]:
    """The regions that ran, then each executor's preview (same programs, estimates only)."""
    ran = {p.kind: [_region_view(r, p.kind, files, True) for r in p.regions] for p in report.programs}
    where = report.device_name or report.device
    executors = sorted({r.executor for rs in ran.values() for r in rs})
    out = [Plan("ran", f"what ran: {', '.join(executors) or 'nothing'} on {where}", True, ran, {})]
    previews = dict.fromkeys(pv.executor for p in report.programs for pv in p.previews)
    for executor in sorted(previews, key=lambda e: e != "triton"):  # Triton's first: the default preview
        programs = {p.kind: [_region_view(r, p.kind, files, False) for pv in p.previews
                             if pv.executor == executor for r in pv.regions] for p in report.programs}
        reason = next(pv.reason for p in report.programs for pv in p.previews if pv.executor == executor)
        plan = Plan(executor, f"{executor} preview (not run: {reason})", False, programs, {})
        for p in report.programs:
            own = [_region_view(r, p.kind, files, False) for r in p.regions]
            plan.calls[p.kind], plan.views[p.kind], plan.order[p.kind] = between(own, programs[p.kind])
        out.append(plan)
    for plan in out:
        _mark_saved(plan.programs, report.training)
        _mark_saved(plan.calls, report.training)
        # a preview's lines cost their kernels' time and the library calls' between them
        plan.heat = _heat({**plan.programs, **{f"{k} calls": rs for k, rs in plan.calls.items()}})
    return out


def default_plan(plans: list[Plan]) -> str:
    """The plan the page opens on: what ran, unless only torch ran (a machine with no GPU: one
    region an op, not what a GPU would run); then the first fusion executor's preview, the plan
    for the target GPU, with what ran one choice away."""
    ran = plans[0]
    executors = {r.executor for rs in ran.programs.values() for r in rs}
    previews = [p for p in plans[1:] if any(p.programs.values())]
    return previews[0].key if executors <= {"torch"} and previews else ran.key


def report_files(report: R.CompileReport) -> list[str]:
    """The user files the report names: the target's first, then in the order ops name them."""
    named = [report.target.file] if report.target.file else []
    named += [o.file for o in report.ops] + [s.file for p in report.programs for r in p.regions
                                             for s in r.source_lines]
    return [f for f in dict.fromkeys(named) if f]


def shown_lines(path: str, text: str, wanted: set[int], whole: bool) -> list[tuple[int, str]]:
    """The lines of a file the page shows: all of the target's file, else those near `wanted`."""
    lines = text.splitlines()
    if whole:
        return list(enumerate(lines, 1))
    keep = {n for w in wanted for n in range(w - CONTEXT_LINES, w + CONTEXT_LINES + 1) if 1 <= n <= len(lines)}
    return [(n, lines[n - 1]) for n in sorted(keep)]


def read_sources(files: list[str], sources: dict[str, str] | None) -> dict[str, str]:
    """Each file's text: from `sources` where it has the file (an editor's buffer), else read
    from disk (unreadable: left out)."""
    out: dict[str, str] = {}
    for f in files:
        if sources is not None and f in sources:
            out[f] = sources[f]
            continue
        try:
            with open(f, encoding="utf-8") as fh:
                out[f] = fh.read()
        except OSError:
            continue
    return out


def short_path(path: str, root: str | None) -> str:
    """A file as people read it: relative to the target's folder where it is under it."""
    if root:
        rel = os.path.relpath(path, os.path.dirname(root))
        if not rel.startswith(".."):
            return rel
    return os.path.basename(path)
