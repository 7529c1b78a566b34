"""The fusion partitioner: regions, their boundaries and reasons, and correctness."""

import contextlib
import glob
import os

import pytest
import torch
import torch.nn.functional as F

import compiler
from fusionlens.driver import checking
from fusionlens import executors
from fusionlens.middle.contract import BoundaryCode, Decline
from fusionlens.options import CompileOptions
from fusionlens.report.discovery import find_targets
from fusionlens.driver.targets import compile_target
from fusion_executor import TorchFusion

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.py")))


def fused(report):
    return [r for r in report.forward.regions if r.executor == "testfuser"]


def compile_fused(fn, *args):
    report = compiler.compile(fn, *args, executors=["testfuser", "torch"])
    assert not [d for d in report.diagnostics if d.severity == "error"], report.diagnostics
    return report


def example(path, name):
    return compile_target(os.path.join(ROOT, "examples", path), name, executors=["testfuser", "torch"],
                          benchmark=False)


def test_softmax_is_one_region(fuser):
    r = compile_fused(lambda x: torch.softmax(x, -1), torch.randn(8, 33))
    assert len(r.forward.regions) == 1 and r.forward.regions[0].executor == "testfuser"
    assert {"prims.amax", "prims.sum", "prims.exp", "prims.div"} <= set(r.forward.regions[0].ops)
    assert fuser.groups[0].reduction_dims == (1,)


def test_layernorm_with_residual_is_one_region(fuser):
    ln = torch.nn.LayerNorm(64)
    r = compile_fused(lambda x, y: ln(x + y), torch.randn(4, 64), torch.randn(4, 64))
    assert len(r.forward.regions) == 1
    assert "prims.var_mean" in r.forward.regions[0].ops and "prims.add" in r.forward.regions[0].ops


def test_library_call_ends_region_with_reason(fuser):
    w = torch.randn(32, 16)

    def f(x):
        return F.linear(torch.relu(x), w) * 2

    r = compile_fused(f, torch.randn(4, 16))
    kinds = [reg.executor for reg in r.forward.regions]
    assert kinds == ["testfuser", "torch", "testfuser"]
    first = r.forward.regions[0]
    assert first.boundary.reason == "library call"
    assert "linear" in first.boundary.detail
    assert first.boundary.line is not None


def test_reduction_over_another_axis_starts_new_region(fuser):
    def f(x):
        a = x.sum(-1, keepdim=True)  # rows
        return (x - a).sum(0)  # columns of the result

    r = compile_fused(f, torch.randn(6, 10))
    regions = fused(r)
    assert len(regions) == 2
    assert regions[0].boundary.reason == "reduction over another axis"


def test_unsupported_op_ends_region(fuser):
    def f(x):
        y = torch.exp(x)
        z = torch.special.log1p(y)  # no FusionLens symbol
        return z * 3

    r = compile_fused(f, torch.randn(5, 7))
    assert [x.executor for x in r.forward.regions] == ["testfuser", "torch", "testfuser"]
    assert r.forward.regions[0].boundary.reason == "unsupported op"
    assert r.fallbacks and r.fallbacks[0].op == "torch.special.log1p"


def test_no_cycle_through_library_call(fuser):
    w = torch.randn(16, 16)

    def f(x):
        a = torch.sigmoid(x)
        b = a @ w  # library call reading the first region
        return a + b  # may not join a's region: that would need b before a's region ends

    x = torch.randn(8, 16)
    r = compile_fused(f, x)
    first = next(reg for reg in r.forward.regions if "prims.sigmoid" in reg.ops)
    assert "prims.add" not in first.ops
    jf = compiler.jit(f, executors=["testfuser", "torch"])
    x2 = torch.randn(8, 16)
    assert checking.mismatch(jf(x2), f(x2)) is None


def test_independent_chains_on_one_input_merge(fuser):
    def f(x):
        return (x * 0.5) * torch.tanh(x * 0.7)  # two chains from x, joined at the end

    r = compile_fused(f, torch.randn(4, 8))
    assert len(r.forward.regions) == 1


