"""`fusionlens compile FILE --nproc N`: N ranks launched through torch.distributed.run, one
merged report. The merge and the schema are tested on fake per-rank reports; the launches
(marked `distributed`) run 2 gloo ranks on examples/ddp_train.py, fsdp_train.py (FSDP2) and
tp_mlp.py (tensor parallel), 4 on a tiny all_reduce, and 2 and 4 on a target that fails on
rank 1 only (2 on a tensor-parallel one that raises on rank 1 while rank 0 communicates)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fusionlens import cli
from fusionlens.driver import launch
from fusionlens.report import schema as R
from fusionlens.report.discovery import find_targets

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "ddp_train.py"
FSDP_EXAMPLE = REPO / "examples" / "fsdp_train.py"
TP_EXAMPLE = REPO / "examples" / "tp_mlp.py"


def _region(rid: str, median: float) -> R.Region:
    return R.Region(rid, "torch", ["torch.sin"], [R.SourceLine("/x.py", 3)], "", [], [],
                    timing=R.RegionTiming(median, median, 0.0))


def _rank_report(rank: int, times: dict[str, float], bucket_ms: float) -> R.CompileReport:
    """One rank's report as a worker leaves it: its regions' times, its collectives' own times
    and its `ranks` entry."""
    timing = R.Timing(1.0 + rank, 1, 1, 0, 3, "perf_counter", "cpu")
    forward = R.ProgramReport("forward", {"execution": "def t(x): ..."},
                              [_region("R0", times["R0"]), _region("R1", times["R1"])],
                              timings=R.ProgramTimings("cpu", timing, timing, speedup_vs_eager=1.0))
    backward = R.ProgramReport("backward", {"execution": "def t_backward(g0): ..."}, [_region("B0", times["B0"])])
    collectives = [R.Collective("all_reduce", "traced", 16, 2, "forward", "R1", "/x.py", 4),
                   R.Collective("all_reduce", "ddp-bucket", 848, 2, "backward")]
    collective_ms = [times["R1"], bucket_ms]
    ranks = [R.RankReport(rank, "cpu", 10.0 * (rank + 1), forward.timings, None, dict(times), collective_ms)]
    return R.CompileReport(R.Target("t", "/x.py", 1, 5), programs=[forward, backward], collectives=collectives,
                           compile_ms=10.0 * (rank + 1), ranks=ranks)


def _merged() -> tuple[R.CompileReport, list[R.CompileReport]]:
    per_rank = [_rank_report(0, {"R0": 1.0, "R1": 0.5, "B0": 2.0}, 0.2),
                _rank_report(1, {"R0": 3.0, "R1": 0.4, "B0": 1.0}, 0.6),  # rank 1 straggles in R0
                _rank_report(2, {"R0": 2.0, "R1": 0.9, "B0": 1.5}, 0.4)]
    return launch.merge(per_rank), per_rank


def test_merge_lists_every_rank_and_spreads_collectives_over_them():
    merged, per_rank = _merged()
    assert [r.rank for r in merged.ranks] == [0, 1, 2]
    assert [r.compile_ms for r in merged.ranks] == [10.0, 20.0, 30.0]
    assert merged.compile_ms == 10.0 and merged.forward.timings.compiled.median_ms == 1.0  # rank 0's
    traced, bucket = merged.collectives
    assert (traced.time_ms.min, traced.time_ms.median, traced.time_ms.max) == (0.4, 0.5, 0.9)
    assert (bucket.time_ms.min, bucket.time_ms.median, bucket.time_ms.max) == (0.2, 0.4, 0.6)
    assert traced.rank_ms == [0.5, 0.4, 0.9] and bucket.rank_ms == [0.2, 0.6, 0.4]  # each rank's, in rank order
    assert per_rank[0].ranks == [merged.ranks[0]] and per_rank[0].collectives[0].time_ms is None  # not mutated


def test_merge_names_the_slowest_rank_of_each_region():
    merged, _ = _merged()
    slowest = {r.id: (r.timing.slowest_ms, r.timing.slowest_rank) for r in merged.all_regions()}
    assert slowest == {"R0": (3.0, 1), "R1": (0.9, 2), "B0": (2.0, 0)}
    assert merged.forward.region("R0").timing.median_ms == 1.0  # the table's own time stays rank 0's
    text = cli.render(merged)
    assert "slowest rank" in text and "3.00 ms (rank 1)" in text
    assert "-- ranks (3) --" in text and "0.60 ms (min 0.20 ms, median 0.40 ms)" in text


def test_merged_report_round_trips_and_schema_4_still_reads():
    merged, _ = _merged()
    again = R.CompileReport.from_json(merged.to_json())
    assert again.ranks == merged.ranks and again.collectives[1].time_ms == merged.collectives[1].time_ms
    assert again.schema_version == R.SCHEMA_VERSION == 5
    old = merged.to_dict()  # as a schema-4 writer wrote it: none of schema 5's fields
    old["schema_version"] = 4
    del old["ranks"]
    for c in old["collectives"]:
        del c["time_ms"]
    for p in old["programs"]:
        for r in p["regions"]:
            del r["timing"]["slowest_ms"], r["timing"]["slowest_rank"]
    read = R.CompileReport.from_dict(old)
    assert read.ranks == [] and read.collectives[0].time_ms is None and read.schema_version == 4
    assert read.forward.region("R0").timing.slowest_ms is None


def test_the_model_on_the_calibrated_link_gives_back_the_fit_beside_each_measurement():
    merged, _ = _merged()
    fit = R.Calibration("gloo", 2, 10e-6, 1e-9, [4096, 1 << 20], [14.096e-6, 1.058576e-3])
    unmodelled = merged
    merged = launch.with_model(merged, fit)
    assert unmodelled.collectives[0].model_ms is None  # a new report: the one given is not changed
    traced, bucket = merged.collectives
    # a ring all_reduce on the measured 2-rank link takes alpha + beta n, as fitted: 10 us + 16 ns, 10 us + 848 ns
    assert traced.model_ms == pytest.approx(10.016e-3) and bucket.model_ms == pytest.approx(10.848e-3)
    merged = dataclasses.replace(merged, ranks=[dataclasses.replace(merged.ranks[0], calibration=fit),
                                                *merged.ranks[1:]])
    text = cli.render(merged)
    assert "model here" in text and "10.8 µs" in text, text
    assert "model here: all_reduce on 2 gloo ranks = 10 us + 1 ns a byte, 1 GB/s (calibrated, 2 sizes)" in text
    assert R.CompileReport.from_json(merged.to_json()).ranks[0].calibration == fit
    merged = dataclasses.replace(merged, collectives=[
        dataclasses.replace(c, estimate=f"est {est} ms on 64x8xH100 (ring), {exposed} ms exposed", estimate_ms=est,
                            exposed_ms=exposed)
        for c, (est, exposed) in zip(merged.collectives, [(1.2, 0.3), (0.5, 0.5)])])
    assert "estimated communication: 0.80 ms of 1.70 ms exposed" in cli.render(merged)
    unfit = launch.with_model(merged, R.Calibration("gloo", 2, 10e-6, -1e-9))  # a failed fit: no model, nothing raised
    assert unfit.collectives[0].model_ms == pytest.approx(10.016e-3)


def test_discovery_reads_nproc():
    targets = {t.name: t for t in find_targets(EXAMPLE.read_text(), str(EXAMPLE))}
    assert targets["ddp_mlp"].nproc == 2 and targets["ddp_mlp"].train
    assert targets["all_reduce_sum"].nproc == 2 and not targets["all_reduce_sum"].train
    assert find_targets("@example(nproc=0)\ndef f(): pass\n")[0].nproc is None


def _fusionlens(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "fusionlens.cli", "compile", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO)


@pytest.mark.distributed
def test_two_ranks_of_ddp_and_all_reduce_merge_into_one_report():
    run = _fusionlens(str(EXAMPLE), "--json", "--repeats", "3")
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    ddp, reduced = (R.CompileReport.from_dict(d) for d in json.loads(run.stdout))
    for report in (ddp, reduced):
        assert report.status == "ok" and [r.rank for r in report.ranks] == [0, 1], report.ranks
        assert all(r.device == "cpu" and r.timings.compiled.median_ms > 0 for r in report.ranks)
        timed = [r for r in report.all_regions() if r.timing and r.timing.slowest_ms is not None]
        assert timed and all(r.timing.slowest_rank in (0, 1) for r in timed)
    # DDP's gradient buckets: all-reduces of the backward (traced where the compiled backward issues them)
    buckets = [c for c in ddp.collectives if c.program == "backward" and c.op.startswith("all_reduce")]
    assert sum(c.bytes for c in buckets) == (64 * 256 + 256 + 256 * 64 + 64) * 4, ddp.collectives
    assert ddp.program("backward") is not None and all(r.step is not None for r in ddp.ranks)
    (traced,) = reduced.collectives
    line = next(i for i, text in enumerate(EXAMPLE.read_text().splitlines(), 1) if "dist.all_reduce(y)" in text)
    assert (traced.op, traced.kind, traced.bytes, traced.group_size, traced.line) == ("all_reduce", "traced",
                                                                                    4096, 2, line)
    for c in buckets + [traced]:
        t = c.time_ms
        assert t is not None and 0 < t.min <= t.median <= t.max, c
    # its issue's region and its wait's, which follows at once: nothing overlaps it
    issue, wait = (reduced.forward.region(r).timing for r in (traced.region, traced.wait_region))
    assert not traced.overlapped_by and traced.wait_region and issue.slowest_ms <= traced.time_ms.max, traced
    assert abs(traced.rank_ms[0] - (issue.median_ms + wait.median_ms)) < 1e-5, (traced, issue, wait)  # rank 0's
    for report in (ddp, reduced):  # the calibration: the model on this machine beside each measurement
        fits = [r.calibration for r in report.ranks]
        assert all(f is not None and f.backend == "gloo" and f.world == 2 and len(f.sizes) >= 2 for f in fits), fits
        assert all(len(c.rank_ms) == 2 and (c.model_ms is not None) == (fits[0].beta_s > 0)
                   for c in report.collectives), report.collectives


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _native_and_merged(report: R.CompileReport) -> None:
    """Compiled natively on both ranks (no signature eager, no wrapping refused) and merged: every
    collective traced, timed on each rank, each timed region's slowest rank named."""
    assert report.status == "ok" and [r.rank for r in report.ranks] == [0, 1], report.ranks
    assert not [d for d in report.diagnostics if d.code in (R.DiagnosticCode.EAGER_FALLBACK,
                                                            R.DiagnosticCode.COLLECTIVE)], report.diagnostics
    assert report.collectives and all(c.kind == "traced" and c.region and c.group_size == 2
                                      for c in report.collectives), report.collectives
    for c in report.collectives:
        assert len(c.rank_ms) == 2 and c.time_ms is not None and 0 < c.time_ms.min <= c.time_ms.max, c
    timed = [r for r in report.all_regions() if r.timing and r.timing.slowest_ms is not None]
    assert timed and all(r.timing.slowest_rank in (0, 1) for r in timed)


