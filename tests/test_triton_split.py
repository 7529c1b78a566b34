"""Split reductions and the one-pass statistics of long rows, run (Triton's interpreter on a
CPU, the GPU where there is one) and compared with eager on fresh random inputs.

The split path is forced at small sizes by telling the generator the GPU has two SMs and that
no reduction is too small to split (tuning.SM_COUNT, tuning.SPLIT_MIN_BYTES); the looped
path by shrinking the register block (tuning.MAX_SINGLE_PASS, LOOP_BLOCK_N).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fusion_groups import group_from_fn, layer_norm_backward
from fusionlens.driver import checking
from fusionlens.executors import triton as tx
from fusionlens.executors.triton import tuning
from test_triton import DEVICE, _interpreter  # noqa: F401  (the fixture that switches the interpreter on)


@pytest.fixture
def two_sms(monkeypatch):
    monkeypatch.setattr(tuning, "SM_COUNT", 2)
    monkeypatch.setattr(tuning, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(tuning, "LOOP_BLOCK_N", 16)


def _run(fn, *args):
    group, inputs = group_from_fn(fn, *args)
    gen = tx.generate(group, DEVICE)
    out = list(gen.fn(*inputs))
    with torch.no_grad():
        ref = fn(*args)
    ref = list(ref) if isinstance(ref, tuple) else [ref]
    problem = checking.mismatch(out, ref)
    assert problem is None, f"{problem}\n{gen.source}"
    return gen, out, inputs


def _t(*shape, dtype=torch.float32):
    if dtype.is_floating_point:
        return torch.randn(*shape, device=DEVICE).to(dtype)
    return torch.randint(-50, 50, shape, device=DEVICE, dtype=dtype)


SPLIT_CASES = {
    "column sum": (lambda x: x.sum(0), lambda dt: (_t(40, 6, dtype=dt),)),
    "row sum": (lambda x: x.sum(-1), lambda dt: (_t(3, 100, dtype=dt),)),
    "sum of everything": (lambda x: x.sum(), lambda dt: (_t(1000, dtype=dt),)),
    "middle dim mean": (lambda x: x.mean(1), lambda dt: (_t(2, 70, 3, dtype=dt),)),
    "amax then bias": (lambda x, b: x.amax(-1) * 2 + b, lambda dt: (_t(3, 100, dtype=dt), _t(3, dtype=dt))),
    "weight and bias gradients": (lambda dy, xhat: ((dy * xhat).sum(0), dy.sum(0)),
                                  lambda dt: (_t(50, 8, dtype=dt), _t(50, 8, dtype=dt))),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", list(SPLIT_CASES))
def test_split_reductions_match_eager(two_sms, name, dtype):
    fn, make = SPLIT_CASES[name]
    gen, out, inputs = _run(fn, *make(dtype))
    assert gen.kernels == 2 and "_combine[" in gen.source, gen.source
    assert "split_id" in gen.source
    again = gen.fn(*inputs)  # the partials are combined in a fixed order: the same bits every run
    assert all(torch.equal(a, b) for a, b in zip(out, again))


def test_split_integer_and_nan(two_sms):
    gen, *_ = _run(lambda x: x.sum(0), _t(40, 5, dtype=torch.int32))
    assert gen.kernels == 2
    x = torch.randn(3, 100, device=DEVICE)
    x[1, 77] = float("nan")
    gen, out, _ = _run(lambda x: x.amax(-1), x)
    assert gen.kernels == 2 and torch.isnan(out[0][1]) and not torch.isnan(out[0][0])


def test_no_split_where_rows_fill_the_gpu_or_a_row_needs_its_result(two_sms, monkeypatch):
    gen, *_ = _run(lambda x: x.sum(-1), _t(64, 100))  # 4 programs of 16 rows: two an SM already
    assert gen.kernels == 1
    monkeypatch.setattr(tuning, "SPLIT_MIN_BYTES", 4 << 20)
    gen, *_ = _run(lambda x: x.sum(-1), _t(3, 100))  # 1.2 KB: a second launch costs more than idle SMs
    assert gen.kernels == 1
    monkeypatch.setattr(tuning, "SPLIT_MIN_BYTES", 0)
    gen, *_ = _run(lambda x: torch.softmax(x, -1), _t(3, 100))  # full-shape outputs need the row's result
    assert gen.kernels == 1
    gen, *_ = _run(lambda x: torch.var_mean(x, -1), _t(3, 100))
    assert gen.kernels == 1


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_long_rows_are_two_passes_with_one_combine(monkeypatch, name):
    import torch.nn.functional as F

    monkeypatch.setattr(tuning, "MAX_SINGLE_PASS", 16)
    monkeypatch.setattr(tuning, "LOOP_BLOCK_N", 16)
    fns = {"softmax": lambda x: torch.softmax(x, -1), "log_softmax": lambda x: torch.log_softmax(x, -1),
           "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],)),
           "rms_norm": lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)}
    x = torch.randn(3, 77, device=DEVICE) * 4 + 3
    gen, *_ = _run(fns[name], x)
    (spec,) = gen.specs
    assert spec.passes == 2 and spec.bytes_read <= 2 * spec.min_read
    assert gen.source.count("for start in range(") == 2
    body = gen.source.split("for start in range(")[1].split("\n")[1:]
    loop = []
    for line in body:  # the first loop's body: its lines indented past the loop's own
        if not line.startswith(" " * 8):
            break
        loop.append(line)
    # the statistics pass reduces lane-wise: no block-wide tl.sum / tl.reduce inside its loop
    assert loop and not any("tl.sum(" in x or "tl.reduce(" in x for x in loop), "\n".join(loop)


def test_autotune_picks_the_fastest_configuration_once():
    from fusionlens.executors.triton import runtime

    gen, out, inputs = _run(lambda x: torch.softmax(x, -1), torch.randn(4, 300, device=DEVICE))
    (spec,) = gen.specs
    assert 1 <= len(spec.autotune) <= 4 and spec.autotune[0] == spec.num_warps
    group_fn = tx.load_source(gen.source, gen.source.split("def ")[-1].split("(")[0], "t")
    seen = []

    def timer(call):  # pretend the last configuration is the fastest; each really launches
        call()
        seen.append(1)
        return 1.0 / len(seen)

    best = runtime.autotune(group_fn, inputs, spec.autotune, timer)
    assert best == spec.autotune[-1] and len(seen) == len(spec.autotune)
    for w in spec.autotune:  # every configuration computes the same softmax
        torch.testing.assert_close(group_fn(*inputs, num_warps=w)[0], out[0])


# --- a norm's backward: one two-axis region, dx and partial column sums, then their combine --

def _norm_backward_regions(fn, args):
    """Compile `fn` for training with Triton, run it, compare outputs and every gradient with
    eager on a fresh random cotangent; return the backward's regions."""
    from torch.utils import _pytree as pytree

    from fusionlens.driver import pipeline
    from fusionlens.options import CompileOptions

    c = pipeline.compile_program(fn, tuple(args), {}, CompileOptions(executors=("triton", "torch")))
    assert c.differentiated is not None
    out = c.fn(*args, *c.constants)
    want = fn(*args)
    assert checking.mismatch(out, want) is None
    dy = torch.randn_like(want)
    got = torch.autograd.grad(pytree.tree_leaves(out)[0], args, dy)
    # the reference in float32, rounded once: eager's bfloat16 kernels round on their own paths
    wide = [a.detach().float().requires_grad_() for a in args]
    ref = [g.to(a.dtype) for g, a in zip(torch.autograd.grad(fn(*wide), wide, dy.float()), args)]
    problem = checking.mismatch(list(got), ref)
    if problem is not None and args[0].dtype != torch.float32:
        # the wide reference skips the roundings to bfloat16 the function itself makes (Llama's
        # RMSNorm rounds its normalised rows before the weight): eager's own gradients then
        # judge it, within the dtype's tolerance
        fresh = [a.detach().requires_grad_() for a in args]
        eager = torch.autograd.grad(fn(*fresh), fresh, dy)
        problem = checking.mismatch(list(got), list(eager)) and problem
        if problem is not None:
            # a column sum of products rounded to bfloat16 (eager rounds each one, the kernel
            # rounds fewer): where terms cancel, both stray from the exact sum by rounding noise
            # that grows with the terms, not the result; judged within twice eager's own distance
            # from the float32 result, plus the dtype's tolerance
            problem = next((f"output {i}: {(g.float() - r.float()).abs().max():.4f} from the float32 result"
                            for i, (g, r, e) in enumerate(zip(got, ref, eager))
                            if not ((g.float() - r.float()).abs() <= 0.02 + 0.02 * r.float().abs()
                                    + 2 * (e.float() - r.float()).abs()).all()), None)
    assert problem is None, problem
    again = torch.autograd.grad(pytree.tree_leaves(c.fn(*args, *c.constants))[0], args, dy)
    assert all(torch.equal(a, b) for a, b in zip(got, again)), "the partial sums are combined in a fixed order"
    return c.program("backward").plan.regions


