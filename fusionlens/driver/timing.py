"""Measurement used by everything that reports a time: warm-up, repeats, median and spread.

On a GPU each repeat is timed with CUDA events around the call; on a CPU with
perf_counter, synchronising first so that no earlier work is counted.
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
        for _ in range(repeats):
            for i, (fn, args, kwargs) in enumerate(fns):
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    fn(*args, **kwargs)
                    end.record()
                    end.synchronize()
                    samples[i].append(start.elapsed_time(end))
                else:
                    t0 = time.perf_counter()
                    fn(*args, **kwargs)
                    samples[i].append((time.perf_counter() - t0) * 1e3)
    method = "cuda_events" if cuda else "perf_counter"
    return [summarize(s, method, str(device)) for s in samples]


@functools.cache
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
