"""Run on 2 gloo ranks by tests/test_distributed_tp.py (python -m torch.distributed.run
--nproc_per_node 2 tests/distributed/tp_checks.py): compiler.jit of tensor-parallel modules
(parallelize_module with ColwiseParallel / RowwiseParallel) against the same modules eager,
on every rank: outputs, gradients (DTensors, same placements) and parameters after 3 SGD steps,
the collectives in the trace and the report at their lines, and the plans that run eagerly."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel,
                                               parallelize_module)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import compiler  # noqa: E402
import fusionlens.driver.checking  # noqa: E402  (patched by the checks that make one rank's check fail)


class MLP(torch.nn.Module):
    def __init__(self, dim: int = 8, hidden: int = 16):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(dim, hidden), torch.nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc1(x))  # COLWISE LINE
        return self.fc2(h)  # ROWWISE LINE


class Attention(torch.nn.Module):
    """q, k, v colwise (the heads split across the ranks), the out-projection rowwise; the local
    head count is the shard's width over the head size, as torch's TP tutorial has it."""

    def __init__(self, dim: int = 16, heads: int = 4):
        super().__init__()
        self.head_dim = dim // heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, -1, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v))  # QKV LINE
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))  # OUT LINE


class Block(torch.nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.attn, self.mlp = Attention(dim), MLP(dim, 2 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x)
        return x + self.mlp(x)  # the MLP's input requires grad: its colwise fc1 all-reduces it backward


MLP_PLAN = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
BLOCK_PLAN = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
              "attn.o": RowwiseParallel(), "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel()}


# torch.testing's tolerances per dtype (rtol, atol): every rank's shards are float32 here
TOLERANCES = {torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7), torch.bfloat16: (1.6e-2, 1e-5),
              torch.float16: (1e-3, 1e-5)}


def _mesh():
    return init_device_mesh("cpu", (dist.get_world_size(),))


def _pair(make, plan):
    """The same module twice (every rank builds it from one seed; distribute_tensor sends rank 0's)."""
    def one():
        torch.manual_seed(0)
        return parallelize_module(make(), _mesh(), plan)
    return one(), one()


def _close(a, b, what: str) -> None:
    if isinstance(a, DTensor) or isinstance(b, DTensor):
        assert isinstance(a, DTensor) and isinstance(b, DTensor) and a.placements == b.placements, \
            f"rank {dist.get_rank()}: {what}: {type(a).__name__} {getattr(a, 'placements', '')} against eager's " \
            f"{type(b).__name__} {getattr(b, 'placements', '')}"
        a, b = a.to_local(), b.to_local()
    rtol, atol = TOLERANCES[a.dtype]
    if "grad" in what:  # gradients are sums over the batch: ten times looser
        rtol, atol = 10 * rtol, 10 * atol
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m: f"rank {dist.get_rank()}: {what}: {m}")


def _compiled_natively(jfn) -> None:
    assert jfn.compiles >= 1 and not any(e.eager_fallback for e in jfn.cache.values()), \
        [d.message for e in jfn.cache.values() for d in e.report.diagnostics]


def _train_like_eager(make, plan, shape: tuple[int, ...], input_grad: bool, steps: int = 3, natively: bool = True):
    """3 SGD steps eager and compiled on one batch a step (the same on every rank, as TP needs):
    losses, the input's gradient (`input_grad`), every parameter's gradient and the parameters
    after each step."""
    eager, model = _pair(make, plan)
    jfn = compiler.jit(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, model)]
    for step in range(steps):
        torch.manual_seed(100 + step)
        x = torch.randn(*shape)
        xe, xc = x.clone().requires_grad_(input_grad), x.clone().requires_grad_(input_grad)
        want, got = eager(xe).square().mean(), jfn(xc).square().mean()
        _close(got, want, f"loss at step {step}")
        want.backward()
        got.backward()
        if input_grad:
            _close(xc.grad, xe.grad, f"the input's grad at step {step}")
        for (name, a), b in zip(model.named_parameters(), eager.parameters()):
            _close(a.grad, b.grad, f"the grad of {name} at step {step}")
        for opt in opts:
            opt.step()
            opt.zero_grad()
        for (name, a), b in zip(model.named_parameters(), eager.parameters()):
            _close(a, b, f"{name} after step {step}")
    if natively:
        _compiled_natively(jfn)
    return jfn, eager


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(open(__file__), 1) if f"# {marker}" in text)


