"""The Chrome Trace Event file of a report (fusionlens/report/chrome_trace.py): every slice has the
fields Perfetto and chrome://tracing read, one slice a region per program, in order."""

from __future__ import annotations

import json
import os

import pytest
import torch

from fusionlens.report import chrome_trace
from fusionlens.driver.targets import compile_target

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _check_format(trace: dict) -> list[dict]:
    assert trace["displayTimeUnit"] == "ms"
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    for e in trace["traceEvents"]:
        assert {"name", "ph", "pid", "tid"} <= set(e), e
    for e in slices:
        assert {"name", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e), e
        assert isinstance(e["ts"], float | int) and e["dur"] >= 0
    return slices


def test_a_training_target_has_a_track_a_program_and_a_slice_a_region(tmp_path):
    with torch.random.fork_rng():
        report = compile_target(os.path.join(ROOT, "examples", "train_gpt.py"), "gpt_loss_example", executors=["torch"],
                                benchmark=True, repeats=2)
    path = tmp_path / "trace.json"
    chrome_trace.write([report], str(path))
    trace = json.loads(path.read_text())
    slices = _check_format(trace)
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert sorted(names.values()) == ["backward program", "forward program"]
    for tid, program in enumerate(report.programs, 1):
        mine = [e for e in slices if e["tid"] == tid]
        assert [e["name"].split(" ")[0] for e in mine] == [r.id for r in program.regions]
        assert all(b["ts"] >= a["ts"] + a["dur"] - 1e-3 for a, b in zip(mine, mine[1:]))  # in order, no overlap
    first = next(e for e in slices if e["tid"] == 1)
    assert first["name"].startswith("R0 ") and ".py:" in first["name"]
    assert first["args"]["duration"] == "measured median"
    assert "ops" in first["args"] and "bytes" in first["args"]


def test_an_unmeasured_region_lasts_its_roofline_estimate():
    report = compile_target(os.path.join(ROOT, "examples", "mlp.py"), "mlp_example", executors=["torch"], benchmark=False)
    slices = _check_format(json.loads(chrome_trace.to_json([report])))
    assert slices and all("roofline estimate on" in e["args"]["duration"] for e in slices)
    assert sum(e["dur"] for e in slices) > 0


def test_the_cli_writes_the_trace_beside_its_report(tmp_path, capsys):
    from fusionlens import cli

    path = tmp_path / "mlp.json"
    code = cli.main(["compile", os.path.join(ROOT, "examples", "mlp.py"), "--target", "mlp_example",
                     "--no-benchmark", "--executors", "torch", "--trace", str(path)])
    assert code == 0 and "wrote" in capsys.readouterr().err
    slices = _check_format(json.loads(path.read_text()))
    assert slices and slices[0]["name"].startswith("R0 mlp.py:")


def test_profile_writes_the_torch_profiler_trace_of_the_same_runs_beside_it(tmp_path, capsys):
    from fusionlens import cli

    path = tmp_path / "mlp.json"
    code = cli.main(["compile", os.path.join(ROOT, "examples", "mlp.py"), "--target", "mlp_example", "--repeats", "2",
                     "--executors", "torch", "--trace", str(path), "--profile"])
    assert code == 0 and "mlp.torch.json" in capsys.readouterr().err
    ours = _check_format(json.loads(path.read_text()))
    torch_trace = json.loads((tmp_path / "mlp.torch.json").read_text())
    ranges = [e for e in torch_trace["traceEvents"] if e.get("ph") == "X" and e["name"].startswith("R")]
    for e in ranges:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e), e
    # every region of our trace ran, under its own name, in the profiled runs
    assert {e["name"] for e in ours} <= {e["name"] for e in ranges}


def _trace_processor() -> str | None:
    import shutil

    return os.environ.get("PERFETTO_TRACE_PROCESSOR") or shutil.which("trace_processor_shell")


def test_perfetto_loads_the_trace(tmp_path):
    """Perfetto's trace processor reads the file as slices. The PyPI package downloads its
    binary on first use, which needs the network: without a binary here, skipped."""
    api = pytest.importorskip("perfetto.trace_processor", reason="pip install perfetto")
    binary = _trace_processor()
    if binary is None:
        pytest.skip("no trace_processor_shell here (perfetto downloads it: no network); set PERFETTO_TRACE_PROCESSOR")
    report = compile_target(os.path.join(ROOT, "examples", "mlp.py"), "mlp_example", executors=["torch"],
                            benchmark=False)
    path = tmp_path / "trace.json"
    chrome_trace.write([report], str(path))
    tp = api.TraceProcessor(trace=str(path), config=api.TraceProcessorConfig(bin_path=binary))
    try:
        names = [row.name for row in tp.query("select name from slice order by ts")]
    finally:
        tp.close()
    regions = report.forward.regions
    assert names[:len(regions)] == [f"{r.id} mlp.py:{r.source_lines[0].line}" for r in regions]
