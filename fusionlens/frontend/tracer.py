"""Frontend: trace a real call into a torch-level Trace, every op with its user provenance.

The callable runs for real on the example inputs under a TorchFunctionMode that records
each tensor operation it sees (torch functions, Tensor methods and operators,
torch.nn.functional), mapping tensor objects to SSA Values. Python control flow therefore
specialises on the example inputs; the trace's signature says what it assumed.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Sequence
from types import CodeType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from fusionlens.frontend import aliasing, captured, intra_op, objects, overlap, recorder as recorder_api, \
    value_guards, views
from fusionlens.frontend.notes import Note, Severity
from fusionlens.ir import provenance, torch_compat
from fusionlens.ir.program_calls import write_back
# the call's arguments (fusionlens/frontend/arguments.py); target_name and user_tensors are used through frontend too
from fusionlens.frontend.arguments import describe_input, parameter_names, sanitize as _sanitize, signature_names, \
    target_name, user_tensors  # noqa: F401
from fusionlens.ir.trace import (OUTPUT_BUILDER, BoundSymbol, NameGen, Symbol, SymbolKind, Trace, Value,
                                 dtype_name, printable)
from fusionlens.ir.vocabulary import Stage, ValueRole
from fusionlens.ops import torch_ops
from fusionlens.ops.torch_ops.fallbacks import DynamicShapes, shape_checked, shapes_text, static_shapes
from fusionlens.report.schema import DiagnosticCode

MAX_OPS = 100_000  # a trace this long almost surely comes from a loop that never ends



class TraceError(Exception):
    """Tracing failed; `file`/`line` point at the user's source."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None):
        super().__init__(message)
        self.message, self.file, self.line = message, file, line


class _Recorder(TorchFunctionMode):
    def __init__(self, tracer: Tracer):
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.tracer.inside_collective or not self.tracer.recording:  # torch.distributed's own code
            return func(*args, **kwargs)
        seen = self.tracer.dynamic.count
        self.tracer.views.before(self.tracer, func, args, kwargs)
        self.tracer.captured.before(func, args, kwargs)  # a global it writes: copied first
        with intra_op.one_thread(self.tracer.replay is None and intra_op.thread_invariant(intra_op.callable_name(func))
                                 and intra_op.small(pytree.tree_leaves((args, kwargs)))):
            out = value_guards.call(self.tracer, func, args, kwargs)  # a fake tensor's value: the real trace's
        if getattr(func, "__name__", "") == "__setitem__":  # mutates args[0], returns None
            self.tracer.record(func, args, kwargs, args[0])
        elif any(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(out)):
            if self.tracer.factors:  # a BatchNorm's factor read from its buffer (value_guards.factor_call)
                func, args, kwargs = value_guards.factor_call(self.tracer, func, args, kwargs)
            self.tracer.record(func, args, kwargs, out, dynamic=self.tracer.dynamic.count != seen)
        else:
            if getattr(func, "__name__", "") in value_guards.READS:  # a branch on a value: a guard
                value_guards.note(self.tracer, func, args, kwargs, out)
        return out