def check_mlp_training():
    jfn, _ = _train_like_eager(MLP, MLP_PLAN, (4, 8), input_grad=False)
    assert jfn.compiles == 1, jfn.cache_info()
    report = compiler.last_report(jfn)
    listed = {(c.op, c.kind, c.program, c.line, c.bytes, c.group_size) for c in report.collectives}
    # the rowwise output's; the colwise input (the call's, no grad) needs no gradient all-reduced
    want = {("all_reduce", "traced", "forward", _line("ROWWISE LINE"), 4 * 8 * 4, dist.get_world_size())}
    assert listed == want, report.collectives
    assert all(c.region and c.file.endswith("tp_checks.py") for c in report.collectives), report.collectives
    forward = compiler.last_compiled(jfn).forward.plan.trace.python()
    assert "= all_reduce(" in forward and "grad=Grad.IDENTITY" in forward, forward
    assert f"tp_checks.py:{_line('ROWWISE LINE')}" in forward, forward


def check_mlp_inference():
    eager, model = _pair(MLP, MLP_PLAN)
    jfn = compiler.jit(model)
    with torch.no_grad():
        for call in range(3):
            torch.manual_seed(200 + call)
            x = torch.randn(3, 5, 8)
            _close(jfn(x), eager(x), f"the output at call {call}")
    _compiled_natively(jfn)
    assert jfn.compiles == 1, jfn.cache_info()
    (listed,) = compiler.last_report(jfn).collectives  # no colwise identity: nothing flows back
    assert (listed.op, listed.line, listed.bytes) == ("all_reduce", _line("ROWWISE LINE"), 3 * 5 * 8 * 4), listed
    with torch.no_grad():  # compiler.compile of the same module: compiled as jit compiles it
        compiled = compiler.compile(model, torch.randn(3, 5, 8))
    assert compiled.status == "ok" and not compiled.fallbacks, compiled.diagnostics
    assert [(c.op, c.line) for c in compiled.collectives] == [("all_reduce", _line("ROWWISE LINE"))], compiled.collectives


def check_a_dtensor_argument_runs_eagerly():
    """A DTensor input (DTensor's own dispatch) is not compiled: that call runs eagerly and says
    why; a plain tensor of the same shape after it is a signature of its own, compiled."""
    eager, model = _pair(MLP, MLP_PLAN)
    jfn = compiler.jit(model)
    x = torch.randn(3, 5, 8)
    xd = DTensor.from_local(x, _mesh(), [Replicate()])
    with torch.no_grad():
        got, want = jfn(xd), eager(xd)
        _close(got.full_tensor() if isinstance(got, DTensor) else got,
               want.full_tensor() if isinstance(want, DTensor) else want, "the output of a DTensor call")
        messages = [d.message for d in compiler.last_report(jfn).diagnostics]
        assert any("DTensor arguments" in m and "eagerly" in m for m in messages), messages
        _close(jfn(x), eager(x), "the output of a plain call after it")
    assert jfn.compiles == 2 and not compiler.last_report(jfn).fallbacks, jfn.cache_info()
    assert [c.op for c in compiler.last_report(jfn).collectives] == ["all_reduce"]


def check_attention_block_training():
    jfn, eager = _train_like_eager(Block, BLOCK_PLAN, (2, 6, 16), input_grad=True)
    report = compiler.last_report(jfn)
    lines = sorted((c.program, c.line) for c in report.collectives)
    # forward: each rowwise output; backward: each colwise input's gradient (q, k and v's apart, as DTensor's)
    assert lines == sorted([("forward", _line("OUT LINE")), ("forward", _line("ROWWISE LINE")),
                            ("backward", _line("COLWISE LINE"))] + [("backward", _line("QKV LINE"))] * 3), \
        report.collectives
    with torch.no_grad():
        x = torch.randn(2, 6, 16)
        _close(jfn(x), eager(x), "the trained block's output under no_grad")  # an inference program now
    assert jfn.compiles == 2, jfn.cache_info()


