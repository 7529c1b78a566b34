"""Training steps: eager vs FusionLens (compiler.jit) vs torch.compile vs thunder.jit, in one run.

    python benchmarks/bench_train.py [--steps 30] [--warmup 5] [--workloads mlp,gpt,cnn|all]
                                     [--systems eager,fusionlens,torch.compile,thunder]
                                     [--threads 1] [--inductor-cache] [--device cpu|cuda] [--json PATH]

Each workload is a module whose call returns a scalar loss, with fixed inputs (one batch,
reused every step). Every system gets its own deep copy of the same initial module and its
own optimizer, and runs the same training step:

    loss = model(*args); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)

with `opt = torch.optim.AdamW(params, lr=1e-3)` (torch's default foreach implementation,
never compiled: only the module is). `step` is the whole of it, `fwd+bwd` its first two
calls. Only the module is compiled: `compiler.jit(model)`, `torch.compile(model)` (default
inductor backend and mode), `thunder.jit(model)` (thunder 0.2.x through
benchmarks/thunder_shim.py, its default executors).

- Steady step: median over --steps steps, after --warmup steps, the systems interleaved
  step by step so that a busy machine slows them alike. `wall` is perf_counter; `CPU` is
  this process's CPU time (time.process_time, user + system) over the same step, which other
  jobs on a shared machine disturb less (with --threads 1 a quiet machine gives CPU ~= wall).
  A step that takes >= 100 minor page faults (fresh memory from the OS every step, paid in
  system time) says so in the check column; the JSON has the counts of every system.
- Compile: the first step's time minus the median steady step, in this process. Before any
  workload each system compiles and runs a step of a tiny model once (`one-time setup`, its
  imports and first-use initialisation), so the compile column is the cost of this model,
  not of importing the framework. `compile CPU` is the CPU time of this process and of every
  process under it (torch.compile's compile workers and C++ compilers), read from /proc.
  torch.compile runs cold (TORCHINDUCTOR_FORCE_DISABLE_CACHES=1) unless --inductor-cache.
- Checks (cheap, none of them timed): the first step's loss and gradients of every system
  against eager's from the same weights, inputs and random seed (gradients with FusionLens's
  own per-dtype tolerance, fusionlens.driver.checking.grad_mismatch). FusionLens must match, or it is
  reported WRONG and not timed (a FusionLens signature that failed its compile-time check
  runs eagerly: reported as a fallback, not timed either). For torch.compile and thunder a
  difference is reported, not fatal: with dropout each draws its own random masks. After the
  timed steps every system's last loss must be finite.

A system that fails (an exception while compiling or stepping) gets its error in the table;
the benchmark goes on. Prints tables; never asserts.

--device cuda (for the GPU machine) moves every model and input there and synchronises the
device around each timed part; `CPU` is then the host's CPU time, not the device's.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import gc
import json
import math
import os
import resource
import platform
import statistics
import sys
import time
import warnings
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))  # the examples import their neighbours (gpt_block)

from tables import table  # noqa: E402

if "--inductor-cache" not in sys.argv:  # before torch._inductor reads it
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
warnings.filterwarnings("ignore", message=".*dynamo_pgo force disabled.*")  # says what the line above asked

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SYSTEMS = ("eager", "fusionlens", "torch.compile", "thunder")


# --- workloads: (module returning a scalar loss, its inputs) ------------------------------

class MLPLoss(nn.Module):
    """examples/mlp.py's MLP (Linear, GELU, Linear, Dropout 0.1) and an MSE loss."""

    def __init__(self, dim=256, hidden=1024):
        super().__init__()
        from mlp import MLP

        self.mlp = MLP(dim, hidden, dropout=0.1)

    def forward(self, x, target):
        return F.mse_loss(self.mlp(x), target)


class LlamaLoss(nn.Module):
    """Two examples/llama_block.py decoder layers (RMSNorm, GQA attention with rotary
    embeddings and SDPA, SwiGLU) and an MSE loss."""

    def __init__(self):
        super().__init__()
        from llama_block import LlamaConfig, LlamaDecoderLayer

        config = LlamaConfig(hidden_size=128, intermediate_size=384, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=64)
        self.layers = nn.ModuleList([LlamaDecoderLayer(config) for _ in range(2)])

    def forward(self, x, target):
        for layer in self.layers:
            x = layer(x)
        return F.mse_loss(x, target)