@pytest.mark.distributed
def test_two_ranks_of_fsdp2_training_compile_natively_with_their_gathers_at_the_block_lines():
    run = _fusionlens(str(FSDP_EXAMPLE), "--json", "--repeats", "3")
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    report = R.CompileReport.from_dict(json.loads(run.stdout))
    _native_and_merged(report)
    assert report.training is not None and all(r.step is not None for r in report.ranks)
    fc1, fc2 = _line(FSDP_EXAMPLE, "self.fc1(x)"), _line(FSDP_EXAMPLE, "self.fc2(h)")
    gathers = {c.line: c for c in report.collectives if c.op == "all_gather_into_tensor" and c.program == "forward"}
    # what each rank sends: its half of the block's weight and bias rows, float32
    assert {line: c.bytes for line, c in gathers.items()} == {fc1: 128 * (64 + 1) * 4, fc2: 32 * (256 + 1) * 4}
    assert gathers[fc2].overlapped_by, gathers[fc2]  # issued one block ahead: fc1's compute overlaps it
    scatters = {c.line: c for c in report.collectives if c.op == "reduce_scatter_tensor"}
    assert {line: (c.program, c.bytes) for line, c in scatters.items()} == {
        line: ("backward", 2 * c.bytes) for line, c in gathers.items()}, report.collectives
    text = cli.render(report)
    assert "-- collectives --" in text and "all_gather_into_tensor" in text and "fsdp_train.py:" in text, text


