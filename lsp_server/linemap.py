"""Lines as LSP counts them, and a map of 0-based lines of the text a report was compiled
from onto the current document.

LSP (and Python's tokenizer, hence every line number in a report) ends a line at `\\n`,
`\\r\\n` or `\\r` only; `str.splitlines` also splits at `\\x0b`, `\\x0c`, `\\x1c`-`\\x1e`,
`\\x85`, U+2028 and U+2029, so every line count of the server goes through `split_lines`.

A line that is unchanged (inside an `equal` block of a line diff) keeps its annotation at
its new position; a line that was edited or deleted loses it. So after an edit annotations
move with their lines or disappear until the next compile lands; they never sit on a
wrong line. The same map covers a buffer that differs from the file on disk.
"""

from __future__ import annotations

import difflib
import io
from collections.abc import Sequence

# above this many lines between the common head and tail, difflib drops lines that occur in
# more than 1% of them as anchors (its autojunk): a diff stays fast on a big, repetitive file
_EXACT_DIFF_LINES = 2000


def split_lines(text: str) -> list[str]:
    """The lines of `text` without their ends, as LSP counts them (no empty last line after a
    final line end, as `str.splitlines`)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def split_lines_keepends(text: str) -> list[str]:
    """`split_lines` with each line's end kept (`str.splitlines(True)`, as LSP counts)."""
    return io.StringIO(text, newline="").readlines()


class LineMap:
    """old line -> new line. A common head and tail are compared directly (an edit touches
    one place: the map then costs one pass over the lines); only what lies between goes
    through a line diff."""

    __slots__ = ("identity", "_head", "_tail", "_shift", "_old_len", "_middle")

    def __init__(self, old_lines: Sequence[str], new_lines: Sequence[str]):
        n_old, n_new = len(old_lines), len(new_lines)
        limit = min(n_old, n_new)
        head = 0
        while head < limit and old_lines[head] == new_lines[head]:
            head += 1
        tail = 0
        while tail < limit - head and old_lines[n_old - 1 - tail] == new_lines[n_new - 1 - tail]:
            tail += 1
        self.identity = head == n_old == n_new
        self._head, self._tail, self._shift, self._old_len = head, n_old - tail, n_new - n_old, n_old
        self._middle: dict[int, int] = {}
        old_mid, new_mid = old_lines[head:n_old - tail], new_lines[head:n_new - tail]
        if not old_mid or not new_mid:
            return
        big = max(len(old_mid), len(new_mid)) > _EXACT_DIFF_LINES
        matcher = difflib.SequenceMatcher(None, list(old_mid), list(new_mid), autojunk=big)
        for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
            if tag == "equal":
                for k in range(i2 - i1):
                    self._middle[head + i1 + k] = head + j1 + k

    def __call__(self, old_line: int | None) -> int | None:
        if old_line is None:
            return None
        if self.identity:
            return old_line
        if old_line < 0 or old_line >= self._old_len:
            return None
        if old_line < self._head:
            return old_line
        if old_line >= self._tail:
            return old_line + self._shift
        return self._middle.get(old_line)
