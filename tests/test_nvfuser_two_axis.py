"""A norm's backward as one nvFuser definition: row reductions (dx) and column sums (the weight
and bias gradients) over one [rows, columns] domain, a two-axis region (docs/kernels.md), which
nvFuser's inner-outer persistent scheduler runs as one fusion.

- `support.takes_columns`: where the executor takes a two-axis region, and why not elsewhere;
- LayerNorm and RMSNorm backward (with and without weight and bias, fp32 and bf16) as
  FusionGroups: one definition, the scheduler's compile-time conditions held
  (nvfuser_testing.inner_outer_problem), run on fresh inputs against eager;
- the same norms trained through jit and compile with executors=("nvfuser", "torch"):
  outputs and every gradient against eager, the backward's norm one nvFuser region; rows of
  two dims; dynamic shapes (one definition for every size);
- a GPT training step (examples/train_gpt.py): each LayerNorm backward one nvFuser region,
  where without two-axis regions it was two;
- the repro script of a two-axis region runs its one definition without FusionLens.

Definitions run on tests/nvfuser_reference.py (and the real package where it runs).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import fusionlens
from fusionlens.driver import checking, pipeline
from fusionlens.driver.jit_cache import _last_entry
from fusionlens.executors.base import FusionExecutor
from fusionlens.executors.nvfuser import NvFuserExecutor
from fusionlens.executors.nvfuser.support import takes_columns
from fusionlens.ir.trace import NameGen, TraceContext, Value, tracing
from fusionlens.ops import prims
from fusionlens.options import CompileOptions

from fusion_groups import layer_norm_backward, partitioned_group_from_fn
import nvfuser_reference as ref
from nvfuser_testing import (  # noqa: F401 - runner is a fixture
    built_definitions, f32, inner_outer_problem, reference_backend, registered, runner)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DTYPES = [pytest.param(torch.float32, id="f32"), pytest.param(torch.bfloat16, id="bf16")]


# --- where the executor takes a two-axis region --------------------------------------------------

def _sums(domain, *dims_list, dtype=torch.float32):
    """Prims summing one [domain] input over each of `dims_list`."""
    ctx = TraceContext(NameGen("t"))
    x = Value("x", domain, dtype, torch.device("cpu"), "input")
    with tracing(ctx):
        for dims in dims_list:
            prims.sum(x, dims)
    return ctx.bound_symbols


def test_takes_columns_where_the_inner_outer_scheduler_takes_one_fusion():
    """Rows over the innermost dims and columns over the others, static or symbolic sizes: one
    definition; a size-1 dim (a broadcast dim in the definition), rows over other dims, or a
    column reduction that is no float sum: why not, in words."""
    import sympy

    s0 = sympy.Symbol("s0", positive=True, integer=True)
    assert takes_columns((8, 40, 6), (2,), (0, 1), _sums((8, 40, 6), (2,), (0, 1))) is None
    assert takes_columns((s0, 6), (1,), (0,), []) is None  # extents are symbolic in a definition anyway
    # a batch of one: its size-1 dims squeezed out of the definition (squeeze.py)
    assert takes_columns((1, 40, 6), (2,), (0, 1), _sums((1, 40, 6), (2,), (0, 1))) is None
    assert takes_columns((1, 1, 7, 6), (3,), (0, 1, 2), _sums((1, 1, 7, 6), (3,), (0, 1, 2))) is None
    assert "every column dim" in takes_columns((1, 6), (1,), (0,), _sums((1, 6), (1,), (0,)))
    assert "every row dim" in takes_columns((8, 1), (1,), (0,), _sums((8, 1), (1,), (0,)))
    assert "cannot be told" in takes_columns((1, 40, 6), (2,), (0, 1), _sums((1, 6), (1,)))  # a [1, 6] of no known dims
    assert "innermost" in takes_columns((4, 6, 8), (0, 2), (1,), [])
    ctx = TraceContext(NameGen("t"))
    x = Value("x", (4, 8), torch.float32, torch.device("cpu"), "input")
    with tracing(ctx):
        prims.amax(x, (0,))
    assert "float sums" in takes_columns((4, 8), (1,), (0,), ctx.bound_symbols)
    assert "float sums" in takes_columns((4, 8), (1,), (0,), _sums((4, 8), (0,), dtype=torch.int64))
    # and the executor asks it: the base executor's refusal is not nvFuser's any more
    assert NvFuserExecutor().takes_columns((8, 6), (1,), (0,), []) is None
    assert FusionExecutor.takes_columns(NvFuserExecutor(), (8, 6), (1,), (0,), []) is not None


def test_inner_outer_check_can_fail():
    """The test's restatement of nvFuser's compile-time check finds what it would refuse, of prims
    and of a definition built on the reference: a reduction of a broadcast dim, unless squeezed."""
    assert inner_outer_problem(_sums((4, 8), (1,), (0,)), (4, 8)) is None
    for squeezed in (False, True):
        with ref.FusionDefinition() as fd:
            x = fd.define_tensor(shape=[1, -1, -1], contiguity=[None, True, True], dtype=ref.DataType.Float)
            x, (rows, columns) = (fd.ops.squeeze(x, [0]), ([1], [0])) if squeezed else (x, ([2], [0, 1]))
            fd.add_output(fd.ops.sum(x, rows))
            fd.add_output(fd.ops.sum(x, columns))
        assert (inner_outer_problem(fd) is None) if squeezed else "broadcast dims" in inner_outer_problem(fd)
    assert "broadcast" in inner_outer_problem(_sums((4, 1, 8), (2,), (0, 1)), (4, 1, 8))
    assert "neither" in inner_outer_problem(_sums((4, 6, 8), (2,), (1,)), (4, 6, 8))
    assert "not an inner-outer" in inner_outer_problem(_sums((4, 8), (1,)), (4, 8))
    assert "iteration dims" in inner_outer_problem(_sums((4, 6, 8), (2,), (0,)), (4, 6, 8))


# --- norm backwards as FusionGroups ----------------------------------------------------------------

def _columns(t):
    """A column sum: over every dim but the last (the rows' leading dims)."""
    return t.sum(tuple(range(t.ndim - 1)))


def layer_norm_backward_no_bias(x, w, dy):
    dx, dw, _ = layer_norm_backward(x, w, dy)
    return dx, dw


def rms_norm_backward(x, w, dy):
    """RMSNorm's backward (y = x * rstd * w): dx by rows, the weight gradient by columns."""
    xf, dyf = x.float(), dy.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    xhat = xf * rstd
    wdy = dyf * w.float()
    dx = (wdy - xhat * (xhat * wdy).mean(-1, keepdim=True)) * rstd
    return dx.to(x.dtype), _columns(dyf * xhat).to(w.dtype)


BACKWARDS = {"layer_norm": (layer_norm_backward, 3), "layer_norm no bias": (layer_norm_backward_no_bias, 2),
             "rms_norm": (rms_norm_backward, 2)}


def _inputs(rows, cols, dtype, device):
    return _inputs_of((rows, cols), dtype, device)


def _inputs_of(shape, dtype, device):
    x = (f32(*shape) * 2 + 1).to(dtype).to(device)
    return x, f32(shape[-1]).to(dtype).to(device), f32(*shape).to(dtype).to(device)


def _close_to_eager(got, fn, inputs, dtype):
    """`got` against `fn` computed in float64 and rounded once to `dtype` (eager's own
    low-precision roundings would judge the wide reference, not the definition)."""
    wide = fn(*[t.double() for t in inputs])
    return checking.mismatch(list(got), [r.to(dtype) for r in wide])


@pytest.mark.parametrize("name", list(BACKWARDS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_backward_group_is_one_definition(runner, name, dtype):
    """The partitioner's one two-axis group (rows and columns not powers of two) becomes one
    definition: the row reductions with their broadcasts back to the rows, the column sums
    over the leading dims, every output as eager's on fresh inputs, twice."""
    fn, n_out = BACKWARDS[name]
    for rows, cols in ((45, 12), (37, 20)):
        group, inputs, order = partitioned_group_from_fn(fn, *_inputs(rows, cols, dtype, runner.device),
                                                         executor=runner.executor)
        assert group.reduction_dims == (1,) and group.column_dims == (0,), group
        assert inner_outer_problem(group.bsyms, group.domain) is None
        gen = runner.executor.generate(group, runner.device)
        assert gen.runnable, gen.note
        source = gen.source
        assert source.count("with FusionDefinition() as fd:") == 1, source
        assert "column sums over dims [0]" in source and ", [0])  # prims.sum" in source, source
        assert ", [1])  # prims.sum" in source and "broadcast_dims=[0]" in source, source
        assert len(group.outputs) == n_out
        for _ in range(2):  # fresh inputs each time: one definition serves them
            fresh = _inputs(rows, cols, dtype, runner.device)
            names = {"x": fresh[0], "w": fresh[1], "dy": fresh[2]}
            got = gen.fn(*[names[v.name] for v in group.inputs])
            problem = _close_to_eager([got[i] for i in order], fn, fresh, dtype)
            assert problem is None, f"{problem}\n{source}"
        if runner.kind == "real":  # where nvFuser runs: its inner-outer scheduler took it whole
            assert gen.nvfuser_ran and gen.scheduler == "inner_outer_persistent" and gen.kernels == 1, gen.status()


SIZE_ONE = [pytest.param((1, 40, 6), id="1x40x6"), pytest.param((1, 1, 7, 6), id="1x1x7x6")]


@pytest.mark.parametrize("shape", SIZE_ONE)
@pytest.mark.parametrize("name", list(BACKWARDS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_backward_over_size_one_dims_is_one_definition(runner, name, dtype, shape):
    """A batch of one ([1, T, C], [1, 1, T, C]): the same one definition with the domain's size-1
    dims squeezed out of its inputs and broadcast back at its outputs, so that nvFuser sees rows
    and columns with no broadcast dim (the inner-outer check passes on the built definition, and
    fails on the prims as written without squeezing); every output as eager's on fresh inputs."""
    fn, n_out = BACKWARDS[name]
    ones, leading = [d for d, s in enumerate(shape) if s == 1], tuple(range(len(shape) - 1))
    group, _, order = partitioned_group_from_fn(fn, *_inputs_of(shape, dtype, runner.device), executor=runner.executor)
    assert group.domain == shape and group.column_dims == leading and group.reduction_dims == (len(shape) - 1,)
    assert "broadcast" in inner_outer_problem(group.bsyms, group.domain)  # unsqueezed, nvFuser would refuse it
    gen = runner.executor.generate(group, runner.device)
    source = gen.source
    assert source.count("with FusionDefinition() as fd:") == 1 and f"size-1 dims {ones} squeezed out" in source
    assert f"fd.ops.squeeze(x, dims={ones})" in source and f"fd.ops.squeeze(dy, dims={ones})" in source
    # over [T, C]: rows over dim 1, columns over dim 0; dx broadcast back to its shape
    assert ", [1])  # prims.sum" in source and ", [0])  # prims.sum" in source, source
    assert f"shape={list(shape)}, broadcast_dims={[len(ones), len(ones) + 1]})  # size-1 dims back" in source
    for _ in range(2):
        fresh = _inputs_of(shape, dtype, runner.device)
        names = {"x": fresh[0], "w": fresh[1], "dy": fresh[2]}
        got = gen.fn(*[names[v.name] for v in group.inputs])
        assert [tuple(got[i].shape) for i in order] == [shape] + [(shape[-1],)] * (n_out - 1)
        problem = _close_to_eager([got[i] for i in order], fn, fresh, dtype)
        assert problem is None, f"{problem}\n{source}"
    if runner.kind == "real":
        assert gen.nvfuser_ran and gen.scheduler == "inner_outer_persistent" and gen.kernels == 1, gen.status()
        return
    (fd,) = built_definitions(gen, group)
    assert fd.recorded_ops.count("squeeze") == 2 and inner_outer_problem(fd) is None, source  # x and dy


def test_reference_squeeze_follows_the_bindings():
    """tests/nvfuser_reference.py's ops.squeeze(arg, dims, squeeze_expanded=False), as
    csrc/ops/alias.cpp has it: broadcast dims only, negative dims from the end, an expanded
    broadcast dim only with squeeze_expanded."""
    with ref.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[1, -1, 1], contiguity=[None, True, None], dtype=ref.DataType.Float)
        y = fd.ops.squeeze(x, [0, -1])
        assert y.ndim == 1 and not y.broadcast[0]
        fd.add_output(y)
        with pytest.raises(ref.ReferenceError_, match="non-broadcasting"):
            fd.ops.squeeze(x, [1])
        with pytest.raises(ref.ReferenceError_, match="outside of Tensor size"):
            fd.ops.squeeze(x, [3])
        wide = fd.ops.broadcast_in_dim(y, shape=[4, fd.ops.size(y, dim=0)], broadcast_dims=[1])
        with pytest.raises(ref.ReferenceError_, match="expanded"):
            fd.ops.squeeze(wide, [0])
        fd.add_output(fd.ops.squeeze(wide, [0], squeeze_expanded=True))
    t = torch.randn(1, 5, 1)
    got = fd.execute([t])
    assert torch.equal(got[0], t.view(5)) and torch.equal(got[1], t.view(5))
    with pytest.raises(ref.ReferenceError_, match="broadcast"):
        fd.execute([torch.randn(2, 5, 1)])


# --- trained through jit and compile ---------------------------------------------------------------

def _llama_rms_norm(n):
    sys.path.insert(0, str(EXAMPLES))
    from llama_block import LlamaRMSNorm

    return LlamaRMSNorm(n)


MODULES = {
    "layer_norm": lambda n: nn.LayerNorm(n),
    "layer_norm no bias": lambda n: nn.LayerNorm(n, bias=False),
    "layer_norm no affine": lambda n: nn.LayerNorm(n, elementwise_affine=False),
    "rms_norm": lambda n: nn.RMSNorm(n, eps=1e-6),
    "rms_norm no weight": lambda n: nn.RMSNorm(n, eps=1e-6, elementwise_affine=False),
    "llama rms_norm": _llama_rms_norm,
}


def _module(name, n, dtype):
    m = MODULES[name](n).to(dtype)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p.float()).to(dtype))
    return m


def _eager_grads(fn, args, dy):
    """Eager's output and gradients: in float32 rounded once to the dtype, else (where the norm
    itself rounds to the dtype on its way: Llama's) eager's own in the dtype."""
    wide = [a.detach().float().requires_grad_() for a in args]
    out = fn(*wide)
    rounded = [out.to(args[0].dtype)] + [g.to(a.dtype) for g, a in
                                         zip(torch.autograd.grad(out, wide, dy.float()), args)]
    own = [a.detach().requires_grad_() for a in args]
    out = fn(*own)
    return rounded, [out.detach()] + list(torch.autograd.grad(out, own, dy))


def _step_matches_eager(jfn, fn, args, dy):
    out = jfn(*args)
    got = [out.detach()] + list(torch.autograd.grad(out, args, dy))
    wide, own = _eager_grads(fn, args, dy)
    problems = [checking.mismatch(got[:1], ref[:1]) or next(
        (f"gradient {i}: {p}" for i, (g, e) in enumerate(zip(got[1:], ref[1:])) if (p := checking.grad_mismatch(g, e))),
        None) for ref in (wide, own)]
    return None if None in problems else problems[0]


def _backward_regions(jfn):
    return [r for r in _last_entry(jfn).compiled.program("backward").plan.regions if r.executor == "nvfuser"]


def _trained_through_jit(name: str, dtype, rows: tuple[int, ...], n: int):
    """(jfn, the module's parameters by name): MODULES[name] over rows of n trained through jit
    with executors=("nvfuser", "torch") twice (the second call: fresh inputs through the cached
    program), output and every gradient as eager's each time."""
    module = _module(name, n, dtype)
    params = dict(module.named_parameters())

    def fn(x, *ps):
        return torch.func.functional_call(module, dict(zip(params, ps)), (x,))

    with registered(reference_backend()):
        jfn = fusionlens.jit(fn, executors=["nvfuser", "torch"])
        for _ in range(2):
            x = (torch.randn(*rows, n) * 2 + 1).to(dtype).requires_grad_()
            ps = [p.detach().clone().requires_grad_() for p in params.values()]
            problem = _step_matches_eager(jfn, fn, [x, *ps], torch.randn(*rows, n).to(dtype))
            assert problem is None, problem
    return jfn, params


@pytest.mark.parametrize("name", list(MODULES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_training_through_jit_is_one_nvfuser_region(name, dtype):
    """A norm trained through jit with executors=("nvfuser", "torch"): its output and every
    gradient as eager's on fresh inputs, and its backward one nvFuser region: a two-axis one where
    there are parameters (dx and their gradients in one definition), a row one where there are none."""
    n = 24
    jfn, params = _trained_through_jit(name, dtype, (3, 37), n)
    regions = _backward_regions(jfn)
    assert len(regions) == 1, [(r.id, [b.sym.name for b in r.bsyms]) for r in regions]
    (norm,) = regions
    assert norm.group.reduction_dims == (2,)
    assert norm.group.column_dims == ((0, 1) if params else ()), norm.group
    assert sorted(list(o.shape) for o in norm.outputs) == sorted([[3, 37, n]] + [[n]] * len(params))
    if params:
        assert inner_outer_problem(norm.group.bsyms, norm.group.domain) is None


@pytest.mark.parametrize("shape", [pytest.param((1, 40), id="1x40"), pytest.param((1, 1, 7), id="1x1x7")])
@pytest.mark.parametrize("name", ["layer_norm", "layer_norm no bias", "rms_norm", "llama rms_norm"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_training_over_a_batch_of_one_is_one_nvfuser_region(name, dtype, shape):
    """A batch of one trained through jit: output and every gradient as eager's on fresh inputs,
    the backward one two-axis nvFuser region whose definition squeezes the size-1 dims out (the
    inner-outer check passes on it as built), where before it was two definitions."""
    n = 6
    jfn, params = _trained_through_jit(name, dtype, shape, n)
    regions = _backward_regions(jfn)
    assert len(regions) == 1, [(r.id, [b.sym.name for b in r.bsyms]) for r in regions]
    (norm,) = regions
    assert norm.group.column_dims == tuple(range(len(shape))) and norm.group.reduction_dims == (len(shape),)
    assert sorted(list(o.shape) for o in norm.outputs) == sorted([[*shape, n]] + [[n]] * len(params))
    assert "fd.ops.squeeze(" in norm.generated.source, norm.generated.source
    (fd,) = built_definitions(norm.generated, norm.group)
    assert inner_outer_problem(fd) is None, norm.generated.source


def test_layer_norm_over_two_dims_is_one_region():
    """Rows of two dims (LayerNorm((7, 12))): rows reduced over dims (1, 2), columns over dim 0,
    the weight and bias gradients [7, 12]; one definition, gradients as eager's."""
    module = nn.LayerNorm((7, 12))
    with torch.no_grad():
        for p in module.parameters():
            p.normal_()
    params = dict(module.named_parameters())

    def fn(x, *ps):
        return torch.func.functional_call(module, dict(zip(params, ps)), (x,))

    with registered(reference_backend()):
        jfn = fusionlens.jit(fn, executors=["nvfuser", "torch"])
        args = [torch.randn(5, 7, 12, requires_grad=True), *(p.detach().clone().requires_grad_()
                                                             for p in params.values())]
        problem = _step_matches_eager(jfn, fn, args, torch.randn(5, 7, 12))
        assert problem is None, problem
    (norm,) = _backward_regions(jfn)
    assert norm.group.reduction_dims == (1, 2) and norm.group.column_dims == (0,), norm.group
    assert sorted(list(o.shape) for o in norm.outputs) == [[5, 7, 12], [7, 12], [7, 12]]
    assert inner_outer_problem(norm.group.bsyms, norm.group.domain) is None


@pytest.mark.parametrize("batch", [2, 1])
def test_dynamic_layer_norm_training_is_one_definition_for_every_size(batch):
    """jit with dynamic shapes: the backward's two-axis region has a symbolic domain and one
    definition (extents read with fd.ops.size) serves rows of every count, gradients as eager's;
    a batch of one squeezed out of it, its dx broadcast back to a symbolic extent."""
    module = _module("layer_norm", 16, torch.float32)

    def fn(x, w, b):
        return torch.func.functional_call(module, {"weight": w, "bias": b}, (x,))

    with registered(reference_backend()):
        jfn = fusionlens.jit(fn, executors=["nvfuser", "torch"], dynamic=True)
        for rows in (40, 23):
            args = [torch.randn(batch, rows, 16, requires_grad=True), module.weight.detach().clone().requires_grad_(),
                    module.bias.detach().clone().requires_grad_()]
            problem = _step_matches_eager(jfn, fn, args, torch.randn(batch, rows, 16))
            assert problem is None, problem
    (norm,) = _backward_regions(jfn)
    assert norm.group.column_dims == (0, 1) and not all(type(d) is int for d in norm.group.domain), norm.group
    assert "fd.ops.size(" in norm.generated.source and len(norm.generated.definitions) == 1
    assert ("fd.ops.squeeze(" in norm.generated.source) == (batch == 1)
    (fd,) = built_definitions(norm.generated, norm.group)
    assert inner_outer_problem(fd) is None, norm.generated.source


def test_layer_norm_training_through_compile_reports_one_region():
    """compile's report: the backward's LayerNorm is one nvFuser region, its code the one
    definition with the column sums, checked against eager by compile itself."""
    module = _module("layer_norm", 16, torch.float32)

    def step(x, w, b):
        return torch.func.functional_call(module, {"weight": w, "bias": b}, (x,)).square().sum()

    args = [torch.randn(4, 10, 16, requires_grad=True), module.weight.detach().clone().requires_grad_(),
            module.bias.detach().clone().requires_grad_()]
    with registered(reference_backend()):
        report = fusionlens.compile(step, *args, executors=["nvfuser", "torch"])
    wrong = [d for d in report.diagnostics if d.severity == "error" or d.code in ("mismatch", "gradient-mismatch")]
    assert not wrong, wrong
    backward = report.program("backward")
    fused = [r for r in backward.regions if r.executor == "nvfuser"]
    assert len(fused) == 1, [(r.id, r.ops) for r in backward.regions]
    assert "column sums over dims [0, 1]" in fused[0].code and fused[0].code.count("fd.add_output(") == 3


# --- a GPT training step ---------------------------------------------------------------------------

def _gpt_step():
    sys.path.insert(0, str(EXAMPLES))
    from gpt_block import GPTConfig
    from train_gpt import GPT

    model = GPT(GPTConfig(n_embd=32, n_head=2, block_size=16, dropout=0.0, use_sdpa=True), vocab_size=64)
    names = [n for n, _ in model.named_parameters()]
    idx = torch.randint(0, 64, (3, 16))

    def step(*params):
        return torch.func.functional_call(model, dict(zip(names, params)), (idx, torch.roll(idx, -1, dims=1)))

    return step, [p.detach().clone().requires_grad_() for p in model.parameters()]


def _layer_norm_backwards(regions) -> dict[str, list]:
    """The nvFuser regions of a backward holding each LayerNorm's ops, by the LayerNorm's module
    path (`h.0.ln_1`, ..., `ln_f`): its dx, weight and bias gradients (with what fused beside them:
    a Linear's bias gradient summing the same dy over the same rows)."""
    out: dict[str, list] = {}
    for r in regions:
        for module in sorted({b.provenance.module for b in r.bsyms if b.provenance is not None}):
            if module.rsplit(".", 1)[-1] in ("ln_1", "ln_2", "ln_f"):
                out.setdefault(module, []).append(r)
    return out


def test_gpt_training_step_layer_norm_backward_is_one_nvfuser_region(monkeypatch):
    """Each of a GPT training step's five LayerNorm backwards (ln_1, ln_2 of two blocks, ln_f) is
    one nvFuser region, one definition nvFuser's inner-outer scheduler takes as one fusion; every
    parameter's gradient as eager's. Without two-axis regions (the executor's takes_columns
    refusing, as before), each was two: dx, and the weight and bias gradients."""
    step, params = _gpt_step()

    def backward_regions():
        c = pipeline.compile_program(step, tuple(params), {}, CompileOptions(executors=("nvfuser", "torch")))
        got = torch.autograd.grad(c.fn(*params, *c.constants), params)
        problem = checking.mismatch(list(got), list(torch.autograd.grad(step(*params), params)))
        assert problem is None, problem
        return [r for r in c.program("backward").plan.regions if r.executor == "nvfuser"]

    with registered(reference_backend()) as executor:
        norms = _layer_norm_backwards(backward_regions())
        assert sorted(norms) == ["h.0.ln_1", "h.0.ln_2", "h.1.ln_1", "h.1.ln_2", "ln_f"], norms
        for (norm, *rest) in norms.values():
            assert not rest, [(r.id, [b.sym.name for b in r.bsyms]) for r in rest]
            assert norm.group.column_dims == (0, 1) and norm.group.reduction_dims == (2,)
            assert [list(o.shape) for o in norm.outputs].count([32]) >= 2, norm.outputs
            assert inner_outer_problem(norm.group.bsyms, norm.group.domain) is None
        monkeypatch.setattr(executor, "takes_columns", lambda *a: "refused, as before two-axis regions")
        before = _layer_norm_backwards(backward_regions())
    assert sorted(before) == sorted(norms) and [len(rs) for rs in before.values()] == [2] * 5, before
    for rows, columns in before.values():
        assert rows.group.reduction_dims == (2,) and columns.group.reduction_dims == (0, 1)
        assert not rows.group.column_dims and not columns.group.column_dims


# --- a repro of a two-axis region ------------------------------------------------------------------

TRAIN_TARGET = '''import torch
import torch.nn as nn
import compiler


@compiler.example(train=True)
def layer_norm_train():
    return nn.LayerNorm(24), (torch.randn(BATCH, 10, 24, requires_grad=True),)
'''


@pytest.mark.parametrize("batch", [4, 1])
def test_repro_of_a_two_axis_region_runs_the_one_definition(tmp_path, batch):
    """`fusionlens repro` of the backward's two-axis region: a script holding the one definition,
    which runs (on tests/nvfuser_reference.py as nvfuser_direct, without FusionLens importable)
    and matches eager's dx, dw and db; a batch of one's squeezes and broadcasts back included."""
    import os
    import shutil
    import site
    import subprocess

    from fusionlens.driver import repro

    target = tmp_path / "ln_target.py"
    target.write_text(TRAIN_TARGET.replace("BATCH", str(batch)))
    with registered(reference_backend("nvfuser_direct")):
        prepared = repro.prepare(str(target), "layer_norm_train", executors=["nvfuser", "torch"])
        (rid,) = [c.split()[0] for c in prepared.choices() if c.startswith("B") and c.endswith("(nvfuser)")]
        script = prepared.script(rid)
    assert "(two-axis reduction)" in script.text and script.text.count("fd.add_output(") == 3, script.text
    assert ("fd.ops.squeeze(" in script.text) == (batch == 1), script.text
    path = tmp_path / script.file_name
    path.write_text(script.text)
    stand_in = tmp_path / "stand_in"
    stand_in.mkdir()
    shutil.copy(Path(__file__).resolve().parent / "nvfuser_reference.py", stand_in / "nvfuser_direct.py")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = os.pathsep.join([str(stand_in), *site.getsitepackages()])
    p = subprocess.run([sys.executable, "-S", "-s", str(path), "--no-benchmark"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "OK: the kernel matches eager (3 outputs" in p.stdout, p.stdout + p.stderr
