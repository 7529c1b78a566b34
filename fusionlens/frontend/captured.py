"""Tensors a traced call reaches that are not its arguments: module globals, closure cells,
attributes of objects reached through them (a global model's buffers, a cache held in a global
dict), class attributes. The tracer binds each as an input of the program (a captured constant,
role const; a global module's buffer, role buffer), so the program reads its values at each
call, never the traced ones.

As torch.compile does (dynamo lifts a global it reads to a graph input guarded by identity, and
applies a mutation of it after the graph runs):

- an in-place update of one is traced, then undone (`Captured`): the tensor is put back from a
  copy taken just before the first op that writes it, and the program writes the update back
  into it when it runs, so the first call writes it once; a global module the call runs has its
  buffers swapped for copies while it is traced, as the traced module's are (batch_norm's
  running statistics, updated inside a torch call, are then updated by the program's call);
- jit guards that each name still reaches the same tensor object, with the same layout
  (`Guard`, from `of_program`, which searches the function's globals, cells and bound object for
  each tensor's shortest `Source`): `G = torch.zeros(4)` between calls compiles again, while
  `G.fill_(5)` does not (the program reads G's values). A tensor a global model holds registered
  is checked as jit checks a compiled module's own: the model's name at each call, the path in
  it once a parameter or buffer was registered anywhere since.

Where that cannot be done right the signature runs eagerly and a warning says why at the line
of the update: the tensor requires grad in a call autograd records, it is updated where no copy
was taken first (inside a torch call FusionLens does not know writes), or the function rebinds
a global or a closure variable (`global G; G = ...`) or sets a global's item or attribute that
held a tensor (`CACHE["k"] = ...`), which FusionLens does not replay.
"""

from __future__ import annotations

import collections
import contextlib
import dis
import keyword
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fusionlens.frontend import modules
from fusionlens.frontend.arguments import sanitize
from fusionlens.frontend.notes import Note, Severity
from fusionlens.ir.torch_compat import same_values
from fusionlens.ir.vocabulary import ValueRole
from fusionlens.report.schema import DiagnosticCode

# torch calls that update a tensor argument without an in-place name (running statistics)
_WRITES_ARGUMENTS = {"batch_norm", "instance_norm", "_native_batch_norm_legit", "native_batch_norm"}
_REBINDS = {"STORE_GLOBAL", "DELETE_GLOBAL", "STORE_DEREF", "DELETE_DEREF"}


@contextlib.contextmanager
def _real() -> Iterator[None]:
    """Ops on real tensors that are neither recorded nor, in a dynamic trace, made fake (a copy
    of a global is real; under the fake mode a clone would be a fake tensor, while an in-place
    op on the global runs for real)."""
    with torch._C.DisableTorchFunction():
        if torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is None:
            yield
        else:
            with torch._C._DisableTorchDispatch():
                yield


