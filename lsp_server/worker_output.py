"""The worker's stderr (user prints and the worker's own log) as bounded lines.

User code can print anything: a gigabyte without a newline, megabyte lines by the thousand.
The pipe is always read to its end (a worker blocked on a full pipe would hang its compile),
in chunks, and only bounded pieces are kept: a line is cut past MAX_LINE_BYTES, what is
passed on (as window/logMessage, one line a message) stops after MAX_LINES lines or
MAX_BYTES bytes per compile, and the last TAIL_LINES lines, cut, are kept for the message
of a worker that died.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

MAX_LINE_BYTES = 1000  # of one line, passed on or kept
MAX_LINES = 200  # passed on per compile (and as many between one compile and the next)
MAX_BYTES = 64 * 1024  # passed on per compile (likewise)
TAIL_LINES = 8  # in a crash's message
READ_BYTES = 64 * 1024


class OutputLines:
    """Chunks of output in, bounded lines out (`on_line`), the last ones kept (`tail`)."""

    def __init__(self, on_line: Callable[[str], None] | None = None) -> None:
        self._on_line = on_line
        self._partial = bytearray()  # the current line's first MAX_LINE_BYTES
        self._cut = 0  # bytes of the current line past those
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._lines = self._bytes = 0
        self._dropped = False

    def restart(self) -> None:
        """A new compile: its own budget of lines and bytes passed on."""
        self._lines = self._bytes = 0
        self._dropped = False

    def clear(self) -> None:
        """A new worker: nothing of the old one's output is kept."""
        self._partial.clear()
        self._cut = 0
        self._tail.clear()
        self.restart()

    def feed(self, chunk: bytes) -> None:
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            room = MAX_LINE_BYTES - len(self._partial)
            self._partial += piece[:max(room, 0)]
            self._cut += max(len(piece) - max(room, 0), 0)
            if end < 0:
                return
            self._finish_line()
            start = end + 1

    def close(self) -> None:
        """The stream ended: a last line without its newline counts too."""
        if self._partial or self._cut:
            self._finish_line()

    def tail_text(self) -> str:
        lines = [line for line in self._tail if line.strip()]
        return ("\nlast worker output:\n" + "\n".join(lines)) if lines else ""

    def _finish_line(self) -> None:
        text = self._partial.decode("utf-8", "replace").rstrip("\r")
        if self._cut:
            text += f" ... ({self._cut} more bytes of this line cut)"
        self._partial.clear()
        self._cut = 0
        self._tail.append(text)
        self._pass_on(text)

    def _pass_on(self, text: str) -> None:
        if self._on_line is None or self._dropped:
            return
        self._lines += 1
        self._bytes += len(text)
        if self._lines > MAX_LINES or self._bytes > MAX_BYTES:
            self._dropped = True
            text = (f"(more worker output dropped: at most {MAX_LINES} lines and {MAX_BYTES // 1024} KiB "
                    "are passed on per compile)")
        try:
            self._on_line(text)
        except Exception:  # noqa: BLE001 - no client to tell
            pass
