"""End to end: what goes wrong, and that the server keeps answering.

Fixtures in tests/fixtures/ mark their interesting lines with comments (# RAISES HERE,
# UNSUPPORTED, # SYNTAX ERROR HERE, ...); tests look lines up by those markers.
"""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types as T

from lsp_helpers import EXAMPLES, FIXTURES
from lsp_helpers import SUMMARY_RE, hover_text, line_of, marked_lines

pytestmark = pytest.mark.asyncio

ERROR = T.DiagnosticSeverity.Error


async def test_server_never_imports_torch(start_server):
    s = await start_server({"compileTrigger": "manual"})
    uri = s.open(EXAMPLES / "mlp.py")
    assert [l.command.title for l in await s.lenses(uri)] == ["Compile & benchmark"] * 2
    info = await s.command("fusionlens.debugInfo")
    assert info["torchImported"] is False
    assert info["userModules"] == []
    assert info["workerPid"] is None  # nothing was compiled, so no worker either


@pytest.mark.parametrize("profile", ["neovim"])
async def test_syntax_error_document(start_server):
    s = await start_server({"compileTrigger": "onOpen"})
    path = FIXTURES / "syntax_error.py"
    uri = s.open(path)
    diags = await s.wait_for(lambda: s.diagnostics(uri), 20, "syntax-error diagnostic")
    assert len(diags) == 1 and diags[0].severity == ERROR
    assert diags[0].range.start.line == line_of(path, "# SYNTAX ERROR HERE") == 12
    assert "SyntaxError" in diags[0].message
    # the server keeps answering, on this document and others; the file means to have
    # targets, so its lens says why none compiles, at the error's line
    (lens,) = await s.lenses(uri)
    assert lens.range.start.line == 12 and lens.command.title.startswith("Not compiled: SyntaxError")
    assert await s.hints(uri) == []
    other = s.open(EXAMPLES / "mlp.py")
    assert len(await s.lenses(other)) == 2
    # fixing the line removes the diagnostic and brings the target back
    line = 12
    text = path.read_text().splitlines()[line]
    s.change(uri, [T.TextDocumentContentChangePartial(
        range=T.Range(T.Position(line, 0), T.Position(line, len(text))),
        text="    def forward(self, x):")])
    await s.wait_for(lambda: s.diagnostics(uri) == [], 20, "diagnostic cleared")
    assert [l.command.args if False else l.command.title for l in await s.lenses(uri)] == ["Compile & benchmark"]


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_target_that_raises_and_bad_returns(start_server):
    s = await start_server({"compileTrigger": "onOpen"})
    raises = FIXTURES / "raises.py"
    uri = s.open(raises)
    await s.wait_targets(uri, ("ok", "error"))
    regions = await s.regions(uri)
    assert regions.targets[0].status == "error"
    assert "forward refuses width 16" in regions.targets[0].message
    diags = s.diagnostics(uri)
    errors = [d for d in diags if d.severity == ERROR]
    lines = {d.range.start.line for d in errors}
    assert line_of(raises, "# RAISES HERE") in lines, diags
    assert line_of(raises, "def raises_example") in lines, diags
    assert all("forward refuses width 16" in d.message for d in errors)
    lens = (await s.lenses(uri))[0]
    assert lens.command.title.startswith("Compile failed: ")
    assert "ValueError" in hover_text(await s.hover(uri, line_of(raises, "def raises_example"))) or \
        "refuses" in hover_text(await s.hover(uri, line_of(raises, "def raises_example")))

    bad = FIXTURES / "bad_return.py"
    buri = s.open(bad)
    result = await s.wait_targets(buri, ("ok", "error"), timeout=300)
    status = {t.name: t.status for t in result.targets}
    assert status.pop("good_example") == "ok"
    assert set(status.values()) == {"error"}, status
    error_lines = {d.range.start.line for d in s.diagnostics(buri) if d.severity == ERROR}
    for t in result.targets:
        if t.name != "good_example":
            assert t.line in error_lines, (t.name, error_lines)


