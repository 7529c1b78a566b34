"""Parallelism as transforms applied on a device mesh (fusionlens/distributed/transform.py): with
no process group (torch's fake one, made for the while), a mesh of any size, the module even on
the meta device; and the collectives so found are those a real 2-rank run records."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from fusionlens.distributed import symbols as S
from fusionlens.distributed.staging import CompileTransform, ReportInputs
from fusionlens.distributed.transform import DDP, FSDP2, Mesh, Program, Style, TensorParallel
from fusionlens.distributed.transform import world as fake_world
from fusionlens.distributed.vocabulary import CollectiveKind, Group, ReduceOp
from fusionlens.driver import pipeline
from fusionlens.ir.trace import BoundSymbol, Trace, Value
from fusionlens.ir.vocabulary import Stage
from fusionlens.middle.programs import ProgramKind
from fusionlens.options import CompileOptions

sys.path.insert(0, str(Path(__file__).parent / "distributed"))
import transform_models  # noqa: E402

CHECKS = Path(__file__).parent / "distributed" / "transform_checks.py"


def _records(name: str, world: int = 2) -> list[list]:
    program = Program(transform_models.model(), (transform_models.example(),))
    sharded = transform_models.TRANSFORMS[name](program, Mesh((world,), ("dp",)))
    assert not dist.is_initialized()  # the fake process group is gone again
    assert all(c.group.size == world and c.group.mesh_dim == "dp" for c in sharded.collectives)
    return [[str(c.kind), c.program, c.bytes, c.group.size, c.file, c.line] for c in sharded.collectives]


@pytest.mark.distributed
@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built in")
def test_a_transform_on_a_mesh_without_ranks_records_what_two_real_ranks_record(tmp_path):
    out = tmp_path / "recorded.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "FUSIONLENS_TRANSFORM_OUT": str(out)}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                          str(CHECKS)], capture_output=True, text=True, timeout=600, env=env)
    output = run.stdout + run.stderr
    assert run.returncode == 0 and output.count("check_real_runs_record_their_collectives ok") == 2, output[-6000:]
    real = json.loads(out.read_text())
    for name in transform_models.TRANSFORMS:
        assert _records(name) == real[name], name


def test_transforms_apply_to_a_mesh_of_thousands_of_ranks_on_the_meta_device():
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024))
        x = torch.randn(8, 1024)
    mesh = Mesh((512, 8), ("dp", "tp"))
    fsdp = FSDP2("dp", units=("0", "2"))(Program(model, (x,)), mesh)
    kinds = [(c.kind, c.program) for c in fsdp.collectives]
    assert kinds.count((CollectiveKind.ALL_GATHER, "forward")) == 2  # one a unit, at its call
    assert kinds.count((CollectiveKind.REDUCE_SCATTER, "backward")) == 2
    gather = fsdp.collectives[0]
    assert gather.group.size == 512 and gather.group.mesh_dim == "dp"
    assert gather.bytes == (-(-1024 // 512) * 4096 + 4096 // 512) * 4  # the padded shards of a rank, sent
    scatter = next(c for c in fsdp.collectives if c.kind is CollectiveKind.REDUCE_SCATTER)
    assert scatter.reduce_op is ReduceOp.AVG
    tp = TensorParallel("tp", {"0": Style.COLWISE, "2": Style.ROWWISE})(Program(model, (x,), train=False), mesh)
    (reduce,) = tp.collectives
    assert (reduce.kind, reduce.program, reduce.group.size, reduce.group.mesh_dim) == (
        CollectiveKind.ALL_REDUCE, "forward", 8, "tp")
    assert reduce.bytes == 8 * 1024 * 4 and reduce.reduce_op is ReduceOp.SUM  # the partial products, summed
    assert tp.backward is None and not dist.is_initialized()


def test_ddp_buckets_follow_the_cap_on_any_mesh():
    program = Program(transform_models.model(), (transform_models.example(),))
    grads = sum(p.numel() * 4 for p in program.module.parameters())
    for world in (2, 64):
        one = DDP("dp")(program, Mesh((world,), ("dp",))).collectives
        assert [(c.kind, c.program, c.bytes, c.group.size) for c in one] == [
            (CollectiveKind.ALL_REDUCE, "backward", grads, world)]  # one bucket holds every gradient
    many = DDP("dp", bucket_cap_mb=0.001)(program, Mesh((4,), ("dp",))).collectives
    assert len(many) > 1 and sum(c.bytes for c in many) == grads


def test_ddp_applies_on_the_meta_device_as_on_real_tensors():
    """DDP on a meta module (the plan at scale's): the same buckets, at the same lines, as the
    module with values; nothing read, nothing allocated."""
    def records(program: Program, world: int) -> list[tuple]:
        return [(c.kind, c.program, c.bytes, c.group.size, c.line)
                for c in DDP("dp", bucket_cap_mb=0.001)(program, Mesh((world,), ("dp",))).collectives]
    real = Program(transform_models.model(), (transform_models.example(),))
    with torch.device("meta"):
        meta = Program(transform_models.model(), (torch.randn(6, 16, requires_grad=True),))
    assert len(records(real, 4)) > 1 and records(meta, 4) == records(real, 4)
    assert next(meta.module.parameters()).is_meta  # the caller's module is not changed
    at_scale = records(meta, 4096)
    assert at_scale and all(c[:2] == (CollectiveKind.ALL_REDUCE, "backward") and c[3] == 4096 for c in at_scale)
    assert not dist.is_initialized()


def test_a_mesh_applied_transform_runs_the_compile_hooks(monkeypatch):
    """transform(program, mesh) goes through each wrapping's CompileTransform hooks, as the
    compile does: tracing, rewrite_forward, rewrite_backward."""
    from fusionlens.distributed import ddp_overlap, fsdp, tensor_parallel

    called = set()
    hooks = ("tracing", "rewrite_forward", "rewrite_backward")

    def spying(real, hook: str):
        def spy(self, *args):
            called.add((self.name, hook))
            return real(self, *args)
        return spy
    for cls in (ddp_overlap.Synchronising, fsdp.Gathering, tensor_parallel.Parallel):
        for hook in hooks:
            monkeypatch.setattr(cls, hook, spying(getattr(cls, hook), hook))
    program = Program(transform_models.model(), (transform_models.example(),))
    for transform in transform_models.TRANSFORMS.values():
        transform(program, Mesh((2,), ("dp",)))
    assert called == {(name, hook) for name in ("ddp", "fsdp2", "tensor_parallel") for hook in hooks}, called


def test_a_mesh_dimension_the_transform_does_not_span_is_refused():
    with pytest.raises(ValueError, match="spans 'tp'"):
        DDP("tp")(Program(transform_models.model(), (transform_models.example(),)), Mesh((2,), ("dp",)))
    with pytest.raises(ValueError, match="one distinct name"):
        Mesh((2, 2), ("dp", "dp"))


def test_every_collective_symbol_says_what_it_is():
    from fusionlens.distributed import symbols
    from fusionlens.distributed.vocabulary import CollectiveSymbol, describe, is_wait
    from fusionlens.ir.pending import Phase
    from fusionlens.ir.trace import Symbol

    assert set(symbols.ISSUE) == set(CollectiveKind)  # one issue symbol a kind, printed as the kind
    for kind, sym in symbols.ISSUE.items():
        assert isinstance(sym, CollectiveSymbol) and (sym.collective.kind, sym.phase, sym.name) == (
            kind, Phase.ISSUE, str(kind)), sym
    assert is_wait(symbols.WAIT) and symbols.WAIT.phase is Phase.WAIT and symbols.WAIT.name == "wait"
    # a functional collective the user's code calls directly is a torch call, described by the op it calls
    c10d = torch.ops._c10d_functional
    direct = Symbol("torch.ops._c10d_functional.reduce_scatter_tensor", c10d.reduce_scatter_tensor)
    assert describe(direct).kind is CollectiveKind.REDUCE_SCATTER and describe(Symbol("torch.sin", torch.sin)) is None
    assert ReduceOp.of("prod") is ReduceOp.PRODUCT and ReduceOp.of(dist.ReduceOp.MAX) is ReduceOp.MAX


def test_collective_arguments_print_as_python_the_program_runs():
    from fusionlens.distributed import symbols
    from fusionlens.distributed.vocabulary import Group

    namespace = symbols.program_globals()
    for value in (Group("0", (0, 1)), Group("3", tuple(range(0, 4096, 8)), "dp"), Group("5", (3, 1, 2)),
                  ReduceOp.AVG, symbols.Grad.REDUCE_SCATTER):
        assert eval(repr(value), namespace) == value, repr(value)
    assert len(repr(Group("3", tuple(range(4096))))) < 40  # a mesh's thousands of ranks, printed short


class _LossAllReduce(CompileTransform):
    """A toy transform that rewrites the forward: the loss all-reduced over the ranks (the mean
    loss a data-parallel step logs), issued and waited for after the loss is computed."""

    name = "loss_all_reduce"

    def __init__(self, group: str):
        self.group = group

    def groups(self) -> list[str]:
        return [self.group]

    def tracing(self):
        return contextlib.nullcontext()

    def rewrite_forward(self, forward: Trace) -> Trace:
        loss = forward.output
        issued, reduced = (Value(f"{loss.name}_{s}", loss.shape, loss.dtype, loss.device) for s in ("issued", "summed"))
        ops = [*forward.bound_symbols, BoundSymbol(S.ALL_REDUCE, (loss, Group.named(self.group)), {}, [issued]),
               BoundSymbol(S.WAIT, (issued,), {}, [reduced])]
        rewritten = forward.with_(forward.stage, ops, output=reduced)
        rewritten.extra_globals.update(S.program_globals())
        return rewritten

    def rewrite_backward(self, d, inputs, constants, backward):
        return None

    def finish(self, call, constants):
        return call

    def report(self, rewritten, failed, training):
        return ReportInputs()


def test_a_transform_rewrites_the_forward_before_fusion():
    """The forward-rewrite hook runs on the optimised trace: its collective is in the trace fusion
    starts from and in the program that runs, the verifier sees its issue waited for once, and the
    result is eager's (a fake 2-rank group: the all-reduce leaves each value as it is)."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randn(8, 4)

    def step(x, y):
        return torch.nn.functional.mse_loss(model(x), y)

    with torch.no_grad(), fake_world(Mesh((2,), ("dp",))) as mesh:
        toy = _LossAllReduce(mesh.get_group("dp").group_name)
        c = pipeline.compile_program(step, (x, y), {}, CompileOptions(verify=True), transforms=[toy])
        program = c.program(ProgramKind.FORWARD)
        for stage in (Stage.OPTIMISED, Stage.FUSION, Stage.EXECUTION):
            ops = [b.sym for b in program.traces[stage].bound_symbols]
            assert ops[-2:] == [S.ALL_REDUCE, S.WAIT], (stage, ops[-3:])
        assert S.ALL_REDUCE not in [b.sym for b in c.traced.trace.bound_symbols]  # the rewrite's own
        x2, y2 = torch.randn(8, 16), torch.randn(8, 4)
        torch.testing.assert_close(c.fn(x2, y2, *c.constants), step(x2, y2), rtol=1.3e-6, atol=1e-5)
        unchanged = pipeline.compile_program(step, (x, y), {}, CompileOptions(verify=True))
    assert S.ALL_REDUCE not in [b.sym for b in unchanged.forward.traces[Stage.FUSION].bound_symbols]
