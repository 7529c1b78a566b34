"""The report contract, the API, and bad input: clear errors at the user's line."""

import json
import os

import pytest
import torch

import compiler
from fusionlens.report import schema as R
from fusionlens.driver.targets import compile_target

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def fixture(name):
    return os.path.join(FIXTURES, name)


def marked_line(path, marker):
    with open(path) as f:
        return next(i for i, line in enumerate(f, 1) if marker in line)


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x)) * 2


def test_report_json_has_the_contract_fields():
    rep = compiler.compile(Tiny().eval(), torch.randn(4, 8), benchmark=True, repeats=3)
    data = json.loads(rep.to_json())
    assert data["schema_version"] == R.SCHEMA_VERSION
    assert set(data["target"]) >= {"name", "file", "line", "end_line"}
    forward, backward = data["programs"]  # parameters require grad: compiled for training
    assert (forward["kind"], backward["kind"]) == ("forward", "backward") and data["training"]["grad_inputs"]
    assert list(forward["traces"]) == ["acquired", "decomposed", "optimised", "joint", "forward", "fusion",
                                       "execution"]
    assert list(backward["traces"]) == ["backward", "fusion", "execution"]
    region = forward["regions"][0]
    assert set(region) >= {"id", "executor", "ops", "source_lines", "code", "inputs", "outputs", "timing"}
    assert set(region["source_lines"][0]) == {"file", "line"}
    assert set(region["inputs"][0]) >= {"shape", "dtype"}
    assert set(region["timing"]) >= {"median_ms", "eager_median_ms"}
    assert set(data) >= {"fallbacks", "diagnostics", "device", "versions", "signature"}
    assert forward["timings"]["compiled"]["median_ms"] > 0 and backward["timings"] is None
    assert forward["timings"]["eager"]["median_ms"] > 0 and data["training"]["step"]["compiled"]["median_ms"] > 0
    assert data["device"] == "cpu" and data["versions"]["torch"] == torch.__version__
    back = R.CompileReport.from_json(rep.to_json())
    assert back == rep


def test_report_points_at_forward_lines():
    rep = compiler.compile(Tiny().eval(), torch.randn(4, 8))
    this = os.path.abspath(__file__)
    forward_line = marked_line(this, "return torch.relu(self.fc(x)) * 2")
    assert {(op.file, op.line) for op in rep.ops} == {(this, forward_line)}
    assert rep.target.name == "Tiny" and rep.target.file == this


def test_unmeasured_region_timing_is_null():
    rep = compiler.compile(Tiny().eval(), torch.randn(4, 8))
    assert all(r.timing is None for r in rep.forward.regions) and rep.forward.timings is None


def test_compile_raises_compile_error_at_user_line():
    def f(x):
        return x.reshape(3, 5)  # cannot reshape 8 elements

    with pytest.raises(compiler.CompileError) as info:
        compiler.compile(f, torch.randn(8))
    err = info.value.report.error
    assert err.file == os.path.abspath(__file__)
    assert err.line == marked_line(__file__, "cannot reshape 8 elements")
    assert "RuntimeError" in err.message


def test_syntax_error_file():
    path = fixture("syntax_error.py")
    rep = compile_target(path, "broken_example", benchmark=False)
    assert rep.status == "error"
    assert rep.error.line == marked_line(path, "SYNTAX ERROR HERE")
    assert "SyntaxError" in rep.error.message and rep.error.file == path


def test_target_that_raises():
    path = fixture("raises.py")
    rep = compile_target(path, "raises_example", benchmark=False)
    assert rep.status == "error" and "ValueError" in rep.error.message
    assert (rep.error.file, rep.error.line) == (path, marked_line(path, "RAISES HERE"))


@pytest.mark.parametrize("name", ["returns_tensor_example", "returns_four_tuple_example",
                                  "returns_none_example", "not_callable_example"])
def test_wrong_example_return_value(name):
    path = fixture("bad_return.py")
    rep = compile_target(path, name, benchmark=False)
    assert rep.status == "error"
    assert rep.error.file == path
    with open(path) as f:
        line_text = f.read().splitlines()[rep.error.line - 1]
    assert "BAD RETURN" in line_text
    assert name in rep.error.message


def test_one_bad_target_does_not_spoil_the_others():
    rep = compile_target(fixture("bad_return.py"), "good_example", benchmark=False)
    assert rep.status == "ok"


