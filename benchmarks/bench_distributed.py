"""Data-parallel training steps on CPU gloo ranks: eager vs FusionLens (compiler.jit) vs torch.compile,
under DDP and under FSDP2 (`fully_shard`), in one run.

    python benchmarks/bench_distributed.py [--nproc 2] [--steps 20] [--warmup 3]
                                           [--workloads ddp,fsdp2] [--systems eager,fusionlens,torch.compile]
                                           [--json PATH]

Run as above, it launches itself on --nproc ranks through `torch.distributed.run --standalone`
(gloo, OMP_NUM_THREADS=1 and one torch thread a rank: the ranks share the machine's cores;
inductor's caches off, so torch.compile compiles cold);
rank 0 prints the table. The model: an MLP 256-1024-256 (GELU) and an MSE loss, 0.5M
parameters, each rank its own batch of 64 (fixed per rank and step, the same for every system).

- ddp: `DistributedDataParallel(model, bucket_cap_mb=1)` (2 MB of gradients: several buckets).
- fsdp2: `fully_shard` on each Linear, then on the root (torch.distributed.fsdp).

Every system gets its own copy of the same initial module, wrapped the same way, and its own
`torch.optim.SGD(lr=0.01)`, and runs the same step:

    loss = mse(model(x), y); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)

Only the module is compiled: `compiler.jit(wrapped)`, `torch.compile(wrapped)` (the default
inductor backend), and `torch.compile inside`: `torch.compile(model)` before it is wrapped
(`DDP(torch.compile(model))`; FSDP2's `fully_shard` of its layers, then of the compiled
module), so the wrapper's own code calls the compiled module, as where dynamo breaks the
graph at the wrapper. The systems run interleaved step by
step, each step between barriers; a step's time is the slowest rank's (an all_reduce MAX of
the ranks' perf_counter times), `ms/step` the median over --steps after --warmup, `first` the
first step (its compile) in seconds. `check`: after the last step every parameter (each
rank's local shard under FSDP2) against eager's after as many steps, float32 tolerance
rtol 1e-4, atol 1e-5; a system that differs is reported WRONG, one that raised reports its
error (the same on every rank: the ranks agree on it after each step, so none hangs). `how`:
for FusionLens, whether jit ran the step compiled or eagerly (its report's diagnostics say
why), and the collectives its report lists; for torch.compile, the graphs dynamo compiled and
its graph breaks in the first step. Prints tables; never asserts.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from tables import table  # noqa: E402

SYSTEMS = ("eager", "fusionlens", "torch.compile", "torch.compile inside")
WORKLOADS = ("ddp", "fsdp2")
DIM, HIDDEN, BATCH = 256, 1024, 64
RTOL, ATOL = 1e-4, 1e-5  # float32, after every step's SGD update (errors add up over the steps)


def _launch(argv: list[str], nproc: int) -> int:
    """This script again on `nproc` ranks (torch.distributed.run, --standalone)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
               os.path.abspath(__file__), *argv]
    return subprocess.run(command, env=env).returncode


# --- on every rank ------------------------------------------------------------------------------

def _model():
    import torch.nn as nn

    return nn.Sequential(nn.Linear(DIM, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, DIM))


def _wrap(workload: str, model):
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    if workload == "ddp":
        return DDP(model, bucket_cap_mb=1)
    for layer in getattr(model, "_orig_mod", model):  # torch.compile's OptimizedModule: the layers it holds
        if hasattr(layer, "weight"):
            fully_shard(layer)
    return fully_shard(model)


def _compiled(system: str, wrapped) -> Callable[..., Any]:
    """What a step calls: the wrapped module, or the wrapped module compiled (`torch.compile
    inside` compiled the module in place before it was wrapped: see Run)."""
    import torch

    import compiler

    if system == "fusionlens":
        return compiler.jit(wrapped)
    if system == "torch.compile":
        return torch.compile(wrapped)
    return wrapped


