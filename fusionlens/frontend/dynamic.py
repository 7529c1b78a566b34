"""Dynamic shapes: the call traced again on fake tensors whose dynamic dims are symbols.

The frontend's real trace (frontend.trace) gives eager's result and what the call updates;
a dynamic compile then traces the same call on fake tensors of a `symbols.SymbolEnv`, the
dims asked for made symbolic (`s0`, `s1`, ...), and the pipeline compiles that trace: one
program for every size. What the program assumes about the symbols (a decision the user's
code, a decomposition or an executor made on a size) is a guard of the ShapeEnv; `Guards`
checks them before each call, and a call that fails them is compiled anew.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _pytree as pytree

from fusionlens.frontend import tracer as frontend
from fusionlens.frontend.notes import Note, Severity
from fusionlens.ir import provenance
from fusionlens.report.schema import DiagnosticCode
from fusionlens.ir.sizes import SIZES
from fusionlens.ir.trace import Value

if TYPE_CHECKING:  # sympy's import takes a second: only a dynamic compile pays it
    from fusionlens.ir import symbols

# per user tensor (in frontend.user_tensors order): the dims that are symbolic
DynamicDims = tuple[frozenset[int], ...]


def marked_dims(x: torch.Tensor) -> frozenset[int]:
    """Dims the user declared dynamic: `fusionlens.mark_dynamic(x, dim)` (or torch's own
    `torch._dynamo.mark_dynamic`, so code written for torch.compile keeps its marks)."""
    ours = getattr(x, "_fusionlens_dynamic", ())
    theirs = getattr(x, "_dynamo_dynamic_indices", ())
    return frozenset(d % max(x.ndim, 1) for d in (*ours, *theirs))


def mark_dynamic(x: torch.Tensor, dims: int | Sequence[int]) -> torch.Tensor:
    """Declare dims of `x` dynamic up front: a jit compiles a program for every size of them
    from the first call, rather than after a size has changed once. Returns `x`."""
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    for d in dims:
        if not -x.ndim <= d < max(x.ndim, 1):
            raise IndexError(f"dim {d} is out of range for a tensor of {x.ndim} dims")
    if x.ndim == 0:
        raise IndexError("a 0-d tensor has no dim to make dynamic")
    marks = tuple(sorted({*getattr(x, "_fusionlens_dynamic", ()), *(d % x.ndim for d in dims)}))
    x._fusionlens_dynamic = marks  # type: ignore[attr-defined]  # read by marked_dims
    return x


class Unsupported(Exception):
    """The call cannot be traced with symbolic sizes; it compiles for its static shapes."""


@dataclass
class Guards:
    """What a dynamic program assumes of its user tensors' sizes (and strides), as torch's
    ShapeEnv wrote it; `check(tensors)` before each call."""

    env: symbols.SymbolEnv
    fakes: list[torch.Tensor]  # the fake user tensors the trace ran on
    ints: dict[int, torch.SymInt] = field(default_factory=dict)  # leaf position -> the int argument's symbol
    values: dict[str, int] = field(default_factory=dict)  # the program's SIZES: each int symbol's value now
    int_names: list[str] = field(default_factory=list)  # the int arguments' names, as `ints`
    source: str = ""
    _check: Callable[[dict], bool] | None = None

    def finish(self) -> None:
        """Read the guards once every stage has run (each may add some)."""
        placeholders: list[Any] = [*self.fakes, *self.ints.values()]
        self.source = self.env.produce_guards_expression(placeholders, ignore_static=False) or "True"
        code = compile(f"lambda L: {self.source}", "<fusionlens guards>", "eval")
        self._check = eval(code, {})  # noqa: S307 - the ShapeEnv's own expression over tensor sizes
        self.env.freeze()  # a later decision on a size would be a guard nobody checks

    def check(self, tensors: Sequence[torch.Tensor], leaves: Sequence = ()) -> bool:
        """Whether the program serves a call of these user tensors and flat argument leaves."""
        assert self._check is not None, "Guards.finish() first"
        named = {f"t{i}": t for i, t in enumerate(tensors)}
        for k, position in enumerate(self.ints):
            if position >= len(leaves) or type(leaves[position]) is not int:
                return False
            named[f"t{len(tensors) + k}"] = leaves[position]
        return bool(self._check(named))

    def bind(self, leaves: Sequence) -> None:
        """Give the program this call's int arguments (it reads them from SIZES)."""
        for position, sym in self.ints.items():
            self.values[str(sym.node.expr)] = leaves[position]

    def describe(self, names: Sequence[str] = ()) -> list[str]:
        """The guards as users read them (`2 <= x.shape[1]`), the tensors by `names` (the
        program's user inputs, in order), the int arguments by their own."""
        if self.source == "True":
            return []
        return [g.strip() for g in self._readable(self.source, names).split(" and ")]

    def _readable(self, text: str, names: Sequence[str]) -> str:
        names = [*names, *self.int_names] if len(names) == len(self.fakes) else names
        name = lambda m: names[int(m.group(1))] if int(m.group(1)) < len(names) else f"t{m.group(1)}"  # noqa: E731
        text = re.sub(r"L\['t(\d+)'\]\.size\(\)\[(\d+)\]", lambda m: f"{name(m)}.shape[{m.group(2)}]", text)
        text = re.sub(r"L\['t(\d+)'\]\.stride\(\)\[(\d+)\]", lambda m: f"{name(m)}.stride({m.group(2)})", text)
        text = re.sub(r"L\['t(\d+)'\]\.", lambda m: f"{name(m)}.", text)
        return re.sub(r"L\['t(\d+)'\]", name, text)  # an int argument

    def failing(self, tensors: Sequence[torch.Tensor], leaves: Sequence = (),
                names: Sequence[str] = ()) -> tuple[str, Any] | None:
        """Why the program does not serve this call: (the first guard that fails, as users
        read it with this call's sizes, the user line that made it, or None for what the
        trace assumed of its inputs: a static dim, a size 0 or 1, a layout). Only after
        `check` said no: it evaluates the guards one by one."""
        values: dict[Any, int] = {}
        sources: dict[Any, str] = {}  # symbol -> where a call's value is read, as produce_guards spells it
        for i, (fake, t) in enumerate(zip(self.fakes, tensors)):
            for d, (size, n) in enumerate(zip(fake.shape, t.shape)):
                if isinstance(size, torch.SymInt) and size.node.expr.is_symbol:
                    values.setdefault(size.node.expr, n)
                    sources.setdefault(size.node.expr, f"L['t{i}'].size()[{d}]")
        for k, (position, sym) in enumerate(self.ints.items()):
            if position < len(leaves) and type(leaves[position]) is int:
                values[sym.node.expr] = leaves[position]
                sources[sym.node.expr] = f"L['t{len(self.fakes) + k}']"
        from fusionlens.ir import symbols
        for guard in self.env.guards:
            if not set(guard.expr.free_symbols) <= set(values) or bool(guard.expr.xreplace(values)):
                continue
            text = symbols.source(guard.expr)
            for sym, src in sorted(sources.items(), key=lambda kv: -len(str(kv[0]))):
                text = re.sub(rf"\b{sym}\b", src, text)  # (a source has no backslash)
            seen = ", ".join(f"{self._readable(sources.get(s, str(s)), names)} = {v}"
                             for s, v in values.items() if s in guard.expr.free_symbols)
            return f"{self._readable(text, names)} ({seen})", self.env.where(guard)
        named = {f"t{i}": t for i, t in enumerate(tensors)}
        for piece in self.source.split(" and "):  # what produce_guards added: static dims, 0/1, layouts
            try:
                ok = bool(eval(compile(f"lambda L: {piece}", "<fusionlens guard>", "eval"), {})(named))  # noqa: S307
            except Exception:  # noqa: BLE001 - a piece split inside parentheses: skip it
                continue
            if not ok:
                return self._readable(piece.strip(), names), None
        return None


