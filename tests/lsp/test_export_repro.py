"""The "Export repro script" code action: the real server asks its worker for a standalone
script of the region on the line (fusionlens/driver/repro.py), saves it under the cache folder and
asks the client to show it; the script runs in a Python without FusionLens."""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from lsp_helpers import command_of, line_of

pytestmark = pytest.mark.asyncio


def without_fusionlens(script: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Run `script --no-benchmark` in a Python that cannot import FusionLens: no `site` (-S),
    so no .pth file (an editable install's) runs; site-packages as plain PYTHONPATH entries."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    env["PYTHONPATH"] = os.pathsep.join(site.getsitepackages())
    code = "import importlib.util, runpy, sys; assert importlib.util.find_spec('compiler') is None; " \
           "assert importlib.util.find_spec('fusionlens') is None; " \
           "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    return subprocess.run([sys.executable, "-S", "-s", "-c", code, str(script), "--no-benchmark"], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)

SOURCE = '''\
import torch

import compiler


def scaled_softmax(x):
    return torch.softmax(x * 2.0, -1)


@compiler.example
def small():
    torch.manual_seed(0)
    return scaled_softmax, (torch.randn(4, 16),)
'''


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_export_repro_script_of_the_line(start_server, tmp_path):
    path = tmp_path / "small.py"
    path.write_text(SOURCE)
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path)
    uri = s.open(path)
    line = line_of(path, "return torch.softmax")
    assert not [a for a in await s.actions(uri, line) if a.title.startswith("Export repro")]  # not compiled
    assert (await s.compile(uri, "small"))["ok"]

    actions = [a for a in await s.actions(uri, line) if a.title.startswith("Export repro script")]
    # on a CPU with the default settings the region is Triton's preview; on a GPU, a Triton region
    assert len(actions) == 1, [a.title for a in await s.actions(uri, line)]
    assert actions[0].title in ("Export repro script (triton preview P0)", "Export repro script (R0)"), actions[0].title
    cmd = command_of(actions[0])
    assert cmd.command == "fusionlens.exportRepro" and list(cmd.arguments)[:2] == [uri, "small"]

    shown = await s.command(cmd.command, *cmd.arguments)
    written = Path(shown["path"])
    assert written.parent == tmp_path / "cache" / "repro" and written.exists()
    assert s.client.shown_documents[-1].uri == shown["uri"] == written.as_uri()
    text = written.read_text()
    assert "@triton.jit" in text and "def eager(x" in text and "from compiler" not in text

    p = without_fusionlens(written, tmp_path)
    assert p.returncode == 0 and "OK: the kernel matches eager" in p.stdout, p.stdout + p.stderr

    # a region without a kernel: the worker says why, the client is told
    answer = await s.command("fusionlens.exportRepro", uri, "small", "R9")
    assert answer["uri"] is None and "no region R9" in answer["message"]


@pytest.mark.parametrize("profile", ["neovim"])
async def test_export_repro_needs_execution(start_server, tmp_path):
    path = tmp_path / "small.py"
    path.write_text(SOURCE)
    s = await start_server({"compileTrigger": "manual", "allowExecution": False}, root=tmp_path)
    uri = s.open(path)
    answer = await s.command("fusionlens.exportRepro", uri, "small", "P0")
    assert answer["uri"] is None and "allowExecution" in answer["message"]
    assert not (tmp_path / "cache" / "repro").exists()


TRAINING_SOURCE = '''\
import torch
import torch.nn.functional as F

import compiler


def loss(x, w):
    return F.gelu(x @ w).square().mean()


@compiler.example(train=True)
def training():
    torch.manual_seed(0)
    return loss, (torch.randn(8, 16), torch.randn(16, 32))
'''


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_export_repro_script_of_a_backward_kernel(start_server, tmp_path):
    # a training target's line also offers its backward kernel (on a CPU, Triton's preview PB<n>)
    path = tmp_path / "training.py"
    path.write_text(TRAINING_SOURCE)
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path)
    uri = s.open(path)
    assert (await s.compile(uri, "training"))["ok"]
    line = line_of(path, "return F.gelu(x @ w)")
    titles = [a.title for a in await s.actions(uri, line) if a.title.startswith("Export repro script")]
    backward = [t for t in titles if "PB" in t or " (B" in t]
    assert backward, titles
    action = next(a for a in await s.actions(uri, line) if a.title == backward[0])
    shown = await s.command(command_of(action).command, *command_of(action).arguments)
    written = Path(shown["path"])
    assert written.exists() and "from compiler" not in written.read_text()
    p = without_fusionlens(written, tmp_path)
    assert p.returncode == 0 and "OK: the kernel matches eager" in p.stdout, p.stdout + p.stderr
