"""Launch cost out of the runtime (issue 29 part 5): each kernel's launch is bound once
(fusionlens/executors/triton/launch.py) and a launcher allocates its outputs with constant
shapes and strides, each output its own storage.

The binding's logic runs here on a CPU with a stand-in for the JIT and a tensor that says it
is on a GPU; the real compiled-kernel launch runs on a GPU (the GPU check's `tests` step).
"""

from __future__ import annotations

import pytest
import torch

from fusionlens.executors.triton import launch
from test_triton import DEVICE, _interpreter  # noqa: F401  (the fixture that switches the interpreter on)

CUDA = torch.cuda.is_available()


class _Jit:
    """A stand-in for a JITFunction: records its launches, returns a 'compiled kernel'."""

    arg_names = ["x_ptr", "out0_ptr", "BLOCK"]

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.calls.append((grid, args, kwargs))
            return ("compiled", len(self.calls))
        return run


class _OnGpu(torch.Tensor):
    """A CPU tensor that says it is on a GPU, to take the bound path without one."""

    @property
    def is_cuda(self):
        return True


def test_a_kernel_is_resolved_once_per_alignment(monkeypatch):
    ran = []
    monkeypatch.setattr(launch, "_run", lambda kernel, grid, grid3, values, device: ran.append((kernel, grid3, values)))
    jit = _Jit()
    fn = launch.BoundKernel(jit)
    x = torch.randn(64).as_subclass(_OnGpu)
    out = torch.empty(64).as_subclass(_OnGpu)
    fn[(4,)](x, out, BLOCK=16, num_warps=4)  # the JIT compiles and launches
    assert len(jit.calls) == 1 and not ran
    fn[(4,)](x, out, BLOCK=16, num_warps=4)  # straight to the compiled kernel, constexprs in parameter order
    fn[(4,)](x, out, BLOCK=16, num_warps=4)
    assert len(jit.calls) == 1 and len(ran) == 2
    assert ran[0][0] == ("compiled", 1) and ran[0][1] == (4, 1, 1) and ran[0][2] == (x, out, 16)
    assert fn[(4,)] is fn[(4,)]  # the grid's launch is bound once, not a closure a call
    unaligned = x[1:]  # 4 bytes past a 16-byte boundary: the JIT specialises it otherwise
    fn[(4,)](unaligned, out, BLOCK=16, num_warps=4)
    assert len(jit.calls) == 2
    fn[(4,)](x, out, BLOCK=16, num_warps=8)  # another num_warps (autotuning) is another kernel
    assert len(jit.calls) == 3
    fn[(4,)](torch.randn(64), out, BLOCK=16, num_warps=4)  # not on a GPU: the JIT (the interpreter)
    assert len(jit.calls) == 4 and len(ran) == 2


def test_sized_launches_keep_the_jit(monkeypatch):
    monkeypatch.setattr(launch, "_run", lambda *a: pytest.fail("a launch with an integer argument was bound"))
    jit = _Jit()
    x = torch.randn(64).as_subclass(_OnGpu)
    for _ in range(2):  # an integer argument: the JIT specialises on its value (== 1, divisible by 16)
        launch.BoundKernel(jit)[(4,)](x, 64, BLOCK=16, num_warps=4)
    assert len(jit.calls) == 2


def test_bound_launcher_leaves_the_shared_module_alone():
    namespace: dict = {}
    exec("def k_launch(x):\n    return kern[(1,)](x, num_warps=1)\n", namespace)
    namespace["kern"] = _Jit()
    bound = launch.bind(namespace["k_launch"], ["kern", "missing"])
    assert isinstance(bound.__globals__["kern"], launch.BoundKernel)
    assert isinstance(namespace["kern"], _Jit)  # the module other regions and the AOT compile read
    assert bound(torch.randn(2)) == ("compiled", 1)


def test_outputs_are_independent_tensors():
    """Each output of a multi-output region has its own storage: resizing or saving one never
    touches another (one block sliced into outputs would be seen by torch.save and resize_)."""
    from fusion_groups import group_from_fn
    from fusionlens.executors import triton as tx

    x = torch.randn(4, 8, device=DEVICE)
    group, inputs = group_from_fn(lambda x: (x * 2, x.sum(-1), x.amax(-1)), x)
    gen = tx.generate(group, DEVICE)
    assert gen.source.count("torch.empty_strided(") == len(group.outputs) and "torch.empty(" not in gen.source
    outs = gen.fn(*inputs)
    torch.testing.assert_close(list(outs), [x * 2, x.sum(-1), x.amax(-1)])
    assert len({o.untyped_storage().data_ptr() for o in outs}) == len(outs)
    assert all(o.is_contiguous() and o.untyped_storage().nbytes() == o.numel() * o.element_size() for o in outs)
    outs[1].resize_(100)  # grows its own storage only
    assert outs[0].shape == (4, 8) and torch.equal(outs[0], x * 2) and torch.equal(outs[2], x.amax(-1))


@pytest.mark.skipif(not CUDA, reason="needs a GPU (runs in benchmarks/gpu_check.py)")
def test_bound_launches_on_the_gpu_match_eager():
    from fusion_groups import group_from_fn
    from fusionlens.executors import triton as tx

    x = torch.randn(300, 1000, device="cuda")
    group, inputs = group_from_fn(lambda x: torch.softmax(x * 2, -1), x)
    gen = tx.generate(group, "cuda")
    for _ in range(3):  # the first launch compiles; the next go to the bound kernel
        x.normal_()
        torch.testing.assert_close(gen.fn(x)[0], torch.softmax(x * 2, -1))
    bound = [v for v in _launcher_globals(gen).values() if isinstance(v, launch.BoundKernel)]
    assert bound and all(g.compiled for b in bound for g in b.grids.values())
    torch.testing.assert_close(gen.fn(x[:, 1:])[0], torch.softmax(x[:, 1:] * 2, -1))  # another variant


def _launcher_globals(gen) -> dict:
    fn = gen.fn
    while fn.__closure__ and "launchers" not in fn.__code__.co_freevars:
        fn = next(c.cell_contents for c in fn.__closure__ if callable(c.cell_contents))
    launchers = fn.__closure__[fn.__code__.co_freevars.index("launchers")].cell_contents
    return next(iter(launchers.values())).__globals__
