"""End to end: the real server process, the real compiler, real example files.

Every test talks LSP to `python -m lsp_server --stdio` through pytest-lsp, with the client
capabilities of VS Code or Neovim. benchmarkRepeats is 2 and each example file is compiled
at most twice in the whole module, to keep the suite cheap.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types as T

from lsp_helpers import EXAMPLES
from lsp_helpers import HINT_MAX, HINT_RE, SUMMARY_RE, assert_line_hover, command_of, hover_text, line_of, tooltip_text

pytestmark = pytest.mark.asyncio

GPT = EXAMPLES / "gpt_block.py"


async def test_gpt_block_lens_hints_hover_actions_commands(start_server):
    s = await start_server({"compileTrigger": "manual"})
    uri = s.open(GPT)
    lines = GPT.read_text().splitlines()

    lenses = await s.lenses(uri)
    assert [l.command.title for l in lenses] == ["Compile & benchmark", "Compile & benchmark"]
    first = lenses[0]
    assert first.range.start.line == line_of(GPT, "@compiler.example")
    assert first.command.command == "fusionlens.compile"
    assert list(first.command.arguments) == [uri, "gpt_block_example"]
    assert await s.hints(uri) == []  # nothing compiled yet, manual trigger

    # Code actions on the target before compiling: only "Compile and benchmark".
    target_line = line_of(GPT, "def gpt_block_example")
    titles = [a.title for a in await s.actions(uri, target_line)]
    assert titles == ["Compile and benchmark"]

    # Run the lens' command, as an editor does when the lens is clicked.
    result = await s.compile(uri, "gpt_block_example")
    assert result == {"targets": ["gpt_block_example"], "ok": True}

    lenses = await s.lenses(uri)
    assert SUMMARY_RE.match(lenses[0].command.title), lenses[0].command.title
    assert "vs eager" in lenses[0].command.title
    assert lenses[1].command.title == "Compile & benchmark"

    # Progress and status notifications came with the compile.
    states = [st.state for st in s.statuses]
    assert states[0] == "compiling" and states[-1] == "idle", states
    assert s.statuses[-1].speedup is not None and s.statuses[-1].uri == uri
    reports = [r for rs in s.client.progress_reports.values() for r in rs]
    assert any(isinstance(r, T.WorkDoneProgressBegin) for r in reports)
    assert any(isinstance(r, T.WorkDoneProgressEnd) for r in reports)
    assert any(isinstance(r, T.WorkDoneProgressReport) and r.message == "running, tracing and benchmarking "
               "gpt_block_example" for r in reports), reports

    # Inlay hints: at the end of compiled user lines, short labels with region and executor.
    hints = await s.hints(uri)
    assert hints, "no inlay hints after compiling"
    for h in hints:
        assert h.position.character == len(lines[h.position.line]), h
        assert len(h.label) <= HINT_MAX, h.label
    region_hints = [h for h in hints if not h.label.startswith("┆")]
    for h in region_hints:
        assert HINT_RE.match(h.label), h.label
        assert "region" in tooltip_text(h)
    hinted = {h.position.line for h in region_hints}
    fc_line = line_of(GPT, "x = self.c_fc(x)")
    gelu_line = line_of(GPT, "return 0.5 * x * (1.0 + torch.tanh")
    assert fc_line in hinted and gelu_line in hinted, sorted(hinted)
    assert line_of(GPT, "def gpt_block_example") not in hinted
    # A range request only returns hints in that range.
    only = await s.hints(uri, gelu_line, gelu_line)
    assert {h.position.line for h in only} == {gelu_line}

    # Hover on a compiled line: region, executor, ops, the trace from this line, kernel code.
    text = hover_text(await s.hover(uri, gelu_line))
    assert_line_hover(text)
    assert "torch.tanh" in text
    # on a CPU the Triton preview's kernel, compiled for the target GPU here: its launch and static analysis
    assert "**Kernels** (compiled for the target GPU here, nothing run):" in text and "sm_90" in text, text
    # the line's regions are the ones its hint names
    label = next(h.label for h in region_hints if h.position.line == gelu_line)
    assert f"`{label.split()[0].split('+')[0]}`" in text
    # Hover on the target itself summarises it; hover on a blank line says nothing.
    assert "status: **ok**" in hover_text(await s.hover(uri, target_line))
    assert await s.hover(uri, line_of(GPT, '"""A GPT-2')) is None

    # Code actions on a compiled line.
    actions = await s.actions(uri, fc_line)
    titles = [a.title for a in actions]
    assert titles[:2] == ["Compile and benchmark", "Show generated trace"]
    assert any(t.startswith("Show kernel code for this region") for t in titles), titles

    # "Show generated trace": a read-only .py file under the cache folder, opened by the client.
    trace_cmd = command_of(actions[1])
    shown = await s.command(trace_cmd.command, *trace_cmd.arguments)
    assert shown["uri"].startswith("file://") and shown["uri"].endswith(".py")
    path = Path(shown["uri"][len("file://"):])
    assert path.exists() and not (path.stat().st_mode & 0o222)  # written read-only
    assert "gpt_block_example" in path.read_text()
    assert s.client.shown_documents[-1].uri == shown["uri"]

    kernel_action = next(a for a in actions if a.title.startswith("Show kernel code"))
    kcmd = command_of(kernel_action)
    shown = await s.command(kcmd.command, *kcmd.arguments)
    assert shown["uri"].endswith(".py")
    assert kcmd.arguments[2] in Path(shown["uri"][len("file://"):]).read_text()

    # fusionlens/regions, as the VS Code extension reads it.
    regions = await s.regions(uri)
    t0 = regions.targets[0]
    assert t0.name == "gpt_block_example" and t0.status == "ok"
    assert t0.regions and all(isinstance(ln, int) for r in t0.regions for ln in r.lines)
    assert fc_line in {ln for r in t0.regions for ln in r.lines}
    assert regions.targets[1].status == "not compiled"

    # clearCache: lenses go back to "Compile & benchmark".
    await s.command("fusionlens.clearCache")
    assert [l.command.title for l in await s.lenses(uri)][0] == "Compile & benchmark"


