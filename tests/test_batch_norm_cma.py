"""nn.BatchNorm with momentum=None (a cumulative moving average) in training loops.

torch's BatchNorm forward computes its factor in Python, `1.0 / float(self.num_batches_tracked)`
(SyncBatchNorm: `.item()`), a value that changes every step. Recorded as a value guard, it
compiled every step; the frontend records the module's F.batch_norm call as
`batch_norm_cumulative`, which reads num_batches_tracked as a tensor (frontend/value_guards.py).
Checked here, each step against eager on a deep copy with fresh random inputs: outputs,
gradients, running_mean, running_var and num_batches_tracked, for BatchNorm1d/2d/3d (training
loops of SGD steps, static and dynamic shapes, under no_grad too), eval mode (no update), a
SyncBatchNorm with no process group; and that a branch on a value outside torch's BatchNorm
forward (a user's own cumulative average, a user's check of the counter) is still a guard.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import compiler
from fusionlens.report.schema import DiagnosticCode

STEPS = 10


def _guards(jfn) -> list[str]:
    return [d.message for d in compiler.last_report(jfn).diagnostics if d.code == DiagnosticCode.VALUE_GUARD]


def _close(actual, expected, what: str, **tolerance) -> None:
    try:
        torch.testing.assert_close(actual, expected, **tolerance)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


def _same_buffers(model: nn.Module, twin: nn.Module, step: int) -> None:
    """running_mean, running_var and num_batches_tracked: torch's kernel updates them in both runs
    from the same input, so they are eager's to the bit."""
    for (name, b), (_, e) in zip(model.named_buffers(), twin.named_buffers()):
        assert torch.equal(b, e), f"step {step}: {name} {b} != eager's {e}"


def _train(model: nn.Module, make_input, steps: int = STEPS, exact: bool = True, **jit_options):
    """`steps` SGD steps of the compiled model and of eager on a deep copy; each step's output,
    gradients (input and parameters) and buffers checked. Returns the jit function."""
    twin = copy.deepcopy(model)
    jfn = compiler.jit(model, **jit_options)
    opt, opt_twin = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin))
    for step in range(steps):
        x = make_input()
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, want = jfn(xa), twin(xb)
        _close(out, want, f"step {step}: the output")
        dy = torch.randn_like(want)
        out.backward(dy)
        want.backward(dy)
        _close(xa.grad, xb.grad, f"step {step}: the input's gradient")
        for (name, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
            _close(p.grad, q.grad, f"step {step}: {name}'s gradient")
        if exact:
            _same_buffers(model, twin, step)
        else:  # a convolution's output before it: eager's to its tolerance, the statistics too
            for (name, b), (_, e) in zip(model.named_buffers(), twin.named_buffers()):
                _close(b, e, f"step {step}: {name}")
        opt.step()
        opt_twin.step()
        opt.zero_grad()
        opt_twin.zero_grad()
    return jfn


BATCH_NORMS = [
    (nn.BatchNorm1d, (6, 3)),
    (nn.BatchNorm1d, (4, 3, 5)),
    (nn.BatchNorm2d, (4, 3, 3, 3)),
    (nn.BatchNorm3d, (2, 3, 2, 3, 2)),
]


@pytest.mark.parametrize("kind,shape", BATCH_NORMS, ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
def test_a_training_loop_compiles_once_with_eagers_statistics(kind, shape):
    torch.manual_seed(0)
    model = kind(3, momentum=None).train()
    with torch.no_grad():  # not 1 and 0: a wrong weight or bias gradient must show
        model.weight.uniform_(0.5, 1.5)
        model.bias.uniform_(-0.5, 0.5)
    jfn = _train(model, lambda: torch.randn(shape) * 2 + 0.5)
    assert jfn.cache_info()["compiles"] == 1, jfn.cache_info()
    assert int(model.num_batches_tracked) == STEPS
    assert _guards(jfn) == []  # the factor is no guard
    forward = compiler.last_report(jfn).program("forward").traces["forward"]
    assert "batch_norm_cumulative_with_update(" in forward


def test_a_convolutional_block_trains_with_sgd_as_eager():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, momentum=None), nn.ReLU(),
                          nn.Conv2d(4, 2, 1), nn.BatchNorm2d(2, momentum=None)).train()
    jfn = _train(model, lambda: torch.randn(2, 3, 6, 6), exact=False)
    assert jfn.cache_info()["compiles"] <= 2, jfn.cache_info()  # torch.compile's bound
    assert [int(m.num_batches_tracked) for m in model if isinstance(m, nn.BatchNorm2d)] == [STEPS, STEPS]


