"""One command for N ranks: `fusionlens compile FILE --nproc N` runs each target on N ranks.

The CLI (`launch`) starts N workers through torch.distributed.run (`--standalone`); each
worker (`python -m fusionlens.driver.launch`, `main` below) initialises the process group (gloo on a
CPU, NCCL on GPUs), calibrates the cost model (a few all_reduce sizes: this machine's alpha
and beta), compiles and benchmarks every target with compile_target, times its collectives
beside the model's time for them, and writes its reports to a folder. After the run, `merge`
makes one report per target: rank 0's, with `ranks` (one entry per rank) and each
collective's `time_ms` over the ranks. A rank whose target fails writes its error and exits
non-zero at once; the launcher then ends every rank, and `launch` returns the first failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from fusionlens.report import comm_model, schema as R
from fusionlens.options import CompileOptions

# How long a rank waits in a collective for the others before giving up (seconds): a rank
# that hangs rather than fails must not hold the launch for gloo's default of 30 minutes.
TIMEOUT_S = float(os.environ.get("FUSIONLENS_DIST_TIMEOUT", "600"))


@dataclass
class Settings:
    """What the CLI's command line says about compiling, passed on to every rank."""

    benchmark: bool = True
    repeats: int = 20
    device: str = "auto"
    torch_compile: bool = False
    train: bool = False
    executors: list[str] | None = None
    profile: bool = False
    gpu: str | None = None
    cluster: str | None = None

    def options(self) -> CompileOptions:
        options = CompileOptions.from_env(executors=self.executors)
        return options.replace(profile=self.profile or options.profile, gpu=self.gpu or options.gpu,
                               cluster=self.cluster or options.cluster)


@dataclass
class Launched:
    """What a launch gave: a merged report per target in order, or the first rank's failure."""

    reports: list[R.CompileReport] = field(default_factory=list)
    failed_rank: int | None = None
    failure: R.CompileReport | None = None  # the failing rank's report (status "error")
    output: str = ""  # the ranks' own output (the launcher's), for a failure no rank wrote down


def _spread(values: list[float]) -> R.RankSpread:
    return R.RankSpread(round(min(values), 6), round(statistics.median(values), 6), round(max(values), 6))


def merge(reports: list[R.CompileReport]) -> R.CompileReport:
    """One report from a target's per-rank reports (in rank order, each with its own `ranks`
    entry, as `_measure_rank` leaves it): rank 0's, with every rank's entry, each collective's
    time over the ranks, and each region's slowest rank. A new report: none given is changed."""
    first = reports[0]
    ranks = [r.ranks[0] if r.ranks else R.RankReport(i, r.device, r.compile_ms) for i, r in enumerate(reports)]
    collectives = []
    for i, c in enumerate(first.collectives):
        rank_ms = [rank.collective_ms[i] if i < len(rank.collective_ms) else None for rank in ranks]
        times = [t for t in rank_ms if t is not None]
        collectives.append(dataclasses.replace(c, rank_ms=rank_ms, time_ms=_spread(times) if times else None))

    def slowest(region: R.Region) -> R.Region:
        ranked = [(t, rank.rank) for rank in ranks if (t := rank.region_ms.get(region.id)) is not None]
        if not ranked or region.timing is None:
            return region
        ms, rank = max(ranked)
        return dataclasses.replace(region, timing=dataclasses.replace(region.timing, slowest_ms=ms, slowest_rank=rank))
    programs = [dataclasses.replace(p, regions=[slowest(r) for r in p.regions]) for p in first.programs]
    return dataclasses.replace(first, ranks=ranks, collectives=collectives, programs=programs)