@pytest.mark.parametrize("profile", ["neovim"])
async def test_fallback_ops_become_diagnostics(start_server):
    s = await start_server({"compileTrigger": "onOpen"})
    path = FIXTURES / "unsupported_op.py"
    uri = s.open(path)
    result = await s.wait_targets(uri, ("ok", "error"), timeout=300)
    assert result.targets[0].status == "ok", result.targets[0].message
    marked = marked_lines(path, "# UNSUPPORTED")
    diags = [d for d in s.diagnostics(uri)
             if d.severity in (T.DiagnosticSeverity.Information, T.DiagnosticSeverity.Warning)]
    at = {d.range.start.line for d in diags}
    assert at & marked, (marked, [(d.range.start.line, d.message) for d in diags])
    assert all(d.source == "fusionlens" for d in diags)
    # the fallback op's line is still annotated: it runs on the torch executor
    hints = await s.hints(uri)
    assert {h.position.line for h in hints} & marked


def _errors_by_line(s, uri) -> dict:
    return {d.range.start.line: d for d in s.diagnostics(uri) if d.severity == ERROR}


def _assert_points_at(s, uri, path, here: int, def_line: int, *words) -> None:
    """An error diagnostic on `here` (the user's line where the code was) with `words` in it,
    and the one on the target's `def` line refers to `here` (relatedInformation)."""
    errors = _errors_by_line(s, uri)
    assert sorted(errors) == sorted({here, def_line}), [(d.range.start.line, d.message) for d in errors.values()]
    for w in words:
        assert w in errors[here].message, errors[here].message
    related = errors[def_line].related_information
    assert related and related[0].location.uri == uri, errors[def_line]
    assert related[0].location.range.start.line == here
    assert f"{path.name}:{here + 1}" in errors[def_line].message


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_timeout_kills_worker_then_crash_restarts_it(start_server):
    s = await start_server({"compileTrigger": "manual", "timeoutSeconds": 4})
    loops = FIXTURES / "loops_forever.py"
    uri = s.open(loops)
    result = await s.compile(uri, "sleeps_forever_example")
    assert result["ok"] is False
    target_line = line_of(loops, "def sleeps_forever_example")
    # a long blocking call (time.sleep) inside `while True` in forward: the loop is where it hung
    loop = line_of(loops, "# LOOPS HERE", line_of(loops, "class SleepsForever"))
    here = next(iter(set(_errors_by_line(s, uri)) - {target_line}), None)
    assert here in (loop, loop + 1), s.diagnostics(uri)
    _assert_points_at(s, uri, loops, here, target_line, "timed out after 4 s here", "(in forward)")
    assert "timed out after 4 s" in _errors_by_line(s, uri)[target_line].message
    assert s.statuses[-1].state == "failed"
    info = await s.command("fusionlens.debugInfo")
    assert info["workerPid"] is None  # killed

    # a pure-Python busy loop: same
    result = await s.compile(uri, "loops_forever_example")
    assert result["ok"] is False
    target_line = line_of(loops, "def loops_forever_example")
    loop = line_of(loops, "# LOOPS HERE")
    errors = _errors_by_line(s, uri)
    here = next(iter(set(errors) - {target_line, line_of(loops, "def sleeps_forever_example"),
                                    line_of(loops, "# LOOPS HERE", loop + 1),
                                    line_of(loops, "# LOOPS HERE", loop + 1) + 1}), None)
    assert here in (loop, loop + 1, loop + 2), s.diagnostics(uri)
    assert "timed out after 4 s here (in forward)" in errors[here].message
    assert errors[target_line].related_information[0].location.range.start.line == here

    # a worker that dies (os._exit in the user's forward) becomes a diagnostic on that line
    crashes = FIXTURES / "crashes.py"
    curi = s.open(crashes)
    result = await s.compile(curi, "crashes_example")
    assert result["ok"] is False
    def_line = line_of(crashes, "def crashes_example")
    _assert_points_at(s, curi, crashes, line_of(crashes, "# CRASHES HERE"), def_line,
                      "exit code 3", "(in forward)")
    assert "worker died" in _errors_by_line(s, curi)[def_line].message
    # ... and the next compile gets a fresh worker and succeeds
    mlp = s.open(EXAMPLES / "mlp.py")
    assert (await s.compile(mlp, "mlp_function_example"))["ok"] is True
    info = await s.command("fusionlens.debugInfo")
    assert info["workerPid"] is not None and info["workerRestarts"] >= 1
    assert info["torchImported"] is False


