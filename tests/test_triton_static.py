"""The static analysis of generated Triton kernels (docs/kernels.md), judged for an H100 (sm_90)
without a GPU: each kernel is generated for shapes traced on the meta device (nothing is
allocated), compiled by Triton's ahead-of-time path in one subprocess, and its launch, widest
loads, spills and passes over memory are held to the thresholds a GPU engineer would ask for.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fusionlens.ops import prims

pytest.importorskip("triton")

from fusion_groups import group_from_fn, layer_norm_backward, partitioned_group_from_fn  # noqa: E402
from fusionlens.executors.triton import analysis, static  # noqa: E402
from fusionlens.executors.triton.module import build_source  # noqa: E402
from fusionlens.executors.triton.runtime import _contiguous_key  # noqa: E402
from fusionlens.report import kernels as K, schema as R  # noqa: E402
from test_triton_hopper import _ptxas_problem  # noqa: E402

H100_SMS = K.SMS["H100"].sms
META = torch.device("meta")


def _kernels(fn, *shapes, dtype=torch.float32):
    args = [torch.empty(s, dtype=dtype, device=META) for s in shapes]
    group, _ = group_from_fn(fn, *args)
    an = analysis._Analysis(group)
    source, _, _, specs = build_source(group, an, _contiguous_key(an))
    return source, specs


def _layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


CASES = {
    "column sum [8192, 4096] f32": (lambda x: x.sum(0), [(8192, 4096)], torch.float32),
    "row sum [16, 2^20] f32": (lambda x: x.sum(-1), [(16, 1 << 20)], torch.float32),
    "softmax [4096, 4096] bf16": (lambda x: torch.softmax(x, -1), [(4096, 4096)], torch.bfloat16),
    "layer_norm [8192, 8192] bf16": (_layer_norm, [(8192, 8192), (8192,), (8192,)], torch.bfloat16),
    "softmax [512, 65536] f32": (lambda x: torch.softmax(x, -1), [(512, 65536)], torch.float32),
    "rms_norm [64, 131072] bf16": (lambda x, w: x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(
        x.dtype) * w, [(64, 131072), (131072,)], torch.bfloat16),
}


@pytest.fixture(scope="module")
def analysed():
    problem = _ptxas_problem()
    if problem:
        pytest.skip(problem)
    out = {}
    items = []
    for label, (fn, shapes, dtype) in CASES.items():
        source, specs = _kernels(fn, *shapes, dtype=dtype)
        out[label] = specs
        items += [(source, s) for s in specs]
    rows = iter(static.compile_kernels(items, 90))
    result = {}
    for label, specs in out.items():
        launches = static.launches(specs)
        statics = [static.kernel_static(next(rows), s, lc, "H100") for s, lc in zip(specs, launches)]
        result[label] = (specs, launches, statics, K.findings(launches, statics, specs[0].row_bytes))
    return result


@pytest.mark.parametrize("label", ["column sum [8192, 4096] f32", "row sum [16, 2^20] f32"])
def test_split_reductions_fill_the_h100(analysed, label):
    specs, launches, statics, findings = analysed[label]
    assert len(specs) == 2, "a split reduction and its combine kernel"
    assert K.programs(launches[0]) >= H100_SMS, launches[0]
    assert not any("of the H100" in f for f in findings), findings
    for s in statics:
        assert not s.error and s.spill_bytes in (0, None), s
    assert statics[0].load_bits == 128, statics[0]


@pytest.mark.parametrize("label", ["softmax [4096, 4096] bf16", "layer_norm [8192, 8192] bf16"])
def test_rows_in_registers_read_once_with_128_bit_loads(analysed, label):
    specs, launches, statics, findings = analysed[label]
    (s,) = statics
    assert not s.error, s.error
    assert s.load_bits == 128 and s.store_bits == 128, s
    assert s.passes == 1 and s.read_ratio == pytest.approx(1.0, abs=0.01), s
    if s.spill_bytes is not None:  # cuobjdump was there to read it
        assert s.spill_bytes == 0, s
    assert s.blocks_per_sm >= 1 and s.waves > 0


@pytest.mark.parametrize("label", ["softmax [512, 65536] f32", "rms_norm [64, 131072] bf16"])
def test_long_rows_read_their_input_at_most_twice(analysed, label):
    specs, launches, statics, findings = analysed[label]
    (s,) = statics
    assert not s.error, s.error
    assert s.passes <= 2 and s.read_ratio <= 2.01, s
    assert s.load_bits == 128, s
    if s.spill_bytes is not None:
        assert s.spill_bytes == 0, s


def _partitioned_kernels(fn, *shapes, dtype):
    """The one group the partitioner makes of `fn` (traced on the meta device), its source and its
    kernels for contiguous inputs."""
    args = [torch.empty(s, dtype=dtype, device=META) for s in shapes]
    group, _, _ = partitioned_group_from_fn(fn, *args)
    an = analysis._Analysis(group)
    source, _, _, specs = build_source(group, an, _contiguous_key(an))
    return group, source, specs


def test_layer_norm_backward_two_axis_kernel_fills_the_h100():
    """LayerNorm's backward at [8192, 8192] bf16 (a 70B-class hidden size), compiled for sm_90:
    one two-axis region, a row kernel with at least one program an SM keeping the partial weight
    and bias gradients, reading dy and x once with 128-bit loads, spilling nothing; its combine
    kernel's partials are a few percent of the bytes the row kernel reads."""
    problem = _ptxas_problem()
    if problem:
        pytest.skip(problem)
    group, source, specs = _partitioned_kernels(layer_norm_backward, (8192, 8192), (8192,), (8192, 8192),
                                                dtype=torch.bfloat16)
    assert group.reduction_dims == (1,) and group.column_dims == (0,)
    assert len(specs) == 2 and [len(o.shape) for o in group.outputs].count(1) == 2, source
    rows = iter(static.compile_kernels([(source, s) for s in specs], 90))
    launches = static.launches(specs)
    statics = [static.kernel_static(next(rows), s, lc, "H100") for s, lc in zip(specs, launches)]
    found = K.findings(launches, statics, specs[0].row_bytes)
    assert K.programs(launches[0]) >= H100_SMS, launches[0]
    assert not any("of the H100" in f for f in found[:1]), found
    main, combine = statics
    assert not main.error and not combine.error, (main.error, combine.error)
    assert main.load_bits == 128 and main.store_bits == 128, main
    assert main.passes == 1 and main.read_ratio == pytest.approx(1.0, abs=0.01), main
    if main.spill_bytes is not None:
        assert main.spill_bytes == 0 and combine.spill_bytes == 0, (main, combine)
    assert main.waves is not None and main.waves <= 1.0, main  # one wave: every program resident at once
    partial_bytes = 2 * K.programs(launches[0]) * 8192 * 4
    assert partial_bytes < 0.05 * specs[0].bytes_read, (partial_bytes, specs[0].bytes_read)