class Captured:
    """A trace's captured tensors: each one's version when first seen, a copy of its values
    before its first update, the global modules' buffers swapped for copies."""

    def __init__(self, tracer):
        self.tracer = tracer
        self.seen: dict[int, torch.Tensor] = {}  # id -> a tensor first met as an op's argument, not the call's
        self.versions: dict[int, int] = {}  # id -> its version then (buffer copies: when made)
        self.snapshots: dict[int, torch.Tensor] = {}  # id -> its values before the call's first update of it
        self.swapped: list[tuple[torch.nn.Module, str, torch.Tensor]] = []  # (module, key, its real buffer)
        self.done: set[int] = set()  # ids of the modules whose buffers were looked at
        self.fn: Any = None  # what is traced
        self.bound: list[tuple[Source, torch.Tensor]] = []  # tensors near the function's names before the call
        self.originals: dict[int, torch.Tensor] = {}  # id(copy traced on) -> the caller's tensor (hooks)
        self.walk: Walk | None = None  # how the function reaches its captured tensors: what names them

    def _walk(self) -> Walk:
        if self.walk is None:
            self.walk = Walk(self.fn)
        return self.walk

    def label(self, t: torch.Tensor) -> tuple[str, str]:
        """(what the program calls captured tensor `t`, where the function reads it): the shortest
        Source by which the traced function reaches it, as a name (`W`, `self_cache`, `CACHE_k`);
        `c0`, `c1`, ... where none is found (a tensor library code holds)."""
        with _real():  # (the walk calls no torch function; nothing it does is recorded)
            source = self._walk().source(t)
        if source is not None:
            return identifier(source.text), f"read as {source.text}"
        n = sum(1 for v in self.tracer.inputs if v.role is ValueRole.CONST)
        return f"c{n}", "found by no name the function reads"

    # --- while tracing ------------------------------------------------------------------------

    def before(self, func, args, kwargs) -> None:
        """Before a torch call runs: note the tensors it meets for the first time (neither the
        call's arguments nor values it computed), and copy a captured one it is about to write."""
        tracer = self.tracer
        leaves = _tensors(args, kwargs)
        for t in leaves:
            if id(t) not in tracer.values and id(t) not in self.seen and id(t) not in tracer.known:
                self.seen[id(t)] = t
                self.versions[id(t)] = t._version
        if not self.seen:
            return
        for t in _written(func, args, kwargs, leaves):
            root = tracer.views.root(t)
            if id(root) in self.seen and id(root) not in self.snapshots:
                with _real():
                    self.snapshots[id(root)] = root.detach().clone()

    def module_paths(self, fn, originals: dict) -> contextlib.AbstractContextManager:
        """modules.module_paths around the traced call of `fn`, calling `entered` as each module's
        forward starts and `put_back` when the call ends; `originals` maps each copy traced on
        to the caller's tensor."""
        self.fn, self.originals = fn, originals
        self.bound = _shallow(fn)
        return modules.module_paths(self.entered, self.put_back)

    def entered(self, module: torch.nn.Module) -> None:
        """A module's forward starts (modules.module_paths): where it is no module the call was
        given (a global model the function calls), its buffers, and its submodules', are copies
        while the call is traced; `originals` maps each copy to the real buffer."""
        if id(module) in self.done:
            return
        tracer, made, originals = self.tracer, None, self.originals
        for prefix, m in module.named_modules(remove_duplicate=False):
            self.done.add(id(m))
            for key, b in list(m._buffers.items()):
                if b is None or id(b) in tracer.known or id(b) in tracer.values or id(b) in originals:
                    continue
                if made is None:  # a buffer passed as an argument too: its copy
                    made = {id(o): c for c in tracer.alive if (o := originals.get(id(c))) is not None}
                c = made[id(b)] if id(b) in made else _copy(b)
                originals[id(c)] = b
                with _real():  # the name the function reaches it by: b_bn_running_mean
                    source = self._walk().source(b)
                label = f"b_{identifier(source.text)}" if source is not None else \
                    f"b_{sanitize(type(module).__name__).lower()}_{sanitize(f'{prefix}.{key}'.lstrip('.'))}"
                tracer.known[id(c)] = (ValueRole.BUFFER, label)
                self.versions[id(c)] = c._version
                self.swapped.append((m, key, b))
                m._buffers[key] = c

    def put_back(self) -> None:
        """Each swapped module holds its real buffers again (when the traced call ends)."""
        for m, key, b in reversed(self.swapped):
            m._buffers[key] = b
        self.swapped.clear()
        self.walk = None  # (it holds what it has yet to look at)

    # --- after tracing ------------------------------------------------------------------------

    def finish(self, writeback: list, mutated: dict) -> None:
        """After the trace's updates are known: each captured tensor the call updated put back
        as it was (the program's write-back, or its torch call, updates it when it runs; its
        final values stand in as a copy, which the call's own run writes back where the
        signature runs eagerly); where that cannot be done right, the signature runs eagerly."""
        tracer, originals = self.tracer, self.originals
        written = {v.name for v, _ in writeback}
        why, where = _rebinds(self.fn) or self._rebound(), tracer.call
        updated = [(v, t) for t in self.seen.values() if (v := tracer.inputs_by_id.get(id(t))) is not None
                   and v.role is ValueRole.CONST and v.name in mutated]
        for v, t in updated:
            if why is not None:
                break
            where = tracer.updated_at.get(id(t)) or tracer.call
            if tracer.grad and t.requires_grad:
                why = f"the call updates {v.name}, a tensor it reads as a global, which requires grad: " \
                      "autograd would differentiate the update, which the program makes outside it"
            elif id(t) not in self.snapshots:
                why = f"the call updates {v.name}, a tensor it reads as a global, inside a torch call"
            elif self.snapshots[id(t)].shape != t.shape or self.snapshots[id(t)].dtype != t.dtype:
                why = f"the call changes the shape of {v.name}, a tensor it reads as a global"
        if why is not None and tracer.eager_only is None:
            tracer.eager_only = f"{why}; calls with this signature run eagerly"
            tracer.notes.append(Note(Severity.WARNING, tracer.eager_only, where, DiagnosticCode.CAPTURED_CONSTANT))
        if tracer.eager_only is not None and not tracer.views.aliased.rerun:
            return  # the traced run is the call's (jit returns it): its updates stay
        for v, t in updated:
            if id(t) not in self.snapshots:  # (eager, the traced run redone: cannot be put back)
                continue
            with _real(), torch.no_grad():
                final = t.detach().clone()
                t.copy_(self.snapshots[id(t)])
            originals[id(final)] = t
            tracer.alive.append(final)
            if v.name not in written:  # updated inside a torch call, which the program runs on it
                tracer.notes.append(Note(Severity.INFORMATION, f"{v.name}, a tensor the function reads as a global, "
                                         "is updated in place inside a torch call, which the program runs on it",
                                         tracer.updated_at.get(id(t)), DiagnosticCode.WRITEBACK))

    def _rebound(self) -> str | None:
        """Why the call cannot be compiled where it set a global's item or attribute that held a
        tensor to another object (`CACHE["k"] = CACHE["k"] + x`): the program would not."""
        for source, t in self.bound:
            try:
                now = source.resolve()
            except Exception:  # noqa: BLE001 - deleted by the call
                now = None
            if now is not t:
                return f"the call sets {source.text} to another object, which FusionLens does not replay"
        return None

    def changed(self) -> dict[int, int]:
        """id -> the version to compare with, of each captured tensor and buffer copy: -1 (changed)
        where its values differ from its copy's though its version did not move (a torch call
        that writes without counting it)."""
        out = dict(self.versions)
        for i, snapshot in self.snapshots.items():
            t = self.seen[i]
            if t._version == out[i] and not _equal(t, snapshot):
                out[i] = -1
        return out


