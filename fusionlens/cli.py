"""`fusionlens compile FILE`: compile the file's @fusionlens.example targets and print what happened."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from fusionlens.report import chrome_trace, comm_model, roofline
from fusionlens.driver import launch
from fusionlens.report.discovery import TargetInfo, find_targets
from fusionlens.options import CompileOptions
from fusionlens.report.schema import ALL_STAGES, CompileReport, format_bytes, format_ms
from fusionlens.driver.targets import compile_target


def _fmt(ms) -> str:
    return format_ms(ms, missing="-")


def _lines(region) -> str:
    by_file: dict = {}
    for s in region.source_lines:
        by_file.setdefault(os.path.basename(s.file), []).append(str(s.line))
    return "; ".join(f"{f}:{','.join(ls)}" for f, ls in by_file.items())


def _roofline(line) -> str:
    """A region's roofline for the table: "est 4.1 µs" where it did not run, else its
    minimum and how close the measured time came ("1.2 µs · 45%")."""
    if line is None:
        return "-"
    if line.estimate or line.pct_of_peak is None:
        return f"est {_fmt(line.min_ms)}" if line.estimate else _fmt(line.min_ms)
    return f"{_fmt(line.min_ms)} · {line.pct_of_peak:.0f}%"


def _gpu(name: str) -> str:
    gpu = roofline.find(name)
    if gpu is None:
        raise argparse.ArgumentTypeError(f"unknown GPU {name!r} (known: {', '.join(roofline.names())})")
    return gpu.name


def _cluster(spec: str) -> str:
    try:
        return comm_model.parse_cluster(spec).name
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _nproc(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a number of ranks >= 1, not {text!r}")
    return int(text)


def _table(rows, headers) -> str:
    widths = [max(len(str(r[i])) for r in [headers] + rows) for i in range(len(headers))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*headers), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*map(str, r)) for r in rows]
    return "\n".join(out)


def render(report, stage: str = "execution") -> str:
    """A report for the terminal: each program's trace, regions and previews, then what a
    training compile saves, the diagnostics and the timings."""
    out = []
    t = report.target
    out.append(f"== {t.name}  ({os.path.relpath(t.file) if t.file else '?'}:{t.line}) ==")
    if report.status != "ok":
        e = report.error
        out.append(f"error: {e.file}:{e.line}: {e.message}")
        return "\n".join(out)
    out.append(f"device: {report.device_name}   executors: {', '.join(report.executors)}   "
               f"compile: {report.compile_ms:.0f} ms"
               + (f"   copy bandwidth: {report.peaks.copy_gbs:g} GB/s"
                  if report.peaks and report.peaks.copy_gbs else ""))
    if report.guards:  # those on sizes; the layout and the static dims' are in the report
        sizes = [g for g in report.guards if "stride" not in g and "storage_offset" not in g
                 and not re.fullmatch(r"\S+ == \d+", g)]
        out.append("dynamic: one program for every size where " + (" and ".join(sizes) or "the layout is the same"))
    for program in report.programs:
        out += _render_program(program, stage, report.peaks)
    if report.training is not None:
        out += _render_training(report.training)
    if report.collectives:
        out += _render_collectives(report.collectives, report.ranks[0].calibration if report.ranks else None)
    if report.fallbacks:
        out.append("\n-- fell back to torch --")
        for f in report.fallbacks:
            out.append(f"  {os.path.basename(f.file or '?')}:{f.line}  {f.op}: {f.reason}")
    if report.diagnostics:
        out.append("\n-- diagnostics --")
        for d in report.diagnostics:
            where = f"{os.path.basename(d.file)}:{d.line}: " if d.file else ""
            out.append(f"  {d.severity}: {where}{d.message}")
    out += _render_timings(report.forward.timings, "whole program" + (", rank 0" if report.ranks else ""))
    if report.training is not None:
        out += _render_timings(report.training.step, "training step: forward + backward"
                               + (", rank 0" if report.ranks else ""))
    if report.ranks:
        out += _render_ranks(report.ranks)
    return "\n".join(out)


def _render_collectives(collectives, fit) -> list[str]:
    """A row a collective: where it runs, its bytes, its measured time (slowest rank) beside the
    model's time on this machine's calibration, its estimate on --cluster with the exposed part."""
    rows = []
    for c in collectives:
        where = f"{os.path.basename(c.file)}:{c.line}" if c.file else f"({c.kind}, DDP's hooks)"
        t = c.time_ms
        rows.append([c.program, c.region or "-", c.op, format_bytes(c.bytes), str(c.group_size), where,
                     f"{_fmt(t.max)} (min {_fmt(t.min)}, median {_fmt(t.median)})" if t else "-",
                     _fmt(c.model_ms), ", ".join(c.overlapped_by) or "-", c.estimate or "-"])
    return ["\n-- collectives --",
            _table(rows, ["program", "region", "op", "bytes a rank", "ranks", "line", "measured (slowest rank)",
                          "model here", "overlapped by", "estimate"])] + _render_exposed(collectives) + \
        _render_calibration(fit)


def _render_exposed(collectives) -> list[str]:
    """The estimates summed: a step's communication on --cluster and what of it compute does not hide."""
    estimated = [c for c in collectives if c.estimate_ms is not None and c.exposed_ms is not None]
    if not estimated:
        return []
    total, exposed = sum(c.estimate_ms for c in estimated), sum(c.exposed_ms for c in estimated)
    return [f"  estimated communication: {_fmt(exposed)} of {_fmt(total)} exposed "
            "(not hidden behind compute, from the program's order: docs/comm_model.md)"]


