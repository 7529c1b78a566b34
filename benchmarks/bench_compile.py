"""Fixed costs of the jit path: FusionLens vs Thunder, torch.compile and eager, in one run.

    python benchmarks/bench_compile.py [--first-repeats 5] [--repeats 300] [--no-torch-compile] [--baseline DIR]
                                       [--threads N] [--call-processes N] [--no-first]
                                       [--gc-collect | --gc-freeze]

Three tables, for small functions (a 10-op elementwise chain, an MLP, softmax, LayerNorm):

- First call, each in a fresh process (median of --first-repeats, the frameworks
  interleaved so a busy machine slows them alike): `torch import` and `import` (the
  framework's, after torch's); `first call`: jit(fn) plus its first call (trace, compile,
  run), under torch.no_grad() (inference; thunder would also trace a backward for a
  module's parameters; FusionLens's call runs its program once, the run its check compares
  with eager, returned as the call's result); `its full gc`: the part of the import, and of the first call,
  spent in full (generation 2) garbage collections. After `import torch` one falls due
  within some 7k allocations (about 100 ms here: every full collection walks torch's ~170k
  objects) and whatever allocates next pays it: thunder's import does; FusionLens's
  import (~7k objects) or its first call does, depending on where the count falls.
  The result is compared with eager's, computed after the timed calls (computed before them,
  an op such as softmax left OpenMP's second thread spinning, 1.5-4 ms of CPU, beside the timed
  call on a 2-core machine). `second call`: the same call again right after (where a first call leaves work to the
  next: FusionLens runs a small first call's ops on one thread, fusionlens/frontend/intra_op.py,
  so torch's intra-op pool starts on the second call, as it does on eager's first).
  `first call - full gc` is the framework's own work (young collections included: `its young
  gc`, generations 0 and 1; the first call's young collection also walks what the import left
  in generation 1, about a millisecond here); `import + first call` is what a user waits for
  after `import torch`,
  wherever the collection falls. --gc-collect runs gc.collect() before the timed call;
  --gc-freeze runs gc.freeze() right after `import torch` (what a user may choose: later
  full collections skip torch's objects). `process`: the whole `python` run (interpreter,
  torch, framework, first call, exit). .pyc files are written once first (a priming run of
  each child), so imports are measured with them present. torch.compile runs cold
  (TORCHINDUCTOR_FORCE_DISABLE_CACHES=1).
- Host overhead per call on tiny inputs: median of --repeats samples of 20 calls each, all
  frameworks interleaved, under torch.no_grad() (inference), and with grad mode on for the
  functions without parameters (a module's parameters would make eager build a graph).
  FusionLens's cached calls run the code generated for their program
  (fusionlens/driver/fast_path.py: the call's guards as straight-line code, one C++ check of
  its tensors, the program).
- With --baseline DIR and --call-processes N: per call again, chain10 and softmax, FusionLens
  and the baseline each in N child processes, alternating (a process's own speed, which varies
  by a few percent on a shared machine, then weighs on both alike): each sample's ratio to the
  eager batch beside it, pooled, their median and a 95% bootstrap interval of that median.
- Compile latency of every example target (FusionLens only, in this process).

Thunder (lightning-thunder 0.2.x) is imported through benchmarks/thunder_shim.py, which
stands in for the named-tensor methods torch 2.13 removed. Prints tables; never asserts.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()

import argparse  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

_T_TORCH = time.perf_counter()
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from tables import table  # noqa: E402

FRAMEWORKS = ("eager", "fusionlens", "thunder", "torch.compile")
BASELINE = "fusionlens-before"  # the first-call table's row of --baseline DIR's FusionLens


# --- workloads: torch only, so a child process imports nothing else before it is timed ----

def chain10(x, y):
    a = x * y
    b = a + 1.0
    c = torch.sin(b)
    d = c * 2.0
    e = d - x
    f = torch.tanh(e)
    g = f * y
    h = g + 0.5
    i = torch.relu(h)
    return i * 3.0


def softmax(x):
    return torch.softmax(x, -1)


class TinyMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def workload(name: str):
    """(fn, args, has_parameters), the same in every process."""
    torch.manual_seed(0)
    if name == "chain10":
        return chain10, (torch.randn(4), torch.randn(4)), False
    if name == "mlp":
        return TinyMLP().eval(), (torch.randn(2, 8),), True
    if name == "softmax":
        return softmax, (torch.randn(2, 8),), False
    if name == "layernorm":
        return torch.nn.LayerNorm(16).eval(), (torch.randn(4, 16),), True
    raise ValueError(name)


WORKLOADS = ("chain10", "mlp", "softmax", "layernorm")


def import_framework(framework: str):
    """The function that makes a compiled callable (its import is what is timed)."""
    if framework == BASELINE:  # another checkout of FusionLens (--baseline DIR): before/after in one run
        sys.path.insert(0, os.environ["FUSIONLENS_BENCH_BASELINE"])
        framework = "fusionlens"
    if framework == "fusionlens":
        import compiler

        return compiler.jit
    if framework == "thunder":
        from thunder_shim import import_thunder

        thunder, why = import_thunder()
        if thunder is None:
            raise RuntimeError(why)
        return thunder.jit
    if framework == "torch.compile":
        return torch.compile
    return lambda fn: fn


# --- the child: one framework, one workload, one fresh process -----------------------------

def child(framework: str, name: str, gc_mode: str) -> None:
    if os.environ.get("FUSIONLENS_BENCH_THREADS"):  # --threads: before anything runs an op
        torch.set_num_threads(int(os.environ["FUSIONLENS_BENCH_THREADS"]))
    if gc_mode == "freeze":
        gc.freeze()
    phase, full_ms, started = ["import"], {"import": 0.0, "setup": 0.0, "first": 0.0, "second": 0.0}, [0.0]
    young_ms = dict(full_ms)

    def on_gc(step, info):  # time in full (and in young) collections, by the phase they fall in
        if step == "start":
            started[0] = time.perf_counter()
        else:
            (full_ms if info["generation"] == 2 else young_ms)[phase[0]] += time.perf_counter() - started[0]
    gc.callbacks.append(on_gc)
    t1 = time.perf_counter()
    make = import_framework(framework)
    t2 = time.perf_counter()
    phase[0] = "setup"
    fn, args, _ = workload(name)
    if gc_mode == "collect":
        gc.collect()
    with torch.no_grad():  # inference, as FusionLens compiles it (thunder would also trace a backward)
        phase[0] = "first"
        t3 = time.perf_counter()
        compiled = make(fn)
        out = compiled(*args)
        t4 = time.perf_counter()
        phase[0] = "second"
        again = compiled(*args)  # where the first call left work to the next (the intra-op pool's start)
        t5 = time.perf_counter()
    gc.callbacks.remove(on_gc)
    with torch.no_grad():  # eager's result after the timed calls: its run would leave torch's pool busy for them
        expected = fn(*args) if framework != "eager" else None
    ok = expected is None or (torch.allclose(out, expected, rtol=1e-5, atol=1e-6)
                              and torch.allclose(again, expected, rtol=1e-5, atol=1e-6))
    gc_ms = full_ms["first"] * 1e3
    print(json.dumps({"torch_ms": (_T_TORCH - _T0) * 1e3, "import_ms": (t2 - t1) * 1e3,
                      "import_gc_ms": full_ms["import"] * 1e3, "first_ms": (t4 - t3) * 1e3, "gc_ms": gc_ms,
                      "young_gc_ms": young_ms["first"] * 1e3,
                      "first_no_gc_ms": (t4 - t3) * 1e3 - gc_ms, "second_ms": (t5 - t4) * 1e3,
                      "import_first_ms": (t2 - t1 + t4 - t3) * 1e3,
                      "ok": bool(ok)}))


def run_child(framework: str, name: str, gc_mode: str, write_pyc: bool = False) -> dict:
    env = dict(os.environ)
    if write_pyc:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    if framework == "torch.compile":
        env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    cmd = [sys.executable, os.path.abspath(__file__), "--child", framework, name, "--gc", gc_mode]
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = (time.perf_counter() - start) * 1e3
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1][:120]}
    result = json.loads(r.stdout.strip().splitlines()[-1])
    result["process_ms"] = wall
    return result


def first_calls(frameworks, repeats: int, gc_mode: str) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(framework, workload) -> list of child results, interleaved repeats."""
    for fw in frameworks:  # write .pyc files (torch's, ours, thunder's) before anything is timed
        run_child(fw, WORKLOADS[0], gc_mode, write_pyc=True)
    out: dict[tuple[str, str], list[dict[str, Any]]] = {(fw, w): [] for fw in frameworks for w in WORKLOADS}
    for _ in range(repeats):
        for w in WORKLOADS:
            for fw in frameworks:
                out[fw, w].append(run_child(fw, w, gc_mode))
    return out