def _mlp():
    return MLPLoss(), (torch.randn(64, 256), torch.randn(64, 256))


def _llama2():
    return LlamaLoss(), (torch.randn(4, 64, 128), torch.randn(4, 64, 128))


def _gpt():
    from train_gpt import gpt_loss_example

    return gpt_loss_example()


def _gpt_dropout():
    from train_gpt import gpt_loss_dropout_example

    return gpt_loss_dropout_example()


def _cnn():
    from train_cnn import cnn_loss_example

    return cnn_loss_example()


# name -> (maker, what it is, has dropout)
WORKLOADS = {
    "mlp": (_mlp, "MLP 256-1024-256, GELU, dropout 0.1, MSE; batch 64 (0.5M params)", True),
    "gpt": (_gpt, "examples/train_gpt.py gpt_loss_example: 2 GPT-2 blocks, d=128, 4 heads, SDPA, "
                  "vocab 512, tied head, cross-entropy; batch 4x64 tokens", False),
    "cnn": (_cnn, "examples/train_cnn.py cnn_loss_example: ResNet-ish, 16 channels, 2 blocks, "
                  "BatchNorm (train mode), cross-entropy; batch 8x3x16x16", False),
    "gpt_dropout": (_gpt_dropout, "examples/train_gpt.py gpt_loss_dropout_example: d=64, explicit "
                                  "masked softmax attention, dropout 0.1; batch 2x32 tokens", True),
    "llama2": (_llama2, "2 examples/llama_block.py layers: d=128, 4 heads / 2 KV heads, rotary, SDPA, "
                        "SwiGLU 384, MSE; batch 4x64", False),
}
DEFAULT_WORKLOADS = ("mlp", "gpt", "cnn")


class TinyLoss(nn.Module):  # the one-time setup of each system
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x))).pow(2).mean()


# --- CPU time of this process and everything under it -------------------------------------

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stats():
    """pid -> (ppid, utime + stime + cutime + cstime in ticks) of every process; {} without /proc."""
    out: dict[int, tuple[int, int]] = {}
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return out
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        out[int(p)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    return out


def tree_cpu_s() -> float:
    """CPU seconds of this process (and of its reaped children) plus every live descendant."""
    stats = _proc_stats()
    if not stats:
        return time.process_time()
    children: dict[int, list[int]] = {}  # ppid -> pids
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0))[1]
        todo.extend(children.get(pid, ()))
    return total / _TICK


# --- one system on one workload -----------------------------------------------------------

def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".replace("\n", " ")
    return text if len(text) <= 140 else text[:137] + "..."