def test_causal_mask_compare_fuses_into_softmax_region(fuser):
    r = example("attention.py", "causal_attention_example")
    assert r.status == "ok"
    softmax_region = next(reg for reg in fused(r) if "prims.exp" in reg.ops)
    assert {"prims.eq", "prims.where", "prims.amax", "prims.sum"} <= set(softmax_region.ops)
    lines = {s.line for s in softmax_region.source_lines}
    assert len(lines) >= 2  # the scores scaling, the mask and the softmax lines


@pytest.mark.parametrize("path,name,expected_fused", [
    ("softmax.py", "softmax_example", 1),
    ("norms.py", "layernorm_example", 1),
    ("norms.py", "rmsnorm_example", 1),
    ("norms.py", "residual_norm_example", 1),
    ("gpt_block.py", "gpt_block_example", 5),
])
def test_example_region_counts(fuser, path, name, expected_fused):
    r = example(path, name)
    assert r.status == "ok", r.error
    assert len(fused(r)) == expected_fused, [reg.ops for reg in fused(r)]
    for reg in r.forward.regions:
        assert reg.source_lines, reg
        assert reg.boundary is None or reg.boundary.reason in {
            "library call", "unsupported op", "reduction over another axis", "shape the executor refuses",
            "output needed elsewhere", "view or layout op", "end of the program"}


def test_gpt_block_boundaries(fuser):
    r = example("gpt_block.py", "gpt_block_example")
    reasons = [reg.boundary.reason for reg in fused(r)]
    assert reasons[:4] == ["library call"] * 4  # each fused region ends at a linear or matmul
    assert reasons[-1] == "end of the program"
    views = [reg for reg in r.forward.regions if reg.boundary and reg.boundary.reason == "view or layout op"]
    assert any("transpose" in reg.ops[0] for reg in views)


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_every_example_fused_matches_eager(fuser, path):
    with open(path) as f:
        names = [t.name for t in find_targets(f.read()) if not t.nproc]  # distributed: tests/test_launch.py
    for name in names:
        r = compile_target(path, name, executors=["testfuser", "torch"], benchmark=False)
        assert r.status == "ok", r.error
        errors = [d.message for d in r.diagnostics if d.severity == "error"]
        assert not errors, (name, errors)


def test_unavailable_executor_falls_back_and_says_why():
    r = compiler.compile(lambda x: torch.relu(x) + 1, torch.randn(3, 3), executors=["nvfuser", "torch"])
    assert all(reg.executor == "torch" for reg in r.forward.regions)
    assert any("nvfuser" in d.message and "not usable" in d.message for d in r.diagnostics)


def test_fused_region_eager_baseline_is_the_users_torch_calls(fuser):
    """A fused LayerNorm is timed against F.layer_norm, not against its prims one by one (in a
    training forward against layer_norm_with_stats: eager's native_layer_norm, which F.layer_norm
    runs, its statistics kept for the backward)."""
    from fusionlens.driver import benchmark, pipeline

    ln = torch.nn.LayerNorm(32)
    for grad, name in ((False, "torch.nn.functional.layer_norm"), (True, "layer_norm_with_stats")):
        with torch.set_grad_enabled(grad):
            c = pipeline.compile_program(lambda x: ln(x), (torch.randn(4, 32),), {},
                                         CompileOptions(executors=("testfuser", "torch")))
        (region,) = [r for r in c.forward.plan.regions if r.executor == "testfuser"]
        assert [b.sym.name for b in benchmark._source_ops(c.forward.source, region)] == [name]
    rep = compiler.compile(lambda x: ln(x), torch.randn(4, 32), executors=["testfuser", "torch"],
                           benchmark=True, repeats=3)
    assert rep.forward.regions[0].timing.eager_median_ms > 0


