"""Which nvFuser is here: the Python package that imports (nvfuser_direct preferred), or why none does.

A Backend is what definitions run on. `load_backend` finds the installed package; an
executor may also be given a Backend (`NvFuserExecutor(backend=...)`), for instance a
stand-in that is not nvFuser (`real=False`): usable on any device, never said to be
nvFuser, its own `label` saying what ran.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any

import torch

NOT_INSTALLED = "nvFuser is not installed (no module nvfuser_direct or nvfuser)"


def needs_cuda(device_type: str) -> str:
    return f"nvFuser needs a CUDA device; this tensor is on {device_type}"


@dataclass
class Backend:
    module: Any  # exports FusionDefinition and DataType
    api: str  # "nvfuser_direct" or "nvfuser": which import line and runtime calls to use
    version: str = ""
    label: str = ""  # what runs the definitions, in words; default "<api> <version>"
    real: bool = True  # the nvFuser package itself; False: a stand-in (runs anywhere, never "nvFuser ran")
    about: str = ""  # for a stand-in: said after its label in notes (what it checks)

    def __post_init__(self):
        if not self.label:
            self.label = f"{self.api} {self.version}".strip()


_loaded: tuple[Backend | None, str] | None = None  # (Backend or None, reason)


def version(module) -> str:
    """The module's version string, "" when it does not say."""
    for attr in ("__version__",):
        v = getattr(module, attr, None)
        if v:
            return str(v)
    fn = getattr(module, "version", None)
    try:
        return str(fn()) if callable(fn) else ""
    except Exception:  # noqa: BLE001 - a version is only informative
        return ""


def load_backend() -> tuple[Backend | None, str]:
    """(Backend, "") when an nvFuser Python package imports; else (None, exactly why not)."""
    global _loaded
    if _loaded is not None:
        return _loaded
    errors: list[str | None] = []  # None: that package is not installed
    for api in ("nvfuser_direct", "nvfuser"):
        try:
            module = importlib.import_module(api)
        except ModuleNotFoundError as e:
            if e.name == api:
                errors.append(None)  # not installed
            else:
                errors.append(f"importing {api} failed: ModuleNotFoundError: {e}")
            continue
        except Exception as e:  # noqa: BLE001 - ImportError, OSError (a missing libnvrtc), ...
            errors.append(f"importing {api} failed: {type(e).__name__}: {e}")
            continue
        if not hasattr(module, "FusionDefinition") or not hasattr(module, "DataType"):
            errors.append(f"{api} imported but has no FusionDefinition/DataType")
            continue
        _loaded = (Backend(module, api, version(module)), "")
        return _loaded
    real = [e for e in errors if e]
    _loaded = (None, "; ".join(real) if real else NOT_INSTALLED)
    return _loaded


def _find_spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def installed_api() -> str | None:
    """The nvFuser API that is installed (found without importing it), preferred first."""
    return next((api for api in ("nvfuser_direct", "nvfuser") if _find_spec(api) is not None), None)


def current_backend(device=None, given: Backend | None = None) -> tuple[Backend | None, str]:
    """(Backend, "") usable for `device`: `given` if there is one, else the installed
    nvFuser; or (None, exactly why not).

    A real nvFuser needs a CUDA device, and is imported only for one: a CPU compile does
    not pay for (or risk) importing a CUDA extension it cannot use.
    """
    dev = torch.device(device) if device is not None else None
    if given is not None:
        if not given.real or dev is None or dev.type == "cuda":
            return given, ""
        return None, needs_cuda(dev.type)
    if installed_api() is None:
        return None, NOT_INSTALLED
    if dev is not None and dev.type != "cuda":
        return None, needs_cuda(dev.type)
    return load_backend()
