"""Compile latency and host overhead per call, FusionLens vs eager, torch.compile, Thunder.

    python benchmarks/bench_compile.py [--no-torch-compile] [--repeats 200]

Compile latency: first call (trace to callable) on each example target. Host overhead:
median time per call on tiny inputs, where the kernels cost next to nothing and what is
left is the Python between them. Prints tables; never asserts.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import compiler  # noqa: E402
from compiler import timing  # noqa: E402
from compiler.discovery import find_targets  # noqa: E402
from compiler.targets import load_module  # noqa: E402


def table(rows, headers):
    widths = [max(len(str(r[i])) for r in [headers] + rows) for i in range(len(headers))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*headers))
    print(line.format(*("-" * w for w in widths)))
    for r in rows:
        print(line.format(*map(str, r)))


def thunder_jit():
    try:
        import thunder  # noqa: F401
    except Exception:
        return None
    return thunder.jit


def first_call_ms(make, args):
    start = time.perf_counter()
    fn = make()
    fn(*args)
    return (time.perf_counter() - start) * 1e3


class TinyMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def tiny_workloads():
    ln = torch.nn.LayerNorm(16)
    return [
        ("add+mul", lambda x, y: (x + y) * 2, (torch.randn(4), torch.randn(4))),
        ("softmax", lambda x: torch.softmax(x, -1), (torch.randn(2, 8),)),
        ("layernorm", ln, (torch.randn(4, 16),)),
        ("mlp", TinyMLP().eval(), (torch.randn(2, 8),)),
    ]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--no-torch-compile", action="store_true")
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--executors", nargs="+", default=None)
    args = p.parse_args()
    tjit = thunder_jit()
    torch.set_num_threads(1)
    print(f"device: {timing.device_name(torch.device('cpu'))}, torch {torch.__version__}, "
          f"thunder {'available' if tjit else 'not installed'}\n")

    print("Compile latency (first call: trace, decompose, optimise, plan, build), ms")
    rows = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.py"))):
        module = load_module(path)
        for t in find_targets(open(path).read()):
            value = getattr(module, t.name)()
            fn, fargs = value[0], tuple(value[1])
            kwargs = value[2] if len(value) > 2 else {}
            fl = first_call_ms(lambda: compiler.jit(fn, executors=args.executors), fargs) if not kwargs else None
            rows.append([t.name, f"{fl:.1f}" if fl is not None else "-"])
    table(rows, ["target", "fusionlens"])

    print("\nHost overhead per call on tiny inputs, median us (lower is better)")
    rows = []
    for name, fn, fargs in tiny_workloads():
        eager = timing.measure(fn, *fargs, warmup=20, repeats=args.repeats).median_ms * 1e3
        jf = compiler.jit(fn, executors=args.executors)
        ours = timing.measure(jf, *fargs, warmup=20, repeats=args.repeats).median_ms * 1e3
        row = [name, f"{eager:.1f}", f"{ours:.1f}", f"{ours / eager:.2f}x"]
        if not args.no_torch_compile:
            try:
                tc = torch.compile(fn)
                compile_ms = first_call_ms(lambda: tc, fargs)
                tcu = timing.measure(tc, *fargs, warmup=20, repeats=args.repeats).median_ms * 1e3
                row += [f"{tcu:.1f} (compile {compile_ms:.0f} ms)"]
            except Exception as e:
                row += [f"failed: {type(e).__name__}"]
        else:
            row += ["skipped"]
        if tjit:
            try:
                th = tjit(fn)
                th(*fargs)
                row += [f"{timing.measure(th, *fargs, warmup=20, repeats=args.repeats).median_ms * 1e3:.1f}"]
            except Exception as e:
                row += [f"failed: {type(e).__name__}"]
        else:
            row += ["not installed"]
        rows.append(row)
    table(rows, ["workload", "eager", "fusionlens", "vs eager", "torch.compile", "thunder"])


if __name__ == "__main__":
    main()