@pytest.mark.distributed
def test_two_ranks_of_tensor_parallel_compile_natively_with_their_all_reduces_at_the_layer_lines():
    run = _fusionlens(str(TP_EXAMPLE), "--json", "--repeats", "3")
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    inference, training = (R.CompileReport.from_dict(d) for d in json.loads(run.stdout))
    fc1, fc2 = _line(TP_EXAMPLE, "self.fc1(x)"), _line(TP_EXAMPLE, "self.fc2(h)")
    for report in (inference, training):
        _native_and_merged(report)
    # the rowwise fc2's partial products summed forward; in training, the colwise fc1's input's gradient backward
    activations = 32 * 64 * 4
    assert [(c.op, c.program, c.line, c.bytes) for c in inference.collectives] == [
        ("all_reduce", "forward", fc2, activations)], inference.collectives
    assert sorted((c.op, c.program, c.line, c.bytes) for c in training.collectives) == [
        ("all_reduce", "backward", fc1, activations), ("all_reduce", "forward", fc2, activations)], training.collectives
    forward = inference.forward.traces["execution"]
    assert "= all_reduce(" in forward and training.program("backward") is not None, forward


RAISES_WHILE_TRACED = '''import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
import compiler


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 4)

    def forward(self, x):
        y = self.fc2(self.fc1(x))  # rank 0 all-reduces here while rank 1 raises below
        if dist.get_rank() == 1:
            raise ValueError("rank one cannot trace")
        return y


@compiler.example(nproc=2)
def tp():
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = parallelize_module(MLP(), mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    return model, (torch.randn(2, 4),)
'''