def test_each_fused_region_times_against_its_own_torch_ops(fuser):
    from fusionlens.driver import benchmark, pipeline

    def f(x):
        y = torch.exp(x)
        return torch.cumsum(y, 0) * y  # cumsum (no symbol) splits the fusible ops in two regions

    c = pipeline.compile_program(f, (torch.randn(5, 3),), {}, CompileOptions(executors=("testfuser", "torch")))
    first, second = [r for r in c.forward.plan.regions if r.executor == "testfuser"]
    opt = c.forward.traces["optimised"]
    assert [b.sym.name for b in benchmark._source_ops(opt, first)] == ["torch.exp"]
    assert [b.sym.name for b in benchmark._source_ops(opt, second)] == ["torch.mul"]


# --- boundary codes (fusionlens/middle/contract.py) and lowering's source-only mode ---------------------

def _lowered(fn, *args, fusers=("testfuser",)):
    """The forward program's plan of `fn` with these fusion executors."""
    from fusionlens.driver import pipeline

    options = CompileOptions(executors=tuple(fusers) + ("torch",))
    return pipeline.compile_program(fn, args, {}, options).forward.plan


_W = torch.randn(16, 16)
BOUNDARY_CASES = {  # the code of each kind of boundary, made by the region that ends first
    BoundaryCode.LIBRARY_CALL: (lambda x: torch.sigmoid(x) @ _W, (8, 16)),
    BoundaryCode.UNSUPPORTED_OP: (lambda x: torch.special.log1p(torch.exp(x)) * 2, (5, 7)),
    BoundaryCode.VIEW_OR_LAYOUT: (lambda x: torch.exp(x).t() * 2, (4, 8)),
    BoundaryCode.REDUCTION_AXIS: (lambda x: (torch.exp(x).sum(1, keepdim=True) * x).sum(0), (4, 8)),
    BoundaryCode.SHAPE_REFUSED: (lambda x, y: torch.exp(x) + y.sum(), (4, 8), (3,)),
    # two regions of one domain reduced over different dims, joined by an add: the first flows out
    BoundaryCode.OUTPUT_NEEDED: (lambda x, y: (x - x.sum(1, keepdim=True)) + (y - y.sum(0, keepdim=True)),
                                 (4, 8), (4, 8)),
    BoundaryCode.END_OF_PROGRAM: (lambda x: torch.exp(x) * 2, (4, 8)),
    BoundaryCode.COLLECTIVE: (lambda x: _all_reduced(torch.exp(x)) * 2, (4, 8)),  # on a one-rank group
}


def _all_reduced(y):
    torch.distributed.all_reduce(y)
    return y


@contextlib.contextmanager
def _one_rank_group(needed: bool):
    """A gloo process group of this process alone, while a case traces a collective."""
    if not needed:
        yield
        return
    store = torch.distributed.HashStore()
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.parametrize("code", list(BoundaryCode), ids=str)
def test_each_boundary_kind_has_its_code(fuser, code):
    fn, *shapes = BOUNDARY_CASES[code]
    if code is BoundaryCode.COLLECTIVE and not torch.distributed.is_available():
        pytest.skip("torch.distributed is not built in")
    with _one_rank_group(code is BoundaryCode.COLLECTIVE):
        plan = _lowered(fn, *(torch.randn(s) for s in shapes))
    first = plan.regions[0].boundary
    assert first.code is code and first.reason == code.reason
    for r in plan.regions:  # every boundary is typed, its words those of its code
        assert r.boundary is None or (isinstance(r.boundary.code, BoundaryCode)
                                      and r.boundary.reason == r.boundary.code.reason), r


class _Declining(TorchFusion):
    name = "declining"

    def generate(self, group, device):
        raise Decline("not this shape")


def test_a_declined_region_runs_its_prims_through_torch_with_the_reason():
    ex = _Declining()
    executors.register(ex)
    try:
        plan = _lowered(lambda x: torch.exp(x) * 2, torch.randn(4, 8), fusers=["declining"])
    finally:
        executors.unregister(ex.name)
    assert [(r.id, r.executor, r.note) for r in plan.regions] == [
        ("R0", "torch", "declining declined: not this shape"), ("R1", "torch", "declining declined: not this shape")]
    assert all(r.boundary.code is BoundaryCode.SHAPE_REFUSED for r in plan.regions)


