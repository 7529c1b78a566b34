"""The worker's processes as one tree, ended together (standard library only: the server and
the worker both import it).

The worker runs in its own session and process group, so a group kill takes what user code
started; a child that calls `os.setsid()` leaves the group, though, and a daemon that forks
twice is reparented to init. So on Linux the worker is a *child subreaper*
(PR_SET_CHILD_SUBREAPER): orphans below it are reparented to it, not to init, and every
process user code started stays in its tree in /proc. `kill_tree` freezes that tree
(SIGSTOP, so nothing forks meanwhile), then SIGKILLs it and the group. The worker also asks
for a signal when its parent dies (PR_SET_PDEATHSIG), where it ends its tree itself.
Elsewhere (no /proc, no prctl) only the process group is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_ROUNDS = 8  # new children found after this many freezes would be a fork bomb outrunning us


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Orphaned descendants are reparented to this process (Linux); True where that holds."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def signal_on_parent_death(signum: int) -> bool:
    """This process gets `signum` when its parent dies (Linux); True where that holds."""
    return _prctl(_PR_SET_PDEATHSIG, int(signum))


def _children_map() -> dict[int, list[int]]:
    """parent pid -> child pids, of every process in /proc (empty where there is no /proc)."""
    out: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read(1024)
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1:
            out.setdefault(int(fields[1]), []).append(int(name))
    return out


def descendants(pid: int) -> list[int]:
    """Every process below `pid` in /proc, parents before their children."""
    children = _children_map()
    out, todo = [], list(children.get(pid, ()))
    while todo:
        p = todo.pop(0)
        if p not in out:
            out.append(p)
            todo.extend(children.get(p, ()))
    return out


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def kill_tree(root: int, include_root: bool = True) -> None:
    """SIGKILL `root`'s process group (it leads one) and every process below it, those that
    left the group too: frozen first, so none forks a new one while the tree is walked."""
    stop, kill = getattr(signal, "SIGSTOP", None), getattr(signal, "SIGKILL", signal.SIGTERM)
    if hasattr(os, "killpg") and include_root and stop is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(root, stop)
    found: list[int] = []
    for _ in range(_ROUNDS):
        new = [p for p in descendants(root) if p not in found]
        if not new:
            break
        for p in new:
            if stop is not None:
                _signal(p, stop)
        found += new
    for p in found:
        _signal(p, kill)
    if include_root:
        if hasattr(os, "killpg"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(root, kill)
        _signal(root, kill)
