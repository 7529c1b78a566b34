"""A training-mode batch_norm saves its batch statistics; its backward reads them.

In a training forward F.batch_norm(training=True) runs as an op that also returns aten's
save_mean and save_invstd ((C,) each, float32 for low-precision inputs): batch_norm_with_update
where it has running statistics (torch's native_batch_norm whole, which updates them in place
once a call, as eager's does), batch_norm_with_stats where it has none (its prims where Triton
fuses it). The backward reads the two statistics (native_batch_norm_backward whole, or prims
with no var_mean), never a second pass over x for them (composite_rules). Checked here:

- outputs, every gradient (input, weight, bias) and the running statistics (running_mean,
  running_var, num_batches_tracked) after each of several calls, against eager running the same
  calls on a deep copy: BatchNorm1d ([N, C], [N, C, L]) and BatchNorm2d, affine or not, with and
  without running statistics, momentum 0.1 and None (the cumulative average), float32 and a
  bfloat16 input, through jit and compile, with the torch executor (eager's bits: its own
  kernels) and Triton (its interpreter on a CPU, tiny sizes);
- the traces: the forward saves the (C,) statistics and nothing full-size of its own, the
  backward has no var_mean and no reduction that reads x without dy, and running it calls
  torch's native_batch_norm_backward and no native_batch_norm;
- aten's forms called directly (native_batch_norm, _native_batch_norm_legit,
  _batch_norm_with_update): their running statistics updated once a call, not again in the
  backward; a dynamic=True jit: one program for every batch size;
- a torchvision ResNet BasicBlock with a downsampling shortcut: training steps (SGD) with
  gradients, parameters and running statistics as eager's.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import compiler
from fusionlens.driver import checking, pipeline
from fusionlens.middle import passes
from fusionlens.ops import prims as P
from fusionlens.options import CompileOptions

from fusion_groups import reductions_not_reading_a_cotangent

C = 3
TORCH, TRITON = ("torch",), ("triton", "torch")


@dataclass(frozen=True)
class Case:
    name: str
    shape: tuple  # the input's: [N, C], [N, C, L] or [N, C, H, W]
    affine: bool = True
    track: bool = True  # track_running_stats
    momentum: float | None = 0.1
    dtype: torch.dtype = torch.float32  # the input's; the module's float32 (a "mixed" call) ...
    low_params: bool = False  # ... or the input's dtype too

    def module(self) -> nn.Module:
        kind = nn.BatchNorm2d if len(self.shape) == 4 else nn.BatchNorm1d
        m = kind(C, affine=self.affine, track_running_stats=self.track, momentum=self.momentum).train()
        if self.affine:  # not 1 and 0: a wrong weight or bias gradient must show
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
        return m.to(self.dtype) if self.low_params else m

    def input(self) -> torch.Tensor:
        return (torch.randn(self.shape) * 2 + 0.5).to(self.dtype)


CASES = [
    Case("1d-NC", (6, C)),
    Case("1d-NC-no-affine-cumulative", (6, C), affine=False, momentum=None),
    Case("1d-NCL", (4, C, 5)),
    Case("1d-NCL-no-running-stats", (4, C, 5), track=False),
    Case("2d", (4, C, 3, 3)),
    Case("2d-cumulative", (4, C, 3, 3), momentum=None),
    Case("2d-no-affine", (4, C, 3, 3), affine=False),
    Case("2d-no-affine-no-running-stats", (4, C, 3, 3), affine=False, track=False),
    Case("2d-bf16", (4, C, 3, 3), dtype=torch.bfloat16),
    Case("2d-bf16-bf16-module", (4, C, 3, 3), dtype=torch.bfloat16, low_params=True),
    Case("1d-NC-bf16-no-running-stats", (6, C), track=False, dtype=torch.bfloat16),
    Case("1d-NCL-bf16-no-affine-cumulative", (4, C, 5), affine=False, momentum=None, dtype=torch.bfloat16),
]
TRITON_CASES = [c for c in CASES if c.name in ("1d-NC", "1d-NCL-no-running-stats", "2d-no-affine",
                                               "2d-no-affine-no-running-stats", "2d-cumulative")]


def _same(got, want, exact: bool, what: str) -> None:
    if exact:
        assert torch.equal(got, want), f"{what}: {(got.float() - want.float()).abs().max()}"
    else:
        problem = checking.mismatch(got, want)
        assert problem is None, f"{what}: {problem}"


def _same_state(model: nn.Module, twin: nn.Module, step: int) -> None:
    """Running statistics and the counter exactly eager's (torch's kernel updates them in both)."""
    for (name, b), (_, e) in zip(model.named_buffers(), twin.named_buffers()):
        assert torch.equal(b, e), f"step {step}: {name} {b} != eager's {e}"


def _steps(model: nn.Module, run, make_input, executors, steps: int = 3) -> None:
    """`steps` calls of `run` (the compiled model) and of eager on a deep copy, each on a fresh
    input and a fresh cotangent: outputs, gradients and buffers after each, eager's."""
    twin = copy.deepcopy(model)
    exact = executors == TORCH  # eager's kernels: its bits
    for step in range(steps):
        x = make_input()
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, want = run(xa), twin(xb)
        _same(out, want, exact, f"step {step}: the output")
        dy = torch.randn_like(want)
        got = torch.autograd.grad(out, [xa, *model.parameters()], dy)
        eager = torch.autograd.grad(want, [xb, *twin.parameters()], dy)
        for i, (g, e) in enumerate(zip(got, eager)):
            if exact:
                _same(g, e, True, f"step {step}: gradient {i}")
            else:
                problem = checking.grad_mismatch(g, e)
                assert problem is None, f"step {step}: gradient {i}: {problem}"
        _same_state(model, twin, step)