class _SourceOnly(TorchFusion):
    """A fusion executor that can write its code but must not build a kernel."""

    name = "sourceonly"

    def generate(self, group, device):
        raise AssertionError("source-only lowering built a kernel")

    def definition_source(self, group):
        return f"# code of {group.id}: " + ", ".join(b.sym.name for b in group.bsyms)


def test_source_only_lowering_writes_the_code_of_the_regions_it_would_run(fuser):
    from fusionlens.frontend import tracer as frontend
    from fusionlens.middle import fusion, passes
    from fusionlens.executors import lowering
    from fusionlens.ir.interpret import run_ops

    def f(x, w):
        return F.linear(torch.relu(x), w).softmax(-1) * 2

    x, w = torch.randn(4, 16), torch.randn(8, 16)
    traced = frontend.trace(f, (x, w), {})
    optimised = passes.optimise(passes.decompose(traced.trace))
    ex = _SourceOnly()
    flat = fusion.prepare(optimised, [ex])
    plan = lowering.lower(flat, [ex], torch.device("cpu"), "P", source_only=True)
    ran = lowering.lower(fusion.prepare(optimised, [fuser]), [fuser], torch.device("cpu"))
    fused = [r for r in ran.regions if r.executor == "testfuser"]
    assert [r.id for r in ran.regions] == ["R0", "R1", "R2"] and len(fused) == 2
    # only the fused regions, numbered among themselves; the same ops and boundaries as ran
    assert [r.id for r in plan.regions] == ["P0", "P1"]
    assert [[b.sym.name for b in r.bsyms] for r in plan.regions] == [[b.sym.name for b in r.bsyms] for r in fused]
    assert [r.boundary for r in plan.regions] == [r.boundary for r in fused]
    for r in plan.regions:
        assert r.fn is None and r.executor == "sourceonly" and r.group.id == r.id
        assert r.generated.report_code() == ex.definition_source(r.group)
    # the execution trace runs: each region's op runs its prims through torch
    env = run_ops(plan.trace.bound_symbols, {v.name: t for v, t in zip(plan.trace.inputs, (x, w))})
    assert checking.mismatch((env[plan.trace.results()[0].name],), (f(x, w),)) is None
    assert lowering.lower(flat, [], torch.device("cpu"), "P", source_only=True).regions == []


# --- a norm's backward in two regions where no two-axis region is taken (regroup.py) ---------

@pytest.mark.parametrize("executor", ["testfuser", "nvfuser"])
def test_layer_norm_backward_is_two_regions_for_every_fuser(fuser, executor):
    """dx in one region (rows), the weight and bias gradients in one (columns) that recomputes
    dy * xhat from dy, x and the row statistics: with the test fuser and with nvFuser's
    definitions (run by tests/nvfuser_reference.py) where nvFuser takes no two-axis region (a
    single row, [1, 1, C]: every column dim is size 1, squeezed out of a definition nothing would
    be left of the column sums; tests/test_nvfuser_two_axis.py has the one region it takes
    otherwise, a batch of one [1, T, C] among them), gradients as eager's, boundaries typed."""
    from fusionlens.driver import pipeline
    from nvfuser_testing import reference_backend, registered

    def ln(x, w, b):
        return F.layer_norm(x, (6,), w, b)

    shape = (2, 40, 6) if executor == "testfuser" else (1, 1, 6)
    x, w, b = (torch.randn(s, requires_grad=True) for s in (shape, (6,), (6,)))
    with registered(reference_backend()) if executor == "nvfuser" else contextlib.nullcontext():
        c = pipeline.compile_program(ln, (x, w, b), {}, CompileOptions(executors=(executor, "torch")))
        dy = torch.randn(shape)
        got = torch.autograd.grad(c.fn(x, w, b, *c.constants), (x, w, b), dy)
    assert checking.mismatch(list(got), list(torch.autograd.grad(ln(x, w, b), (x, w, b), dy))) is None
    regions = [r for r in c.program("backward").plan.regions if r.executor == executor]
    assert len(regions) == 2, [(r.id, [s.sym.name for s in r.bsyms]) for r in regions]
    rows, columns = regions
    assert rows.group.reduction_dims == (2,) and columns.group.reduction_dims == (0, 1)
    assert [list(o.shape) for o in columns.outputs] == [[6], [6]]
    made_by_rows = {v.name for v in rows.outputs}
    assert not any(list(v.shape) == list(shape) and v.name in made_by_rows for v in columns.inputs), \
        "the column region reads a full-size value the row region wrote"
    for r in regions:
        assert r.boundary is not None and isinstance(r.boundary.code, BoundaryCode)


