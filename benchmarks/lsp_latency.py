"""Latency of the language server's cached answers: hover, inlay hints, code lenses.

Generates a model file (`--blocks 70`: 513 lines; `--blocks 700`: 4,923), compiles its
target once through the real server process (the real compiler by default; `--fake` uses
tests/lsp/lsp_fake_compile.py, which runs nothing), then times requests that must answer from
the cache, also right after an edit (when the server maps annotations onto the new text):
each edit inserts a line at the top or deletes it again, so every annotation moves. Prints
a table; not a test. `--profile FILE` runs the server under cProfile and writes its stats
there (read them with `python -m pstats FILE`).

    python benchmarks/lsp_latency.py [--requests 300] [--blocks 70] [--fake] [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

REPO = Path(__file__).resolve().parents[1]


def make_source(blocks: int = 70) -> str:
    out = ['"""Generated for benchmarks/lsp_latency.py."""', "", "import torch", "import torch.nn as nn", "",
           "import compiler", ""]
    for i in range(blocks):
        out += ["", f"class Block{i}(nn.Module):", "    def forward(self, x):", "        y = x * 1.01",
                "        y = torch.tanh(y)", "        y = y + x", "        return y * 0.5"]
    out += ["", "", "class Model(nn.Module):", "    def __init__(self):", "        super().__init__()",
            f"        self.blocks = nn.ModuleList([{', '.join(f'Block{i}()' for i in range(blocks))}])",
            "", "    def forward(self, x):", "        for block in self.blocks:", "            x = block(x)",
            "        return x", "", "", "@compiler.example", "def model_example():",
            "    return Model(), (torch.randn(16, 64),)", ""]
    return "\n".join(out)


# The server under cProfile, its stats written when it exits (it ends with os._exit, which
# skips cProfile's own writing and atexit).
PROFILED_SERVER = """
import cProfile, os, runpy, sys
out, profile, real_exit = sys.argv[1], cProfile.Profile(), os._exit
def _exit(code):
    profile.disable()
    profile.dump_stats(out)
    real_exit(code)
os._exit = _exit
sys.argv = ["lsp_server"]
profile.enable()
try:
    runpy.run_module("lsp_server", run_name="__main__")
finally:
    _exit(0)
