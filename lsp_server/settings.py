"""The server's settings (`fusionlens.*`), from initializationOptions and workspace/configuration.

Every value is checked by type and range. An invalid value is refused with a warning that
names the setting and the value, and the setting keeps its value (a safe default until a
valid one arrives). Sources apply in the order they arrive, later valid values replacing
earlier ones, with one exception: `allowExecution`. A `false` (or an invalid value) from
any source turns execution off until the server restarts; a later `true` is refused.
A key the server does not know is named in a warning; one that reads as `allowExecution`
spelt otherwise (`AllowExecution`, `allow_execution`) turns execution off unless it is `true`.

One schema, whatever the shape: the settings come flat (`{"allowExecution": ...}`), nested
(`{"fusionlens": {...}}`) or both at once, and are checked as one object (`_one_object`). A
mixed shape is ambiguous (which part did the client mean?): it is named in a warning and
execution is off unless both parts say `true`; a key the two parts give different values is
not applied (execution off for `allowExecution`). So `allowExecution` is true only where a
`true` stands for it in the shape the client used.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, NamedTuple
from collections.abc import Callable

from fusionlens.report import roofline
from lsp_server.files import default_root

TRIGGERS = ("onOpen", "onSave", "manual")
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


class CompileSettings(NamedTuple):
    """The settings a compile result depends on (part of its cache key)."""

    executors: tuple[str, ...] | None
    repeats: int
    device: str
    gpu: str  # the target GPU of estimated rooflines


class Invalid(ValueError):
    """A setting's value is refused; the text says what was expected."""


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise Invalid("expected true or false")
    return v


def _int(lo: int, hi: int) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
            raise Invalid(f"expected a whole number from {lo} to {hi}")
        if not lo <= v <= hi:
            raise Invalid(f"expected a whole number from {lo} to {hi}")
        return int(v)
    return check


def _seconds(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.1 <= v <= 86400:
        raise Invalid("expected a number of seconds from 0.1 to 86400")
    return float(v)


def _trigger(v: Any) -> str:
    if v not in TRIGGERS:
        raise Invalid("expected one of " + ", ".join(f'"{t}"' for t in TRIGGERS))
    return v


def _executors(v: Any) -> list[str] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not v or not all(isinstance(e, str) and re.fullmatch(r"\w+", e) for e in v):
        raise Invalid('expected null or a list of executor names such as ["triton", "torch"]')
    return list(v)


def _device(v: Any) -> str:
    if not isinstance(v, str) or not _DEVICE.fullmatch(v):
        raise Invalid('expected "auto", "cpu", "cuda" or "cuda:N"')
    return v


def _gpu(v: Any) -> str:
    gpu = roofline.find(v) if isinstance(v, str) else None
    if gpu is None:
        raise Invalid("expected one of " + ", ".join(f'"{n}"' for n in roofline.names()))
    return gpu.name


def _folder(v: Any) -> str | None:
    if v is None or v == "":
        return None
    if not isinstance(v, str) or "\0" in v:
        raise Invalid("expected null or a folder path")
    return v


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "allowExecution": _bool, "compileTrigger": _trigger, "executors": _executors,
    "benchmarkRepeats": _int(1, 10_000), "device": _device, "timeoutSeconds": _seconds,
    "inlayHints": _bool, "debounceMs": _int(0, 60_000), "cacheFolder": _folder, "targetGpu": _gpu,
    "cacheEntries": _int(1, 100_000),
}
CLIENT_KEYS = frozenset({"pythonPath", "trace"})  # the VS Code extension's own keys of the section: not ours


