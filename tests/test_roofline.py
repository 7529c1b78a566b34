"""Cost and roofline of every region (fusionlens/middle/cost.py, fusionlens/report/roofline.py; docs/roofline.md):
the arithmetic against hand counts per region kind, the GPU table, and what a report on a
CPU carries (estimates for the target GPU, previews with a Region's fields)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import compiler
from fusionlens.report import roofline
from fusionlens.options import CompileOptions
from fusionlens.report.schema import CompileReport

REPO = Path(__file__).resolve().parents[1]
F32 = 4


def _report(fn, *args, **kw):
    return compiler.compile(fn, *args, executors=["torch"], **kw)


def _region_of(report, op_name):
    return next(r for r in report.forward.regions if op_name in r.ops)


# --- cost: hand counts ----------------------------------------------------------------------

def test_pointwise_cost_counts_each_element_with_transcendental_weights():
    def f(x, y):
        return torch.exp(x) * 2 + y  # exp: 2 FLOPs an element, mul and add: 1 each

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    rep = compiler.compile(f, x, y)  # default executors: a Triton preview on a CPU
    assert sum(r.cost.flops for r in rep.forward.regions) == 32 * (2 + 1 + 1)
    exp = _region_of(rep, "torch.exp")
    assert (exp.cost.bytes, exp.cost.flops, exp.cost.math) == (2 * 32 * F32, 64, "fp32")
    p0, = next(p for p in rep.forward.previews if p.executor == "triton").regions
    # fused: x and y read once, the result written once; nothing in between touches memory
    assert (p0.cost.bytes, p0.cost.flops, p0.cost.math) == (3 * 32 * F32, 128, "fp32")


def test_reduction_cost_counts_each_input_element():
    rep = _report(lambda x: x.amax(-1), torch.randn(16, 32))
    r = _region_of(rep, "torch.amax")
    assert r.cost.flops == 16 * 32
    assert r.cost.bytes == (16 * 32 + 16) * F32


def test_views_move_nothing():
    rep = _report(lambda x: x.transpose(0, 1) + 1, torch.randn(8, 4))
    t = _region_of(rep, "torch.transpose")
    assert (t.cost.bytes, t.cost.flops) == (0, 0)
    assert t.roofline.min_ms == 0


@pytest.mark.parametrize("case", ["linear", "bmm", "conv2d", "sdpa_causal", "einsum"])
def test_library_call_flops_by_their_formulas(case):
    r = torch.randn
    if case == "linear":
        fn, op = (lambda x, w, b: F.linear(x, w, b)), "torch.nn.functional.linear"
        args = r(64, 128), r(256, 128), r(256)
        flops = 2 * 64 * 256 * 128 + 64 * 256  # 2MNK, plus the bias added to each output
        nbytes = (64 * 128 + 256 * 128 + 256 + 64 * 256) * F32
    elif case == "bmm":
        fn, args, op = (lambda a, b: a @ b), (r(2, 3, 4, 5), r(2, 3, 5, 6)), "torch.matmul"
        flops, nbytes = 2 * (2 * 3) * 4 * 6 * 5, (2 * 3) * (4 * 5 + 5 * 6 + 4 * 6) * F32
    elif case == "conv2d":
        fn = lambda x, w, b: F.conv2d(x, w, b, padding=1)  # noqa: E731
        args, op = (r(1, 3, 8, 8), r(4, 3, 3, 3), r(4)), "torch.nn.functional.conv2d"
        flops = 2 * (4 * 8 * 8) * (3 * 3 * 3) + 4 * 8 * 8
        nbytes = (3 * 64 + 4 * 27 + 4 + 4 * 64) * F32
    elif case == "sdpa_causal":
        fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
        args, op = (r(2, 4, 8, 16), r(2, 4, 8, 16), r(2, 4, 8, 16)), "torch.nn.functional.scaled_dot_product_attention"
        kept = 8 * 9 // 2  # query i sees keys 0..i
        flops, nbytes = 2 * 4 * kept * (2 * 16 + 2 * 16 + 5), 4 * (2 * 4 * 8 * 16) * F32
    else:
        fn, args, op = (lambda a, b: torch.einsum("ij,jk->ik", a, b)), (r(3, 5), r(5, 7)), "torch.einsum"
        flops, nbytes = 2 * 3 * 5 * 7, (15 + 35 + 21) * F32
    region = _region_of(_report(fn, *args), op)
    assert (region.cost.flops, region.cost.bytes) == (flops, nbytes)


def test_the_peak_follows_dtype_and_torch_matmul_precision():
    a = torch.randn(32, 32)
    assert _region_of(_report(torch.matmul, a, a), "torch.matmul").cost.math == "fp32"  # torch's default
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        mm = _region_of(_report(torch.matmul, a, a), "torch.matmul")
    finally:
        torch.set_float32_matmul_precision(before)
    assert mm.cost.math == "tf32" and mm.roofline.peak_tflops == roofline.find("H100").tf32_tflops
    b = a.bfloat16()
    assert _region_of(_report(torch.matmul, b, b), "torch.matmul").cost.math == "bf16"
    assert _region_of(_report(torch.exp, b), "torch.exp").cost.math == "fp32"  # CUDA cores, not tensor cores


# --- roofline arithmetic --------------------------------------------------------------------

def test_roofline_memory_and_compute_bound():
    h100 = roofline.find("H100")
    mem = roofline.roofline(3_350_000_000, 67_000_000, "fp32", h100, estimate=False, measured_ms=2.0)
    assert mem.bound == "memory" and math.isclose(mem.min_ms, 1.0) and mem.pct_of_peak == 50.0
    comp = roofline.roofline(1000, 67_000_000_000, "fp32", h100, estimate=False, measured_ms=4.0)
    assert comp.bound == "compute" and math.isclose(comp.min_ms, 1.0) and comp.pct_of_peak == 25.0
    tc = roofline.roofline(1000, 989_500_000_000, "bf16", h100, estimate=False)
    assert math.isclose(tc.min_ms, 1.0) and tc.pct_of_peak is None  # not measured
    est = roofline.roofline(3_350_000_000, 0, "fp32", h100, estimate=True, measured_ms=2.0)
    assert est.pct_of_peak is None and est.estimate  # a time from another device is no percentage
    assert roofline.headroom_ms(2.0, mem) == pytest.approx(1.0) and roofline.headroom_ms(2.0, est) is None


@pytest.mark.parametrize("name,key", [
    ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H200", "H200"),
    ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"), ("NVIDIA L4", "L4"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("h100 pcie", "H100 PCIe"), ("NVIDIA L40S", None), ("", None)])
def test_gpu_table_lookup(name, key):
    found = roofline.find(name)
    assert (found.name if found else None) == key


def test_the_table_has_the_datasheet_figures_the_docs_cite():
    page = (REPO / "docs" / "roofline.md").read_text()
    for g in roofline.GPUS:
        row = f"| `{g.name}` |"
        assert row in page, row
        cells = page.split(row)[1].split("\n")[0].split("|")[1:5]
        assert [float(c) for c in cells] == [g.hbm_gbs, g.fp32_tflops, g.tf32_tflops, g.bf16_tflops], g.name


def test_roofline_imports_no_torch_and_the_extension_offers_its_names():
    code = "import sys, fusionlens.report.roofline; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
    pkg = json.loads((REPO / "vscode-extension" / "package.json").read_text())
    setting = pkg["contributes"]["configuration"]["properties"]["fusionlens.targetGpu"]
    assert setting["enum"] == roofline.names() and setting["default"] == roofline.DEFAULT_TARGET


# --- reports on a CPU -----------------------------------------------------------------------

def test_a_cpu_report_estimates_every_region_and_preview_for_the_target_gpu(monkeypatch):
    def f(x, w):
        return torch.softmax(F.linear(x, w), -1) * 2

    args = torch.randn(64, 128), torch.randn(256, 128)
    rep = CompileReport.from_json(compiler.compile(f, *args, benchmark=True, repeats=3).to_json())
    assert rep.peaks.device == "H100" and rep.peaks.estimate and rep.peaks.copy_device == "cpu"
    assert rep.peaks.copy_gbs > 0
    for r in rep.forward.regions:
        assert r.roofline.estimate and r.roofline.pct_of_peak is None and r.roofline.device == "H100"
        assert r.roofline.min_ms == pytest.approx(max(r.cost.bytes / 3350e9, r.cost.flops / 67e12) * 1e3, rel=1e-3)
    assert rep.forward.previews
    for p in rep.forward.previews:
        for region in p.regions:
            assert region.cost is not None and region.timing is None and region.executor == p.executor
            assert region.roofline.estimate and region.roofline.device == "H100"
            assert region.inputs[0].shape and region.outputs[0].dtype == "float32"

    on_l4 = compiler.compile(f, *args, options=CompileOptions(gpu="L4"))
    assert on_l4.peaks.device == "L4" and on_l4.peaks.copy_gbs is None  # not benchmarked
    assert on_l4.forward.regions[0].roofline.min_ms > rep.forward.regions[0].roofline.min_ms  # an L4 is slower
    monkeypatch.setenv("FUSIONLENS_GPU", "no such gpu")
    unknown = compiler.compile(f, *args)
    assert unknown.peaks.device == "H100"
    assert any("unknown target GPU 'no such gpu'" in d.message for d in unknown.diagnostics)


def test_cli_names_the_gpu_and_refuses_an_unknown_one(capsys):
    from fusionlens import cli

    path = str(REPO / "examples" / "softmax.py")
    assert cli.main(["compile", path, "--target", "softmax_example", "--no-benchmark", "--gpu", "l4"]) == 0
    out = capsys.readouterr().out
    assert "roofline on L4, est." in out and "est " in out
    with pytest.raises(SystemExit):
        cli.main(["compile", path, "--gpu", "TPU"])
    assert "unknown GPU 'TPU'" in capsys.readouterr().err


def test_gpu_scripts_parse_and_the_roofline_check_runs_dry_on_a_cpu(tmp_path):
    assert subprocess.run(["bash", "-n", str(REPO / "benchmarks" / "gpu_check.sh")]).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSIONLENS_")}
    env.pop("TRITON_INTERPRET", None)  # torch regions: Triton's interpreter takes minutes at these sizes
    env["PYTHONPATH"] = str(REPO)
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "roofline_check.py"), "--dry-run",
                          "--examples", "softmax.py", "--target", "softmax_example"],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "rooflines on H100 (estimates)" in out.stdout and "softmax.py:softmax_example" in out.stdout
    assert "every region's record_function is in torch.profiler" in out.stdout
