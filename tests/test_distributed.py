"""torch.distributed on 2 gloo ranks: compiler.jit under DDP (native: DDP's own forward around
the compiled module), FSDP2 (runs eagerly, saying why), and user code calling collectives
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
def test_ddp_fsdp2_and_user_collectives_match_eager_on_two_ranks():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          "--standalone", str(CHECKS)], capture_output=True, text=True, timeout=600, env=env)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    for check in ("check_ddp", "check_user_collectives", "check_fsdp2_runs_eagerly_and_says_why"):
        assert output.count(f"{check} ok") == 2, output[-6000:]
