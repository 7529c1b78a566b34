"""Where an op came from: the user's frames on the Python stack when it was recorded.

A frame is a *user* frame when its file is not part of torch, of FusionLens itself, of
the standard library or of an installed package. The innermost user frame is the op's
location; the whole chain of user frames is its call stack (innermost first), so an op in
`nn.Module.forward` points at the line in `forward`, not into torch/nn/modules.
"""

from __future__ import annotations

import functools
import linecache
import os
import sys
import sysconfig
import traceback
from dataclasses import dataclass, field
from typing import Optional

from compiler.report import Frame

_HERE = os.path.dirname(os.path.abspath(__file__))


def _library_roots() -> tuple:
    roots = {_HERE}
    try:
        import torch

        roots.add(os.path.dirname(os.path.abspath(torch.__file__)))
    except ImportError:  # the language server uses is_user_file without torch
        pass
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.abspath(path))
    for path in sys.path:
        if path.endswith(("site-packages", "dist-packages")):
            roots.add(os.path.abspath(path))
    return tuple(sorted(roots))


_ROOTS = None


@functools.lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    global _ROOTS
    if not filename or filename.startswith("<"):
        return False
    if _ROOTS is None:
        _ROOTS = _library_roots()
    path = os.path.abspath(filename)
    return not any(path == root or path.startswith(root + os.sep) for root in _ROOTS)


def user_location(exc: BaseException, fallback_file: Optional[str] = None) -> tuple:
    """(file, line) of the innermost traceback frame of `exc` in a user file; else
    (fallback_file, None)."""
    user = [f for f in traceback.extract_tb(exc.__traceback__) if is_user_file(f.filename)]
    if user:
        return user[-1].filename, user[-1].lineno
    return fallback_file, None


@dataclass(frozen=True)
class Provenance:
    file: str
    line: int
    end_line: int
    col: int
    end_col: int
    stack: tuple = field(default=())  # user Frames, innermost first

    def source(self) -> str:
        return linecache.getline(self.file, self.line).strip()

    def short(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"

    def source_comment(self) -> str:
        """`path:line  source text`, as trace and kernel comments show the op's user line."""
        return f"{display_path(self.file)}:{self.line}  {self.source()}"


def display_path(file: str) -> str:
    """`file` relative to the working directory when it lies below it; else as given."""
    try:
        rel = os.path.relpath(file)
    except ValueError:
        return file
    return file if rel.startswith("..") else rel


_positions_cache: dict = {}


def _positions(code):
    found = _positions_cache.get(code)
    if found is None:
        found = _positions_cache[code] = list(code.co_positions())
    return found


def capture(start_frame=None):
    """Provenance of the current call, or None when no user frame is on the stack."""
    frame = start_frame or sys._getframe(1)
    stack = []
    first = None
    while frame is not None:
        code = frame.f_code
        if is_user_file(code.co_filename):
            if first is None:
                first = frame
            stack.append(Frame(code.co_filename, frame.f_lineno, code.co_name))
        frame = frame.f_back
    if first is None:
        return None
    line, end_line, col, end_col = first.f_lineno, first.f_lineno, 0, 0
    if first.f_lasti >= 0:
        positions = _positions(first.f_code)
        index = first.f_lasti // 2
        if index < len(positions):
            pline, pend, pcol, pend_col = positions[index]
            if pline is not None:
                line, end_line = pline, pend or pline
                col, end_col = pcol or 0, pend_col or 0
    return Provenance(first.f_code.co_filename, line, end_line, col, end_col, tuple(stack))