@pytest.mark.parametrize("profile", ["neovim"])
async def test_segfault_and_shape_error_point_at_the_users_line(start_server):
    s = await start_server({"compileTrigger": "manual", "timeoutSeconds": 60})
    path = FIXTURES / "segfaults.py"
    uri = s.open(path)
    result = await s.compile(uri, "segfaults_example")
    assert result["ok"] is False
    # the innermost user frame: the helper the forward called, not forward, not ctypes
    _assert_points_at(s, uri, path, line_of(path, "# SEGFAULTS HERE"), line_of(path, "def segfaults_example"),
                      "SIGSEGV", "(in poke_null)")

    # an error raised by the example's call: at the line in forward, and the def refers to it
    shape = FIXTURES / "shape_error.py"
    suri = s.open(shape)
    result = await s.compile(suri, "wrong_width_example")
    assert result["ok"] is False
    _assert_points_at(s, suri, shape, line_of(shape, "# SHAPE ERROR HERE"), line_of(shape, "def wrong_width_example"),
                      "mat1 and mat2 shapes cannot be multiplied")


@pytest.mark.parametrize("profile", ["neovim"])
async def test_edit_cancels_running_compile(start_server):
    s = await start_server({"compileTrigger": "manual", "timeoutSeconds": 120})
    loops = FIXTURES / "loops_forever.py"
    uri = s.open(loops)
    task = asyncio.ensure_future(s.compile(uri, "sleeps_forever_example"))
    await s.wait_for(lambda: any(st.state == "compiling" for st in s.statuses), 30, "compile start")
    await asyncio.sleep(0.5)
    s.change(uri, [T.TextDocumentContentChangePartial(
        range=T.Range(T.Position(0, 0), T.Position(0, 0)), text="# edited\n")])
    result = await asyncio.wait_for(task, 30)  # long before the 120 s timeout
    assert result["ok"] is False
    assert "cancel" in s.statuses[-1].message
    regions = await s.regions(uri)
    sleeps = next(t for t in regions.targets if t.name == "sleeps_forever_example")
    assert sleeps.status == "not compiled" and "cancelled" in sleeps.message
    lens = next(l for l in await s.lenses(uri) if l.command.arguments[1] == "sleeps_forever_example")
    assert "cancelled" in lens.command.title