class Tracer(recorder_api.Recording):
    def __init__(self, name: str):
        self.name = name
        self.names = NameGen("t")
        self.values: dict[int, Value] = {}  # id(tensor) -> Value
        self.alive: list[torch.Tensor] = []  # keeps traced tensors alive so their ids stay unique
        self.inputs: list[Value] = []
        self.inputs_by_id: dict[int, Value] = {}  # id(tensor) -> its input Value (values[] moves on when it is updated)
        self.known: dict[int, tuple[ValueRole, str]] = {}  # id(tensor) -> (role, name) for parameters and buffers
        self.constants: dict[str, torch.Tensor] = {}  # input name -> tensor, for parameters/buffers/captured
        self.bound_symbols: list[BoundSymbol] = []
        self.notes: list[Note] = []
        self.extra_globals: dict[str, Any] = {}
        self.named: set[int] = set()  # ids of the argument objects named in extra_globals
        # the program's own globals
        self.taken: set[str] = {"torch", "prims", "operator", "math", "inf", "nan", OUTPUT_BUILDER, "setitem"}
        self.eager_only: str | None = None  # why calls of this signature must run eagerly
        self.updated_at: dict[int, provenance.Provenance | None] = {}  # id(tensor) -> where it was first updated
        self.stop: CodeType | None = None  # the code object of `trace`: frames beyond it are not the traced call's
        self.call: provenance.Provenance | None = None  # the user's call of what is traced
        self.frozen: set[str] = set()  # names of op outputs eager's autograd does not track (Trace.frozen)
        self.grad = torch.is_grad_enabled()  # the caller's grad mode, which the call is traced in
        self.dynamic = DynamicShapes()  # counts the aten ops with a data-dependent output shape
        self.layout_noted = False  # whether a note says that sparse tensors' ops run whole
        self.shape_checked_names: list[str] = []  # the values whose shape the program checks at each call
        self.views = views.Views()  # how traced views were made, to follow in-place updates through them
        self.inside_collective = False  # a torch.distributed collective runs (collectives.recording)
        self.recording = True  # False: the call runs eagerly (a wrapping FusionLens cannot compile)
        self.hooks: Sequence[recorder_api.TraceHook] = ()  # the wrappings' (trace's `hooks`)
        self.reads: list = []  # value_guards.Read: branches on tensor values; replay: a fake trace's values
        self.factors: list = []  # value_guards._Factor: reads a BatchNorm's F.batch_norm call may take
        self.replay: list | None = None
        self.captured = captured.Captured(self)  # tensors reached outside the arguments (globals)

    def where(self) -> provenance.Provenance | None:
        """The provenance of the op being recorded now."""
        return provenance.capture(sys._getframe(1), self.stop, self.call)

    # --- values ---------------------------------------------------------------------------

    def _unique(self, base: str) -> str:
        name, i = base, 1  # (an input bound mid-trace, a global named t0, must not take a value's name)
        while name in self.taken or (name[:1] == "t" and name[1:].isdigit() and int(name[1:]) < self.names.count):
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        self.names.taken.add(name)
        return name

    def bind_input(self, tensor: torch.Tensor, name: str, role: ValueRole) -> Value:
        v = Value(self._unique(name), tensor.shape, tensor.dtype, tensor.device, role)
        self.values[id(tensor)] = v
        self.inputs_by_id[id(tensor)] = v
        self.alive.append(tensor)
        self.inputs.append(v)
        if role is not ValueRole.INPUT:
            self.constants[v.name] = tensor
        return v

    def to_value(self, x):
        if not isinstance(x, torch.Tensor):
            return x
        v = self.values.get(id(x)) if id(x) not in self.views.links else self.views.current(self, x)
        if v is not None:
            return v
        role, name = self.known.get(id(x), (ValueRole.CONST, "c"))
        if role is ValueRole.CONST:  # named as the function reaches it (captured.label): W, self_cache
            name, read = self.captured.label(x)
            v = self.bind_input(x, name, role)
            self.notes.append(Note(Severity.INFORMATION, f"captured tensor constant {v.name} ({v.type_str()}, "
                                   f"{read}): it is an input of the compiled program, not specialised",
                                   self.where(), DiagnosticCode.CAPTURED_CONSTANT))
            return v
        return self.bind_input(x, name, role)

    def argument(self, x):
        """An op's argument in the trace: a tensor's Value; an object the printer cannot write
        (a loss's distance module) named as a program global; anything else as it is."""
        if isinstance(x, torch.Tensor):
            return self.to_value(x)
        if not printable(x) and id(x) not in self.named:
            self.named.add(id(x))
            self.extra_globals[self._unique(f"k_{_sanitize(type(x).__name__).lower()}")] = x
        return x

    def new_output(self, t: torch.Tensor) -> Value:
        v = Value(self.names.next(), t.shape, t.dtype, t.device)
        self.values[id(t)] = v  # rebinding: an op that returns (or mutates) a tensor names it anew
        self.alive.append(t)
        return v

    # --- recording ------------------------------------------------------------------------

    def record(self, func, args, kwargs, out, dynamic: bool = False):
        if len(self.bound_symbols) >= MAX_OPS:
            where = self.where()
            raise TraceError(f"the trace passed {MAX_OPS} ops: does this code loop forever?",
                             where.file if where else None, where.line if where else None)
        where = self.where()
        sym, args2, kwargs2, note = self.symbol_for(func, args, kwargs, where)
        flat, whole = pytree.tree_flatten(out)
        layouts = {x.layout for x in pytree.tree_leaves((args, kwargs, flat)) if isinstance(x, torch.Tensor)}
        if layouts - {torch.strided}:  # sparse: torch's kernels only, so the program has its torch call
            sym, note = self.whole(sym, min(str(x).removeprefix("torch.") for x in layouts - {torch.strided}), where)
        vargs, vkwargs = pytree.tree_map(self.argument, (args2, kwargs2))
        spec: pytree.TreeSpec | None = whole
        outs = [self.new_output(t) for t in flat if isinstance(t, torch.Tensor)]
        single = isinstance(out, torch.Tensor)
        if not single and len(outs) != len(flat):  # (attn_output, None): call it for its tensors only
            sym = self.tensors_only(sym)
            spec = None if len(outs) == 1 else pytree.tree_flatten(tuple(outs))[1]
            single = len(outs) == 1
        if dynamic and (torch_ops.lookup(func) is None  # a user's function is not run again on meta tensors
                        or static_shapes(func, args, kwargs) != [tuple(v.shape) for v in outs]):
            sym, note = self.shape_checked(sym, outs, where, note)
        leaves = pytree.tree_leaves((args, kwargs))
        if self.grad and any(isinstance(a, torch.Tensor) and a.requires_grad for a in leaves):
            # where eager's autograd stops though an input requires grad (detach, no_grad blocks)
            self.frozen.update(v.name for v, t in zip(outs, (t for t in flat if isinstance(t, torch.Tensor)))
                               if not t.requires_grad and _differentiable(t))
        self.bound_symbols.append(BoundSymbol(sym, vargs, vkwargs, outs, None if single else spec, where,
                                              note=note))
        self.views.recorded(self, func, args, kwargs, flat)

    def shape_checked(self, sym: Symbol, outs: list[Value], where, note: str) -> tuple[Symbol, str]:
        """`sym` for an op whose results' shapes depend on the data (fallbacks.shape_checked), and
        its note: a decomposition's own reason why it does not decompose, where it has one."""
        shapes, names = [tuple(v.shape) for v in outs], ", ".join(v.name for v in outs)
        self.shape_checked_names += [v.name for v in outs]
        self.notes.append(Note(Severity.INFORMATION, f"the shape of {names} depends on the data ({shapes_text(shapes)} "
                               "here): the compiled program checks it at each call, and a call where it "
                               "differs runs eagerly", where, DiagnosticCode.DATA_DEPENDENT))
        printed = self._unique(f"{_sanitize(sym.name.rsplit('.', 1)[-1])}_shape_checked")
        checked = shape_checked(sym, printed, shapes, names, where)
        self.extra_globals[printed] = checked.impl
        why = "its shape depends on the data: it runs as one torch call, its shape checked on every call"
        return checked, note or ("" if sym.decomposition else why)

    def whole(self, sym: Symbol, layout: str, where) -> tuple[Symbol, str]:
        """`sym` as one torch call, never decomposed (prims and fusion executors take strided
        tensors only), and its note; the first such op is also a diagnostic at its line."""
        if not self.layout_noted:
            self.layout_noted = True
            self.notes.append(Note(Severity.INFORMATION, f"an operand has the {layout} layout: ops on tensors of other "
                                   "layouts than strided run as torch calls, never fused", where,
                                   DiagnosticCode.EXECUTOR))
        if sym.decomposition is None and sym.kind is not SymbolKind.OPAQUE:  # a library call runs whole anyway
            return sym, ""
        return (Symbol(sym.name, sym.impl, kind=sym.kind, tags=sym.tags),
                f"an operand has the {layout} layout; it runs as one torch call")

    def symbol_for(self, func, args, kwargs, where):
        """The Symbol for a torch call, with its arguments in that symbol's convention."""
        name = getattr(func, "__name__", "")
        if name == "__get__":  # a property such as Tensor.T or Tensor.mT
            prop = getattr(getattr(func, "__self__", None), "__name__", "")
            getter = _PROPERTIES.get(prop)
            if getter is not None:
                return getter[0], getter[1](args), {}, ""
            return self.opaque(lambda x, _p=prop: getattr(x, _p), f"Tensor.{prop}", args, kwargs, where)
        if name == "__setitem__":
            if args and isinstance(args[0], torch.Tensor):
                self.view_mutation(args[0], name, where, args)
            sym = torch_ops.SYMBOLS["setitem"]  # x[key] = value: the functional setitem, a new value
            self.extra_globals[sym.name] = sym.impl
            return sym, args, kwargs, ""
        if func is torch.Tensor.view and len(args) == 2 and isinstance(args[1], torch.dtype):
            return self.opaque(func, name, args, kwargs, where, "a view as another dtype is not decomposed")
        entry = torch_ops.lookup(func)
        if entry is None and (functional := views.functional_name(name)):
            owner = torch.Tensor if hasattr(torch.Tensor, name) else torch
            fn = getattr(owner, functional, None)
            # x.uniform_(), x.zero_(), x.resize_(n): no functional method, a registered functional form
            entry = torch_ops.lookup_inplace(func) or (torch_ops.lookup(fn) if fn is not None else None)
            if args and isinstance(args[0], torch.Tensor):
                self.view_mutation(args[0], name, where, args)
            if entry is None and not hasattr(torch.Tensor, name):  # a function such as nn.init.constant_
                return self.opaque(views.inplace_function_wrapper(func), name, args, kwargs, where, called=func)
            if entry is None:
                return self.opaque(views.inplace_wrapper(name), f"Tensor.{name}", args, kwargs, where, called=func)
        if entry is None:
            return self.opaque(func, name, args, kwargs, where)
        sym, adapter = entry
        if views.functional_name(name) and (target := torch_ops.kept_dtype(args, kwargs)) is not None:
            # t.add_(u) with u wider: eager computes in the promoted dtype, then casts back into t
            sym = torch_ops.cast_result(sym, target, self._unique(f"{_sanitize(name)}_as_{dtype_name(target)}"))
            self.extra_globals[sym.name] = sym.impl
        if adapter is not None:
            args, kwargs = adapter(args, kwargs)
        if kwargs.get("inplace") is True and args and isinstance(args[0], torch.Tensor):  # F.relu(x, inplace=True)
            self.view_mutation(args[0], name, where)
            kwargs = {**kwargs, "inplace": False}  # recorded as the functional op it stands for
        return sym, args, _drop_defaults(sym, kwargs), ""

    def view_mutation(self, target: torch.Tensor, name: str, where, args: tuple = ()) -> None:
        """The call being recorded updates `target` in place: views.py functionalises it, through
        the views it was made from, once it is recorded (and raises eager's error where eager
        refuses it)."""
        self.updated_at.setdefault(id(target), where)
        self.views.mutating(self, target, name, where, args)

    def tensors_only(self, sym: Symbol) -> Symbol:
        """`sym` as a call that returns only the tensors of its result, in order (one alone):
        what the trace binds when the result also holds None or other non-tensors."""
        def only(result):
            leaves = [x for x in pytree.tree_leaves(result) if isinstance(x, (torch.Tensor, Value))]
            return leaves[0] if len(leaves) == 1 else tuple(leaves)

        @functools.wraps(sym.impl)  # its signature is the op's (torch_rules.draws_dropout reads it)
        def impl(*args, **kwargs):
            return only(sym.impl(*args, **kwargs))
        printed = self._unique(f"{_sanitize(sym.name.rsplit('.', 1)[-1])}_tensors")
        self.extra_globals[printed] = impl
        decomposition, decompose = None, sym.decomposition
        if decompose is not None:
            decomposition = functools.wraps(decompose)(lambda *a, **k: only(decompose(*a, **k)))
        return Symbol(printed, impl, kind=sym.kind, decomposition=decomposition, tags=sym.tags, flops=sym.flops)

    # the Recorder interface (frontend/recorder.py) the wrappings record through is Recording's
    def _refused(self, message: str) -> None:
        """The signature runs eagerly: a wrapping cannot record what the call did (`message`)."""
        self.eager_only = message
        self.notes.append(Note(Severity.WARNING, message, self.where(), DiagnosticCode.COLLECTIVE))

    def opaque(self, func, label, args, kwargs, where, why=None, called=None):
        """A call with no FusionLens symbol, run as one torch call; `called` is the torch
        callable the user called when `func` wraps it (an in-place method's functional form):
        what its tags (random or not) are declared for."""
        printed = torch_ops.qualified_name(func)
        if printed is None:
            printed = self._unique(f"op_{_sanitize(label)}")
            self.extra_globals[printed] = func
        sym = Symbol(printed, func, kind=SymbolKind.OPAQUE, tags=torch_ops.fallback_tags(called or func))
        reason = f"{why or f'FusionLens has no symbol for {printed}'}; it runs as one torch call"
        return sym, args, kwargs, reason


