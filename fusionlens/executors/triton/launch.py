"""Kernel launches bound once (issue 29 part 5).

A generated launcher writes `kernel[grid](*pointers, BLOCK=..., num_warps=...)`. Through
Triton's JITFunction that costs, at every call, a new grid closure, the binder's pass over
every argument (specialising each pointer on 16-byte alignment), a cache key, a cache lookup
and the launch metadata. The program calls the same kernel with the same grid on tensors of
the same shapes again and again, so the runtime hands the launcher bound kernels (`bind`):
the first launch of a (device, num_warps, pointer alignment) goes through the JIT, which
compiles and returns its CompiledKernel; later ones call that kernel's launcher directly
with the same arguments and stream the JIT would pass.

Only tensors-only launches are bound (a static region's: its sizes are literals); a dynamic
program's kernels take sizes as integers the JIT specialises on (== 1, divisible by 16), and
keep the JIT path, as does anything not on a GPU (Triton's interpreter on a CPU).
The generated source itself is untouched: it still runs standalone (`fusionlens repro`).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch


class _GridLaunch:
    """One kernel at one grid: the JIT's first launch per key, the compiled kernel's after."""

    __slots__ = ("jit", "grid", "grid3", "compiled")

    def __init__(self, jit, grid: tuple):
        self.jit, self.grid = jit, grid
        self.grid3 = (tuple(grid) + (1, 1))[:3]
        self.compiled: dict[tuple, Any] = {}  # (device, num_warps, pointer alignment) -> CompiledKernel

    def __call__(self, *args, num_warps: int, num_stages: int = 1, **constexprs):
        first = args[0] if args else None
        if not isinstance(first, torch.Tensor) or not first.is_cuda \
                or not all(isinstance(a, torch.Tensor) for a in args):
            return self.jit[self.grid](*args, num_warps=num_warps, num_stages=num_stages, **constexprs)
        key = (first.device.index, num_warps, num_stages, tuple(a.data_ptr() % 16 == 0 for a in args))
        kernel = self.compiled.get(key)
        if kernel is None:  # the JIT compiles (or finds) the kernel for this key and launches it
            self.compiled[key] = self.jit[self.grid](*args, num_warps=num_warps, num_stages=num_stages,
                                                     **constexprs)
            return None
        _run(kernel, self.grid, self.grid3, args + tuple(constexprs[n] for n in self.jit.arg_names[len(args):]),
             first.device.index)
        return None


def _run(kernel, grid: tuple, grid3: tuple, values: tuple, device: int):
    """What JITFunction.run does after its cache hit (triton/runtime/jit.py), for one key."""
    from triton import knobs
    from triton.runtime.driver import driver

    stream = driver.active.get_current_stream(device)
    kernel.run(grid3[0], grid3[1], grid3[2], stream, kernel.function, kernel.packed_metadata,
               kernel.launch_metadata(grid, stream, *values), knobs.runtime.launch_enter_hook,
               knobs.runtime.launch_exit_hook, *values)


class BoundKernel:
    """Stands for a @triton.jit kernel in a launcher's globals: `kernel[grid]` is bound once per grid."""

    __slots__ = ("jit", "grids")

    def __init__(self, jit):
        self.jit = jit
        self.grids: dict[tuple, _GridLaunch] = {}

    def __getitem__(self, grid) -> _GridLaunch:
        launch = self.grids.get(grid)
        if launch is None:
            launch = self.grids[grid] = _GridLaunch(self.jit, grid)
        return launch


def bind(launcher: Callable, kernels: list[str]) -> Callable:
    """A copy of the generated `launcher` whose kernels (by name) are BoundKernels: the module's
    namespace, shared by identical regions and read by the ahead-of-time compile, is unchanged."""
    names = dict(launcher.__globals__)
    for k in kernels:
        if k in names:
            names[k] = BoundKernel(names[k])
    bound = types.FunctionType(launcher.__code__, names, launcher.__name__, launcher.__defaults__,
                               launcher.__closure__)
    names[launcher.__name__] = bound  # its own recursive call (the inputs' GPU made current) is bound too
    return bound
