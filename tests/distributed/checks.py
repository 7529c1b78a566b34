"""Run on 2 gloo ranks by tests/test_distributed.py (python -m torch.distributed.run
--nproc_per_node 2 tests/distributed/checks.py): each check compares compiler.jit under a
wrapping with eager under the same wrapping, on every rank, and raises where they differ."""

from __future__ import annotations

import contextlib
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import compiler  # noqa: E402
import fusionlens.driver.checking  # noqa: E402
from fusionlens.ir.trace import OpTag  # noqa: E402
from fusionlens.ir.vocabulary import Stage  # noqa: E402


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def _close(a, b, what):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m: f"rank {dist.get_rank()}: {what}: {m}")


def _train_like_eager(wrap, steps: int = 3) -> fusionlens.driver.jit_cache.JitFunction:
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


def _param_bytes() -> int:
    return sum(p.numel() * p.element_size() for p in _mlp().parameters())


def check_ddp():
    """DDP's gradient all-reduces, issued by the compiled backward, as symbols of its program."""
    jfn = _train_like_eager(DDP)
    assert not jfn.cache_info()["signatures"] == [] and not any(e.eager_fallback for e in jfn.cache.values()), \
        "DDP's module runs compiled"
    report = compiler.last_report(jfn)
    assert not [c for c in report.collectives if c.kind == "ddp-bucket"], "the reducer all-reduces nothing"
    reduces = [c for c in report.collectives if c.program == "backward"]
    assert reduces and all((c.op, c.kind, c.group_size) == ("all_reduce", "traced", 2) and c.region
                           for c in reduces), reduces
    assert sum(c.bytes for c in reduces) == _param_bytes(), reduces
    estimated = fusionlens.driver.reporting.with_estimates(list(reduces), "64x8xH100")
    assert all(c.estimate.startswith("est ") and "on 64x8xH100" in c.estimate and c.estimate_ms > 0 for c in estimated)
    # compiler.compile of the wrapper: the same program, the same all-reduces in its report
    compiled = compiler.compile(DDP(_mlp()), torch.randn(5, 8))
    assert compiled.status == "ok" and [(c.op, c.bytes) for c in compiled.collectives if c.program == "backward"] == \
        [(c.op, c.bytes) for c in reduces], compiled.collectives


def check_ddp_all_reduces_overlap_the_backward():
    """With buckets small enough for two, the first bucket's all-reduce is issued before the
    backward program's last region and waited for after it (regions overlap it); the last one's
    overlap is what follows its issue."""
    jfn = _train_like_eager(lambda m: DDP(m, bucket_cap_mb=400 / 2**20))  # fc2 + fc1.weight, then fc1.bias
    program = compiler.last_compiled(jfn).program("backward")
    ids = [r.id for r in program.plan.regions]
    reduces = [c for c in compiler.last_report(jfn).collectives if c.program == "backward"]
    assert len(reduces) == 2 and sum(c.bytes for c in reduces) == _param_bytes(), reduces
    compute = _kinds(program)[1]
    first, last = reduces
    assert ids.index(first.region) < ids.index(compute[-1]), (first, ids)
    assert first.overlapped_by and compute[-1] in first.overlapped_by, first
    assert all(ids.index(a) < ids.index(b) for a, b in zip(first.overlapped_by, first.overlapped_by[1:])), first
    assert ids.index(first.region) < ids.index(last.region), reduces
    python = program.plan.trace.python()
    assert python.count("= all_reduce(") == 2 and python.count("= wait(") == 2, python
    _ran_in_order()


def _kinds(program) -> tuple[list[str], list[str], list[str]]:
    """(its all-reduce regions, its compute regions, its wait regions), in program order."""
    def named(*parts: str) -> list[str]:
        return [r.id for r in program.plan.regions if any(p in b.sym.name for b in r.bsyms for p in parts)]
    talk = {r.id for r in program.plan.regions if any(OpTag.COLLECTIVE in b.sym.tags for b in r.bsyms)}
    talk |= set(named("ddp_bucket"))
    return named("all_reduce"), [r.id for r in program.plan.regions if r.id not in talk], named("wait")