def check_unsupported_plans_run_eagerly_and_say_why():
    plans = {"SequenceParallel": (lambda: torch.nn.Sequential(torch.nn.LayerNorm(8), MLP()),
                                  {"0": SequenceParallel(), "1.fc1": ColwiseParallel(), "1.fc2": RowwiseParallel()}),
             "use_local_output": (MLP, {"fc1": ColwiseParallel(use_local_output=False), "fc2": RowwiseParallel()}),
             "PrepareModuleInput": (lambda: torch.nn.Sequential(MLP()), {
                 "0": PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),),
                                         use_local_output=True),
                 "0.fc1": ColwiseParallel(), "0.fc2": RowwiseParallel()})}
    for name, (make, plan) in plans.items():
        eager, model = _pair(make, plan)
        jfn = compiler.jit(model)
        x = torch.randn(2, 4, 8)  # (batch, sequence, features): SequenceParallel shards the sequence
        _close(jfn(x), eager(x), f"the output under {name}")
        messages = [d.message for d in compiler.last_report(jfn).diagnostics]
        assert any(name in m and "eagerly" in m for m in messages), messages


def check_one_rank_failing_its_check_runs_every_rank_eagerly():
    """Rank 1's gradient check fails (forced, after it ran: the ranks' collectives match up to
    there): every rank runs the signature eagerly, or their collectives would not match; the
    others say why."""
    eager, model = _pair(MLP, MLP_PLAN)
    jfn = compiler.jit(model)
    real = fusionlens.driver.checking.check_gradients
    if dist.get_rank() == 1:
        fusionlens.driver.checking.check_gradients = lambda *a, **k: real(*a, **k) + [fusionlens.report.schema.Diagnostic(
            "error", "forced mismatch")]
    try:
        for call in range(2):
            x = torch.randn(4, 8)
            _close(jfn(x), eager(x), f"the output at call {call}")
    finally:
        fusionlens.driver.checking.check_gradients = real
    assert [e.eager_fallback for e in jfn.cache.values()] == [True], jfn.cache_info()
    if dist.get_rank() != 1:
        messages = [d.message for d in compiler.last_report(jfn).diagnostics]
        assert any("another rank" in m for m in messages), messages


def check_a_forward_check_failing_on_one_rank_skips_every_rank_s_gradient_check():
    """Rank 0's forward check fails (forced): rank 1 would go on to the gradient check, whose
    backward all-reduces (the colwise input's) rank 0 never joins. The ranks agree after the
    forward check: none checks gradients, all run eagerly, and train as eager TP does."""
    real = fusionlens.driver.checking.checked_run

    def failing(*args, **kwargs):
        checked, result = real(*args, **kwargs)
        return checked + [fusionlens.report.schema.Diagnostic("error", "forced mismatch")], result
    if dist.get_rank() == 0:
        fusionlens.driver.checking.checked_run = failing
    try:
        jfn, _ = _train_like_eager(MLP, MLP_PLAN, (4, 8), input_grad=True, steps=2, natively=False)
    finally:
        fusionlens.driver.checking.checked_run = real
    assert [e.eager_fallback for e in jfn.cache.values()] == [True], jfn.cache_info()
    messages = [d.message for d in compiler.last_report(jfn).diagnostics]
    assert dist.get_rank() == 0 or any("another rank" in m for m in messages), messages


def check_a_float64_rejudge_on_one_rank_runs_on_every_rank():
    """Rank 1's gradients differ from eager's (made to), so it judges them against a float64 run of
    the call, which communicates: every rank runs that float64 call with it (or rank 1's would
    wait for the others), and as the gradients are as close to it as eager's, all compile."""
    real = fusionlens.driver.checking.grad_mismatch
    if dist.get_rank() == 1:
        fusionlens.driver.checking.grad_mismatch = lambda *a, **k: "made to differ"
    try:
        jfn, _ = _train_like_eager(MLP, MLP_PLAN, (4, 8), input_grad=True, steps=1)
    finally:
        fusionlens.driver.checking.grad_mismatch = real
    codes = [d.code for d in compiler.last_report(jfn).diagnostics]
    assert (fusionlens.report.schema.DiagnosticCode.ILL_CONDITIONED in codes) == (dist.get_rank() == 1), codes


CHECKS = [check_mlp_training, check_mlp_inference, check_a_dtensor_argument_runs_eagerly, check_attention_block_training,
          check_unsupported_plans_run_eagerly_and_say_why, check_one_rank_failing_its_check_runs_every_rank_eagerly,
          check_a_forward_check_failing_on_one_rank_skips_every_rank_s_gradient_check,
          check_a_float64_rejudge_on_one_rank_runs_on_every_rank]


if __name__ == "__main__":
    from runner import run  # tests/distributed/runner.py, beside this file

    run(CHECKS)
