"""torch.distributed on 2 gloo ranks: compiler.jit under DDP (native: DDP's own forward around
the compiled module, whose backward issues the gradient all-reduces as buckets fill; DDP's
reducer where that backward does not mirror its configuration) and user code calling collectives
(traced as collectives at their lines). The checks themselves run in the ranks
(tests/distributed/checks.py), each against eager under the same wrapping; this test launches
them as a user would, with torch.distributed.run, and fails with the ranks' output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.distributed

CHECKS = Path(__file__).parent / "distributed" / "checks.py"


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built in")
def test_ddp_and_user_collectives_match_eager_on_two_ranks():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          "--standalone", str(CHECKS)], capture_output=True, text=True, timeout=600, env=env)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    for check in ("check_ddp", "check_ddp_all_reduces_overlap_the_backward", "check_ddp_no_sync_accumulates_like_eager",
                  "check_ddp_ranks_that_disagree_on_the_check_still_meet", "check_ddp_reducer_path_where_not_mirrored",
                  "check_user_collectives", "check_user_collectives_agree_when_one_rank_fails",
                  "check_functional_collectives_wait_at_first_use", "check_user_collectives_of_every_kind",
                  "check_a_gradient_through_a_user_collective_is_eagers"):  # FSDP2: its own file
        assert output.count(f"{check} ok") == 2, output[-6000:]