@pytest.fixture
def triton_run(monkeypatch):
    if not torch.cuda.is_available():
        from test_autograd_rules import _triton_problem

        problem = _triton_problem()
        if problem:
            pytest.skip(problem)
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def _jit_steps(case: Case, executors) -> None:
    torch.manual_seed(0)
    model = case.module()
    jfn = compiler.jit(model, executors=list(executors))
    _steps(model, jfn, case.input, executors)
    assert not jfn.last.eager_fallback, [d.message for d in compiler.last_report(jfn).diagnostics]
    backward = compiler.last_report(jfn).program("backward")
    assert backward is not None
    if executors == TRITON:
        assert any(r.executor == "triton" for r in backward.regions), backward.regions


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_jit_torch_executor_is_eagers_bits(case):
    _jit_steps(case, TORCH)


@pytest.mark.parametrize("case", TRITON_CASES, ids=lambda c: c.name)
def test_jit_triton(triton_run, case):
    _jit_steps(case, TRITON)


@pytest.mark.parametrize("executors", [TORCH, TRITON], ids=["torch", "triton"])
@pytest.mark.parametrize("case", [CASES[4], CASES[3]], ids=lambda c: c.name)
def test_compile_checks_against_eager_and_reports_the_saved_statistics(request, case, executors):
    """compile checks outputs and gradients against eager itself (an error diagnostic if they
    differ), leaves the caller's running statistics alone, and its report's saved activations are
    the two (C,) statistics."""
    if executors == TRITON:
        request.getfixturevalue("triton_run")
    torch.manual_seed(1)
    model = case.module()
    before = [b.clone() for b in model.buffers()]
    report = compiler.compile(model, case.input().requires_grad_(), executors=list(executors))
    problems = [d.message for d in report.diagnostics if d.severity in ("error", "warning")]
    assert not problems, problems
    assert all(torch.equal(b, e) for b, e in zip(model.buffers(), before))
    activations = [s for s in report.training.saved if s.kind == "activation"]
    assert sorted(tuple(s.shape) for s in activations) == [(C,), (C,)], activations
    assert all(s.dtype == "float32" for s in activations), activations


@pytest.mark.parametrize("executors", [TORCH, TRITON], ids=["torch", "triton"])
def test_dynamic_batch_sizes_share_a_program(request, executors):
    """With symbolic sizes the backward divides by the symbolic element count (a float() of it
    was a guard on the batch size: a compile a batch size), running statistics still eager's."""
    if executors == TRITON:
        request.getfixturevalue("triton_run")
    torch.manual_seed(6)
    model = Case("2d", (4, C, 3, 3)).module()
    jfn = compiler.jit(model, dynamic=True, executors=list(executors))
    sizes = iter((3, 5, 7, 6))
    _steps(model, jfn, lambda: torch.randn(next(sizes), C, 3, 3), executors, steps=4)
    # Triton's first program may keep the first size; the second serves every other
    assert jfn.cache_info()["compiles"] <= (1 if executors == TORCH else 2), jfn.cache_info()


