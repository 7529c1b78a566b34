"""Executors claim parts of the trace in priority order; torch takes whatever is left.

An executor answers two questions: is it usable here (and if not, exactly why), and which
ops can it take. Fusion executors (triton, nvfuser) take prims and turn regions of them
into kernels; the torch executor runs any op as the torch call it stands for.
"""

from __future__ import annotations

import importlib
from typing import Optional

import torch

KNOWN = ("nvfuser", "triton", "torch")
_PLUGINS: dict = {}  # name -> executor object registered at run time


def register(executor) -> None:
    """Make an executor object usable by name (a plugin, or a test double)."""
    _PLUGINS[executor.name] = executor


def unregister(name: str) -> None:
    _PLUGINS.pop(name, None)


def get(name: str):
    if name in _PLUGINS:
        return _PLUGINS[name]
    if name not in KNOWN:
        raise ValueError(f"unknown executor {name!r}; known: {', '.join(KNOWN + tuple(_PLUGINS))}")
    return importlib.import_module(f"compiler.executors.{name}_executor").EXECUTOR


def default_executors(device: torch.device) -> list:
    """Every executor usable on this device, in priority order (torch last, always)."""
    names = [n for n in KNOWN if n == "torch" or get(n).available(device)[0]]
    return names


def resolve(names: Optional[list], device: torch.device) -> list:
    names = list(names) if names else default_executors(device)
    for n in names:
        get(n)  # validates the name
    if "torch" not in names:
        names.append("torch")
    return names