def _ran_in_order() -> None:
    """A profiled training step, each region in a profiler range: the first bucket's all-reduce
    started before the backward's last compute region, which started before the first wait."""
    jfn = compiler.jit(DDP(_mlp(), bucket_cap_mb=400 / 2**20), options=compiler.CompileOptions(profile=True))
    jfn(torch.randn(5, 8)).sum().backward()  # compiles
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        jfn(torch.randn(5, 8)).sum().backward()
    reduces, compute, waits = _kinds(compiler.last_compiled(jfn).program("backward"))
    started = {e.name.split(" ")[0]: e.time_range.start for e in prof.events() if e.name.startswith("B")}
    times = [started[r] for r in (reduces[0], compute[-1], waits[0])]
    assert times == sorted(times) and len(set(times)) == 3, (reduces, compute, waits, times)


def check_ddp_no_sync_accumulates_like_eager():
    """Two backwards under `no_sync()` (local gradients, accumulated), then one that all-reduces
    what accumulated, then an optimizer step: as eager DDP."""
    eager_model, compiled_model = DDP(_mlp(), bucket_cap_mb=400 / 2**20), DDP(_mlp(), bucket_cap_mb=400 / 2**20)
    jfn = compiler.jit(compiled_model)
    eager_opt = torch.optim.SGD(eager_model.parameters(), lr=0.1)
    compiled_opt = torch.optim.SGD(compiled_model.parameters(), lr=0.1)
    for step in range(2):
        for micro in range(3):
            torch.manual_seed(200 + 10 * dist.get_rank() + 3 * step + micro)
            x = torch.randn(5, 8)
            with eager_model.no_sync() if micro < 2 else contextlib.nullcontext():
                eager_model(x).square().mean().backward()
            with compiled_model.no_sync() if micro < 2 else contextlib.nullcontext():
                jfn(x).square().mean().backward()
            for (name, a), b in zip(compiled_model.named_parameters(), eager_model.parameters()):
                _close(a.grad, b.grad, f"the gradient of {name} at step {step}, micro-batch {micro}")
        eager_opt.step()
        compiled_opt.step()
        eager_opt.zero_grad()
        compiled_opt.zero_grad()
        for (name, a), b in zip(compiled_model.named_parameters(), eager_model.parameters()):
            _close(a, b, f"{name} after step {step}")
    assert not any(e.eager_fallback for e in jfn.cache.values())


def check_ddp_ranks_that_disagree_on_the_check_still_meet():
    """Rank 0's compile fails its check (made to here): the ranks agree on it (api.compile_checked),
    so the signature runs eagerly on both, rank 1 saying why; each eager backward all-reduces the
    same buckets in the same order (not DDP's reducer's), so the ranks meet and train as eager DDP
    does (as they would if one ran the program: ddp_overlap.Synced.after_eager_backward)."""
    real = fusionlens.driver.checking.checked_run

    def failing(*args, **kwargs):
        checked, result = real(*args, **kwargs)
        return [fusionlens.report.schema.Diagnostic("error", "made to fail on rank 0")] + checked, result
    if dist.get_rank() == 0:
        fusionlens.driver.checking.checked_run = failing
    try:
        jfn = _train_like_eager(lambda m: DDP(m, bucket_cap_mb=400 / 2**20))
    finally:
        fusionlens.driver.checking.checked_run = real
    assert jfn.last.eager_fallback and jfn.last.synced is not None
    messages = [d.message for d in compiler.last_report(jfn).diagnostics]
    assert dist.get_rank() == 0 or any("another rank" in m for m in messages), messages


def check_ddp_reducer_path_where_not_mirrored():
    """A DDP configuration the compiled backward does not mirror (gradient_as_bucket_view): DDP's
    reducer all-reduces, as before, and the report lists its buckets."""
    jfn = _train_like_eager(lambda m: DDP(m, gradient_as_bucket_view=True))
    report = compiler.last_report(jfn)
    buckets = [c for c in report.collectives if c.kind == "ddp-bucket"]
    assert buckets and sum(c.bytes for c in buckets) == _param_bytes() and buckets[0].group_size == 2, buckets
    assert not [c for c in report.collectives if c.program == "backward" and c.kind == "traced"], report.collectives
    assert any("gradient_as_bucket_view" in d.message and "no overlap" in d.message for d in report.diagnostics)


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
    assert "= all_reduce(" in trace and "= wait(" in trace and f"checks.py:{line}" in trace, trace
    assert not jfn.last.eager_fallback
    (listed,) = compiler.last_report(jfn).collectives
    assert (listed.op, listed.kind, listed.bytes, listed.group_size, listed.line) == ("all_reduce", "traced", 16, 2,
                                                                                      line), listed
    assert listed.region and listed.file.endswith("checks.py")


