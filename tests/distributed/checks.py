"""Run on 2 gloo ranks by tests/test_distributed.py (python -m torch.distributed.run
--nproc_per_node 2 tests/distributed/checks.py): each check compares compiler.jit under a
wrapping with eager under the same wrapping, on every rank, and raises where they differ."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import compiler  # noqa: E402


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def _close(a, b, what):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m: f"rank {dist.get_rank()}: {what}: {m}")


def _train_like_eager(wrap, steps: int = 3) -> compiler.jit_cache.JitFunction:
    """The same training steps, eager and compiled, under `wrap`: losses, gradients and the
    parameters after each optimizer step must match (each rank trains on its own batch)."""
    eager_model, compiled_model = wrap(_mlp()), wrap(_mlp())
    jfn = compiler.jit(compiled_model)
    eager_opt = torch.optim.SGD(eager_model.parameters(), lr=0.1)
    compiled_opt = torch.optim.SGD(compiled_model.parameters(), lr=0.1)
    for step in range(steps):
        torch.manual_seed(100 + 10 * dist.get_rank() + step)
        x = torch.randn(5, 8)
        want, got = eager_model(x).square().mean(), jfn(x).square().mean()
        _close(got, want, f"loss at step {step}")
        want.backward()
        got.backward()
        for (name, a), b in zip(compiled_model.named_parameters(), eager_model.parameters()):
            _close(a.grad, b.grad, f"the gradient of {name} at step {step}")
        eager_opt.step()
        compiled_opt.step()
        eager_opt.zero_grad()
        compiled_opt.zero_grad()
        for (name, a), b in zip(compiled_model.named_parameters(), eager_model.parameters()):
            _close(a, b, f"{name} after step {step}")
    return jfn


def check_ddp():
    jfn = _train_like_eager(DDP)
    assert not jfn.cache_info()["signatures"] == [] and not any(e.eager_fallback for e in jfn.cache.values()), \
        "DDP's module runs compiled"
    buckets = [c for c in compiler.last_report(jfn).collectives if c.kind == "ddp-bucket"]
    params = sum(p.numel() * p.element_size() for p in _mlp().parameters())
    assert buckets and sum(c.bytes for c in buckets) == params and buckets[0].group_size == 2, buckets
    estimated = compiler.reporting.with_estimates(list(buckets), "64x8xH100")
    assert all(c.estimate.startswith("est ") and "on 64x8xH100" in c.estimate and c.estimate_ms > 0 for c in estimated)


def check_fsdp2_runs_eagerly_and_says_why():
    def shard(model):
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        return fully_shard(model)
    jfn = _train_like_eager(shard)
    messages = [d.message for d in compiler.last_report(jfn).diagnostics]
    assert any("FSDP2" in m and "eagerly" in m for m in messages), messages


def _reduced(x):
    y = x * 2
    dist.all_reduce(y)  # COLLECTIVE LINE
    return y.sin()


def _functional(x):
    return funcol.all_reduce(x * 2, "sum", dist.group.WORLD).sin()


def _gathered_into_a_list(x):
    out = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(out, x * 2)  # REFUSED LINE
    return torch.stack(out).sum(0)


def check_user_collectives():
    line = next(i for i, text in enumerate(open(__file__), 1) if "# COLLECTIVE LINE" in text)
    for fn in (_reduced, _functional, _gathered_into_a_list):
        jfn = compiler.jit(fn)
        for step in range(3):
            x = torch.full((4,), float(dist.get_rank() + 1 + step))
            _close(jfn(x), fn(x), f"{fn.__name__} at call {step}")
    report = compiler.last_report(jfn)
    assert any("all_gather" in d.message and d.line is not None for d in report.diagnostics), report.diagnostics
    jfn = compiler.jit(_reduced)
    jfn(torch.ones(4))
    trace = compiler.last_compiled(jfn).forward.plan.trace.python()
    assert "dist_all_reduce(tensor=" in trace and f"checks.py:{line}" in trace, trace
    assert not jfn.last.eager_fallback
    (listed,) = compiler.last_report(jfn).collectives
    assert (listed.op, listed.kind, listed.bytes, listed.group_size, listed.line) == ("all_reduce", "traced", 16, 2,
                                                                                      line), listed
    assert listed.region and listed.file.endswith("checks.py")


CHECKS = [check_ddp, check_user_collectives, check_fsdp2_runs_eagerly_and_says_why]


if __name__ == "__main__":
    dist.init_process_group("gloo")
    try:
        for check in CHECKS:
            check()
            print(f"rank {dist.get_rank()}: {check.__name__} ok", flush=True)
    finally:
        dist.destroy_process_group()