class Runner:
    """One system's copy of the model, its compiled callable and its optimizer."""

    def __init__(self, system: str, model: nn.Module, args: tuple, thunder=None):
        self.system, self.model, self.args = system, model, args
        cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
        self.sync = torch.cuda.synchronize if cuda else (lambda: None)
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        self.error = ""  # set when it failed: no more steps
        self.note = ""
        # per timed step: wall s, CPU s, fwd+bwd wall s, minor page faults, system CPU s
        self.steps_wall: list[float] = []
        self.steps_cpu: list[float] = []
        self.fb_wall: list[float] = []
        self.faults: list[int] = []
        self.sys_s: list[float] = []
        # against eager's first step (compare): loss relative difference, first gradient problem
        self.loss_rel: float | None = None
        self.grad_problem = ""
        # the module itself, compiler.jit's JitFunction, torch.compile's or thunder.jit's callable
        self.fn: Any
        if system == "eager":
            self.fn = model
        elif system == "fusionlens":
            import compiler

            self.fn = compiler.jit(model)
        elif system == "torch.compile":
            self.fn = torch.compile(model)
        elif system == "thunder":
            self.fn = thunder.jit(model)
        else:
            raise ValueError(system)

    def step(self, keep_grads=False):
        """One training step: (wall s, fwd+bwd wall s, CPU s, loss, grads or None); its minor
        page faults and system CPU seconds go to self.last_faults, self.last_sys_s."""
        sync = self.sync
        sync()
        u0 = resource.getrusage(resource.RUSAGE_SELF)
        c0, t0 = time.process_time(), time.perf_counter()
        loss = self.fn(*self.args)
        loss.backward()
        sync()
        t1 = time.perf_counter()
        c1 = time.process_time()
        grads = {n: None if p.grad is None else p.grad.detach().clone()
                 for n, p in self.model.named_parameters()} if keep_grads else None
        c2, t2 = time.process_time(), time.perf_counter()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        sync()
        t3, c3 = time.perf_counter(), time.process_time()
        u1 = resource.getrusage(resource.RUSAGE_SELF)
        self.last_faults, self.last_sys_s = u1.ru_minflt - u0.ru_minflt, u1.ru_stime - u0.ru_stime
        return (t1 - t0) + (t3 - t2), t1 - t0, (c1 - c0) + (c3 - c2), loss.detach(), grads

    def first_step(self):
        """The compiling step, timed in wall and in CPU of the whole process tree."""
        cpu0 = tree_cpu_s()
        wall, fb, _, loss, grads = self.step(keep_grads=True)
        self.first_wall, self.first_cpu = wall, tree_cpu_s() - cpu0  # cpu includes the grads' copy: noise
        self.first_loss, self.first_grads = loss, grads
        self.last_loss = loss


def compare(runner: Runner, ref: Runner):
    """(loss relative difference, first gradient problem or '') against eager's first step."""
    from fusionlens.driver.checking import grad_mismatch

    a, e = float(runner.first_loss), float(ref.first_loss)
    rel = abs(a - e) / max(abs(e), 1e-12)
    problem = ""
    for name, g in ref.first_grads.items():
        got = runner.first_grads.get(name, "absent")
        if isinstance(got, str):
            problem = f"no parameter {name}"
            break
        why = grad_mismatch(got, g)
        if why:
            problem = f"grad {name}: {why}"
            break
    return rel, problem


LOSS_RTOL = 1e-4  # float32's in fusionlens.driver.checking.TOLERANCES


