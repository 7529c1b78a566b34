"""A CompileReport as a Chrome Trace Event file: what Perfetto and chrome://tracing open.

Each program (forward, backward) is a track of its regions in execution order, one complete
("X") slice a region named `R3 gpt_block.py:77`, as long as its measured median, or, where it
was not measured, its roofline estimate on the target GPU (the slice's args say which); its
args hold the region's executor, ops, bytes, FLOPs, bound and why it ended. Collectives are
instant events on their program's track. The Trace Event format: docs/report.md names the
fields used (name, ph, ts, dur, pid, tid, args; microseconds).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

from fusionlens.report import schema as R

def events(report: R.CompileReport, pid: int = 1) -> list[dict[str, Any]]:
    """The trace events of a report (a process `pid` of the trace): metadata naming the
    tracks, then each program's slices and collectives."""
    out: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                                  "args": {"name": f"FusionLens {report.target.name} ({report.device_name})"}}]
    for tid, program in enumerate(report.programs, 1):
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"name": f"{program.kind} program"}})
        slices = _program_slices(program, pid, tid)
        out += slices + _collective_marks(report, program.kind, pid, tid, slices)
    return out


def _duration_us(region: R.Region) -> tuple[float, str]:
    if region.timing is not None and region.timing.median_ms is not None:
        return region.timing.median_ms * 1e3, "measured median"
    if region.roofline is not None:
        return region.roofline.min_ms * 1e3, f"roofline estimate on {region.roofline.device}"
    return 0.0, "not measured"


def _label(region: R.Region) -> str:
    where = region.source_lines[0] if region.source_lines else None
    return f"{region.id} {os.path.basename(where.file)}:{where.line}" if where and where.file else region.id


def _program_slices(program: R.ProgramReport, pid: int, tid: int) -> list[dict[str, Any]]:
    slices, ts = [], 0.0
    for region in program.regions:
        dur, source = _duration_us(region)
        args: dict[str, Any] = {"executor": region.executor, "ops": region.ops, "duration": source}
        if region.cost is not None:
            args.update(bytes=region.cost.bytes, flops=region.cost.flops)
        if region.roofline is not None:
            args["bound"] = region.roofline.bound
        if region.boundary is not None:
            args["ends because"] = f"{region.boundary.reason}: {region.boundary.detail}"
        slices.append({"name": _label(region), "cat": region.executor, "ph": "X", "ts": round(ts, 3),
                       "dur": round(dur, 3), "pid": pid, "tid": tid, "args": args})
        ts += dur
    return slices


def _collective_marks(report: R.CompileReport, kind: str, pid: int, tid: int,
                      slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An instant event a collective, at the start of the region that runs it (the end of the
    program's track where a hook runs it: DDP's buckets, after its backward)."""
    starts = {e["name"].split(" ", 1)[0]: e["ts"] for e in slices}
    end = max((e["ts"] + e["dur"] for e in slices), default=0.0)
    return [{"name": f"{c.op} {R.format_bytes(c.bytes)}", "cat": "collective", "ph": "i", "s": "t",
             "ts": starts.get(c.region, end), "pid": pid, "tid": tid,
             "args": {"kind": c.kind, "group_size": c.group_size, "line": c.line, "estimate": c.estimate}}
            for c in report.collectives if c.program == kind]


def to_json(reports: list[R.CompileReport]) -> str:
    """One trace of every report (a file's targets), each its own process."""
    every = [e for pid, r in enumerate(reports, 1) for e in events(r, pid)]
    return json.dumps({"traceEvents": every, "displayTimeUnit": "ms"})


def write(reports: list[R.CompileReport], path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(to_json(reports))


def torch_trace_path(path: str) -> str:
    """Where the torch.profiler trace of a `--trace OUT.json` run goes: OUT.torch.json."""
    root, ext = os.path.splitext(path)
    return f"{root}.torch{ext or '.json'}"


@contextlib.contextmanager
def profiled(path: str | None) -> Iterator[None]:
    """Run the body under torch.profiler (CPU, and CUDA where it is) and write its Chrome trace
    to `path`: with CompileOptions.profile its regions are the ranges fusionlens/executors/profiling.py
    names ("R3 gpt_block.py:77"), beside the torch ops and kernels they ran. None: no profiler."""
    if path is None:
        yield
        return
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        yield
    prof.export_chrome_trace(path)