def test_recompute_never_reads_more_than_it_saves(fuser):
    """A value made from three full-size inputs is read back, not recomputed: recomputing it
    would read 3 tensors where writing and reading it moves 2."""
    def fn(x, y, z):
        s = x * y + z  # full-size, made in the row region from three inputs
        return (s - s.sum(1, keepdim=True)).sum(0)
    plan = _lowered(fn, *(torch.randn(4, 8) for _ in range(3)))
    rows, columns = [r for r in plan.regions if r.executor == "testfuser"]
    handed = [v.name for v in rows.outputs if list(v.shape) == [4, 8]]
    assert handed and handed == [v.name for v in columns.inputs], (rows.outputs, columns.inputs)
    assert [b.sym.name for b in columns.bsyms] == ["prims.sum"]


def test_llama_rms_norm_backward_is_one_nvfuser_region(fuser):
    """Llama's RMSNorm backward (its [rows, 1] statistics reshaped between two reductions) as one
    two-axis nvFuser definition, run by tests/nvfuser_reference.py, gradients as eager's."""
    import sys

    from fusionlens.driver import pipeline
    from nvfuser_testing import reference_backend, registered

    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from llama_block import LlamaRMSNorm

    norm = LlamaRMSNorm(6)

    def fn(x, w):
        return torch.func.functional_call(norm, {"weight": w}, (x,))

    x, w = torch.randn(2, 40, 6, requires_grad=True), torch.randn(6, requires_grad=True)
    with registered(reference_backend()):
        c = pipeline.compile_program(fn, (x, w), {}, CompileOptions(executors=("nvfuser", "torch")))
        dy = torch.randn(2, 40, 6)
        got = torch.autograd.grad(c.fn(x, w, *c.constants), (x, w), dy)
    assert checking.mismatch(list(got), list(torch.autograd.grad(fn(x, w), (x, w), dy))) is None
    regions = c.program("backward").plan.regions
    assert [r.executor for r in regions] == ["nvfuser"], [(r.id, r.executor, r.note) for r in regions]
    assert regions[0].group.reduction_dims == (2,) and regions[0].group.column_dims == (0, 1)


# --- a norm's backward as one two-axis region (regroup.py `merge_columns`) -------------------

@pytest.fixture
def column_fuser(fuser, monkeypatch):
    """The test fuser, taking two-axis regions (row reductions and column sums of the same rows)."""
    monkeypatch.setattr(fuser, "takes_columns", lambda domain, rdims, cdims, bsyms: None)
    return fuser


def test_layer_norm_backward_is_one_two_axis_region(column_fuser):
    """dx (rows) and the weight and bias gradients (columns) in one region where the executor
    takes one: nothing written between them, the verifier's contract held, gradients as eager's."""
    from fusionlens.driver import pipeline

    def ln(x, w, b):
        return F.layer_norm(x, (6,), w, b)

    x, w, b = (torch.randn(s, requires_grad=True) for s in ((2, 40, 6), (6,), (6,)))
    c = pipeline.compile_program(ln, (x, w, b), {}, CompileOptions(executors=("testfuser", "torch")))
    dy = torch.randn(2, 40, 6)
    got = torch.autograd.grad(c.fn(x, w, b, *c.constants), (x, w, b), dy)
    assert checking.mismatch(list(got), list(torch.autograd.grad(ln(x, w, b), (x, w, b), dy))) is None
    (region,) = [r for r in c.program("backward").plan.regions if r.executor == "testfuser"]
    assert region.group.reduction_dims == (2,) and region.group.column_dims == (0, 1)
    assert region.group.kind == "two-axis reduction" and region.group.column_shape == (6,)
    assert sorted(list(o.shape) for o in region.outputs) == [[2, 40, 6], [6], [6]]
    assert region.boundary is not None and region.boundary.code is not BoundaryCode.REDUCTION_AXIS


