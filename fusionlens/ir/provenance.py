"""Where an op came from: the frames of model code on the Python stack when it was recorded.

A frame is *model code* (a user frame) when its file is not part of torch, of FusionLens
itself or of the standard library, wherever it lives: the user's own files and a model
library's installed files (transformers' modeling_llama.py) alike. The innermost such frame
is the op's location; its stack runs from there out to the user's own call (the frames of
the traced call, innermost first, then the line that called it), so an op in
`nn.Module.forward` points at the line in `forward`, not into torch/nn/modules, and an op of
torch's own module called directly (`nn.LayerNorm`) points at the user's call.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import linecache
import os
import site
import sys
import traceback
from dataclasses import dataclass, field

from fusionlens.report.discovery import CodeRoots, is_model_code

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # fusionlens/
# FusionLens's own folders: the package, its former name (the `compiler` alias) and the server
_FUSIONLENS = (_PACKAGE, *(os.path.join(os.path.dirname(_PACKAGE), d) for d in ("compiler", "lsp_server")))


@functools.lru_cache(maxsize=1)
def code_roots() -> CodeRoots:
    """This interpreter's folders for `is_model_code`: torch's and FusionLens's are never model
    code, the standard library's neither, installed packages' are."""
    never = set(_FUSIONLENS)
    try:
        import torch

        never.add(os.path.dirname(os.path.abspath(torch.__file__)))
    except ImportError:  # a worker that cannot import torch still classifies frames
        pass
    # os.py's folder and site's package folders: what sysconfig.get_paths() names for them,
    # without its 1.2 ms of configuration variables in every process's first trace
    stdlib = {os.path.dirname(os.path.abspath(os.__file__))}
    found = getattr(site, "getsitepackages", None)  # an old virtualenv's site.py has none
    if found is not None:
        packages = set(found())
    else:
        import sysconfig

        packages = {sysconfig.get_path(k) for k in ("purelib", "platlib")}
    packages |= {p for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
    packages = {os.path.abspath(p) for p in packages if p}
    return CodeRoots(tuple(sorted(never)), tuple(sorted(stdlib)), tuple(sorted(packages)))


@functools.lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    """Whether `filename` is model code (fusionlens.report.discovery.is_model_code) here."""
    return is_model_code(filename, code_roots())


# The user's own call of what is traced, when FusionLens's caller is not the user
# (compile_target runs an example's returned callable: its call site is the example's line).
_CALL_SITE: contextvars.ContextVar = contextvars.ContextVar("fusionlens_call_site", default=None)
# The path of the nn.Module whose forward is running ("h.0.attn"), set by the frontend's module
# hooks (fusionlens/frontend/modules.py) while it traces; every op captured then carries it.
MODULE: contextvars.ContextVar[str] = contextvars.ContextVar("fusionlens_module", default="")


@contextlib.contextmanager
def call_site(file: str, line: int, function: str):
    """Ops that no model-code frame made point at this line (see `caller`)."""
    token = _CALL_SITE.set(_whole_line(Frame(file, line, function)))
    try:
        yield
    finally:
        _CALL_SITE.reset(token)


def caller(start_frame) -> Provenance | None:
    """The user's call of a traced function: the call site set by `call_site`, else the
    innermost model-code frame from `start_frame` outwards (the call of FusionLens), with
    the span of the call expression."""
    given = _CALL_SITE.get()
    if given is not None:
        return given
    frame = start_frame
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    return _at(frame, ()) if frame is not None else None


def user_location(exc: BaseException, fallback_file: str | None = None) -> tuple:
    """(file, line) of the innermost traceback frame of `exc` in a user file; else
    (fallback_file, None)."""
    user = [f for f in traceback.extract_tb(exc.__traceback__) if is_user_file(f.filename)]
    if user:
        return user[-1].filename, user[-1].lineno
    return fallback_file, None


@dataclass(frozen=True)
class Frame:
    """One model-code frame of an op's call stack (fusionlens/driver/wire.py makes the report's)."""

    file: str
    line: int
    function: str


@dataclass(frozen=True)
class Provenance:
    file: str
    line: int
    end_line: int
    col: int
    end_col: int
    stack: tuple[Frame, ...] = field(default=())  # user frames, innermost first
    module: str = ""  # the nn.Module whose forward made it, as named in the model ("h.0.attn"; "" the outermost)

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


def _whole_line(frame: Frame) -> Provenance:
    """A provenance spanning a line's code, less a leading `return` (UTF-8 byte columns)."""
    text = linecache.getline(frame.file, frame.line).rstrip("\r\n").encode("utf-8")
    start = len(text) - len(text.lstrip())
    if text[start:].startswith(b"return "):
        start += len(b"return ")
    return Provenance(frame.file, frame.line, frame.line, start, max(len(text.rstrip()), start + 1), (frame,))


# Bounded: it keeps each code object it saw alive, and a long-lived process (the language
# server's worker, a notebook) traces code objects without end; 4096 is far more functions than
# one trace runs through (a transformers model's forward reaches a few hundred).
@functools.lru_cache(maxsize=4096)
def _positions(code) -> tuple:
    """A code object's instruction positions (line, end line, column, end column), each."""
    return tuple(code.co_positions())


@functools.lru_cache(maxsize=1 << 16)
def _frame(file: str, line: int, function: str) -> Frame:
    """One (frozen) Frame a user line, shared by the stack of every op recorded there: a
    10,000-op program made 120,000 of them, each walked by every full garbage collection."""
    return Frame(file, line, function)


def capture(start_frame=None, stop=None, call: Provenance | None = None):
    """Provenance of the current op: the model-code frames from `start_frame` out to the frame
    running code object `stop` (the tracer's entry, beyond which nothing belongs to the
    traced call), then the user's `call` (see `caller`). Without a model-code frame the op
    is located at `call` (None when there is none either)."""
    frame = start_frame or sys._getframe(1)
    stack = []
    first = None
    while frame is not None and frame.f_code is not stop:
        code = frame.f_code
        if is_user_file(code.co_filename):
            if first is None:
                first = frame
            stack.append(_frame(code.co_filename, frame.f_lineno, code.co_name))
        frame = frame.f_back
    if call is not None and call.stack[0] not in stack:
        stack.append(call.stack[0])
    if first is None:
        return dataclasses.replace(call, stack=tuple(stack), module=MODULE.get()) if call is not None else None
    found = _at(first, tuple(stack))
    module = MODULE.get()
    return dataclasses.replace(found, module=module) if module else found


def _at(frame, stack: tuple) -> Provenance:
    """The span of the instruction a frame is executing (code positions: UTF-8 byte columns)."""
    code = frame.f_code
    line, end_line, col, end_col = frame.f_lineno, frame.f_lineno, 0, 0
    if frame.f_lasti >= 0:
        positions = _positions(code)
        index = frame.f_lasti // 2
        if index < len(positions):
            pline, pend, pcol, pend_col = positions[index]
            if pline is not None:
                line, end_line = pline, pend or pline
                col, end_col = pcol or 0, pend_col or 0
    return Provenance(code.co_filename, line, end_line, col, end_col,
                      stack or (Frame(code.co_filename, frame.f_lineno, code.co_name),))