# --- the traces: what is saved, and what the backward reads ---------------------------------

def _functional(x, w, b, rm, rv):
    return F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3, eps=1e-3)


def _functional_no_stats(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True, eps=1e-3)


def _args(running: bool):
    x = (torch.randn(4, C, 3, 3) * 2 + 1).requires_grad_()
    params = [torch.rand(C).add_(0.5).requires_grad_(), torch.randn(C).requires_grad_()]
    return (x, *params, torch.randn(C), torch.rand(C) + 0.5) if running else (x, *params)


class _AtenCalls(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("running", [True, False], ids=["running-stats", "no-running-stats"])
@pytest.mark.parametrize("executors", [TORCH, TRITON], ids=["torch", "triton"])
def test_forward_saves_the_statistics_and_the_backward_reads_them(request, running, executors):
    if executors == TRITON:
        request.getfixturevalue("triton_run")
    torch.manual_seed(2)
    fn = _functional if running else _functional_no_stats
    args = _args(running)
    c = pipeline.compile_program(fn, args, {}, CompileOptions(executors=executors))
    assert c.traced.eager_only is None and c.differentiated is not None
    d = c.differentiated
    inputs = {v.name for v in d.joint.inputs}
    made = [v for v in d.saved if v.name not in inputs]
    # the (C,) mean and 1 / std, float32: nothing full-size (no normalised x) of its own
    assert sorted((tuple(v.shape), v.dtype) for v in made) == [((C,), torch.float32)] * 2, d.saved
    assert args[0].shape in [tuple(v.shape) for v in d.saved if v.name in inputs]  # x itself
    backward = c.program("backward").traces["backward"]
    ops = passes.flatten(backward.bound_symbols)
    assert not any(b.sym is P.var_mean for b in ops), backward.python()
    assert not any(b.sym.name.startswith("batch_norm_with") for b in ops), backward.python()
    assert not reductions_not_reading_a_cotangent(backward), backward.python()
    if executors == TRITON:
        assert any(r.executor == "triton" for r in c.program("backward").plan.regions)
        forward_fused = any(r.executor == "triton" for r in c.program("forward").plan.regions)
        assert forward_fused == (not running)  # the running statistics' update runs in torch's kernel
    # running it: the whole backward is torch's native_batch_norm_backward, no forward kernel again
    fresh = _args(running)
    out = c.fn(*fresh, *c.constants)
    with _AtenCalls() as calls:
        torch.autograd.grad(out, fresh[:3], torch.randn_like(out))
    assert "aten.native_batch_norm" not in calls.calls and "aten.var_mean" not in calls.calls, calls.calls
    if executors == TORCH:
        assert calls.calls.count("aten.native_batch_norm_backward") == 1, calls.calls


def test_functional_running_statistics_updated_once_a_call_with_eagers_momentum_and_variance():
    """F.batch_norm with running statistics (momentum 0.3): each call's update is eager's (the
    biased variance normalises, the unbiased one goes into running_var), once a call, and its
    gradients are eager's."""
    torch.manual_seed(3)
    args = _args(True)
    rm, rv = args[3], args[4]
    c = pipeline.compile_program(_functional, args, {}, CompileOptions(executors=TORCH))
    mine, theirs = (rm.clone(), rv.clone()), (rm.clone(), rv.clone())
    for step in range(3):
        x, w, b = (t.detach().clone().requires_grad_() for t in _args(False))
        xe, we, be = (t.detach().clone().requires_grad_() for t in (x, w, b))
        out = c.fn(x, w, b, *mine, *c.constants)
        want = _functional(xe, we, be, *theirs)
        dy = torch.randn_like(out)
        for g, e in zip(torch.autograd.grad(out, [x, w, b], dy), torch.autograd.grad(want, [xe, we, be], dy)):
            assert torch.equal(g, e), step
        assert torch.equal(out, want) and all(torch.equal(a, e) for a, e in zip(mine, theirs)), step
    # aten's semantics written out: the batch mean and the unbiased variance, momentum 0.3
    before = [t.clone() for t in mine]
    c.fn(x, w, b, *mine, *c.constants)
    rows = x.detach().transpose(0, 1).reshape(C, -1)
    torch.testing.assert_close(mine[0], 0.7 * before[0] + 0.3 * rows.mean(1))
    torch.testing.assert_close(mine[1], 0.7 * before[1] + 0.3 * rows.var(1, unbiased=True))


NATIVE = {
    "native_batch_norm": lambda x, w, b, rm, rv: torch.native_batch_norm(x, w, b, rm, rv, True, 0.2, 1e-5)[0],
    "_native_batch_norm_legit": lambda x, w, b, rm, rv: torch._native_batch_norm_legit(x, w, b, rm, rv, True, 0.2,
                                                                                       1e-5)[0],
    "_batch_norm_with_update": lambda x, w, b, rm, rv: torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, 0.2,
                                                                                              1e-5)[0],
}


