"""The plan's transforms against a real run (issue 28's Tests): examples/plan/plan_ranks.py's
targets run on 4 gloo ranks by `fusionlens compile --nproc 4` (one launch for all of them) record
their collectives; the same targets planned on a 1x4 cluster under a fake process group
(fusionlens/plan/own.py) must name the same collectives: kind, bytes a rank, group size, line.

- tensor_parallel: tp=2 (with dp=2) on a (2, 2) mesh: each all-reduce exactly.
- zero3: FSDP2 over 4 ranks: each unit's all-gathers (forward, backward regather) and
  reduce-scatter at the line calling it. The plan gathers bf16 parameters (Megatron's and
  torchtitan's mixed precision), the CPU run the model's fp32 ones: its bytes are compared x2.
- data_parallel (and data_parallel_buckets, with DDP's bucket_cap_mb at 4 KiB: several
  buckets): DDP over 4 ranks: each bucket's all-reduce, kind, bytes, group and line (the
  line of the op finishing the bucket's last gradient). The plan applies DDP's transform on the
  meta device (fusionlens/plan/units.py, plan/buckets.py) and fills the buckets with fp32
  gradients, as the run's fp32 model does: the bytes are compared as they are (a bf16 model's
  real DDP would all-reduce bf16 gradients, half the plan's bytes).
- a 2-stage pipeline has no counterpart FusionLens records in a real run (it runs no pipeline
  schedule): the plan of tensor_parallel with pp=2 is checked to hold the real run's
  collectives of one stage's blocks, and its sends the hidden state a stage passes on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import plan_targets
import pytest
import torch

from fusionlens.report.discovery import find_targets

pytestmark = pytest.mark.distributed

REPO = plan_targets.REPO
RANKS = os.path.join(plan_targets.EXAMPLES, "plan_ranks.py")


def _plan(name: str, **options):
    return plan_targets.plan(RANKS, name, **options)


def _planned(rep, group: str, with_line: bool = True, gathers_x: int = 1) -> Counter:
    out: Counter = Counter()
    for c in rep.collectives:
        if c.group == group:
            nbytes = c.bytes_per_rank * (gathers_x if c.kind == "all_gather_into_tensor" else 1)
            out[(c.kind, nbytes, c.group_size, c.line if with_line else None)] += c.count
    return out


def _recorded(report: dict, with_line: bool = True) -> Counter:
    return Counter((c["op"], c["bytes"], c["group_size"], c["line"] if with_line else None)
                   for c in report["collectives"])


@pytest.fixture(scope="module")
def real() -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",  # the ranks import this checkout
           "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}
    run = subprocess.run([sys.executable, "-m", "fusionlens", "compile", RANKS, "--nproc", "4", "--json",
                          "--no-benchmark"], capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    reports = json.loads(run.stdout)
    with open(RANKS, encoding="utf-8") as f:
        names = [t.name for t in find_targets(f.read(), RANKS)]
    assert all(r["status"] == "ok" for r in reports)
    return dict(zip(names, reports))


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built in")
def test_tensor_parallel_tp2_dp2_as_four_ranks_record(real):
    rep = _plan("tensor_parallel")
    assert (rep.options["tp"], rep.options["dp"]) == (2, 2)
    recorded = _recorded(real["tensor_parallel"])
    assert recorded and _planned(rep, "tp") == recorded


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built in")
def test_zero3_per_unit_as_four_ranks_record(real):
    rep = _plan("zero3")
    assert (rep.options["zero"], rep.options["dp"]) == (3, 4)
    recorded = _recorded(real["zero3"])
    assert {k[0] for k in recorded} == {"all_gather_into_tensor", "reduce_scatter_tensor"}
    assert _planned(rep, "dp", gathers_x=2) == recorded


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built in")
def test_ddp_buckets_as_four_ranks_record(real):
    rep = _plan("data_parallel")
    assert (rep.options["zero"], rep.options["dp"]) == (0, 4)
    recorded = _recorded(real["data_parallel"])
    assert recorded and {k[0] for k in recorded} == {"all_reduce"} and all(k[3] for k in recorded)
    assert _planned(rep, "dp") == recorded
    # the target's own bucket_cap_mb: buckets of blocks' and the embedding's gradients, in the run's order
    rep = _plan("data_parallel_buckets")
    recorded = _recorded(real["data_parallel_buckets"])
    assert len(recorded) >= 3 and len({k[3] for k in recorded}) == 2  # the block's line and the embedding's
    assert _planned(rep, "dp") == recorded


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built in")
def test_two_stage_pipeline_holds_a_stage_of_the_real_collectives(real):
    from plan_ranks import BATCH, HIDDEN, SEQ

    rep = _plan("tensor_parallel", pp=2)
    assert (rep.options["tp"], rep.options["pp"], rep.options["dp"]) == (2, 2, 1)
    stage = Counter({k: n // 2 for k, n in _recorded(real["tensor_parallel"]).items()})  # one of the two blocks
    assert _planned(rep, "tp") == stage
    [send] = [c for c in rep.collectives if c.group == "pp"]
    assert send.bytes_per_rank == BATCH * SEQ * HIDDEN * 4 // 2  # the fp32 hidden state, split over the TP ranks
    assert send.count == 2 * rep.options["micro_batches"]  # forward, and its gradient back
