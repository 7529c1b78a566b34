"""The boundary: the compiler's own vocabulary turned into the report's strings and types.

The compiler keeps its states as enums where they are owned (`ir.vocabulary.Stage` and
`ValueRole`, `middle.programs.ProgramKind`, `frontend.notes.Severity`) and its facts as frozen
types (`ir.provenance.Frame`, `middle.contract.Boundary`, `middle.cost.Cost`); the report
(fusionlens/report/schema.py, the consumers' contract) holds plain strings and its own
dataclasses. This module is the one place one becomes the other, as rust-analyzer keeps its
wire format at its edge: reporting calls it while it assembles a report, and no module
compares these states with a string literal (tests/test_architecture.py). (The driver's own
checks and benchmarks still make the report's Diagnostic directly, with its severity string.)
The enums' values are the report's strings, so each conversion keeps the JSON what it was;
the report holds `str`, never a member.
"""

from __future__ import annotations

from collections.abc import Iterable

from fusionlens.frontend.notes import Note, Severity
from fusionlens.ir.provenance import Frame, Provenance
from fusionlens.ir.trace import Trace
from fusionlens.ir.vocabulary import Stage, ValueRole
from fusionlens.middle.contract import Boundary
from fusionlens.middle.cost import Cost
from fusionlens.middle.programs import ProgramKind
from fusionlens.report import schema as R

# SavedTensor.kind of a tensor the forward computed (the others are their input's role)
ACTIVATION = "activation"
_SAVED_ROLE = {ValueRole.PARAM: "parameter", ValueRole.COMPUTED: "input"}


def stage(s: Stage) -> str:
    return Stage(s).value


def program_kind(kind: ProgramKind) -> str:
    return ProgramKind(kind).value


def severity(s: Severity) -> str:
    return Severity(s).value


def saved_kind(role: ValueRole | None, computed: bool) -> str:
    """A saved tensor's SavedTensor.kind: `activation` when the forward computed it, else what
    it is to the call (`parameter`, `buffer`, `const`, `input`)."""
    if computed:
        return ACTIVATION
    role = ValueRole.COMPUTED if role is None else ValueRole(role)
    return _SAVED_ROLE.get(role, role.value)


def traces(traced: dict[Stage, Trace]) -> dict[str, str]:
    """A program's traces as the report keys them: stage name -> printed Python (the
    decomposed trace with each op's prims nested beneath it)."""
    return {stage(s): t.python(nested=s is Stage.DECOMPOSED) for s, t in traced.items()}


def frame(f: Frame) -> R.Frame:
    return R.Frame(f.file, f.line, f.function)


def stack(p: Provenance | None) -> list[R.Frame]:
    return [frame(f) for f in p.stack] if p is not None else []


def boundary(b: Boundary | None) -> R.Boundary | None:
    if b is None:
        return None
    where = b.where
    return R.Boundary(b.code.reason, b.detail, where.file if where else None, where.line if where else None,
                      code=b.code.value)


def cost(c: Cost) -> R.Cost:
    return R.Cost(c.bytes, c.flops, c.math)


def diagnostic(note: Note) -> R.Diagnostic:
    """A compiler Note as the report's Diagnostic, at its user line when it has one."""
    where, code = note.where, str(note.code)
    if where is None:
        return R.Diagnostic(severity(note.severity), note.message, code=code)
    return R.Diagnostic(severity(note.severity), note.message, where.file, where.line, where.col, where.end_line,
                        where.end_col, code=code)


def diagnostics(notes: Iterable[Note]) -> list[R.Diagnostic]:
    return [diagnostic(n) for n in notes]