def _render_calibration(fit) -> list[str]:
    """The fit `model here` is the cost model on (a launch's calibration, rank 0's)."""
    if fit is None:
        return []
    gbs = f", {1 / fit.beta_s / 1e9:.3g} GB/s" if fit.beta_s > 0 else " (no bandwidth: the fit failed)"
    return [f"  model here: all_reduce on {fit.world} {fit.backend} ranks = {fit.alpha_s * 1e6:.3g} us "
            f"+ {fit.beta_s * 1e9:.3g} ns a byte{gbs} (calibrated, {len(fit.sizes)} sizes)"]


def _render_ranks(ranks) -> list[str]:
    """A launch's ranks: where each ran and its times, so a straggler stands out."""
    rows = []
    for r in ranks:
        tm, step = r.timings, r.step
        rows.append([str(r.rank), r.device, _fmt(r.compile_ms),
                     _fmt(tm.compiled.median_ms if tm and tm.compiled else None),
                     _fmt(tm.eager.median_ms if tm and tm.eager else None),
                     _fmt(step.compiled.median_ms if step and step.compiled else None)])
    return [f"\n-- ranks ({len(ranks)}) --",
            _table(rows, ["rank", "device", "compile", "compiled", "eager", "training step"])]


_HEADING = {"forward": "", "backward": "backward "}