@pytest.mark.distributed
def test_a_rank_that_raises_while_a_tensor_parallel_module_is_traced_ends_the_run(tmp_path):
    target = tmp_path / "tp_raises.py"
    target.write_text(RAISES_WHILE_TRACED)
    start = time.monotonic()
    run = _fusionlens(str(target), "--nproc", "2", timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"{target}:16: error: rank 1:" in run.stderr and "rank one cannot trace" in run.stderr, run.stderr[-4000:]
    assert time.monotonic() - start < 60


FOUR = '''import torch
import torch.distributed as dist
import compiler


def summed(x):
    y = x + 1
    dist.all_reduce(y)
    return y * 2


@compiler.example(nproc=4)
def four():
    return summed, (torch.full((8,), float(dist.get_rank())),)
'''


@pytest.mark.distributed
def test_four_ranks_merge_into_one_report(tmp_path):
    target = tmp_path / "four.py"
    target.write_text(FOUR)
    run = _fusionlens(str(target), "--json", "--repeats", "2", "--cluster", "8xH100")
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    report = R.CompileReport.from_dict(json.loads(run.stdout))  # one target: one report
    assert report.status == "ok" and [r.rank for r in report.ranks] == [0, 1, 2, 3], report.ranks
    (c,) = report.collectives
    assert (c.op, c.bytes, c.group_size, c.line) == ("all_reduce", 32, 4, 8)
    assert len(c.rank_ms) == 4 and all(t is not None and t > 0 for t in c.rank_ms), c
    assert c.time_ms.max == max(c.rank_ms) and all(r.calibration.world == 4 for r in report.ranks)
    # synchronous: all of its estimate is exposed
    assert c.exposed_ms == c.estimate_ms and c.estimate.endswith("exposed") and "on 8xH100" in c.estimate


@pytest.mark.distributed
@pytest.mark.parametrize("nproc", [2, 4])
def test_a_rank_that_raises_ends_the_run_with_its_error(tmp_path, nproc):
    target = tmp_path / "broken.py"
    target.write_text(
        "import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel\n"
        "import compiler\n\n\n@compiler.example(nproc=2)\ndef broken():\n    model = torch.nn.Linear(4, 4)\n"
        "    if dist.get_rank() == 1:\n        raise ValueError('rank one has no data')\n"
        "    return DistributedDataParallel(model), (torch.randn(2, 4),)  # rank 0 waits in DDP's broadcast\n")
    start = time.monotonic()
    run = _fusionlens(str(target), "--nproc", str(nproc), timeout=120)
    took = time.monotonic() - start
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"{target}:11: error: rank 1: example broken raised ValueError: rank one has no data" in run.stderr, \
        run.stderr[-4000:]
    assert took < 60, took