def test_two_axis_region_only_where_column_sums_are_outputs(column_fuser):
    """A row reduction reading a column sum needs all rows first: two regions, the column sum
    handed over; a column sum of a row region's value (no row op reading it) joins it."""
    def reads_column(x):
        return (x * x.sum(0)).sum(1)

    def column_back_to_rows(x):  # the column region itself brings its sum back to the rows
        return x - x.sum(0), torch.exp(x).sum(1)

    def columns_of_rows(x):
        s = torch.exp(x) - torch.exp(x).sum(1, keepdim=True)
        return s.sum(0), s.amax(1)

    x = torch.randn(4, 8)
    apart = [r for r in _lowered(reads_column, x).regions if r.executor == "testfuser"]
    assert len(apart) == 2 and not any(r.group.column_dims for r in apart), [r.group for r in apart]
    back = [r for r in _lowered(column_back_to_rows, x).regions if r.executor == "testfuser"]
    assert len(back) == 2 and not any(r.group.column_dims for r in back), [r.group for r in back]
    from fusionlens.ir.interpret import run_ops

    plan = _lowered(columns_of_rows, x)
    (one,) = [r for r in plan.regions if r.executor == "testfuser"]
    assert one.group.column_dims == (0,) and one.group.reduction_dims == (1,)
    env = run_ops(plan.trace.bound_symbols, {plan.trace.inputs[0].name: x})
    got = [env[v.name] for v in plan.trace.results()]
    assert checking.mismatch(got, list(columns_of_rows(x))) is None


def test_no_two_axis_region_for_an_executor_that_does_not_take_one(fuser):
    """The test fuser as it is (base.FusionExecutor.takes_columns refuses): two regions."""
    def columns_of_rows(x):
        s = torch.exp(x) - torch.exp(x).sum(1, keepdim=True)
        return s.sum(0), s.amax(1)

    regions = [r for r in _lowered(columns_of_rows, torch.randn(4, 8)).regions if r.executor == "testfuser"]
    assert len(regions) == 2 and not any(r.group.column_dims for r in regions)


def test_verifier_holds_the_two_axis_contract(column_fuser):
    """verify_group accepts the partitioner's two-axis group and rejects one whose column sum is
    brought back to the rows or read beside the rows' values (column values are outputs only)."""
    import dataclasses

    from fusion_groups import partitioned_group_from_fn
    from fusionlens.ir.trace import BoundSymbol, Value
    from fusionlens.middle.verify import VerifyError, verify_group
    from fusionlens.ops import prims

    def fn(x):
        return (x - x.sum(1, keepdim=True)).exp().sum(1), x.exp().sum(0)

    x = torch.randn(4, 8)
    group, inputs, order = partitioned_group_from_fn(fn, x, executor=column_fuser)
    assert group.column_dims == (0,) and group.reduction_dims == (1,)
    verify_group(group)
    got = TorchFusion().generate(group, None).fn(*inputs)
    assert checking.mismatch([got[i] for i in order], list(fn(x))) is None
    (col,) = [o for o in group.outputs if list(o.shape) == [8]]
    back = Value("t_back", (4, 8), col.dtype, col.device)
    wrong = BoundSymbol(prims.broadcast_in_dim, (col, (4, 8), (1,)), {}, [back], None, group.bsyms[-1].provenance)
    with pytest.raises(VerifyError, match="column"):
        verify_group(dataclasses.replace(group, bsyms=group.bsyms + [wrong], outputs=group.outputs + [back]))
