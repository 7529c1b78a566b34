"""Generated Triton kernels vs eager PyTorch vs torch.compile, with achieved memory bandwidth.

    python3 benchmarks/bench_fusion.py [--budget 300] [--results benchmarks/RESULTS.md]
                                       [--no-torch-compile] [--no-examples] [--no-standalone] [--tiny]
                                       [--examples softmax.py norms.py]

Each row is printed and written as a JSON line ($FUSIONLENS_RESULTS, benchmarks/results.py) the
moment it is measured; the budget (seconds) is checked before every row, so a spent budget or a
kill loses nothing already measured; a failing row prints its error and the run goes on.

1. standalone regions: softmax, LayerNorm, RMSNorm, GELU(x + bias), residual + LayerNorm, a
   column sum, a long-row sum and LayerNorm's backward (its dx kernel and its split weight and
   bias gradients), rows of 1k to 256k elements, float32 and bfloat16, 2**26 elements an input
   (256 MB in float32: past any L2). Each function is traced into FusionGroups and generated
   (tests/fusion_groups.group_from_fn -> fusionlens.executors.triton.generate). Eager first for
   every row, then torch.compile for as many rows as the budget leaves (its compiles are cold).
   Every system is timed the same way: triton.testing.do_bench (CUDA events, L2 flushed between
   samples), and the launch cost (host time a call, nothing waited for) is its own column.
   Bandwidth = the bytes the region must move / time, next to the measured copy bandwidth.
2. examples: every @fusionlens.example in examples/*.py but the distributed ones (`nproc`),
   through fusionlens.driver.targets.compile_target with executors ["triton", "torch"]:
   whole-program medians (compiled, eager, torch.compile) and each Triton region's bandwidth,
   roofline minimum and % of peak (docs/roofline.md). Their inputs are small (L2-resident):
   their bandwidths say what the examples get, not what the kernels can.

`--tiny` runs everything on small sizes (on the CPU it needs TRITON_INTERPRET=1): a dry run of
the script itself, its figures mean nothing.
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
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # results.py

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from fusionlens.driver import checking, timing  # noqa: E402
from results import emit  # noqa: E402

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


def column_sum(x):
    return x.sum(0)


def row_sum(x):
    return x.sum(-1)


def ln_backward(x, w, dy, mean, rstd):
    """LayerNorm's backward from its saved mean and rstd: dx reduces each row, the weight and bias
    gradients each column of the same rows; the partitioner makes it one two-axis region (two
    kernels: dx with each program's partial column sums, then their combine)."""
    xhat = (x.float() - mean.float()) * rstd.float()
    g = dy.float() * w.float()
    n = x.shape[-1]
    dx = (rstd * (g - g.sum(-1, keepdim=True) / n - xhat * (g * xhat).sum(-1, keepdim=True) / n)).to(x.dtype)
    return dx, (dy.float() * xhat).sum(0).to(x.dtype), dy.float().sum(0).to(x.dtype)


def ln_backward_eager(x, w, dy, mean, rstd):
    return torch.ops.aten.native_layer_norm_backward(dy, x, [x.shape[-1]], mean, rstd, w, None,
                                                     [True, True, False])[:2]


def _inputs(name, rows, n, dtype, device):
    r = lambda *s: torch.randn(*s, device=device, dtype=dtype)  # noqa: E731
    if name in ("softmax", "column_sum", "row_sum"):
        return (r(rows, n),)
    if name == "layer_norm":
        return r(rows, n), r(n), r(n)
    if name in ("rms_norm", "gelu_bias"):
        return r(rows, n), r(n)
    if name == "residual_norm":
        return r(rows, n), r(rows, n), r(n), r(n)
    if name == "ln_backward":
        x, w = r(rows, n), r(n)
        _, mean, rstd = torch.native_layer_norm(x, [n], w, None, 1e-5)  # what the forward saves, in its dtype
        return x, w, r(rows, n), mean, rstd
    raise KeyError(name)


FUNCS: dict[str, Callable[..., Any]] = {"softmax": softmax, "layer_norm": layer_norm, "rms_norm": rms_norm,
                                        "gelu_bias": gelu_bias, "residual_norm": residual_norm,
                                        "column_sum": column_sum, "row_sum": row_sum,
                                        "ln_backward": ln_backward_eager}


def generated(name: str, inputs, device):
    """(a call running the generated kernels, how many kernels) for one standalone case."""
    from fusion_groups import group_from_fn
    from fusionlens.executors import triton as tx

    if name != "ln_backward":
        group, ins = group_from_fn(FUNCS[name], *inputs, gid=f"B_{name}")
        gen = tx.generate(group, device)
        assert gen.fn is not None  # generate() gives the launcher
        return (lambda: gen.fn(*ins)), gen.kernels
    from fusion_groups import partitioned_group_from_fn

    group, ins, order = partitioned_group_from_fn(ln_backward, *inputs, gid="B_ln_backward")
    gen = tx.generate(group, device)
    fn = gen.fn
    assert fn is not None and group.column_dims, group  # one two-axis region

    def call():
        out = fn(*ins)
        return out[order[0]], out[order[1]]  # dx, dw (db is computed too; eager's is not asked)
    return call, gen.kernels


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

HEAD = ["case", "dtype", "shape", "status", "generated ms", "launch ms", "eager ms", "vs eager", "GB/s", "% of copy",
        "kernels"]
KEYS = ["case", "dtype", "shape", "status", "generated_ms", "launch_ms", "eager_ms", "vs_eager", "gbs", "pct_copy",
        "kernels"]


def fmt(x, digits=4):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


class Table:
    """Rows printed and written as JSON lines (kind `kind`, fields `keys`) as they are added."""

    def __init__(self, headers, kind: str, keys: list[str]):
        self.headers, self.kind, self.keys = headers, kind, keys
        self.rows: list[list[str]] = []

    def add(self, row):
        emit(self.kind, **dict(zip(self.keys, row)))
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

def _cases(tiny: bool) -> list[tuple[str, int, torch.dtype]]:
    """(function, columns, dtype), most telling first: a spent budget drops the least."""
    f32, bf16 = torch.float32, torch.bfloat16
    if tiny:
        return [(name, 64, f32) for name in FUNCS] + [(name, 256, bf16) for name in ("softmax", "ln_backward")]
    sizes = [(4096, f32), (32768, bf16), (262144, f32), (1024, bf16), (16384, f32), (65536, bf16), (131072, f32),
             (4096, bf16), (1024, f32), (262144, bf16)]
    out = [(name, n, dt) for n, dt in sizes for name in FUNCS if name not in ("column_sum", "row_sum")]
    # the reductions that need a split to fill the GPU: few long rows, and the leading dim
    out[6:6] = [("row_sum", 1 << 21, f32), ("column_sum", 4096, f32), ("row_sum", 1 << 20, bf16),
                ("column_sum", 1024, bf16)]
    return out


def _rows(name: str, n: int, tiny: bool) -> int:
    total = (1 << 12) if tiny else (1 << 26)
    return max(1, total // n)


def standalone(table, ctable, device, args, copy_gbs):
    measured = []
    for name, n, dtype in _cases(args.tiny):
        rows = _rows(name, n, args.tiny)
        label = [name, str(dtype).removeprefix("torch."), f"{rows}x{n}"]
        if left() <= 0:
            table.add(label + ["skipped: time budget spent"] + [None] * 7)
            continue
        try:
            torch.manual_seed(0)
            inputs = _inputs(name, rows, n, dtype, device)
            try:
                call, kernels = generated(name, inputs, device)
            except ValueError as e:  # two regions: Triton's takes_columns refused this backward
                table.add(label + [f"not one region here ({e}): see docs/kernels.md"] + [None] * 7)
                continue
            with torch.no_grad():
                out = call()
                # LayerNorm's backward in bf16 on a CPU accumulates in bf16: compare with float64's, rounded
                ref_in = [t.double() for t in inputs] if name == "ln_backward" and dtype != torch.float32 else inputs
                expected = FUNCS[name](*ref_in)
                expected = tuple(e.to(dtype) for e in expected) if ref_in is not inputs else expected
            exp = list(expected) if isinstance(expected, tuple) else [expected]
            problem = checking.mismatch(list(out)[:len(exp)], exp)
            status = "ok" if problem is None else f"MISMATCH {problem[:60]}"
            gms = bench_ms(call, device)
            launch = timing.launch_ms(call, device=device)
            with torch.no_grad():
                ems = bench_ms(lambda fn=FUNCS[name], inputs=inputs: fn(*inputs), device)
            moved = nbytes(inputs) + nbytes(out)
            gbs = moved / (gms * 1e-3) / 1e9
            table.add(label + [status, gms, launch, ems, ems / gms, gbs, 100 * gbs / copy_gbs if copy_gbs else None,
                               kernels])
            measured.append((name, n, dtype, rows, gms))
        except Exception as e:
            table.add(label + [f"ERROR {type(e).__name__}: {str(e)[:100]}"] + [None] * 7)
            traceback.print_exc(limit=3)
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
    if args.no_torch_compile:
        return
    for name, n, dtype, rows, gms in measured:  # torch.compile (cold compiles) with what time is left
        label = [name, str(dtype).removeprefix("torch."), f"{rows}x{n}"]
        if left() <= 0:
            ctable.add(label + ["skipped: time budget spent", None, None])
            continue
        try:
            torch.manual_seed(0)
            inputs = _inputs(name, rows, n, dtype, device)
            tc = torch.compile(FUNCS[name], dynamic=False)
            with torch.no_grad():
                tc(*inputs)
                tcms = bench_ms(lambda tc=tc, inputs=inputs: tc(*inputs), device)
            ctable.add(label + ["ok", tcms, tcms / gms])
        except Exception as e:  # torch.compile unavailable: say so, go on
            ctable.add(label + [f"ERROR {type(e).__name__}: {str(e)[:80]}", None, None])
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()


# --- part 2: examples ---------------------------------------------------------------------

def examples(table, rtable, device, args, copy_gbs):
    from fusionlens.report.discovery import find_targets
    from fusionlens.driver.targets import compile_target

    files = sorted(glob.glob(os.path.join(ROOT, "examples", "*.py")))
    if args.examples:
        files = [f for f in files if os.path.basename(f) in args.examples]
    for path in files:
        with open(path, encoding="utf-8") as f:
            targets = find_targets(f.read(), path)
        for t in targets:
            label = [f"{os.path.basename(path)}:{t.name}"]
            if t.nproc is not None or (args.target and t.name not in args.target):
                continue  # a distributed target needs its ranks: `fusionlens compile --nproc`
            if left() <= 0:
                table.add(label + ["skipped: time budget spent"] + [None] * 5)
                continue
            try:
                rep = compile_target(path, t.name, executors=["triton", "torch"], benchmark=True,
                                     repeats=10 if args.tiny else 30, device=str(device),
                                     torch_compile=not args.no_torch_compile and left() > 30)
                if rep.status == "error":
                    table.add(label + [f"ERROR {rep.error.message[:100]}"] + [None] * 5)
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
                                   c, e, tc, (e / c) if c and e else None])
                for r in tri:
                    if r.timing is None or not r.timing.median_ms or r.cost is None:
                        continue
                    gbs = r.cost.bytes / (r.timing.median_ms * 1e-3) / 1e9  # sizes may be symbols: the cost's
                    line = r.roofline  # on this GPU: its least time and how close the kernel came
                    rtable.add([label[0], r.id, "+".join(sorted({o.removeprefix("prims.") for o in r.ops}))[:50],
                                r.timing.median_ms, r.timing.eager_median_ms, gbs,
                                100 * gbs / copy_gbs if copy_gbs else None,
                                line.min_ms if line else None, line.pct_of_peak if line else None])
            except Exception as e:
                table.add(label + [f"ERROR {type(e).__name__}: {str(e)[:100]}"] + [None] * 5)
                traceback.print_exc(limit=3)



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
    ap.add_argument("--examples", nargs="*", help="file names under examples/ (default: all)")
    ap.add_argument("--target", action="append", help="only these example targets (repeatable)")
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
    if not ok and not args.no_standalone:
        print(f"the triton executor is not available here: {why}")
        return 2
    try:
        copy_gbs = copy_bandwidth_gbs(device, args.tiny)
    except Exception as e:
        print(f"copy bandwidth failed: {type(e).__name__}: {e}")
        copy_gbs = None
    print(f"# device copy bandwidth (read + write of a {'256 KiB' if args.tiny else '1 GiB'} float32 tensor): "
          f"{fmt(copy_gbs)} GB/s", flush=True)
    t1 = Table(HEAD, "standalone", KEYS)
    tc_table = Table(["case", "dtype", "shape", "status", "torch.compile ms", "vs generated"], "torch_compile",
                     ["case", "dtype", "shape", "status", "torch_compile_ms", "vs_generated"])
    t2 = Table(["example", "status", "regions", "compiled ms", "eager ms", "torch.compile ms", "vs eager"], "example",
               ["example", "status", "regions", "compiled_ms", "eager_ms", "torch_compile_ms", "vs_eager"])
    t3 = Table(["example", "region", "ops", "region ms", "eager ms", "GB/s", "% of copy", "roofline ms", "% of peak"],
               "example_region", ["example", "region", "ops", "region_ms", "eager_ms", "gbs", "pct_copy",
                                  "roofline_ms", "pct_peak"])
    if not args.no_standalone:
        print("\n## standalone regions (one generated kernel each)\n" + "  ".join(HEAD), flush=True)
        standalone(t1, tc_table, device, args, copy_gbs)
    if not args.no_examples:
        print("\n## examples (whole programs, executors triton + torch)", flush=True)
        DEADLINE[0] = start + args.budget
        examples(t2, t3, device, args, copy_gbs)
    print("\n" + "\n\n".join(t.text() for t in (t1, tc_table, t2, t3)), flush=True)
    if args.results:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        md = [f"## Run of {stamp}", "", f"{name}; {versions()}; copy bandwidth {fmt(copy_gbs)} GB/s"
              + ("; --tiny dry run: figures mean nothing" if args.tiny else ""), "",
              "### Standalone regions", "", t1.markdown(), "", "### torch.compile", "", tc_table.markdown(), "",
              "### Examples", "", t2.markdown(), "",
              "### Triton regions of the examples", "", t3.markdown(), ""]
        with open(args.results, "a", encoding="utf-8") as f:
            f.write("\n".join(md) + "\n")
        print(f"appended to {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
