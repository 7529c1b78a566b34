"""A sanity row, not a fit: Llama 3 405B planned with Meta's own parallelism against the BF16 MFU
the Llama 3 paper reports (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4: 16K H100
GPUs, TP 8, PP 16, CP 1 or 16, DP what is left, sequence 8192 or 131072, 16M tokens a batch).
No coefficient of the plan was tuned to these rows (docs/plan.md). Meta trains with FSDP sharding
optimizer states and gradients (ZeRO 2 here) and does not reshard after the forward.

    python benchmarks/plan_llama3.py     # the table of benchmarks/RESULTS.md
"""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(REPO, "tests"), os.path.join(REPO, "examples", "plan")]

# (GPUs, tp, cp, pp, dp, sequence, sequences a batch, published TFLOP/s a GPU, published BF16 MFU)
ROWS = [
    (8192, 8, 1, 16, 64, 8192, 2048, 430, 0.43),
    (16384, 8, 1, 16, 128, 8192, 2048, 400, 0.41),
    (16384, 8, 16, 16, 8, 131072, 128, 380, 0.38),
]


def plan_row(gpus: int, tp: int, cp: int, pp: int, dp: int, seq: int, batch: int):
    import torch
    import zoo_imports  # noqa: F401  (transformers against the CPU torch)
    from plan_llama import Step, llama

    from fusionlens.plan import api

    with torch.device("meta"):
        _, model, args = llama("405b", seq=seq)
        return api.plan(Step(model), *args, cluster=f"{gpus // 8}x8xH100", tp=tp, cp=cp, pp=pp, dp=dp, sp=True,
                        zero=2, global_batch=batch, recompute="selective")


def main() -> None:
    print("| GPUs | TP x CP x PP x DP | sequence | predicted step s | predicted TFLOP/s a GPU | predicted MFU "
          "| published TFLOP/s | published MFU | MFU error | fits (GiB) | largest temporary (GiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for gpus, tp, cp, pp, dp, seq, batch, tflops, mfu in ROWS:
        rep = plan_row(gpus, tp, cp, pp, dp, seq, batch)
        err = (rep.mfu - mfu) / mfu
        print(f"| {gpus} | {tp}x{cp}x{pp}x{dp} | {seq} | {rep.step_s:.2f} | {rep.tflops_per_gpu:.0f} | {rep.mfu:.1%} "
              f"| {tflops} | {mfu:.0%} | {err:+.0%} | {rep.fits} ({rep.memory_gib.total:.1f}) "
              f"| {rep.memory_gib.transient:.2f} |", flush=True)


if __name__ == "__main__":
    main()
