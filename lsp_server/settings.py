"""The server's settings (`fusionlens.*`), from initializationOptions and workspace/configuration.

Every value is checked by type and range. An invalid value is refused with a warning that
names the setting and the value, and the setting keeps its value (a safe default until a
valid one arrives). Sources apply in the order they arrive, later valid values replacing
earlier ones, with one exception: `allowExecution`. A `false` (or an invalid value) from
any source turns execution off until the server restarts; a later `true` is refused.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Callable, Optional

from compiler import roofline

TRIGGERS = ("onOpen", "onSave", "manual")
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


class Invalid(ValueError):
    """A setting's value is refused; the text says what was expected."""


def _bool(v):
    if not isinstance(v, bool):
        raise Invalid("expected true or false")
    return v


def _int(lo: int, hi: int) -> Callable:
    def check(v):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
            raise Invalid(f"expected a whole number from {lo} to {hi}")
        if not lo <= v <= hi:
            raise Invalid(f"expected a whole number from {lo} to {hi}")
        return int(v)
    return check


def _seconds(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.1 <= v <= 86400:
        raise Invalid("expected a number of seconds from 0.1 to 86400")
    return float(v)


def _trigger(v):
    if v not in TRIGGERS:
        raise Invalid("expected one of " + ", ".join(f'"{t}"' for t in TRIGGERS))
    return v


def _executors(v):
    if v is None:
        return None
    if not isinstance(v, list) or not v or not all(isinstance(e, str) and re.fullmatch(r"\w+", e) for e in v):
        raise Invalid('expected null or a list of executor names such as ["triton", "torch"]')
    return list(v)


def _device(v):
    if not isinstance(v, str) or not _DEVICE.fullmatch(v):
        raise Invalid('expected "auto", "cpu", "cuda" or "cuda:N"')
    return v


def _gpu(v):
    gpu = roofline.find(v) if isinstance(v, str) else None
    if gpu is None:
        raise Invalid("expected one of " + ", ".join(f'"{n}"' for n in roofline.names()))
    return gpu.name


def _folder(v):
    if v is None or v == "":
        return None
    if not isinstance(v, str) or "\0" in v:
        raise Invalid("expected null or a folder path")
    return v


_CHECKS: dict = {
    "allowExecution": _bool, "compileTrigger": _trigger, "executors": _executors,
    "benchmarkRepeats": _int(1, 10_000), "device": _device, "timeoutSeconds": _seconds,
    "inlayHints": _bool, "debounceMs": _int(0, 60_000), "cacheFolder": _folder, "targetGpu": _gpu,
}


@dataclasses.dataclass
class Settings:
    allowExecution: bool = True
    compileTrigger: str = "onOpen"  # "onOpen" | "onSave" | "manual"
    executors: Optional[list] = None
    benchmarkRepeats: int = 20
    device: str = "auto"
    timeoutSeconds: float = 60.0
    inlayHints: bool = True
    debounceMs: int = 300
    cacheFolder: Optional[str] = None
    targetGpu: str = roofline.DEFAULT_TARGET  # the GPU rooflines are estimated for where none runs
    execution_locked: bool = dataclasses.field(default=False, repr=False)  # a false was seen: stays off

    def update(self, data: Any) -> tuple:
        """Apply a settings object (flat, or wrapped in {"fusionlens": {...}}); returns
        (names that changed, warnings for the values refused). Unknown keys are ignored."""
        if data is None:
            return [], []
        if not isinstance(data, dict):
            return [], [f"FusionLens settings must be an object, not {_show(data)}; nothing changed"]
        if isinstance(data.get("fusionlens"), dict):
            data = data["fusionlens"]
        changed, warnings = [], []
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
                changed.append(name)
        return changed, warnings

    def options_key(self) -> tuple:
        """The options a compile result depends on (part of the cache key)."""
        return (tuple(self.executors) if self.executors is not None else None,
                self.benchmarkRepeats, self.device, self.targetGpu)


def _show(value) -> str:
    """A value as the client sent it (JSON spelling), shortened."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
