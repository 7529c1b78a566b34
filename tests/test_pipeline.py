"""The pipeline in one place: every stage recorded in order, and printed under FUSIONLENS_DEBUG."""

import torch

import compiler
from fusionlens import executors
from fusionlens.driver import pipeline
from fusionlens.options import CompileOptions
from fusionlens.report.schema import TRACE_STAGES
from fusion_executor import TorchFusion


def _mlp(x, w):
    return torch.softmax(torch.relu(x @ w) * 2, -1)


def _inputs():
    return torch.randn(4, 8), torch.randn(8, 8)


def test_report_holds_every_stage_in_pipeline_order():
    rep = compiler.compile(_mlp, *_inputs(), executors=["torch"])
    assert list(rep.forward.traces) == list(TRACE_STAGES)
    for stage, source in rep.forward.traces.items():
        assert f"# FusionLens trace · stage: {stage}" in source


def test_fusion_stage_is_the_trace_the_partitioner_reads(monkeypatch):
    fuser = TorchFusion()
    executors.register(fuser)
    try:
        c = pipeline.compile_program(_mlp, _inputs(), {}, CompileOptions(executors=("testfuser", "torch")))
    finally:
        executors.unregister("testfuser")
    flat = c.forward.traces["fusion"]
    assert [t.stage for t in c.forward.traces.values()] == list(TRACE_STAGES)
    # fusible torch ops are flattened into prims; the matmul stays whole
    names = [b.sym.name for b in flat.bound_symbols]
    assert names[0] == "torch.matmul" and all(n.startswith("prims.") for n in names[1:])
    fused = [b for g in fuser.groups for b in g.bsyms]
    assert {b.outputs[0].name for b in fused} <= {o.name for b in flat.bound_symbols for o in b.outputs}
    x, w = _inputs()
    assert torch.allclose(c.fn(x, w, *c.constants), _mlp(x, w), atol=1e-5)


def test_without_a_fusion_executor_the_fusion_stage_changes_nothing():
    c = pipeline.compile_program(_mlp, _inputs(), {}, CompileOptions(executors=("torch",)))
    assert c.forward.traces["fusion"].bound_symbols == c.forward.traces["optimised"].bound_symbols


def test_debug_levels_print_each_stage_as_it_is_made(monkeypatch, capsys):
    monkeypatch.setenv("FUSIONLENS_DEBUG", "1")
    compiler.compile(_mlp, *_inputs(), executors=["torch"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("[fusionlens]")]
    assert [ln.split(" · ")[1].split(":")[0] for ln in lines] == list(TRACE_STAGES)
    assert "def _mlp(" not in err  # level 1: one line a stage, no traces

    monkeypatch.setenv("FUSIONLENS_DEBUG", "2")
    compiler.compile(_mlp, *_inputs(), executors=["torch"])
    err = capsys.readouterr().err
    assert err.count("def _mlp(") == len(TRACE_STAGES)

    monkeypatch.setenv("FUSIONLENS_DEBUG", "3")
    executors.register(TorchFusion())
    try:
        compiler.compile(_mlp, *_inputs(), executors=["testfuser", "torch"])
    finally:
        executors.unregister("testfuser")
    err = capsys.readouterr().err
    nested = [ln for ln in err.splitlines() if ln.startswith("    # t") and "prims." in ln]
    assert nested  # decompositions printed under their ops
    assert "(testfuser) ---" in err  # each region's generated code


def test_a_bad_debug_level_is_ignored(monkeypatch, capsys):
    monkeypatch.setenv("FUSIONLENS_DEBUG", "verbose")
    rep = compiler.compile(_mlp, *_inputs(), executors=["torch"])
    assert rep.status == "ok" and "[fusionlens]" not in capsys.readouterr().err
