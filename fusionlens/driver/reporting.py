"""The CompileReport of a compiled program, built once, after it was checked and timed.

Everything a consumer sees of a compile comes from here: the traces as Python source, the
regions with their code, the ops with their user lines, fallbacks, diagnostics, timings.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import importlib.util
import inspect
import os
import pathlib
import platform
from collections.abc import Callable, Sequence

import torch

from fusionlens.distributed import vocabulary
from fusionlens.distributed.staging import ReportInputs
from fusionlens.report import comm_model, schema as R, roofline
from fusionlens.middle import cost, passes
from fusionlens.driver import timing, wire
from fusionlens import executors as executor_registry
from fusionlens.ir.trace import OpTag, distinct_lines, format_call
from fusionlens.ir.sizes import dim_text, hint
from fusionlens.ir.vocabulary import Stage, ValueRole
from fusionlens.middle.programs import ProgramKind


def _version(dist: str) -> str | None:
    """A distribution's version from its METADATA's header line: `importlib.metadata.version`
    parses the whole file as an email (triton's: ~5 ms of a first jit call)."""
    try:
        found = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    for line in (found.read_text("METADATA") or found.read_text("PKG-INFO") or "").splitlines():
        if line.startswith("Version:"):
            return line.removeprefix("Version:").strip()
        if not line:  # the end of the headers
            break
    return found.version


def _nvfuser_version() -> str | None:
    """nvFuser's wheels are named per CUDA and torch version (nvfuser-cu130-torch210), so its
    distribution is looked for only where a module nvfuser_direct or nvfuser is found: first
    in the folder that holds the module, then (an unusual install) among every distribution."""
    folders = set()
    for module in ("nvfuser_direct", "nvfuser"):
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:  # a package
            folders |= {os.path.dirname(p) for p in spec.submodule_search_locations}
        elif spec is not None and spec.origin:  # a single-file (extension) module
            folders.add(os.path.dirname(spec.origin))
        elif spec is not None:
            folders.add("")
    if not folders:
        return None
    beside = [importlib.metadata.PathDistribution(pathlib.Path(d, e)) for d in sorted(folders) if d
              for e in _listdir(d) if e.lower().startswith("nvfuser") and e.endswith((".dist-info", ".egg-info"))]
    return _last_nvfuser(beside) or _last_nvfuser(importlib.metadata.distributions())


def _last_nvfuser(dists) -> str | None:
    version = None
    for dist in dists:
        if (dist.metadata["Name"] or "").lower().startswith("nvfuser"):
            version = dist.version
    return version


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """python, torch, and fusionlens, triton, nvfuser where installed. Only these packages
    are looked up (scanning every installed distribution costs tens of ms a process)."""
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for name, version in (("fusionlens", _version("fusionlens")), ("triton", _version("triton")),
                          ("nvfuser", _nvfuser_version())):
        if version is not None:
            out[name] = version
    return dict(out)


def target_of(fn, name: str) -> R.Target:
    """Where the compiled callable is defined (a module's `forward`)."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    if not inspect.isroutine(target):  # a callable object standing for one (fsdp.Sharded: its module's forward)
        target = getattr(target, "__wrapped__", target)
    code = getattr(inspect.unwrap(target), "__code__", None)
    if code is not None and os.path.isfile(code.co_filename):  # its code's extent: no reading of the file
        # (inspect's block reading is a few tenths of a millisecond of a first call; it also counts
        # trailing comment lines, which no op is on)
        ends = [end for _, end, _, _ in code.co_positions() if end is not None]
        return R.Target(name, code.co_filename, code.co_firstlineno, max(ends, default=code.co_firstlineno))
    try:
        lines, start = inspect.getsourcelines(target)
        return R.Target(name, inspect.getsourcefile(target), start, start + len(lines) - 1)
    except (OSError, TypeError):
        return R.Target(name, None, None, None)


def error_report(e: Exception, target: R.Target, executors) -> R.CompileReport:
    file, line = getattr(e, "file", None), getattr(e, "line", None)
    message = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
    return R.CompileReport(target=target, status="error", executors=list(executors or []),
                           error=R.Diagnostic("error", message, file, line), versions=versions())


def _collectives(c) -> list[R.Collective]:
    """The collectives each program's regions run, with their user lines, read from their
    symbols (distributed/vocabulary.py); a wait is no collective of its own: it ends the one
    it waits for."""
    out = []
    for p in c.programs:
        overlapped = _overlapped(p.plan.regions)
        waits = {v.name: r.id for r in p.plan.regions for b in r.bsyms if vocabulary.is_wait(b.sym)
                 for v in b.inputs()}  # the pending value -> the region of its wait
        for r in p.plan.regions:
            for b in r.bsyms:
                described = vocabulary.describe(b.sym)
                if described is None or described.kind is None:
                    continue
                sent = described.sent_of(b)
                nbytes = int(hint(sent.numel())) * sent.dtype.itemsize if hasattr(sent, "dtype") else 0
                where = b.provenance
                out.append(R.Collective(str(described.kind), "traced", nbytes, described.group_of(b).size,
                                        wire.program_kind(p.kind), r.id, where.file if where else None,
                                        where.line if where else None, overlapped_by=overlapped(b),
                                        wait_region=next((waits[o.name] for o in b.outputs if o.name in waits), "")))
    return out


def _overlapped(regions) -> Callable:
    """`overlapped(b)`: the ids of the regions that run between collective `b`'s issue and the
    wait of its result, in program order, those that only communicate left out (none without
    a wait: it ran synchronously)."""
    at = {id(b): i for i, r in enumerate(regions) for b in r.bsyms}
    waited = {v.name: i for i, r in enumerate(regions) for b in r.bsyms if vocabulary.is_wait(b.sym)
              for v in b.inputs()}
    talking = {i for i, r in enumerate(regions) if all(OpTag.COLLECTIVE in b.sym.tags for b in r.bsyms)}

    def overlapped(b) -> list[str]:
        wait = min((waited[o.name] for o in b.outputs if o.name in waited), default=None)
        if wait is None:
            return []
        return [regions[i].id for i in range(at[id(b)] + 1, wait) if i not in talking]
    return overlapped


def with_estimates(found: list[R.Collective], cluster: str | None, programs: Sequence[R.ProgramReport] = (),
                   waiting: frozenset[tuple[str, str]] = frozenset()) -> list[R.Collective]:
    """Each collective estimated on `cluster` (fusionlens/report/comm_model.py), over its whole world: what
    the communication of this program would cost there, by the algorithm NCCL would pick, and
    how much of it is exposed: not hidden by the regions of `programs` that run between its
    issue and its wait (`overlapped_by`; none without `programs`: all of it is exposed).
    `waiting`: (program kind, region id) of the regions that wait for a collective (no compute).
    New Collectives: those given are not changed."""
    if not cluster or not found:
        return found
    target = comm_model.parse_cluster(cluster)
    estimates: dict[int, comm_model.Estimate] = {}
    for i, c in enumerate(found):
        try:
            estimates[i] = comm_model.estimate(c.op, c.bytes, target.world, target)
        except ValueError:  # no cost model for it
            continue
    priced = [dataclasses.replace(c, estimate_ms=round(estimates[i].ms, 6)) if i in estimates else c
              for i, c in enumerate(found)]
    exposed = _exposed_s(priced, target, programs, waiting)
    out = []
    for i, c in enumerate(priced):
        if i in estimates:
            exposed_ms = round(exposed.get(i, estimates[i].seconds) * 1e3, 6)
            c = dataclasses.replace(c, exposed_ms=exposed_ms,
                                    estimate=comm_model.describe(estimates[i], target, exposed_ms / 1e3))
        out.append(c)
    return out


def _waiting(c) -> frozenset[tuple[str, str]]:
    """(program kind, region id) of each region of `c` that waits for a collective."""
    return frozenset((p.kind, r.id) for p in c.programs for r in p.plan.regions
                     if any(vocabulary.is_wait(b.sym) for b in r.bsyms))


def _compute_s(r: R.Region, gpu: roofline.Gpu | None) -> float:
    """A region's time on the cluster's GPU: as measured where it ran on that GPU, else its
    roofline there (a laptop's CPU time says nothing of an H100), else as measured."""
    timed = r.timing.median_ms if r.timing is not None else None
    ran_there = r.roofline is not None and not r.roofline.estimate and gpu is not None and r.roofline.device == gpu.name
    if timed is not None and ran_there:
        return timed / 1e3
    if r.cost is not None and gpu is not None:
        return roofline.roofline(r.cost.bytes, r.cost.flops, r.cost.math, gpu, True).min_ms / 1e3
    return (timed or 0.0) / 1e3


def _exposed_s(found: list[R.Collective], cluster: comm_model.Cluster, programs: Sequence[R.ProgramReport],
               waiting: frozenset[tuple[str, str]]) -> dict[int, float]:
    """Per collective (by index in `found`) with an estimate, its exposed seconds from its
    program's own order (comm_model.schedule): the program's regions as compute, each
    collective issued at its region and waited after the last region that overlaps it (at
    once where none does). The regions that run collectives (and funcol waits) are no compute."""
    gpu = roofline.find(cluster.gpu)
    out: dict[int, float] = {}
    for p in programs:
        ids = {r.id for r in p.regions}
        mine = [(i, c) for i, c in enumerate(found) if c.program == p.kind and c.region in ids
                and c.estimate_ms is not None]
        comm = {c.region for c in found if c.program == p.kind and c.region}
        issued: dict[str, list[int]] = {}
        waits: dict[str, list[int]] = {}
        for i, c in mine:
            issued.setdefault(c.region, []).append(i)
            waits.setdefault(c.overlapped_by[-1] if c.overlapped_by else c.region, []).append(i)
        events: list[comm_model.Event] = []
        for r in p.regions:
            events += [comm_model.Issue(str(i), (found[i].estimate_ms or 0.0) / 1e3) for i in issued.get(r.id, [])]
            if r.id not in comm and (p.kind, r.id) not in waiting:
                events.append(comm_model.Compute(r.id, _compute_s(r, gpu)))
            events += [comm_model.Wait(str(i)) for i in waits.get(r.id, [])]
        out.update({int(s.id): s.exposed_s for s in comm_model.schedule(events).collectives})
    return out


def _guards(c) -> list[str]:
    if c.guards is None:
        return []
    return c.guards.describe([v.name for v in c.acquired.inputs if v.role is ValueRole.INPUT])


def _tensor_info(v) -> R.TensorInfo:
    return R.TensorInfo(v.name, [dim_text(d) for d in v.shape], str(v.dtype).removeprefix("torch."), str(v.device))


def _region(r, timed: R.RegionTiming | None, gpu, estimate: bool) -> R.Region:
    """A lowering Region as the report shows it; a fusion region as its executor says now
    (nvFuser knows its CUDA only once it has run). Its roofline is on `gpu`."""
    g = r.generated
    code = g.report_code() if g is not None else format_call(r.bound)
    c = cost.region_cost(r.bsyms, r.inputs, r.outputs)
    line = roofline.roofline(c.bytes, c.flops, c.math, gpu, estimate, timed.median_ms if timed else None)
    return R.Region(r.id, r.executor, [b.sym.name for b in r.bsyms],
                    [R.SourceLine(p.file, p.line) for p in distinct_lines(r.bsyms)], code,
                    [_tensor_info(v) for v in r.inputs], [_tensor_info(v) for v in r.outputs],
                    timed, wire.boundary(r.boundary), g.kernels if g is not None else 1,
                    g.status() if g is not None else r.note, wire.cost(c), line, _module(r.bsyms))


def _module(bsyms) -> str:
    """The nn.Module path the ops of a region share: the longest common prefix of theirs."""
    paths = {b.provenance.module for b in bsyms if b.provenance is not None}
    if not paths:
        return ""
    parts = [p.split(".") if p else [] for p in paths]
    common = []
    for names in zip(*parts):
        if len(set(names)) > 1:
            break
        common.append(names[0])
    return ".".join(common)


def _roofline_gpu(device, target: str | None) -> tuple[roofline.Gpu, bool, str | None]:
    """(the GPU the rooflines are for, whether they are estimates, a note or None): the GPU
    the program ran on when the table knows it, else the target GPU (roofline.target_name)."""
    why = None
    if device.type == "cuda":
        name = timing.device_name(device)
        gpu = roofline.find(name)
        if gpu is not None:
            return gpu, False, None
        why = f"{name} is not in the roofline table (docs/roofline.md)"
    target = roofline.target_name(target)
    gpu = roofline.find(target)
    if gpu is None:
        gpu = roofline.find(roofline.DEFAULT_TARGET)
        assert gpu is not None  # the table has its default target
        return gpu, True, (f"unknown target GPU {target!r} (known: {', '.join(roofline.names())}): "
                           f"rooflines are estimates for {gpu.name}")
    return gpu, True, why and f"{why}: rooflines are estimates for {gpu.name}"


def _peaks(gpu, estimate: bool, device, measured) -> R.DevicePeaks:
    copy = measured.copy_gbs if measured is not None else None
    return R.DevicePeaks(gpu.name, gpu.hbm_gbs, gpu.fp32_tflops, gpu.tf32_tflops, gpu.bf16_tflops, estimate,
                         copy, str(device) if copy is not None else None)


def _program(p, measured, gpu, estimate: bool, deferred: bool) -> R.ProgramReport:
    """A pipeline.Program as the report shows it: its traces, regions and previews, by one
    function for every kind of program (nothing in a preview ran: its rooflines are estimates).
    `deferred`: its traces printed when first read (R.Deferred)."""
    timed = measured.regions.get(p.kind, {}) if measured is not None else {}
    previews = [R.Preview(v.executor, v.reason, [_region(r, None, gpu, True) for r in v.plan.regions])
                for v in p.previews]
    traces = R.Deferred(make=functools.partial(wire.traces, dict(p.traces))) if deferred else wire.traces(p.traces)
    return R.ProgramReport(
        wire.program_kind(p.kind), traces,
        [_region(r, timed.get(r.id), gpu, estimate) for r in p.plan.regions], previews,
        measured.program if measured is not None and p.kind is ProgramKind.FORWARD else None)


def _describe_kernels(c, programs: list[R.ProgramReport], gpu: str) -> list[R.ProgramReport]:
    """The programs with each fusion executor's account of its kernels: their launch, compiled
    for the target GPU when the options ask (lazy and cached: docs/kernels.md), in one batch an
    executor; the regions refined are new values (a report is frozen)."""
    pairs: dict[str, list] = {}
    for p, rp in zip(c.programs, programs):
        plans = [(p.plan.regions, rp.regions)]
        plans += [(v.plan.regions, rv.regions) for v, rv in zip(p.previews, rp.previews)]
        for regions, reported in plans:
            for region, out in zip(regions, reported):
                pairs.setdefault(region.executor, []).append((region, out))
    refined: dict[int, R.Region] = {}  # id() of a region as _program made it -> the executor's account
    for name, these in pairs.items():
        if name != "torch":
            described = executor_registry.get(name).describe_kernels(these, gpu, c.options.static_kernels)
            refined.update((id(out), new) for (_, out), new in zip(these, described))
    swap = lambda regions: [refined.get(id(r), r) for r in regions]  # noqa: E731
    return [dataclasses.replace(rp, regions=swap(rp.regions),
                                previews=[dataclasses.replace(v, regions=swap(v.regions)) for v in rp.previews])
            for rp in programs]


def _training(c, measured) -> R.Training | None:
    """What a training compile adds: what the forward saves, recomputes, differentiates."""
    d = c.differentiated
    if d is None:
        return None
    made = {o.name: f for f in d.forward.bound_symbols for o in f.outputs}
    roles = {v.name: v.role for v in d.forward.inputs}
    saved: list[R.SavedTensor] = []
    for v in d.saved:
        where = made[v.name].provenance if v.name in made else None
        kind = wire.saved_kind(roles.get(v.name), v.name in made)
        saved.append(R.SavedTensor(v.name, [dim_text(d) for d in v.shape], str(v.dtype).removeprefix("torch."),
                                   v.numel() * v.dtype.itemsize, kind, where.file if where else None,
                                   where.line if where else None))
    activations = sum(s.bytes for s, v in zip(saved, d.saved) if v.name in made)
    return R.Training(saved, activations, list(d.recomputed),
                      [c.acquired.inputs[i].name for i in d.grad_inputs],
                      measured.training if measured is not None else None)


def _ops(c) -> list[R.OpRecord]:
    traces = c.forward.traces
    region_of = {o.name: r.id for r in c.forward.plan.regions for b in r.bsyms for o in b.outputs}
    decomposed_by_output = {o.name: b for b in traces[Stage.DECOMPOSED].bound_symbols for o in b.outputs}
    optimised_by_output = {o.name: b for b in traces[Stage.OPTIMISED].bound_symbols for o in b.outputs}
    ops: list[R.OpRecord] = []
    for i, b in enumerate(traces[Stage.ACQUIRED].bound_symbols):
        p = b.provenance
        region = next((region_of[o.name] for o in b.outputs if o.name in region_of), None)
        dec = next((decomposed_by_output[o.name] for o in b.outputs if o.name in decomposed_by_output), None)
        prims = [s.sym.name for s in passes.flatten([dec])] if dec is not None and dec.subsymbols else []
        # its line as it runs: the optimised op (inputs renamed by CSE and aliases) if it survived
        shown = next((optimised_by_output[o.name] for o in b.outputs if o.name in optimised_by_output), b)
        ops.append(R.OpRecord(i, b.sym.name, region, p.file if p else "", p.line if p else 0,
                              p.end_line if p else 0, p.col if p else 0, p.end_col if p else 0,
                              wire.stack(p), format_call(shown), prims))
    return ops


def assemble(c, target: R.Target, checked: list[R.Diagnostic], measured=None,
             extra: list[R.Diagnostic] | None = None, inputs: Sequence[ReportInputs] = (),
             said: Sequence[R.Diagnostic] = (), deferred: bool = False) -> R.CompileReport:
    """The report of `c` (a pipeline.Compiled): `checked` are the diagnostics of its check
    against eager, `measured` its benchmark.Measurements (None when not timed), `extra`
    diagnostics of the caller (jit's eager fallback), `inputs` the transforms' (DDP's reducer's
    buckets, listed after the programs' collectives, and its diagnostics), `said` what the caller
    knew before compiling (jit: why this signature compiled again), last. `deferred` (jit): the
    traces printed when first read. Nothing changes a report after this: it is the compile's,
    whole (the package versions, a process's constant, are looked up when first read)."""
    measured = _timings_carried(c, measured)
    fallbacks = [R.Fallback(b.sym.name, b.note, b.provenance.file if b.provenance else None,
                            b.provenance.line if b.provenance else None)
                 for b in c.forward.traces[Stage.DECOMPOSED].bound_symbols if b.note]
    diagnostics = wire.diagnostics(c.notes)
    diagnostics += checked + (measured.diagnostics if measured else []) + (extra or [])
    gpu, estimate, why = _roofline_gpu(c.device, c.options.gpu)
    if why:
        diagnostics.append(R.Diagnostic("information", why, code=R.DiagnosticCode.ROOFLINE))
    diagnostics += [d for i in inputs for d in i.diagnostics] + list(said)
    programs = [_program(p, measured, gpu, estimate, deferred) for p in c.programs]
    programs = _describe_kernels(c, programs, gpu.name)
    return R.CompileReport(
        target=target, executors=c.executors, programs=programs,
        training=_training(c, measured), ops=_ops(c), fallbacks=fallbacks, diagnostics=diagnostics,
        signature=list(c.traced.trace.signature), guards=_guards(c),
        collectives=with_estimates(_collectives(c), c.options.cluster, programs, _waiting(c)) + with_estimates(
            [x for i in inputs for x in i.collectives], c.options.cluster),
        device=str(c.device),
        device_name=timing.device_name(c.device),
        versions=R.Deferred(make=versions), compile_ms=round(c.compile_ms, 3),
        peaks=_peaks(gpu, estimate, c.device, measured),
        stage_ms={stage: round(ms, 3) for stage, ms in c.stage_ms.items()})


def _timings_carried(c, measured):
    """`measured` as the programs `c` shows: where a transform's rewritten backward replaced the
    one the benchmark timed (`c.replaced`), a region of it that runs the same ops on the same
    values as one timed keeps that one's timing (what the transform added is untimed)."""
    if c.replaced is None or measured is None:
        return measured
    kind = c.replaced.kind
    timed = measured.regions.get(kind, {})
    key = lambda r: (tuple(b.sym.name for b in r.bsyms), tuple(v.name for v in r.outputs))  # noqa: E731
    by_key = {key(r): timed[r.id] for r in c.replaced.plan.regions if timed.get(r.id) is not None}
    shown = c.program(kind)
    kept = {r.id: t for r in shown.plan.regions if (t := by_key.get(key(r))) is not None}
    return dataclasses.replace(measured, regions={**measured.regions, kind: kept})
