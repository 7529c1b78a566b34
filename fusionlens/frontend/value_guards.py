"""Value guards: where the traced call branched on a tensor's value, that value, checked at each call.

`bool(t)`, `t.item()`, `bool(mask.all())` in user code decide which ops the trace holds. The
tracer records each such read (`Read`: the torch call, its arguments as trace Values, what it
returned, the user's line). `ValueGuards` checks them before jit reuses the program: it runs
the few ops the read depends on (a mask's `all()`) on the call's inputs and reads again; a
call where a value differs is compiled anew (the other branch), as dynamo recompiles. A read
that depends on no input's data (only on sizes) is a constant of a static program, and is
checked once per set of sizes in a dynamic one: no host sync after the first.

A dynamic trace runs on fake tensors, which have no values: it replays what the real trace
read, in order (`call`), so both take the same branch.

One read is no branch: nn.BatchNorm's cumulative moving average (momentum=None) computes
`1.0 / float(self.num_batches_tracked)` in Python, a value that changes every training step, and
passes it to F.batch_norm as its momentum. As a guard it would compile every step (torch.compile
leaves it unspecialised); so that read (`Read.factor`) is no guard, and the F.batch_norm call of
the same forward is recorded as `batch_norm_cumulative`, which reads num_batches_tracked as a
tensor input and computes the factor as the program runs (`factor_call`).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.modules import batchnorm
from torch.utils import _pytree as pytree

from fusionlens.frontend.notes import Note, Severity
from fusionlens.ir import provenance
from fusionlens.ir.interpret import run_ops
from fusionlens.ir.sizes import symbol_values
from fusionlens.ir.torch_compat import is_fake, on_fakes
from fusionlens.ir.trace import OpTag, Trace, Value, values_in
from fusionlens.ops.torch_ops import normalization
from fusionlens.report.schema import DiagnosticCode

# Tensor -> Python value: what a branch reads (equal and allclose read two tensors)
READS = {"__bool__", "item", "tolist", "__int__", "__float__", "__index__", "__complex__",
         "numpy", "equal", "allclose", "is_nonzero"}


@dataclass
class Read:
    func: Callable  # the torch callable (Tensor.__bool__, Tensor.item, torch.equal, ...)
    args: tuple[Any, ...]  # its arguments, tensors as the trace's Values
    kwargs: dict[str, Any]
    seen: Any  # what it returned when traced
    where: provenance.Provenance | None
    factor: bool = False  # a batch norm's cumulative factor, computed in the program: no guard

    @property
    def name(self) -> str:
        return getattr(self.func, "__name__", "read")

    def text(self, seen: Any = None) -> str:
        """`bool(t12) is False`, `t3.item() == 4`: the guard as users read it."""
        shown = self.seen if seen is None else seen
        first = self.args[0] if self.args else "?"
        call = {"__bool__": f"bool({first})", "__int__": f"int({first})", "__float__": f"float({first})",
                "__index__": f"index({first})"}.get(self.name, f"{first}.{self.name}()")
        return f"{call} is {shown!r}" if isinstance(shown, bool) else f"{call} == {shown!r}"


def call(tracer, func, args, kwargs):
    """`func(*args, **kwargs)` as the traced call runs it; in a dynamic trace (fake tensors,
    torch_compat.on_fakes), a value read returns what the real trace read at the same point."""
    replay = tracer.replay
    if replay is None:  # a real trace
        return func(*args, **kwargs)
    name = getattr(func, "__name__", "")
    if name not in READS or not any(is_fake(a) for a in pytree.tree_leaves(args)):
        return on_fakes(func)(*args, **kwargs)
    if not replay or replay[0][0] != name:
        raise RuntimeError(f"with symbolic sizes the call read a tensor's value ({name}) where the example did not")
    return replay.pop(0)[1]


def note(tracer, func, args, kwargs, out) -> None:
    """The traced call read a tensor's value: a guard when every tensor it read is a traced
    value (else a warning that the trace is specialised to it)."""
    where = tracer.where()
    tensors = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    known = all(id(t) in tracer.values or id(t) in tracer.views.links for t in tensors)
    if not known:
        name = getattr(func, "__name__", "read")
        tracer.notes.append(Note(Severity.WARNING, f"Python control flow read a tensor's value (.{name}() -> {out!r})"
                                 " of a tensor the trace does not compute; the trace is specialised to it and may be "
                                 "wrong for other input values", where, DiagnosticCode.DATA_DEPENDENT))
        return
    vargs, vkwargs = pytree.tree_map(lambda a: tracer.to_value(a) if isinstance(a, torch.Tensor) else a, (args, kwargs))
    read = Read(func, tuple(vargs), dict(vkwargs), out, where)
    tracer.reads.append(read)
    # a warning: the program is specialised to the value (and reading it syncs with the device)
    guard = Note(Severity.WARNING, "value guard: Python control flow branched on a tensor's value "
                 f"({read.text()}) here; a jit checks it before each call, and a call where it "
                 "differs compiles the other branch (a single compile, as `fusionlens compile`, is specialised to it)",
                 where, DiagnosticCode.VALUE_GUARD)
    tracer.notes.append(guard)
    frame = _library_caller()
    if frame is not None and _FACTOR_READS.get(frame.f_code) == read.name and isinstance(args[0], torch.Tensor):
        # a guard until F.batch_norm takes it as its momentum in this frame (factor_call)
        tracer.factors.append(_Factor(frame, args[0], read, guard))


# --- nn.BatchNorm's cumulative moving average: a read that is no branch ----------------------

# the forwards that read num_batches_tracked for the factor, and how
_FACTOR_READS = {batchnorm._BatchNorm.forward.__code__: "__float__",
                 batchnorm.SyncBatchNorm.forward.__code__: "item"}
_LIBRARY = ("fusionlens.", "torch.overrides", "torch.nn.functional")  # frames between a call and its caller


@dataclass
class _Factor:
    frame: FrameType  # the BatchNorm forward that read it
    tensor: torch.Tensor  # num_batches_tracked, as the forward holds it
    read: Read
    guard: Note  # the value-guard note, dropped where the read is no guard


def _library_caller() -> FrameType | None:
    """The frame of the code that made the torch call being recorded (F.batch_norm's caller)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(_LIBRARY):
        frame = frame.f_back
    return frame


def factor_call(tracer, func, args, kwargs) -> tuple[Callable, tuple, dict]:
    """The call to record for `func(*args, **kwargs)`: F.batch_norm from the BatchNorm forward
    that read its factor from num_batches_tracked becomes batch_norm_cumulative, which reads the
    buffer, and that read is no guard; any other call (or one whose momentum is not the factor
    read) is itself, the read a guard."""
    if func is not F.batch_norm:
        return func, args, kwargs
    frame = _library_caller()
    pending = next((f for f in tracer.factors if f.frame is frame), None)
    if pending is None:
        return func, args, kwargs
    tracer.factors.remove(pending)
    a = inspect.signature(F.batch_norm).bind(*args, **kwargs)
    a.apply_defaults()
    stats = (a.arguments["running_mean"], a.arguments["running_var"])
    read = pending.read
    if (a.arguments["training"] is not True or not all(isinstance(t, torch.Tensor) for t in stats)
            or not isinstance(read.seen, (int, float)) or read.seen == 0
            or a.arguments["momentum"] != 1.0 / read.seen or tracer.to_value(pending.tensor) is not read.args[0]):
        return func, args, kwargs
    read.factor = True
    tracer.notes.remove(pending.guard)
    sym = normalization.batch_norm_cumulative
    tracer.extra_globals[sym.name] = sym.impl
    return sym.impl, (a.arguments["input"], *stats, pending.tensor), {
        "weight": a.arguments["weight"], "bias": a.arguments["bias"], "eps": a.arguments["eps"]}


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:  # NaN read twice
        return True
    if hasattr(a, "tolist") and hasattr(b, "tolist"):  # numpy arrays
        return a.tolist() == b.tolist()
    return bool(a == b)


class ValueGuards:
    """The reads of one program's trace, checked against a call's program inputs (the
    trace's inputs, in order: user tensors, then parameters and buffers)."""

    def __init__(self, trace: Trace, reads: Sequence[Read]):
        reads = [r for r in reads if not r.factor]
        self.inputs = list(trace.inputs)
        wanted = {v.name for r in reads for v in values_in((r.args, r.kwargs))}
        ops = []
        for b in reversed(trace.bound_symbols):  # the ops the read values depend on
            if any(o.name in wanted for o in b.outputs):
                ops.append(b)
                wanted.update(v.name for v in b.inputs())
        self.ops = list(reversed(ops))
        self.needed = [i for i, v in enumerate(self.inputs) if v.name in wanted]
        self.symbolic = any(v.symbolic for v in self.inputs)
        # a read of no input's data is a constant at given sizes: static programs drop it
        self.reads = list(reads) if self.needed or self.symbolic else []
        self.random = any(OpTag.RANDOM in b.sym.tags for b in self.ops)  # re-running would draw again
        self.memo: dict[tuple, tuple[Read, Any] | None] = {}  # sizes -> what fails, where no input's data is read

    def __bool__(self) -> bool:
        return bool(self.reads) and not self.random

    def failing(self, tensors: Sequence[torch.Tensor]) -> tuple[Read, Any] | None:
        """The first read whose value differs in this call, and the value it has now; None
        when every guard holds."""
        if not self:
            return None
        sizes = symbol_values(self.inputs, tensors) if self.symbolic else {}
        key = tuple(sorted(sizes.items())) if not self.needed else None
        if key is not None and key in self.memo:
            return self.memo[key]
        env = {self.inputs[i].name: tensors[i] for i in self.needed}
        with torch.no_grad():
            run_ops(self.ops, env, sizes)
            out = None
            for r in self.reads:
                args, kwargs = pytree.tree_map(lambda a: env[a.name] if isinstance(a, Value) else a, (r.args, r.kwargs))
                now = r.func(*args, **kwargs)
                if not _same(now, r.seen):
                    out = (r, now)
                    break
        if key is not None:
            self.memo[key] = out
        return out


def of(trace: Trace, reads: Sequence[Read]) -> ValueGuards | None:
    guards = ValueGuards(trace, reads) if any(not r.factor for r in reads) else None
    return guards if guards else None
