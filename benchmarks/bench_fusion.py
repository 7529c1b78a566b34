"""Generated Triton kernels vs eager PyTorch vs torch.compile, with achieved memory bandwidth.

    python benchmarks/bench_fusion.py [--budget 300] [--results benchmarks/RESULTS.md]
                                      [--no-torch-compile] [--no-examples] [--tiny]

Two parts, each row printed as soon as it is measured; a failing row prints its error
and the run goes on; a time budget (seconds) skips what is left once it is spent.

1. standalone regions: softmax, LayerNorm, RMSNorm, GELU(x + bias), residual + LayerNorm
   with rows of 1k to 32k elements, float32 and bfloat16, about 2**26 elements per input
   (far beyond L2). The function is traced into one FusionGroup and generated
   (tests/fusion_groups.group_from_fn -> fusionlens.executors.triton.generate); timed with
   triton.testing.do_bench (CUDA events, L2 flushed) against the eager function and
   torch.compile of it. Bandwidth = bytes the region must move (every input read once,
   every output written once) / time, next to the device's copy bandwidth (a large
   tensor copy, read + write).
2. examples: every @compiler.example in examples/*.py through fusionlens.driver.targets.compile_target
   with executors=["triton", "torch"] and benchmark=True: whole-program medians (compiled,
   eager, torch.compile) and per Triton region bandwidth, roofline minimum and % of peak
   (the report's regions[].roofline: docs/roofline.md).

`--tiny` runs everything on small sizes (on the CPU it needs TRITON_INTERPRET=1): a dry
run of the script itself, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import math
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))  # fusion_groups.group_from_fn

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from fusionlens.driver import checking  # noqa: E402

DEADLINE = [math.inf]


def left() -> float:
    return DEADLINE[0] - time.monotonic()


# --- the standalone functions --------------------------------------------------------------

def softmax(x):
    return torch.softmax(x, -1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def rms_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(x) * w


def gelu_bias(x, bias):
    return F.gelu(x + bias, approximate="tanh")


def residual_norm(x, residual, w, b):
    h = x + residual
    return F.layer_norm(h, (h.shape[-1],), w, b, eps=1e-5), h


def _inputs(name, rows, n, dtype, device):
    r = lambda *s: torch.randn(*s, device=device, dtype=dtype)  # noqa: E731
    if name == "softmax":
        return (r(rows, n),)
    if name == "layer_norm":
        return r(rows, n), r(n), r(n)
    if name == "rms_norm":
        return r(rows, n), r(n)
    if name == "gelu_bias":
        return r(rows, n), r(n)
    if name == "residual_norm":
        return r(rows, n), r(rows, n), r(n), r(n)
    raise KeyError(name)


FUNCS: dict[str, Callable[..., Any]] = {"softmax": softmax, "layer_norm": layer_norm, "rms_norm": rms_norm,
                                        "gelu_bias": gelu_bias, "residual_norm": residual_norm}


# --- timing ---------------------------------------------------------------------------------

def bench_ms(fn, device) -> float:
    """Median milliseconds of one call."""
    if device.type == "cuda":
        from triton.testing import do_bench

        try:
            return float(do_bench(fn, warmup=10, rep=50, return_mode="median"))
        except TypeError:  # an older do_bench without return_mode
            return float(do_bench(fn, warmup=10, rep=50, quantiles=[0.5])[0])
    fn()
    samples = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def copy_bandwidth_gbs(device, tiny: bool) -> float:
    n = (1 << 16) if tiny else (1 << 28)  # 1 GiB of float32
    x = torch.empty(n, device=device, dtype=torch.float32).normal_()
    y = torch.empty_like(x)
    ms = bench_ms(lambda: y.copy_(x), device)
    return 2 * x.numel() * 4 / (ms * 1e-3) / 1e9


def nbytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        key = (t.data_ptr(), t.numel(), t.dtype)
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


# --- table / results ------------------------------------------------------------------------

HEAD = ["case", "dtype", "shape", "status", "generated ms", "eager ms", "torch.compile ms", "vs eager",
        "vs compile", "GB/s", "% of copy"]


def fmt(x, digits=4):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


class Table:
    def __init__(self, headers):
        self.headers = headers
        self.rows = []

    def add(self, row):
        row = [fmt(x) for x in row]
        self.rows.append(row)
        print("  ".join(row), flush=True)

    def text(self) -> str:
        widths = [max(len(str(r[i])) for r in [self.headers] + self.rows) for i in range(len(self.headers))]
        line = "  ".join(f"{{:<{w}}}" for w in widths)
        out = [line.format(*self.headers), line.format(*("-" * w for w in widths))]
        out += [line.format(*r) for r in self.rows]
        return "\n".join(out)

    def markdown(self) -> str:
        out = ["| " + " | ".join(self.headers) + " |", "|" + "---|" * len(self.headers)]
        out += ["| " + " | ".join(str(c).replace("|", "/") for c in r) + " |" for r in self.rows]
        return "\n".join(out)


# --- part 1: standalone regions --------------------------------------------------------------

def standalone(table, device, args, copy_gbs):
    from fusion_groups import group_from_fn
    from fusionlens.executors import triton as tx

    f32, bf16 = torch.float32, torch.bfloat16
    # most telling first, so that a spent budget drops the least
    order = [(64, f32), (256, bf16)] if args.tiny else [
        (4096, f32), (32768, bf16), (1024, bf16), (16384, f32), (32768, f32), (4096, bf16), (1024, f32),
        (16384, bf16)]
    total = (1 << 12) if args.tiny else (1 << 26)
    for n, dtype in order:
        for name, fn in FUNCS.items():
            if True:
                rows = max(1, total // n)
                label = [name, str(dtype).removeprefix("torch."), f"{rows}x{n}"]
                if left() <= 0:
                    table.add(label + ["skipped: time budget spent"] + [None] * 7)
                    continue
                try:
                    torch.manual_seed(0)
                    inputs = _inputs(name, rows, n, dtype, device)
                    group, ins = group_from_fn(fn, *inputs, gid=f"B_{name}_{n}")
                    gen = tx.generate(group, device)
                    assert gen.fn is not None  # generate() gives the launcher
                    with torch.no_grad():
                        out = gen.fn(*ins)
                        expected = fn(*inputs)
                    exp = list(expected) if isinstance(expected, tuple) else [expected]
                    problem = checking.mismatch(list(out), exp)
                    status = "ok" if problem is None else f"MISMATCH {problem[:60]}"
                    gms = bench_ms(lambda gen=gen, ins=ins: gen.fn(*ins), device)
                    with torch.no_grad():
                        ems = bench_ms(lambda fn=fn, inputs=inputs: fn(*inputs), device)
                    tcms = None
                    if not args.no_torch_compile and left() > 0:
                        try:
                            tc = torch.compile(fn, dynamic=False)
                            with torch.no_grad():
                                tc(*inputs)
                                tcms = bench_ms(lambda tc=tc, inputs=inputs: tc(*inputs), device)
                        except Exception as e:  # torch.compile unavailable: say so, go on
                            status += f"; torch.compile failed: {type(e).__name__}"
                    moved = nbytes(ins) + nbytes(out)
                    gbs = moved / (gms * 1e-3) / 1e9
                    table.add(label + [status, gms, ems, tcms, ems / gms, (tcms / gms) if tcms else None,
                                       gbs, 100 * gbs / copy_gbs if copy_gbs else None])
                except Exception as e:
                    table.add(label + [f"ERROR {type(e).__name__}: {str(e)[:100]}"] + [None] * 7)
                    traceback.print_exc(limit=3)
                finally:
                    if device.type == "cuda":
                        torch.cuda.empty_cache()


# --- part 2: examples ---------------------------------------------------------------------

def examples(table, rtable, device, args, copy_gbs):
    from fusionlens.report.discovery import find_targets
    from fusionlens.driver.targets import compile_target

    files = sorted(glob.glob(os.path.join(ROOT, "examples", "*.py")))
    for path in files:
        with open(path, encoding="utf-8") as f:
            targets = find_targets(f.read(), path)
        for t in targets:
            label = [f"{os.path.basename(path)}:{t.name}"]
            if left() <= 0:
                table.add(label + ["skipped: time budget spent"] + [None] * 7)
                continue
            try:
                rep = compile_target(path, t.name, executors=["triton", "torch"], benchmark=True,
                                     repeats=10 if args.tiny else 30, device=str(device),
                                     torch_compile=not args.no_torch_compile and left() > 60)
                if rep.status == "error":
                    table.add(label + [f"ERROR {rep.error.message[:100]}"] + [None] * 7)
                    continue
                errors = [d.message for d in rep.diagnostics if d.severity == "error"]
                tri = [r for r in rep.forward.regions if r.executor == "triton"]
                declined = [r for r in rep.forward.regions if "declined" in (r.note or "")]
                status = "ok" if not errors else f"MISMATCH {errors[0][:60]}"
                tm = rep.forward.timings
                c = tm.compiled.median_ms if tm else None
                e = tm.eager.median_ms if tm else None
                tc = tm.torch_compile.median_ms if tm and tm.torch_compile else None
                table.add(label + [status, f"{len(tri)} triton / {len(rep.forward.regions)} regions"
                                   + (f", {len(declined)} declined" if declined else ""),
                                   c, e, tc, (e / c) if c and e else None, (tc / c) if c and tc else None])
                for r in tri:
                    if r.timing is None or not r.timing.median_ms:
                        continue
                    moved = sum(math.prod(x.shape) * _esize(x.dtype) for x in r.inputs + r.outputs)
                    gbs = moved / (r.timing.median_ms * 1e-3) / 1e9
                    line = r.roofline  # on this GPU: its least time and how close the kernel came
                    rtable.add([label[0], r.id, "+".join(sorted({o.removeprefix("prims.") for o in r.ops}))[:50],
                                r.timing.median_ms, r.timing.eager_median_ms,
                                (r.timing.eager_median_ms / r.timing.median_ms) if r.timing.eager_median_ms else None,
                                gbs, 100 * gbs / copy_gbs if copy_gbs else None,
                                line.min_ms if line else None, line.pct_of_peak if line else None])
            except Exception as e:
                table.add(label + [f"ERROR {type(e).__name__}: {str(e)[:100]}"] + [None] * 7)
                traceback.print_exc(limit=3)


def _esize(dtype: str) -> int:
    return torch.empty((), dtype=getattr(torch, dtype)).element_size()


def versions() -> str:
    parts = [f"python {platform.python_version()}", f"torch {torch.__version__}"]
    try:
        import triton

        parts.append(f"triton {triton.__version__}")
    except Exception:
        parts.append("triton: not importable")
    return ", ".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=300.0, help="seconds; what is left is skipped")
    ap.add_argument("--results", default=None, help="write the tables to this markdown file")
    ap.add_argument("--no-torch-compile", action="store_true")
    ap.add_argument("--no-examples", action="store_true")
    ap.add_argument("--no-standalone", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="small sizes: a dry run of the script")
    ap.add_argument("--device", default="auto")
    args = ap.parse_args(argv)
    start = time.monotonic()
    # standalone regions get 55% of the budget (when examples run too), examples the rest
    DEADLINE[0] = start + (args.budget * (1.0 if args.no_examples else 0.55))
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.machine()})"
    print(f"# {name}; {versions()}", flush=True)
    from fusionlens.executors import triton as tx

    try:  # one torch.compile per (function, shape, dtype): more than dynamo's default 8
        import importlib

        dynamo_config = importlib.import_module("torch._dynamo").config
        for knob in ("cache_size_limit", "recompile_limit"):
            if hasattr(dynamo_config, knob):
                setattr(dynamo_config, knob, 64)
    except Exception:
        pass
    ok, why = tx.EXECUTOR.available(device)
    if not ok:
        print(f"the triton executor is not available here: {why}")
        return 2
    try:
        copy_gbs = copy_bandwidth_gbs(device, args.tiny)
    except Exception as e:
        print(f"copy bandwidth failed: {type(e).__name__}: {e}")
        copy_gbs = None
    print(f"# device copy bandwidth (read + write of a {'256 KiB' if args.tiny else '1 GiB'} float32 tensor): "
          f"{fmt(copy_gbs)} GB/s", flush=True)
    t1 = Table(HEAD)
    t2 = Table(["example", "status", "regions", "compiled ms", "eager ms", "torch.compile ms", "vs eager",
                "vs compile"])
    t3 = Table(["example", "region", "ops", "region ms", "eager ms", "vs eager", "GB/s", "% of copy",
                "roofline ms", "% of peak"])
    if not args.no_standalone:
        print("\n## standalone regions (one generated kernel each)\n" + "  ".join(HEAD), flush=True)
        standalone(t1, device, args, copy_gbs)
    if not args.no_examples:
        print("\n## examples (whole programs, executors triton + torch)", flush=True)
        DEADLINE[0] = start + args.budget
        examples(t2, t3, device, args, copy_gbs)
    print("\n" + t1.text() + "\n\n" + t2.text() + "\n\n" + t3.text(), flush=True)
    if args.results:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        md = [f"## Run of {stamp}", "", f"{name}; {versions()}; copy bandwidth {fmt(copy_gbs)} GB/s"
              + ("; --tiny dry run: figures mean nothing" if args.tiny else ""), "",
              "### Standalone regions", "", t1.markdown(), "", "### Examples", "", t2.markdown(), "",
              "### Triton regions of the examples", "", t3.markdown(), ""]
        with open(args.results, "a", encoding="utf-8") as f:
            f.write("\n".join(md) + "\n")
        print(f"appended to {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