def trace(fn, args, kwargs, name: str, dims: DynamicDims, real: frontend.TraceResult,
          ints: frozenset[int] = frozenset()) -> tuple[frontend.TraceResult, Guards]:
    """`fn` traced on fake tensors with `dims` symbolic, and the int arguments at `ints`
    (positions among the flat leaves of (args, kwargs)) symbols too; `real` (its real trace)
    lends eager's result, the notes and the updates it found. Raises Unsupported where the
    symbolic trace cannot stand for the real one."""
    from fusionlens.ir.torch_compat import DimDynamic, LocalSource, StatelessSymbolicContext

    if real.eager_only is not None:  # the signature runs eagerly, whatever its sizes
        raise Unsupported(real.eager_only)
    from fusionlens.ir import symbols
    env = symbols.SymbolEnv()
    fakes: list[torch.Tensor] = []
    by_id: dict[int, torch.Tensor] = {}

    def fake(x):
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) not in by_id:
            symbolic = dims[len(fakes)] if len(fakes) < len(dims) else frozenset()
            context: StatelessSymbolicContext = StatelessSymbolicContext(dynamic_sizes=[
                DimDynamic.DYNAMIC if i in symbolic else DimDynamic.STATIC for i in range(x.ndim)])
            by_id[id(x)] = env.fake.from_tensor(x, symbolic_context=context)
            fakes.append(by_id[id(x)])
        return by_id[id(x)]
    user = frontend.user_tensors(fn, args, kwargs)
    for x in user:  # in the order the program takes them, so dims[i] is the i-th's
        fake(x)
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    symbols_of = {}
    for k, position in enumerate(sorted(ints)):
        n = env.create_unspecified_symint_and_symbol(leaves[position], LocalSource(f"t{len(user) + k}"),
                                                     DimDynamic.DYNAMIC)
        if isinstance(n, torch.SymInt):  # 0 and 1 stay ints, as sizes do
            leaves[position] = symbols_of[position] = n
    args, kwargs = pytree.tree_unflatten(leaves, spec)
    try:
        with env.fake:
            symbolic = frontend.trace(fn, args, kwargs, name, clone=fake, replay=[(r.name, r.seen) for r in real.reads],
                                      hooks=real.hooks)
    except frontend.TraceError as e:  # (the user's line, for the recompiles this causes to name)
        raise Unsupported(e.message.split("\n")[0] + _at(e.file, e.line)) from e
    except Exception as e:  # the fake run met what needs data (a .item(), a data-dependent shape)
        raise Unsupported(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                          + _at(*provenance.user_location(e)[:2])) from e
    notes = real.notes
    try:
        _same_program(real.trace, symbolic.trace)
    except Unsupported:
        if not real.reads or symbolic.reads:
            raise
        notes = _read_free(real, symbolic)
    guards = Guards(env, [by_id[id(x)] for x in user], symbols_of, int_names=_leaf_names(fn, args, kwargs, symbols_of))
    guards.bind([symbols_of[i].node.hint if i in symbols_of else leaf for i, leaf in enumerate(leaves)])
    symbolic.trace.extra_globals[SIZES] = guards.values  # the program reads its int symbols from it
    result = frontend.TraceResult(symbolic.trace, real.eager_output, real.constants, notes,
                                  real.eager_only, real.mutated, real.originals, real.copies, real.states, real.passed)
    result.reads = symbolic.reads
    return result, guards


