"""The user's modules inside the compile worker (lsp_server/worker.py, its own process).

Each compile sees the workspace's modules as they are now, whatever was compiled before:

- sys.path per compile: the compiled file's folder, the request's folders, then the path the
  worker started with (without its working folder), plus what user code added since modules
  were last dropped.
- A *workspace module* is one whose file is neither the standard library, an installed
  package, torch nor FusionLens (`fusionlens.report.discovery.CodeRoots`). They stay imported between
  compiles while nothing changed; before a compile all of them are dropped from sys.modules
  when any one is stale: its file changed, the open buffer it was loaded from changed, or its
  name now finds another file (a same-named module of another folder). All of them, since a
  module that did `from helpers import f` holds the old `f`.
- Overlays: the server sends the text of open buffers that differ from their file; a meta
  path finder loads those modules from that text (and linecache shows it).
- What a compile imported: every workspace module loaded during it, and, transitively, the
  workspace modules its modules import (an `__import__` hook records who imports what, since
  a module imported by an earlier compile is not loaded again). Reported with the digest of
  the text each was loaded from, so the server knows when a result is stale.

This module runs in the worker only, and imports no torch and no compiler stage.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from lsp_server.protocol import text_digest

if TYPE_CHECKING:  # the worker imports the compiler once it is started (a broken one is reported)
    from fusionlens.report.discovery import CodeRoots

FORMER_NAME = "compiler"  # FusionLens's alias (compiler/__init__.py), a common name of a user's own package
TARGET_PREFIX = "_fusionlens_user_"  # fusionlens.driver.targets.load_module's names: one per compile


@dataclasses.dataclass
class _Stamp:
    """What a module was loaded from."""

    file: str
    digest: str  # text_digest of its text
    stat: tuple[int, int] | None  # (mtime_ns, size) of the file when read; None: from an overlay


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


class Modules:
    """The worker's workspace modules (one instance, `install()`ed once)."""

    def __init__(self, roots: CodeRoots) -> None:
        self._roots = roots
        self.overlays: dict[str, str] = {}
        self._stamps: dict[str, _Stamp] = {}  # module name -> what it was loaded from
        self._edges: dict[str, set[str]] = {}  # importing module -> workspace modules it imported
        self._base_path: list[str] = []
        self._set_path: list[str] = []  # sys.path as prepare() set it
        self._user_path: list[str] = []  # entries user code added, kept while its modules are
        self._before: set[str] = set()
        self._real_import: Callable[..., ModuleType] = builtins.__import__
        self.is_workspace_file = functools.lru_cache(maxsize=8192)(self._is_workspace_file)

    def install(self) -> None:
        """Take the worker's own sys.path as the base, hook imports and the overlay finder."""
        path = list(sys.path)
        if path and path[0] in ("", os.getcwd()):  # `python -m` puts the start folder first
            path = path[1:]
        self._base_path = path
        self._real_import = builtins.__import__
        builtins.__import__ = self._tracking_import
        sys.meta_path.insert(0, _WorkspaceFinder(self))

    def _is_workspace_file(self, file: str) -> bool:
        if not file or file.startswith("<") or not file.endswith(".py"):
            return False  # an extension module cannot be loaded again anyway
        path = os.path.abspath(file)
        r = self._roots
        return not (_under(path, r.never) or _under(path, r.stdlib) or _under(path, r.packages))

    def _workspace_modules(self) -> dict[str, str]:
        out = {}
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if isinstance(file, str) and self.is_workspace_file(file):
                out[name] = os.path.abspath(file)
        return out

    # --- before a compile ---------------------------------------------------------------------

    def prepare(self, path: str, folders: list[str], overlays: dict[str, str]) -> None:
        """sys.path, fresh workspace modules and the overlays for a compile of `path`."""
        new_path = _unique([os.path.dirname(os.path.abspath(path)), *folders, *self._base_path])
        importlib.invalidate_caches()  # files created since the last compile are found
        self._set_overlays({os.path.abspath(p): t for p, t in overlays.items()})
        for name in [n for n in sys.modules if n.startswith(TARGET_PREFIX)]:  # never imported by name
            self._drop(name)
        _drop_former_name()
        sys.path[:] = new_path  # (a namespace package's path follows it)
        modules = self._workspace_modules()
        if any(self._stale(name, file, new_path) for name, file in modules.items()):
            for name in modules:
                self._drop(name)
            self._drop_namespace_parents(modules)
            self._user_path = []
        self._set_path = _unique([*new_path, *self._user_path])
        sys.path[:] = self._set_path
        self._before = set(sys.modules)

    def _set_overlays(self, overlays: dict[str, str]) -> None:
        for old in self.overlays:
            entry = linecache.cache.get(old)
            if old not in overlays and entry is not None and len(entry) == 4 and entry[1] is None:
                del linecache.cache[old]  # an overlay's lines; the file is read again
        self.overlays = overlays
        for path, text in overlays.items():
            linecache.cache[path] = (len(text), None, text.splitlines(True), path)

    def _stale(self, name: str, file: str, new_path: list[str]) -> bool:
        stamp = self._stamps.get(name)
        if stamp is None or stamp.file != file:
            stamp = self._stamp(name, file)
        if stamp is None:
            return True  # its file is gone
        if file in self.overlays:
            if text_digest(self.overlays[file]) != stamp.digest:
                return True
        elif stamp.stat is None or _stat(file) != stamp.stat:
            text = _read(file)
            if text is None or text_digest(text) != stamp.digest:
                return True
            stamp.stat = _stat(file)  # touched, same text
        if "." not in name:
            return _found(name, new_path) != file
        parent = sys.modules.get(name.rpartition(".")[0])  # its folder must be one its parent has now
        where = os.path.dirname(file)
        where = os.path.dirname(where) if os.path.basename(file) == "__init__.py" else where
        return parent is None or where not in [os.path.abspath(p) for p in getattr(parent, "__path__", [])]

    def _stamp(self, name: str, file: str) -> _Stamp | None:
        """Record what a module was just loaded from (an overlay's loader records its own)."""
        if file in self.overlays:
            stamp = _Stamp(file, text_digest(self.overlays[file]), None)
        else:
            stat, text = _stat(file), _read(file)
            if text is None:
                return None
            stamp = _Stamp(file, text_digest(text), stat)
        self._stamps[name] = stamp
        return stamp

    def record(self, name: str, stamp: _Stamp) -> None:
        self._stamps[name] = stamp

    def _drop(self, name: str) -> None:
        sys.modules.pop(name, None)
        self._stamps.pop(name, None)
        self._edges.pop(name, None)

    def _drop_namespace_parents(self, dropped: dict[str, str]) -> None:
        """Namespace packages (no file) above dropped modules: their path is found again."""
        for name in dropped:
            parts = name.split(".")
            for i in range(1, len(parts)):
                parent = sys.modules.get(".".join(parts[:i]))
                if parent is not None and getattr(parent, "__file__", None) is None \
                        and hasattr(parent, "__path__"):
                    sys.modules.pop(".".join(parts[:i]), None)

    # --- after a compile ----------------------------------------------------------------------

    def finish(self, path: str) -> dict[str, str]:
        """The workspace files the compile of `path` imported: file -> digest of its text."""
        modules = self._workspace_modules()
        new = [n for n in list(sys.modules) if n not in self._before and (n in modules or n.startswith(TARGET_PREFIX))]
        for name in new:
            if name not in self._stamps and not name.startswith(TARGET_PREFIX):
                self._stamp(name, modules[name])
        self._user_path = [p for p in sys.path if p not in self._set_path]
        seen: set[str] = set()
        todo = list(new)
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(self._edges.get(name, ()))
        target = os.path.abspath(path)
        out = {}
        for name in seen:
            stamp = self._stamps.get(name)
            if stamp is not None and name in modules and stamp.file != target:
                out[stamp.file] = stamp.digest
        return out

    # --- who imports what ---------------------------------------------------------------------

    def _tracking_import(self, name: str, globals: Mapping[str, object] | None = None,
                         locals: Mapping[str, object] | None = None, fromlist: Sequence[str] | None = (),
                         level: int = 0) -> ModuleType:
        module = self._real_import(name, globals, locals, fromlist, level)
        if globals:
            importer, file = globals.get("__name__"), globals.get("__file__")
            if isinstance(importer, str) and isinstance(file, str) and self.is_workspace_file(file):
                try:
                    self._note(importer, name, globals.get("__package__"), fromlist or (), level)
                except Exception:  # noqa: BLE001 - bookkeeping never breaks an import
                    pass
        return module

    def _note(self, importer: str, name: str, package: object, fromlist: Sequence[str], level: int) -> None:
        full = importlib.util.resolve_name("." * level + name, str(package or "")) if level else name
        parts = full.split(".")
        names = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
        names += [f"{full}.{item}" for item in fromlist if isinstance(item, str) and item != "*"]
        for n in names:
            file = getattr(sys.modules.get(n), "__file__", None)
            if isinstance(file, str) and n != importer and self.is_workspace_file(file):
                self._edges.setdefault(importer, set()).add(n)


