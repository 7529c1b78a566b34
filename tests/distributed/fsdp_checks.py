"""Run on 2 gloo ranks by tests/test_distributed_fsdp.py (python -m torch.distributed.run
--nproc_per_node 2 tests/distributed/fsdp_checks.py): compiler.jit of a module after FSDP2's
fully_shard (per block and at the root) against eager FSDP2 on the same model and data, on
every rank: outputs, `p.grad` (DTensors, their placements) and the parameters after each of
3 SGD steps; the all-gathers and reduce-scatters in the programs at the blocks' call lines; a
MixedPrecisionPolicy's casts in the program and its collectives' bytes."""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import compiler  # noqa: E402
import fusionlens.driver.checking  # noqa: E402  (patched by the checks that make one rank's check fail)

TOLERANCE = {torch.float32: (1e-5, 1e-6), torch.int64: (0, 0)}


class Net(torch.nn.Module):
    """Two blocks and a head whose shards are uneven on 2 ranks (3 rows: 2 and 1)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x):
        x = torch.nn.functional.gelu(self.fc1(x))  # FC1 LINE
        x = torch.tanh(self.fc2(x))  # FC2 LINE
        return self.head(x)  # HEAD LINE


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(open(__file__), 1) if f"# {marker} LINE" in text)


def _net() -> Net:
    torch.manual_seed(0)
    return Net()


def per_block(model: Net, **kw) -> Net:
    for block in (model.fc1, model.fc2, model.head):
        fully_shard(block, **kw)
    return fully_shard(model, **kw)


def at_root(model: Net, **kw) -> Net:
    return fully_shard(model, **kw)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _close(a: torch.Tensor, b: torch.Tensor, what: str, low: torch.dtype | None = None) -> None:
    """Within the tolerance of `b`'s dtype, or of `low`'s where the model computed in it (a
    MixedPrecisionPolicy's param_dtype: the project's per-dtype tolerance, driver/checking.py)."""
    rtol, atol = fusionlens.driver.checking.tolerance(low) if low is not None else TOLERANCE[b.dtype]
    torch.testing.assert_close(_local(a), _local(b), rtol=rtol, atol=atol,
                               msg=lambda m: f"rank {dist.get_rank()}: {what}: {m}")


def _stepped_alike(optimizers, compiled_model, eager_model, step: int, low: torch.dtype | None = None) -> None:
    """Each optimizer steps and clears its gradients; the parameters after the step equal eager's."""
    for opt in optimizers:
        opt.step()
        opt.zero_grad()
    for (name, a), b in zip(compiled_model.named_parameters(), eager_model.parameters()):
        _close(a, b, f"{name} after step {step}", low)


def _same_grads(compiled: Net, eager: Net, when: str, low: torch.dtype | None = None) -> None:
    for (name, a), b in zip(compiled.named_parameters(), eager.parameters()):
        assert type(a.grad) is type(b.grad), f"{name}.grad at {when}: {type(a.grad)} vs {type(b.grad)}"
        assert a.grad.placements == b.grad.placements, f"{name}.grad at {when}: {a.grad.placements}"
        assert a.grad.dtype == b.grad.dtype == a.dtype, f"{name}.grad at {when}: {a.grad.dtype} vs {b.grad.dtype}"
        _close(a.grad, b.grad, f"the gradient of {name} at {when}", low)


def train_like_eager(wrap: Callable[[Net], Net], batches: tuple[int, ...] = (5, 5, 5),
                     low: torch.dtype | None = None) -> fusionlens.driver.jit_cache.JitFunction:
    """The same training steps, eager FSDP2 and compiled: losses, gradients (DTensors) and the
    parameters after each SGD step must match (each rank trains on its own batch, of the
    step's size), within `low`'s tolerance where the model computes in `low`."""
    eager_model, compiled_model = wrap(_net()), wrap(_net())
    jfn = compiler.jit(compiled_model)
    eager_opt = torch.optim.SGD(eager_model.parameters(), lr=0.1)
    compiled_opt = torch.optim.SGD(compiled_model.parameters(), lr=0.1)
    for step, size in enumerate(batches):
        torch.manual_seed(100 + 10 * dist.get_rank() + step)
        x = torch.randn(size, 8)
        want, got = eager_model(x).square().mean(), jfn(x).square().mean()  # TRAIN LINE
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        _close(got, want, f"loss at step {step}", low)
        want.backward()
        got.backward()
        _same_grads(compiled_model, eager_model, f"step {step}", low)
        _stepped_alike((eager_opt, compiled_opt), compiled_model, eager_model, step, low)
    return jfn


