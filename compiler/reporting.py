"""The CompileReport of a compiled program, built once, after it was checked and timed.

Everything a consumer sees of a compile comes from here: the traces as Python source, the
regions with their code, the ops with their user lines, fallbacks, diagnostics, timings.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import inspect
import os
import pathlib
import platform

import torch

from compiler import collectives, comm_model, cost, passes, report as R, roofline, timing
from compiler.ir import OpTag, distinct_lines, format_call
from compiler.sizes import dim_text, hint


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


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
    """The collectives each program's regions run (OpTag.COLLECTIVE), with their user lines."""
    out = []
    for p in c.programs:
        for r in p.plan.regions:
            for b in r.bsyms:
                if OpTag.COLLECTIVE in b.sym.tags:
                    sent = collectives.sent(b.sym.name, b.args, b.kwargs)
                    nbytes = int(hint(sent.numel())) * sent.dtype.itemsize if sent is not None else 0
                    where = b.provenance
                    out.append(R.Collective(collectives.op_name(b.sym.name), "traced", nbytes,
                                            collectives.group_size(b.args, b.kwargs), p.kind, r.id,
                                            where.file if where else None, where.line if where else None))
    return out


def with_estimates(found: list[R.Collective], cluster: str | None) -> list[R.Collective]:
    """Each collective estimated on `cluster` (compiler/comm_model.py), over its whole world: what
    the communication of this program would cost there, by the algorithm NCCL would pick."""
    if not cluster or not found:
        return found
    target = comm_model.parse_cluster(cluster)
    for c in found:
        e = comm_model.estimate(c.op, c.bytes, target.world, target)
        c.estimate, c.estimate_ms = comm_model.describe(e, target), round(e.ms, 6)
    return found


def _guards(c) -> list[str]:
    if c.guards is None:
        return []
    return c.guards.describe([v.name for v in c.acquired.inputs if v.role == "input"])


def _tensor_info(v) -> R.TensorInfo:
    return R.TensorInfo(v.name, [dim_text(d) for d in v.shape], str(v.dtype).removeprefix("torch."), str(v.device))


def _diag(note) -> R.Diagnostic:
    where = note.where
    if where is None:
        return R.Diagnostic(note.severity, note.message, code=note.code)
    return R.Diagnostic(note.severity, note.message, where.file, where.line, where.col, where.end_line, where.end_col,
                        code=note.code)


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
                    timed, r.boundary, g.kernels if g is not None else 1, g.status() if g is not None else r.note,
                    c, line)


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


def _program(p, measured, gpu, estimate: bool) -> R.ProgramReport:
    """A pipeline.Program as the report shows it: its traces, regions and previews, by one
    function for every kind of program (nothing in a preview ran: its rooflines are estimates)."""
    timed = measured.regions.get(p.kind, {}) if measured is not None else {}
    previews = [R.Preview(v.executor, v.reason, [_region(r, None, gpu, True) for r in v.plan.regions])
                for v in p.previews]
    return R.ProgramReport(
        p.kind, {s: t.python(nested=s == "decomposed") for s, t in p.traces.items()},
        [_region(r, timed.get(r.id), gpu, estimate) for r in p.plan.regions], previews,
        measured.program if measured is not None and p.kind == "forward" else None)


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
        role = roles.get(v.name) or "input"
        kind = "activation" if v.name in made else {"param": "parameter"}.get(role, role)
        saved.append(R.SavedTensor(v.name, [dim_text(d) for d in v.shape], str(v.dtype).removeprefix("torch."),
                                   v.numel() * v.dtype.itemsize, kind, where.file if where else None,
                                   where.line if where else None))
    return R.Training(saved, sum(s.bytes for s in saved if s.kind == "activation"), list(d.recomputed),
                      [c.acquired.inputs[i].name for i in d.grad_inputs],
                      measured.training if measured is not None else None)


def _ops(c) -> list[R.OpRecord]:
    traces = c.forward.traces
    region_of = {o.name: r.id for r in c.forward.plan.regions for b in r.bsyms for o in b.outputs}
    decomposed_by_output = {o.name: b for b in traces["decomposed"].bound_symbols for o in b.outputs}
    optimised_by_output = {o.name: b for b in traces["optimised"].bound_symbols for o in b.outputs}
    ops: list[R.OpRecord] = []
    for i, b in enumerate(traces["acquired"].bound_symbols):
        p = b.provenance
        region = next((region_of[o.name] for o in b.outputs if o.name in region_of), None)
        dec = next((decomposed_by_output[o.name] for o in b.outputs if o.name in decomposed_by_output), None)
        prims = [s.sym.name for s in passes.flatten([dec])] if dec is not None and dec.subsymbols else []
        # its line as it runs: the optimised op (inputs renamed by CSE and aliases) if it survived
        shown = next((optimised_by_output[o.name] for o in b.outputs if o.name in optimised_by_output), b)
        ops.append(R.OpRecord(i, b.sym.name, region, p.file if p else "", p.line if p else 0,
                              p.end_line if p else 0, p.col if p else 0, p.end_col if p else 0,
                              list(p.stack) if p else [], format_call(shown), prims))
    return ops


def assemble(c, target: R.Target, checked: list[R.Diagnostic], measured=None,
             extra: list[R.Diagnostic] | None = None) -> R.CompileReport:
    """The report of `c` (a pipeline.Compiled): `checked` are the diagnostics of its check
    against eager, `measured` its benchmark.Measurements (None when not timed), `extra`
    diagnostics of the caller (jit's eager fallback)."""
    fallbacks = [R.Fallback(b.sym.name, b.note, b.provenance.file if b.provenance else None,
                            b.provenance.line if b.provenance else None)
                 for b in c.forward.traces["decomposed"].bound_symbols if b.note]
    diagnostics = [_diag(n) for n in c.notes]
    diagnostics += checked + (measured.diagnostics if measured else []) + (extra or [])
    gpu, estimate, why = _roofline_gpu(c.device, c.options.gpu)
    if why:
        diagnostics.append(R.Diagnostic("information", why, code=R.DiagnosticCode.ROOFLINE))
    return R.CompileReport(
        target=target, executors=c.executors, programs=[_program(p, measured, gpu, estimate) for p in c.programs],
        training=_training(c, measured), ops=_ops(c), fallbacks=fallbacks, diagnostics=diagnostics,
        signature=list(c.traced.trace.signature), guards=_guards(c),
        collectives=with_estimates(_collectives(c), c.options.cluster),
        device=str(c.device),
        device_name=timing.device_name(c.device),
        versions=versions(), compile_ms=round(c.compile_ms, 3), peaks=_peaks(gpu, estimate, c.device, measured))