def _is_default(value, default) -> bool:
    plain = (bool, int, float, str)
    return value is default or (type(value) in plain and type(value) is type(default) and value == default)


def _drop_defaults(sym, kwargs: dict) -> dict:
    """Keyword arguments the caller left at their defaults (torch.nn.functional passes them
    all on) only clutter the trace."""
    if sym.decomposition is None or not kwargs:
        return kwargs
    params = sym.decomposition_signature.parameters
    dropped = {k for k, v in kwargs.items() if k in params and _is_default(v, params[k].default)}
    # a None stays beside kept keywords: torch.sum(x, dim=None, keepdim=True) has no form without dim
    kept_any = len(dropped) < len(kwargs)
    return {k: v for k, v in kwargs.items() if k not in dropped or (v is None and kept_any)}


_PROPERTIES = {
    "T": (torch_ops.SYMBOLS["torch.permute"], lambda a: (a[0], tuple(reversed(range(a[0].ndim))))),
    "mT": (torch_ops.SYMBOLS["torch.transpose"], lambda a: (a[0], -2, -1) if a[0].ndim else (a[0], 0, 0)),
    "data": (torch_ops.SYMBOLS["torch.Tensor.detach"], lambda a: (a[0],)),
    "mH": (torch_ops.SYMBOLS["torch.adjoint"], lambda a: (a[0],)),  # the conjugate transpose
    "H": (torch_ops.SYMBOLS["torch.adjoint"], lambda a: (a[0],)),  # (of a matrix: x.H is only for 2-d)
}


