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

pytest.importorskip("triton")

from fusion_groups import group_from_fn  # noqa: E402
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
    gradients, by the id of the one recomputing its statistics (var_mean): it, and the regions
    making only [n_embd] results (weight and bias gradients) at its lines from its inputs or outputs."""
    backward = next(p for p in rep.programs if p.kind == "backward")
    regions = [r for r in backward.regions if r.executor == "triton"] + [
        r for p in backward.previews if p.executor == "triton" for r in p.regions]
    names = lambda infos: {t.name for t in infos}  # noqa: E731
    lines = lambda r: {(s.file, s.line) for s in r.source_lines}  # noqa: E731
    out = {}
    for norm in (r for r in regions if "prims.var_mean" in r.ops):
        mine = names(norm.inputs) | names(norm.outputs)
        out[norm.id] = [norm] + [r for r in regions if "prims.var_mean" not in r.ops and r.outputs
                                 and all(o.shape == [128] for o in r.outputs) and names(r.inputs) & mine
                                 and lines(r) <= lines(norm)]
    return out


def test_gpt_training_step_layer_norm_backward_is_two_kernels(monkeypatch):
    """Each LayerNorm of a GPT training step (examples/train_gpt.py) has its backward in two
    kernels: dx (a row reduction) and both parameter gradients (one column reduction that
    recomputes dy * xhat from dy, x and the row statistics), and moves fewer bytes than the
    three regions of the greedy partition, which wrote dy * xhat out to read it back."""
    from pathlib import Path

    from fusionlens.driver.targets import compile_target
    from fusionlens.middle import fusion
    from fusionlens.options import CompileOptions

    path = str(Path(__file__).resolve().parents[1] / "examples" / "train_gpt.py")
    compile_gpt = lambda: compile_target(path, "gpt_loss_example", options=CompileOptions(),  # noqa: E731
                                         benchmark=False, device="cpu")
    norms = _layer_norm_backwards(compile_gpt())
    assert len(norms) == 5, list(norms)  # ln_1 and ln_2 of two blocks, ln_f
    for key, regions in norms.items():
        assert sum(r.kernels for r in regions) <= 2, (key, [(r.id, r.ops) for r in regions])
        assert sorted(len(r.outputs) for r in regions) == [2, 3], (key, [(r.id, r.outputs) for r in regions])
    monkeypatch.setattr(fusion._Regroup, "run", lambda self: None)  # the greedy partition alone
    greedy = _layer_norm_backwards(compile_gpt())
    assert len(greedy) == 5
    for regions, before in zip(norms.values(), greedy.values()):  # the same norms, in program order
        assert len(before) == 3, [(r.id, r.ops) for r in before]
        assert sum(r.cost.bytes for r in regions) < sum(r.cost.bytes for r in before), (regions, before)
