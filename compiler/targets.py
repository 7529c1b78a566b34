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
    return_line: int  # its last `return` (where a wrong return value is written), else the `def`


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
                returns = [n.lineno for n in ast.walk(node) if isinstance(n, ast.Return)]
                targets.append(TargetInfo(node.name, node.lineno, node.end_lineno or node.lineno,
                                          node.col_offset, dec.lineno, max(returns, default=node.lineno)))
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
        raise TargetError(f"SyntaxError: {e.msg}", e.filename or path, e.lineno, (e.offset or 1) - 1) from e
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


def _check_example(value, file: str, line: Optional[int], name: str):
    shape = "(callable, args) or (callable, args, kwargs)"
    if not isinstance(value, (tuple, list)) or len(value) not in (2, 3):
        got = f"a {type(value).__name__}" + (f" of length {len(value)}" if isinstance(value, (tuple, list)) else "")
        raise TargetError(f"example {name} must return {shape}; it returned {got}", file, line)
    fn, args = value[0], value[1]
    kwargs = value[2] if len(value) == 3 else {}
    if not callable(fn):
        raise TargetError(f"example {name}: the first item must be callable, not {type(fn).__name__}", file, line)
    if not isinstance(args, (tuple, list)):
        args = (args,)  # a single argument is accepted as is
    if not isinstance(kwargs, dict):
        raise TargetError(f"example {name}: the third item must be a dict of keyword arguments", file, line)
    return fn, tuple(args), kwargs


def _to_device(fn, args, kwargs, device):
    import torch
    from torch.utils import _pytree as pytree

    if isinstance(fn, torch.nn.Module):
        fn = fn.to(device)
    move = lambda x: x.to(device) if isinstance(x, torch.Tensor) else x  # noqa: E731
    return fn, pytree.tree_map(move, args), pytree.tree_map(move, kwargs)


def resolve_device(device: str):
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def compile_target(path: str, name: str, *, executors=None, benchmark: bool = True, repeats: int = 20,
                   device: str = "auto", torch_compile: bool = False):
    """Load `path`, run the example `name` and compile what it returns.

    Never raises for problems in the user's code or file: the report then has
    status "error" and `error` says what happened and where.
    """
    from compiler import api, report as R

    path = os.path.abspath(path)
    target = R.Target(name, path, None, None)
    fail = lambda msg, file=path, line=None, col=None: R.CompileReport(  # noqa: E731
        target=target, status="error", executors=list(executors or []),
        error=R.Diagnostic("error", msg, file, line, col))
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        found = {t.name: t for t in find_targets(source, path)}
    except OSError as e:
        return fail(f"cannot read {path}: {e}")
    except SyntaxError as e:
        return fail(f"SyntaxError: {e.msg}", path, e.lineno, (e.offset or 1) - 1)  # report columns are 0-based
    if name not in found:
        return fail(f"no @compiler.example target named {name!r} in {os.path.basename(path)}"
                    f" (found: {', '.join(found) or 'none'})")
    info = found[name]
    target.line, target.end_line = info.line, info.end_line
    try:
        module = load_module(path)
        value = getattr(module, name)()
    except TargetError as e:
        return fail(e.message, e.file, e.line, e.col)
    except Exception as e:
        file, line = user_location(e, path)
        return fail(f"example {name} raised {type(e).__name__}: {e}", file, line or info.line)
    try:
        fn, args, kwargs = _check_example(value, path, info.return_line, name)
        fn, args, kwargs = _to_device(fn, args, kwargs, resolve_device(device))
        report = api.compile(fn, *args, executors=executors, benchmark=benchmark, repeats=repeats,
                             torch_compile=torch_compile, name=name, **kwargs)
    except TargetError as e:
        return fail(e.message, e.file, e.line, e.col)
    except api.CompileError as e:
        report = e.report
    report.target = target
    return report