def _every_kind(x):
    """Each torch.distributed collective FusionLens records, on values the others made."""
    world = dist.get_world_size()
    y = x * 2
    dist.broadcast(y, src=world - 1)
    z = x + 1
    dist.reduce(z, dst=0, op=dist.ReduceOp.MAX)
    gathered = torch.empty(world * 4, dtype=x.dtype)
    dist.all_gather_into_tensor(gathered, y + z)
    scattered = torch.empty(8 // world, dtype=x.dtype)
    dist.reduce_scatter_tensor(scattered, gathered[:8] * 3)
    exchanged = torch.empty(4, dtype=x.dtype)
    dist.all_to_all_single(exchanged, x.exp())
    return gathered.sum() + scattered.sin().sum() + exchanged.cos().sum() + z[0] * (dist.get_rank() == 0)


def check_user_collectives_of_every_kind():
    """broadcast, reduce, all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single: each
    recorded as its kind's issue symbol and the one wait (distributed/symbols.py), the compiled
    result eager's on every rank, each listed with the bytes its rank sends."""
    jfn = compiler.jit(_every_kind)
    for step in range(3):
        x = torch.arange(4.0) + 10 * dist.get_rank() + step
        _close(jfn(x), _every_kind(x), f"every kind at call {step}")
    assert not jfn.last.eager_fallback and jfn.cache_info()["compiles"] == 1, jfn.cache_info()
    report = compiler.last_report(jfn)
    assert not report.fallbacks, report.fallbacks  # recording a collective records nothing else
    listed = [(c.op, c.bytes, c.group_size) for c in report.collectives]
    assert listed == [("broadcast", 16, 2), ("reduce", 16, 2), ("all_gather_into_tensor", 16, 2),
                      ("reduce_scatter_tensor", 32, 2), ("all_to_all_single", 16, 2)], listed
    ops = [b.sym.name for b in compiler.last_compiled(jfn).forward.traces[Stage.OPTIMISED].bound_symbols]
    assert [o for o in ops if o in {c[0] for c in listed} | {"wait"}] == [
        "broadcast", "wait", "reduce", "wait", "all_gather_into_tensor", "wait", "reduce_scatter_tensor", "wait",
        "all_to_all_single", "wait"], ops


def check_user_collectives_agree_when_one_rank_fails():
    """Rank 1's check of a function calling dist.all_reduce fails (made to): every rank runs it
    eagerly (a rank running the program and one running eager both meet in the same all_reduce
    here, but need not in general), the others saying another rank failed; the results stay
    eager's, and the next call is a cache hit, eager."""
    real = fusionlens.driver.checking.checked_run

    def failing(*args, **kwargs):
        checked, result = real(*args, **kwargs)
        return checked + [fusionlens.report.schema.Diagnostic("error", "made to fail on rank 1")], result
    jfn = compiler.jit(_reduced)
    if dist.get_rank() == 1:
        fusionlens.driver.checking.checked_run = failing
    try:
        for step in range(2):
            x = torch.full((4,), float(dist.get_rank() + 1 + step))
            _close(jfn(x), _reduced(x), f"the result at call {step}")
    finally:
        fusionlens.driver.checking.checked_run = real
    assert [e.eager_fallback for e in jfn.cache.values()] == [True] and jfn.compiles == 1, jfn.cache_info()
    messages = [d.message for d in compiler.last_report(jfn).diagnostics]
    assert dist.get_rank() == 1 or any("another rank" in m and "eagerly on every rank" in m for m in messages), \
        messages


def _in_flight(x):
    y = funcol.all_reduce(x * 2, "sum", dist.group.WORLD)  # FUNCOL LINE
    z = torch.exp(x) * 3  # IN FLIGHT LINE
    g = funcol.all_gather_tensor(x.view(2, 2) + 1, 1, dist.group.WORLD)  # GATHER LINE
    r = funcol.reduce_scatter_tensor(g * 2, "sum", 1, dist.group.WORLD)  # SCATTER LINE
    return y.sin() + z, r  # USE LINE


def check_functional_collectives_wait_at_first_use():
    """funcol's all_reduce, all_gather_tensor and reduce_scatter_tensor traced as the collectives
    (at their lines, the bytes each rank sends), each waited for (`wait`) right
    before the first op that reads its result, as its AsyncCollectiveTensor waits: the regions
    between them overlap it, and the report says which."""
    line = {m: next(i for i, text in enumerate(open(__file__), 1) if f"# {m} LINE" in text)
            for m in ("FUNCOL", "IN FLIGHT", "GATHER", "SCATTER", "USE")}
    jfn = compiler.jit(_in_flight)
    for step in range(3):
        x = torch.arange(4.0) * (dist.get_rank() + 1 + step)
        for got, want, what in zip(jfn(x), _in_flight(x), ("the sum", "the scatter")):
            _close(got, want, f"{what} at call {step}")
    assert not jfn.last.eager_fallback and jfn.cache_info()["compiles"] == 1, jfn.cache_info()
    report = compiler.last_report(jfn)
    listed = [(c.op, c.kind, c.line, c.bytes, c.group_size) for c in report.collectives]
    assert listed == [("all_reduce", "traced", line["FUNCOL"], 16, 2),
                      ("all_gather_into_tensor", "traced", line["GATHER"], 16, 2),
                      ("reduce_scatter_tensor", "traced", line["SCATTER"], 32, 2)], listed  # [4, 2] after the chunks
    plan = compiler.last_compiled(jfn).forward.plan
    order = [(b.sym.name, b.provenance.line if b.provenance else None) for r in plan.regions for b in r.bsyms]
    waits = [at for name, at in order if name == "wait"]
    # the gather's (its chunks read it), the sum's (its sin), the scatter's (returned: at the end, its own line)
    assert waits == [line["GATHER"], line["USE"], line["SCATTER"]], order
    exp = {r.id for r in plan.regions if any(b.provenance and b.provenance.line == line["IN FLIGHT"] for b in r.bsyms)}
    summed, gathered, _ = report.collectives
    assert exp and exp <= set(summed.overlapped_by) and not gathered.overlapped_by, report.collectives


def _reduced_in_place(w, v):
    t = w * 2
    dist.all_reduce(t)  # GRAD LINE
    return (t * v).sum()


def _exchanged(w, v):
    out = torch.empty(4)
    dist.all_to_all_single(out, w * 2)  # GRAD LINE
    return (out * v).sum()


def _functional_reduced(w, v):
    return (funcol.all_reduce(w * 2, "sum", dist.group.WORLD) * v).sum()  # GRAD LINE


def check_a_gradient_through_a_user_collective_is_eagers():
    """A parameter reaching the loss only through a collective of the user's code: eager's autograd
    passes the gradient through an in-place dist.all_reduce as if it were not there (it has no
    autograd kernel), none through dist.all_to_all_single into a fresh output (w.grad None), and
    funcol.all_reduce's adjoint all-reduce. FusionLens gives none of these (it gave zeros):
    training runs eagerly, saying so at the collective's line; .grad None or values as eager's."""
    lines = [i for i, text in enumerate(open(__file__), 1) if "# GRAD LINE" in text]
    for fn, line in zip((_reduced_in_place, _exchanged, _functional_reduced), lines):
        torch.manual_seed(300 + dist.get_rank())
        w, v = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
        cw, cv = w.detach().clone().requires_grad_(), v.detach().clone().requires_grad_()
        jfn = compiler.jit(fn)
        fn(w, v).backward()
        jfn(cw, cv).backward()
        for name, got, want in (("w", cw.grad, w.grad), ("v", cv.grad, v.grad)):
            assert (got is None) == (want is None), (fn.__name__, name, got, want)
            if want is not None:
                _close(got, want, f"{fn.__name__}: the gradient of {name}")
        notes = [d for d in compiler.last_report(jfn).diagnostics if d.code == "training-eager"]
        assert any(d.line == line and "collective of the user's code" in d.message for d in notes), \
            (fn.__name__, [(d.line, d.message) for d in compiler.last_report(jfn).diagnostics])


CHECKS = [check_ddp, check_ddp_all_reduces_overlap_the_backward, check_ddp_no_sync_accumulates_like_eager,
          check_ddp_ranks_that_disagree_on_the_check_still_meet, check_ddp_reducer_path_where_not_mirrored,
          check_user_collectives, check_user_collectives_of_every_kind,
          check_user_collectives_agree_when_one_rank_fails,
          check_functional_collectives_wait_at_first_use,
          check_a_gradient_through_a_user_collective_is_eagers]  # FSDP2: fsdp_checks.py


if __name__ == "__main__":
    from runner import run  # tests/distributed/runner.py, beside this file

    run(CHECKS)
