"""A static-shape forward program replayed as one CUDA graph (`CompileOptions.cuda_graphs`).

A program of many small regions is bound by launching them (the Python launcher, the driver:
~5-20 us a kernel) more than by the GPU. Captured once in a CUDA graph, a call is one replay:
the user's tensors are copied into the graph's static inputs, the graph replays, and its
outputs are cloned (the next replay writes over the static ones; handing those out would let a
kept result change under the user). The program's constants (parameters, buffers) are read in
place: the graph reads their memory, so an optimizer's in-place update is seen.

`cuda_graphs=None` (the default) graphs a program made only of fused kernels where it is
launch-bound: the least time of its regions (the bytes they move at the GPU's bandwidth) is
below what launching them costs. `cuda_graphs=True` graphs any static forward program.
Programs with dynamic shapes, a backward, or inputs not on the GPU are never graphed. On a CPU
the same class runs with `DryRunGraph` (tests/test_cuda_graphs.py): the copying, the cloning and
the layout checks are exercised; only the capture is CUDA's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

LAUNCH_US = 8.0  # a generated kernel's launch (launcher + driver): what graphing saves a region


class DryRunGraph:
    """A CUDA graph's behaviour, for a CPU: `capture` runs the call once and keeps its outputs;
    `replay` runs it again and writes the results into those same outputs (a graph's replay
    writes into the memory it captured)."""

    def __init__(self) -> None:
        self.call: Callable[[], Any] | None = None
        self.out: Any = None

    def capture(self, call: Callable[[], Any]) -> Any:
        self.call = call
        self.out = call()
        return self.out

    def replay(self) -> None:
        assert self.call is not None
        fresh = pytree.tree_leaves(self.call())
        for kept, new in zip(pytree.tree_leaves(self.out), fresh):
            if isinstance(kept, torch.Tensor):
                kept.copy_(new)


class CudaGraph:
    """A torch.cuda.CUDAGraph captured after two warm-up calls on a side stream (Triton compiles
    and torch's allocator settles there), as torch's CUDA-graph notes prescribe."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.graph = torch.cuda.CUDAGraph()

    def capture(self, call: Callable[[], Any]) -> Any:
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                call()
        torch.cuda.current_stream(self.device).wait_stream(side)
        with torch.cuda.graph(self.graph):
            return call()

    def replay(self) -> None:
        self.graph.replay()


def capture(fn: Callable, args: list[Any], device: torch.device) -> CudaGraph | None:
    """`fn(*args)` captured in a CudaGraph; None when it cannot be (a synchronising op, a CPU tensor)."""
    graph = CudaGraph(device)
    try:
        graph.capture(lambda: fn(*args))
    except Exception:
        return None
    return graph


def _layout(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), t.stride(), t.dtype, t.device)


class GraphedCall:
    """`fn(*user_tensors, *constants)` replayed from a graph captured at the first call; a call
    whose tensors differ in shape, stride, dtype or device from that first one (or whose
    constants are other tensors) runs `fn` itself."""

    def __init__(self, fn: Callable, n_user: int, make_graph: Callable[[], Any]):
        self.fn, self.n_user, self.make_graph = fn, n_user, make_graph
        self.graph: Any = None
        self.static: list[torch.Tensor] = []  # the graph's inputs: user tensors' copies, constants themselves
        self.layouts: list[tuple] = []
        self.out: Any = None
        self.replays = 0
        self.why_not: str | None = None  # why it could not be captured (then every call runs fn)

    def _capture(self, tensors: list[torch.Tensor]) -> bool:
        self.static = [t.clone() if i < self.n_user else t for i, t in enumerate(tensors)]
        self.layouts = [_layout(t) for t in tensors]
        graph = self.make_graph()
        try:
            self.out = graph.capture(lambda: self.fn(*self.static))
        except Exception as e:  # a host sync, a data-dependent shape: the program runs as it is
            self.why_not = f"{type(e).__name__}: {e}"
            return False
        self.graph = graph
        return True

    def __call__(self, *tensors: torch.Tensor) -> Any:
        if self.why_not is not None:
            return self.fn(*tensors)
        if self.graph is None:
            if not self._capture(list(tensors)):
                return self.fn(*tensors)
        elif [_layout(t) for t in tensors] != self.layouts or any(
                t is not s for t, s in zip(tensors[self.n_user:], self.static[self.n_user:])):
            return self.fn(*tensors)  # another signature (or other constants): not what was captured
        for t, s in zip(tensors[:self.n_user], self.static):
            s.copy_(t)
        self.graph.replay()
        self.replays += 1
        return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, self.out)


def launch_bound(program, gpu_bandwidth_gbs: float) -> bool:
    """Whether launching the program's kernels costs more than their least time on the GPU."""
    from fusionlens.middle import cost

    regions = program.plan.regions
    kernels = sum(getattr(r.generated, "kernels", 1) if r.generated is not None else 1 for r in regions)
    moved = sum(cost.region_cost(r.bsyms, r.inputs, r.outputs).bytes for r in regions)
    return kernels * LAUNCH_US * 1e-6 > moved / (gpu_bandwidth_gbs * 1e9)


def maybe_graphed(call: Callable, program, device: torch.device, n_user: int, wanted: bool | None,
                  static_shapes: bool) -> Callable:
    """`call` replayed from a CUDA graph where the options and the program allow it, else `call`."""
    if wanted is False or device.type != "cuda" or not static_shapes:
        return call
    if wanted is None:  # only programs of fused kernels alone: a torch call may sync, allocate or draw random numbers
        if any(r.generated is None for r in program.plan.regions):
            return call
        from fusionlens.report import roofline

        gpu = roofline.find(torch.cuda.get_device_name(device)) or roofline.find(roofline.DEFAULT_TARGET)
        if gpu is None or not launch_bound(program, gpu.hbm_gbs):
            return call
    return GraphedCall(call, n_user, lambda: CudaGraph(device))