def run_workload(name: str, systems, steps: int, warmup: int, thunder,
                 device: str = "cpu") -> dict[str, dict[str, Any]]:
    make, _, has_dropout = WORKLOADS[name]
    torch.manual_seed(0)
    base, args = make()
    base.train().to(device)
    args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)
    gc.collect()
    runners: dict[str, Runner] = {}
    for system in systems:
        try:
            r = Runner(system, copy.deepcopy(base), args, thunder)
        except Exception as e:  # noqa: BLE001 - a row says so
            r = Runner("eager", copy.deepcopy(base), args)
            r.system, r.error = system, "setup: " + _short(e)
        runners[system] = r
        if r.error:
            continue
        torch.manual_seed(1)  # the same dropout draws for every system that draws as eager does
        try:
            r.first_step()
        except Exception as e:  # noqa: BLE001
            r.error = _short(e)
            continue
        if system == "fusionlens":
            entry = r.fn.last
            if entry is not None and entry.eager_fallback:
                errors = [d.message for d in getattr(entry.report, "diagnostics", [])
                          if getattr(d, "severity", "") == "error"]
                r.error = "fell back to eager (its compile-time check failed)" + (
                    f": {errors[0][:100]}" if errors else "")
            elif type(r.first_loss.grad_fn).__name__ not in ("CompiledFunctionBackward", "NoneType"):
                r.note = f"backward is {type(r.first_loss.grad_fn).__name__}"

    ref = runners.get("eager")
    for system, r in runners.items():
        if r.error or ref is None or ref.error or system == "eager":
            continue
        rel, problem = compare(r, ref)
        r.loss_rel, r.grad_problem = rel, problem
        if system == "fusionlens" and (rel > LOSS_RTOL or problem):
            r.error = f"WRONG vs eager: loss rel. diff {rel:.2g}" + (f"; {problem[:100]}" if problem else "")

    live = [r for r in runners.values() if not r.error]
    for i in range(warmup + steps):
        for r in live:
            if r.error:
                continue
            try:
                wall, fb, cpu, loss, _ = r.step()
            except Exception as e:  # noqa: BLE001
                r.error = f"step {i + 2}: " + _short(e)
                continue
            r.last_loss = loss
            if i >= warmup:
                r.steps_wall.append(wall)
                r.steps_cpu.append(cpu)
                r.fb_wall.append(fb)
                r.faults.append(r.last_faults)
                r.sys_s.append(r.last_sys_s)

    out: dict[str, dict[str, Any]] = {}
    for system, r in runners.items():
        row: dict[str, Any] = {"error": r.error}
        if not r.error and r.steps_wall:
            step = statistics.median(r.steps_wall)
            row.update(step_ms=step * 1e3, fwd_bwd_ms=statistics.median(r.fb_wall) * 1e3,
                       step_cpu_ms=statistics.median(r.steps_cpu) * 1e3,
                       first_step_ms=r.first_wall * 1e3, compile_s=r.first_wall - step,
                       compile_cpu_s=r.first_cpu - statistics.median(r.steps_cpu),
                       first_loss=float(r.first_loss), last_loss=float(r.last_loss),
                       finite=math.isfinite(float(r.last_loss)), page_faults_per_step=statistics.median(r.faults),
                       sys_ms_per_step=statistics.median(r.sys_s) * 1e3)
            if row["page_faults_per_step"] >= 100:  # fresh memory from the OS every step: system time
                r.note = (r.note + "; " if r.note else "") + (
                    f"{row['page_faults_per_step']:.0f} page faults/step ({row['sys_ms_per_step']:.1f} ms system)")
            if not row["finite"]:
                row["error"] = f"NON-FINITE loss after {len(r.steps_wall) + warmup + 1} steps: {float(r.last_loss)}"
        if r.loss_rel is not None:
            row.update(loss_rel_diff=r.loss_rel, grad_problem=r.grad_problem)
        if system == "fusionlens" and hasattr(r.fn, "cache_info"):
            row["compiles"] = r.fn.cache_info()["misses"]
            if row["compiles"] > 1:
                r.note = (r.note + "; " if r.note else "") + f"{row['compiles']} compiles"
        row["note"] = r.note
        if has_dropout:
            row["dropout"] = True
        out[system] = row
    return out


def one_time_setup(systems, thunder, device: str = "cpu") -> dict[str, str]:
    """Each system's first compile and step of a tiny model: imports, first-use setup."""
    out: dict[str, str] = {}
    torch.manual_seed(0)
    base, x = TinyLoss().to(device), torch.randn(4, 8, device=device)
    for system in systems:
        if system == "eager":
            continue
        start = time.perf_counter()
        try:
            Runner(system, copy.deepcopy(base), (x,), thunder).step()
            out[system] = f"{time.perf_counter() - start:.1f} s"
        except Exception as e:  # noqa: BLE001
            out[system] = "failed: " + _short(e)
    return out


# --- printing ----------------------------------------------------------------------------

def check_text(system: str, row: dict) -> str:
    if row.get("error"):
        return row["error"]
    parts = ["finite"]
    if system != "eager" and "loss_rel_diff" in row:
        if row.get("dropout") and system != "fusionlens" and (row["loss_rel_diff"] > LOSS_RTOL or row["grad_problem"]):
            parts.append(f"vs eager: loss {row['loss_rel_diff']:.1e} (own dropout masks)")
        elif row["loss_rel_diff"] > LOSS_RTOL or row["grad_problem"]:
            parts.append(f"DIFFERS from eager: loss {row['loss_rel_diff']:.1e}"
                         + (f"; {row['grad_problem'][:80]}" if row["grad_problem"] else ""))
        else:
            parts.append(f"= eager (loss {row['loss_rel_diff']:.0e}, grads)")
    if row.get("note"):
        parts.append(row["note"])
    return "; ".join(parts)