def _folded(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_FOLDED = {_folded(n): n for n in _CHECKS}


@dataclasses.dataclass
class Settings:
    allowExecution: bool = True
    compileTrigger: str = "onOpen"  # "onOpen" | "onSave" | "manual"
    executors: list[str] | None = None
    benchmarkRepeats: int = 20
    device: str = "auto"
    timeoutSeconds: float = 60.0
    inlayHints: bool = True
    debounceMs: int = 300
    cacheFolder: str | None = None
    targetGpu: str = roofline.DEFAULT_TARGET  # the GPU rooflines are estimated for where none runs
    cacheEntries: int = 100  # results kept in memory (lsp_server.results.DEFAULT_CACHE_ENTRIES); those shown always
    execution_locked: bool = dataclasses.field(default=False, repr=False)  # a false was seen: stays off

    def update(self, data: Any) -> tuple[list[str], list[str]]:
        """Apply a settings object (flat, or wrapped in {"fusionlens": {...}}); returns
        (names that changed, warnings for the values refused and the keys not known)."""
        if data is None:
            return [], []
        if not isinstance(data, dict):
            return [], [f"FusionLens settings must be an object, not {_show(data)}; nothing changed"]
        allowed = self.allowExecution
        data, warnings = self._one_object(data)
        warnings += self._unknown_keys(data)
        changed: list[str] = ["allowExecution"] if allowed != self.allowExecution else []
        for name, check in _CHECKS.items():
            if name not in data:
                continue
            try:
                value = check(data[name])
            except Invalid as e:
                if name == "allowExecution":
                    warnings.append(f"fusionlens.allowExecution: {_show(data[name])} refused ({e}); "
                                    "running user code is disabled until the server restarts")
                    value = False
                else:
                    warnings.append(f"fusionlens.{name}: {_show(data[name])} refused ({e}); "
                                    f"keeping {_show(getattr(self, name))}")
                    continue
            if name == "allowExecution":
                if value is False:
                    self.execution_locked = True
                elif self.execution_locked:
                    if self.allowExecution is False:
                        warnings.append("fusionlens.allowExecution: true refused: execution was turned off "
                                        "in this session; restart the server to allow it")
                    continue
            if getattr(self, name) != value:
                setattr(self, name, value)
                if name not in changed:
                    changed.append(name)
        return changed, warnings

    def _one_object(self, data: dict[Any, Any]) -> tuple[dict[Any, Any], list[str]]:
        """The settings of a flat, nested (under "fusionlens") or mixed object as one flat
        object (module doc), and the warnings a mixed shape gets."""
        nested = data.get("fusionlens")
        if not isinstance(nested, dict):
            return data, []
        flat = {k: v for k, v in data.items() if k != "fusionlens"}
        if not flat:
            return nested, []
        merged = {**flat, **nested}
        differ = sorted(str(k) for k in set(flat) & set(nested) if flat[k] != nested[k])
        for k in differ:
            del merged[k]
        both_true = flat.get("allowExecution") is True and nested.get("allowExecution") is True
        if not both_true:
            merged.pop("allowExecution", None)
            self.allowExecution, self.execution_locked = False, True
        detail = f"; {', '.join(differ)} differ between them and are not applied" if differ else ""
        off = "" if both_true else ("; running user code is disabled until the server restarts (only an "
                                    "allowExecution true in both parts would allow it)")
        return merged, [f"FusionLens settings: keys both at the top level ({', '.join(map(_show, flat))}) and "
                        f"under \"fusionlens\": an ambiguous shape; send one or the other{detail}{off}"]

    def _unknown_keys(self, data: dict[Any, Any]) -> list[str]:
        """Warnings naming the keys that are not settings; a misspelt allowExecution whose
        value is not `true` turns execution off (the user meant it off, most likely)."""
        unknown = [k for k in data if k not in _CHECKS and k not in CLIENT_KEYS]
        if not unknown:
            return []
        hints = []
        for k in unknown:
            meant = _FOLDED.get(_folded(str(k)))
            if meant is None:
                continue
            hint = f"{_show(k)} is not {meant}"
            if meant == "allowExecution" and data[k] is not True:
                self.allowExecution, self.execution_locked = False, True
                hint += ", but is taken as false: running user code is disabled until the server restarts"
            hints.append(hint)
        names = ", ".join(_show(k) for k in unknown)
        extra = f" ({'; '.join(hints)})" if hints else ""
        return [f"FusionLens settings: unknown key(s) {names}, not applied{extra}; the settings "
                f"(case-sensitive) are {', '.join(_CHECKS)}"]

    def options_key(self) -> CompileSettings:
        """The options a compile result depends on (part of the cache key)."""
        return CompileSettings(tuple(self.executors) if self.executors is not None else None,
                               self.benchmarkRepeats, self.device, self.targetGpu)

    def cache_root(self) -> str:
        """fusionlens.cacheFolder, else this user's private folder (lsp_server.files)."""
        return self.cache_location()[0]

    def cache_location(self) -> tuple[str, bool]:
        """(the cache folder, whether the server chose it: it then makes it 0700)."""
        if self.cacheFolder:
            return os.path.abspath(os.path.expanduser(self.cacheFolder)), False
        return default_root(), True


def _show(value: Any) -> str:
    """A value as the client sent it (JSON spelling), shortened."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
