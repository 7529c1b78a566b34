"""Executors claim parts of the trace in priority order; torch takes whatever is left.

An executor answers two questions: is it usable here (and if not, exactly why), and which
ops can it take (the contract: fusionlens/executors/base.py). Fusion executors (triton,
nvfuser) take prims and turn regions of them into kernels; the torch executor runs any op
as the torch call it stands for. This module finds executors by name and picks the ones
a compile uses.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from fusionlens.frontend.notes import Severity

if TYPE_CHECKING:  # annotations only: at run time this registry loads no executor code
    from fusionlens.executors.base import Executor, FusionExecutor
    from fusionlens.ir.provenance import Provenance

KNOWN = ("nvfuser", "triton", "torch")
_MODULES = {"nvfuser": "fusionlens.executors.nvfuser", "triton": "fusionlens.executors.triton",
            "torch": "fusionlens.executors.torch_executor"}
_PLUGINS: dict[str, Executor] = {}  # name -> executor object registered at run time


def register(executor: Executor) -> None:
    """Make an executor object usable by name (a plugin, or a test double)."""
    _PLUGINS[executor.name] = executor


def unregister(name: str) -> None:
    _PLUGINS.pop(name, None)


def get(name: str):
    if name in _PLUGINS:
        return _PLUGINS[name]
    if name not in KNOWN:
        raise ValueError(f"unknown executor {name!r}; known: {', '.join(KNOWN + tuple(_PLUGINS))}")
    return importlib.import_module(_MODULES[name]).EXECUTOR


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None  # finds, does not import
    except (ImportError, ValueError):
        return False


def _surely_unusable(name: str, device: torch.device) -> bool:
    """True where a built-in fusion executor cannot run on `device`, answered without importing
    its package (on a CPU, importing both was a third of a first compile): the first tests
    its own available() makes. Anything else is the executor's to answer."""
    if name in _PLUGINS or _MODULES[name] in sys.modules:
        return False  # loaded already: asking it costs nothing (and a test may have changed it)
    if name == "triton":  # off CUDA only Triton's interpreter runs (triton/support.available)
        if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            return True
        return not _installed("triton")
    if name == "nvfuser":  # the installed nvFuser, on CUDA only (nvfuser/backend.current_backend)
        return device.type != "cuda" or not (_installed("nvfuser_direct") or _installed("nvfuser"))
    return False


def default_executors(device: torch.device) -> list[str]:
    """Every executor usable on this device, in priority order (torch last, always)."""
    return [n for n in KNOWN
            if n == "torch" or (not _surely_unusable(n, device) and get(n).available(device)[0])]


def resolve(names: list[str] | None, device: torch.device) -> list[str]:
    names = list(names) if names else default_executors(device)
    for n in names:
        get(n)  # validates the name
    if "torch" not in names:
        names.append("torch")
    return names


@dataclass
class Selection:
    fusers: list[FusionExecutor] = field(default_factory=list)  # usable ones asked for, in priority order
    notes: list[tuple[Severity, str, Provenance | None]] = field(default_factory=list)  # (severity, message, where)
    previews: list[tuple[FusionExecutor, str]] = field(default_factory=list)  # (executor, why it cannot run here)


def select(names: list[str], device: torch.device, preview_all: bool = False) -> Selection:
    """The fusion executors of `names` usable on `device`; those asked for but unusable here
    (and, with `preview_all`, every other known one unusable here) still write the code they
    would run, so a report on a CPU can show what Triton would generate."""
    out = Selection()
    candidates = list(names)
    if preview_all:
        candidates += [n for n in KNOWN if n not in candidates]
    for name in candidates:
        ex = get(name)
        ok, why = ex.available(device)
        if not ok:
            if name in names:
                out.notes.append((Severity.WARNING, f"executor {name} is not usable here: {why}; its work goes to the "
                                             "next executor", None))
            if ex.fuses:
                out.previews.append((ex, why))
        elif ex.fuses and name in names:
            out.fusers.append(ex)
    return out