def print_results(results: dict, systems):
    rows = []
    for w, per in results.items():
        eager = per.get("eager", {})
        for s in systems:
            row = per[s]
            if "step_ms" not in row:
                rows.append([w, s, "-", "-", "-", "-", "-", "-", "-", check_text(s, row)])
                continue
            ratio = f"{row['step_ms'] / eager['step_ms']:.2f}x" if "step_ms" in eager else "-"
            cpu_ratio = f"{row['step_cpu_ms'] / eager['step_cpu_ms']:.2f}x" if "step_cpu_ms" in eager else "-"
            rows.append([w, s, f"{row['step_ms']:.1f}", f"{row['fwd_bwd_ms']:.1f}", ratio,
                         f"{row['step_cpu_ms']:.1f}", cpu_ratio, f"{row['compile_s']:.2f}",
                         f"{row['compile_cpu_s']:.2f}", check_text(s, row)])
    table(rows, ["workload", "system", "step ms", "fwd+bwd ms", "x eager", "step CPU ms", "x eager (CPU)",
                 "compile s", "compile CPU s", "check"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30, help="timed steps per system (median)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps after the first")
    p.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                   help=f"comma-separated, or 'all' ({', '.join(WORKLOADS)})")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ", ".join(SYSTEMS))
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (1: steadier on a shared machine)")
    p.add_argument("--inductor-cache", action="store_true", help="let torch.compile use its on-disk caches")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args()
    workloads = list(WORKLOADS) if args.workloads == "all" else [w for w in args.workloads.split(",") if w]
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        p.error(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    systems = [s for s in args.systems.split(",") if s]
    if any(s not in SYSTEMS for s in systems):
        p.error(f"systems are {', '.join(SYSTEMS)}")
    if "eager" not in systems:
        systems.insert(0, "eager")  # the reference of every check and ratio

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    thunder, why, shim = None, "", ""
    if "thunder" in systems:
        from thunder_shim import describe, import_thunder

        thunder, why = import_thunder()
        shim = describe()
    errors = {}
    if "thunder" in systems and thunder is None:
        errors["thunder"] = why
    where = (f"{torch.cuda.get_device_name()} (+ {os.cpu_count()} CPU cores)" if args.device.startswith("cuda")
             else f"{platform.machine()} CPU, {os.cpu_count()} cores")
    print(f"{datetime.date.today()} · {where}, torch threads "
          f"{args.threads} · python {platform.python_version()}, torch {torch.__version__}, thunder "
          f"{thunder.__version__ + ' (' + shim + ')' if thunder else 'not used: ' + (why or 'not asked for')} · "
          f"inductor caches {'on' if args.inductor_cache else 'off (cold compiles)'}")
    print("step = forward + loss.backward() + AdamW step + zero_grad; median of "
          f"{args.steps} steps after {args.warmup} warm-up steps, systems interleaved; "
          "compile = first step - median step")
    for w in workloads:
        print(f"  {w}: {WORKLOADS[w][1]}")
    setup = one_time_setup([s for s in systems if s not in errors], thunder, args.device)
    print("one-time setup (first compile + step of a tiny model, not in the table): "
          + ", ".join(f"{k} {v}" for k, v in setup.items()))
    for s, v in setup.items():
        if v.startswith("failed"):
            errors[s] = "one-time setup " + v

    results = {}
    for w in workloads:
        t = time.perf_counter()
        usable = [s for s in systems if s not in errors]
        results[w] = run_workload(w, usable, args.steps, args.warmup, thunder, args.device)
        for s in systems:
            if s in errors:
                results[w][s] = {"error": errors[s]}
        print(f"  ({w}: {time.perf_counter() - t:.0f} s)", flush=True)
    print()
    print_results(results, systems)
    print(f"\n(total {time.perf_counter() - started:.0f} s; x eager = step time / eager's step time, "
          "below 1 is faster than eager)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": str(datetime.date.today()), "device": args.device, "torch": torch.__version__,
                       "thunder": getattr(thunder, "__version__", None), "threads": args.threads,
                       "steps": args.steps, "warmup": args.warmup, "inductor_cache": args.inductor_cache,
                       "one_time_setup": setup, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