class TraceResult:
    def __init__(self, trace: Trace, eager_output: Any, constants: dict, notes: list,
                 eager_only: str | None = None, mutated: dict | None = None,
                 originals: dict | None = None, copies: tuple = (), states: list | None = None,
                 passed: list | None = None):
        self.trace = trace
        self.eager_output = eager_output
        self.constants = constants  # input name -> tensor (params, buffers, captured constants)
        self.notes = notes
        self.eager_only = eager_only  # why this signature cannot be compiled faithfully (jit runs eagerly)
        self.mutated = mutated or {}  # input name -> its value after the eager call (updated in place)
        self.originals = originals or {}  # id(copy traced on) -> the caller's tensor or the module's buffer
        self.copies = copies  # the copies themselves (their ids stay theirs while they live)
        # objects passed in holding tensors (a cache): the program returns (result, their changes)
        self.states = states or []
        self.passed = passed or []  # every object passed in (the program's result refers to them: PassedRef)
        self.objects_passed = len(self.passed)  # kept by release()
        self.reads: list = []  # value_guards.Read: the branches the call took on tensor values
        self.rerun = False  # the traced run is not the call's (aliasing.py): a first call run eagerly runs anew
        self.hooks: Sequence[recorder_api.TraceHook] = ()  # the wrappings' it was traced with (a retrace's too)

    def release(self) -> None:
        """Drop what only compiling and the first call need (eager's result, the copies traced
        on, the caller's objects and tensors): a jit entry must not keep the first call's
        tensors alive for as long as it lives (a KV cache, a batch)."""
        self.eager_output, self.originals, self.copies = None, {}, ()
        self.mutated = dict.fromkeys(self.mutated)  # the names stay: they say what the call updates
        self.states, self.passed = [object()] * len(self.states), []  # how many, not which

    def as_the_call(self):
        """The traced run as the caller's own call: the copies' updates written into the real
        tensors and buffers, the result with each copy replaced by its original."""
        by_id = {}
        for copy_ in self.copies:
            original = self.originals[id(copy_)]
            if not _same_values(copy_, original):
                leaf = original.is_leaf and original.requires_grad  # updated under no_grad in the call
                with torch.no_grad() if leaf else contextlib.nullcontext():
                    write_back(original, copy_)  # (an expanded input: each location once)
            by_id[id(copy_)] = original
        result = pytree.tree_map(lambda x: by_id.get(id(x), x) if isinstance(x, torch.Tensor) else x,
                                 self.eager_output)
        if self.states:
            result, changes = result
            objects.apply_all(self.states, changes)
        return result