class Run:
    """One system's copy of the model under a workload's wrapping, its optimizer and its times."""

    def __init__(self, system: str, workload: str, initial):
        import torch

        self.system = system
        model = copy.deepcopy(initial)
        if system == "torch.compile inside":  # DDP's and FSDP2's own code then calls the compiled module
            model = torch.compile(model)
        self.wrapped = _wrap(workload, model)
        self.call = _compiled(system, self.wrapped)
        self.opt = torch.optim.SGD(self.wrapped.parameters(), lr=0.01)
        self.times: list[float] = []
        self.error = ""
        self.dynamo = ""  # torch.compile: the graphs and graph breaks of its first step

    def step(self, x, y) -> None:
        import torch.nn.functional as F

        loss = F.mse_loss(self.call(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def _slowest(seconds: float) -> float:
    """The largest of every rank's `seconds` (a step ends when its slowest rank does)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _agree(failed: bool) -> bool:
    """Whether any rank failed: every rank drops a system together, so none waits in a collective."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([1.0 if failed else 0.0])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def _timed_step(run: Run, x, y) -> None:
    import torch.distributed as dist

    failed = ""
    counted = _dynamo_counts() if run.system.startswith("torch.compile") and not run.times else None
    dist.barrier()
    t0 = time.perf_counter()
    try:
        run.step(x, y)
    except Exception as e:  # noqa: BLE001 - the table reports it; the benchmark goes on
        failed = f"{type(e).__name__}: {e}".splitlines()[0][:160]
    took = time.perf_counter() - t0
    if counted is not None:
        graphs, breaks = (b - a for a, b in zip(counted, _dynamo_counts()))
        run.dynamo = f"{graphs} graphs, {breaks} graph breaks"
    if _agree(bool(failed)):
        run.error = failed or "failed on another rank"
        return
    run.times.append(_slowest(took))


def _dynamo_counts() -> tuple[int, int]:
    """(graphs compiled, graph breaks) so far in this process, from dynamo's counters."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


def _local(p):
    return p.to_local() if hasattr(p, "to_local") else p  # FSDP2's DTensor: this rank's shard


def _check(run: Run, eager: Run) -> str:
    """This system's parameters against eager's, on every rank: `ok (max err E)` or WRONG."""
    import torch

    worst, bad = 0.0, False
    for a, b in zip(run.wrapped.parameters(), eager.wrapped.parameters()):
        got, want = _local(a).detach(), _local(b).detach()
        worst = max(worst, float((got - want).abs().max()) if got.numel() else 0.0)
        bad = bad or not torch.allclose(got, want, rtol=RTOL, atol=ATOL)
    bad = _agree(bad)
    worst = _slowest(worst)
    return f"WRONG (max err {worst:.1e})" if bad else f"ok (max err {worst:.1e})"


def _how(run: Run) -> str:
    """How compiler.jit ran the step: compiled (with its report's collectives) or eagerly, and why."""
    import compiler
    from fusionlens.report import schema as R

    if run.system.startswith("torch.compile"):
        return run.dynamo
    if run.system != "fusionlens" or run.error:
        return ""
    try:
        report = compiler.last_report(run.call)
    except (RuntimeError, TypeError) as e:
        return f"no report: {e}"
    if any(d.code == R.DiagnosticCode.EAGER_FALLBACK for d in report.diagnostics):
        why = next((d.message for d in report.diagnostics if d.severity == "warning"
                    and d.code != R.DiagnosticCode.EAGER_FALLBACK), "see its report")
        return f"ran eagerly: {why[:120]}"
    kinds: dict[str, int] = {}
    for c in report.collectives:
        key = f"{c.op} ({c.kind})"
        kinds[key] = kinds.get(key, 0) + 1
    said = ", ".join(f"{n} {k}" for k, n in kinds.items()) or "none"
    return f"compiled; collectives: {said}"


def _batches(steps: int, rank: int) -> list[tuple[Any, Any]]:
    import torch

    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(BATCH, DIM, generator=g), torch.randn(BATCH, DIM, generator=g)) for _ in range(steps)]


def _workload(workload: str, systems: list[str], steps: int, warmup: int) -> list[dict[str, Any]]:
    """Every system's runs of one workload, interleaved step by step: a row each."""
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    initial = _model()
    runs = []
    for system in systems:
        try:
            runs.append(Run(system, workload, initial))
        except Exception as e:  # noqa: BLE001 - a wrapping or compile that fails: its row says so
            run = Run("eager", workload, initial)
            run.system, run.error = system, f"{type(e).__name__}: {e}".splitlines()[0][:160]
            runs.append(run)
    batches = _batches(1 + warmup + steps, dist.get_rank())
    for x, y in batches:
        for run in runs:
            if not run.error:
                _timed_step(run, x, y)
    eager = runs[0]
    rows: list[dict[str, Any]] = []
    for run in runs:
        timed = run.times[1 + warmup:]
        median = statistics.median(timed) if timed and not run.error else None
        rows.append({"workload": workload, "system": run.system, "ms": median * 1e3 if median else None,
                     "first_s": run.times[0] if run.times else None,
                     "check": run.error and f"failed: {run.error}" or (_check(run, eager) if run is not eager else "-"),
                     "how": _how(run)})
    base = rows[0]["ms"]
    for row in rows:
        row["vs_eager"] = base / row["ms"] if base and row["ms"] else None
    return rows


def _print(rows: list[dict[str, Any]], args, world: int) -> None:
    import torch

    print(f"{datetime.date.today()} · {platform.machine()} CPU, {os.cpu_count()} cores, {world} gloo ranks, "
          f"1 torch thread a rank · python {platform.python_version()}, torch {torch.__version__}")
    print(f"step = forward + MSE loss + backward + SGD step + zero_grad, MLP {DIM}-{HIDDEN}-{DIM}, batch {BATCH} "
          f"a rank; median of {args.steps} steps after {args.warmup} warm-up steps (slowest rank), "
          "systems interleaved")
    out = [[r["workload"], r["system"], f"{r['ms']:.2f}" if r["ms"] else "-",
            f"{r['vs_eager']:.2f}x" if r["vs_eager"] else "-",
            f"{r['first_s']:.2f}" if r["first_s"] is not None else "-", r["check"], r["how"]] for r in rows]
    table(out, ["wrapping", "system", "ms/step", "vs eager", "first (s)", "check", "how"])


def _rank_main(args) -> int:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    try:
        systems = ["eager"] + [s for s in args.systems.split(",") if s and s != "eager"]
        rows = [row for w in args.workloads.split(",") if w
                for row in _workload(w, systems, args.steps, args.warmup)]
        if dist.get_rank() == 0:
            _print(rows, args, dist.get_world_size())
            if args.json:
                with open(args.json, "w", encoding="utf-8") as f:
                    json.dump(rows, f, indent=1)
        return 0
    finally:
        dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2, help="ranks to launch (gloo on the CPU)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per system (median)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps after the first")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset of ddp, fsdp2")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ", ".join(SYSTEMS))
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON (rank 0)")
    args = p.parse_args()
    if any(w not in WORKLOADS for w in args.workloads.split(",") if w):
        p.error(f"workloads are {', '.join(WORKLOADS)}")
    if any(s not in SYSTEMS for s in args.systems.split(",") if s):
        p.error(f"systems are {', '.join(SYSTEMS)}")
    if "RANK" not in os.environ:  # run by a user: launch the ranks, each runs the branch below
        return _launch(sys.argv[1:], args.nproc)
    return _rank_main(args)


if __name__ == "__main__":
    sys.exit(main())
