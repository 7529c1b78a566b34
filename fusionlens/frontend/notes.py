"""What the compiler tells the user while it works: a Note (severity, message, where, code).

`Severity` is an internal enum (a StrEnum, for the reason fusionlens/ir/vocabulary.py gives):
the compiler makes and compares members; fusionlens/driver/wire.py turns a Note into the
report's Diagnostic, its severity into the report's string. The frontend notes first (tracing),
the executors and the pipeline add theirs.
"""

from __future__ import annotations

import enum

from fusionlens.ir import provenance


class Severity(enum.StrEnum):
    """How much a note matters; the values are the report's (and LSP's) severity names."""

    ERROR = "error"  # the compile failed or its result is wrong
    WARNING = "warning"  # something runs eagerly, or differs from what the user may expect
    INFORMATION = "information"  # what the compiler did and why


class Note:
    """A diagnostic noticed while compiling: (severity, message, provenance, code)."""

    def __init__(self, severity: Severity, message: str, where: provenance.Provenance | None, code: str = ""):
        self.severity = Severity(severity)  # a misspelt severity raises here
        self.message, self.where, self.code = message, where, code
