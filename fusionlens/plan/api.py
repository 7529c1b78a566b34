"""`fusionlens.plan(fn_or_module, *args, **plan) -> PlanReport`, and a file's target planned.

    report = fusionlens.plan(model, tokens, labels, cluster="128x8xH100", tp=8, pp=8, global_batch=1536)

`fn_or_module(*args)` is one training micro-batch returning the loss; its tensors may be on the
meta device (nothing is allocated) and the micro-batch and sequence are their shapes. Options:
cluster, tp, pp, vpp, cp, dp (default: what the cluster leaves), sp, zero, global_batch,
recompute, hardware (a System or a --hardware file), search, blocks (repeated blocks traced:
1, or None for all).
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from fusionlens.driver import targets
from fusionlens.plan import model, own as own_mod, search as search_mod
from fusionlens.plan.layout import Layout, parse_cluster
from fusionlens.plan.trace import Traced, trace
from fusionlens.report import hardware
from fusionlens.report.plan import PlanReport

OPTIONS = ("cluster", "tp", "pp", "vpp", "cp", "dp", "sp", "zero", "global_batch", "recompute", "hardware",
           "search", "blocks", "reshard_after_forward")


def layout_of(traced: Traced, cluster: str = "1x8xH100", hardware_file: Any = None, **opts) -> Layout:
    """The Layout the options describe; dp defaults to what the cluster leaves."""
    unknown = set(opts) - set(OPTIONS)
    if unknown:
        raise ValueError(f"unknown plan option(s) {', '.join(sorted(unknown))}; known: {', '.join(OPTIONS)}")
    nodes, per_node, gpu = parse_cluster(cluster)
    extra = (hardware_file,) if isinstance(hardware_file, hardware.System) else \
        (hardware.load(hardware_file),) if hardware_file else ()
    system = hardware.find(gpu, extra)
    if per_node > system.gpus_per_node:
        raise ValueError(f"cluster {cluster}: a {system.system} node has {system.gpus_per_node} GPUs")
    tp, pp, cp = opts.get("tp") or 1, opts.get("pp") or 1, opts.get("cp") or 1
    world = nodes * per_node
    dp = opts.get("dp") or max(world // (tp * pp * cp), 1)
    gb = opts.get("global_batch") or dp * traced.micro_batch
    layout = Layout(nodes, per_node, system, tp, pp, opts.get("vpp") or 1, cp, dp, bool(opts.get("sp")),
                    int(opts.get("zero") or 0), gb, traced.micro_batch, opts.get("recompute") or "none",
                    opts.get("reshard_after_forward", True))
    layout.check()
    return layout


def plan(fn, *args, **options) -> PlanReport:
    """Plan one training step of `fn(*args)` (see the module doc)."""
    kwargs = options.pop("kwargs", None) or {}
    name = options.pop("name", None) or getattr(fn, "__name__", type(fn).__name__)
    return plan_traced(trace(fn, args, kwargs, options.pop("blocks", 1)), name, **options)


def plan_traced(traced: Traced, name: str, retrace=None, **options) -> PlanReport:
    """Plan an already traced target. `retrace(micro_batch)`: the target traced at another
    micro-batch (the search's); without it the search keeps the target's micro-batch."""
    start = time.perf_counter()
    wants_search = options.pop("search", False)
    hw = options.pop("hardware", None)
    layout = layout_of(traced, hardware_file=hw, **options)
    report = model.evaluate(traced, layout, name)
    if wants_search:
        report.frontier = search_mod.search(traced, layout, retrace)
    report.planning_s = round(time.perf_counter() - start + traced.compile_ms / 1e3, 3)
    return report


def plan_target(path: str, info, source: str | None = None, **options) -> PlanReport:
    """Plan the target `info` of the file `path` (`source`: its text where an editor's buffer
    differs from the file): its example runs with the meta device as the default (a full-size
    model allocates nothing), for training."""
    if not info.train:
        raise ValueError(f"target {info.name} is not a training target: mark it @fusionlens.example(train=True)")
    blocks = options.pop("blocks", 1)
    nodes, per_node, _ = parse_cluster(options.get("cluster") or "1x8xH100")

    def traced_at(micro_batch: int | None) -> Traced:
        # under a fake process group of the planned world: a target that builds its own
        # DeviceMesh and parallelizes itself is recorded, its plan then costed (plan/own.py)
        with torch.device("meta"), own_mod.recording(nodes * per_node) as own:
            fn, args, kwargs = targets.run_example(path, info.name, info, source, device="meta")
        if micro_batch is not None:
            args = tuple(_rebatch(a, micro_batch) for a in args)
        traced = trace(fn, args, kwargs, blocks, own if own.found else None)
        traced.call_line = (os.path.abspath(path), info.return_line) if info.return_line else None
        return traced

    traced = traced_at(None)
    if traced.own is not None:
        options.update(traced.own.options())  # the target's own plan over the decorator's and the command's
    return plan_traced(traced, info.name, retrace=traced_at, **options)


def _rebatch(a, micro_batch: int):
    """A tensor argument with its batch dim set to `micro_batch` (meta: shapes only)."""
    if isinstance(a, torch.Tensor) and a.ndim >= 2:
        return torch.empty((micro_batch, *a.shape[1:]), dtype=a.dtype, device=a.device).requires_grad_(a.requires_grad)
    return a