def _layer_norm_backward_saved(x, w, dy, mean, rstd):
    """LayerNorm's backward from the forward's saved statistics (aten's native_layer_norm_backward,
    Apex, Megatron): the row sums of dy * w * xhat and dy * w, then dx; dw and db by columns."""
    xhat = (x.float() - mean) * rstd
    wdy = dy.float() * w.float()
    dx = (wdy - xhat * (xhat * wdy).mean(-1, keepdim=True) - wdy.mean(-1, keepdim=True)) * rstd
    return dx.to(x.dtype), (dy.float() * xhat).sum(0).to(w.dtype), dy.float().sum(0).to(w.dtype)


@pytest.mark.parametrize("saved", [True, False], ids=["saved statistics", "recomputed statistics"])
@pytest.mark.parametrize("rows,cols", [(4096, 16384), (1024, 65536)])
def test_layer_norm_backward_over_long_rows_is_two_kernels_without_spills(rows, cols, saved):
    """Rows longer than tuning.TWO_AXIS_MAX_ROW, bf16, compiled for sm_90: still one two-axis
    region of two kernels, the row kernel looping over chunks (registers hold a chunk, not the
    row): no spills, 128-bit loads and stores, at least one program an SM, one wave; dy and x
    read twice from the saved mean and rstd (the statistics pass, the dx pass), three times
    where the backward recomputes them (a Welford pass first)."""
    problem = _ptxas_problem()
    if problem:
        pytest.skip(problem)
    bf16 = [torch.empty(s, dtype=torch.bfloat16, device=META) for s in ((rows, cols), (cols,), (rows, cols))]
    stats = [torch.empty(rows, 1, device=META) for _ in range(2)]  # float32, as the forward saves them
    if saved:
        group, _, _ = partitioned_group_from_fn(_layer_norm_backward_saved, *bf16, *stats)
    else:
        group, _, _ = partitioned_group_from_fn(layer_norm_backward, *bf16)
    an = analysis._Analysis(group)
    source, _, _, specs = build_source(group, an, _contiguous_key(an))
    assert group.reduction_dims == (1,) and group.column_dims == (0,)
    assert len(specs) == 2 and "for start in range(0, " in source and "passes over chunks" in source, source
    rows_out = iter(static.compile_kernels([(source, s) for s in specs], 90))
    launches = static.launches(specs)
    main, combine = [static.kernel_static(next(rows_out), s, lc, "H100") for s, lc in zip(specs, launches)]
    assert not main.error and not combine.error, (main.error, combine.error)
    assert K.programs(launches[0]) >= H100_SMS, launches[0]
    assert main.load_bits == 128 and main.store_bits == 128, main
    passes = 2 if saved else 3
    assert main.passes == passes and main.read_ratio <= passes + 0.01, main
    if main.spill_bytes is not None:
        assert main.spill_bytes == 0 and combine.spill_bytes == 0, (main, combine)
    assert main.waves is not None and main.waves <= 1.0, main  # one wave: every program resident at once
    # the partial dw and db rows, written and read back by the combine, cost less than a third read
    # of dy and x (what the column sums as a region of their own would read)
    partial_bytes = 2 * 2 * K.programs(launches[0]) * cols * 4
    assert partial_bytes < specs[0].min_read, (partial_bytes, specs[0].min_read)