def trace(fn, args=(), kwargs=None, name: str | None = None, clone=None, replay=None,
          hooks: Sequence[recorder_api.TraceHook] = ()) -> TraceResult:
    """Run `fn(*args, **kwargs)` once, recording it. Errors in user code raise TraceError.
    `hooks`: what the parallel wrappings add to tracing (the driver's; they record through the
    Recorder interface, recorder.py).
    `clone`: what the call runs on in place of each of the caller's tensors (a copy, by default;
    fusionlens/frontend/dynamic.py's fake tensors with symbolic sizes); `replay`: the values a
    fake tensor's reads return ([(name, value)], the real trace's, value_guards.call)."""
    kwargs = kwargs or {}
    tracer = Tracer(_sanitize(name) if name else target_name(fn))  # the program's def: an identifier
    tracer.stop = sys._getframe(0).f_code
    tracer.call = provenance.caller(sys._getframe(1))
    tracer.replay = replay
    # Trace on copies of the caller's tensors and of the module's buffers: an in-place update
    # in `fn` must not change them (the program writes it back when it runs; eager's final
    # values are what its check compares with).
    tracer.hooks = hooks
    why = next(filter(None, (hook.refuses(fn, args, kwargs) for hook in hooks)), None)
    if why is not None:  # records nothing: eager calls only
        tracer.eager_only, tracer.recording = why, False
        tracer.notes.append(Note(Severity.WARNING, why, tracer.call, DiagnosticCode.COLLECTIVE))
    # inputs that share memory with one another are traced on copies that share it alike (aliasing.py)
    aliased = tracer.views.aliased = aliasing.Aliased(fn, args, kwargs, overlap.exact_copy if clone is None else None,
                                                      tracer)
    with _buffer_copies(fn, aliased.copies) as originals:
        tracer.known = parameter_names(fn)
        result = _trace(tracer, fn, args, kwargs, originals, aliased.clone(clone or overlap.exact_copy))
    result.reads, result.hooks, result.rerun = tracer.reads, hooks, aliased.rerun
    return result


