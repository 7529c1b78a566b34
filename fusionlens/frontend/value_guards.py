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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fusionlens.frontend.notes import Note, Severity
from fusionlens.ir import provenance
from fusionlens.ir.interpret import run_ops
from fusionlens.ir.sizes import symbol_values
from fusionlens.ir.torch_compat import is_fake, on_fakes
from fusionlens.ir.trace import OpTag, Trace, Value, values_in
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
    tracer.notes.append(Note(Severity.WARNING, "value guard: Python control flow branched on a tensor's value "
                             f"({read.text()}) here; a jit checks it before each call, and a call where it "
                             "differs compiles the other branch "
                             "(a single compile, as `fusionlens compile`, is specialised to it)",
                             where, DiagnosticCode.VALUE_GUARD))


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
    guards = ValueGuards(trace, reads) if reads else None
    return guards if guards else None
