"""Edits land where the client made them, and what is shown stays on its lines (issue 22,
items 5, 6 and 8): LSP ends lines at `\\n`, `\\r\\n` and `\\r` only, while `str.splitlines`
(pygls' TextDocument) also splits at a form feed, `\\x1c` or U+2028; hover on a file that is
not there answers nothing; a plain-text client gets plain text.

The server tests use the stand-in compiler (tests/lsp/lsp_fake_compile.py: every call in a
function body is an op, consecutive lines make a region of up to three), so they are fast.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys

import pytest
from lsprotocol import types as T
from pytest_lsp import client_capabilities

from lsp_helpers import FAKE, REPO, hover_text, server_env


# 0-based lines as LSP (and Python's tokenizer, hence the report) count them
SOURCE = (
    "import torch\n"  # 0
    "import compiler\n"  # 1
    "\x0c\n"  # 2: a form feed line, as the standard library has between sections
    "def helper(x):\n"  # 3
    "    # a comment with a line separator \u2028 and a \x1c in it, and 😀\n"  # 4
    "    y = torch.tanh(x)  # \u2028 😀\n"  # 5: R0
    "    return torch.relu(y)\n"  # 6: R0, where it ends
    "\n"  # 7
    "\n"  # 8
    "@compiler.example\n"  # 9
    "def example():\n"  # 10
    "    return helper, (torch.randn(4),)\n"  # 11
)


def lsp_lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def encoding(s) -> str:
    """The position encoding the server took: the client's first (pygls), else UTF-16."""
    general = s.client.capabilities.general
    return (general.position_encodings or ["utf-16"])[0] if general is not None else "utf-16"


def units(text: str, enc: str = "utf-16") -> int:
    """The length of `text` in a position encoding's units."""
    return {"utf-8": len(text.encode("utf-8")), "utf-32": len(text)}.get(enc, len(text.encode("utf-16-le")) // 2)


def replaced(text: str, start: tuple[int, int], end: tuple[int, int], new: str, enc: str = "utf-16") -> str:
    """`text` after an LSP edit (positions in `enc` units, lines ended by \\n here)."""
    lines = text.split("\n")

    def offset(line: int, col: int) -> int:
        head = sum(len(ln) + 1 for ln in lines[:line])
        n, i = 0, 0
        while n < col:
            n += units(lines[line][i], enc)
            i += 1
        return head + i

    return text[:offset(*start)] + new + text[offset(*end):]


def _change(s, uri: str, start: tuple[int, int], end: tuple[int, int], text: str) -> None:
    s.change(uri, [T.TextDocumentContentChangePartial(
        range=T.Range(T.Position(*start), T.Position(*end)), text=text)])


async def _compiled(s, uri: str, ops: list[str] | None = None):
    """Compile the buffer; its target once compiled (with `ops`: once its region has them)."""
    await s.compile(uri, "example")

    async def done():
        (target,) = (await s.regions(uri)).targets
        if target.status == "ok" and (ops is None or [o for r in target.regions for o in r.ops] == ops):
            return target
        return None

    for _ in range(300):
        target = await done()
        if target is not None:
            return target
        await asyncio.sleep(0.1)
    raise AssertionError(f"not compiled in 30 s: {(await s.regions(uri)).targets}")


def _hint_ends(hints) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for h in hints:
        out.setdefault(h.position.line, set()).add(h.position.character)
    return out


async def test_form_feed_and_line_separators_keep_hints_on_their_lines(start_server, tmp_path):
    path = tmp_path / "separators.py"
    path.write_text(SOURCE, encoding="utf-8")
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE)
    uri = s.open(path, SOURCE)
    target = await _compiled(s, uri)
    assert [r.lines for r in target.regions] == [[5, 6]]
    lines, enc = lsp_lines(SOURCE), encoding(s)
    # at the end of the line in the client's units (the line holds U+2028 and an astral emoji)
    assert _hint_ends(await s.hints(uri)) == {5: {units(lines[5], enc)}, 6: {units(lines[6], enc)}}
    hover = await s.hover(uri, 5)
    assert "torch.tanh" in hover_text(hover)
    assert hover.range.end == T.Position(5, units(lines[5], enc))


