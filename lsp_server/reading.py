"""Reading a file the client did not open: only a regular file, only so much, never waiting.

A workspace can hold a FIFO named `notes.py` (an open() for reading waits for a writer, on
the event loop: the server would answer nothing again), a symlink `zero.py -> /dev/zero`
(read to the end, never), and a client can name `file:///dev/stdin` (the server's own
protocol stream). So a file is opened non-blocking, checked with fstat to be a regular
file, and read up to MAX_SOURCE_BYTES; anything else raises NotReadable, which says what
the file is and is answered as an error (-32803, RequestFailed) by the request that asked.
"""

from __future__ import annotations

import os
import stat

from pygls.exceptions import JsonRpcException

MAX_SOURCE_BYTES = 16 * 1024 * 1024
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class NotReadable(JsonRpcException):
    """A file the server will not read: not a regular file, or too large."""

    CODE = -32803  # LSP's RequestFailed


def read_source(path: str, limit: int = MAX_SOURCE_BYTES) -> str:
    """The UTF-8 text of the regular file `path`, line ends as open() in text mode gives them
    (as the worker reads modules). Raises NotReadable (what it is instead), OSError (missing,
    no permission) or UnicodeDecodeError."""
    fd = os.open(path, _FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
            raise NotReadable(f"{path} is {kind}: not read (only regular files are)")
        if st.st_size > limit:
            raise NotReadable(f"{path} has {st.st_size} bytes: not read (at most {limit} are)")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(limit + 1 - total, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew since fstat
                raise NotReadable(f"{path} has over {limit} bytes: not read")
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def read_text_or_none(path: str) -> str | None:
    """read_source, None where it cannot be read for any reason (a cache's comparisons)."""
    try:
        return read_source(path)
    except (OSError, UnicodeDecodeError, NotReadable):
        return None