"""


def percentile(values, q):
    values = sorted(values)
    k = max(0, min(len(values) - 1, int(round(q / 100 * (len(values) - 1)))))
    return values[k]


async def timed(n, make_request) -> list[float]:
    samples: list[float] = []
    for i in range(n):
        t0 = time.perf_counter()
        await make_request(i)
        samples.append((time.perf_counter() - t0) * 1000)
    return samples


async def main(args) -> None:
    folder = Path(tempfile.mkdtemp(prefix="fusionlens-latency-"))
    path = folder / "big_model.py"
    source = make_source(args.blocks)
    path.write_text(source)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), str(REPO / "tests" / "lsp"),
                                                    env.get("PYTHONPATH")) if p)
    if args.fake:
        env["FUSIONLENS_WORKER_COMPILE"] = "lsp_fake_compile:compile_target"
    command = [sys.executable, "-m", "lsp_server"]
    if args.profile:
        command = [sys.executable, "-c", PROFILED_SERVER, str(Path(args.profile).resolve())]
    client = await ClientServerConfig(command, server_env=env).start()
    # start() is typed as returning a bare JsonRPCClient; its default factory makes a LanguageClient
    assert isinstance(client, LanguageClient)
    client.feature("fusionlens/status")(lambda *a: None)
    client.feature(T.WORKSPACE_CODE_LENS_REFRESH)(lambda *a: None)
    client.feature(T.WORKSPACE_INLAY_HINT_REFRESH)(lambda *a: None)
    await client.initialize_session(T.InitializeParams(
        capabilities=client_capabilities(args.client), root_uri=folder.as_uri(),
        initialization_options={"compileTrigger": "manual", "benchmarkRepeats": 2,
                                "cacheFolder": str(folder / "cache")}))
    uri = path.as_uri()
    client.text_document_did_open(T.DidOpenTextDocumentParams(
        T.TextDocumentItem(uri=uri, language_id="python", version=1, text=source)))
    t0 = time.perf_counter()
    res = await client.workspace_execute_command_async(
        T.ExecuteCommandParams(command="fusionlens.compile", arguments=[uri, "model_example", {"wait": True}]))
    compile_s = time.perf_counter() - t0
    assert res is not None, "fusionlens.compile answered nothing"  # the command returns {"ok": ...}
    doc = T.TextDocumentIdentifier(uri)
    n_lines = len(source.splitlines())
    all_hints = await client.text_document_inlay_hint_async(T.InlayHintParams(
        doc, T.Range(T.Position(0, 0), T.Position(n_lines, 0)))) or []
    hinted = sorted({h.position.line for h in all_hints}) or [0]

    rows: list[tuple[str, int, float, float, float]] = []  # (request, n, p50, p95, max) in ms

    async def run(name, n, fn):
        samples = await timed(n, fn)
        rows.append((name, len(samples), statistics.median(samples), percentile(samples, 95), max(samples)))

    n = args.requests
    await run("hover (compiled line)", n, lambda i: client.text_document_hover_async(
        T.HoverParams(doc, T.Position(hinted[i % len(hinted)], 8))))
    await run("hover (plain line)", n, lambda i: client.text_document_hover_async(
        T.HoverParams(doc, T.Position(1, 0))))
    await run("inlayHint (whole file)", n, lambda i: client.text_document_inlay_hint_async(T.InlayHintParams(
        doc, T.Range(T.Position(0, 0), T.Position(n_lines, 0)))))
    await run("inlayHint (60-line viewport)", n, lambda i: client.text_document_inlay_hint_async(
        T.InlayHintParams(doc, T.Range(T.Position((i * 37) % (n_lines - 60), 0),
                                       T.Position((i * 37) % (n_lines - 60) + 60, 0)))))
    await run("codeLens", n, lambda i: client.text_document_code_lens_async(T.CodeLensParams(doc)))

    version = [1]

    def edit(i: int) -> None:
        """Insert a line at the top, or delete it again: every annotation moves."""
        version[0] += 1
        end = T.Position(0, 0) if i % 2 == 0 else T.Position(1, 0)
        client.text_document_did_change(T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(uri=uri, version=version[0]),
            [T.TextDocumentContentChangePartial(range=T.Range(T.Position(0, 0), end),
                                                text="# edit\n" if i % 2 == 0 else "")]))

    async def edit_then_hints(i):
        edit(i)
        await client.text_document_inlay_hint_async(T.InlayHintParams(
            doc, T.Range(T.Position(0, 0), T.Position(n_lines, 0))))

    async def edit_then_viewport(i):
        edit(i)
        first = (i * 37) % (n_lines - 60)
        await client.text_document_inlay_hint_async(T.InlayHintParams(
            doc, T.Range(T.Position(first, 0), T.Position(first + 60, 0))))

    edits = max(20, n // 5)
    await run("edit + inlayHint (whole file)", edits, edit_then_hints)
    await run("edit + inlayHint (60 lines)", edits, edit_then_viewport)

    await client.shutdown_session()
    await client.stop()
    print(f"file: {n_lines} lines, {len(all_hints)} hints on {len(hinted)} lines; "
          f"compile {compile_s:.1f} s ({'fake' if args.fake else 'real'} compiler, ok={res['ok']})")
    print(f"{'request':32} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    for name, count, p50, p95, mx in rows:
        print(f"{name:32} {count:5d} {p50:8.2f} {p95:8.2f} {mx:8.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--blocks", type=int, default=70, help="model blocks: 70 make 513 lines, 700 make 4,923")
    parser.add_argument("--fake", action="store_true", help="use the stand-in compiler (runs no user code)")
    parser.add_argument("--profile", metavar="FILE", help="run the server under cProfile, its stats to FILE")
    parser.add_argument("--client", default="visual-studio-code", choices=["visual-studio-code", "neovim"],
                        help="whose capabilities the client declares (neovim resolves inlay-hint tooltips lazily)")
    asyncio.run(main(parser.parse_args()))
