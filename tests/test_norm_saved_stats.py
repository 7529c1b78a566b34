"""A training step saves a norm's row statistics; its backward reads them, never recomputes them.

LayerNorm's mean and rstd and RMSNorm's rstd ([rows, 1] values, 8 bytes a row or less) are
written by the forward and read by the backward, as eager's native_layer_norm and
Thunder/Inductor do (composite_rules.layer_norm_with_stats; RMSNorm through its prims, whose
rsqrt keeps its output): so the backward's dx over long rows reads dy and x twice (row sums,
then dx), not three times (a Welford pass over x first). Checked here:

- outputs and gradients against eager on fresh random inputs, LayerNorm and RMSNorm with and
  without affine parameters, float32 and bfloat16, with the torch executor (LayerNorm bit for
  bit: eager's own kernels) and with Triton (its interpreter on a CPU, tiny sizes; long rows by
  shrinking tuning.TWO_AXIS_MAX_ROW);
- the traces: what the forward saves is the inputs and the [rows, 1] statistics, nothing
  full-size of its own, and no reduction of the backward recomputes a statistic (every one
  reads a cotangent);
- remat's rule (remat.py): a recompute that reads more than twice the value's bytes is saved
  instead, and a reduction's output is never recomputed;
- the static analysis (nothing run): the long-row dx kernel of a [1024, 65536] bfloat16
  LayerNorm or RMSNorm backward, compiled for sm_90, reads its input twice.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from fusionlens.driver import checking, pipeline
from fusionlens.ir.trace import NameGen, TraceContext, Value, tracing
from fusionlens.ir.vocabulary import ValueRole
from fusionlens.middle import passes
from fusionlens.middle.autograd import remat
from fusionlens.ops import prims as P
from fusionlens.options import CompileOptions

from fusion_groups import reductions_not_reading_a_cotangent

N = 24  # columns
LEAD = (3, 5)  # rows: 15
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _llama_rms(x, w):
    """Llama's RMSNorm (examples/llama_block.py): float32 statistics, rounded before the weight."""
    h = x.float()
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


# name -> (fn, parameter shapes, statistics the forward saves)
NORMS = {
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (N,), w, b), [(N,), (N,)], 2),
    "layer_norm no affine": (lambda x: F.layer_norm(x, (N,)), [], 2),
    "layer_norm weight over two dims": (lambda x, w: F.layer_norm(x, (LEAD[1], N), w), [(LEAD[1], N)], 2),
    "rms_norm": (lambda x, w: F.rms_norm(x, (N,), w, 1e-6), [(N,)], 1),
    "rms_norm no affine": (lambda x: F.rms_norm(x, (N,)), [], 1),
    "llama rms_norm": (_llama_rms, [(N,)], 1),
}


def _inputs(name, dtype):
    _, params, _ = NORMS[name]
    x = (torch.randn(*LEAD, N, device=DEVICE) * 3 + 1).to(dtype).requires_grad_()
    return [x] + [(torch.randn(s, device=DEVICE) + 1).to(dtype).requires_grad_() for s in params]


def _compile(name, dtype, executors):
    fn = NORMS[name][0]
    c = pipeline.compile_program(fn, tuple(_inputs(name, dtype)), {}, CompileOptions(executors=executors))
    assert c.traced.eager_only is None and c.differentiated is not None, c.traced.eager_only
    return c