async def test_incremental_edits_around_separators_apply_where_the_client_made_them(start_server, tmp_path):
    path = tmp_path / "separators.py"
    path.write_text(SOURCE, encoding="utf-8")
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE)
    uri = s.open(path, SOURCE)
    await _compiled(s, uri)
    text, enc = SOURCE, encoding(s)

    # a line typed above the form feed: every annotation moves down one line
    _change(s, uri, (1, 0), (1, 0), "import os\n")
    text = replaced(text, (1, 0), (1, 0), "import os\n", enc)
    lines = lsp_lines(text)
    assert _hint_ends(await s.hints(uri)) == {6: {units(lines[6], enc)}, 7: {units(lines[7], enc)}}

    # the emoji after U+2028 on the comment line edited (in the client's units), then a call
    # renamed on the line below it: each lands on its own line
    col = units(lines[5][:lines[5].index("😀")], enc)
    start, end = (5, col), (5, col + units("😀", enc))
    _change(s, uri, start, end, "ok")
    text = replaced(text, start, end, "ok", enc)
    lines = lsp_lines(text)
    col = units(lines[6][:lines[6].index("tanh")], enc)
    _change(s, uri, (6, col), (6, col + 4), "sigmoid")
    text = replaced(text, (6, col), (6, col + 4), "sigmoid", enc)
    lines = lsp_lines(text)
    assert "sigmoid" in lines[6] and lines[5].endswith("and ok")
    # the renamed line lost its hint until the next compile; the line below kept its own
    assert _hint_ends(await s.hints(uri)) == {7: {units(lines[7], enc)}}

    # compiling the buffer compiles the text the client holds: no syntax error, the new op
    target = await _compiled(s, uri, ops=["torch.sigmoid", "torch.relu"])
    assert [r.lines for r in target.regions] == [[6, 7]]
    assert _hint_ends(await s.hints(uri)) == {6: {units(lines[6], enc)}, 7: {units(lines[7], enc)}}
    await asyncio.sleep(0.5)  # diagnostics wait for the typing to pause
    assert not [d for d in s.diagnostics(uri) if d.code == "syntax-error"]


async def test_hover_on_a_missing_file_or_a_non_file_uri_answers_null(start_server, tmp_path):
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE)
    missing = (tmp_path / "gone.py").as_uri()
    for uri in (missing, "untitled:Untitled-7", "https://example.com/model.py"):
        assert await s.hover(uri, 0) is None, uri
        assert await s.hints(uri) == [], uri
    # the server is fine afterwards
    path = tmp_path / "separators.py"
    path.write_text(SOURCE, encoding="utf-8")
    uri = s.open(path, SOURCE)
    await _compiled(s, uri)
    assert "torch.relu" in hover_text(await s.hover(uri, 6))


async def test_a_plain_text_client_gets_plain_text_hovers(start_server, tmp_path, profile):
    caps = client_capabilities(profile)
    caps.text_document.hover = T.HoverClientCapabilities(content_format=[T.MarkupKind.PlainText])
    plain = SOURCE.replace("\x0c", "").replace("\u2028", "").replace("\x1c", "")  # this defect alone
    path = tmp_path / "model.py"
    path.write_text(plain, encoding="utf-8")
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE, capabilities=caps)
    uri = s.open(path, plain)
    await _compiled(s, uri)
    for line in (5, 10):  # a compiled line, the target's def
        hover = await s.hover(uri, line)
        assert hover.contents.kind == T.MarkupKind.PlainText
        text = hover_text(hover)
        assert "FusionLens" in text and "torch" in text, text
        for markup in ("###", "**", "`", "|---"):
            assert markup not in text, (markup, text)
    # the compiled line's code is there, indented as a block
    assert "\n    t0 = torch.tanh(...)" in hover_text(await s.hover(uri, 5))


