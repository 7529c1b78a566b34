"""Provenance for model code in any file: an op points at the innermost frame outside torch,
FusionLens and the standard library (installed packages included), and its stack runs out
to the user's own call."""

import os
import textwrap

import torch

import compiler
from fusionlens.ir.provenance import is_user_file
from fusionlens.driver.targets import compile_target

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_model_code_rule():
    from fusionlens.report.discovery import CodeRoots, is_model_code

    roots = CodeRoots(never=("/py/lib/python3.11/site-packages/torch", "/repo/compiler"),
                      stdlib=("/py/lib/python3.11",), packages=("/py/lib/python3.11/site-packages",))
    assert is_model_code("/py/lib/python3.11/site-packages/transformers/models/llama/modeling_llama.py", roots)
    assert not is_model_code("/py/lib/python3.11/site-packages/torch/nn/modules/linear.py", roots)
    assert not is_model_code("/py/lib/python3.11/functools.py", roots)
    assert not is_model_code("/repo/compiler/frontend.py", roots)
    assert is_model_code("/home/me/model.py", roots) and not is_model_code("<frozen runpy>", roots)


def test_which_files_are_model_code_here():
    assert is_user_file(os.path.join(os.path.dirname(torch.__file__), "site-packages-like", "x.py")) is False
    assert is_user_file(torch.nn.functional.__file__) is False
    assert is_user_file(os.__file__) is False  # the standard library
    assert is_user_file(compiler.__file__) is False
    assert is_user_file(os.path.join(REPO, "lsp_server", "worker.py")) is False
    assert is_user_file(os.path.join(REPO, "examples", "mlp.py")) is True
    import pytest  # an installed package: its files count as model code

    assert is_user_file(pytest.__file__) is True


def test_model_code_in_an_installed_package_gets_its_own_lines(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    (site / "tinymodels").mkdir(parents=True)
    (site / "tinymodels" / "__init__.py").write_text("")
    layers = site / "tinymodels" / "layers.py"
    layers.write_text(textwrap.dedent('''
        import torch


        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = torch.nn.LayerNorm(8)

            def forward(self, x):
                h = self.norm(x)  # NORM
                return torch.relu(h) * 2  # ACT
    '''))
    monkeypatch.syspath_prepend(str(site))
    import importlib

    import fusionlens.ir.provenance as prov

    prov.code_roots.cache_clear()  # the new site-packages folder is an installed-package root
    prov.is_user_file.cache_clear()
    Block = importlib.import_module("tinymodels.layers").Block
    rep = compiler.compile(Block().eval(), torch.randn(2, 8), executors=["torch"])
    lines = layers.read_text().splitlines()
    where = {(os.path.basename(op.file), lines[op.line - 1].split("# ")[-1]) for op in rep.ops}
    assert where == {("layers.py", "NORM"), ("layers.py", "ACT")}, where
    for op in rep.ops:  # out to the user's call: this test's compile line
        assert op.stack[0].file == str(layers) and op.stack[-1].file == __file__, op.stack
    prov.code_roots.cache_clear()
    prov.is_user_file.cache_clear()


def test_torch_own_module_points_at_the_users_line_not_at_fusionlens():
    path = os.path.join(REPO, "examples", "norms.py")
    rep = compile_target(path, "layernorm_example", benchmark=False)
    source = open(path).read().splitlines()
    for op in rep.ops:
        assert op.file == path and "return model" in source[op.line - 1], (op.file, op.line)
    for r in rep.forward.regions:
        assert all(s.file == path for s in r.source_lines)
    assert "bin/fusionlens" not in rep.forward.traces["acquired"] and "compiler/" not in rep.forward.traces["acquired"]
