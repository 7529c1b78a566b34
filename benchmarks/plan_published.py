"""The planner against published measurements (docs/plan.md, issue 28 part 7).

Korthikanti et al. 2022, Table 5 (iteration seconds, full recompute and selective recompute
with sequence parallelism) and Figure 1 (GiB per GPU); Narayanan et al. 2021, Table 1
(TFLOP/s per GPU with full recompute, as 96 B s l h^2 (1 + s/6h + V/16lh) FLOPs a step, turned
into step seconds). Every row is planned from examples/plan/plan_gpt.py's GPT at full size on the
meta device, on DGX A100 nodes. tests/test_plan_published.py asserts the thresholds.

    python benchmarks/plan_published.py        # the markdown table of benchmarks/RESULTS.md
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "plan"))

from plan_gpt import gpt  # noqa: E402

from fusionlens.plan import api, trace  # noqa: E402

SEQ, VOCAB = 2048, 51200


@dataclass(frozen=True)
class Row:
    source: str
    model: str
    hidden: int
    heads: int
    layers: int
    tp: int
    pp: int
    gpus: int
    batch: int
    micro_batch: int | None  # None: the plan's choice
    recompute: str
    sp: bool
    vpp: int
    published_s: float


KORTHIKANTI = [(r[0], *r[1:]) for r in [
    ("22B", 6144, 64, 48, 8, 1, 8, 4, 4, 1, 1.42, 1.10),
    ("175B", 12288, 96, 96, 8, 8, 64, 64, 1, 3, 18.13, 13.75),
    ("530B", 20480, 128, 105, 8, 35, 280, 280, 1, 3, 49.05, 37.83),
    ("1T", 25600, 160, 128, 8, 64, 512, 512, 1, 1, 94.42, 71.49),
]]
# Figure 1: params + optimizer; activations with no recompute; with sequence parallel + selective (GiB)
FIGURE1 = {"22B": (45.56, 59.25, 9.56), "175B": (45.56, 66.84, 12.35), "530B": (31.64, 114.02, 23.08),
           "1T": (32.96, 131.25, 26.56)}
NARAYANAN = [  # parameters, heads, hidden, layers, tp, pp, GPUs, batch, TFLOP/s per GPU
    ("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137), ("3.6B", 32, 3072, 30, 2, 1, 64, 512, 138),
    ("7.5B", 32, 4096, 36, 4, 1, 128, 512, 142), ("18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135),
    ("39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138), ("76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140),
    ("145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148), ("310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155),
    ("529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163), ("1008B", 160, 25600, 128, 8, 64, 3072, 3072, 163),
]


def narayanan_flops(batch: int, layers: int, hidden: int) -> float:
    h, s, v = hidden, SEQ, VOCAB
    return 96 * batch * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))


def rows() -> list[Row]:
    out = []
    for name, h, a, n, tp, pp, gpus, batch, mb, vpp, full, selective in KORTHIKANTI:
        out.append(Row("Korthikanti T5 full", name, h, a, n, tp, pp, gpus, batch, mb, "full", False, vpp, full))
        out.append(Row("Korthikanti T5 selective+SP", name, h, a, n, tp, pp, gpus, batch, mb, "selective", True, vpp,
                       selective))
    for name, a, h, n, tp, pp, gpus, batch, tflops in NARAYANAN:
        seconds = narayanan_flops(batch, n, h) / (gpus * tflops * 1e12)
        out.append(Row("Narayanan T1", name, h, a, n, tp, pp, gpus, batch, None, "full", False, 1, seconds))
    return out


@functools.lru_cache(maxsize=64)
def traced(hidden: int, heads: int, layers: int, micro_batch: int) -> trace.Traced:
    with torch.device("meta"):
        model, args = gpt(hidden, heads, layers, micro_batch=micro_batch, seq=SEQ, vocab=VOCAB)
    return trace.trace(model, args)


def plan(row: Row, micro_batch: int):
    nodes = row.gpus // 8
    return api.plan_traced(traced(row.hidden, row.heads, row.layers, micro_batch), row.model,
                           cluster=f"{nodes}x8xA100", tp=row.tp, pp=row.pp, vpp=row.vpp, sp=row.sp,
                           global_batch=row.batch, recompute=row.recompute)


def predict(row: Row):
    """The plan's report for the row; a micro-batch the paper does not state is the fastest that fits."""
    if row.micro_batch is not None:
        return plan(row, row.micro_batch)
    dp = row.gpus // (row.tp * row.pp)
    best = None
    for mb in (1, 2, 4, 8):
        if row.batch % (dp * mb):
            continue
        rep = plan(row, mb)
        if rep.fits and (best is None or rep.step_s < best.step_s):
            best = rep
    assert best is not None, row
    return best


def table() -> tuple[list[tuple], list[tuple]]:
    steps = []
    for row in rows():
        rep = predict(row)
        steps.append((row, rep.step_s, rep.options["micro_batch"]))
    memory = []
    for name, h, a, n, tp, pp, gpus, batch, mb, vpp, _, _ in KORTHIKANTI:
        base = Row("", name, h, a, n, tp, pp, gpus, batch, mb, "none", False, vpp, 0.0)
        none = plan(base, mb)
        sel = plan(Row("", name, h, a, n, tp, pp, gpus, batch, mb, "selective", True, vpp, 0.0), mb)
        m = none.memory_gib
        memory.append((name, (m.params + m.grads + m.optimizer, m.activations, sel.memory_gib.activations),
                       FIGURE1[name]))
    return steps, memory


def main() -> None:
    steps, memory = table()
    print("| source | model | TP x PP | GPUs | batch | micro-batch | recompute | predicted s | published s | error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    errors = []
    for row, predicted, mb in steps:
        err = (predicted - row.published_s) / row.published_s
        errors.append(abs(err))
        rc = row.recompute + (" + SP" if row.sp else "")
        print(f"| {row.source} | {row.model} | {row.tp}x{row.pp} | {row.gpus} | {row.batch} | {mb} | {rc} | "
              f"{predicted:.2f} | {row.published_s:.2f} | {err:+.1%} |")
    print(f"\nmean absolute error {sum(errors) / len(errors):.1%}, largest {max(errors):.1%}\n")
    print("| model | kind | predicted GiB | published GiB | error |")
    print("|---|---|---|---|---|")
    for name, predicted, published in memory:
        kinds = ("params + grads + optimizer", "activations, no recompute", "activations, SP + selective")
        for kind, p, q in zip(kinds, predicted, published):
            print(f"| {name} | {kind} | {p:.2f} | {q:.2f} | {(p - q) / q:+.1%} |")


if __name__ == "__main__":
    main()
