"""Discovery: what a user's files hold, without running them. `find_targets` finds the
`@fusionlens.example` functions by parsing a file's text; `is_model_code` says whether a file
is model code (the rule provenance locates ops with).

Pure `ast` and path logic: no torch, no user code runs. The language server uses only this
(and the report schema); compiling a target is `fusionlens.driver.targets`.
"""

from __future__ import annotations

import ast
import dataclasses
import os

# Decorator spellings that mark a target: @fusionlens.example, @fusionlens.example, @example.
_MARKERS = {"example", "compiler.example", "fusionlens.example"}


@dataclasses.dataclass
class TargetInfo:
    name: str
    line: int  # 1-based line of the `def` (the decorator sits above it)
    end_line: int
    col: int  # 0-based column of the `def`
    decorator_line: int
    return_line: int  # its last `return` (where a wrong return value is written), else the `def`
    train: bool = False  # @fusionlens.example(train=True): compiled for training, backward included
    nproc: int | None = None  # @fusionlens.example(nproc=2): a distributed target, run on that many ranks
    plan: dict | None = None  # @fusionlens.example(train=True, plan=dict(cluster=..., tp=8)): planned at scale


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _keyword(dec: ast.AST, name: str):
    """The constant value of the decorator's keyword `name` (`@example(train=True)`), else None."""
    if isinstance(dec, ast.Call):
        for k in dec.keywords:
            if k.arg == name and isinstance(k.value, ast.Constant):
                return k.value.value
    return None


def _plan(dec: ast.AST) -> dict | None:
    """`plan=dict(tp=8, ...)` or `plan={"tp": 8}` with literal values, else None."""
    if not isinstance(dec, ast.Call):
        return None
    node = next((k.value for k in dec.keywords if k.arg == "plan"), None)
    try:
        if isinstance(node, ast.Call) and _dotted(node.func) == "dict" and not node.args:
            return {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
        value = ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


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
                train = _keyword(dec, "train") is True
                nproc = _keyword(dec, "nproc")
                nproc = nproc if type(nproc) is int and nproc >= 1 else None
                targets.append(TargetInfo(node.name, node.lineno, node.end_lineno or node.lineno,
                                          node.col_offset, dec.lineno, max(returns, default=node.lineno), train,
                                          nproc, _plan(dec)))
                break
    return targets


@dataclasses.dataclass(frozen=True)
class CodeRoots:
    """Folders by what they hold (absolute paths): `never` model code (torch, FusionLens),
    the standard library, and installed packages (model code, e.g. transformers' models;
    they may lie inside the standard library's folder)."""

    never: tuple[str, ...] = ()
    stdlib: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root + os.sep) for root in roots)


def is_model_code(filename: str, roots: CodeRoots) -> bool:
    """Whether a file is model code: the user's own or an installed library's, not torch,
    FusionLens or the standard library."""
    if not filename or filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    if _under(path, roots.never):
        return False
    return _under(path, roots.packages) or not _under(path, roots.stdlib)
