"""The IR: SSA values, symbols, bound symbols and traces, and the trace printer.

A Trace is a straight-line program of BoundSymbols (like torch.fx Nodes): each binds a
Symbol to argument values and produces fresh output Values, exactly once (SSA). A
BoundSymbol may carry `subsymbols`, the decomposition it stands for, so one trace can be
printed at the torch level with its prims nested beneath. The printer emits runnable Python.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
import inspect
import math
import operator
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Iterable

import torch
from torch.utils import _pytree as pytree

from fusionlens.ir.provenance import Provenance
from fusionlens.ir.sizes import SIZES, as_dim, symbol_bindings
from fusionlens.ir.vocabulary import Stage, ValueRole

DTYPE_SHORT = {
    torch.float64: "f64", torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
    torch.uint8: "u8", torch.bool: "b8", torch.complex64: "c64", torch.complex128: "c128",
}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class Value:
    """An SSA value: a tensor of known shape, dtype and device, named once."""

    __slots__ = ("name", "shape", "dtype", "device", "role")

    def __init__(self, name: str, shape, dtype: torch.dtype, device: torch.device,
                 role: ValueRole = ValueRole.COMPUTED):
        self.name = name
        self.shape = tuple(as_dim(s) for s in shape)
        self.dtype = dtype
        self.device = torch.device(device)
        self.role = role if type(role) is ValueRole else ValueRole(role)  # a misspelt role raises

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def type_str(self) -> str:
        short = DTYPE_SHORT.get(self.dtype, dtype_name(self.dtype))
        return f"{short}[{', '.join(map(str, self.shape))}] {self.device.type}"

    def meta(self) -> torch.Tensor:
        if self.symbolic:
            from fusionlens.ir import symbols  # sympy: imported only by dynamic programs
            return symbols.empty(self.shape, self.dtype)
        return torch.empty(self.shape, dtype=self.dtype, device="meta")

    @property
    def symbolic(self) -> bool:
        """Whether a dim is a symbol's (a dynamic program's size: fusionlens/ir/symbols.py)."""
        return any(type(s) is torch.SymInt for s in self.shape)

    def __repr__(self) -> str:
        return self.name


def values_in(tree) -> list:
    """Every Value in a pytree of arguments, in order (with repeats): plain tuples, lists and
    dicts walked here (pytree's generic walk was a fifth of a compile), anything else by pytree."""
    out, todo = [], [tree]
    while todo:
        x = todo.pop()
        if type(x) is Value:
            out.append(x)
        elif type(x) in (tuple, list, dict):
            todo.extend(reversed(list(x.values()) if type(x) is dict else x))
        elif type(x) not in _LITERALS:
            out.extend(leaf for leaf in pytree.tree_leaves(x) if isinstance(leaf, Value))
    return out


def map_values(f: Callable[[Value], Any], tree):
    """`tree` with each Value `v` replaced by `f(v)`, as pytree.tree_map makes it (new containers):
    plain tuples, lists and dicts walked here (pytree's walk was a millisecond of a first call)."""
    kind = type(tree)
    if kind is Value:
        return f(tree)
    if kind is tuple or kind is list:
        mapped = [map_values(f, x) for x in tree]
        return mapped if kind is list else tuple(mapped)
    if kind is dict:
        return {k: map_values(f, x) for k, x in tree.items()}
    return tree if kind in _LITERALS else pytree.tree_map(lambda x: f(x) if isinstance(x, Value) else x, tree)


class SymbolKind(enum.StrEnum):
    """A prim, a torch-level op (the registry's, a rule's backward), a torch call with no symbol,
    a lowered region's callable. A str enum, as OpTag: comparing with the old strings works."""

    PRIM, TORCH, OPAQUE, REGION = "prim", "torch", "opaque", "region"


class OpTag(enum.StrEnum):
    """What an op means, declared where its Symbol is made, never inferred from its name (the
    values are the strings tags were before)."""

    # the prims': one shape in and out, reduced dims dropped, views, from nothing, indexing, cat
    ELEMENTWISE, REDUCTION, SHAPE = "elementwise", "reduction", "shape"
    FACTORY, GATHER, CAT = "factory", "gather", "cat"
    SCATTER = "scatter"  # a window of its first operand replaced: fusion ends a region at its result
    LIBRARY_CALL = "library"  # runs whole (no decomposition, or one only fusion uses)
    RANDOM = "random"  # draws random numbers: its values differ from eager's run to run
    NON_DIFFERENTIABLE = "nondifferentiable"  # no gradient flows through it
    PROGRAM_GLOBAL = "program global"  # the printed program names its callable as a global
    MATMUL = "matmul"  # on tensor cores; float32 uses TF32 per torch's matmul precision
    CONVOLUTION = "convolution"  # on tensor cores through cuDNN (TF32 per cudnn.allow_tf32)
    COLLECTIVE = "collective"  # communicates with other ranks (torch.distributed): regions end at it
    IN_PLACE = "in place"  # writes its result into its first operand and returns it (middle/reinplace.py)


class Symbol:
    """An operation. `impl` runs it on real tensors; `decomposition`, when present, expresses
    it in simpler symbols (ultimately prims) by being called on Values inside a trace. Whoever
    makes it declares its kind and tags; `flops` counts a library call's FLOPs."""

    def __init__(self, name: str, impl: Callable, *, kind: SymbolKind | str = SymbolKind.TORCH,
                 decomposition: Callable | None = None, tags: Iterable[OpTag] = (),
                 meta: Callable | None = None, flops: Callable[[tuple, dict, list], float] | None = None):
        self.name = name
        self.impl = impl
        self.kind = SymbolKind(kind)  # a misspelt kind raises here
        self.decomposition = decomposition
        self.tags: frozenset[OpTag] = frozenset(tags)
        if not all(isinstance(t, OpTag) for t in self.tags):
            raise TypeError(f"{name}: a symbol's tags are OpTag members, not {sorted(map(repr, self.tags))}")
        self.meta = meta  # (args, kwargs) -> meta tensors; default: impl on meta tensors
        self.flops = flops  # (args, kwargs, outputs) -> FLOPs of a library call (ops/torch_ops/flops.py)

    def __call__(self, *args, **kwargs):
        ctx = _current()
        if ctx is None:  # on real tensors (a printed program runs this way)
            return self.impl(*args, **kwargs)
        return ctx.bind(self, args, kwargs)  # inside a decomposition: record, even factories

    @functools.cached_property
    def decomposition_signature(self) -> inspect.Signature:
        """The decomposition's parameters: how the op's arguments bind, and their defaults."""
        assert self.decomposition is not None, f"{self.name} has no decomposition"
        return inspect.signature(self.decomposition)

    def __repr__(self) -> str:
        return f"Symbol({self.name})"


@dataclass
class BoundSymbol:
    sym: Symbol
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: list[Value]  # flat
    out_spec: Any = None  # pytree spec of the result; None means a single Value
    provenance: Provenance | None = None
    subsymbols: list[BoundSymbol] = field(default_factory=list)
    note: str = ""  # e.g. why an op is opaque

    @property
    def output(self) -> Value:
        return self.outputs[0]

    def inputs(self) -> list:
        seen, out = set(), []
        for v in values_in((self.args, self.kwargs)):
            if v.name not in seen:
                seen.add(v.name)
                out.append(v)
        return out

    def result(self):
        """The op's result structure with Values as leaves."""
        return self.outputs[0] if self.out_spec is None else pytree.tree_unflatten(self.outputs, self.out_spec)

    def replace(self, mapping: dict) -> BoundSymbol:
        """A copy with input and output Values renamed through `mapping` (name -> Value)."""
        sub = (lambda v: mapping.get(v.name, v)) if mapping else (lambda v: v)  # noqa: E731
        return BoundSymbol(self.sym, map_values(sub, self.args), map_values(sub, self.kwargs),
                           [sub(o) for o in self.outputs], self.out_spec, self.provenance,
                           [s.replace(mapping) for s in self.subsymbols], self.note)


@dataclass
class Trace:
    name: str
    inputs: list[Value]  # in call order
    bound_symbols: list[BoundSymbol]
    output: Any  # pytree of Values (and constants)
    stage: Stage = Stage.ACQUIRED
    signature: list[str] = field(default_factory=list)  # human-readable specialisation assumptions
    extra_globals: dict[str, Any] = field(default_factory=dict)  # name -> object the program refers to
    # (input Value, Value) for each input the call updates in place: the program copies the
    # second into the first at its end, so the caller sees the update as in eager
    writeback: list[tuple[Value, Value]] = field(default_factory=list)
    # index of a bound symbol -> the profiler range it runs in (fusionlens/executors/profiling.py; the
    # execution trace with CompileOptions.profile); the program calls PROFILE_RANGE(name)
    ranges: dict[int, str] = field(default_factory=dict)
    # names of values whose eager tensor did not require grad though grad was enabled (after
    # detach(), inside `with torch.no_grad()`): the autograd transform stops there, as eager
    frozen: frozenset[str] = frozenset()
    # the first `packed` inputs (None: none) arrive in one list, which the program empties once
    # it has named them (a backward program's saved tensors: it then holds the only reference
    # to each, and frees it after its last use)
    packed: int | None = None

    def __post_init__(self):
        self.stage = Stage(self.stage)  # a misspelt stage raises here

    def with_(self, stage: Stage, bound_symbols: list, output=None, rename: dict | None = None) -> Trace:
        """A trace of the same program with other ops; `rename` (name -> Value) renames what
        it returns and writes back (an op replaced by an earlier one's result)."""
        output = self.output if output is None else output
        writeback = list(self.writeback)
        if rename:
            output = map_values(lambda x: rename.get(x.name, x), output)
            writeback = [(dst, rename.get(src.name, src)) for dst, src in writeback]
        return Trace(self.name, self.inputs, bound_symbols, output, stage, self.signature,
                     dict(self.extra_globals), writeback, frozen=self.frozen, packed=self.packed)

    def results(self) -> list:
        """Every Value the program hands out: its result's and those it writes back."""
        return values_in(self.output) + [src for _, src in self.writeback]

    def python(self, nested: bool = False) -> str:
        return TracePrinter(self, nested).source()

    def globals(self) -> dict:
        """The objects the printed program names beyond torch, prims and math: opaque
        callables, region kernels, and the builder of a result it cannot write literally."""
        if printable(self.output):
            return dict(self.extra_globals)
        return {**self.extra_globals, OUTPUT_BUILDER: output_builder(self.output)}  # leaves in values_in order

    def python_callable(self) -> Callable:
        """Compile the printed program; calling it runs the trace."""
        source = self.python()
        namespace = program_globals(self.globals())
        exec(compile(source, f"<fusionlens {self.name}:{self.stage}>", "exec"), namespace)
        return namespace[self.name]


def external_inputs(bsyms) -> list:
    """The Values `bsyms` read but do not produce, in first-use order."""
    made = {o.name for b in bsyms for o in b.outputs}
    seen, out = set(), []
    for b in bsyms:
        for v in b.inputs():
            if v.name not in made and v.name not in seen:
                seen.add(v.name)
                out.append(v)
    return out


def distinct_lines(bsyms):
    """The provenance of each op on a user line not seen before, in order."""
    seen = set()
    for b in bsyms:
        p = b.provenance
        if p is not None and (p.file, p.line) not in seen:
            seen.add((p.file, p.line))
            yield p


# --- trace construction -------------------------------------------------------------------

class TraceContext:
    """Collects BoundSymbols while symbols are called on Values; names new values."""

    def __init__(self, names: NameGen, provenance: Provenance | None = None):
        self.names = names
        self.bound_symbols: list[BoundSymbol] = []
        self.provenance = provenance

    def new_value(self, like: torch.Tensor, device) -> Value:
        return Value(self.names.next(), like.shape, like.dtype, device)

    def bind(self, sym: Symbol, args: tuple, kwargs: dict):
        if sym.decomposition is not None:
            inner = TraceContext(self.names, self.provenance)
            with _use(inner):
                result = sym.decomposition(*args, **kwargs)
            if not inner.bound_symbols:  # the op is an alias of its input (reshape to the same shape)
                return result
            flat, spec = pytree.tree_flatten(result)
            single = isinstance(result, Value)
            bsym = BoundSymbol(sym, args, kwargs, [v for v in flat if isinstance(v, Value)],
                               None if single else spec, self.provenance, inner.bound_symbols)
            self.bound_symbols.append(bsym)
            return result
        metas = run_meta(sym, args, kwargs)
        device = infer_device(args, kwargs)
        flat, spec = pytree.tree_flatten(metas)
        outs = [self.new_value(m, device) for m in flat]
        single = isinstance(metas, torch.Tensor)
        bsym = BoundSymbol(sym, args, kwargs, outs, None if single else spec, self.provenance)
        self.bound_symbols.append(bsym)
        return bsym.result()


class NameGen:
    def __init__(self, prefix: str = "t", start: int = 0, taken=()):
        self.prefix, self.count, self.taken = prefix, start, set(taken)

    def next(self) -> str:
        while True:
            name = f"{self.prefix}{self.count}"
            self.count += 1
            if name not in self.taken:
                return name


# The context symbols record into while a trace is made (None: they run on real tensors). A
# ContextVar, not a module global: two threads (or tasks) tracing at once each see their own.
_CURRENT: contextvars.ContextVar[TraceContext | None] = contextvars.ContextVar("fusionlens_trace_context",
                                                                               default=None)
_current = _CURRENT.get


@contextlib.contextmanager
def _use(ctx: TraceContext):
    token = _CURRENT.set(ctx)
    try:
        yield ctx
    finally:
        _CURRENT.reset(token)


tracing = _use


def run_meta(sym: Symbol, args, kwargs):
    """Output metadata: the symbol run on meta tensors standing in for the Values."""
    margs, mkwargs = map_values(Value.meta, args), map_values(Value.meta, kwargs)
    if "device" in mkwargs and mkwargs["device"] is not None:
        mkwargs["device"] = "meta"
    if sym.meta is not None:
        return sym.meta(*margs, **mkwargs)
    return sym.impl(*margs, **mkwargs)


def infer_device(args, kwargs) -> torch.device:
    if kwargs.get("device") is not None:
        return torch.device(kwargs["device"])
    for v in values_in((args, kwargs)):
        if v.ndim > 0 or v.device.type != "cpu":
            return v.device
    vals = values_in((args, kwargs))
    return vals[0].device if vals else torch.device("cpu")


# --- the program's result -----------------------------------------------------------------

PROFILE_RANGE = "fusionlens_range"  # the global a profiled program enters around each region
OUTPUT_BUILDER = "fusionlens_output"  # the global a printed program calls to build its result
_LITERALS = (bool, int, float, str, type(None), torch.dtype, torch.device, torch.memory_format, slice,
             type(Ellipsis), torch.SymInt, torch.SymFloat, torch.SymBool)
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def printable(tree) -> bool:
    """Whether `format_arg` writes `tree` as Python that builds exactly this object: plain
    tuples, lists and dicts of Values and literals. Anything else (a namedtuple, a
    ModelOutput, a cache object) is rebuilt by `output_builder`."""
    if isinstance(tree, Value) or type(tree) in _LITERALS:
        return True
    if type(tree) in (tuple, list):
        return all(printable(x) for x in tree)
    if type(tree) is dict:
        return all(type(k) in (str, int) and printable(v) for k, v in tree.items())
    return False


def output_builder(template) -> Callable:
    """A function of the result's tensors (in `values_in(template)` order) that returns the
    result as eager returned it: the same types, rebuilt through pytree (the classes' own
    flatten/unflatten, e.g. a ModelOutput or a cache registered by its library), and the
    non-tensor objects themselves (held as constants, never named by a string)."""
    leaves, spec = pytree.tree_flatten(template)
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, Value)]

    def build(*tensors):
        out = list(leaves)
        for i, t in zip(slots, tensors):
            out[i] = t
        return pytree.tree_unflatten(out, spec)
    build.__qualname__ = f"build {type(template).__name__}"
    return build


