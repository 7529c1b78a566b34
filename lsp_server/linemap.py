"""Map 0-based lines of the text a report was compiled from onto the current document.

A line that is unchanged (inside an `equal` block of a line diff) keeps its annotation at
its new position; a line that was edited or deleted loses it. So after an edit annotations
move with their lines or disappear until the next compile lands; they never sit on a
wrong line. The same map covers a buffer that differs from the file on disk.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence


class LineMap:
    __slots__ = ("_map", "identity")

    def __init__(self, old_lines: Sequence[str], new_lines: Sequence[str]):
        self.identity = list(old_lines) == list(new_lines)
        self._map: dict[int, int] = {}
        if self.identity:
            return
        matcher = difflib.SequenceMatcher(None, list(old_lines), list(new_lines), autojunk=False)
        for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
            if tag == "equal":
                for k in range(i2 - i1):
                    self._map[i1 + k] = j1 + k

    def __call__(self, old_line: int | None) -> int | None:
        if old_line is None:
            return None
        if self.identity:
            return old_line
        return self._map.get(old_line)


def split_lines(text: str) -> list[str]:
    return text.splitlines()
