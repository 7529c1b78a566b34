"""Small helpers shared by the language-server tests."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from lsprotocol import types as T

HINT_RE = re.compile(r"^\S+( \+\d+ more)? · [\w./-]+( · [\d.]+ (ms|µs))?$")
SUMMARY_RE = re.compile(r"^\d+ regions? · \d+ kernels?( · [\d.]+ (ms|µs))?( · [\d.]+x vs eager)?$")


def line_of(path: Path, needle: str, start: int = 0) -> int:
    """0-based line of the first line (from `start`) that contains `needle`."""
    for i, line in enumerate(Path(path).read_text().splitlines()):
        if i >= start and needle in line:
            return i
    raise AssertionError(f"{needle!r} not in {path}")


def marked_lines(path: Path, marker: str) -> set:
    return {i for i, line in enumerate(Path(path).read_text().splitlines()) if marker in line}


def command_of(action) -> T.Command:
    """pygls' client parses a CodeAction with a command as `Command | CodeAction` and may pick
    Command, leaving the nested command dict as a string; undo that."""
    cmd = action.command
    if isinstance(cmd, str) and cmd.startswith("{"):
        data = ast.literal_eval(cmd)
        return T.Command(title=data["title"], command=data["command"], arguments=data.get("arguments"))
    return cmd


def hover_text(hover) -> str:
    assert hover is not None, "no hover"
    contents = hover.contents
    return contents.value if hasattr(contents, "value") else str(contents)


def tooltip_text(hint) -> str:
    tip = hint.tooltip
    return tip.value if hasattr(tip, "value") else str(tip or "")
