"""The server driven by a real editor: headless Neovim (Debian package `neovim`, 0.7+)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from lsp_helpers import EXAMPLES, REPO, server_env
from lsp_helpers import HINT_MAX, HINT_RE, SUMMARY_RE, line_of

NVIM = shutil.which("nvim")


@pytest.mark.skipif(NVIM is None, reason="nvim is not on PATH (Debian: apt-get install -y neovim)")
def test_headless_neovim_compiles_and_shows_hints(tmp_path):
    out = tmp_path / "nvim.json"
    env = dict(os.environ, FL_REPO=str(REPO), FL_FILE="examples/mlp.py", FL_TARGET="mlp_example",
               FL_OUT=str(out), FL_PYTHON=sys.executable, FL_HOVER_TEXT="x = self.fc1(x)",
               XDG_STATE_HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path))
    env.update(server_env())  # PYTHONPATH (and, while developing, the fake compiler)
    env["FL_PYTHONPATH"] = env["PYTHONPATH"]
    script = REPO / "tests" / "editors" / "nvim_smoke.lua"
    proc = subprocess.run([NVIM, "--headless", "--clean", "-c", f"luafile {script}"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert out.exists(), f"nvim wrote nothing (rc {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    result = json.loads(out.read_text())
    assert "error" not in result, result.get("error")
    assert proc.returncode == 0
    assert result["lenses_before"] == ["Compile & benchmark", "Compile & benchmark"]
    assert result["compile"] == {"targets": ["mlp_example"], "ok": True}
    assert SUMMARY_RE.match(result["lenses_after"][0]), result["lenses_after"]
    lines = (EXAMPLES / "mlp.py").read_text().splitlines()
    hints = result["hints"]
    assert hints
    for h in hints:
        assert h["character"] == len(lines[h["line"]])
        assert len(h["label"]) <= HINT_MAX
    fc1 = line_of(EXAMPLES / "mlp.py", "x = self.fc1(x)")
    assert any(h["line"] == fc1 and HINT_RE.match(h["label"]) for h in hints), hints
    assert result["hover"]["line"] == fc1
    assert "### FusionLens · region" in result["hover"]["value"]
    assert result["actions"][:2] == ["Compile and benchmark", "Show generated trace"]
    assert result["regions"]["targets"][0]["status"] == "ok"
