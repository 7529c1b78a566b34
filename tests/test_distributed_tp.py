"""Tensor parallelism on 2 gloo ranks: compiler.jit of modules after parallelize_module with
ColwiseParallel / RowwiseParallel (an MLP, an attention block) compiled natively, against the
same modules eager; other plans run eagerly, saying why. The checks run in the ranks
(tests/distributed/tp_checks.py); this test launches them with torch.distributed.run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.distributed

CHECKS = Path(__file__).parent / "distributed" / "tp_checks.py"


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built in")
def test_tensor_parallel_mlp_and_attention_match_eager_on_two_ranks():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          "--standalone", str(CHECKS)], capture_output=True, text=True, timeout=300, env=env)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    for check in ("check_mlp_training", "check_mlp_inference", "check_a_dtensor_argument_runs_eagerly",
                  "check_attention_block_training",
                  "check_unsupported_plans_run_eagerly_and_say_why",
                  "check_one_rank_failing_its_check_runs_every_rank_eagerly",
                  "check_a_forward_check_failing_on_one_rank_skips_every_rank_s_gradient_check",
                  "check_a_float64_rejudge_on_one_rank_runs_on_every_rank"):
        assert output.count(f"{check} ok") == 2, output[-6000:]
