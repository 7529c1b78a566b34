"""compile_target on an editor's buffer: the text compiled is the buffer's, its imports come from disk."""

from fusionlens.driver.targets import compile_target

SAVED = '''import torch
import compiler
from helper_mod import scale


@compiler.example
def target():
    return (lambda x: scale(torch.relu(x))), (torch.randn(4, 4),)
'''


def _write(tmp_path):
    (tmp_path / "helper_mod.py").write_text("def scale(x):\n    return x * 2\n")
    path = tmp_path / "model.py"
    path.write_text(SAVED)
    return path


def test_an_unsaved_buffer_compiles_what_the_user_sees(tmp_path):
    path = _write(tmp_path)
    # the buffer has two new lines above the target and a different op
    buffer = SAVED.replace("@compiler.example", "# edited, not saved\n\n@compiler.example").replace(
        "torch.relu(x)", "torch.sigmoid(x)")
    rep = compile_target(str(path), "target", source=buffer, benchmark=False)
    assert rep.status == "ok", rep.error
    assert rep.target.line == SAVED.splitlines().index("def target():") + 1 + 2
    names = [op.name.rsplit(".", 1)[-1] for op in rep.ops]
    assert "sigmoid" in names and "relu" not in names
    sigmoid = next(op for op in rep.ops if op.name.endswith("sigmoid"))
    assert sigmoid.file == str(path) and sigmoid.line == buffer.splitlines().index(
        "    return (lambda x: scale(torch.sigmoid(x))), (torch.randn(4, 4),)") + 1
    assert "torch.sigmoid(x)" in rep.forward.traces["acquired"]  # the source comment is the buffer's line
    mul = next(op for op in rep.ops if op.name == "torch.mul")  # from the imported module, on disk
    assert mul.file == str(tmp_path / "helper_mod.py") and mul.line == 2
    # and the file on disk compiles as saved again afterwards
    saved = compile_target(str(path), "target", benchmark=False)
    assert "relu" in [op.name.rsplit(".", 1)[-1] for op in saved.ops]
    assert "torch.relu(x)" in saved.forward.traces["acquired"] and "sigmoid" not in saved.forward.traces["acquired"]


def test_an_untitled_buffer_compiles_without_a_file(tmp_path):
    _write(tmp_path)
    path = tmp_path / "Untitled-1.py"  # never written
    rep = compile_target(str(path), "target", source=SAVED, benchmark=False)
    assert rep.status == "ok", rep.error
    assert [op.file for op in rep.ops if op.name.endswith("relu")] == [str(path)]
    assert not [d for d in rep.diagnostics if d.severity == "error"]  # checked against eager


def test_a_syntax_error_in_the_buffer_points_at_the_buffer(tmp_path):
    path = _write(tmp_path)
    rep = compile_target(str(path), "target", source=SAVED + "\ndef broken(:\n", benchmark=False)
    assert rep.status == "error" and "SyntaxError" in rep.error.message
    assert rep.error.line == len(SAVED.splitlines()) + 2


def test_a_callable_that_returns_no_tensor_is_reported_as_such(tmp_path):
    path = tmp_path / "no_tensor.py"
    path.write_text("import torch\nimport compiler\n\n\n@compiler.example\ndef sizes():\n"
                    "    return (lambda x: x.shape[0] + 1), (torch.randn(2, 5),)\n")
    rep = compile_target(str(path), "sizes", benchmark=False)
    assert rep.status == "ok" and not rep.forward.regions
    assert [d.message for d in rep.diagnostics if d.severity == "warning"] == [
        "sizes returned int and no tensor: there is nothing to compile"]