def _read_free(real: frontend.TraceResult, symbolic: frontend.TraceResult) -> list:
    """The notes of a symbolic trace that took another path than the example's because that
    one read a tensor's value and this one read none: library code that checks whether it is
    traced (transformers' `is_tracing` of a fake tensor) takes its general path, which serves
    every value (the pipeline checks it against eager on the example). Its outputs and
    updates must be the example's."""
    if [(d.name, s.name) for d, s in real.trace.writeback] != [(d.name, s.name) for d, s in symbolic.trace.writeback]:
        raise Unsupported("with symbolic sizes the call updated other tensors than on the example")
    if pytree.tree_structure(real.trace.output) != pytree.tree_structure(symbolic.trace.output):
        raise Unsupported("with symbolic sizes the call returned another structure than on the example")
    read = real.reads[0]
    kept = [n for n in real.notes if n.code != DiagnosticCode.VALUE_GUARD]
    return kept + [Note(Severity.INFORMATION, f"with symbolic sizes the call took a path that reads no tensor value "
                        f"(the example branched on {read.text()}: the code checks whether it is traced): the dynamic "
                        "program is that path, which serves every value, checked against eager on the example",
                        read.where, DiagnosticCode.VALUE_GUARD)]


def _at(file: str | None, line: int | None) -> str:
    return f" (at {provenance.display_path(file)}:{line})" if file and line else ""


def _leaf_names(fn, args, kwargs, positions) -> list[str]:
    """The parameter names of the int arguments at `positions` among the flat leaves."""
    params = [name for name, _ in frontend.signature_names(fn, args, kwargs)]
    paths = [path for path, _ in pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))[0]]
    names = []
    for position in positions:
        path = paths[position]
        first, second = path[0].idx, path[1] if len(path) > 1 else None
        key = getattr(second, "key", None) if first == 1 else getattr(second, "idx", None)
        names.append(key if isinstance(key, str) else params[key] if isinstance(key, int) and key < len(params)
                     else f"arg{position}")
    return names


def _same_program(real, symbolic) -> None:
    """The symbolic trace stands for the real one only if the call took the same path."""
    ops = lambda t: [(b.sym.name, len(b.outputs)) for b in t.bound_symbols]  # noqa: E731
    if ops(real) != ops(symbolic):
        raise Unsupported("with symbolic sizes the call ran other ops than on the example")
    if [(d.name, s.name) for d, s in real.writeback] != [(d.name, s.name) for d, s in symbolic.writeback]:
        raise Unsupported("with symbolic sizes the call updated other tensors than on the example")


def growing(traced: frontend.TraceResult) -> dict[tuple, int]:
    """The slots of objects passed in (a KV cache's layers, by path) that the call replaced by
    a cat along a dim of what they held, or of an empty start (a cache made on its first call):
    path -> that dim, which grows every call. jit makes it symbolic on the slot's first
    appearance, as dynamo's automatic dynamic does for a size that changed, but known up front:
    a decode step's first program serves every later length."""
    if not traced.states:
        return {}
    made = {o.name: b for b in traced.trace.bound_symbols for o in b.outputs}
    found: dict[tuple, int] = {}
    for slots in traced.trace.output[1]:
        for path, value in slots:
            b = made.get(value.name) if isinstance(value, Value) else None
            shape = getattr(value, "shape", None)
            if b is None or b.sym.name not in ("torch.cat", "torch.concat", "torch.concatenate") or not shape:
                continue
            dim = b.kwargs.get("dim", b.args[1] if len(b.args) > 1 else 0)
            if isinstance(dim, int):
                found[tuple(path)] = dim % len(shape)
    return found
