"""Measurement used by everything that reports a time: warm-up, repeats, median and spread.

On a GPU a sample is CUDA events around many launches back to back (or around a CUDA graph's
replays: `graph_replay`), divided by their number: no synchronisation between calls, so the
host's work (the Python launcher, its allocations) overlaps the kernels as in a real program
and is measured apart, as `launch_ms` (host time a call, nothing waited for). On a CPU, with
perf_counter, synchronising first so that no earlier work is counted. Every system (eager,
compiled, torch.compile) goes through the same function (`compare`).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from fusionlens.report.schema import Timing

CPU = torch.device("cpu")


def _quartiles(samples: list[float]) -> tuple[float, float]:
    if len(samples) < 2:
        return samples[0], samples[0]
    q = statistics.quantiles(samples, n=4)
    return q[0], q[2]


def summarize(samples_ms: list[float], method: str, device: str) -> Timing:
    q1, q3 = _quartiles(samples_ms)
    return Timing(median_ms=statistics.median(samples_ms), min_ms=min(samples_ms), max_ms=max(samples_ms),
                  iqr_ms=q3 - q1, repeats=len(samples_ms), method=method, device=device)


def measure(fn: Callable, *args, device: torch.device = CPU, warmup: int = 3,
            repeats: int = 20, **kwargs) -> Timing:
    """Time `fn(*args, **kwargs)`; returns a Timing in milliseconds."""
    device = torch.device(device)
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args, **kwargs)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
            for start, end in zip(starts, ends):
                start.record()
                fn(*args, **kwargs)
                end.record()
            torch.cuda.synchronize(device)
            return summarize([s.elapsed_time(e) for s, e in zip(starts, ends)], "cuda_events", str(device))
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn(*args, **kwargs)
            samples.append((time.perf_counter() - t0) * 1e3)
        return summarize(samples, "perf_counter", str(device))


def _launches_per_sample(fns, device, target_ms: float = 0.5) -> list[int]:
    """How many back-to-back launches make one sample of about `target_ms` for each fn."""
    out = []
    for fn, args, kwargs in fns:
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn(*args, **kwargs)
        torch.cuda.synchronize(device)
        one = (time.perf_counter() - t0) * 1e3
        out.append(max(1, min(100, int(target_ms / max(one, 1e-3)))))
    return out


def compare(fns: list[tuple[Callable, Sequence[Any], dict[str, Any]]], device: torch.device = CPU, warmup: int = 3,
            repeats: int = 20) -> list[Timing]:
    """Time several (fn, args, kwargs) against each other, interleaving their repeats so a
    busy machine slows them alike (measuring one after the other makes ratios noise).
    Returns one Timing per entry."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    samples: list[list[float]] = [[] for _ in fns]
    with torch.no_grad():
        for _ in range(warmup):
            for fn, args, kwargs in fns:
                fn(*args, **kwargs)
        inner = _launches_per_sample(fns, device) if cuda else [1] * len(fns)
        for _ in range(repeats):
            for i, (fn, args, kwargs) in enumerate(fns):
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(inner[i]):
                        fn(*args, **kwargs)
                    end.record()
                    end.synchronize()
                    samples[i].append(start.elapsed_time(end) / inner[i])
                else:
                    t0 = time.perf_counter()
                    fn(*args, **kwargs)
                    samples[i].append((time.perf_counter() - t0) * 1e3)
    method = "cuda_events" if cuda else "perf_counter"
    return [summarize(s, method if n == 1 else f"{method} x{n}", str(device)) for s, n in zip(samples, inner)]


def launch_ms(fn: Callable, *args, device: torch.device = CPU, calls: int = 20, **kwargs) -> float | None:
    """Host time of one call on a GPU, nothing waited for: what launching costs (the launcher,
    its allocations, the driver). None on a CPU, where a call's time is its work."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    with torch.no_grad():
        fn(*args, **kwargs)
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(*args, **kwargs)
        host = (time.perf_counter() - t0) * 1e3 / calls
        torch.cuda.synchronize(device)
    return host


def graph_replay(fn: Callable, args: Sequence[Any], device: torch.device, repeats: int = 20,
                 replays: int = 20) -> Timing | None:
    """`fn(*args)` captured in a CUDA graph and timed by replaying it `replays` times between
    two events a sample: the device time with no launch cost. None where it cannot be captured
    (a host sync, a CPU tensor) or on a CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    from fusionlens.driver import cuda_graphs

    graph = cuda_graphs.capture(fn, list(args), device)
    if graph is None:
        return None
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / replays)
    return summarize(samples, f"cuda_graph x{replays}", str(device))


@functools.lru_cache(maxsize=16)  # one entry a device: a node's GPUs and the CPU
def copy_bandwidth_gbs(device: torch.device) -> float:
    """The device's copy bandwidth in GB/s (read + write of a tensor far larger than any
    cache: 256 MiB on a GPU, 32 MiB on a CPU), measured once a process: what a
    memory-bound kernel can hope for here, beside the datasheet's peak."""
    device = torch.device(device)
    n = (1 << 26) if device.type == "cuda" else (1 << 23)
    src = torch.ones(n, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    t = measure(dst.copy_, src, device=device, warmup=2, repeats=10)
    return round(2 * src.numel() * src.element_size() / (t.median_ms * 1e-3) / 1e9, 1)


def device_name(device: torch.device) -> str:
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(device)
    import platform

    return f"CPU ({platform.machine() or 'unknown'}, {torch.get_num_threads()} threads)"