def _time_all_reduce(nbytes: int, device, repeats: int) -> float:
    """The median time of an all-reduce of `nbytes` over the whole world, timed alone: what one
    of DDP's gradient buckets costs (its reducer runs it inside the backward, where it has no
    region of its own to time). Every rank runs the same number of them."""
    import torch
    import torch.distributed as dist

    from fusionlens.driver import timing

    buffer = torch.zeros(max(nbytes // 4, 1), dtype=torch.float32, device=device)
    dist.barrier()
    return timing.measure(dist.all_reduce, buffer, device=device, warmup=2, repeats=repeats).median_ms




def _time_alone(kind, nbytes: int, world: int, device, repeats: int) -> float:
    """The median time of an all-gather or reduce-scatter over the whole world whose input is
    `nbytes` (the report's bytes for both: what each rank sends in), timed alone as
    `_time_all_reduce` times a bucket. Every rank runs the same number of them."""
    import torch
    import torch.distributed as dist

    from fusionlens.driver import timing

    numel = -(-max(nbytes // 4, 1) // world) * world  # a multiple of the world: a reduce-scatter's input
    sent = torch.zeros(numel, dtype=torch.float32, device=device)
    from fusionlens.distributed.vocabulary import CollectiveKind

    if kind is CollectiveKind.ALL_GATHER:
        out = torch.empty(numel * world, dtype=torch.float32, device=device)
        run = lambda: dist.all_gather_into_tensor(out, sent)  # noqa: E731
    else:
        out = torch.empty(numel // world, dtype=torch.float32, device=device)
        run = lambda: dist.reduce_scatter_tensor(out, sent)  # noqa: E731
    dist.barrier()
    return timing.measure(run, device=device, warmup=2, repeats=repeats).median_ms


# The calibration's all_reduce sizes (bytes): latency-bound to bandwidth-bound on gloo and NCCL
# (the largest keeps the fitted bandwidth positive on a noisy machine), small enough to take
# well under a second on 4 CPU ranks sharing 2 cores.
CALIBRATION_BYTES = (4 << 10, 64 << 10, 1 << 20, 4 << 20)


def calibrate(device, world: int, repeats: int = 5) -> R.Calibration:
    """This machine's alpha and beta: all_reduce over the whole world at CALIBRATION_BYTES,
    fitted by comm_model (every rank runs the same calls, so they meet in each)."""
    import torch
    import torch.distributed as dist

    def all_reduce(nbytes: int) -> None:
        buffer = torch.zeros(nbytes // 4, dtype=torch.float32, device=device)
        dist.all_reduce(buffer)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    dist.barrier()
    samples = comm_model.sample(all_reduce, CALIBRATION_BYTES, repeats)
    alpha, beta = comm_model.fit(samples)
    return R.Calibration(str(dist.get_backend()), world, alpha, beta, [int(b) for b, _ in samples],
                         [t for _, t in samples])


def with_model(report: R.CompileReport, fit: R.Calibration | None) -> R.CompileReport:
    """`report` with each collective's `model_ms`: the cost model on a cluster of this machine's
    measured link (comm_model.measured_cluster), beside what was measured. None where the fit is
    unusable. A new report: `report` is not changed."""
    if fit is None or fit.beta_s <= 0 or fit.world < 2:
        return report
    here = comm_model.measured_cluster(fit.alpha_s, fit.beta_s, fit.world, fit.backend)
    modelled = []
    for c in report.collectives:
        try:
            ms: float | None = round(comm_model.estimate(c.op, c.bytes, min(max(c.group_size, 1), fit.world),
                                                         here).ms, 6)
        except ValueError:  # an op the model has no formula for
            ms = None
        modelled.append(dataclasses.replace(c, model_ms=ms))
    return dataclasses.replace(report, collectives=modelled)


def _in_program_ms(c: R.Collective, region_ms: dict[str, float | None]) -> float | None:
    """A traced collective nothing overlaps, as the program ran it: its issue's region and its
    wait's, which follows it at once (one region where the collective is a torch call run whole);
    None where something overlaps it (its regions time its issue and the wait that is left)."""
    if not c.region or c.overlapped_by:
        return None
    issue, wait = region_ms.get(c.region), region_ms.get(c.wait_region) if c.wait_region else 0.0
    return None if issue is None or wait is None else round(issue + wait, 6)


def _collective_ms(report: R.CompileReport, world: int, device, repeats: int) -> list[float | None]:
    """Per collective, the time of the regions that issue and wait for it (a traced one nothing
    overlaps) or of it timed alone (DDP's reducer's all-reduces, an overlapped one: FSDP2's
    all-gathers and reduce-scatters); by the collective's kind (the report's `op`, a CollectiveKind value)."""
    from fusionlens.distributed.vocabulary import CollectiveKind

    region_ms = {r.id: r.timing.median_ms if r.timing else None for r in report.all_regions()}
    collective_ms: list[float | None] = []
    for c in report.collectives:
        timed = _in_program_ms(c, region_ms)
        kind = next((k for k in CollectiveKind if k.value == c.op), None)
        alone = c.group_size == world and repeats > 0
        if timed is not None:  # a synchronous collective: its region is its time
            collective_ms.append(timed)
        elif kind is CollectiveKind.ALL_REDUCE and alone:
            # DDP's reducer's, or an asynchronous one (its region only issues it): timed alone
            collective_ms.append(round(_time_all_reduce(c.bytes, device, repeats), 6))
        elif kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER) and alone:  # FSDP2's: timed alone
            collective_ms.append(round(_time_alone(kind, c.bytes, world, device, repeats), 6))
        else:
            collective_ms.append(None)
    return collective_ms


def _measure_rank(report: R.CompileReport, rank: int, world: int, device, repeats: int,
                  fit: R.Calibration | None = None) -> R.CompileReport:
    """`report` with this rank's entry of `ranks`: its timings, its regions' medians, each
    collective's time (`_collective_ms`) and the model's time for it on `fit`. A new report."""
    region_ms = {r.id: r.timing.median_ms if r.timing else None for r in report.all_regions()}
    collective_ms = _collective_ms(report, world, device, repeats)
    timed = [dataclasses.replace(c, time_ms=R.RankSpread(t, t, t) if t is not None else None)
             for c, t in zip(report.collectives, collective_ms)]
    step = report.training.step if report.training else None
    ranks = [R.RankReport(rank, report.device, report.compile_ms, report.forward.timings, step, region_ms,
                          collective_ms, fit)]
    return with_model(dataclasses.replace(report, collectives=timed, ranks=ranks), fit)


def _device(requested: str, local_rank: int, local_world: int):
    """A rank's device: its own GPU where every rank on this machine has one (NCCL cannot share
    a GPU between ranks), else the CPU (gloo); an explicit `cuda` is one GPU a rank regardless."""
    import torch

    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()
                               and torch.cuda.device_count() >= local_world):
        return torch.device("cuda", local_rank)
    return torch.device("cpu" if requested == "auto" else requested)


def _write(path: str, data) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)  # the launcher never reads half a file


def _fail(out: str, rank: int, report: R.CompileReport) -> int:
    _write(os.path.join(out, f"error{rank}.json"), {"time": time.time(), "report": report.to_dict()})
    e = report.error
    print(f"rank {rank}: {e.file}:{e.line}: error: {e.message}" if e else f"rank {rank}: failed",
          file=sys.stderr, flush=True)
    return 1


def _run_rank(out: str, file: str, names: list[str], settings: Settings) -> int:
    """A worker: compile every target on this rank and write the reports, or the first error."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from fusionlens.driver.targets import compile_target

    rank, local_rank, world, local_world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE",
                                                                          "LOCAL_WORLD_SIZE"))
    device = _device(settings.device, local_rank, local_world)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timedelta(seconds=TIMEOUT_S))
    try:
        fit = calibrate(device, world) if settings.benchmark and world > 1 else None
        reports = []
        for name in names:
            report = compile_target(file, name, options=settings.options(), benchmark=settings.benchmark,
                                    repeats=settings.repeats, device=str(device),
                                    torch_compile=settings.torch_compile, train=settings.train)
            if report.status != "ok":
                return _fail(out, rank, report)
            measured = _measure_rank(report, rank, world, device, settings.repeats if settings.benchmark else 0, fit)
            reports.append(measured.to_dict())
        _write(os.path.join(out, f"rank{rank}.json"), reports)
        return 0
    except Exception as e:  # noqa: BLE001 - outside the user's code (it is compile_target's): say which rank
        target = R.Target(names[0] if names else "?", os.path.abspath(file), None, None)
        return _fail(out, rank, R.CompileReport(target, "error", R.Diagnostic(
            "error", f"rank {rank} raised {type(e).__name__}: {e}", os.path.abspath(file))))
    finally:
        dist.destroy_process_group()


def _first_failure(out: str, nproc: int) -> tuple[int, R.CompileReport] | None:
    failures = []
    for rank in range(nproc):
        path = os.path.join(out, f"error{rank}.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            failures.append((data["time"], rank, R.CompileReport.from_dict(data["report"])))
    if not failures:
        return None
    _, rank, report = min(failures, key=lambda f: f[:2])  # the first to fail; the others failed after it
    return rank, report


def launch(file: str, names: list[str], settings: Settings, nproc: int) -> Launched:
    """Run `names` of `file` on `nproc` ranks (torch.distributed.run, --standalone) and merge
    each target's reports; or the first rank's failure."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where `fusionlens` is imported from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    # the ranks' `-m` never puts the working folder first (a workspace's torch.py); main() adds it
    # after FusionLens and torch are imported, as the CLI does
    env["PYTHONSAFEPATH"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")  # N ranks share the cores (torch.distributed.run says so too)
    with tempfile.TemporaryDirectory(prefix="fusionlens-launch-") as out:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
                   "--monitor-interval", "0.2", "-m", "fusionlens.driver.launch", "--out", out,
                   "--settings", json.dumps(dataclasses.asdict(settings)), os.path.abspath(file), *names]
        run = subprocess.run(command, capture_output=True, text=True, env=env)
        output = run.stdout + run.stderr
        failed = _first_failure(out, nproc)
        if failed is not None:
            return Launched(failed_rank=failed[0], failure=failed[1], output=output)
        try:
            per_rank = []
            for rank in range(nproc):
                with open(os.path.join(out, f"rank{rank}.json"), encoding="utf-8") as f:
                    per_rank.append([R.CompileReport.from_dict(d) for d in json.load(f)])
        except OSError:  # a rank died without a word (killed, a crash in torch): the launcher's output says how
            return Launched(output=output)
    if run.returncode != 0:
        return Launched(output=output)
    return Launched([merge([ranks[i] for ranks in per_rank]) for i in range(len(names))], output=output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusionlens.driver.launch",
                                     description="one rank of `fusionlens compile --nproc N` (started by it)")
    parser.add_argument("--out", required=True, help="the folder each rank writes its reports to")
    parser.add_argument("--settings", default="{}", help="a launch.Settings as JSON")
    parser.add_argument("file")
    parser.add_argument("names", nargs="+")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.getcwd())  # as the CLI: the user's folder's modules import
    return _run_rank(args.out, args.file, args.names, Settings(**json.loads(args.settings)))


if __name__ == "__main__":
    sys.exit(main())