def _compiled_natively(jfn) -> None:
    assert jfn.cache and not any(e.eager_fallback for e in jfn.cache.values()), \
        [d.message for d in compiler.last_report(jfn).diagnostics]


def _sent(*linears: tuple[int, int], itemsize: int = 4) -> int:
    """The bytes each rank all-gathers of these (rows, columns) Linears' weights and biases:
    each shard padded to ceil(rows / world) rows, float32 (or `itemsize` bytes an element)."""
    world = dist.get_world_size()
    return sum(itemsize * -(-rows // world) * (cols + 1) for rows, cols in linears)


def check_per_block_training():
    jfn = train_like_eager(per_block)
    _compiled_natively(jfn)
    report = compiler.last_report(jfn)
    assert report.target.file.endswith("fsdp_checks.py") and report.target.line == _line("FC1") - 1, report.target
    gathers = [c for c in report.collectives if c.op == "all_gather_into_tensor" and c.program == "forward"]
    lines = {c.line: c for c in gathers}
    for marker, shape in {"FC1": (16, 8), "FC2": (16, 16), "HEAD": (3, 16)}.items():
        c = lines[_line(marker)]
        assert (c.kind, c.program, c.group_size, c.bytes) == ("traced", "forward", dist.get_world_size(),
                                                              _sent(shape)), c
        assert c.file.endswith("fsdp_checks.py") and c.region, c
    scatters = [c for c in report.collectives if c.op == "reduce_scatter_tensor"]
    assert sorted(c.line for c in scatters) == sorted(lines), scatters
    assert all(c.program == "backward" and c.kind == "traced" for c in scatters), scatters
    assert {c.bytes for c in scatters} == {dist.get_world_size() * c.bytes for c in gathers}, (scatters, gathers)
    estimated = fusionlens.driver.reporting.with_estimates(gathers + scatters, "64x8xH100")
    assert all(c.estimate.startswith("est ") and c.estimate_ms > 0 for c in estimated), estimated
    trace = compiler.last_compiled(jfn).forward.plan.trace.python()
    assert "= all_gather_into_tensor(" in trace and "= wait(" in trace and "fsdp_wait" not in trace, trace
    # the head's reduce-scatter is issued once its gradients are made and waited for at the end
    # of the backward: fc2's and fc1's gradients overlap it
    (head,) = [c for c in scatters if c.line == _line("HEAD")]
    backward = compiler.last_compiled(jfn).program("backward").plan
    blocks = {r.id for r in backward.regions if any(b.provenance and b.provenance.line in (_line("FC1"), _line("FC2"))
                                                    and "matmul" in b.sym.name for b in r.bsyms)}
    assert len(blocks) >= 2 and blocks <= set(head.overlapped_by), (blocks, head)


def check_root_training():
    """The batch size changes: the second program serves every size (dynamic shapes)."""
    jfn = train_like_eager(at_root, batches=(5, 7, 9))
    _compiled_natively(jfn)
    assert (jfn.cache_info()["compiles"], jfn.cache_info()["dynamic"]) == (2, 1), jfn.cache_info()
    (gather,) = [c for c in compiler.last_report(jfn).collectives if c.op == "all_gather_into_tensor"]
    assert gather.bytes == _sent((16, 8), (16, 16), (3, 16)), gather


def check_inference():
    for wrap in (per_block, at_root):
        eager_model, compiled_model = wrap(_net()), wrap(_net())
        jfn = compiler.jit(compiled_model)
        with torch.no_grad():
            for step in range(2):
                x = torch.randn(4, 8) + dist.get_rank()
                _close(jfn(x), eager_model(x), f"{wrap.__name__} inference at call {step}")
        _compiled_natively(jfn)
        assert jfn.cache_info()["compiles"] == 1
        if wrap is per_block:
            _prefetched_one_block_ahead(jfn)


def _prefetched_one_block_ahead(jfn) -> None:
    """The forward program issues fc2's all-gather before fc1's matmul runs, and waits for it
    after: it overlaps fc1's compute, and the report says so."""
    plan = compiler.last_compiled(jfn).forward.plan
    order = [(b.sym.name, b.provenance.line if b.provenance else None) for r in plan.regions for b in r.bsyms]
    issue_fc2 = order.index(("all_gather_into_tensor", _line("FC2")))
    wait_fc2 = order.index(("wait", _line("FC2")))
    gathering = ("fsdp_copy_in", "all_gather_into_tensor", "wait")
    fc1_compute = [i for i, (name, line) in enumerate(order) if line == _line("FC1") and name not in gathering]
    assert issue_fc2 < max(fc1_compute) < wait_fc2, order
    (gather,) = [c for c in compiler.last_report(jfn).collectives if c.line == _line("FC2")]
    (fc1_linear,) = [r.id for r in plan.regions if any(b.provenance and b.provenance.line == _line("FC1")
                                                       and "linear" in b.sym.name for b in r.bsyms)]
    assert fc1_linear in gather.overlapped_by, (fc1_linear, gather)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)
        self.norm = torch.nn.BatchNorm1d(6)

    def forward(self, x, scale=1.0):
        return torch.relu(self.norm(self.lin(x))) * scale


class Mixed(torch.nn.Module):
    """Parameters of the root's own (embed, out: gathered where the model is called), a block
    called twice, running statistics, a keyword argument."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(4, 6)
        self.block = Block()
        self.out = torch.nn.Linear(6, 5)

    def forward(self, x, *, scale=1.0):
        h = self.block(self.embed(x), scale=scale)  # BLOCK LINE
        return self.out(self.block(h))


def _mixed() -> Mixed:
    torch.manual_seed(0)
    model = Mixed()
    fully_shard(model.block)
    return fully_shard(model)


def check_root_parameters_a_block_called_twice_and_buffers():
    eager_model, compiled_model = _mixed(), _mixed()
    jfn = compiler.jit(compiled_model)
    eager_opt = torch.optim.SGD(eager_model.parameters(), lr=0.1)
    compiled_opt = torch.optim.SGD(compiled_model.parameters(), lr=0.1)
    for step in range(3):
        torch.manual_seed(step + 10 * dist.get_rank())
        x = torch.randn(7, 4)
        want, got = eager_model(x, scale=0.5).square().mean(), jfn(x, scale=0.5).square().mean()  # CALL LINE
        _close(got, want, f"loss at step {step}")
        want.backward()
        got.backward()
        _same_grads(compiled_model, eager_model, f"step {step}")
        eager_opt.step()
        compiled_opt.step()
        eager_opt.zero_grad()
        compiled_opt.zero_grad()
        for (name, a), b in [*zip(compiled_model.named_parameters(), eager_model.parameters()),
                             *zip(compiled_model.named_buffers(), eager_model.buffers())]:
            _close(a, b, f"{name} after step {step}")
    _compiled_natively(jfn)
    gathers = [c for c in compiler.last_report(jfn).collectives if c.op == "all_gather_into_tensor"]
    lines = sorted(c.line for c in gathers if c.program == "forward")
    assert lines == sorted([_line("CALL"), _line("BLOCK")]), lines  # the block's two calls gather once
    # the root keeps its parameters (FSDP2's root does not reshard after forward); the block,
    # resharded, is gathered again in the backward, once
    assert [c.line for c in gathers if c.program == "backward"] == [_line("BLOCK")], gathers


def check_unsupported_runs_eagerly_and_says_why():
    """A MixedPrecisionPolicy reducing in float16 (FSDP2 pre- and post-divides it) runs eagerly,
    saying why, as does one reducing in a narrower dtype than the gradients are computed in;
    compiler.compile compiles as jit does."""
    policy = MixedPrecisionPolicy(param_dtype=torch.float16)
    eager_model, compiled_model = per_block(_net(), mp_policy=policy), per_block(_net(), mp_policy=policy)
    jfn = compiler.jit(compiled_model)
    x = torch.randn(4, 8)
    torch.testing.assert_close(jfn(x), eager_model(x))
    messages = [d.message for d in compiler.last_report(jfn).diagnostics]
    assert any("MixedPrecisionPolicy reducing gradients in float16" in m and "eagerly" in m for m in messages), messages
    report = compiler.compile(per_block(_net()), x)  # compiled as compiler.jit compiles it
    assert report.status == "ok" and not report.fallbacks
    assert not any("eagerly" in d.message for d in report.diagnostics), report.diagnostics
    gathers = [c.line for c in report.collectives if c.program == "forward" and c.op == "all_gather_into_tensor"]
    scatters = [c for c in report.collectives if c.op == "reduce_scatter_tensor"]
    assert gathers == [_line("FC1"), _line("FC2"), _line("HEAD")] and len(scatters) == 3, report.collectives
    # float32 gradients reduced in bfloat16 (a cotangent narrower than its value): refused too
    narrower = per_block(_net(), mp_policy=MixedPrecisionPolicy(reduce_dtype=torch.bfloat16))
    assert "reducing gradients computed in float32 in the narrower bfloat16" in \
        (fusionlens.distributed.fsdp.unsupported(narrower) or ""), fusionlens.distributed.fsdp.unsupported(narrower)
    # no gradient sync for a step: FSDP's own calls from then on, said once
    eager_model, compiled_model = per_block(_net()), per_block(_net())
    jfn = compiler.jit(compiled_model)
    jfn(x).sum().backward()
    eager_model(x).sum().backward()
    compiled_model.set_requires_gradient_sync(False)
    eager_model.set_requires_gradient_sync(False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jfn(x).sum().backward()
    assert any("set_requires_gradient_sync" in str(w.message) for w in caught), [str(w.message) for w in caught]
    eager_model(x).sum().backward()
    for model in (compiled_model, eager_model):
        model.set_requires_gradient_sync(True)
    jfn(x).sum().backward()
    eager_model(x).sum().backward()
    _same_grads(compiled_model, eager_model, "after a step without gradient sync")


BF16, FP32 = torch.bfloat16, torch.float32
POLICIES = {  # name: (policy, the dtype the loss comes out in, the dtype gradients are reduce-scattered in)
    "bf16 params, fp32 reduce": (MixedPrecisionPolicy(param_dtype=BF16, reduce_dtype=FP32), BF16, FP32),
    "and fp32 outputs": (MixedPrecisionPolicy(param_dtype=BF16, reduce_dtype=FP32, output_dtype=FP32), FP32, FP32),
    "bf16 params only": (MixedPrecisionPolicy(param_dtype=BF16), BF16, BF16),
}


def _cast_lines(jfn) -> list[tuple[int, torch.dtype]]:
    """(line, dtype) of each cast of a program input (a shard, or the call's x) in the forward trace."""
    trace = compiler.last_compiled(jfn).acquired
    inputs = {v.name for v in trace.inputs}
    return [(b.provenance.line, b.args[1]) for b in trace.bound_symbols
            if b.sym.name == "torch.Tensor.to" and b.args[0].name in inputs]


def _bytes(report, op: str, program: str) -> dict[int, int]:
    """line -> bytes of each `op` collective of `program` in the report."""
    return {c.line: c.bytes for c in report.collectives if c.op == op and c.program == program}


def check_mixed_precision_trains_like_eager_fsdp2():
    """fully_shard per layer and at the root with a MixedPrecisionPolicy, compiled natively:
    losses, the float32 sharded gradients (DTensors) and the parameters after SGD steps match
    eager FSDP2's with the same policy within bfloat16's tolerance; each unit's shards are cast
    to bfloat16 in the program (at its line) and all-gathered as bfloat16 (half of float32's
    bytes), its gradient reduce-scattered in reduce_dtype."""
    world = dist.get_world_size()
    for name, (policy, loss_dtype, reduced) in POLICIES.items():
        wrap = functools.partial(per_block, mp_policy=policy)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jfn = train_like_eager(wrap, batches=(5, 5) if name == "bf16 params, fp32 reduce" else (5,), low=BF16)
        assert not [str(w.message) for w in caught if "FusionLens" in str(w.message)], (name, caught)
        _compiled_natively(jfn)
        report = compiler.last_report(jfn)
        assert not report.fallbacks and not any("eagerly" in d.message for d in report.diagnostics), name
        shapes = {"FC1": (16, 8), "FC2": (16, 16), "HEAD": (3, 16)}
        gathers = _bytes(report, "all_gather_into_tensor", "forward")
        assert gathers == {_line(m): _sent(shape, itemsize=2) for m, shape in shapes.items()}, (name, gathers)
        again = _bytes(report, "all_gather_into_tensor", "backward")  # the resharded blocks' re-gathers
        assert again == {_line(m): _sent(shapes[m], itemsize=2) for m in ("FC2", "HEAD")}, (name, again)
        scatters = _bytes(report, "reduce_scatter_tensor", "backward")
        assert scatters == {_line(m): world * _sent(shape, itemsize=reduced.itemsize) for m, shape in shapes.items()}, \
            (name, scatters)
        casts = _cast_lines(jfn)  # the 6 shards' casts at their blocks' lines, the root's input cast
        assert sorted(casts) == sorted([(_line(m), BF16) for m in shapes for _ in range(2)]
                                       + [(_line("TRAIN"), BF16)]), (name, casts)
        out = jfn(torch.randn(5, 8))
        assert out.dtype == loss_dtype and jfn.cache_info()["compiles"] == 1, name
        out.float().square().mean().backward()
        # reduced in float32, a gradient keeps bits a bfloat16 one lacks; reduced in bfloat16, none
        grads = [p.grad.to_local() for p in jfn.sharded.module.parameters()]
        assert grads and all(g.dtype == FP32 for g in grads), name
        rounded = [bool((g != g.to(BF16).float()).any()) for g in grads]
        assert any(rounded) if reduced is FP32 else not any(rounded), (name, rounded)


def _eager_held(wrap: Callable[[Net], Net]) -> int:
    """The bytes eager FSDP2 holds for the backward after a forward: the storages of the tensors
    autograd saved, as they are once the forward returned (a resharded unit's unsharded
    parameters are saved, their storage freed: 0 bytes)."""
    model, packed = wrap(_net()), []
    x = torch.randn(5, 8)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        out = model(x)
    held = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in packed}
    out.sum().backward()
    return sum(held.values())


def _compiled_held(jfn, shards: set[str]) -> int:
    """The bytes the compiled step holds from its forward to its backward, from the report: what
    it saves but the shards (FSDP holds them anyway)."""
    return sum(s.bytes for s in compiler.last_report(jfn).training.saved if s.name not in shards)


def check_reshard_after_forward_gathers_again_in_the_backward():
    """FSDP2's default (reshard after forward, but at the root): the backward all-gathers each
    block's parameters again (issued a block ahead, waited before their first use) instead of
    saving the gathered ones; reshard_after_forward=False saves them and gathers once. Both
    train as eager FSDP2 does; what the step holds drops by the gathered parameters' bytes and
    is at most eager FSDP2's."""
    kept_wrap = lambda m: per_block(m, reshard_after_forward=False)  # noqa: E731
    resharded, kept = train_like_eager(per_block), train_like_eager(kept_wrap)
    for jfn in (resharded, kept):
        _compiled_natively(jfn)
    shards = set(fusionlens.distributed.fsdp.Sharded(per_block(_net())).names)
    # the backward reads fc2's and the head's weights (fc1's only for x's gradient: none)
    gathered = 4 * (16 * 16 + 3 * 16)
    saved = {jfn: compiler.last_report(jfn).training.saved for jfn in (resharded, kept)}
    weights = lambda jfn: [(s.line, s.shape) for s in saved[jfn] if s.shape in ([16, 16], [3, 16])]  # noqa: E731
    assert weights(resharded) == [] and sorted(weights(kept)) == [(_line("FC2"), [16, 16]), (_line("HEAD"), [3, 16])]
    assert _compiled_held(kept, shards) - _compiled_held(resharded, shards) == gathered, saved
    for jfn, wrap in ((resharded, per_block), (kept, kept_wrap)):
        assert _compiled_held(jfn, shards) <= _eager_held(wrap), (_compiled_held(jfn, shards), _eager_held(wrap))
    report = compiler.last_report(resharded)
    forward = {c.line: c for c in report.collectives if c.op == "all_gather_into_tensor" and c.program == "forward"}
    again = {c.line: c for c in report.collectives if c.op == "all_gather_into_tensor" and c.program == "backward"}
    assert sorted(again) == sorted([_line("FC2"), _line("HEAD")]), report.collectives
    assert all(c.kind == "traced" and c.bytes == forward[line].bytes for line, c in again.items()), again
    # fc2's gather is issued once the head's is waited for: the head's backward overlaps it
    backward = compiler.last_compiled(resharded).program("backward").plan
    head = {r.id for r in backward.regions if any(b.provenance and b.provenance.line == _line("HEAD")
                                                  and "matmul" in b.sym.name for b in r.bsyms)}
    assert head and head <= set(again[_line("FC2")].overlapped_by), (head, again)
    assert not [c for c in compiler.last_report(kept).collectives
                if c.op == "all_gather_into_tensor" and c.program == "backward"], "kept: gathered once"


def _failing(name: str, rank: int):
    """fusionlens.driver.checking's `name` (checked_run or check_gradients) made to fail on `rank`, after it ran."""
    real = getattr(fusionlens.driver.checking, name)
    made = [fusionlens.report.schema.Diagnostic("error", f"made to fail on rank {rank}")]

    def failing(*args, **kwargs):
        out = real(*args, **kwargs)
        return (out[0] + made, out[1]) if isinstance(out, tuple) else out + made  # checked_run's (checked, result)
    return real, failing


def check_one_rank_failing_its_check_runs_every_rank_eagerly():
    """One rank's check fails (made to): the forward check on rank 0 (rank 1 would go on to the
    gradient check, whose reduce-scatters rank 0 never joins), then the gradient check on rank 1.
    The ranks agree: every rank runs the signature eagerly (FSDP2's gathers from the shards) and
    trains as eager FSDP2 does, the others saying another rank failed; nothing hangs."""
    for name, rank in (("checked_run", 0), ("check_gradients", 1)):
        real, failing = _failing(name, rank)
        if dist.get_rank() == rank:
            setattr(fusionlens.driver.checking, name, failing)
        try:
            jfn = train_like_eager(per_block, batches=(5, 5))
        finally:
            setattr(fusionlens.driver.checking, name, real)
        assert jfn.cache and all(e.eager_fallback for e in jfn.cache.values()), (name, jfn.cache_info())
        messages = [d.message for d in compiler.last_report(jfn).diagnostics]
        assert dist.get_rank() == rank or any("another rank" in m for m in messages), (name, messages)


class Spare(Net):
    """Net with a unit the call runs only when asked (`spare`)."""

    def __init__(self):
        super().__init__()
        self.spare = torch.nn.Linear(16, 16)

    def forward(self, x, spare=False):
        x = torch.nn.functional.gelu(self.fc1(x))
        return self.head(self.spare(x) if spare else torch.tanh(self.fc2(x)))


def check_a_unit_the_call_never_runs_keeps_grad_none():
    """A unit the call skips: its parameters' .grad stays None, as eager FSDP2 leaves it (not
    zeros), so AdamW skips them (its decay and moments would move a parameter with a zero
    gradient); skipped, run, skipped: grads (None or not, values) and parameters after each step
    equal eager FSDP2's."""
    def build() -> Spare:
        torch.manual_seed(0)
        return per_block(Spare())
    eager_model, compiled_model = build(), build()
    jfn = compiler.jit(compiled_model)
    eager_opt, compiled_opt = (torch.optim.AdamW(m.parameters(), lr=0.1, weight_decay=0.1)
                               for m in (eager_model, compiled_model))
    for step, spare in enumerate((False, True, False)):
        torch.manual_seed(200 + 10 * dist.get_rank() + step)
        x = torch.randn(5, 8)
        eager_model(x, spare=spare).square().mean().backward()
        jfn(x, spare=spare).square().mean().backward()
        for (name, a), b in zip(compiled_model.named_parameters(), eager_model.parameters()):
            skipped = name.startswith("spare." if not spare else "fc2.")
            assert (a.grad is None, b.grad is None) == (skipped, skipped), (name, step, a.grad, b.grad)
            if b.grad is not None:
                assert a.grad.placements == b.grad.placements, (name, a.grad.placements)
                _close(a.grad, b.grad, f"the gradient of {name} at step {step}")
        _stepped_alike((eager_opt, compiled_opt), compiled_model, eager_model, step)
    _compiled_natively(jfn)


CHECKS = [check_per_block_training, check_root_training, check_inference, check_mixed_precision_trains_like_eager_fsdp2,
          check_root_parameters_a_block_called_twice_and_buffers, check_unsupported_runs_eagerly_and_says_why,
          check_one_rank_failing_its_check_runs_every_rank_eagerly,
          check_reshard_after_forward_gathers_again_in_the_backward, check_a_unit_the_call_never_runs_keeps_grad_none]


if __name__ == "__main__":
    from runner import run  # tests/distributed/runner.py, beside this file

    run(CHECKS)