def _trace(tracer: Tracer, fn, args, kwargs, originals: dict, clone) -> TraceResult:
    copies: dict = {}
    def copy(x):
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) not in copies:
            copies[id(x)] = clone(x)
            originals[id(copies[id(x)])] = x
        return copies[id(x)]
    args, kwargs = pytree.tree_map(copy, (tuple(args), dict(kwargs)))
    states = objects.PassedStates((args, kwargs), copy)  # a cache passed in: its tensors are inputs too
    signature = []
    for pname, value in signature_names(fn, args, kwargs):
        leaves = pytree.tree_leaves(value)
        for i, leaf in enumerate(leaves):
            label = pname if len(leaves) == 1 and leaf is value else f"{pname}_{i}"
            if isinstance(leaf, torch.Tensor):
                tracer.bind_input(leaf, _sanitize(label), ValueRole.INPUT)
            signature.append(describe_input(label, leaf))
    for label, tensor in states.tensors():
        if id(tensor) not in tracer.inputs_by_id:
            tracer.bind_input(tensor, _sanitize(label), ValueRole.INPUT)
            signature.append(describe_input(label, tensor))
    user_inputs = list(tracer.inputs)
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    state = list(module.parameters()) + list(module.buffers()) if isinstance(module, torch.nn.Module) else []
    versions = {id(t): t._version for t in tracer.alive + state}
    try:
        # in the caller's grad mode, as eager runs it: user code that asks torch.is_grad_enabled()
        # or x.requires_grad sees what eager sees, and what autograd would not track is known
        with _Recorder(tracer), tracer.dynamic, _hooked(tracer), tracer.captured.module_paths(fn, originals):
            out = fn(*args, **kwargs)
    except TraceError:
        raise
    except Exception as e:
        file, line = provenance.user_location(e)
        raise TraceError(f"{type(e).__name__}: {e}", file, line) from e
    output = pytree.tree_map(tracer.to_value, out)
    # objects (no pytree node) holding tensors the call computed: taken apart to be rebuilt,
    # unless the caller passed them in (the call updated the caller's object: eager only)
    passed = {id(x) for x in pytree.tree_leaves((args, kwargs)) if not isinstance(x, torch.Tensor)}
    computed = lambda t: id(t) in tracer.values and tracer.values[id(t)].role is ValueRole.COMPUTED  # noqa: E731
    output = pytree.tree_map(lambda leaf: leaf if isinstance(leaf, Value) else objects.template(
        leaf, tracer.to_value, computed, passed), output)
    output = objects.refer_to_passed(output, states.objects)  # the call's own object, at each call
    changes = states.changes(lambda x: tracer.to_value(x) if isinstance(x, torch.Tensor) else
                             objects.template(x, tracer.to_value, lambda t: True, set()))
    if any(changes):  # what the call left in objects passed in is part of the result, the program's and eager's
        output, out = (output, changes), (out, states.changes(lambda x: x))
    states.restore()
    if not any(isinstance(leaf, Value) for leaf in pytree.tree_leaves(output)):
        tracer.notes.append(Note(Severity.WARNING, f"{tracer.name} returned {type(out).__name__} and no tensor: "
                                 "there is nothing to compile", None, DiagnosticCode.NOTHING_TO_COMPILE))
    # what is left holding computed tensors could not be templated (passed in, or no attributes)
    hidden = [type(leaf).__name__ for leaf in pytree.tree_leaves(output) if not isinstance(leaf, Value)
              and objects.template(leaf, lambda t: None, computed, set()) is not leaf]
    if hidden:
        tracer.notes.append(Note(Severity.WARNING, f"the result holds computed tensors inside {', '.join(hidden)}, "
                                 "which FusionLens cannot rebuild (an object the caller passed in, or one "
                                 "without attributes to set): compiled calls with this signature run eagerly",
                                 None, DiagnosticCode.HIDDEN_TENSORS))
    for v in tracer.inputs:
        if v not in user_inputs:
            signature.append(describe_input(v.name, tracer.constants[v.name]))
    writeback, mutated = _mutations(tracer, versions | tracer.captured.changed(), originals)
    inside = sorted(set(mutated) - {v.name for v, _ in writeback})  # updated by a library call, as it runs
    if tracer.shape_checked_names and inside and tracer.eager_only is None:
        tracer.eager_only = (f"{inside[0]} is updated in place inside a torch call, and a shape the program checks "
                             "depends on the data: a call where it differs could not rerun eagerly without "
                             "updating it twice, so calls with this signature run eagerly")
        tracer.notes.append(Note(Severity.WARNING, tracer.eager_only, None, DiagnosticCode.DATA_DEPENDENT))
    t = Trace(tracer.name, tracer.inputs, tracer.bound_symbols, output, Stage.ACQUIRED, signature,
              tracer.extra_globals, writeback, frozen=frozenset(tracer.frozen))
    eager_only = tracer.eager_only or (
        "the result holds tensors FusionLens cannot take apart" if hidden else None)
    constants = {k: originals.get(id(x), x) for k, x in tracer.constants.items()}  # the module's own buffers
    alive_copies = tuple(x for x in tracer.alive if id(x) in originals)
    return TraceResult(t, out, constants, tracer.notes, eager_only=eager_only, mutated=mutated,
                       originals=originals, copies=tuple({id(x): x for x in alive_copies}.values()),
                       states=states.objects if any(changes) else [], passed=states.objects)