def _render_program(program, stage: str, peaks) -> list[str]:
    """One program: its trace at `stage` (its execution trace where it has no such stage),
    its regions and what an executor that cannot run here would fuse."""
    out, heading = [], _HEADING[program.kind]
    shown = stage if stage in program.traces else "execution"
    for s in (list(program.traces) if stage == "all" else [shown]):
        out.append(f"\n-- {heading}trace ({s}) --")
        out.append(program.traces[s].rstrip())
    rows = []
    for r in program.regions:
        tm = r.timing
        ops = ", ".join(o.removeprefix("torch.nn.functional.").removeprefix("torch.").removeprefix("prims.")
                        for o in r.ops)
        rows.append([r.id, r.executor, ops if len(ops) <= 48 else ops[:45] + "...", _lines(r),
                     _fmt(tm.median_ms if tm else None), _fmt(tm.eager_median_ms if tm else None),
                     _roofline(r.roofline), r.boundary.reason if r.boundary else ""])
        if tm is not None and tm.slowest_ms is not None:  # a launch on N ranks: the straggler's time
            rows[-1].insert(5, f"{_fmt(tm.slowest_ms)} (rank {tm.slowest_rank})")
    where = f"on {peaks.device}{', est.' if peaks.estimate else ''}" if peaks else ""
    lines = "user lines" if program.kind == "forward" else "differentiates lines"
    out.append(f"\n-- {heading}regions ({len(program.regions)}) --")
    headers = ["region", "executor", "ops", lines, "time", "eager", f"roofline {where}".strip(), "ends because"]
    if any(len(row) > len(headers) for row in rows):
        headers.insert(5, "slowest rank")
        rows = [row if len(row) > len(headers) - 1 else row[:5] + ["-"] + row[5:] for row in rows]
    out.append(_table(rows, headers))
    for p in program.previews:
        n = len(p.regions)
        out.append(f"\n-- where {p.executor} can run (not here: {p.reason}), its {heading}program would fuse "
                   f"{n} kernel{'s' if n != 1 else ''} --")
        for r in p.regions:
            line = r.roofline
            est = f" · est {_fmt(line.min_ms)} on {line.device} ({line.bound}-bound)" if line else ""
            out.append(f"  {r.id}: {len(r.ops)} ops from {_lines(r)}{est}")
    return out


def _render_training(training) -> list[str]:
    acts = [t for t in training.saved if t.kind == "activation"]
    out = [f"\n-- saved for backward: {len(acts)} activations, {format_bytes(training.saved_bytes)}"
           f" (and {len(training.saved) - len(acts)} inputs and parameters)"
           + (f"; recomputed in backward: {', '.join(training.recomputed)}" if training.recomputed else "") + " --"]
    for t in sorted(acts, key=lambda t: -t.bytes)[:12]:
        out.append(f"  {t.name}: {t.dtype}{t.shape}  {format_bytes(t.bytes)}  from "
                   f"{os.path.basename(t.file or '?')}:{t.line}")
    return out


