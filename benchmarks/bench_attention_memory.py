"""Attention's training memory: a compiled SDPA call's backward with the fused CPU kernel (now)
against the math rule (before: the scores and probabilities recomputed), and eager's.

    python benchmarks/bench_attention_memory.py [--shapes 1x8x1024x64,1x16x2048x64] [--dtypes bf16,f32]
                                                [--causal] [--json PATH]

Counted and measured, never timed. For each shape (batch x heads x sequence x head dim, self
attention) and dtype, the call `F.scaled_dot_product_attention(q, k, v, is_causal=...)` is
compiled for training twice with `fusionlens.driver.pipeline.compile_program`: as the compiler
does now, and under `torch.nn.attention.sdpa_kernel([SDPBackend.MATH])`, where the fused kernel
does not apply and the backward is the math rule every call took before (and what a call the
kernel does not take still gets). Columns:

- `saved`: bytes the forward program keeps for the backward beyond its inputs q, k, v (eager:
  what its autograd graph saves beyond them, read with saved_tensors_hooks);
- `[B,H,L,S] values`: the backward program's values of that shape (its execution trace);
- `backward peak`: the most bytes the backward allocated above what it started with, measured
  by torch's profiler (profile_memory: every CPU allocation and free, summed in order) while
  `torch.autograd.grad` runs it; the same for eager's own backward of the same call.

Prints a table (markdown) and, with --json, writes the rows.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fusionlens.driver import pipeline  # noqa: E402
from fusionlens.ir.vocabulary import Stage  # noqa: E402
from fusionlens.middle.programs import ProgramKind  # noqa: E402
from fusionlens.options import CompileOptions  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}
MIB = float(1 << 20)


def _peak_allocated(run) -> int:
    """The most CPU bytes allocated above the start while `run()` runs (torch's profiler)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    now = peak = 0
    for e in events:
        now += e.nbytes()
        peak = max(peak, now)
    return peak


def _inputs(shape, dtype):
    torch.manual_seed(0)
    return [torch.randn(shape, dtype=dtype, requires_grad=True) for _ in range(3)]


def _eager(fn, shape, dtype) -> dict:
    q, k, v = _inputs(shape, dtype)
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(q, k, v)
    given = {t.untyped_storage().data_ptr() for t in (q, k, v)}
    extra = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in saved
             if t.untyped_storage().data_ptr() not in given}
    g = torch.randn_like(out)
    peak = _peak_allocated(lambda: torch.autograd.grad(out, (q, k, v), g))
    return {"saved": sum(extra.values()), "square": None, "peak": peak}


def _compiled(fn, shape, dtype, math: bool) -> dict:
    q, k, v = _inputs(shape, dtype)
    with sdpa_kernel([SDPBackend.MATH]) if math else contextlib.nullcontext():
        c = pipeline.compile_program(fn, (q, k, v), {}, CompileOptions(executors=("torch",)))
    d, backward = c.differentiated, c.program(ProgramKind.BACKWARD)
    assert d is not None and backward is not None, "not compiled for training"
    inputs = {x.name for x in d.joint.inputs}
    saved = sum(x.numel() * x.dtype.itemsize for x in d.saved if x.name not in inputs)
    B, H, L = shape[:3]
    square = sum(tuple(o.shape) == (B, H, L, L) for b in backward.traces[Stage.EXECUTION].bound_symbols
                 for o in b.outputs)
    out = c.fn(q, k, v, *c.constants)
    g = torch.randn_like(out)
    peak = _peak_allocated(lambda: torch.autograd.grad(out, (q, k, v), g))
    return {"saved": saved, "square": square, "peak": peak}


def run(shape, dtype, causal: bool) -> dict:
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    row = {"shape": "x".join(map(str, shape)), "dtype": str(dtype).removeprefix("torch."), "causal": causal}
    row["eager"] = _eager(fn, shape, dtype)
    row["before"] = _compiled(fn, shape, dtype, math=True)
    row["now"] = _compiled(fn, shape, dtype, math=False)
    return row


def _mib(x) -> str:
    return f"{x / MIB:,.1f}"


def table(rows) -> str:
    head = ("| B x H x L x D | dtype | system | saved (MiB) | [B,H,L,S] values in the backward "
            "| backward peak (MiB) |\n|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        for system, label in (("eager", "eager (torch's flash backward)"), ("before", "FusionLens before (math rule)"),
                              ("now", "FusionLens now (fused backward)")):
            m = r[system]
            square = "" if m["square"] is None else str(m["square"])
            lines.append(f"| {r['shape']} | {r['dtype']} | {label} | {_mib(m['saved'])} | {square} "
                         f"| {_mib(m['peak'])} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1x8x1024x64,1x16x2048x64")
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--causal", action="store_true", help="is_causal=True (GPT-style self attention)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    rows = []
    for text in a.shapes.split(","):
        shape = tuple(int(n) for n in text.split("x"))
        for name in a.dtypes.split(","):
            rows.append(run(shape, DTYPES[name], a.causal))
            print("\n".join(table(rows[-1:]).splitlines()[2:]), file=sys.stderr, flush=True)
    print(f"{datetime.date.today()} · {platform.machine()} · torch {torch.__version__} · "
          f"{torch.get_num_threads()} threads · causal={a.causal}")
    print(table(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
