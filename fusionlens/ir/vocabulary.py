"""The IR's states as enums: a trace's stage and a value's role.

The compiler compares members (`trace.stage is Stage.FUSION`), never strings; the report's
strings are made from them in one place, fusionlens/driver/wire.py, and nothing here knows
the report. tests/test_architecture.py fails on a literal comparison of `.stage` or `.role`.

Why `enum.StrEnum` and not `enum.Enum`: a trace's stage is also text the program carries (the
printed header `# FusionLens trace · stage: fusion`, the file name `<fusionlens f:fusion>` its
code objects and profiles show, the debug lines), and these must read as before; a StrEnum
formats as its value, so they do, while mypy and the architecture test keep comparisons on
members. The values are exactly the report's strings, so the wire conversion is the identity
on the value (`str(member)`), which keeps the JSON byte-identical to what it was.
"""

from __future__ import annotations

import enum


class Stage(enum.StrEnum):
    """A trace's stage, in pipeline order (fusionlens/driver/pipeline.py makes them)."""

    ACQUIRED = "acquired"  # the torch ops as the user's code called them
    DECOMPOSED = "decomposed"  # each op with its prims nested beneath it
    OPTIMISED = "optimised"  # after CSE and DCE
    JOINT = "joint"  # (training) the forward-backward trace
    FORWARD = "forward"  # its forward half
    BACKWARD = "backward"  # its backward half: a program of its own
    FUSION = "fusion"  # fusible ops flattened into prims
    EXECUTION = "execution"  # regions and torch calls: what runs


class ValueRole(enum.StrEnum):
    """What a trace input is to the user's call; a value an op computes has none."""

    INPUT = "input"  # a tensor the user passed
    PARAM = "param"  # a module's parameter
    BUFFER = "buffer"  # a module's buffer
    CONST = "const"  # a tensor the call captured (a global, a closure's)
    SAVED = "saved"  # a backward program's: a tensor the forward saved for it
    COMPUTED = ""  # made by an op of the trace