def _median(results, key):
    values = [r[key] for r in results if key in r]
    return statistics.median(values) if values else None


# --- per call, in this process -------------------------------------------------------------

def per_call_samples(fns: dict, args, repeats: int, batch: int = 20) -> dict[str, list[float]]:
    """name -> microseconds a call, one sample a batch, the callables interleaved batch by batch
    (in a rotating order, so that none always runs right after another)."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        for _ in range(20):
            f(*args)
    names = list(fns)
    for r in range(repeats):
        for k in names[r % len(names):] + names[:r % len(names)]:
            f = fns[k]
            t = time.perf_counter_ns()
            for _ in range(batch):
                f(*args)
            samples[k].append((time.perf_counter_ns() - t) / batch / 1e3)
    return samples


def per_call_us(fns: dict, args, repeats: int, batch: int = 20) -> dict[str, float]:
    """name -> median microseconds a call, the callables interleaved batch by batch."""
    return {k: statistics.median(v) for k, v in per_call_samples(fns, args, repeats, batch).items()}


def ratio_spread(a: list[float], b: list[float], resamples: int = 2000) -> tuple[float, float, float]:
    """The median of the paired ratios a[i] / b[i] (samples taken side by side), and a 95%
    bootstrap interval of that median: (median, low, high)."""
    import random

    ratios = [x / y for x, y in zip(a, b)]
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return statistics.median(ratios), medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


# --- per call, FusionLens before and after, in alternating child processes -----------------

CALL_WORKLOADS = ("chain10", "softmax")


def per_call_child(framework: str, repeats: int) -> None:
    """Samples of eager and of `framework`'s jit, interleaved, for each CALL_WORKLOADS and grad
    mode, as JSON: {"workload|mode": {"eager": [...], "jit": [...]}}."""
    if os.environ.get("FUSIONLENS_BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["FUSIONLENS_BENCH_THREADS"]))
    make = import_framework(framework)
    out = {}
    for w in CALL_WORKLOADS:
        fn, fargs, _ = workload(w)
        for mode in ("no_grad", "grad on"):
            with torch.set_grad_enabled(mode == "grad on"):
                out[f"{w}|{mode}"] = per_call_samples({"eager": fn, "jit": make(fn)}, fargs, repeats)
    print(json.dumps(out))


def per_call_processes(frameworks: list[str], processes: int, repeats: int) -> dict:
    """(framework, workload|mode) -> [per child: the paired ratios jit/eager of its samples],
    the frameworks' children alternating."""
    ratios: dict = {}
    for _ in range(processes):
        for fw in frameworks:
            cmd = [sys.executable, os.path.abspath(__file__), "--call-child", fw, "--repeats", str(repeats)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"  {fw}: {(r.stderr.strip().splitlines() or ['failed'])[-1][:120]}")
                continue
            for key, s in json.loads(r.stdout.strip().splitlines()[-1]).items():
                ratios.setdefault((fw, key), []).append([j / e for j, e in zip(s["jit"], s["eager"])])
    return ratios