def _kernels(regions) -> int:
    """Device kernels a call of the program launches: each fused region's, one a torch op that computes."""
    from fusionlens.ops import prims

    return sum(r.generated.kernels if r.generated is not None else 1 for r in regions
               if r.generated is not None or any(s.sym.tags & {prims.ELEMENTWISE, prims.REDUCTION} for s in r.bsyms))


# rows not a multiple of the block (64 rows of 8 columns; 32 of 64), columns not a power of two;
# one SM: two programs, each looping over several row blocks (the last one partly masked)
NORM_SHAPES = {"rows 171 x 6": (3, 57, 6), "rows 300 x 40": (300, 40)}


@pytest.mark.parametrize("shape", list(NORM_SHAPES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_layer_norm_backward_is_two_kernels_and_matches_eager(monkeypatch, dtype, shape):
    import torch.nn.functional as F

    monkeypatch.setattr(tuning, "SM_COUNT", 1)
    dims = NORM_SHAPES[shape]
    n = dims[-1]
    x = (torch.randn(*dims, device=DEVICE) * 3 + 1).to(dtype).requires_grad_()
    w = torch.randn(n, device=DEVICE).to(dtype).requires_grad_()
    b = torch.randn(n, device=DEVICE).to(dtype).requires_grad_()
    regions = _norm_backward_regions(lambda x, w, b: F.layer_norm(x, (n,), w, b), (x, w, b))
    assert _kernels(regions) == 2, [(r.id, r.executor, [s.sym.name for s in r.bsyms]) for r in regions]
    (norm,) = [r for r in regions if r.executor == "triton"]
    last = len(dims) - 1
    assert norm.group.reduction_dims == (last,) and norm.group.column_dims == tuple(range(last))
    # dx, dw and db are all it writes: no dy * xhat, no statistics handed to another region
    assert sorted(list(o.shape) for o in norm.outputs) == sorted([list(dims), [n], [n]])
    source = norm.generated.source
    assert "for blk in range(pid, " in source and "_combine[" in source, source
    programs = int(source.split("_kernel[(")[1].split(",")[0])
    assert programs == 2 and -(-x.shape[:-1].numel() // int(source.split("BLOCK_M=")[1].split(",")[0])) > programs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_llama_rms_norm_backward_is_two_kernels_and_matches_eager(dtype):
    """Llama's RMSNorm (examples/llama_block.py: float32 statistics, `mean(-1, keepdim=True)`),
    differentiated through its prims: dx (rows: the statistics at [rows, 1], the reshape between
    them index arithmetic) and the weight gradient (columns) in one two-axis region."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from llama_block import LlamaRMSNorm

    norm = LlamaRMSNorm(6).to(DEVICE)
    with torch.no_grad():
        norm.weight.normal_()
    norm.weight.data = norm.weight.data.to(dtype)
    x = torch.randn(2, 37, 6, device=DEVICE).to(dtype).requires_grad_()
    regions = _norm_backward_regions(lambda x, w: _rms(norm, x, w), (x, norm.weight))
    assert _kernels(regions) == 2, [(r.id, r.executor, [s.sym.name for s in r.bsyms]) for r in regions]
    (region,) = [r for r in regions if r.executor == "triton"]
    assert region.group.reduction_dims == (2,) and region.group.column_dims == (0, 1)
    assert sorted(list(o.shape) for o in region.outputs) == [[2, 37, 6], [6]]


@pytest.fixture
def long_rows(monkeypatch):
    """Rows "longer than registers hold" at test sizes: a two-axis kernel loops over chunks of 64."""
    monkeypatch.setattr(tuning, "TWO_AXIS_MAX_ROW", 64)
    monkeypatch.setattr(tuning, "LOOP_BLOCK_N", 64)


def _looped_norm(regions, rows: int):
    """The one two-axis region of a norm's backward, checked to be the looped row kernel and its
    combine: two kernels in all, each program's partial sums kept across its row blocks."""
    assert _kernels(regions) == 2, [(r.id, r.executor, [s.sym.name for s in r.bsyms]) for r in regions]
    (norm,) = [r for r in regions if r.executor == "triton"]
    source = norm.generated.source
    assert norm.generated.kernels == 2 and "passes over chunks of 64" in source, source
    assert "tl.debug_barrier()" in source and "_combine[" in source, source
    programs = int(source.split("_kernel[(")[1].split(",")[0])
    block = int(source.split("BLOCK_M=")[1].split(",")[0])
    return norm, programs, -(-rows // block)


# 5 rows on one SM: one program of two blocks (4 rows, then 1); 37 rows on four SMs: five
# programs of one block each; 37 rows on one SM: two programs of several blocks each
LONG_ROWS = {"5 x 300 one SM": (5, 300, 1), "37 x 300 four SMs": (37, 300, 4), "37 x 300 one SM": (37, 300, 1)}


@pytest.mark.parametrize("shape", list(LONG_ROWS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_layer_norm_backward_over_long_rows_is_two_kernels(monkeypatch, long_rows, dtype, shape):
    """Rows longer than tuning.TWO_AXIS_MAX_ROW (300 columns, chunks of 64: not a multiple): still
    one two-axis region of two kernels, its row kernel looping over each row's chunks (the
    statistics, then dx and the partial column sums); dx, dw and db as eager's, the same bits twice."""
    import torch.nn.functional as F

    rows, n, sms = LONG_ROWS[shape]
    monkeypatch.setattr(tuning, "SM_COUNT", sms)
    x = (torch.randn(rows, n, device=DEVICE) * 3 + 1).to(dtype).requires_grad_()
    w, b = (torch.randn(n, device=DEVICE).to(dtype).requires_grad_() for _ in range(2))
    regions = _norm_backward_regions(lambda x, w, b: F.layer_norm(x, (n,), w, b), (x, w, b))
    norm, programs, blocks = _looped_norm(regions, rows)
    assert sorted(list(o.shape) for o in norm.outputs) == [[rows, n], [n], [n]]
    assert blocks > programs if sms == 1 else blocks == programs, (blocks, programs)


@pytest.fixture
def few_long_rows(monkeypatch, long_rows):
    """Few long rows at test sizes: 16 SMs (fewer than TWO_AXIS_FILL_ROWS x 16 = 64 rows is few),
    rows longer than 64; statistics tiles of 2 rows x 64 columns, each program taking 5 row blocks
    (one wave), dx blocks of 16 columns."""
    monkeypatch.setattr(tuning, "SM_COUNT", 16)
    monkeypatch.setattr(tuning, "TWO_AXIS_LOOP_TILE", 128)
    monkeypatch.setattr(tuning, "TWO_AXIS_TILE_MIN_COLS", 16)
    monkeypatch.setattr(tuning, "TWO_AXIS_TILE_WAVES", 1)  # 19 row blocks: 4 groups of 5, the last partly masked


def _tiled_norm(regions, rows: int, cols: int):
    """The one two-axis region of a norm's backward over few long rows: the statistics kernel
    over (column blocks, row groups) and the dx kernel over column blocks, two kernels in all."""
    assert _kernels(regions) == 2, [(r.id, r.executor, [s.sym.name for s in r.bsyms]) for r in regions]
    (norm,) = [r for r in regions if r.executor == "triton"]
    source = norm.generated.source
    assert norm.generated.kernels == 2 and "tiled by column blocks" in source, source
    assert "tl.atomic" not in source and "tl.debug_barrier" not in source, source
    stats, dx = norm.generated.specs
    assert stats.grid == [-(-cols // 64), 4], stats.grid  # 5 column blocks x 4 row groups
    assert dx.grid == [-(-cols // 16)] and dx.constexprs["BLOCK_M"] < rows, (dx.grid, dx.constexprs)
    return norm


NORMS = {  # name -> (function, parameters beside x)
    "layer_norm weight and bias": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), 2),
    "layer_norm weight only": (lambda x, w: F.layer_norm(x, (x.shape[-1],), w), 1),
    "layer_norm no weight": (lambda x: F.layer_norm(x, (x.shape[-1],)), 0),
    "rms_norm weight": (lambda x, w: _rms_norm(x) * w, 1),
    "rms_norm no weight": (lambda x: _rms_norm(x), 0),
}


def _rms_norm(x):
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


@pytest.mark.parametrize("norm", list(NORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_norm_backward_over_few_long_rows_is_two_tiled_kernels(few_long_rows, dtype, norm):
    """Long rows too few to give every SM a program of TWO_AXIS_FILL_ROWS (37 rows of 300 on 16
    SMs): one two-axis region tiled by column blocks, its statistics kernel storing each row's
    partials (the backward recomputes mean and rstd: LayerNorm's sum(dy * w * xhat) as
    coefficient partials, polynomial.py) and its dx kernel combining them and summing whole
    columns; dx and every weight's gradient as eager's, the same bits at a second run. Without a
    weight there is no column sum: dx is one row-reduction kernel."""
    rows, n = 37, 300
    fn, nparams = NORMS[norm]
    x = (torch.randn(rows, n, device=DEVICE) * 3 + 1).to(dtype).requires_grad_()
    params = [torch.randn(n, device=DEVICE).to(dtype).requires_grad_() for _ in range(nparams)]
    regions = _norm_backward_regions(fn, (x, *params))
    if not nparams:
        assert _kernels(regions) == 1 and not any(r.group.column_dims for r in regions if r.executor == "triton")
        return
    region = _tiled_norm(regions, rows, n)
    assert sorted(list(o.shape) for o in region.outputs) == sorted([[rows, n]] + [[n]] * nparams)


def _saved_statistics_backward(rms: bool):
    """A norm's backward from the forward's saved statistics (aten's native_layer_norm_backward,
    Apex, Megatron): one pass of row sums, then dx; dw and db by columns."""
    def backward(x, w, dy, mean, rstd):
        xhat = (x.float() - (0.0 if rms else mean)) * rstd
        wdy = dy.float() * w.float()
        dx = wdy - xhat * (xhat * wdy).mean(-1, keepdim=True)
        dx = (dx if rms else dx - wdy.mean(-1, keepdim=True)) * rstd
        sums = ((dy.float() * xhat).sum(0).to(w.dtype),)
        return (dx.to(x.dtype),) + (sums if rms else sums + (dy.float().sum(0).to(w.dtype),))
    return backward


@pytest.mark.parametrize("rms", [False, True], ids=["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_norm_backward_from_saved_statistics_over_few_long_rows(few_long_rows, dtype, rms):
    """The tiled pair where the backward is handed the forward's mean and rstd: one pass of
    partial row sums, then dx and the column sums; run on contiguous and on transposed inputs
    (another stride variant), every output as the float64 reference rounded once."""
    from fusion_groups import partitioned_group_from_fn

    fn = _saved_statistics_backward(rms)

    def make(layout=lambda t: t):
        x, dy = (layout(_t(37, 300, dtype=dtype) * 2 + 1) for _ in range(2))
        w = _t(300, dtype=dtype)
        mean, var = x.float().mean(-1, keepdim=True), x.float().var(-1, keepdim=True)
        return x, w, dy, mean, torch.rsqrt(var + 1e-5)

    group, _, order = partitioned_group_from_fn(fn, *make())
    assert group.column_dims == (0,) and group.reduction_dims == (1,)
    gen = tx.generate(group, DEVICE)
    assert gen.kernels == 2 and "tiled by column blocks" in gen.source, gen.source
    assert gen.source.count("tl.store(part") == 2 - rms, gen.source  # sum(dy * w * xhat) (and sum(dy * w))
    for layout in (lambda t: t, lambda t: t.t().contiguous().t()):
        args = make(layout)
        named = dict(zip(["x", "w", "dy", "mean", "rstd"], args))
        got = gen.fn(*[named[v.name] for v in group.inputs])
        wide = fn(*[a.double() for a in args])
        problem = checking.mismatch([got[i] for i in order], [r.to(dtype) for r in wide])
        assert problem is None, f"{problem}\n{gen.report_code()}"
        again = gen.fn(*[named[v.name] for v in group.inputs])
        assert all(torch.equal(a, b) for a, b in zip(got, again))


def test_few_long_rows_not_summable_by_tiles_stay_two_regions(few_long_rows):
    """A row reduction that needs the whole row first (softmax's sum of exp(x - max) under a
    column sum of the same rows) cannot be summed a tile at a time: support.takes_columns
    refuses the two-axis region over few long rows, saying why."""
    from fusion_groups import partitioned_group_from_fn
    from fusionlens.executors.triton import support
    from fusionlens.frontend import tracer as frontend
    from fusionlens.middle import passes

    def fn(x, dy):
        y = torch.softmax(x, -1)
        return y * (dy - (dy * y).sum(-1, keepdim=True)), dy.sum(0)

    x, dy = _t(37, 300), _t(37, 300)
    bsyms = passes.flatten(passes.optimise(passes.decompose(frontend.trace(fn, (x, dy), {}).trace)).bound_symbols)
    why = support.takes_columns((37, 300), (1,), (0,), bsyms)
    assert why is not None and "needs the whole row first" in why, why
    with pytest.raises(ValueError, match="2 regions"):
        partitioned_group_from_fn(fn, x, dy)
    assert support.takes_columns((37, 300), (1,), (0,), []) is None  # no row reduction to sum: tiled


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_llama_rms_norm_backward_over_long_rows_is_two_kernels(monkeypatch, long_rows, dtype):
    """Llama's RMSNorm over rows of 300 in chunks of 64, one SM: dx and the weight gradient in two
    kernels, as eager's."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from llama_block import LlamaRMSNorm

    monkeypatch.setattr(tuning, "SM_COUNT", 1)
    norm = LlamaRMSNorm(300).to(DEVICE)
    with torch.no_grad():
        norm.weight.normal_()
    norm.weight.data = norm.weight.data.to(dtype)
    x = torch.randn(3, 9, 300, device=DEVICE).to(dtype).requires_grad_()
    region, programs, blocks = _looped_norm(_norm_backward_regions(lambda x, w: _rms(norm, x, w), (x, norm.weight)),
                                            27)
    assert region.group.column_dims == (0, 1) and sorted(list(o.shape) for o in region.outputs) == [[3, 9, 300], [300]]
    assert blocks > programs


def _rms(norm, x, w):
    return torch.func.functional_call(norm, {"weight": w}, (x,))


def test_gpt2_training_step_has_each_layer_norm_backward_in_two_kernels():
    """A transformers GPT-2 built from a config (no download), one training step's gradients
    compiled with Triton: each LayerNorm's backward (ln_1, ln_2, ln_f) is one two-axis region of
    two kernels, and every parameter's gradient is eager's."""
    import zoo_imports

    if zoo_imports.transformers is None:
        pytest.skip("transformers is not installed")
    from fusionlens.driver import pipeline
    from fusionlens.options import CompileOptions

    config = zoo_imports.transformers.GPT2Config(n_layer=1, n_embd=24, n_head=2, vocab_size=40, n_positions=16,
                                                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                                 bos_token_id=0, eos_token_id=0)
    model = zoo_imports.transformers.GPT2LMHeadModel(config).to(DEVICE)
    names = [n for n, _ in model.named_parameters()]
    ids = torch.randint(0, 40, (2, 9), device=DEVICE)

    def step(*params):
        return torch.func.functional_call(model, dict(zip(names, params)), (ids,), {"labels": ids}).loss

    params = [p.detach().clone().requires_grad_() for p in model.parameters()]
    c = pipeline.compile_program(step, tuple(params), {}, CompileOptions(executors=("triton", "torch")))
    got = torch.autograd.grad(c.fn(*params, *c.constants), params)
    problem = checking.mismatch(list(got), list(torch.autograd.grad(step(*params), params)))
    assert problem is None, problem
    norms = [r for r in c.program("backward").plan.regions if r.executor == "triton" and r.group.column_dims]
    assert len(norms) == 3, [(r.id, r.group.domain, r.group.reduction_dims) for r in c.program("backward").plan.regions]
    for r in norms:
        assert r.generated.kernels == 2 and r.group.reduction_dims == (2,) and r.group.column_dims == (0, 1)
        assert [list(o.shape) for o in r.outputs].count([24]) >= 2, r.outputs  # the weight and bias gradients


@pytest.mark.parametrize("looped", [False, True], ids=["rows in registers", "looped rows"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_two_axis_kernels_on_strided_inputs(monkeypatch, dtype, looped):
    """The generated pair run directly on fresh inputs, contiguous and then transposed in memory
    (the launcher writes that stride variant): dx, dw and db as eager's, in that order; rows in
    registers, and looped over in chunks of 8 (12 columns: the last chunk partly masked)."""
    from fusion_groups import partitioned_group_from_fn

    monkeypatch.setattr(tuning, "SM_COUNT", 1)
    if looped:
        monkeypatch.setattr(tuning, "TWO_AXIS_MAX_ROW", 8)
        monkeypatch.setattr(tuning, "LOOP_BLOCK_N", 8)
    x, w, dy = _t(45, 12, dtype=dtype) * 2 + 1, _t(12, dtype=dtype), _t(45, 12, dtype=dtype)
    group, inputs, order = partitioned_group_from_fn(layer_norm_backward, x, w, dy)
    assert group.column_dims == (0,) and group.reduction_dims == (1,)
    gen = tx.generate(group, DEVICE)
    assert gen.kernels == 2 and ("passes over chunks of 8" in gen.source) == looped, gen.source
    for layout in (lambda t: t, lambda t: t.t().contiguous().t() if t.ndim == 2 else t):
        x, w, dy = (layout(t) for t in (_t(45, 12, dtype=dtype) * 2 + 1, _t(12, dtype=dtype), _t(45, 12, dtype=dtype)))
        got = gen.fn(*[{"x": x, "w": w, "dy": dy}[v.name] for v in group.inputs])
        wide = layer_norm_backward(x.double(), w.double(), dy.double())  # rounded once to the dtype
        problem = checking.mismatch([got[i] for i in order], [r.to(dtype) for r in wide])
        assert problem is None, f"{problem}\n{gen.report_code()}"
    assert not x.is_contiguous() and "strides (1, 45)" in gen.report_code()


# --- previews: the code shown where Triton cannot run, with the launches it would make ------

def _preview(fn, *args):
    """The regions of `fn` as a preview lowers them (source only: nothing built or run)."""
    from fusionlens.executors import lowering
    from fusionlens.frontend import tracer as frontend
    from fusionlens.middle import fusion, passes

    traced = frontend.trace(fn, args, {})
    flat = fusion.prepare(passes.optimise(passes.decompose(traced.trace)), [tx.EXECUTOR])
    return lowering.lower(flat, [tx.EXECUTOR], torch.device("cpu"), "P", source_only=True).regions


@pytest.mark.parametrize("case", ["pointwise", "split sum", "two-axis", "looped two-axis", "empty"])
def test_previews_count_the_kernels_they_would_launch(monkeypatch, case):
    """A preview's region reports the launches its code makes: one for a pointwise or one-pass
    region, two for a split reduction (its combine) and a norm's backward (row kernel, combine),
    none where every output is empty; as many as its launcher launches."""
    monkeypatch.setattr(tuning, "SM_COUNT", 2)
    monkeypatch.setattr(tuning, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(tuning, "LOOP_BLOCK_N", 16 if case != "looped two-axis" else 8)
    if case == "looped two-axis":
        monkeypatch.setattr(tuning, "TWO_AXIS_MAX_ROW", 8)
    t = lambda *s: torch.randn(*s)  # noqa: E731
    fn, args, want = {
        "pointwise": (lambda x: (x * 2).relu(), (t(4, 8),), 1),
        "split sum": (lambda x: x.sum(-1), (t(3, 100),), 2),
        "two-axis": (layer_norm_backward, (t(45, 12), t(12), t(45, 12)), 2),
        "looped two-axis": (layer_norm_backward, (t(45, 12), t(12), t(45, 12)), 2),
        "empty": (lambda x: x * 2, (t(0, 8),), 0),
    }[case]
    (region,) = _preview(fn, *args)
    source = region.generated.report_code()
    assert region.fn is None and region.generated.kernels == want, source
    assert ("passes over chunks of 8" in source) == (case == "looped two-axis"), source
    launches = [ln for ln in source.splitlines() if ln.lstrip().startswith("fl_") and "](" in ln]
    assert len(launches) == want, source
