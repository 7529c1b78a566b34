"""The GPU check (benchmarks/gpu_check.sh) runs whole on a CPU: every step at tiny sizes, each
result a JSON line the moment it is measured, the tables built from the lines at the end. What
the first run on a GPU machine would otherwise find (a missing `python`, a step that buffers its
output, a distributed target run in-process) is found here."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run_on_a_cpu(tmp_path):
    script = REPO / "benchmarks" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text() + (REPO / "benchmarks" / "gpu_check.py").read_text()
    assert "pip install" not in text and "python3" in text  # no network on the GPU machine; no `python` there
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSIONLENS_") and k != "TRITON_INTERPRET"}
    proc = subprocess.run(["bash", str(script), "--dry-run", "--out", str(tmp_path)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    steps = {r["step"]: r["status"] for r in rows if r["kind"] == "step"}
    assert list(steps) == ["nvfuser", "preflight", "tests", "big", "standalone", "examples"], steps
    assert set(steps.values()) == {"ok"}, steps
    kinds = {r["kind"] for r in rows}
    assert {"nvfuser", "preflight", "tests", "big", "standalone", "example"} <= kinds, kinds
    standalone = [r for r in rows if r["kind"] == "standalone"]
    assert {r["case"] for r in standalone} >= {"softmax", "layer_norm", "rms_norm", "gelu_bias", "residual_norm",
                                               "column_sum", "row_sum", "ln_backward"}
    assert all(r["status"] == "ok" for r in standalone), [r for r in standalone if r["status"] != "ok"]
    assert all(r["status"] == "ok" and r["int64"] for r in rows if r["kind"] == "big")
    assert not any(r["kind"] == "example" and ("ddp" in r["example"] or "fsdp" in r["example"]) for r in rows)
    summary = (tmp_path / "summary.md").read_text()
    assert "### standalone" in summary and "dry run" in summary
