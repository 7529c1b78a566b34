"""FSDP2 (fully_shard) on 2 gloo ranks: compiler.jit of a module sharded per block and at the
root, in training (3 SGD steps) and inference, against eager FSDP2 on the same model and data;
the all-gathers (issued one block ahead) and reduce-scatters in the programs at the blocks'
lines; a MixedPrecisionPolicy (bfloat16 params, float32 reduce, output_dtype) compiled natively,
its casts in the program and the collectives' bytes those of its dtypes; what it cannot compile
run eagerly, saying why; a unit the call never runs left with .grad None. The checks run in the ranks
(tests/distributed/fsdp_checks.py); this test launches them with torch.distributed.run and
fails with the ranks' output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.distributed

CHECKS = Path(__file__).parent / "distributed" / "fsdp_checks.py"


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built in")
def test_fsdp2_modules_compile_and_match_eager_fsdp2_on_two_ranks():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          "--standalone", str(CHECKS)], capture_output=True, text=True, timeout=600, env=env)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    for check in ("check_per_block_training", "check_root_training", "check_inference",
                  "check_mixed_precision_trains_like_eager_fsdp2",
                  "check_root_parameters_a_block_called_twice_and_buffers",
                  "check_unsupported_runs_eagerly_and_says_why",
                  "check_one_rank_failing_its_check_runs_every_rank_eagerly",
                  "check_reshard_after_forward_gathers_again_in_the_backward",
                  "check_a_unit_the_call_never_runs_keeps_grad_none"):
        assert output.count(f"{check} ok") == 2, output[-6000:]
