"""Achieved % of peak per region, and the profiler ranges named after user lines.

    python benchmarks/roofline_check.py [--examples softmax.py norms.py] [--repeats 30]
    python benchmarks/roofline_check.py --dry-run      # on a CPU: estimates; checks the script

For every @compiler.example in examples/*.py, compiled with executors ["triton", "torch"]
and benchmarked: one row per region with its cost (bytes, FLOPs), its roofline on this GPU
(bound, the least time: docs/roofline.md), its measured median and pct_of_peak (100 x the
roofline minimum / the median). Then the program runs once more under torch.profiler with
FUSIONLENS_PROFILE=1, and the check says whether every region's range ("R3 gpt_block.py:77")
is in the profile (record_function on the CPU; NVTX too on a GPU, seen by nsys only).

On a machine without a GPU (`--dry-run`) the rooflines are the target GPU's estimates
(`--gpu`, default H100) and nothing is a percentage; the run checks the script and the
profiler ranges, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from fusionlens.report.discovery import find_targets  # noqa: E402
from fusionlens.options import CompileOptions  # noqa: E402
from fusionlens.report.schema import format_ms  # noqa: E402

HEAD = ["example", "region", "executor", "first line", "bytes", "GFLOP", "bound", "roofline", "median", "% of peak"]


def _si_bytes(n: int) -> str:
    return f"{n / 1e6:.3g} MB" if n >= 1e5 else f"{n / 1e3:.3g} kB"


def region_rows(label: str, rep) -> list:
    rows = []
    for r in rep.forward.regions:
        line, cost = r.roofline, r.cost
        first = f"{os.path.basename(r.source_lines[0].file)}:{r.source_lines[0].line}" if r.source_lines else "-"
        pct = f"{line.pct_of_peak:.1f}%" if line and line.pct_of_peak is not None else "-"
        est = "est " if line and line.estimate else ""
        rows.append([label, r.id, r.executor, first, _si_bytes(cost.bytes) if cost else "-",
                     f"{cost.flops / 1e9:.3g}" if cost else "-", line.bound if line else "-",
                     est + format_ms(line.min_ms) if line else "-",
                     format_ms(r.timing.median_ms if r.timing else None, missing="-"), pct])
    return rows


def profiled_names(path: str, name: str, device: torch.device) -> tuple:
    """(range names the compiled program's regions run in, names torch.profiler recorded)."""
    from fusionlens.driver import api
    from fusionlens.frontend import tracer as frontend
    from fusionlens.driver.targets import load_example
    from torch.profiler import ProfilerActivity, profile

    example = load_example(path, name, device=str(device))
    options = CompileOptions(executors=("triton", "torch"), profile=True)
    with example.context():
        c, _, _ = api.compile_checked(example.fn, example.args, example.kwargs, options, name, benchmark=False)
    inputs = frontend.user_tensors(example.fn, example.args, example.kwargs) + c.constants
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        c.fn(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()
    return set(c.forward.plan.trace.ranges.values()), {e.key for e in prof.key_averages()}


def table(rows: list) -> str:
    widths = [max(len(str(r[i])) for r in [HEAD] + rows) for i in range(len(HEAD))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*HEAD), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", nargs="*", help="file names under examples/ (default: all)")
    ap.add_argument("--target", action="append", help="only these targets (repeatable)")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--gpu", default=None, help="target GPU of the estimates where none runs")
    ap.add_argument("--dry-run", action="store_true", help="on the CPU, few repeats: checks the script")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.dry_run else "cpu")
    if device.type == "cpu" and not args.dry_run:
        print("no GPU: pass --dry-run to check the script on the CPU (estimates only)")
        return 2
    from fusionlens.driver.targets import compile_target

    files = sorted(glob.glob(os.path.join(ROOT, "examples", "*.py")))
    if args.examples:
        files = [f for f in files if os.path.basename(f) in args.examples]
    rows, missing, status = [], [], 0
    options = CompileOptions(executors=("triton", "torch"), profile=True, gpu=args.gpu)
    for path in files:
        for t in find_targets(open(path, encoding="utf-8").read(), path):
            if args.target and t.name not in args.target:
                continue
            label = f"{os.path.basename(path)}:{t.name}"
            if t.nproc is not None:  # its ranks need a launch: `fusionlens compile --nproc`, not this process
                print(f"-- {label}: skipped (a distributed target, nproc={t.nproc})", flush=True)
                continue
            try:
                rep = compile_target(path, t.name, options=options, benchmark=True,
                                     repeats=3 if args.dry_run else args.repeats, device=str(device))
                if rep.status != "ok":
                    print(f"!! {label}: {rep.error.message}")
                    status = 1
                    continue
                these = region_rows(label, rep)
                rows += these
                for row in these:  # each as it is measured: a timeout loses nothing already printed
                    print("  ".join(map(str, row)), flush=True)
                ranges, recorded = profiled_names(path, t.name, device)
                missing += [f"{label}: {n}" for n in sorted(ranges - recorded)]
            except Exception as e:  # a failing target is reported; the others still run
                print(f"!! {label}: {type(e).__name__}: {e}")
                status = 1
    peaks = rep.peaks if rows else None
    where = f"{peaks.device}{' (estimates)' if peaks.estimate else ''}" if peaks else "?"
    copy = f", measured copy bandwidth {peaks.copy_gbs:g} GB/s" if peaks and peaks.copy_gbs else ""
    print(f"# rooflines on {where}{copy}; {torch.cuda.get_device_name() if device.type == 'cuda' else 'CPU'}")
    print(table(rows))
    if missing:
        print("!! profiler ranges missing from torch.profiler:\n  " + "\n  ".join(missing))
        status = 1
    else:
        print(f"profiler ranges: every region's record_function is in torch.profiler ({len(rows)} regions)")
    return status


if __name__ == "__main__":
    sys.exit(main())