def describe(tree) -> str:
    """A short description of a result's structure for the printed program's comment."""
    if isinstance(tree, Value):
        return tree.name
    if type(tree) in _LITERALS:
        return format_arg(tree)
    name = getattr(tree, "type_name", type(tree).__name__)  # an objects.ObjectTemplate: its object's class
    if isinstance(tree, dict):
        return f"{name}({', '.join(f'{k}={describe(v)}' for k, v in list(tree.items())[:8])}" + (
            ", ..." if len(tree) > 8 else "") + ")"
    if isinstance(tree, (tuple, list)):
        return f"{name}({', '.join(describe(v) for v in tree[:8])}" + (", ..." if len(tree) > 8 else "") + ")"
    inner = values_in(tree) if type(tree) not in _LITERALS else []
    return f"{name}({', '.join(v.name for v in inner)})" if inner else name


# --- printing -----------------------------------------------------------------------------

def program_globals(extra: dict | None = None) -> dict:
    """The namespace a printed program runs in (it imports `prims` itself, as printed)."""
    namespace = {"torch": torch, "operator": operator, "math": math, "inf": math.inf, "nan": math.nan}
    if extra:
        namespace.update(extra)
    return namespace


def format_arg(x) -> str:
    if isinstance(x, Value):
        return x.name
    if isinstance(x, _SYMBOLIC):
        from fusionlens.ir import symbols  # sympy: imported only by dynamic programs
        return symbols.source(x)
    if isinstance(x, (torch.dtype, torch.memory_format)):
        return str(x)
    if isinstance(x, torch.device):
        return f"torch.device({str(x)!r})"
    if isinstance(x, torch.Size):
        x = tuple(x)
    if isinstance(x, float):
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        if math.isnan(x):
            return "nan"
        return repr(x)
    if isinstance(x, tuple):
        inner = ", ".join(format_arg(e) for e in x)
        return f"({inner},)" if len(x) == 1 else f"({inner})"
    if isinstance(x, list):
        return "[" + ", ".join(format_arg(e) for e in x) + "]"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {format_arg(v)}" for k, v in x.items()) + "}"
    if isinstance(x, slice):
        return f"slice({format_arg(x.start)}, {format_arg(x.stop)}, {format_arg(x.step)})"
    if x is Ellipsis:
        return "..."
    named = (_NAMED.get() or {}).get(id(x))
    return named if named is not None else repr(x)