def _median_spread(children: list[list[float]], resamples: int = 2000) -> str:
    """The median of all the paired ratios, a 95% bootstrap interval of it that resamples whole
    children (a process's own speed varies by a few percent: the samples of one child are not
    independent of each other), and the children's own medians, lowest and highest."""
    import random

    rng = random.Random(0)
    pooled = [r for child in children for r in child]

    def resampled() -> float:
        return statistics.median([r for child in rng.choices(children, k=len(children)) for r in child])
    medians = sorted(resampled() for _ in range(resamples))
    own = [statistics.median(child) for child in children]
    return (f"{statistics.median(pooled):.3f}x [{medians[int(0.025 * resamples)]:.3f}, "
            f"{medians[int(0.975 * resamples) - 1]:.3f}] (children {min(own):.3f}-{max(own):.3f})")


def _fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def _ratio(a, b):
    return "-" if a is None or b is None else f"{a / b:.2f}x"


def first_call_tables(args, frameworks: list[str]) -> None:
    """The first-call table and its ratios to Thunder."""
    said = {"none": "no gc.collect() before it", "collect": "gc.collect() before it",
            "freeze": "gc.freeze() after import torch"}[args.gc]
    print(f"\nFirst call in a fresh process, median of {args.first_repeats}, ms ({said}; torch threads "
          f"{args.threads or 'default'}; 'its full gc': of the import, of the first call, in full collections)")
    results = first_calls(frameworks, args.first_repeats, args.gc)
    rows = []
    for w in WORKLOADS:
        for fw in frameworks:
            rs = results[fw, w]
            errors = [r["error"] for r in rs if "error" in r]
            bad = sum(1 for r in rs if r.get("ok") is False)
            paid = sum(1 for r in rs if r.get("gc_ms", 0) > 0)  # the median hides a collection in a minority of runs
            rows.append([w, fw, _fmt(_median(rs, "torch_ms"), 0), _fmt(_median(rs, "import_ms")),
                         _fmt(_median(rs, "import_gc_ms")), _fmt(_median(rs, "first_ms")), _fmt(_median(rs, "gc_ms")),
                         _fmt(_median(rs, "young_gc_ms")),
                         _fmt(_median(rs, "first_no_gc_ms")), _fmt(_median(rs, "second_ms"), 2),
                         _fmt(_median(rs, "import_first_ms")), _fmt(_median(rs, "process_ms"), 0),
                         f"{paid}/{len(rs)}" + (f" FAILED: {errors[0]}" if errors else "")
                         + (f" {bad} wrong results" if bad else "")])
    table(rows, ["workload", "framework", "torch import", "import", "its full gc", "first call", "its full gc",
                 "its young gc", "first call - full gc", "second call", "import + first call", "process",
                 "runs with a full gc in the first call"])
    if "thunder" in frameworks and "fusionlens" in frameworks:
        print("\nFusionLens / Thunder (target for first call: <= 0.15x, issue 30 part 4)")
        rows = []
        for w in WORKLOADS:
            for fw in ("fusionlens", BASELINE) if BASELINE in frameworks else ("fusionlens",):
                fl, th = results[fw, w], results["thunder", w]
                rows.append([w, fw] + [_ratio(_median(fl, k), _median(th, k)) for k in
                                       ("import_ms", "first_ms", "first_no_gc_ms", "import_first_ms", "process_ms")])
        table(rows, ["workload", "framework", "import", "first call", "first call - full gc", "import + first call",
                     "process"])