def test_unsupported_ops_fall_back_with_reason_and_line():
    path = fixture("unsupported_op.py")
    rep = compile_target(path, "unsupported_op_example", benchmark=False)
    assert rep.status == "ok"
    marked = {i for i, line in enumerate(open(path), 1) if "# UNSUPPORTED" in line}
    assert {f.line for f in rep.fallbacks} == marked
    assert all(f.file == path for f in rep.fallbacks)
    reasons = {f.op: f.reason for f in rep.fallbacks}
    assert "no symbol" in reasons["torch.special.log1p"] and "no symbol" in reasons["torch.special.expit"]
    assert "complex" in reasons["torch.abs"]  # known op, but not on complex tensors
    assert not [d for d in rep.diagnostics if d.severity == "error"]


def test_data_dependent_control_flow_warns():
    path = fixture("data_dependent.py")
    rep = compile_target(path, "data_dependent_example", benchmark=False)
    warnings = [d for d in rep.diagnostics if d.severity == "warning"]
    assert warnings and "specialised" in warnings[0].message
    assert warnings[0].file == path


def test_unknown_target_name():
    rep = compile_target(os.path.join(ROOT, "examples", "mlp.py"), "nope", benchmark=False)
    assert rep.status == "error" and "nope" in rep.error.message and "mlp_example" in rep.error.message


def test_trace_that_never_ends_is_stopped(monkeypatch):
    from fusionlens.frontend import tracer as frontend

    monkeypatch.setattr(frontend, "MAX_OPS", 200)

    def loops(x):
        while True:
            x = x + 1  # loops forever

    with pytest.raises(compiler.CompileError) as info:
        compiler.compile(loops, torch.randn(2))
    assert "loop forever" in str(info.value)
    assert info.value.report.error.line == marked_line(__file__, "x = x + 1  # loops forever")


def test_mismatch_is_reported_as_error(monkeypatch):
    from fusionlens.ops import prims

    monkeypatch.setattr(prims.ALL["exp"], "impl", lambda a: torch.exp(a) + 1)  # a broken prim
    from fusionlens import executors
    from fusion_executor import TorchFusion

    executors.register(TorchFusion())
    try:
        rep = compiler.compile(lambda x: torch.exp(x) * 2, torch.randn(4), executors=["testfuser", "torch"])
    finally:
        executors.unregister("testfuser")
    assert any(d.severity == "error" and "does not match eager" in d.message for d in rep.diagnostics)


def test_unusable_nvfuser_still_shows_its_definition():
    rep = compiler.compile(lambda x: torch.softmax(x * 2, -1), torch.randn(4, 8), executors=["nvfuser", "torch"])
    assert all(r.executor == "torch" for r in rep.forward.regions)  # it never claims nvFuser ran
    (preview,) = rep.forward.previews
    assert preview.executor == "nvfuser" and "not installed" in preview.reason
    code = preview.regions[0].code
    assert "FusionDefinition" in code and "fd.ops.exp" in code and "fd.add_output" in code
    assert preview.regions[0].source_lines[0].file == os.path.abspath(__file__)


def test_versions_look_up_only_the_packages_they_report(tmp_path, monkeypatch):
    import importlib
    import importlib.metadata

    import importlib.util

    from fusionlens.driver import reporting

    if importlib.util.find_spec("nvfuser_direct") or importlib.util.find_spec("nvfuser"):
        pytest.skip("a real nvFuser is installed here")
    # an nvFuser wheel: named per CUDA and torch version, found beside its module
    (tmp_path / "nvfuser").mkdir()
    (tmp_path / "nvfuser" / "__init__.py").write_text("")
    info = tmp_path / "nvfuser_cu130_torch210-0.2.30.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvfuser-cu130-torch210\nVersion: 0.2.30\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()

    def no_scan(*args, **kwargs):
        raise AssertionError("versions() scanned every installed distribution")
    monkeypatch.setattr(importlib.metadata, "distributions", no_scan)
    reporting.versions.cache_clear()
    try:
        v = reporting.versions()
        assert v["nvfuser"] == "0.2.30" and v["torch"] == torch.__version__
        assert v["fusionlens"] == importlib.metadata.version("fusionlens")
        try:
            assert v["triton"] == importlib.metadata.version("triton")
        except importlib.metadata.PackageNotFoundError:
            assert "triton" not in v
    finally:
        reporting.versions.cache_clear()