def _check_against_eager(c, fn, args, exact: bool = False):
    """Outputs and gradients on fresh inputs `args` and a fresh cotangent: eager's bits where
    `exact`, else within the dtype's tolerance (bfloat16 gradients judged by eager's own, or by
    a float32 reference rounded once: a CPU's bfloat16 LayerNorm rounds its statistics to
    bfloat16, the compiled one keeps them in float32, as a GPU's does)."""
    dtype = args[0].dtype
    out = pytree.tree_leaves(c.fn(*args, *c.constants))[0]
    fresh = [a.detach().requires_grad_() for a in args]
    want = fn(*fresh)
    dy = torch.randn_like(want)
    got = torch.autograd.grad(out, args, dy)
    eager = torch.autograd.grad(want, fresh, dy)
    if exact:
        assert torch.equal(out, want), (out - want).abs().max()
        for i, (g, e) in enumerate(zip(got, eager)):
            assert torch.equal(g, e), (i, (g - e).abs().max())
        return
    assert checking.mismatch(out, want) is None, checking.mismatch(out, want)
    problem = checking.mismatch(list(got), list(eager))
    if problem is not None and dtype != torch.float32:
        wide = [a.detach().float().requires_grad_() for a in args]
        ref = [g.to(a.dtype) for g, a in zip(torch.autograd.grad(fn(*wide), wide, dy.float()), args)]
        problem = checking.mismatch(list(got), ref)
    assert problem is None, problem


def _check_traces(c, name):
    """The forward saves the inputs and the [rows, 1] statistics (float32: the computing dtype),
    nothing full-size of its own; no reduction of the backward recomputes a statistic: each
    reads a cotangent (dy), where a recompute would read x alone (var_mean, sum(x * x))."""
    d = c.differentiated
    rows = LEAD[0] * (LEAD[1] if "two dims" not in name else 1)
    inputs = {v.name for v in c.differentiated.joint.inputs}
    made = [v for v in d.saved if v.name not in inputs]
    assert len(made) == NORMS[name][2], [(v.name, v.shape) for v in d.saved]
    for v in made:
        assert v.numel() == rows and v.shape[-1] == 1 and v.dtype == torch.float32, (v.name, v.shape, v.dtype)
    backward = c.program("backward").traces["backward"]
    ops = passes.flatten(backward.bound_symbols)
    assert not any(b.sym is P.var_mean for b in ops), backward.python()
    assert not reductions_not_reading_a_cotangent(backward), backward.python()


DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
@pytest.mark.parametrize("name", list(NORMS))
def test_torch_executor_saves_the_statistics(name, dtype):
    """With the torch executor LayerNorm runs torch's own kernels (native_layer_norm, then
    native_layer_norm_backward from the saved statistics): eager's bits, bfloat16 included."""
    c = _compile(name, dtype, ("torch",))
    _check_traces(c, name)
    _check_against_eager(c, NORMS[name][0], _inputs(name, dtype), exact=name.startswith("layer_norm"))


def test_bfloat16_input_with_float32_parameters_takes_eagers_kernels():
    """A bfloat16 input with float32 weight and bias (a "mixed" call: on a CPU eager's statistics
    are float32 there, bfloat16 where the parameters are bfloat16 too): eager's bits either way."""
    fn = NORMS["layer_norm"][0]

    def make():
        x = (torch.randn(*LEAD, N, device=DEVICE) * 3 + 1).to(torch.bfloat16).requires_grad_()
        return [x] + [torch.randn(N, device=DEVICE).requires_grad_() for _ in range(2)]

    c = pipeline.compile_program(fn, tuple(make()), {}, CompileOptions(executors=("torch",)))
    _check_traces(c, "layer_norm")
    _check_against_eager(c, fn, make(), exact=True)


def _interpreter_problem() -> str | None:
    if torch.cuda.is_available():
        return None
    from test_autograd_rules import _triton_problem

    return _triton_problem()


