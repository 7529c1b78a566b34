"""Compile targets: find `@compiler.example` functions by parsing, load and compile them.

`find_targets` only parses (no torch, no user code), so the language server can use it.
`compile_target` imports the user's file and runs it: call it only where user code may run.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import itertools
import os
import sys
import traceback
from typing import Optional

# Decorator spellings that mark a target: @compiler.example, @fusionlens.example, @example.
_MARKERS = {"example", "compiler.example", "fusionlens.example"}


@dataclasses.dataclass
class TargetInfo:
    name: str
    line: int  # 1-based line of the `def` (the decorator sits above it)
    end_line: int
    col: int  # 0-based column of the `def`
    decorator_line: int


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def find_targets(source: str, filename: str = "<unknown>") -> list[TargetInfo]:
    """Top-level functions decorated as examples. Raises SyntaxError on bad source."""
    tree = ast.parse(source, filename=filename)
    targets = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for dec in node.decorator_list:
            if _dotted(dec) in _MARKERS:
                targets.append(TargetInfo(node.name, node.lineno, node.end_lineno or node.lineno,
                                          node.col_offset, dec.lineno))
                break
    return targets


class TargetError(Exception):
    """A problem with a target that points at a place in the user's source."""

    def __init__(self, message: str, file: Optional[str] = None, line: Optional[int] = None,
                 col: Optional[int] = None):
        super().__init__(message)
        self.message, self.file, self.line, self.col = message, file, line, col


_module_counter = itertools.count()


def load_module(path: str):
    """Import a user's file under a fresh module name, its folder first on sys.path
    (as `python path` would). Errors become TargetError at the user's line."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = f"_fusionlens_user_{next(_module_counter)}_{os.path.splitext(os.path.basename(path))[0]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TargetError(f"cannot import {path}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise TargetError(f"SyntaxError: {e.msg}", e.filename or path, e.lineno, e.offset) from e
    except Exception as e:
        file, line = user_location(e, path)
        raise TargetError(f"importing {os.path.basename(path)} raised {type(e).__name__}: {e}",
                          file, line) from e
    return module


def user_location(exc: BaseException, prefer_file: Optional[str] = None):
    """(file, line) of the innermost traceback frame in a user file (not torch, not us)."""
    from compiler.provenance import is_user_file

    frames = traceback.extract_tb(exc.__traceback__)
    user = [f for f in frames if is_user_file(f.filename)]
    if prefer_file:
        preferred = [f for f in user if os.path.abspath(f.filename) == os.path.abspath(prefer_file)]
        if preferred and not user:
            user = preferred
    if user:
        return user[-1].filename, user[-1].lineno
    return prefer_file, None
