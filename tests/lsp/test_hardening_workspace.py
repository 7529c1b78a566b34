"""Issue 32, item 1: a workspace's own modules never replace FusionLens's.

The server is started as the VS Code extension and the eglot recipe of docs/lsp.md start it:
`python -P -m lsp_server`, from the workspace folder. A workspace holding its own `compiler/`
package, `torch.py` and `lsp_server.py` (each would leave a file behind when run) runs
nothing in the server with execution off; with `-m` alone (no -P) the server still drops its
start folder before importing anything but lsp_server itself. With execution allowed the
worker imports FusionLens as `fusionlens` and the real torch, and the workspace's
`import compiler` gets the workspace's package, after another compile used FusionLens's
`compiler` alias.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lsp_helpers import MODEL
from lsp_raw import debug_info, stdio_server

MARK = "open({marker!r}, 'w').write('ran')\n"


def _hostile(folder: Path, names: tuple[str, ...]) -> list[Path]:
    """A workspace whose modules named `names` leave a file behind when they are imported."""
    marks = []
    for name in names:
        marker = folder / f"RAN-{name.replace('/', '-')}"
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        code = MARK.format(marker=str(marker))
        target.write_text(f"import os; {code}" if name.endswith(".pth") else code + "SCALE = 3\n")
        marks.append(marker)
    return marks


STARTUP = ("sitecustomize.py", "usercustomize.py", "fusionlens.pth")  # Python's own start-up hooks


@pytest.mark.asyncio
@pytest.mark.parametrize("args,names", [
    (("-P", "-m", "lsp_server"), ("compiler/__init__.py", "torch.py", "lsp_server.py", "json.py", *STARTUP)),
    (("-m", "lsp_server"), ("compiler/__init__.py", "torch.py", "json.py", "pygls.py", *STARTUP)),  # -P forgotten
], ids=["python -P -m lsp_server", "python -m lsp_server"])
async def test_a_workspace_with_its_own_modules_runs_nothing_in_the_server(tmp_path, args, names):
    ws = tmp_path / "ws"
    ws.mkdir()
    marks = _hostile(ws, names)
    (ws / "model.py").write_text(MODEL)
    async with stdio_server(tmp_path, args=args, cwd=ws) as c:
        c.answers["workspace/configuration"] = lambda params: asyncio.sleep(0, [{"allowExecution": False}])
        assert "result" in await c.initialize(ws, {"allowExecution": False})
        uri = c.open(ws / "model.py", MODEL)
        lenses = (await c.request("textDocument/codeLens", {"textDocument": {"uri": uri}}))["result"]
        assert lenses and lenses[0]["command"]["title"].startswith("Not compiled: execution disabled"), lenses
        hover = await c.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                       "position": {"line": 10, "character": 1}})
        assert "error" not in hover
        info = await debug_info(c)
        assert info["workerPid"] is None and not info["torchImported"]
        assert (await c.request("shutdown", None))["result"] is None
    assert not [m.name for m in marks if m.exists()]


MODEL_WITH_OWN_COMPILER = '''import torch
import fusionlens
import compiler  # this project's own package, not FusionLens


def forward(x):
    return torch.relu(x) * compiler.SCALE


@fusionlens.example
def model_example():
    return forward, (torch.randn(4),)
'''


async def _compiled(c, uri: str) -> dict:
    answer = (await c.command("fusionlens.compile", uri, None, {"wait": True}, timeout=300))["result"]
    regions = (await c.request("fusionlens/regions", {"uri": uri}))["result"]
    return {"answer": answer, "targets": regions["targets"]}


@pytest.mark.asyncio
async def test_the_worker_keeps_fusionlens_and_the_workspace_keeps_its_compiler(tmp_path):
    """Real compiles (torch) of a workspace whose own `compiler` package and `torch.py` sit
    beside its model, then of a file of FusionLens's own style (`import compiler`, the
    alias), then of the first again."""
    plain, own = tmp_path / "plain", tmp_path / "own"
    plain.mkdir()
    own.mkdir()
    (plain / "model.py").write_text(MODEL)
    marks = _hostile(own, ("torch.py", *STARTUP))
    (own / "compiler").mkdir()
    (own / "compiler" / "__init__.py").write_text(f"open({str(own / 'OWN-COMPILER')!r}, 'w').close()\nSCALE = 3\n")
    (own / "model.py").write_text(MODEL_WITH_OWN_COMPILER)
    async with stdio_server(tmp_path, args=("-P", "-m", "lsp_server"), cwd=own, fake=False) as c:
        c.answers["workspace/configuration"] = lambda params: asyncio.sleep(0, [{}])
        folders = [{"uri": f.as_uri(), "name": f.name} for f in (plain, own)]
        resp = await c.request("initialize", {"processId": None, "rootUri": own.as_uri(), "capabilities": {},
                                              "workspaceFolders": folders,
                                              "initializationOptions": {"compileTrigger": "manual",
                                                                        "benchmarkRepeats": 1, "device": "cpu"}})
        assert "result" in resp
        c.notify("initialized", {})
        own_uri = c.open(own / "model.py", MODEL_WITH_OWN_COMPILER)
        for uri in (own_uri, c.open(plain / "model.py", MODEL), own_uri):  # the worker starts in `own`
            compiled = await _compiled(c, uri)
            target = compiled["targets"][0]
            assert compiled["answer"]["ok"] and target["status"] == "ok", (target, c.texts("window/logMessage")[-9:])
            assert target["regions"], target
        assert (await debug_info(c))["workerRestarts"] == 0
    assert (own / "OWN-COMPILER").exists()  # the workspace's package was the one imported
    assert not [m.name for m in marks if m.exists()]  # and its torch.py (or start-up hooks) never was
