"""Profiler names: with profiling on (CompileOptions.profile: `--profile`, FUSIONLENS_PROFILE=1)
each region runs inside a range named after it and its first user line ("R3 gpt_block.py:77"),
so timelines show the user's lines.

The range is a `torch.profiler.record_function` (torch.profiler and Kineto traces, on the
CPU too) and, on a GPU, an NVTX range (nsys). Lowering decides at compile time: without the
flag the execution trace has no range in it, so a call costs nothing more.
"""

from __future__ import annotations

import os

import torch

def range_name(region_id: str, lines) -> str:
    """"R3 gpt_block.py:77": the region and its first user line (`lines`: provenances)."""
    first = next(iter(lines), None)
    return f"{region_id} {os.path.basename(first.file)}:{first.line}" if first is not None else region_id


class _Range:
    """`with fusionlens_range(name):` a record_function, plus NVTX on a GPU."""

    nvtx = False
    __slots__ = ("name", "record")

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        if self.nvtx:
            torch.cuda.nvtx.range_push(self.name)
        self.record = torch.profiler.record_function(self.name)
        self.record.__enter__()

    def __exit__(self, *exc):
        self.record.__exit__(*exc)
        if self.nvtx:
            torch.cuda.nvtx.range_pop()
        return False


class _NvtxRange(_Range):
    nvtx = True
    __slots__ = ()


def range_for(device) -> type:
    """The range class a program on `device` uses: NVTX only where CUDA is."""
    return _NvtxRange if torch.device(device).type == "cuda" else _Range