@pytest.mark.parametrize("profile", ["neovim"])
async def test_turning_execution_off_cancels_and_the_lens_says_why(start_server):
    s = await start_server({"compileTrigger": "manual", "timeoutSeconds": 120})
    uri = s.open(FIXTURES / "loops_forever.py")
    await s.queue_compile(uri, "sleeps_forever_example")
    await s.wait_for(lambda: any(st.state == "compiling" for st in s.statuses), 30, "compile start")
    s.client.workspace_did_change_configuration(
        T.DidChangeConfigurationParams(settings={"fusionlens": {"allowExecution": False}}))
    await s.wait_for(lambda: s.statuses[-1].state != "compiling", 30, "the compile ends")
    lens = next(l for l in await s.lenses(uri) if l.command.arguments[1] == "sleeps_forever_example")
    assert lens.command.title == "Not compiled: execution disabled (fusionlens.allowExecution)"


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_execution_disabled(start_server):
    s = await start_server({"compileTrigger": "onOpen", "allowExecution": False})
    path = EXAMPLES / "mlp.py"
    uri = s.open(path)
    lenses = await s.lenses(uri)
    assert len(lenses) == 2
    assert all(l.command.title == "Not compiled: execution disabled (fusionlens.allowExecution)"
               for l in lenses)
    result = await s.compile(uri, None)
    assert result["ok"] is False and "allowExecution" in result["message"]
    assert any("allowExecution" in m.message for m in s.client.messages)
    regions = await s.regions(uri)
    assert {t.status for t in regions.targets} == {"not allowed"}
    hover = hover_text(await s.hover(uri, line_of(path, "def mlp_example")))
    assert "not allowed" in hover and "allowExecution" in hover
    info = await s.command("fusionlens.debugInfo")
    assert info["workerPid"] is None and info["torchImported"] is False
    assert s.statuses == []

    # turning it on in the running server is refused: a false wins until the server restarts
    s.client.workspace_did_change_configuration(
        T.DidChangeConfigurationParams(settings={"fusionlens": {"allowExecution": True}}))
    await s.wait_for(lambda: any("restart the server" in m.message for m in s.client.messages), 20, "refusal")
    assert {t.status for t in (await s.regions(uri)).targets} == {"not allowed"}
    assert (await s.command("fusionlens.debugInfo"))["workerPid"] is None

    # the user trusts the workspace: the client restarts the server, open documents compile
    s = await start_server({"compileTrigger": "onOpen", "allowExecution": True})
    uri = s.open(path)
    await s.wait_targets(uri, ("ok",))
    assert all(SUMMARY_RE.match(l.command.title) for l in await s.lenses(uri))


@pytest.mark.parametrize("profile", ["neovim"])
async def test_on_save_trigger_edit_shifts_annotations_and_cache(start_server):
    s = await start_server({"compileTrigger": "onSave"})
    path = EXAMPLES / "mlp.py"
    uri = s.open(path)
    await asyncio.sleep(0.5)  # well past debounceMs: opening alone compiles nothing
    assert s.statuses == []
    assert [l.command.title for l in await s.lenses(uri)] == ["Compile & benchmark"] * 2
    s.client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    await s.wait_targets(uri, ("ok",))
    before = await s.hints(uri)
    hinted = sorted({h.position.line for h in before})
    fc1 = line_of(path, "x = self.fc1(x)")
    act = line_of(path, "x = self.act(x)")
    assert fc1 in hinted and act in hinted

    # insert two lines at the top: every annotation moves down by two
    s.change(uri, [T.TextDocumentContentChangePartial(
        range=T.Range(T.Position(0, 0), T.Position(0, 0)), text="# one\n# two\n")])
    after = await s.hints(uri)
    assert sorted({h.position.line for h in after}) == [ln + 2 for ln in hinted]
    assert [h.label for h in after] == [h.label for h in before]
    assert "region" in hover_text(await s.hover(uri, fc1 + 2))

    # edit a compiled line: its annotation goes (it no longer describes that text)
    text = path.read_text().splitlines()[act]
    s.change(uri, [T.TextDocumentContentChangePartial(
        range=T.Range(T.Position(act + 2, 0), T.Position(act + 2, len(text))),
        text="        x = self.act(x) * 2")])
    lines = {h.position.line for h in await s.hints(uri)}
    assert act + 2 not in lines and fc1 + 2 in lines
    # the lens still shows the last result for the target
    assert SUMMARY_RE.match((await s.lenses(uri))[0].command.title)

    # close, reopen and save the unchanged file: answered from the cache, no new compile
    n = len(s.statuses)
    s.client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri)))
    uri = s.open(path)
    s.client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    await asyncio.sleep(0.5)
    assert SUMMARY_RE.match((await s.lenses(uri))[0].command.title)
    assert [st for st in s.statuses[n:] if st.state == "compiling"] == []
    assert sorted({h.position.line for h in await s.hints(uri)}) == hinted
    assert (await s.command("fusionlens.debugInfo"))["cacheEntries"] == 2
