"""`--socket PATH`: a unix socket only this user can open, that no second server takes over.

The socket lives in a folder that must be this user's and 0700 (made so where missing). A
lock file beside it (`PATH.lock`, flock'ed for the server's life) says a server holds the
path: a second server on a live path refuses to start and leaves the first one's socket
alone (a listening socket refuses it too, for a server without the lock); a socket left by
a server that is gone is replaced. The socket is removed when the server ends (also on
SIGTERM: lsp_server.app), and only if it is still the one this server made.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import sys

try:
    import fcntl
except ImportError:  # Windows has no unix sockets of ours anyway
    fcntl = None  # type: ignore[assignment]


class SocketPath:
    """A claimed socket path: `claim()` it, bind it, `bound()`, and `release()` at the end."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self._lock: int | None = None
        self._made: tuple[int, int] | None = None  # (st_dev, st_ino) of the socket this server made

    def claim(self) -> str:
        """The path, ready to bind; exits with a message where it is not this server's to take."""
        folder = os.path.dirname(self.path)
        os.makedirs(folder, 0o700, exist_ok=True)
        st = os.stat(folder)
        if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
            sys.exit(f"fusionlens-lsp: --socket {self.path}: {folder} must be a folder only you can use "
                     f"(yours, mode 0700; it is uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o})")
        self._take_lock()
        with contextlib.suppress(FileNotFoundError):
            old = os.lstat(self.path)
            if not stat.S_ISSOCK(old.st_mode) or old.st_uid != os.getuid():
                self._refuse("something else is there; not replacing it")
            if _listening(self.path):
                self._refuse("a server is listening there; not replacing it")
            os.unlink(self.path)  # a socket of ours left by a server that is gone
        return self.path

    def _take_lock(self) -> None:
        if fcntl is None:
            return
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            self._lock = os.open(self.path + ".lock", flags, 0o600)
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._refuse("another fusionlens-lsp serves this path; not starting")
        except OSError as e:
            self._refuse(f"cannot lock {self.path}.lock ({e.strerror})")

    def _refuse(self, why: str) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
        sys.exit(f"fusionlens-lsp: --socket {self.path}: {why}")

    def bound(self) -> None:
        """The socket exists now: remember which file it is."""
        with contextlib.suppress(OSError):
            st = os.lstat(self.path)
            self._made = (st.st_dev, st.st_ino)

    def release(self) -> None:
        """Remove the socket (if it is still ours) and the lock; safe to call twice."""
        with contextlib.suppress(OSError):
            st = os.lstat(self.path)
            if self._made == (st.st_dev, st.st_ino):
                os.unlink(self.path)
        self._made = None
        if self._lock is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path + ".lock")
            os.close(self._lock)
            self._lock = None


def _listening(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(path)
        except OSError:
            return False
        return True
