"""`fusionlens plan FILE --target NAME [options] [--json]`: a file's training target planned.

The target's `plan=dict(...)` (in its decorator) gives defaults; the command line overrides.
"""

from __future__ import annotations

import argparse
import json
import sys

from fusionlens.report.plan_text import render


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file")
    p.add_argument("--target", required=True, help="the @fusionlens.example(train=True) target")
    p.add_argument("--cluster", default=None, metavar="NODESxGPUSxGPU",
                   help="e.g. 128x8xH100 (A100, H100, H200, B200, or a --hardware file's GPU); default 1x8xH100")
    p.add_argument("--hardware", default=None, metavar="FILE",
                   help="a JSON file describing another GPU: gpu, bf16_tflops, hbm_gbs, hbm_gib, nvlink_gbs, nic_gbs")
    for name, what in (("tp", "tensor parallel"), ("pp", "pipeline stages"), ("vpp", "virtual stages a GPU"),
                       ("cp", "context parallel"), ("dp", "data parallel (default: what the cluster leaves)"),
                       ("global-batch", "sequences a step (default: one micro-batch a data-parallel rank)")):
        p.add_argument(f"--{name}", type=int, default=None, help=what)
    p.add_argument("--sp", action=argparse.BooleanOptionalAction, default=None, help="sequence parallel with TP")
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=None, help="ZeRO stage (0: DDP)")
    p.add_argument("--recompute", choices=("none", "selective", "full"), default=None)
    p.add_argument("--search", action="store_true", help="rank the plans that fit on the cluster for the batch")
    p.add_argument("--all-blocks", action="store_true",
                   help="trace every repeated block instead of one standing for all (slower; the same answer)")
    p.add_argument("--json", action="store_true", help="print the PlanReport as JSON")
    p.add_argument("--html", metavar="OUT.html", default=None,
                   help="also write the pictures: pipeline schedule, memory by kind, the search's frontier")


def options(args, defaults: dict | None) -> dict:
    out = dict(defaults or {})
    for key in ("cluster", "hardware", "tp", "pp", "vpp", "cp", "dp", "global_batch", "sp", "zero", "recompute"):
        value = getattr(args, key)
        if value is not None:
            out[key] = value
    if args.search:
        out["search"] = True
    if args.all_blocks:
        out["blocks"] = None
    return out


def run(args, targets) -> int:
    from fusionlens.driver.targets import TargetError
    from fusionlens.plan import api

    info = next((t for t in targets if t.name == args.target), None)
    if info is None:
        print(f"fusionlens: no target {args.target!r} in {args.file} (found: "
              f"{', '.join(t.name for t in targets) or 'none'})", file=sys.stderr)
        return 2
    try:
        report = api.plan_target(args.file, info, **options(args, info.plan))
    except (ValueError, TargetError) as e:
        print(f"fusionlens plan: {getattr(e, 'message', e)}", file=sys.stderr)
        return 1
    print(json.dumps(report.to_dict(), indent=2) if args.json else render(report))
    if args.html:
        from fusionlens.report.html import plan as pictures

        with open(args.html, "w", encoding="utf-8") as f:
            f.write(pictures.render(report))
    return 0