def _render_timings(tm, what: str) -> list[str]:
    if not tm or not tm.compiled:
        return []
    out = [f"\n-- timings ({what}, median of {tm.compiled.repeats}, {tm.compiled.method} on {tm.device}) --"]
    rows = [["compiled", _fmt(tm.compiled.median_ms), _fmt(tm.compiled.iqr_ms), ""],
            ["eager", _fmt(tm.eager.median_ms), _fmt(tm.eager.iqr_ms), f"{tm.speedup_vs_eager:.2f}x"]]
    if tm.torch_compile:
        rows.append(["torch.compile", _fmt(tm.torch_compile.median_ms), _fmt(tm.torch_compile.iqr_ms),
                     f"{tm.speedup_vs_torch_compile:.2f}x"])
    out.append(_table(rows, ["", "median", "spread (IQR)", "compiled speedup"]))
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fusionlens", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="compile and benchmark the @fusionlens.example targets of a file")
    c.add_argument("file")
    c.add_argument("--target", action="append", help="only this target (repeatable)")
    c.add_argument("--json", action="store_true", help="print the CompileReport(s) as JSON")
    c.add_argument("--trace", metavar="OUT.json", default=None,
                   help="also write the regions as a Chrome Trace Event file (Perfetto, chrome://tracing)")
    c.add_argument("--html", metavar="OUT.html", default=None,
                   help="also write OUT.html: one self-contained page of every target (a menu switches; --target "
                        "for one): the source shaded by time, the fusion graph, a roofline chart, a timeline "
                        "(docs/pictures.md)")
    c.add_argument("--executors", nargs="+", help="executor priority, e.g. triton torch")
    c.add_argument("--benchmark", action=argparse.BooleanOptionalAction, default=True,
                   help="measure compiled vs eager timings (default: on)")
    c.add_argument("--repeats", type=int, default=20)
    c.add_argument("--torch-compile", action="store_true", help="also time torch.compile")
    c.add_argument("--train", action="store_true",
                   help="compile every target for training (forward and backward), not only train=True ones")
    c.add_argument("--device", default="auto", help="auto, cpu or cuda")
    c.add_argument("--nproc", type=_nproc, default=None, metavar="N",
                   help="run every target on N ranks (torch.distributed.run; gloo on a CPU, NCCL on GPUs) and "
                        "print one report merged over them; a target marked @fusionlens.example(nproc=N) runs on "
                        "its N ranks without it")
    c.add_argument("--gpu", type=_gpu, default=None, metavar="NAME",
                   help="the GPU rooflines are estimated for where none runs (default: $FUSIONLENS_GPU or "
                        f"{roofline.DEFAULT_TARGET}; known: {', '.join(roofline.names())})")
    c.add_argument("--static", action="store_true",
                   help="compile every Triton kernel for the target GPU here (nothing runs) and report its loads, "
                        "registers, spills, occupancy and waves (docs/kernels.md); implied by --gpu, as "
                        "FUSIONLENS_STATIC=1 does")
    c.add_argument("--cluster", type=_cluster, default=None, metavar="SPEC",
                   help="estimate each collective on this cluster (8xH100, 64x8xH100; docs/comm_model.md), "
                        "as FUSIONLENS_CLUSTER does")
    c.add_argument("--profile", action="store_true",
                   help="run each region inside a profiler range named after its first user line "
                        "(record_function; NVTX on a GPU), as FUSIONLENS_PROFILE=1 does")
    c.add_argument("--stage", default="execution", choices=ALL_STAGES + ("all",),
                   help="which trace of each program to print (default: execution); FUSIONLENS_DEBUG=1..3 "
                        "prints each stage as it is produced")
    sub.add_parser("list", help="list the targets of a file").add_argument("file")
    from fusionlens.plan import command as plan_command

    plan_command.add_arguments(sub.add_parser(
        "plan", help="what a training step of a target costs on a cluster: time, MFU, memory a GPU, per line "
                     "(docs/plan.md)"))
    r = sub.add_parser("repro", help="write a standalone script (torch and triton only) that checks and times "
                                     "one region's kernel against eager, for a bug report")
    r.add_argument("file")
    r.add_argument("--target", required=True, help="the @fusionlens.example target")
    r.add_argument("--region", required=True, metavar="ID",
                   help="a fusion region (R3, B1) or a preview (P1, PB0, triton:P1, nvfuser:P1), as `compile` "
                        "lists them")
    r.add_argument("-o", "--output", metavar="OUT", help="where to write it (default: "
                   "FILE_TARGET_REGION_repro.py in the current folder; - for stdout)")
    r.add_argument("--executors", nargs="+", help="executor priority, as for compile")
    r.add_argument("--device", default="auto", help="auto, cpu or cuda")
    r.add_argument("--train", action="store_true", help="compiled for training, as compile --train")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        with open(args.file, encoding="utf-8") as f:
            source = f.read()
        targets = find_targets(source, args.file)
    except OSError as e:
        print(f"fusionlens: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return 2
    except SyntaxError as e:
        print(f"{args.file}:{e.lineno}:{e.offset}: SyntaxError: {e.msg}", file=sys.stderr)
        return 1
    if args.command == "list":
        for t in targets:
            print(f"{args.file}:{t.line}: {t.name}" + (f" ({t.nproc} ranks)" if t.nproc else ""))
        return 0
    if args.command == "plan":
        from fusionlens.plan import command as plan_command

        sys.path.insert(0, os.getcwd())
        return plan_command.run(args, targets)
    options = CompileOptions.from_env(executors=args.executors)
    if args.command == "repro":
        from fusionlens.driver import repro

        sys.path.insert(0, os.getcwd())
        return repro.cli(args.file, args.target, args.region, args.output, options, args.device, args.train)
    return _compile(args, targets, options)


def _compile(args, targets: list[TargetInfo], options: CompileOptions) -> int:
    names = [t.name for t in targets]
    if args.target:
        missing = [n for n in args.target if n not in names]
        if missing:
            print(f"fusionlens: no target {', '.join(missing)} in {args.file} (found: {', '.join(names) or 'none'})",
                  file=sys.stderr)
            return 2
        names = args.target
    if not names:
        print(f"fusionlens: {args.file} has no @fusionlens.example targets", file=sys.stderr)
        return 2
    sys.path.insert(0, os.getcwd())
    options = options.replace(profile=args.profile or options.profile, gpu=args.gpu or options.gpu,
                              cluster=args.cluster or options.cluster,
                              static_kernels=args.static or args.gpu is not None or options.static_kernels)
    nprocs = {t.name: args.nproc or t.nproc for t in targets}
    groups: dict[int, list[str]] = {}
    for n in names:
        if (nproc := nprocs[n]) is not None:
            groups.setdefault(nproc, []).append(n)
    found: dict[str, CompileReport] = {}
    for nproc, group in groups.items():  # distributed targets: each group on its ranks
        launched = launch.launch(args.file, group, _settings(args), nproc)
        if not launched.reports:
            return _launch_failed(args, launched)
        found.update(zip(group, launched.reports))
    torch_trace = chrome_trace.torch_trace_path(args.trace) if args.trace and args.profile else None
    with chrome_trace.profiled(torch_trace):  # --profile --trace: torch.profiler over the same runs
        reports = [found[n] if n in found else
                   compile_target(args.file, n, options=options, benchmark=args.benchmark, repeats=args.repeats,
                                  device=args.device, torch_compile=args.torch_compile, train=args.train)
                   for n in names]
    if args.json:
        data = [r.to_dict() for r in reports]
        print(json.dumps(data[0] if len(data) == 1 else data, indent=2))
    else:
        print("\n\n".join(render(r, args.stage) for r in reports))
    if args.trace:
        chrome_trace.write([r for r in reports if r.status == "ok"], args.trace)
        print(f"fusionlens: wrote {args.trace} (open it in Perfetto or chrome://tracing)", file=sys.stderr)
        if torch_trace:
            print(f"fusionlens: wrote {torch_trace} (torch.profiler's trace of the same runs)", file=sys.stderr)
    if args.html:
        _write_html(reports, args.html)
    failed = [r for r in reports if r.status != "ok"]
    for r in failed:
        if (e := r.error) is not None:
            print(f"{e.file}:{e.line}: error: {e.message}", file=sys.stderr)
    return 1 if failed else 0


def _write_html(reports: list[CompileReport], path: str) -> None:
    """Exactly OUT.html: one page of every target compiled (a menu switches between them)."""
    from fusionlens.report import html as html_report

    html_report.write_all(reports, path)
    what = f"{len(reports)} targets, a menu switches" if len(reports) > 1 else reports[0].target.name
    print(f"fusionlens: wrote {path} ({what}; open it in a browser: it needs no network)", file=sys.stderr)


def _settings(args) -> launch.Settings:
    return launch.Settings(args.benchmark, args.repeats, args.device, args.torch_compile, args.train,
                           args.executors, args.profile, args.gpu, args.cluster)


def _launch_failed(args, launched: launch.Launched) -> int:
    """A launch whose rank failed: that rank's report (its error at the user's line), else what
    the launcher said (a rank that died without writing one)."""
    report = launched.failure
    if report is None:
        print(f"fusionlens: the ranks failed:\n{launched.output[-4000:]}", file=sys.stderr)
        return 1
    print(json.dumps(report.to_dict(), indent=2) if args.json else render(report, args.stage))
    if (e := report.error) is not None:
        print(f"{e.file}:{e.line}: error: rank {launched.failed_rank}: {e.message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