def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", nargs=2, metavar=("FRAMEWORK", "WORKLOAD"), help=argparse.SUPPRESS)
    p.add_argument("--call-child", metavar="FRAMEWORK", help=argparse.SUPPRESS)
    p.add_argument("--call-processes", type=int, default=0,
                   help="with --baseline: also per call, FusionLens and the baseline in this many alternating child "
                        "processes each (torch threads as --threads), paired ratios to eager with a 95%% interval")
    p.add_argument("--no-first", action="store_true", help="skip the first-call table")
    p.add_argument("--gc-collect", action="store_const", const="collect", dest="gc", default="none",
                   help="gc.collect() before the timed first call")
    p.add_argument("--gc-freeze", action="store_const", const="freeze", dest="gc",
                   help="gc.freeze() right after import torch, in every child")
    p.add_argument("--gc", choices=("none", "collect", "freeze"), help=argparse.SUPPRESS)
    p.add_argument("--no-torch-compile", action="store_true")
    p.add_argument("--no-thunder", action="store_true")
    p.add_argument("--only", default="", help="comma-separated frameworks for the first-call table (all by default)")
    p.add_argument("--first-repeats", type=int, default=5, help="fresh processes per framework and workload")
    p.add_argument("--repeats", type=int, default=300, help="samples of 20 calls for the per-call table")
    p.add_argument("--no-examples", action="store_true")
    p.add_argument("--threads", type=int, help="torch threads in the first-call children (default: torch's own). "
                   "On a loaded 2-core machine each multi-threaded op (softmax) waits 10-15 ms for its threads, "
                   "and a framework that runs an op more often pays that more often")
    p.add_argument("--baseline", metavar="DIR", help="another FusionLens checkout (e.g. `git archive HEAD` unpacked): "
                   f"its first calls as {BASELINE!r}, interleaved with this one's")
    args = p.parse_args()
    if args.call_child:
        return per_call_child(args.call_child, args.repeats)
    if args.child:
        child_framework, child_workload = args.child  # nargs=2
        return child(child_framework, child_workload, gc_mode=args.gc)

    torch.set_num_threads(1)
    thunder = None
    why = "skipped (--no-thunder)"
    if not args.no_thunder:
        from thunder_shim import describe, import_thunder

        thunder, why = import_thunder()
    frameworks = [fw for fw in FRAMEWORKS if (fw != "thunder" or thunder is not None)
                  and (fw != "torch.compile" or not args.no_torch_compile)
                  and (not args.only or fw in args.only.split(","))]
    if args.threads:
        os.environ["FUSIONLENS_BENCH_THREADS"] = str(args.threads)  # the children inherit it
    if args.baseline:
        os.environ["FUSIONLENS_BENCH_BASELINE"] = os.path.abspath(args.baseline)  # the children inherit it
        frameworks.insert(frameworks.index("fusionlens") + 1 if "fusionlens" in frameworks else 0, BASELINE)
    import compiler

    print(f"{datetime.date.today()} · {platform.machine()} CPU, {os.cpu_count()} cores, torch threads 1 (per-call "
          f"table) · python {platform.python_version()}, torch {torch.__version__}, "
          f"thunder {thunder.__version__ + ' (' + describe() + ')' if thunder else 'not used: ' + why}")

    if not args.no_first:
        first_call_tables(args, frameworks)
    if args.call_processes and args.baseline:
        names = ["fusionlens", BASELINE]
        print(f"\nPer call, FusionLens / eager in {args.call_processes} alternating child processes each, "
              f"{args.repeats} x 20 calls a process, torch threads {args.threads or 'default'}: the median of the "
              "paired batch ratios, a 95% bootstrap interval of it over whole children, the children's medians")
        ratios = per_call_processes(names, args.call_processes, args.repeats)
        rows = [[key.replace("|", " "), *(_median_spread(ratios[fw, key]) if (fw, key) in ratios else "failed"
                                          for fw in names)]
                for key in [f"{w}|{m}" for w in CALL_WORKLOADS for m in ("no_grad", "grad on")]]
        table(rows, ["workload", *names])

    print(f"\nHost overhead per call on tiny inputs, median of {args.repeats} x 20 calls, us (x = vs eager)")
    rows = []
    for w in WORKLOADS:
        fn, fargs, has_params = workload(w)
        made = {"eager": fn, "fusionlens": compiler.jit(fn)}
        if thunder is not None:
            made["thunder"] = thunder.jit(fn)
        if not args.no_torch_compile:
            made["torch.compile"] = torch.compile(fn)
        for mode in (["no_grad"] if has_params else ["no_grad", "grad on"]):
            with torch.set_grad_enabled(mode == "grad on"):
                usable = {}
                for k, f in made.items():  # the first call compiles (and fails here, if it fails)
                    try:
                        f(*fargs)
                        usable[k] = f
                    except Exception as e:  # noqa: BLE001 - a column says so
                        print(f"  {w} {k}: {type(e).__name__}: {str(e)[:100]}")
                samples = per_call_samples(usable, fargs, args.repeats)
            us = {k: statistics.median(v) for k, v in samples.items()}
            row = [w, mode]
            for k in FRAMEWORKS:
                if k not in made:
                    row.append("-")
                elif k not in us:
                    row.append("failed")
                else:
                    row.append(_fmt(us[k]) if k == "eager" else f"{us[k]:.1f} ({_ratio(us[k], us['eager'])})")
            if "fusionlens" in samples and "eager" in samples:
                mid, low, high = ratio_spread(samples["fusionlens"], samples["eager"])
                row.append(f"{mid:.3f}x [{low:.3f}, {high:.3f}]")
            rows.append(row)
    table(rows, ["workload", "grad mode"] + list(FRAMEWORKS) + ["fusionlens/eager paired (95% CI)"])
    print("(target: fusionlens <= 1.05x eager on chain10, issue 30 part 4; the last column: the median of the "
          "batch-by-batch ratios and a bootstrap interval of it)")

    if args.no_examples:
        return
    from fusionlens.report.discovery import find_targets
    from fusionlens.driver.targets import load_module

    print("\nCompile latency of the examples (FusionLens, first call in this process), ms")
    rows = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.py"))):
        module = load_module(path)
        for t in find_targets(open(path).read()):
            value = getattr(module, t.name)()
            fn, fargs = value[0], tuple(value[1])
            if len(value) > 2 and value[2]:
                rows.append([t.name, "- (keyword inputs)"])
                continue
            start = time.perf_counter()
            compiler.jit(fn)(*fargs)
            rows.append([t.name, f"{(time.perf_counter() - start) * 1e3:.1f}"])
    table(rows, ["target", "fusionlens"])


if __name__ == "__main__":
    main()