EXAMPLE_GROUPS = [("visual-studio-code", ("mlp.py", "norms.py", "softmax.py", "bert_layer.py")),
                  ("neovim", ("attention.py", "gpt_block.py", "llama_block.py"))]


@pytest.mark.parametrize("profile,examples", EXAMPLE_GROUPS, ids=[p for p, _ in EXAMPLE_GROUPS])
async def test_every_example_compiles_on_open(start_server, examples):
    """Opening an example compiles every target in it (compileTrigger onOpen); every target
    compiles, its lens shows the summary, and its compiled lines carry hints and hovers.
    The files are split over two servers (one per client profile) to start few workers."""
    s = await start_server({"compileTrigger": "onOpen"})
    paths = [EXAMPLES / name for name in examples if (EXAMPLES / name).exists()]
    uris = [s.open(path) for path in paths]
    for path, uri in zip(paths, uris):
        n_targets = path.read_text().count("@compiler.example")
        result = await s.wait_targets(uri, ("ok", "error"), timeout=600)
        assert len(result.targets) == n_targets
        bad = [(t.name, t.message) for t in result.targets if t.status != "ok"]
        assert not bad, (path.name, bad)
        for lens in await s.lenses(uri):
            assert SUMMARY_RE.match(lens.command.title), (path.name, lens.command.title)
        hints = await s.hints(uri)
        assert hints, f"no inlay hints in {path.name}"
        lines = path.read_text().splitlines()
        for h in hints:
            assert h.position.character == len(lines[h.position.line])
            assert len(h.label) <= HINT_MAX
        h = next(h for h in hints if not h.label.startswith("┆"))
        assert_line_hover(hover_text(await s.hover(uri, h.position.line)))
    # one worker did all of it
    assert (await s.command("fusionlens.debugInfo"))["workerRestarts"] == 0


@pytest.mark.parametrize("profile", ["neovim"])
async def test_other_file_annotations_and_data_dependent_warning(start_server):
    """Ops from a helper in another user file annotate that file when it is open; a warning
    from the compiler (data-dependent control flow) lands on the user's line and columns."""
    from lsp_helpers import FIXTURES

    s = await start_server({"compileTrigger": "onOpen"})
    helper = FIXTURES / "helper_ops.py"
    huri = s.open(helper)
    uri = s.open(FIXTURES / "helpers_other_file.py")
    await s.wait_targets(uri, ("ok",))
    hinted = {h.position.line for h in await s.hints(huri)}
    from lsp_helpers import marked_lines
    assert marked_lines(helper, "# OP:") <= hinted, (hinted, marked_lines(helper, "# OP:"))
    text = hover_text(await s.hover(huri, line_of(helper, "t = torch.tanh(inner)")))
    assert "helpers_other_file_example" in text and "torch.tanh" in text

    dd = FIXTURES / "data_dependent.py"
    duri = s.open(dd)
    await s.wait_targets(duri, ("ok", "error"))
    warnings = [d for d in s.diagnostics(duri) if d.severity == T.DiagnosticSeverity.Warning]
    line = line_of(dd, "if x.sum() > 0:")
    at = [d for d in warnings if d.range.start.line == line]
    assert at, [(d.range.start.line, d.message) for d in s.diagnostics(duri)]
    src = dd.read_text().splitlines()[line]
    assert all(d.range.start.character == src.index("x.sum()") for d in at), [(d.code, d.range) for d in at]
    # the value the branch read is a guard of the program, named at its line in the hover too
    assert any(d.code == "value-guard" for d in at), [(d.code, d.message) for d in at]
    assert "value guard" in hover_text(await s.hover(duri, line))
