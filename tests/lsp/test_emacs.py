"""The server driven by a real editor: Emacs in --batch with eglot (Debian packages
`emacs-nox` and, on Emacs 28, `elpa-eglot`; eglot is built in from Emacs 29)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from lsp_helpers import EXAMPLES, REPO, server_env
from lsp_helpers import SUMMARY_RE, line_of

EMACS = shutil.which("emacs")
# What eglot_smoke.el does to load eglot: built in, else package.el (Debian's site-lisp/elpa).
_LOAD_EGLOT = "(unless (require 'eglot nil t) (package-initialize) (require 'eglot))"


def _eglot_missing() -> str | None:
    if EMACS is None:
        return "emacs is not on PATH (Debian: apt-get install -y emacs-nox elpa-eglot)"
    try:
        proc = subprocess.run([EMACS, "--batch", "--eval", _LOAD_EGLOT], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        return "emacs --batch did not start within 60 s"
    if proc.returncode != 0:
        return f"eglot does not load in emacs (Debian 12: apt-get install -y elpa-eglot): {proc.stderr.strip()[-300:]}"
    return None


MISSING = _eglot_missing()


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
def test_headless_emacs_eglot_compiles_and_hovers(tmp_path):
    out = tmp_path / "eglot.json"
    env = dict(os.environ, FL_REPO=str(REPO), FL_FILE="examples/mlp.py", FL_TARGET="mlp_example",
               FL_OUT=str(out), FL_PYTHON=sys.executable, FL_HOVER_TEXT="x = self.fc1(x)",
               FL_TIMEOUT="540", FL_EVENTS=str(tmp_path / "eglot-events.txt"))
    env.update(server_env())  # PYTHONPATH (and, while developing, the fake compiler)
    env["FL_PYTHONPATH"] = env["PYTHONPATH"]
    script = REPO / "tests" / "editors" / "eglot_smoke.el"
    try:
        proc = subprocess.run([EMACS, "--batch", "-l", str(script)], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"emacs did not finish in 600 s: {e.stdout!r:.2000} {e.stderr!r:.2000}")
    assert out.exists(), f"emacs wrote nothing (rc {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    result = json.loads(out.read_text())
    assert "error" not in result, f"{result.get('error')} (steps done: {result['steps']}) {proc.stderr[-2000:]}"
    assert proc.returncode == 0
    assert result["managed"] is True
    assert {"hoverProvider", "codeActionProvider", "executeCommandProvider"} <= set(result["capabilities"])
    assert result["target_actions_before"] == ["Compile and benchmark"]
    # answered at once, well within eglot's 10 s (jsonrpc-default-request-timeout); the
    # results came later, through fusionlens/regions
    assert result["compile"] == {"targets": ["mlp_example"], "ok": True, "queued": True}
    assert result["compile_seconds"] < 10, result["compile_seconds"]
    assert result["compiled"] == "ok"
    fc1 = line_of(EXAMPLES / "mlp.py", "x = self.fc1(x)")
    assert result["hover"]["line"] == fc1
    hover = result["hover"]  # plain text where eglot asks for it (no markdown-mode), Markdown else
    assert "FusionLens · region" in hover["value"] and ("###" in hover["value"]) == (hover["kind"] == "markdown")
    assert "FusionLens · region" in (result["eldoc_hover"] or ""), result["eldoc_hover"]  # what eldoc shows
    assert result["actions"][:2] == ["Compile and benchmark", "Show generated trace"]
    assert "Show kernel code for this region" in result["actions"]
    assert result["target_actions"] == ["Compile and benchmark", "Show generated trace"]
    target = result["regions"]["targets"][0]
    assert target["name"] == "mlp_example" and target["status"] == "ok"
    assert SUMMARY_RE.match(target["message"]), target["message"]
    assert result["shutdown"] is True
