"""Device details of the Triton executor and the GPU-only code paths (CUDA graphs, timing).

What can run on a CPU runs here on every machine: factory ops on the default device, a CUDA
graph's copy-in, replay and clone-out (with a dry-run graph), the launch-bound rule. What needs
a GPU is skipped without one and runs in the GPU check (benchmarks/gpu_check.py, step `tests`):
a 0-dim CPU tensor beside GPU tensors, a program replayed from a CUDA graph, the timers.
"""

from __future__ import annotations

import pytest
import torch

from fusionlens.driver import cuda_graphs, timing
from fusionlens.frontend import tracer as frontend
from fusionlens.options import CompileOptions

CUDA = torch.cuda.is_available()
gpu_only = pytest.mark.skipif(not CUDA, reason="needs a GPU (runs in benchmarks/gpu_check.py)")


def test_factory_ops_follow_the_default_device():
    def fn(x):
        return x + torch.zeros(4) + torch.arange(4)

    with torch.device("meta"):  # as torch.set_default_device would: eager makes them there
        x = torch.empty(4)
        traced = frontend.trace(fn, (x,), {}, "fn")
    made = [o for b in traced.trace.bound_symbols for o in b.outputs]
    assert made and all(o.device.type == "meta" for o in made), [(o.name, o.device) for o in made]


def test_graphed_call_copies_in_replays_and_clones_out():
    calls = []

    def program(x, w):
        calls.append(1)
        return (x * w + 1,)

    w = torch.randn(3)
    g = cuda_graphs.GraphedCall(program, 1, cuda_graphs.DryRunGraph)
    for _ in range(3):
        x = torch.randn(3)
        (out,) = g(x, w)
        torch.testing.assert_close(out, x * w + 1)
        assert out.data_ptr() != g.out[0].data_ptr()  # a clone: the next replay cannot change it
    assert g.replays == 3
    w.mul_(2)  # a constant updated in place (an optimizer step) is read in place
    x = torch.randn(3)
    torch.testing.assert_close(g(x, w)[0], x * w + 1)
    n = len(calls)
    torch.testing.assert_close(g(torch.ones(5), torch.ones(5))[0], torch.full((5,), 2.0))  # another shape
    torch.testing.assert_close(g(x, w.clone())[0], x * w + 1)  # other constants: run directly
    assert len(calls) == n + 2 and g.replays == 4


def test_graphed_call_falls_back_when_capture_fails():
    class Refuses(cuda_graphs.DryRunGraph):
        def capture(self, call):
            raise RuntimeError("operation not permitted when stream is capturing")

    g = cuda_graphs.GraphedCall(lambda x: (x + 1,), 1, Refuses)
    x = torch.randn(2)
    torch.testing.assert_close(g(x)[0], x + 1)
    torch.testing.assert_close(g(x)[0], x + 1)
    assert g.why_not and "capturing" in g.why_not and g.replays == 0


def test_graphs_only_where_asked_or_launch_bound():
    call = object()
    assert cuda_graphs.maybe_graphed(call, None, torch.device("cpu"), 1, True, True) is call  # a CPU
    assert cuda_graphs.maybe_graphed(call, None, torch.device("cuda"), 1, False, True) is call  # switched off
    assert cuda_graphs.maybe_graphed(call, None, torch.device("cuda"), 1, True, False) is call  # dynamic shapes

    class Region:
        def __init__(self, n):
            from fusionlens.ir.trace import Value

            v = Value("x", (n,), torch.float32, torch.device("cpu"))
            self.bsyms, self.inputs, self.outputs, self.generated = [], [v], [v], None

    class Program:
        def __init__(self, regions):
            self.plan = type("Plan", (), {"regions": regions})()

    # 10 regions of 4 KB: 10 launches (80 us) against 80 KB at 3.35 TB/s (24 ns): launch-bound
    assert cuda_graphs.launch_bound(Program([Region(1024) for _ in range(10)]), 3350)
    # one region of 1 GB: 0.6 ms of memory against one launch
    assert not cuda_graphs.launch_bound(Program([Region(1 << 28)]), 3350)


def test_timing_on_a_cpu_has_no_launch_column():
    assert timing.launch_ms(lambda: None) is None
    assert timing.graph_replay(lambda: None, [], torch.device("cpu")) is None
    eager, compiled = timing.compare([(torch.add, (torch.ones(4), 1), {}), (torch.mul, (torch.ones(4), 2), {})],
                                     repeats=3)
    assert eager.method == compiled.method == "perf_counter" and eager.repeats == 3


@gpu_only
def test_cpu_scalar_tensor_beside_gpu_tensors_stays_in_the_triton_region():
    from fusionlens.driver import api

    x = torch.randn(64, 100, device="cuda")
    s = torch.tensor(3.0)  # on the CPU, as eager allows
    rep = api.compile(lambda x, s: torch.relu(x * s + 1), x, s, executors=["triton", "torch"])
    assert [r.executor for r in rep.forward.regions] == ["triton"], [(r.executor, r.note) for r in rep.forward.regions]
    assert not [d for d in rep.diagnostics if d.severity == "error"]


@gpu_only
def test_program_replayed_from_a_cuda_graph_matches_eager():
    from fusionlens.driver import api

    def fn(x, w, b):  # several small regions: launch-bound
        h = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)
        return torch.softmax(h, -1) * 2, h.sum(0)

    args = [torch.randn(32, 256, device="cuda"), torch.randn(256, device="cuda"), torch.randn(256, device="cuda")]
    c, _, _ = api.compile_checked(fn, args, {}, CompileOptions(executors=("triton", "torch"), cuda_graphs=True), "fn",
                                  benchmark=False)
    assert isinstance(c.fn, cuda_graphs.GraphedCall)
    for _ in range(3):
        x = torch.randn(32, 256, device="cuda")
        got = c.fn(x, *args[1:], *c.constants)
        for a, e in zip(got, fn(x, *args[1:])):
            torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
    assert c.fn.replays >= 2 and c.fn.why_not is None


@gpu_only
def test_gpu_timers_keep_launch_cost_apart():
    x = torch.randn(1 << 20, device="cuda")
    (t,) = timing.compare([(torch.mul, (x, 2), {})], torch.device("cuda"), repeats=5)
    assert t.method.startswith("cuda_events") and t.median_ms > 0
    g = timing.graph_replay(torch.mul, [x, 2], torch.device("cuda"), repeats=5)
    assert g is not None and g.method.startswith("cuda_graph") and g.median_ms > 0
    assert timing.launch_ms(torch.mul, x, 2, device=torch.device("cuda")) > 0
