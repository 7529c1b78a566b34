"""compiler.jit: a cache by input signature, reports and traces of the last call, and
calling conventions (kwargs, nested inputs, modules, parameters updated in place)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import compiler
from fusionlens.driver import checking
from fusionlens.frontend import tracer as frontend
from fusionlens.ir import program_calls

EXECUTORS = ["torch"]


def same(a, b):
    problem = checking.mismatch(a, b)
    assert problem is None, problem


class Counted:
    """A function that counts how often its Python body runs (only when traced)."""

    def __init__(self, body):
        self.body = body
        self.calls = 0
        functools.update_wrapper(self, body)  # its signature names the arguments

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.body(*args, **kwargs)


def _gelu_mlp(x, w):
    return F.gelu(x @ w).sum(-1)


def test_same_signature_hits_without_retracing(monkeypatch):
    traces = []
    real = frontend.trace
    monkeypatch.setattr(frontend, "trace", lambda *a, **k: traces.append(a) or real(*a, **k))
    fn = Counted(_gelu_mlp)
    jfn = compiler.jit(fn, executors=EXECUTORS)
    w = torch.randn(8, 4)
    for _ in range(3):
        x = torch.randn(2, 8)  # new values, same signature
        same(jfn(x, w), _gelu_mlp(x, w))
    assert fn.calls == 1 and len(traces) == 1
    info = jfn.cache_info()
    assert (info["hits"], info["misses"], info["entries"]) == (2, 1, 1)
    assert info["signatures"] == [["x: float32[2, 8] on cpu, contiguous, requires_grad=False",
                                   "w: float32[8, 4] on cpu, contiguous, requires_grad=False"]]


def test_new_shape_or_dtype_recompiles():
    fn = Counted(_gelu_mlp)
    jfn = compiler.jit(fn, executors=EXECUTORS, dynamic=False)  # every shape its own program
    w = torch.randn(8, 4)
    calls = [(torch.randn(2, 8), w), (torch.randn(3, 8), w), (torch.randn(2, 8, dtype=torch.float64), w.double()),
             (torch.randn(8, 2).t(), w), (torch.randn(2, 8), w), (torch.randn(3, 8), w)]
    for x, ww in calls:
        same(jfn(x, ww), _gelu_mlp(x, ww))
    info = jfn.cache_info()
    # shape, dtype and layout (contiguous or not) each make a new signature
    assert (info["misses"], info["hits"], info["entries"]) == (4, 2, 4)
    assert fn.calls == 4
    sigs = info["signatures"]
    assert sigs[1][0].startswith("x: float32[3, 8]") and sigs[2][0].startswith("x: float64[2, 8]")
    assert "strides (1, 2)" in sigs[3][0]
    # the last report and traces are those of the last call's signature
    assert compiler.last_report(jfn).signature == sigs[1]
    assert compiler.last_traces(jfn)["acquired"].inputs[0].shape == (3, 8)


def test_python_scalars_are_specialised():
    def fn(x, scale, flag):
        return x * scale if flag else x - scale

    jfn = compiler.jit(fn, executors=EXECUTORS)
    x = torch.randn(3)
    same(jfn(x, 2.0, True), x * 2.0)
    same(jfn(x, 3.0, True), x * 3.0)
    same(jfn(x, 3.0, False), x - 3.0)
    same(jfn(x, 3.0, False), x - 3.0)
    assert (jfn.cache_info()["misses"], jfn.cache_info()["hits"]) == (3, 1)


def test_last_report_and_last_traces():
    jfn = compiler.jit(_gelu_mlp, executors=EXECUTORS)
    with pytest.raises(RuntimeError):
        compiler.last_report(jfn)
    with pytest.raises(TypeError):
        compiler.last_report(_gelu_mlp)
    jfn(torch.randn(2, 8), torch.randn(8, 4))
    report = compiler.last_report(jfn)
    assert isinstance(report, compiler.CompileReport) and report.status == "ok"
    assert report.target.name == "_gelu_mlp" and report.target.file == __file__
    assert not [d for d in report.diagnostics if d.severity == "error"]
    assert [op.name for op in report.ops] == ["torch.matmul", "torch.nn.functional.gelu", "torch.sum"]
    traces = compiler.last_traces(jfn)
    assert list(traces) == ["acquired", "decomposed", "optimised", "fusion", "execution"]
    for stage, trace in traces.items():
        assert trace.stage == stage
        assert trace.python() == report.forward.traces[stage] or stage == "decomposed"
    assert traces["decomposed"].python(nested=True) == report.forward.traces["decomposed"]
    assert compiler.CompileReport.from_json(report.to_json()).forward.traces == report.forward.traces
    jfn.reset()
    assert jfn.cache_info()["entries"] == 0


def test_kwargs_and_nested_inputs():
    def fn(pair, mapping, *, bias, scale=1.0):
        a, b = pair
        return {"out": (a @ mapping["w"] + bias) * scale, "aux": [b.sum(), mapping["v"].exp()]}

    jfn = compiler.jit(fn, executors=EXECUTORS)
    for scale in (1.0, 1.0, 0.5):
        pair = (torch.randn(2, 3), torch.randn(5))
        mapping = {"w": torch.randn(3, 4), "v": torch.randn(2)}
        bias = torch.randn(4)
        out = jfn(pair, mapping, bias=bias, scale=scale)
        assert isinstance(out, dict) and isinstance(out["aux"], list)
        same(out, fn(pair, mapping, bias=bias, scale=scale))
    assert (jfn.cache_info()["misses"], jfn.cache_info()["hits"]) == (2, 1)
    # the same tensors passed by keyword instead of position
    pair, mapping, bias = (torch.randn(2, 3), torch.randn(5)), {"w": torch.randn(3, 4), "v": torch.randn(2)}, torch.randn(4)
    same(jfn(pair=pair, mapping=mapping, bias=bias), fn(pair, mapping, bias=bias))


def test_module_with_parameters_and_buffers():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)
            self.norm = torch.nn.LayerNorm(8)
            self.register_buffer("shift", torch.randn(8))

        def forward(self, x):
            return self.norm(F.silu(self.fc(x)) + self.shift)

    net = Net().eval()
    jfn = compiler.jit(net, executors=EXECUTORS)
    x = torch.randn(4, 8)
    with torch.no_grad():
        same(jfn(x), net(x))
    roles = {v.name: v.role for v in compiler.last_traces(jfn)["acquired"].inputs}
    assert roles == {"x": "input", "p_fc_weight": "param", "p_fc_bias": "param", "p_norm_weight": "param",
                     "p_norm_bias": "param", "b_shift": "buffer"}


def test_parameter_updated_in_place_is_seen():
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.GELU(), torch.nn.Linear(6, 2))
    jfn = compiler.jit(model, executors=EXECUTORS)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x = torch.randn(4, 6)
    for _ in range(3):
        with torch.no_grad():
            same(jfn(x), model(x))
        loss = model(x).square().mean()  # an eager training step updates the parameters in place
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        model[0].bias.add_(1.0)  # and a direct in-place write
        same(jfn(x), model(x))
        model[1 - 1].weight.mul_(0)
        same(jfn(x), model(x))
    assert jfn.cache_info()["misses"] == 1


def test_buffer_updated_in_place_is_seen():
    bn = torch.nn.BatchNorm1d(4).eval()
    jfn = compiler.jit(bn, executors=EXECUTORS)
    x = torch.randn(3, 4)
    same(jfn(x), bn(x))
    bn.running_mean.add_(1.0)
    bn.running_var.mul_(2.0)
    same(jfn(x), bn(x))


def test_parameter_replaced_is_seen():
    model = torch.nn.Linear(4, 4)
    jfn = compiler.jit(model, executors=EXECUTORS)
    x = torch.randn(2, 4)
    jfn(x)
    model.weight = torch.nn.Parameter(torch.zeros(4, 4))
    with torch.no_grad():
        same(jfn(x), model(x))


def test_train_and_eval_modes_are_different_signatures():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).eval()
    jfn = compiler.jit(model, executors=EXECUTORS)
    x = torch.randn(8, 4)
    with torch.no_grad():
        same(jfn(x), model(x))
        model.train()
        y = jfn(x)
        assert (y == 0).any()  # dropout applied
        model.eval()
        same(jfn(x), model(x))
    assert (jfn.cache_info()["misses"], jfn.cache_info()["hits"]) == (2, 1)


def test_function_mutating_its_input_says_so_and_computes_right():
    def fn(x, y):
        x += y
        return x * 2

    jfn = compiler.jit(fn, executors=EXECUTORS)
    for _ in range(2):
        x, y = torch.ones(3), torch.ones(3)
        same(jfn(x, y), torch.full((3,), 4.0))
    (w,) = [d for d in compiler.last_report(jfn).diagnostics if "in place" in d.message]
    assert w.severity == "information" and w.message.startswith("x is updated in place")
    assert (w.file, w.line) == (__file__, fn.__code__.co_firstlineno + 1)


def test_function_mutating_its_input():
    def fn(x, y):
        x += y
        return x * 2

    jfn = compiler.jit(fn, executors=EXECUTORS)
    for _ in range(2):
        x, y = torch.ones(3), torch.ones(3)
        out = jfn(x, y)
        same(out, torch.full((3,), 4.0))
        same(x, torch.full((3,), 2.0))


def test_compile_error_in_user_code_raises_compile_error():
    def fn(x):
        return x @ x  # (2, 3) @ (2, 3): shapes do not match

    jfn = compiler.jit(fn, executors=EXECUTORS)
    with pytest.raises(compiler.CompileError) as info:
        jfn(torch.randn(2, 3))
    err = info.value.report.error
    assert err.file == __file__ and err.line == fn.__code__.co_firstlineno + 1


def test_training_mode_dropout_runs_compiled():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1)).train()
    jfn = compiler.jit(model, executors=EXECUTORS)
    out = jfn(torch.randn(4, 8))
    assert out.shape == (4, 8)
    assert not [d.message for d in compiler.last_report(jfn).diagnostics if d.severity == "error"]
    assert not jfn.last.eager_fallback


def test_cache_is_bounded():
    jf = compiler.jit(lambda x, k: x * k, max_entries=3)
    x = torch.randn(2)
    for k in range(5):  # a Python number is specialised: each value is a new signature
        assert torch.equal(jf(x, float(k)), x * k)
    assert jf.cache_info()["entries"] == 3 and jf.cache_info()["misses"] == 5


def test_nested_tensor_arguments_are_not_passed_as_program_inputs():
    jf = compiler.jit(lambda x, ys: x + ys[0])  # two tensors, but the second comes in a list
    a, b = torch.randn(3), torch.randn(3)
    for _ in range(2):  # a miss, then a hit
        assert torch.allclose(jf(a, [b]), a + b)


def test_grad_mode_picks_a_training_or_an_inference_program_and_is_restored():
    lin = torch.nn.Linear(4, 3)  # parameters that require grad
    jfn = compiler.jit(lambda x: F.gelu(lin(x)) * 2, executors=EXECUTORS)
    x = torch.randn(2, 4, requires_grad=True)
    for grad_mode in (True, False, True):
        with torch.set_grad_enabled(grad_mode):
            out = jfn(x)
            assert torch.is_grad_enabled() == grad_mode  # as it was, after the call
        # as eager: a graph under grad mode (a training program), none without
        assert out.requires_grad == grad_mode and (out.grad_fn is not None) == grad_mode
        with torch.no_grad():
            same(out, F.gelu(lin(x)) * 2)
    assert jfn.cache_info()["misses"] == 2  # one program per grad mode, reused
    with torch.inference_mode():
        assert not jfn(x).requires_grad
    assert "@no_grad" in compiler.last_report(jfn).forward.traces["execution"]

    @program_calls.no_grad  # what the printed program is decorated with: grad mode restored however it ends
    def failing():
        assert not torch.is_grad_enabled()
        raise ValueError("inside the program")
    with pytest.raises(ValueError):
        failing()
    assert torch.is_grad_enabled()


_FIRST_CALL = """
import sys, torch, compiler
from compiler import executors
compiler.jit(lambda x: x * 2 + 1)(torch.ones(3))
print(executors.default_executors(torch.device("cpu")))
print(sorted(m for m in sys.modules if m.startswith(("fusionlens.executors.", "triton"))))
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the fusion executors are imported to be used")
@pytest.mark.parametrize("interpret", [False, True])
def test_first_call_imports_only_the_executors_it_can_use(interpret):
    """Choosing the default executors imports no executor package that cannot run here (on a
    CPU without TRITON_INTERPRET they were a third of a first compile); with TRITON_INTERPRET=1
    Triton's interpreter is still chosen. A fresh process: this one has imported them all."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        pytest.importorskip("triton")
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, "-c", _FIRST_CALL], cwd=Path(__file__).resolve().parents[1], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    chosen, imported = proc.stdout.strip().splitlines()[-2:]
    if interpret:
        assert chosen == "['triton', 'torch']" and "'fusionlens.executors.triton'" in imported
    else:
        assert chosen == "['torch']"
        # lowering and profiling are the executors package's own stages, not backends
        assert imported == ("['fusionlens.executors.base', 'fusionlens.executors.lowering', "
                            "'fusionlens.executors.profiling', 'fusionlens.executors.torch_executor']")