@pytest.mark.parametrize("saved", [True, False], ids=["saved statistics", "recomputed statistics"])
@pytest.mark.parametrize("rows,cols,dtype", [(256, 262144, torch.bfloat16), (64, 131072, torch.float32)],
                         ids=["[256, 262144] bf16", "[64, 131072] f32"])
def test_layer_norm_backward_over_few_long_rows_is_two_tiled_kernels(rows, cols, dtype, saved):
    """Few long rows (fewer than TWO_AXIS_FILL_ROWS x 132 rows of more than TWO_AXIS_MAX_ROW),
    compiled for sm_90: one two-axis region of two kernels tiled by column blocks
    (two_axis_tiles.py), each covering every SM at least twice, no spills, 128-bit loads and
    stores, dy and x read once a kernel (twice in all) whether the backward is handed mean and
    rstd or recomputes them; the row partials are a fraction of a percent of what they read."""
    problem = _ptxas_problem()
    if problem:
        pytest.skip(problem)
    big = [torch.empty(s, dtype=dtype, device=META) for s in ((rows, cols), (cols,), (rows, cols))]
    stats = [torch.empty(rows, 1, device=META) for _ in range(2)]
    fn = _layer_norm_backward_saved if saved else layer_norm_backward
    group, _, _ = partitioned_group_from_fn(fn, *big, *stats) if saved else partitioned_group_from_fn(fn, *big)
    assert group.reduction_dims == (1,) and group.column_dims == (0,)
    an = analysis._Analysis(group)
    source, _, _, specs = build_source(group, an, _contiguous_key(an))
    assert len(specs) == 2 and "tiled by column blocks" in source, source
    rows_out = iter(static.compile_kernels([(source, s) for s in specs], 90))
    launches = static.launches(specs)
    statics = [static.kernel_static(next(rows_out), s, lc, "H100") for s, lc in zip(specs, launches)]
    found = K.findings(launches, statics, specs[0].row_bytes)
    assert not any("of the H100" in f for f in found), found
    for s in statics:
        assert not s.error, s.error
        assert s.load_bits == 128 and s.passes == 1, s
        if s.spill_bytes is not None:
            assert s.spill_bytes == 0, s
    # the statistics kernel: programs for several waves, the last one's idle SMs under a quarter
    # of the time; it stores a few floats a row (scalar stores). The dx kernel: at least two
    # programs an SM, dx stored 128 bits a thread
    waves = statics[0].waves
    assert K.programs(launches[0]) >= 2 * H100_SMS and waves >= 2, (launches[0], statics[0])
    assert math.ceil(waves) - waves < 0.25 * math.ceil(waves), statics[0]
    assert K.programs(launches[1]) >= 2 * H100_SMS and statics[1].store_bits == 128, (launches[1], statics[1])
    partial_bytes = rows * -(-cols // specs[0].constexprs["BLOCK_N"]) * 4 * (5 if not saved else 2)
    assert sum(s.bytes_read for s in specs) <= 2 * specs[0].min_read + partial_bytes, specs
    assert partial_bytes < 0.001 * specs[0].min_read, (partial_bytes, specs[0].min_read)


def test_two_axis_kernels_for_rows_of_any_length():
    """support.takes_columns: 8192 columns take a two-axis kernel, and so do 16384 (its rows
    looped over: two_axis.py), and rows too few to give each SM a program of TWO_AXIS_FILL_ROWS
    (tiled by column blocks: two_axis_tiles.py); a symbolic row length does not, nor a column amax;
    tuning.resident_programs keeps the row kernel in one wave (one 16-warp program an SM at 8192
    columns, two at 768)."""
    from fusionlens.executors.triton import support, tuning

    assert support.takes_columns((8192, 8192), (1,), (0,), []) is None
    assert support.takes_columns((4096, 16384), (1,), (0,), []) is None
    assert support.takes_columns((256, 262144), (1,), (0,), []) is None  # few long rows: tiled (two_axis_tiles.py)
    assert support.takes_columns((256, 8192), (1,), (0,), []) is None  # rows in registers: no partial row a block
    assert "symbolic" in support.takes_columns((torch.SymInt, 64), (1,), (0,), [])  # any non-int size
    amax = type("B", (), {"sym": prims.amax, "args": (torch.empty(4, 8, device=META), (0,))})()
    assert "float sums only" in support.takes_columns((4, 8), (1,), (0,), [amax])
    assert tuning.resident_programs(16, 8192) == 1 and tuning.resident_programs(4, 2048) == 2


def test_findings_say_what_a_profiler_would():
    launch = R.KernelLaunch("k", [16], 4)
    s = K.complete(R.KernelStatic("k", "sm_90", "H100", load_bits=32, store_bits=32, regs=40, spill_bytes=0,
                                  passes=3, read_ratio=3.0), launch)
    found = K.findings([launch], [s], row_bytes=256 * 1024)
    assert "16 programs on 132 SMs: 12% of the H100" in found
    assert any(f.startswith("scalar loads") for f in found)
    assert "3 passes over a 256 KiB row" in found
    assert any("3.0x" in f for f in found)
    # 40 registers a thread, allocated 1280 a warp: 51 warps of the SM's 65536 registers, 12 blocks of 4
    assert s.blocks_per_sm == 12 and s.waves == pytest.approx(16 / (132 * 12), abs=1e-3)
    # 255 registers a thread: 8 warps an SM, one block of 8 warps; shared memory bounds it too
    assert K.blocks_per_sm(K.SMS["H100"], 8, 255, 0) == 1
    assert K.blocks_per_sm(K.SMS["H100"], 1, 32, 100 * 1024) == 2
    assert K.markdown(R.Region("R0", "triton", [], [], "", [], [], launch=[launch], static=[s], findings=found))


def test_launch_is_reported_without_compiling():
    source, specs = _kernels(lambda x: torch.softmax(x, -1), (64, 1000))
    (launch,) = static.launches(specs)
    assert launch.grid == [math.ceil(64 / launch.blocks["BLOCK_M"])] and launch.num_warps >= 1
    assert "BLOCK_N" in launch.blocks


def test_report_previews_carry_launch_static_and_findings_for_hover_and_page():
    """On a CPU without the interpreter Triton only previews its code: the preview's kernels
    are analysed all the same, and the hover and the HTML page show them."""
    import os

    from fusionlens.driver import api
    from fusionlens.options import CompileOptions
    from fusionlens.report.html import kernels as page_kernels

    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("the interpreter makes Triton run here rather than preview")
    x = torch.randn(8, 3000)
    rep = api.compile(lambda x: torch.softmax(x, -1), x, options=CompileOptions(static_kernels=True))
    previews = [p for p in rep.forward.previews if p.executor == "triton"]
    assert previews, [p.executor for p in rep.forward.previews]
    (region,) = previews[0].regions
    (launch,) = region.launch
    (s,) = region.static
    assert launch.grid == [8] and s.arch == "sm_90" and s.load_bits == 128 and not s.error, (launch, s)
    assert "8 programs on 132 SMs: 6% of the H100" in region.findings
    assert any("8 programs on 132 SMs" in line for line in K.markdown(region))
    html = page_kernels.table(rep)
    assert "Triton kernels" in html and "sm_90" in html and "8 programs on 132 SMs" in html
    without = api.compile(lambda x: torch.softmax(x, -1), x, options=CompileOptions())
    (plain,) = [p for p in without.forward.previews if p.executor == "triton"][0].regions
    assert plain.launch and not plain.static  # launch always; the compile only when asked


def test_the_examples_kernels_for_sm90():
    """Every Triton kernel the norm and softmax examples preview here, compiled for an H100:
    128-bit loads, no spills, each input read once (their rows fit in registers)."""
    import os
    from pathlib import Path

    from fusionlens.driver.targets import compile_target
    from fusionlens.options import CompileOptions
    from fusionlens.report.discovery import find_targets

    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("the interpreter makes Triton run here rather than preview")
    seen = 0
    for name in ("norms.py", "softmax.py"):
        path = str(Path(__file__).resolve().parents[1] / "examples" / name)
        for t in find_targets(Path(path).read_text(), path):
            rep = compile_target(path, t.name, options=CompileOptions(static_kernels=True), benchmark=False,
                                 device="cpu")
            for r in (r for p in rep.forward.previews if p.executor == "triton" for r in p.regions):
                for s in r.static:
                    seen += 1
                    assert not s.error and s.load_bits == 128 and s.spill_bytes in (0, None), (t.name, r.id, s)
                    assert s.passes == 1 and s.read_ratio == pytest.approx(1.0, abs=0.01), (t.name, r.id, s)
    assert seen >= 10


def _layer_norm_backwards(rep) -> dict[str, list]:
    """The Triton regions (or previews) of a training report's backward that make a LayerNorm's
    gradients, by the id of the one making dx from the forward's saved statistics (mean and rstd:
    two [rows, 1] inputs): it, and the regions making only [n_embd] results (weight and bias
    gradients) at its lines from its inputs or outputs."""
    backward = next(p for p in rep.programs if p.kind == "backward")
    regions = [r for r in backward.regions if r.executor == "triton"] + [
        r for p in backward.previews if p.executor == "triton" for r in p.regions]
    names = lambda infos: {t.name for t in infos}  # noqa: E731
    lines = lambda r: {(s.file, s.line) for s in r.source_lines}  # noqa: E731
    stats = lambda r: [t for t in r.inputs if len(t.shape) > 1 and t.shape[-1] == 1]  # noqa: E731
    out = {}
    for norm in (r for r in regions if len(stats(r)) == 2 and any(len(o.shape) > 1 for o in r.outputs)):
        mine = names(norm.inputs) | names(norm.outputs)
        out[norm.id] = [norm] + [r for r in regions if r is not norm and r.outputs
                                 and all(o.shape == [128] for o in r.outputs) and names(r.inputs) & mine
                                 and lines(r) <= lines(norm)]
    return out


def test_gpt_training_step_layer_norm_backward_is_two_kernels(monkeypatch):
    """Each LayerNorm of a GPT training step (examples/train_gpt.py) has its backward in one
    two-axis region of two kernels: dx with each program's partial weight and bias gradients,
    then their combine; it moves fewer bytes than the three regions of the greedy partition
    (which wrote dy * xhat out to read it back) and than dx and the column sums as two regions
    (which read dy and x twice)."""
    from pathlib import Path

    from fusionlens.driver.targets import compile_target
    from fusionlens.middle import regroup
    from fusionlens.options import CompileOptions

    path = str(Path(__file__).resolve().parents[1] / "examples" / "train_gpt.py")
    compile_gpt = lambda: compile_target(path, "gpt_loss_example", options=CompileOptions(),  # noqa: E731
                                         benchmark=False, device="cpu")
    norms = _layer_norm_backwards(compile_gpt())
    assert len(norms) == 5, list(norms)  # ln_1 and ln_2 of two blocks, ln_f
    for key, regions in norms.items():
        (norm,) = regions  # a preview (no GPU, no interpreter): its launches are the kernels it would run
        assert [lc.kernel for lc in norm.launch] == [f"fl_{norm.id}_kernel", f"fl_{norm.id}_combine"], norm.launch
        assert norm.kernels == 2, norm  # the report's count, as the hover and the page show it
        # dw and db (and a Linear's bias gradient where it sums the same dy over the same rows)
        assert [o.shape for o in norm.outputs].count([128]) >= 2, (key, norm.outputs)
        assert "_combine[" in norm.code and "for blk in range(pid, " in norm.code, norm.code
    monkeypatch.setattr(regroup.Regroup, "merge_columns", lambda self: False)  # dx and the columns apart
    apart = _layer_norm_backwards(compile_gpt())
    monkeypatch.setattr(regroup.Regroup, "run", lambda self: None)  # the greedy partition alone
    greedy = _layer_norm_backwards(compile_gpt())
    assert len(greedy) == len(apart) == 5
    for regions, two, before in zip(norms.values(), apart.values(), greedy.values()):  # the same norms, in order
        assert len(two) == 2 and len(before) == 3, ([(r.id, r.ops) for r in two], [(r.id, r.ops) for r in before])
        assert sum(r.cost.bytes for r in regions) < sum(r.cost.bytes for r in two) < \
            sum(r.cost.bytes for r in before), (regions, two, before)
