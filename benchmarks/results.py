"""JSON lines for the GPU check: every result is written the moment it is measured, so a step
killed by its budget (or a machine that goes away) loses nothing already measured; the tables
are built from the lines at the end (benchmarks/gpu_check.py).

A step writes with `emit(kind, **fields)` to the file named by $FUSIONLENS_RESULTS (nowhere
when it is unset: the scripts also run on their own). Each line: {"kind", "step", "time", ...}.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any


def emit(kind: str, **fields: Any) -> None:
    path = os.environ.get("FUSIONLENS_RESULTS")
    if not path:
        return
    row = {"kind": kind, "step": os.environ.get("FUSIONLENS_STEP", ""), "time": round(time.time(), 3), **fields}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read(path: str) -> list[dict[str, Any]]:
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:  # a line cut short by a kill
                    pass
    except OSError:
        pass
    return rows


def _cell(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x).replace("|", "/").replace("\n", " ")


def markdown(rows: list[dict[str, Any]], columns: list[str]) -> str:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(out)


# kind -> the columns of its table, in order
TABLES = {
    "step": ["step", "status", "seconds", "budget", "detail"],
    "preflight": ["device", "torch", "triton", "cuda", "python", "triton_launch", "sms", "l2_mib"],
    "nvfuser": ["status", "detail", "seconds"],
    "tests": ["suite", "passed", "failed", "skipped", "errors", "seconds"],
    "big": ["case", "numel", "dtype", "status", "max_error", "sampled_rows", "seconds"],
    "standalone": ["case", "dtype", "shape", "status", "generated_ms", "launch_ms", "eager_ms", "torch_compile_ms",
                   "vs_eager", "vs_compile", "gbs", "pct_copy", "kernels"],
    "example": ["example", "status", "regions", "compiled_ms", "eager_ms", "torch_compile_ms", "vs_eager"],
    "example_region": ["example", "region", "ops", "region_ms", "eager_ms", "gbs", "pct_copy", "roofline_ms",
                       "pct_peak"],
}


def tables(rows: list[dict[str, Any]]) -> str:
    """Every kind's table, from the lines; kinds with no line are left out."""
    parts = []
    for kind, columns in TABLES.items():
        these = [r for r in rows if r.get("kind") == kind]
        if these:
            parts += [f"### {kind}", "", markdown(these, columns), ""]
    return "\n".join(parts)