def test_dynamic_batch_sizes_share_one_program():
    torch.manual_seed(2)
    model = nn.BatchNorm2d(3, momentum=None).train()
    sizes = iter([3, 5, 7, 4, 6, 5, 8, 3])
    jfn = _train(model, lambda: torch.randn(next(sizes), 3, 2, 2), steps=8, dynamic=True)
    assert jfn.cache_info()["compiles"] <= 2, jfn.cache_info()
    assert _guards(jfn) == []


def test_without_grad_the_program_updates_the_statistics_each_call():
    """model.train() under no_grad: an inference program that still updates the running
    statistics with the cumulative factor; its printed trace is what runs."""
    torch.manual_seed(3)
    model = nn.BatchNorm1d(3, momentum=None).train()
    twin = copy.deepcopy(model)
    jfn = compiler.jit(model)
    with torch.no_grad():
        for step in range(STEPS):
            x = torch.randn(5, 3, 4)
            torch.testing.assert_close(jfn(x), twin(x))
            _same_buffers(model, twin, step)
    assert jfn.cache_info()["compiles"] == 1, jfn.cache_info()
    acquired = compiler.last_report(jfn).program("forward").traces["acquired"]
    assert "batch_norm_cumulative(" in acquired and "num_batches_tracked" in acquired


def test_eval_mode_reads_the_statistics_and_updates_nothing():
    torch.manual_seed(4)
    model = nn.BatchNorm2d(3, momentum=None, track_running_stats=True)
    with torch.no_grad():  # statistics as after training, so eval mode's normalisation shows
        model.running_mean.uniform_(-1, 1)
        model.running_var.uniform_(0.5, 2)
        model.num_batches_tracked.fill_(7)
    model.eval()
    before = [b.clone() for b in model.buffers()]
    jfn = _train(model, lambda: torch.randn(4, 3, 3, 3), steps=4)
    assert all(torch.equal(b, e) for b, e in zip(model.buffers(), before))
    assert jfn.cache_info()["compiles"] == 1 and _guards(jfn) == []


def test_a_sync_batch_norm_without_a_process_group():
    """SyncBatchNorm reads the counter with `.item()`; with no process group it is F.batch_norm."""
    torch.manual_seed(5)
    model = nn.SyncBatchNorm(3, momentum=None).train()
    jfn = _train(model, lambda: torch.randn(4, 3, 2, 2), steps=5)
    assert jfn.cache_info()["compiles"] == 1 and _guards(jfn) == []


class _OwnAverage(nn.Module):
    """A user's own cumulative average: its factor's read is the user's, so it stays a guard."""

    def __init__(self):
        super().__init__()
        self.register_buffer("n", torch.zeros((), dtype=torch.long))
        self.register_buffer("mean", torch.zeros(3))

    def forward(self, x):
        self.n.add_(1)
        factor = 1.0 / float(self.n)
        self.mean.mul_(1 - factor).add_(x.mean(0).detach() * factor)
        return x - self.mean


def test_a_users_own_read_of_a_counter_is_still_a_guard():
    model, twin = _OwnAverage(), _OwnAverage()
    jfn = compiler.jit(model)
    for step in range(4):
        x = torch.randn(5, 3)
        torch.testing.assert_close(jfn(x), twin(x))
        _close(model.mean, twin.mean, f"step {step}")
    assert jfn.cache_info()["compiles"] == 4  # a new value each call: the guard fails each time
    assert any("float(" in g for g in _guards(jfn))


def test_a_branch_on_the_counter_after_a_batch_norm_is_still_a_guard():
    bn = nn.BatchNorm1d(3, momentum=None).train()

    def fn(x):
        y = bn(x)
        if bn.num_batches_tracked > 2:  # the user's branch on the buffer: a guard
            return y * 2
        return y

    twin = copy.deepcopy(bn)

    def eager(x):
        y = twin(x)
        return y * 2 if twin.num_batches_tracked > 2 else y

    jfn = compiler.jit(fn)
    with torch.no_grad():
        for step in range(5):
            x = torch.randn(4, 3)
            _close(jfn(x), eager(x), f"step {step}")
            # (a small program runs on one intra-op thread: the statistics to float32's tolerance)
            torch.testing.assert_close(dict(bn.named_buffers()), dict(twin.named_buffers()), rtol=1.3e-6, atol=1e-6)
    assert jfn.cache_info()["compiles"] == 2  # one program a side of the branch
    assert any("bool(" in g for g in _guards(jfn))