def _drop_former_name() -> None:
    """Forget `compiler` where it is FusionLens under its former name (a module whose own name
    is `fusionlens...`), imported by an earlier compile's user code: this compile's `import
    compiler` finds the workspace's own package where it has one, else the alias again. The
    worker itself imports FusionLens as `fusionlens` only."""
    for name in [n for n in sys.modules if n == FORMER_NAME or n.startswith(FORMER_NAME + ".")]:
        if getattr(sys.modules[name], "__name__", name) != name:
            del sys.modules[name]


def _unique(paths: list[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        if p and p not in out:
            out.append(p)
    return out


def _found(name: str, path: list[str]) -> str | None:
    """The file a top-level import of `name` finds on `path` now."""
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, path)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.has_location:
        return None
    return os.path.abspath(spec.origin)


class _WorkspaceFinder(importlib.abc.MetaPathFinder):
    """Finds a module as the path finder does; a workspace module's source file is loaded by
    _SourceLoader (its overlay, else the file; never bytecode)."""

    def __init__(self, modules: Modules) -> None:
        self._modules = modules

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return None  # the finders after this one decide
        origin = os.path.abspath(spec.origin)
        if not self._modules.is_workspace_file(origin):
            return None
        spec.loader = _SourceLoader(fullname, origin, self._modules)
        return spec


class _SourceLoader(importlib.machinery.SourceFileLoader):
    """A workspace module's loader: its overlay's text, else its file's, compiled from source
    every time: a .pyc is trusted by the file's mtime in whole seconds and its size, so an
    edit within the second that keeps the size would load the old code."""

    def __init__(self, fullname: str, path: str, modules: Modules) -> None:
        super().__init__(fullname, path)
        self._modules = modules
        self._loaded: _Stamp | None = None

    def path_stats(self, path: str) -> Mapping[str, Any]:
        raise OSError("no bytecode for workspace modules")  # SourceLoader.get_code: source only, no .pyc written

    def get_data(self, path: str) -> bytes:
        if os.path.abspath(path) != self.path:
            return super().get_data(path)
        overlay = self._modules.overlays.get(self.path)
        if overlay is not None:
            self._loaded = _Stamp(self.path, text_digest(overlay), None)
            return overlay.encode("utf-8")
        stat = _stat(self.path)
        data = super().get_data(path)
        self._loaded = _Stamp(self.path, text_digest(importlib.util.decode_source(data)), stat)
        return data

    def exec_module(self, module: ModuleType) -> None:
        super().exec_module(module)
        if self._loaded is not None:  # what it was loaded from (get_source reads again later)
            self._modules.record(module.__name__, self._loaded)