@pytest.fixture
def triton_run(monkeypatch):
    problem = _interpreter_problem()
    if problem:
        pytest.skip(problem)
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
@pytest.mark.parametrize("name", list(NORMS))
def test_triton_saves_the_statistics(triton_run, name, dtype):
    """Triton's forward region writes the statistics beside its output; the backward's region
    reads them (its only reductions are dy's row and column sums)."""
    c = _compile(name, dtype, ("triton", "torch"))
    _check_traces(c, name)
    assert any(r.executor == "triton" for r in c.program("backward").plan.regions)
    _check_against_eager(c, NORMS[name][0], _inputs(name, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
def test_triton_long_rows_read_the_saved_statistics(triton_run, monkeypatch, dtype):
    """Rows longer than tuning.TWO_AXIS_MAX_ROW (lowered to 64: 300 columns in chunks of 64): the
    backward's looped row kernel makes two passes over each row block (its row sums from the saved
    mean and rstd, then dx), with no Welford pass, and its gradients are eager's."""
    from fusionlens.executors.triton import tuning

    monkeypatch.setattr(tuning, "TWO_AXIS_MAX_ROW", 64)
    monkeypatch.setattr(tuning, "LOOP_BLOCK_N", 64)
    monkeypatch.setattr(tuning, "SM_COUNT", 1)
    fn = lambda x, w, b: F.layer_norm(x, (300,), w, b)  # noqa: E731
    make = lambda: [(torch.randn(37, 300, device=DEVICE) * 3 + 1).to(dtype).requires_grad_()] + [  # noqa: E731
        torch.randn(300, device=DEVICE).to(dtype).requires_grad_() for _ in range(2)]
    c = pipeline.compile_program(fn, tuple(make()), {}, CompileOptions(executors=("triton", "torch")))
    (norm,) = [r for r in c.program("backward").plan.regions if r.executor == "triton"]
    source = norm.generated.source
    assert norm.generated.kernels == 2 and "passes over chunks of 64" in source, source
    kernel = source.split("def fl_")[1]  # the row kernel, before its combine
    assert kernel.count("for start in range(0, ") == 2, kernel
    assert "_fl_welford" not in kernel, kernel
    _check_against_eager(c, fn, make())


# --- remat: bytes read by a recompute weigh against bytes saved -------------------------------

def _forward(make, *shapes):
    """The ops `make` records on inputs of `shapes`, the inputs, and its result."""
    inputs = [Value(f"a{i}", s, torch.float32, torch.device("cpu"), ValueRole.INPUT) for i, s in enumerate(shapes)]
    ctx = TraceContext(NameGen("t"))
    with tracing(ctx):
        result = make(*inputs)
    return ctx.bound_symbols, inputs, result


def test_remat_recomputes_what_reads_little_and_saves_what_reads_much():
    """A product of two full-size inputs is recomputed (it reads twice its bytes: what saving it
    moves, a write and a read); a product of three is saved (a third read costs more); a value of
    a row reduction ([rows], read from [rows, columns]) is never recomputed, nor anything made
    from it alone, which is as small."""
    full = (64, 32)
    ops, ins, two = _forward(lambda a, b: P.mul(a, b), full, full)
    assert remat.recompute(ops, [], [two], {v.name for v in ins})[1] == [two.name]
    ops, ins, three = _forward(lambda a, b, c: P.mul(P.mul(a, b), c), full, full, full)
    assert remat.recompute(ops, [], [three], {v.name for v in ins})[1] == []
    ops, ins, (s, rstd) = _forward(lambda x: (s := P.sum(P.mul(x, x), (1,)), P.rsqrt(P.add(s, 1e-6))), full)
    assert remat.recompute(ops, [], [s], {v.name for v in ins})[1] == []
    assert remat.recompute(ops, [], [rstd], {v.name for v in ins})[1] == []
    # the full-size normalised rows, recomputed from x and the small statistic (as RMSNorm's are)
    ops, ins, (rstd, xhat) = _forward(lambda x: (r := P.rsqrt(P.sum(P.mul(x, x), (1,))),
                                                 P.mul(x, P.broadcast_in_dim(r, full, (0,)))), full)
    assert remat.recompute(ops, [], [rstd, xhat], {v.name for v in ins})[1] == [xhat.name]


# --- the static analysis: two passes over long rows ------------------------------------------

@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_long_row_backward_reads_its_input_twice_on_the_h100(norm):
    """The backward a training step makes for a [1024, 65536] bfloat16 LayerNorm (RMSNorm),
    traced on the meta device and differentiated as a training compile does, is one two-axis
    region; its looped row kernel, compiled for sm_90, reads dy and x twice ("passes" 2: the row
    sums from the saved statistics, then dx), with 128-bit loads and no spills."""
    from test_triton_hopper import _ptxas_problem

    problem = _ptxas_problem()
    if problem:
        pytest.skip(problem)
    from fusionlens.executors.triton import EXECUTOR, analysis, static
    from fusionlens.executors.triton.module import build_source
    from fusionlens.executors.triton.runtime import _contiguous_key
    from fusionlens.frontend import tracer
    from fusionlens.middle import fusion
    from fusionlens.middle.autograd import transform

    rows, cols = 1024, 65536
    meta = lambda *s: torch.empty(s, dtype=torch.bfloat16, device="meta", requires_grad=True)  # noqa: E731
    if norm == "layer_norm":
        fn, args = (lambda x, w, b: F.layer_norm(x, (cols,), w, b)), (meta(rows, cols), meta(cols), meta(cols))
    else:
        fn, args = (lambda x, w: F.rms_norm(x, (cols,), w, 1e-6)), (meta(rows, cols), meta(cols))
    traced = tracer.trace(fn, args, {}, norm)
    d = transform.differentiate(passes.optimise(passes.decompose(traced.trace)), [True] * len(args))
    stats = [v for v in d.saved if tuple(v.shape) == (rows, 1)]
    assert len(stats) == (2 if norm == "layer_norm" else 1) and all(v.dtype == torch.float32 for v in stats)
    flat = fusion.prepare(d.backward, [EXECUTOR])
    nodes, make_group = fusion.clusters(flat, [EXECUTOR])
    assert len(nodes) == 1 and isinstance(nodes[0], fusion.Cluster), nodes
    group = make_group(nodes[0], "B0")
    assert group.reduction_dims == (1,) and group.column_dims == (0,)
    assert {v.name for v in stats} <= {v.name for v in group.inputs}
    an = analysis._Analysis(group)
    source, _, _, specs = build_source(group, an, _contiguous_key(an))
    assert len(specs) == 2 and "passes over chunks" in source, source
    compiled = iter(static.compile_kernels([(source, s) for s in specs], 90))
    launches = static.launches(specs)
    main, combine = [static.kernel_static(next(compiled), s, lc, "H100") for s, lc in zip(specs, launches)]
    assert not main.error and not combine.error, (main.error, combine.error)
    assert main.passes <= 2 and main.read_ratio <= 2.01, main
    assert main.load_bits == 128, main
    if main.spill_bytes is not None:
        assert main.spill_bytes == 0, main


if __name__ == "__main__":
    raise SystemExit(pytest.main([os.path.abspath(__file__), "-q"]))


def test_dynamic_layer_norm_training_with_triton(monkeypatch):
    """A LayerNorm training step compiled with symbolic sizes for Triton: the partitioner's
    two-axis check compares shapes that hold symbols (it built a set of them: a TypeError, an
    unhashable SymInt), and one program serves every row count, gradients as eager's."""
    import compiler

    monkeypatch.setenv("TRITON_INTERPRET", "1")

    def fn(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b).sum()

    jfn = compiler.jit(fn, dynamic=True, executors=["triton", "torch"])
    for rows in (3, 5, 7):
        args = [torch.randn(rows, 16, requires_grad=True), torch.randn(16, requires_grad=True),
                torch.randn(16, requires_grad=True)]
        got = torch.autograd.grad(jfn(*args), args)
        fresh = [a.detach().requires_grad_() for a in args]
        want = torch.autograd.grad(fn(*fresh), fresh)
        assert checking.mismatch(list(got), list(want)) is None, rows
    assert jfn.cache_info()["compiles"] <= 2, jfn.cache_info()
