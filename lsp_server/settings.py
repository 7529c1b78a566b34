"""The server's settings (`fusionlens.*`), from initializationOptions and workspace/configuration."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional


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

    def update(self, data: Any) -> list:
        """Apply a settings object (flat, or wrapped in {"fusionlens": {...}}); returns the
        names that changed. Unknown keys and ill-typed values are ignored."""
        if not isinstance(data, dict):
            return []
        if isinstance(data.get("fusionlens"), dict):
            data = data["fusionlens"]
        changed = []
        for f in dataclasses.fields(self):
            if f.name not in data:
                continue
            value = data[f.name]
            try:
                if f.name in ("allowExecution", "inlayHints"):
                    value = bool(value)
                elif f.name == "compileTrigger":
                    if value not in ("onOpen", "onSave", "manual"):
                        continue
                elif f.name == "executors":
                    value = None if value is None else [str(v) for v in value]
                elif f.name in ("benchmarkRepeats", "debounceMs"):
                    value = max(0 if f.name == "debounceMs" else 1, int(value))
                elif f.name == "timeoutSeconds":
                    value = max(0.1, float(value))
                elif f.name == "device":
                    value = str(value)
                elif f.name == "cacheFolder":
                    value = str(value) if value else None
            except (TypeError, ValueError):
                continue
            if getattr(self, f.name) != value:
                setattr(self, f.name, value)
                changed.append(f.name)
        return changed

    def options_key(self) -> tuple:
        """The options a compile result depends on (part of the cache key)."""
        return (tuple(self.executors) if self.executors is not None else None,
                self.benchmarkRepeats, self.device)