def _mutations(tracer: Tracer, versions: dict, originals: dict) -> tuple:
    """(write-back pairs (input Value, its final Value), {input name: eager's final value}) of
    the trace inputs the call updated in place. An update the trace recorded (x.add_(y),
    x[i] = v, through views: views.py) is written back by the program; one inside a library call
    (batch_norm's running statistics) happens again when the program runs that call on the real
    tensor. Inputs and buffers were copies: a copy that differs from its original was updated
    (library kernels write without bumping the version counter); a parameter was updated if its
    version moved, and is put back as it was (views.Views.restore) or the call runs eagerly."""
    writeback, mutated, where, params = [], {}, {}, []
    for t in {id(t): t for t in tracer.alive}.values():
        v = tracer.inputs_by_id.get(id(t))
        if v is None or id(t) not in versions:
            continue
        original = originals.get(id(t))
        if id(t) not in tracer.views.updated and versions[id(t)] == t._version and (
                original is None or _same_values(t, original)):
            continue
        final = tracer.values.get(id(t))
        if final is not None and final is not v:
            writeback.append((v, final))
            where[v.name] = tracer.updated_at.get(id(t))
        mutated[v.name] = overlap.exact_copy(t.detach())
        params += [(v, t)] if v.role is ValueRole.PARAM else []
    if (why := tracer.views.eager_because(originals)) is not None and tracer.eager_only is None:
        tracer.eager_only, at = why
        tracer.notes.append(Note(Severity.WARNING, tracer.eager_only, at, DiagnosticCode.INPLACE_VIEW))
    if params and not tracer.views.restore(tracer, [t for _, t in params], originals) and tracer.eager_only is None:
        tracer.eager_only = (f"the call updates the parameter {params[0][0].name} in place: calls with this "
                             "signature run eagerly")
        tracer.notes.append(Note(Severity.WARNING, tracer.eager_only, None, DiagnosticCode.INPLACE_PARAMETER))
    tracer.captured.finish(writeback, mutated)  # a global it updated: put back, written by the program
    for v, final in writeback:
        tracer.notes.append(Note(Severity.INFORMATION, f"{v.name} is updated in place: the compiled program writes "
                                 f"{final.name} back into it, as eager does", where[v.name], DiagnosticCode.WRITEBACK))
    return writeback, mutated


