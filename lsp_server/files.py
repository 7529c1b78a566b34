"""The server's own folder and how it writes there: private to this user, atomically.

The default folder is the platform's per-user cache folder (`$XDG_CACHE_HOME/fusionlens-lsp`,
`~/.cache/fusionlens-lsp`); only where there is none, `<tmp>/fusionlens-lsp-<uid>`. Every
folder the server writes in is opened without following a symlink, must be owned by this
user and, when the server chose it, is made 0700 (its subfolders always are). A file is
written to a new name in the same folder (O_CREAT|O_EXCL|O_NOFOLLOW) and renamed over its
name, so a symlink or file planted there is replaced, never followed or chmod'ed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import sys
import tempfile
from collections.abc import Iterator

APP = "fusionlens-lsp"
_O_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_O_NEW = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
          | getattr(os, "O_BINARY", 0))


class UnsafeFolder(OSError):
    """A folder the server will not write in; the text names it and says why."""


def platform_cache_dir() -> str | None:
    """This user's cache folder of the platform, None where there is none."""
    if sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Caches")
    elif os.name == "nt":
        base = os.environ.get("LOCALAPPDATA", "")
    else:
        base = os.environ.get("XDG_CACHE_HOME", "")
        if not os.path.isabs(base):  # the XDG spec: a relative value is ignored
            base = os.path.expanduser("~/.cache")
    return base if os.path.isabs(base) else None


def default_root() -> str:
    """Where the server writes when fusionlens.cacheFolder is not set (see the module doc)."""
    base = platform_cache_dir()
    if base is not None:
        try:
            os.makedirs(base, 0o700, exist_ok=True)
            if os.access(base, os.W_OK | os.X_OK):
                return os.path.join(base, APP)
        except OSError:
            pass  # a read-only or missing home: the temporary folder then
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"{APP}-{user}")


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def _open_dir(name: str, dir_fd: int | None, make_private: bool, shown: str) -> int:
    """Create (0700) or open the folder `name` (relative to `dir_fd`; `shown` in messages)
    without following a link; refuse one that is not a folder or not this user's;
    `make_private`: take group and others' access away from one that has it."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    try:
        fd = os.open(name, _O_DIR, dir_fd=dir_fd)
    except OSError as e:
        try:
            link = stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
        except OSError:
            link = False
        why = "is a symlink" if link or e.errno == errno.ELOOP else (
            "is not a folder" if e.errno == errno.ENOTDIR else e.strerror)
        raise UnsafeFolder(f"{shown} {why}: the server writes only in a real folder of its user's") from e
    st = os.fstat(fd)
    uid = _uid()
    if not stat.S_ISDIR(st.st_mode) or (uid is not None and st.st_uid != uid):
        os.close(fd)
        raise UnsafeFolder(f"{shown} is owned by uid {st.st_uid}, not by this user ({uid}): not writing there; "
                           "remove it or set fusionlens.cacheFolder")
    if make_private and stat.S_IMODE(st.st_mode) & 0o077:
        os.fchmod(fd, 0o700)  # the folder itself (an fd, no link followed)
    return fd


@contextlib.contextmanager
def private_folder(root: str, sub: str, root_is_ours: bool) -> Iterator[int]:
    """An fd of `root`/`sub`, both checked as `_open_dir` does (`sub` is always made 0700;
    `root` only when `root_is_ours`: the server chose it, not the user)."""
    root = os.path.abspath(root)
    parent = os.path.dirname(root)
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o700, exist_ok=True)
    root_fd = _open_dir(root, None, root_is_ours, root)
    try:
        sub_fd = _open_dir(sub, root_fd, True, os.path.join(root, sub))
    finally:
        os.close(root_fd)
    try:
        yield sub_fd
    finally:
        os.close(sub_fd)


def write_private(root: str, sub: str, name: str, text: str, root_is_ours: bool, mode: int = 0o444) -> str:
    """Write `text` to `root`/`sub`/`name` atomically (module doc); returns its path."""
    if not name or name in (".", "..") or os.sep in name or (os.altsep and os.altsep in name):
        raise ValueError(f"not a file name: {name!r}")
    data = text.encode("utf-8")
    with private_folder(root, sub, root_is_ours) as dir_fd:
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, _O_NEW, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                os.fchmod(f.fileno(), mode)  # our new file, by its fd
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
    return os.path.join(os.path.abspath(root), sub, name)