@pytest.mark.parametrize("op", list(NATIVE))
def test_aten_native_forms_update_the_running_statistics_once_a_call(op):
    """aten's forms called directly return their statistics; their backward reads them (the
    generic rule ran the op again in the backward: a second update of the running statistics)."""
    torch.manual_seed(5)
    fn = NATIVE[op]
    jfn = compiler.jit(fn, executors=list(TORCH))
    mine = [torch.randn(C), torch.rand(C) + 0.5]
    theirs = [t.clone() for t in mine]
    for step in range(3):
        x, w, b = (t.detach().requires_grad_() for t in _args(False))
        xe, we, be = (t.detach().clone().requires_grad_() for t in (x, w, b))
        out, want = jfn(x, w, b, *mine), fn(xe, we, be, *theirs)
        dy = torch.randn_like(out)
        for g, e in zip(torch.autograd.grad(out, [x, w, b], dy), torch.autograd.grad(want, [xe, we, be], dy)):
            assert torch.equal(g, e), step
        assert all(torch.equal(a, e) for a, e in zip(mine, theirs)), (step, mine, theirs)
    assert not jfn.last.eager_fallback


# --- a torchvision ResNet block: training steps ----------------------------------------------

def _resnet_block() -> nn.Module:
    from zoo_imports import torchvision

    if torchvision is None:
        pytest.skip("torchvision is not installed")
    from torchvision.models.resnet import BasicBlock, conv1x1

    downsample = nn.Sequential(conv1x1(4, 8, stride=2), nn.BatchNorm2d(8))
    return BasicBlock(4, 8, stride=2, downsample=downsample).train()


def test_resnet_basic_block_training_steps_match_eager():
    """Three SGD steps of a torchvision BasicBlock (three BatchNorm2d, a strided shortcut): the
    loss, every parameter's gradient and value and every running statistic as eager's."""
    torch.manual_seed(4)
    model = _resnet_block()
    twin = copy.deepcopy(model)
    jfn = compiler.jit(model, executors=list(TORCH))
    opt, opt_twin = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, twin))
    for step in range(3):
        x = torch.randn(4, 4, 8, 8)
        loss, want = (F.mse_loss(m(x), torch.ones(4, 8, 4, 4)) for m in (jfn, twin))
        _same(loss, want, False, f"step {step}: the loss")
        opt.zero_grad()
        opt_twin.zero_grad()
        loss.backward()
        want.backward()
        for (name, p), e in zip(model.named_parameters(), twin.parameters()):
            assert checking.grad_mismatch(p.grad, e.grad) is None, f"step {step}: {name}"
        opt.step()
        opt_twin.step()
        for (name, p), e in zip(model.named_parameters(), twin.parameters()):
            _same(p.detach(), e.detach(), False, f"step {step}: {name}")
        for (name, b), e in zip(model.named_buffers(), twin.buffers()):
            _same(b, e, b.dtype == torch.int64, f"step {step}: {name}")
    assert not jfn.last.eager_fallback
    # each BatchNorm's (8,) mean and 1 / std are saved
    stats = [s for s in compiler.last_report(jfn).training.saved if s.kind == "activation" and s.shape == [8]]
    assert len(stats) == 6 and all(s.dtype == "float32" for s in stats), stats


if __name__ == "__main__":
    raise SystemExit(pytest.main([os.path.abspath(__file__), "-q"]))
