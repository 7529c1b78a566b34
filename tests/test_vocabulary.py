"""The compiler's vocabulary as enums, and the report's strings made of it at one boundary
(fusionlens/driver/wire.py; issue 27 part 3)."""

import enum
import json

import pytest
import torch

import fusionlens
from fusionlens.driver import wire
from fusionlens.frontend.notes import Note, Severity
from fusionlens.ir.provenance import Frame, Provenance
from fusionlens.ir.trace import Trace, Value
from fusionlens.ir.vocabulary import Stage, ValueRole
from fusionlens.middle.contract import BoundaryCode, boundary
from fusionlens.middle.programs import STAGES, ProgramKind
from fusionlens.report import schema as R


def test_the_enums_name_exactly_the_reports_strings():
    """Each internal enum and the report's string tables agree, value for value and in order:
    the boundary's conversion is total both ways."""
    assert [k.value for k in ProgramKind] == list(R.PROGRAM_KINDS)
    assert {k.value: tuple(s.value for s in STAGES[k]) for k in ProgramKind} == R.PROGRAM_STAGES
    assert {s.value for s in Stage} == set(R.ALL_STAGES)
    assert [wire.stage(s) for s in Stage if s in R.TRACE_STAGES] == list(R.TRACE_STAGES)
    assert {wire.severity(s) for s in Severity} == {"error", "warning", "information"}


def test_a_misspelt_state_raises_where_it_is_made():
    with pytest.raises(ValueError):
        Value("t0", (2,), torch.float32, "cpu", "parameter")  # the role is "param"
    with pytest.raises(ValueError):
        Trace("f", [], [], None, "fused")
    with pytest.raises(ValueError):
        Note("warn", "m", None)
    assert Value("t0", (2,), torch.float32, "cpu", "param").role is ValueRole.PARAM  # old spelling: a member
    assert Trace("f", [], [], None, "fusion").stage is Stage.FUSION


def test_wire_makes_plain_strings_and_the_reports_types():
    where = Provenance("m.py", 3, 3, 4, 9, (Frame("m.py", 3, "forward"), Frame("main.py", 10, "<module>")))
    b = wire.boundary(boundary(BoundaryCode.LIBRARY_CALL, "linear runs as a library call", where))
    assert b == R.Boundary("library call", "linear runs as a library call", "m.py", 3, code="library-call")
    assert type(b.code) is str
    assert wire.stack(where) == [R.Frame("m.py", 3, "forward"), R.Frame("main.py", 10, "<module>")]
    d = wire.diagnostic(Note(Severity.WARNING, "runs eagerly", where, R.DiagnosticCode.EAGER_FALLBACK))
    assert (d.severity, d.file, d.line, d.col, d.end_col, d.code) == ("warning", "m.py", 3, 4, 9, "eager-fallback")
    assert type(d.severity) is str and type(d.code) is str
    assert wire.saved_kind(ValueRole.PARAM, False) == "parameter"
    assert wire.saved_kind(ValueRole.BUFFER, False) == "buffer"
    assert wire.saved_kind(None, False) == "input"
    assert wire.saved_kind(ValueRole.PARAM, True) == "activation"


def _internal_members(x, path="report"):
    """(path, member) for every enum member of the compiler's own (not the report's) in `x`."""
    if isinstance(x, enum.Enum):
        return [] if type(x).__module__.startswith("fusionlens.report") else [(path, x)]
    if isinstance(x, dict):
        return [m for k, v in x.items() for m in _internal_members(k, path) + _internal_members(v, f"{path}.{k}")]
    if isinstance(x, (list, tuple)):
        return [m for i, v in enumerate(x) for m in _internal_members(v, f"{path}[{i}]")]
    return []


def test_a_training_report_holds_the_reports_strings_only():
    """A compile for training (both programs, saved tensors, notes): the report holds no enum
    member of the compiler's (the wire module converted each), and reads back equal from JSON."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.GELU())
    x = torch.randn(4, 8)
    report = fusionlens.compile(model, x, executors=["torch"])
    assert [p.kind for p in report.programs] == ["forward", "backward"]
    assert list(report.program("backward").traces) == ["backward", "fusion", "execution"]
    assert {s.kind for s in report.training.saved} >= {"activation", "parameter"}
    assert _internal_members(report.to_dict()) == []
    assert R.CompileReport.from_json(report.to_json()).to_dict() == json.loads(report.to_json())