# id(object) -> the program global naming it, while a program is printed: a ContextVar, so a
# printer in another thread never names an object by this program's globals
_NAMED: contextvars.ContextVar[dict[int, str] | None] = contextvars.ContextVar("fusionlens_printed_globals",
                                                                              default=None)


def format_call(bsym: BoundSymbol) -> str:
    parts = [format_arg(a) for a in bsym.args]
    parts += [f"{k}={format_arg(v)}" for k, v in bsym.kwargs.items()]
    call = f"{bsym.sym.name}({', '.join(parts)})"
    if not bsym.outputs:
        return call
    if bsym.out_spec is None:
        lhs = bsym.outputs[0].name
    else:
        lhs = format_arg(pytree.tree_unflatten([v for v in bsym.outputs], bsym.out_spec))
        if lhs[:1] in "([" and lhs[-1:] in ")]":  # the outer pair only: (t0, (t1, t2)) stays nested
            lhs = lhs[1:-1].rstrip(",")
        lhs = lhs + "," if len(bsym.outputs) == 1 and not lhs.endswith(",") else lhs
    return f"{lhs} = {call}"


class TracePrinter:
    def __init__(self, trace: Trace, nested: bool):
        self.trace, self.nested = trace, nested
        self.lines: list[str] = []
        self.last_loc: tuple[str, int] | None = None  # the last source comment's (file, line)

    def source(self) -> str:
        token = _NAMED.set({id(obj): name for name, obj in self.trace.extra_globals.items()})
        try:
            return self._source()
        finally:
            _NAMED.reset(token)

    def _source(self) -> str:
        t = self.trace
        out = self.lines
        out += [f"# FusionLens trace · stage: {t.stage}", "import torch", "import operator",
                "from fusionlens.ops import prims", "from math import inf, nan",
                "from fusionlens.ir.program_calls import no_grad, write_back", "", "", "@no_grad"]
        names = [v.name for v in t.inputs]
        if t.packed is not None:
            packed = "saved_for_backward"
            while packed in names:
                packed = "_" + packed
            names[:t.packed] = [packed]
        out.append(f"def {t.name}({', '.join(names)}):")
        for v in t.inputs:
            shown = v.role not in (ValueRole.COMPUTED, ValueRole.INPUT)
            out.append(f"  # {v.name}: {v.type_str()}" + (f"  ({v.role})" if shown else ""))
        if t.packed:
            out.append(f"  {', '.join(v.name for v in t.inputs[:t.packed])}, = {packed}")
            out.append(f"  {packed}.clear()  # the caller's list: each tensor lives to its last use here")
        out.extend(f"  {line}" for line in symbol_bindings(t.inputs, t.bound_symbols, SIZES in t.extra_globals))
        frees = self.frees() if t.stage is Stage.EXECUTION else {}
        for i, bsym in enumerate(t.bound_symbols):
            if i in t.ranges:
                self.last_loc = None  # the source comment goes inside the block, with its op
                out.append(f"  with {PROFILE_RANGE}({t.ranges[i]!r}):")
                self.emit(bsym, "    ")
            else:
                self.emit(bsym, "  ")
            if i in frees:
                out.append(f"  del {', '.join(frees[i])}")
        written = {}
        made_in_place = {o.name: b for b in t.bound_symbols for o in b.outputs if OpTag.IN_PLACE in b.sym.tags}
        for dst, src in t.writeback:
            end = src  # a chain of ops that wrote into their first operand: the input itself
            while end.name in made_in_place:
                end = made_in_place[end.name].args[0]
            how = "nothing to copy" if end.name == dst.name else "written back"
            out.append(f"  write_back({dst.name}, {src.name})  # {dst.name} was updated in place: {how}")
            written[src.name] = dst
        # a result that is an updated input is that input, as in eager
        result = map_values(lambda x: written.get(x.name, x), t.output)
        if printable(result):
            out.append(f"  return {format_arg(result)}")
        else:
            values = ", ".join(v.name for v in values_in(result))
            out.append(f"  return {OUTPUT_BUILDER}({values})  # {describe(result)}")
        return "\n".join(out) + "\n"

    def frees(self) -> dict:
        """Op index -> the names it reads or makes for the last time. A program that runs
        deletes each value after its last use, as eager frees a tensor when its last reference
        goes: a name held to the return keeps every intermediate alive to the end."""
        t = self.trace
        later = {v.name for v in t.results()} | {dst.name for dst, _ in t.writeback}
        frees = {}
        for i in range(len(t.bound_symbols) - 1, -1, -1):
            b = t.bound_symbols[i]
            last = [n for n in dict.fromkeys([v.name for v in b.inputs()] + [o.name for o in b.outputs])
                    if n not in later]
            later.update(last)
            if last:
                frees[i] = last
        return frees

    def emit(self, bsym: BoundSymbol, indent: str, nested_level: int = 0):
        p = bsym.provenance
        if nested_level == 0 and p is not None and (p.file, p.line) != self.last_loc:
            self.last_loc = (p.file, p.line)
            self.lines.append(f"{indent}# {p.source_comment()}")
        types = "; ".join(f"{o.name}: {o.type_str()}" for o in bsym.outputs)
        comment = f"  # {types}" if types else ""
        if bsym.note and nested_level == 0:
            comment += "  (" + " ".join(bsym.note.split()) + ")"
        text = format_call(bsym) + comment
        if nested_level:
            self.lines.append(f"{indent}{'  ' * nested_level}# {text}")
        else:
            self.lines.append(f"{indent}{text}")
        if self.nested:
            for sub in bsym.subsymbols:
                self.emit(sub, indent, nested_level + 1)