def _written(func, args, kwargs, leaves: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors a torch call is about to write into, as far as its name tells."""
    name = getattr(func, "__name__", "")
    out = [x for x in pytree.tree_leaves(kwargs.get("out")) if isinstance(x, torch.Tensor)]
    inplace = name == "__setitem__" or kwargs.get("inplace") is True or (
        name.endswith("_") and not name.endswith("__") and not name.startswith("_")) or (
        name.startswith("__i") and name.endswith("__") and name not in ("__init__", "__index__", "__int__",
                                                                         "__invert__", "__iter__"))
    if inplace and args and isinstance(args[0], torch.Tensor):
        out.append(args[0])
    if name in _WRITES_ARGUMENTS:
        out += leaves
    return out


def _tensors(args, kwargs) -> list[torch.Tensor]:
    """The tensors among a call's arguments, and in the lists and tuples among them."""
    out = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out += [x for x in a if isinstance(x, torch.Tensor)]
    return out


def _copy(t: torch.Tensor) -> torch.Tensor:
    with _real():
        return t.detach().clone(memory_format=torch.preserve_format).requires_grad_(t.requires_grad) \
            if t.is_leaf else t.clone()


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.layout is not torch.strided:
        return a.shape == b.shape and a.dtype == b.dtype  # (a sparse global updated by a torch call: not seen)
    with _real():
        return same_values(a, b)


def _codes(code: types.CodeType) -> list[types.CodeType]:
    """A code object and those nested in it (comprehensions, lambdas, inner functions)."""
    out = [code]
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out += _codes(c)
    return out


def _function(fn) -> tuple[types.FunctionType | None, Any]:
    """(the Python function a call of `fn` runs, the object it is bound to or None)."""
    if isinstance(fn, torch.nn.Module):
        forward = type(fn).forward
        return forward if isinstance(forward, types.FunctionType) else None, fn
    if isinstance(fn, types.MethodType):
        return fn.__func__ if isinstance(fn.__func__, types.FunctionType) else None, fn.__self__
    if isinstance(fn, types.FunctionType):
        return fn, None
    call = vars(type(fn)).get("__call__")  # a callable object: its class's __call__
    return (call, fn) if isinstance(call, types.FunctionType) else (None, None)


def _rebinds(fn) -> str | None:
    """Why the call cannot be compiled where its function rebinds a global or a closure variable
    (`global G; G = G + x`): the program would not."""
    func, _ = _function(fn)
    if func is None:
        return None
    for code in _codes(func.__code__):
        for ins in dis.get_instructions(code):
            if ins.opname in _REBINDS and (ins.opname.endswith("GLOBAL") or ins.argval in func.__code__.co_freevars):
                kind = "global" if ins.opname.endswith("GLOBAL") else "closure variable"
                return f"the function rebinds the {kind} {ins.argval}, which FusionLens does not replay"
    return None


# --- the names each captured tensor is reached by, guarded at each call ---------------------------

MAX_DEPTH = 5  # steps from a root (a global, a cell, the bound object) searched
MAX_VISITS = 20_000  # objects looked at, all told: a compile never walks a whole library
MAX_ITEMS = 512  # entries of one container looked at


@dataclass(eq=False)
class Source:
    """Where a call finds a tensor: a root (a globals dict and a name, a closure cell, or the
    object the function is bound to) and steps, as users read it (`text`): an attribute, an item,
    or a module's registered parameter, buffer or submodule ("reg")."""

    root: Any  # ("global", dict, name) | ("cell", cell, name) | ("self", obj)
    steps: tuple[tuple[str, Any], ...]  # ("attr", name) | ("reg", name) | ("item", key)
    text: str

    def resolve(self) -> Any:
        kind = self.root[0]
        obj = self.root[1][self.root[2]] if kind == "global" else \
            self.root[1].cell_contents if kind == "cell" else self.root[1]
        for how, key in self.steps:
            obj = obj[key] if how == "item" else getattr(obj, key)
        return obj

    def split(self) -> tuple[Source, int]:
        """(the Source of the module its last registered steps start from, how many there are)."""
        n = 0
        while n < len(self.steps) and self.steps[-1 - n][0] == "reg":
            n += 1
        head = self.steps[:len(self.steps) - n]
        text = self.text if not n else self.text[:len(self.text) - sum(len(str(k)) + 1 for _, k in self.steps[-n:])]
        return Source(self.root, head, text), n


@dataclass
class Guard:
    """What a jit program assumes of the tensors it reached by name: each `Source` still reaches
    the same tensor object, of the same layout. `holds()` at each call: a lookup and an identity
    test a name, and its layout; a tensor a module holds registered (a global model's parameter) as
    jit keys the compiled module's own: the module's name checked at each call, the path in it
    after any module anywhere registered a parameter or buffer (`counter`, the driver's count;
    None: at each call). `failing()` the first that does not hold, in words, and where it is read."""

    plain: list[tuple[Source, torch.Tensor, tuple, Any]] = field(default_factory=list)  # (.., its first read)
    modules: list[tuple[Source, torch.nn.Module]] = field(default_factory=list)  # each module a tensor is held by
    registered: list[tuple[Source, torch.Tensor, tuple, Any]] = field(default_factory=list)  # (its path in it)
    notes: list[Note] = field(default_factory=list)  # an input whose name was not found, at its first read
    counter: list[int] | None = None
    checked_at: int = -1  # the counter when the registered paths last held

    @property
    def checks(self) -> list[tuple[Source, torch.Tensor, tuple, Any]]:
        return [*self.plain, *self.registered]

    def holds(self) -> bool:
        try:
            for source, module in self.modules:
                if source.resolve() is not module:
                    return False
            for source, t, layout, _ in self.plain:
                if source.resolve() is not t or _layout(t) != layout:
                    return False
            if self.registered and (self.counter is None or self.counter[0] != self.checked_at):
                if any(source.resolve() is not t for source, t, _, _ in self.registered):
                    return False
                self.checked_at = self.counter[0] if self.counter is not None else -1
        except Exception:  # noqa: BLE001 - a name deleted, an attribute gone: not the same
            return False
        return True

    def failing(self) -> tuple[str, Any]:
        """(why the guard fails, the user line that read the tensor); only after holds() said no."""
        for source, module in self.modules:
            if (why := _differs(source, module)) is not None:
                return why, next((w for s, _, _, w in self.registered if s.split()[0].text == source.text), None)
        for source, t, layout, where in self.checks:
            if (why := _differs(source, t)) is not None:
                return why, where
            if source in [s for s, *_ in self.plain] and _layout(t) != layout:
                return f"{source.text} changed its shape, strides, dtype or device in place", where
        return "the tensors the program reached by name changed", None


def _differs(source: Source, expected: Any) -> str | None:
    try:
        found = source.resolve()
    except Exception as e:  # noqa: BLE001
        return f"{source.text} is gone ({type(e).__name__}: {e})"
    if found is expected:
        return None
    kind = "tensor" if isinstance(found, torch.Tensor) else type(found).__name__
    return f"{source.text} is now another {kind} than the one the program read"


def _layout(t: torch.Tensor) -> tuple:
    return (t.shape, t.stride() if t.layout is torch.strided else t.layout, t.dtype, t.device)


def of_program(fn, trace, constants: list[torch.Tensor],
               counter: Callable[[], list[int]] | None = None) -> Guard | None:
    """The Guard of a compiled program (its acquired `trace`, the `constants` it takes after
    the user's tensors): of its captured constants and the buffers of modules other than the
    one called (whose replacement jit's key sees already); None where there is none to check.
    `counter()`: the count of registrations (called only where a module holds one of them)."""
    own = {id(t) for m in _modules_of(fn) for t in (*m.parameters(), *m.buffers())}
    held = [v for v in trace.inputs if v.role is not ValueRole.INPUT]
    targets = {v.name: t for v, t in zip(held, constants)
               if v.role is ValueRole.CONST or v.role is ValueRole.BUFFER and id(t) not in own}
    if not targets:
        return None
    found = _search(fn, {id(t): name for name, t in targets.items()})
    first: dict[str, Any] = {}
    for b in reversed(trace.bound_symbols):
        for a in pytree.tree_leaves((b.args, b.kwargs)):
            if getattr(a, "name", None) in targets:
                first[a.name] = b.provenance
    g = Guard()
    for name, t in targets.items():
        if id(t) not in found:
            g.notes.append(_unnamed(name, first.get(name)))
            continue
        source = found[id(t)]
        head, n = source.split()
        if not n:
            g.plain.append((source, t, _layout(t), first.get(name)))
            continue
        g.registered.append((source, t, _layout(t), first.get(name)))
        module = head.resolve()
        if not any(m is module for _, m in g.modules):
            g.modules.append((head, module))
    if g.registered and counter is not None:
        g.counter = counter()
    return g if g.checks or g.notes else None


def _unnamed(name: str, where) -> Note:
    return Note(Severity.INFORMATION, f"{name} is a tensor the call reaches outside its arguments by a name FusionLens "
                "did not find: its values are read at each call, but a rebinding of that name between calls is not "
                "seen", where, DiagnosticCode.CAPTURED_CONSTANT)


def _modules_of(fn) -> list[torch.nn.Module]:
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    return [module] if isinstance(module, torch.nn.Module) else []


def _roots(func: types.FunctionType, names: set[str]) -> list[tuple[Any, Source]]:
    """(object, Source) of each global and closure variable a function's code reads."""
    out = []
    for code in _codes(func.__code__):
        names.update(code.co_names)
        for name in code.co_names:
            if name in func.__globals__:
                out.append((func.__globals__[name], Source(("global", func.__globals__, name), (), name)))
    for name, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
        try:
            out.append((cell.cell_contents, Source(("cell", cell, name), (), name)))
        except ValueError:  # a cell not filled yet
            continue
    return out


class Walk:
    """Breadth first from the function's globals, closure cells and bound object, through
    attributes, items, class attributes and the functions they call, resumable: the first
    (shortest) Source of each tensor met so far (`found`), walking on only as far as asked."""

    def __init__(self, fn):
        func, bound = _function(fn)
        self.names: set[str] = set()
        self.queue: collections.deque[tuple[Any, Source, int]] = collections.deque()
        if bound is not None:
            self.queue.append((bound, Source(("self", bound), (), "self"), 0))
        if func is not None:
            self.queue.extend((obj, source, 0) for obj, source in _roots(func, self.names))
        self.found: dict[int, Source] = {}
        self.visited: set[int] = set()

    def until(self, wanted: set[int]) -> None:
        """Walk on until the tensors of these ids are found, or no object is left (or
        MAX_VISITS were looked at)."""
        queue, visited, names = self.queue, self.visited, self.names
        wanted = wanted - self.found.keys()
        while queue and wanted and len(visited) < MAX_VISITS:
            obj, source, depth = queue.popleft()
            if id(obj) in visited:
                continue
            visited.add(id(obj))
            if isinstance(obj, torch.Tensor):
                self.found.setdefault(id(obj), source)
                wanted.discard(id(obj))
                continue
            if depth >= MAX_DEPTH:
                continue
            if isinstance(obj, types.FunctionType):  # a helper it calls: its own globals and cells
                queue.extend((o, s, depth + 1) for o, s in _roots(obj, names))
                continue
            queue.extend((child, _step(source, how, key), depth + 1) for how, key, child in _children(obj, names))

    def source(self, t: torch.Tensor) -> Source | None:
        self.until({id(t)})
        return self.found.get(id(t))


def _search(fn, targets: dict[int, str]) -> dict[int, Source]:
    """The first (shortest) Source of each target tensor (Walk)."""
    walk = Walk(fn)
    walk.until(set(targets))
    return {i: walk.found[i] for i in targets if i in walk.found}


def identifier(text: str) -> str:
    """A Source's text as a name the printed program can bind: `self.cache` -> `self_cache`,
    `CACHE['k']` -> `CACHE_k` (made unique by the tracer)."""
    name = "_".join(part for part in sanitize(text).split("_") if part)
    return sanitize(name + "_" if keyword.iskeyword(name) else name) if name else "c"


def _shallow(fn) -> list[tuple[Source, torch.Tensor]]:
    """The tensors a function's globals and closure cells hold, directly or one item or
    attribute down (not a module's parameters and buffers), by their Sources."""
    func, _ = _function(fn)
    if func is None:
        return []
    out = []
    for obj, source in _roots(func, set()):
        if isinstance(obj, torch.Tensor):
            out.append((source, obj))
        elif not isinstance(obj, (torch.nn.Module, types.ModuleType, types.FunctionType)):
            out += [(_step(source, how, key), c) for how, key, c in _children(obj, set())
                    if isinstance(c, torch.Tensor)]
    return out


def _step(source: Source, how: str, key: Any) -> Source:
    text = f"{source.text}[{key!r}]" if how == "item" else f"{source.text}.{key}"
    return Source(source.root, (*source.steps, (how, key)), text)


def _children(obj, names: set[str]) -> list[tuple[str, Any, Any]]:
    """(how, key, child) of what a call may reach from `obj`: a module's registered state and
    attributes, a container's items, an object's and its class's attributes; of a Python
    module only the attributes some code read reads by name."""
    if isinstance(obj, types.ModuleType):
        return [("attr", n, getattr(obj, n)) for n in names if n in vars(obj)]
    if isinstance(obj, dict):
        return [("item", k, v) for k, v in list(obj.items())[:MAX_ITEMS] if isinstance(k, (str, int))]
    if isinstance(obj, (list, tuple)):
        return [("item", i, v) for i, v in enumerate(obj[:MAX_ITEMS])]
    if isinstance(obj, torch.nn.Module):
        own = [("reg", k, v) for d in (obj._parameters, obj._buffers, obj._modules) for k, v in d.items()
               if v is not None]
        return own + [("attr", k, v) for k, v in vars(obj).items() if not k.startswith("_") and _holds(v)]
    if isinstance(obj, type):
        return [("attr", k, v) for k, v in vars(obj).items() if not k.startswith("__") and _holds(v)]
    attrs = getattr(obj, "__dict__", None)
    out = [("attr", k, v) for k, v in attrs.items() if isinstance(k, str) and k.isidentifier()] \
        if isinstance(attrs, dict) and not isinstance(obj, (types.FunctionType, types.MethodType)) else []
    if type(obj).__module__ not in ("builtins",) and not callable(obj):  # class attributes read through it
        out += [("attr", k, v) for k, v in vars(type(obj)).items()
                if not k.startswith("__") and _holds(v) and k not in (attrs or {})]
    return out


def _holds(v) -> bool:
    """Whether a value may lead to a tensor (not a method, a property or a plain number)."""
    return isinstance(v, (torch.Tensor, dict, list, tuple, torch.nn.Module, types.FunctionType)) or \
        (isinstance(getattr(v, "__dict__", None), dict) and not isinstance(v, (type, types.ModuleType, property,
                                                                               staticmethod, classmethod)))


