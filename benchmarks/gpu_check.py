"""The GPU check: every step in its own process with its own budget, every result a JSON line
written as it is measured, the tables built from those lines at the end.

    python3 benchmarks/gpu_check.py [--out DIR] [--results benchmarks/RESULTS.md]
    python3 benchmarks/gpu_check.py --dry-run --out DIR     # on a CPU: the whole script, tiny sizes

benchmarks/gpu_check.sh runs it (python3, unbuffered). On a fresh H200 machine with torch and
nothing else (no network: it installs nothing) the steps take at most their budgets, 385 s in
all, under the 7 minutes the machine is lent for:

    nvfuser     20 s  benchmarks/nvfuser_probe.py: does nvFuser import and run against this torch?
    preflight   30 s  benchmarks/preflight.py: device, versions, one trivial Triton launch
    tests      100 s  the Triton tests on the GPU (no interpreter): generated kernels, split
                      reductions, static analysis thresholds, CUDA graphs
    big         45 s  benchmarks/big_tensors.py: a pointwise and a softmax over > 2**31 elements
    standalone 130 s  benchmarks/bench_fusion.py --no-examples: softmax, LayerNorm, RMSNorm, GELU +
                      bias, residual + LayerNorm, column sum, long-row sum, LayerNorm backward;
                      1k to 256k columns, fp32 and bf16; eager first, torch.compile with what is left
    examples    60 s  benchmarks/bench_fusion.py --no-standalone: every example without `nproc`

A step past its budget is killed and the next one runs; what it measured is already in
`DIR/results.jsonl`. At the end `DIR/summary.md` holds the tables and, on a GPU, they are
appended, dated, to benchmarks/RESULTS.md (and copied to DIR). Training benchmarks are their own
command (benchmarks/bench_train.py). Exit status 0 only when every step passed.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import results  # noqa: E402

PY = sys.executable or "python3"
TESTS = ["tests/test_triton.py", "tests/test_triton_split.py", "tests/test_triton_static.py",
         "tests/test_triton_gpu.py", "tests/test_triton_launch.py"]


def steps(dry: bool) -> list[tuple[str, int, list[str]]]:
    """(name, budget in seconds, command) of each step, in order."""
    if dry:  # everything once, at tiny sizes, on the interpreter
        tests = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                 "tests/test_triton_split.py", "-k", "column and f32", "tests/test_triton_gpu.py"]
        bench = [PY, "-u", "benchmarks/bench_fusion.py", "--tiny", "--no-torch-compile"]
        return [("nvfuser", 20, [PY, "-u", "benchmarks/nvfuser_probe.py"]),
                ("preflight", 60, [PY, "-u", "benchmarks/preflight.py", "--dry-run"]),
                ("tests", 120, tests),
                ("big", 60, [PY, "-u", "benchmarks/big_tensors.py", "--dry-run"]),
                ("standalone", 120, bench + ["--no-examples", "--budget", "100"]),
                # the examples' sizes take the interpreter minutes: their regions run as torch here
                ("examples", 120, ["env", "-u", "TRITON_INTERPRET"] + bench
                 + ["--no-standalone", "--budget", "100", "--examples", "softmax.py", "--target", "softmax_example",
                    "--target", "log_softmax_example"])]
    return [("nvfuser", 20, [PY, "-u", "benchmarks/nvfuser_probe.py"]),
            ("preflight", 30, [PY, "-u", "benchmarks/preflight.py"]),
            ("tests", 100, [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-x",
                            "--durations=5", *TESTS]),
            ("big", 45, [PY, "-u", "benchmarks/big_tensors.py"]),
            ("standalone", 130, [PY, "-u", "benchmarks/bench_fusion.py", "--no-examples", "--budget", "115"]),
            ("examples", 60, [PY, "-u", "benchmarks/bench_fusion.py", "--no-standalone", "--budget", "50"])]


def run_step(name: str, budget: int, command: list[str], env: dict[str, str], out_dir: str) -> bool:
    print(f"== {name} (budget {budget} s): {' '.join(command[1:])}", flush=True)
    start = time.monotonic()
    env = dict(env, FUSIONLENS_STEP=name)
    log = os.path.join(out_dir, f"{name}.log")
    with open(log, "w", encoding="utf-8") as f:
        try:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, bufsize=1)
            assert proc.stdout is not None
            deadline = start + budget
            for line in proc.stdout:  # echoed as it comes: nothing waits for the step's end
                f.write(line)
                print("   " + line.rstrip(), flush=True)
                if time.monotonic() > deadline:
                    break
            rc = _wait(proc, deadline)
        except OSError as e:
            rc, detail = 127, str(e)
    seconds = round(time.monotonic() - start, 1)
    status = "ok" if rc == 0 else ("timeout" if rc is None else f"exit {rc}")
    detail = "" if rc == 0 else _tail(log)
    if name == "tests":
        _test_counts(log, seconds)
    results.emit("step", step=name, status=status, seconds=seconds, budget=budget, detail=detail)
    print(f"   -> {status} in {seconds} s", flush=True)
    return rc == 0


def _wait(proc: subprocess.Popen, deadline: float) -> int | None:
    """The exit code, or None after killing a step past its deadline."""
    try:
        return proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def _tail(log: str) -> str:
    try:
        with open(log, encoding="utf-8") as f:
            lines = [x.strip() for x in f if x.strip()]
    except OSError:
        return ""
    return " / ".join(lines[-3:])[:300]


def _test_counts(log: str, seconds: float) -> None:
    """pytest's closing line (`3 passed, 1 failed, 2 skipped in 9.1s`) as a `tests` line."""
    import re

    try:
        text = open(log, encoding="utf-8").read()
    except OSError:
        return
    counts = {k: 0 for k in ("passed", "failed", "skipped", "errors")}
    for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", text):
        counts["errors" if word.startswith("error") else word] = int(n)
    results.emit("tests", suite=" ".join(TESTS), seconds=seconds, **counts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "benchmarks", "out"))
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "RESULTS.md"),
                    help="append the dated tables here (not in a dry run)")
    ap.add_argument("--dry-run", action="store_true", help="on a CPU: every step at tiny sizes")
    ap.add_argument("--only", nargs="*", help="run only these steps")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    jsonl = os.path.join(args.out, "results.jsonl")
    open(jsonl, "w").close()
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONUNBUFFERED="1", FUSIONLENS_RESULTS=jsonl, TRITON_DEFAULT_FP_FUSION="1",
               PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    if args.dry_run:
        env["TRITON_INTERPRET"] = "1"
    os.environ["FUSIONLENS_RESULTS"] = jsonl  # this process's own lines (steps)
    start = time.monotonic()
    ok = True
    for name, budget, command in steps(args.dry_run):
        if args.only and name not in args.only:
            continue
        ok = run_step(name, budget, command, env, args.out) and ok
    rows = results.read(jsonl)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    dry = " (dry run on a CPU: the figures mean nothing)" if args.dry_run else ""
    summary = f"## GPU check of {stamp}{dry}\n\n" + results.tables(rows)
    with open(os.path.join(args.out, "summary.md"), "w", encoding="utf-8") as f:
        f.write(summary)
    print("\n" + summary, flush=True)
    if not args.dry_run:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write("\n" + summary + "\n")
        shutil.copy(args.results, os.path.join(args.out, "RESULTS.md"))
    print(f"== done in {time.monotonic() - start:.0f} s: {'every step passed' if ok else 'a step failed'}",
          flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