@contextlib.contextmanager
def _hooked(tracer: Tracer):
    """The tracer is the current recorder, and each hook's recording is active."""
    with recorder_api.active(tracer), contextlib.ExitStack() as stack:
        for hook in tracer.hooks:
            stack.enter_context(hook.recording(tracer))
        yield


def _differentiable(t: torch.Tensor) -> bool:
    return t.dtype.is_floating_point or t.dtype.is_complex


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    if torch_compat.is_fake(a) or torch_compat.is_fake(b) or a.is_meta or b.is_meta:
        return True  # no values (a dynamic trace, a plan's meta trace): version counters tell updates
    if a.shape != b.shape or a.dtype != b.dtype or a.layout != b.layout:
        return False
    if a.layout != torch.strided:
        a, b = a.to_dense(), b.to_dense()
    if torch_compat.plainly_equal(a, b):  # one op, where the check below runs six
        return True
    same = a == b
    if a.dtype.is_floating_point or a.dtype.is_complex:
        same |= a.isnan() & b.isnan()
    return bool(same.all())


@contextlib.contextmanager
def _buffer_copies(fn, premade: dict):
    """While tracing, a module's buffers are copies (running statistics updated in place must
    not change the real ones); yields {id(copy): the real buffer}."""
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    originals: dict = {}
    swapped = []
    if isinstance(module, torch.nn.Module):
        copies: dict = {}
        for m in module.modules():
            for key, b in list(m._buffers.items()):
                if b is not None:
                    c = copies.setdefault(id(b), premade[id(b)] if id(b) in premade else overlap.exact_copy(b))
                    originals[id(c)] = b
                    swapped.append((m, key, b))
                    m._buffers[key] = c
    try:
        yield originals
    finally:
        for m, key, b in swapped:
            m._buffers[key] = b
