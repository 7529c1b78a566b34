"""`fusionlens compile FILE --nproc N`: N ranks launched through torch.distributed.run, one
merged report. The merge and the schema are tested on fake per-rank reports; the launches
(marked `distributed`) run 2 gloo ranks on examples/ddp_train.py and on a target that fails
on rank 1 only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compiler import cli, launch, report as R
from compiler.discovery import find_targets

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "ddp_train.py"


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
    assert per_rank[0].ranks == [merged.ranks[0]] and per_rank[0].collectives[0].time_ms is None  # not mutated


def test_merge_names_the_slowest_rank_of_each_region():
    merged, _ = _merged()
    slowest = {r.id: (r.timing.slowest_ms, r.timing.slowest_rank) for r in merged.all_regions()}
    assert slowest == {"R0": (3.0, 1), "R1": (0.9, 2), "B0": (2.0, 0)}
    assert merged.forward.region("R0").timing.median_ms == 1.0  # the table's own time stays rank 0's
    text = cli.render(merged)
    assert "slowest rank" in text and "3.00 ms (rank 1)" in text
    assert "-- ranks (3) --" in text and "0.60 ms slowest rank" in text


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


def test_discovery_reads_nproc():
    targets = {t.name: t for t in find_targets(EXAMPLE.read_text(), str(EXAMPLE))}
    assert targets["ddp_mlp"].nproc == 2 and targets["ddp_mlp"].train
    assert targets["all_reduce_sum"].nproc == 2 and not targets["all_reduce_sum"].train
    assert find_targets("@example(nproc=0)\ndef f(): pass\n")[0].nproc is None


def _fusionlens(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "compiler.cli", "compile", *args], capture_output=True, text=True,
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
    buckets = [c for c in ddp.collectives if c.kind == "ddp-bucket"]
    assert sum(c.bytes for c in buckets) == (64 * 256 + 256 + 256 * 64 + 64) * 4, ddp.collectives
    assert ddp.program("backward") is not None and all(r.step is not None for r in ddp.ranks)
    (traced,) = reduced.collectives
    line = next(i for i, text in enumerate(EXAMPLE.read_text().splitlines(), 1) if "dist.all_reduce(y)" in text)
    assert (traced.op, traced.kind, traced.bytes, traced.group_size, traced.line) == ("all_reduce", "traced",
                                                                                    4096, 2, line)
    for c in buckets + [traced]:
        t = c.time_ms
        assert t is not None and 0 < t.min <= t.median <= t.max, c
    assert traced.time_ms.max == reduced.forward.region(traced.region).timing.slowest_ms


@pytest.mark.distributed
def test_a_rank_that_raises_ends_the_run_with_its_error(tmp_path):
    target = tmp_path / "broken.py"
    target.write_text(
        "import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel\n"
        "import compiler\n\n\n@compiler.example(nproc=2)\ndef broken():\n    model = torch.nn.Linear(4, 4)\n"
        "    if dist.get_rank() == 1:\n        raise ValueError('rank one has no data')\n"
        "    return DistributedDataParallel(model), (torch.randn(2, 4),)  # rank 0 waits in DDP's broadcast\n")
    start = time.monotonic()
    run = _fusionlens(str(target), timeout=120)
    took = time.monotonic() - start
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"{target}:11: error: rank 1: example broken raised ValueError: rank one has no data" in run.stderr, \
        run.stderr[-4000:]
    assert took < 60, took