@pytest.mark.skipif(shutil.which("nvim") is None, reason="nvim is not on PATH (Debian: apt-get install -y neovim)")
def test_the_neovim_snippet_of_the_docs_runs_on_the_neovim_here(tmp_path):
    """docs/lsp.md's Neovim 0.7 snippet (Debian 12's Neovim): both Python buffers on one
    client, rooted at the pyproject.toml folder."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    sub = tmp_path / "pkg"
    sub.mkdir()
    (sub / "a.py").write_text("x = 1\n")
    (sub / "b.py").write_text(SOURCE, encoding="utf-8")
    out = tmp_path / "nvim.json"
    env = dict(server_env(), FL_REPO=str(REPO), FL_FILE1=str(sub / "a.py"), FL_FILE2=str(sub / "b.py"),
               FL_OUT=str(out), FL_PYTHON=sys.executable, XDG_STATE_HOME=str(tmp_path),
               XDG_CACHE_HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path))
    script = REPO / "tests" / "editors" / "nvim_snippet.lua"
    proc = subprocess.run(["nvim", "--headless", "--clean", "-c", f"luafile {script}"], env=env, cwd=sub,
                          capture_output=True, text=True, timeout=120)
    assert out.exists(), f"nvim wrote nothing (rc {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    result = json.loads(out.read_text())
    assert "error" not in result, result["error"]
    (first,), (second,) = result["clients"]
    assert first == second and result["name"] == "fusionlens"
    assert os.path.realpath(result["root"]) == os.path.realpath(tmp_path)
    assert result["lenses"] == ["Compile & benchmark"]


# --- the pure parts -----------------------------------------------------------------------

def test_lines_split_as_lsp_counts_them():
    from lsp_server.linemap import split_lines, split_lines_keepends

    text = "a\x0cb\u2028c\x1c\r\nd\re\n\nf"
    assert split_lines(text) == ["a\x0cb\u2028c\x1c", "d", "e", "", "f"]
    assert split_lines_keepends(text) == ["a\x0cb\u2028c\x1c\r\n", "d\r", "e\n", "\n", "f"]
    assert split_lines("") == [] and split_lines("x\n") == ["x"]


def test_a_line_map_moves_lines_past_an_edit_and_drops_the_edited():
    from lsp_server.linemap import LineMap

    old = [f"line {i}" for i in range(5000)] + ["x = y"] * 3000  # big and repetitive
    new = ["# new"] + old[:2500] + ["changed"] + old[2501:]
    lm = LineMap(old, new)
    assert [lm(0), lm(2499), lm(2500), lm(2501), lm(7999), lm(8000)] == [1, 2500, None, 2502, 8000, None]


def test_tiny_estimates_read_as_less_than_a_tenth_of_a_microsecond():
    from fusionlens.report.schema import format_ms  # the editor's and the CLI's times alike

    assert format_ms(0.0000012) == "< 0.1 µs" and format_ms(0.0) == "< 0.1 µs"
    assert format_ms(0.0032) == "3.2 µs" and format_ms(None) == "?"


def test_a_tooltip_of_a_line_in_many_regions_lists_a_few():
    from fusionlens.report.schema import CompileReport, OpRecord, ProgramReport, Region, SourceLine, Target
    from lsp_server.annotations import LineNote, Result
    from lsp_server.views import TOOLTIP_REGIONS, hint_tooltip

    regions = [Region(f"R{i}", "torch", ["mul"], [SourceLine("/m.py", 3)], "", [], []) for i in range(50)]
    program = ProgramReport("forward", regions=regions)
    rep = CompileReport(Target("t", "/m.py", 9, 10), programs=[program],
                        ops=[OpRecord(0, "torch.mul", "R0", "/m.py", 3, 3, 0, 1, [], "", [])])
    res = Result("t", "/m.py", None, "ok", "", rep, {}, 8)
    notes = [LineNote(res, program, r, 2, []) for r in regions]
    tip = hint_tooltip(notes, lambda r, rid: [2])
    assert tip.count("**FusionLens** region") == TOOLTIP_REGIONS
    assert f"… and {50 - TOOLTIP_REGIONS} more regions: hover the line for all" in tip


def test_an_unsaved_buffers_lines_are_pythons(tmp_path):
    """What provenance reads for an op's line (its column, its text) of an editor's buffer."""
    import linecache

    from fusionlens.driver.targets import _use_source

    path = str(tmp_path / "buffer.py")
    _use_source(path, SOURCE)
    try:
        assert linecache.getline(path, 6).rstrip("\n") == lsp_lines(SOURCE)[5]
    finally:
        _use_source(path, None)


@pytest.mark.parametrize("profile", ["neovim"])
async def test_a_client_that_resolves_tooltips_gets_them_on_resolve(start_server, tmp_path):
    """Tooltips are most of a whole file's hint answer: a client that can resolve them (Neovim
    declares it) gets hints without, and the same tooltip from inlayHint/resolve."""
    path = tmp_path / "separators.py"
    path.write_text(SOURCE, encoding="utf-8")
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE)
    uri = s.open(path, SOURCE)
    await _compiled(s, uri)
    sent = await s.hints(uri, resolve=False)
    assert sent and all(h.tooltip is None and h.data["uri"] == uri for h in sent)
    resolved = await s.hints(uri)
    assert all(h.tooltip is not None and "torch.tanh" in h.tooltip.value for h in resolved if h.position.line == 5)
    eager = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=FAKE,
                               capabilities=client_capabilities("visual-studio-code"))
    other = eager.open(path, SOURCE)
    await _compiled(eager, other)
    assert [h.tooltip.value for h in await eager.hints(other, resolve=False)] == [h.tooltip.value for h in resolved]
