"""jit: a callable that traces and compiles once per input signature, then reuses the program.

    jfn = fusionlens.jit(model)
    y = jfn(x)                                   # traces and compiles on a new signature
    fusionlens.last_report(jfn), fusionlens.last_traces(jfn), jfn.cache_info()
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fusionlens.driver import api, fast_path, wire
from fusionlens.distributed import collectives, ddp_overlap, transform
from fusionlens.frontend import aliasing, captured, dynamic, intra_op, tracer as frontend, objects, overlap, \
    value_guards
from fusionlens.report import schema as R
from fusionlens.distributed.ddp import call as _ddp_call
from fusionlens.distributed.fsdp import call as _fsdp_call
from fusionlens.distributed.tensor_parallel import Parallel
from fusionlens.frontend.dynamic import DynamicDims
from fusionlens.ir.trace import Trace
from fusionlens.ir.vocabulary import ValueRole
from fusionlens.ops.torch_ops.fallbacks import ShapeChanged
from fusionlens.options import CompileOptions
from fusionlens.driver.pipeline import Compiled

__all__ = ["jit", "last_report", "last_traces", "JitFunction"]

_MISS = fast_path.MISS  # (a global read: every call compares with it)


def _leaf_key(x):
    if isinstance(x, torch.Tensor):
        return (x.shape, x.dtype, x.device, x.requires_grad, _layout(x), type(x))  # a DTensor keys apart
    if objects.is_state(x):  # an object passed in (a cache) keys by its contents, not its identity
        return objects.state_key(x, _leaf_key)
    try:
        hash(x)
        return (type(x), x)
    except TypeError:
        return (type(x), id(x))


def _layout(x: torch.Tensor) -> bool | tuple[int, ...] | str | torch.layout:
    """Whether a strided tensor is contiguous, and if not which of its elements share memory
    (overlap.layout_key: a program for an expanded input must not serve a plain one, nor the
    reverse); another layout (sparse CSR, which has no is_contiguous) keys as itself."""
    return (x.is_contiguous() or overlap.layout_key(x)) if x.layout is torch.strided else x.layout


_STATE_GENERATION = [0]  # bumped whenever any module registers (or replaces) a parameter or buffer
_WATCHING: list[Any] = []  # torch's handles of the two hooks that bump it, once installed
_WATCHING_LOCK = threading.Lock()


def _bump(*_):
    _STATE_GENERATION[0] += 1


def _state_generation() -> int:
    """The count of parameter and buffer registrations in any module since the first call.
    torch's global registration hooks that keep it are installed here, on the first jit call
    of a module, not when this module is imported: importing FusionLens changes nothing in
    torch (tests/test_architecture.py). A JitFunction reads its module's state first after
    this, so it misses no registration."""
    if not _WATCHING:
        with _WATCHING_LOCK:
            if not _WATCHING:
                _WATCHING.extend([torch.nn.modules.module.register_module_parameter_registration_hook(_bump),
                                  torch.nn.modules.module.register_module_buffer_registration_hook(_bump)])
    return _STATE_GENERATION[0]


def _counted() -> list[int]:
    """The registration count itself, counted from now on (a guard reads it at each call)."""
    _state_generation()
    return _STATE_GENERATION


@dataclass
class CacheEntry:
    compiled: Compiled
    report: R.CompileReport
    signature: tuple[Any, ...]
    dims: DynamicDims = ()  # per user tensor, the dims its program serves every size of
    static_ints: dict[int, int] = field(default_factory=dict)  # leaf position -> an int it specialised on
    eager_fallback: bool = False  # the program failed its check: run eager for this signature
    grad_mask: tuple[bool, ...] = ()  # which of the program's constants (parameters) required grad at compile
    synced: ddp_overlap.Synced | None = None  # DDP: the training call whose backward all-reduces the gradients
    values: value_guards.ValueGuards | None = None  # the branches its trace took on tensor values, checked per call
    branches: list[CacheEntry] = field(default_factory=list)  # one signature's programs, a branch each (values)
    # a program that writes into an input: how its call's tensors shared memory, which each call's must match
    aliases: aliasing.Relation | None = None
    captured: captured.Guard | None = None  # the tensors it reached by name (globals): still those, laid out alike


class JitFunction:
    """A compiled callable: traces and compiles once per input signature, then reuses it."""

    def __init__(self, fn, executors: list[str] | None = None, max_entries: int = 64,
                 options: CompileOptions | None = None, dynamic: bool | None = None):
        # the parallel wrappings as transforms (distributed/transform.py): DDP's module is compiled, its
        # own forward run around it (_ddp_call); an FSDP2 module's Sharded takes its local shards at each
        # call; a tensor-parallel one is traced on its local shards
        unwrapped = transform.unwrap(fn)
        self.wrapper, self.sharded, self.transforms = unwrapped.ddp, unwrapped.sharded, unwrapped.transforms
        self._sync = False  # DDP: this call synchronises gradients (its entry's `synced` call runs)
        fn = self.fn = unwrapped.fn
        self.dynamic = dynamic  # None: a dim is symbolic once its size changed; True: every dim; False: none
        if any(isinstance(t, Parallel) for t in self.transforms):
            self.dynamic = False  # its collectives run on real tensors only, never on a dynamic trace's fakes
        self.options = (options or CompileOptions.from_env()).replace(previews=False)
        if executors is not None:
            self.options = self.options.replace(executors=executors)
        self.max_entries = max_entries  # a Python number that changes every call would grow it forever
        self.cache: dict[tuple[Any, ...], CacheEntry] = {}
        self.symbolic: dict[tuple[Any, ...], list[CacheEntry]] = {}  # erased signature -> dynamic programs
        self.aliased: dict[tuple[Any, ...], CacheEntry] = {}  # (signature, aliasing.Relation.value) -> its program
        # erased signature -> the sizes and argument leaves first seen (what changes becomes symbolic)
        self.first_seen: dict[tuple[Any, ...], tuple[list[tuple[int, ...]], list[Any]]] = {}
        self.compiles = 0
        self._hits = 0  # calls the generic path served from its cache (hits adds the generated code's)
        self.misses = 0
        self.last: CacheEntry | None = None
        self._module = isinstance(fn, torch.nn.Module) or self.sharded is not None  # (Sharded: the module's)
        self._state_generation = -1
        self._state: tuple[tuple[int, ...], ...] = ()
        self.fast = fast_path.FastPaths(self)  # cached calls as generated code (fast_path.py)
        self.growing: dict[tuple, int] = {}  # a passed object's slot (path) -> the dim a cat grows it along

    @property
    def hits(self) -> int:
        """Calls served by a program compiled before: by the generic path, or by generated code."""
        return self._hits + self.fast.served

    def signature(self, args, kwargs) -> tuple[Any, ...]:
        """The cache key. Positional tensors only (the common call) key as a pair and are
        passed to the program as they are; anything else keys with its pytree spec."""
        return self._key(args, kwargs)[0]

    def _key(self, args, kwargs) -> tuple[tuple[Any, ...], list[Any]]:
        """(the cache key, the call's flat leaves: [] for positional tensors only)."""
        # A module traced in eval mode must not serve calls in training mode (dropout).
        # A replaced parameter or buffer is a new signature too; so is grad mode (a training
        # program records autograd, an inference one does not).
        mode = (torch.is_grad_enabled(), self.fn.training, self._state_ids()) if self._module else \
            torch.is_grad_enabled()
        if not kwargs:
            keys = []  # _leaf_key of each tensor, inlined: this runs on every call
            for a in args:
                if not isinstance(a, torch.Tensor):
                    break
                keys.append((a.shape, a.dtype, a.device, a.requires_grad,
                             (a.is_contiguous() or overlap.layout_key(a)) if a.layout is torch.strided else a.layout,
                             type(a)))
            else:
                return (mode, tuple(keys)), []
        flat, spec = pytree.tree_flatten((args, kwargs))
        return (mode, spec, tuple(_leaf_key(x) for x in flat)), flat

    def __call__(self, *args, **kwargs):
        served = self.fast.serve(args, kwargs)  # a program's own key, guards and write-back, as code
        if served is not _MISS:
            return served
        if self.wrapper is not None:
            overlapped = ddp_overlap.unsupported(self.wrapper) is None
            return _ddp_call(self.wrapper, self._call, args, kwargs, self._synchronising if overlapped else None)
        if self.sharded is not None:  # this call's local shards, passed by keyword
            return _fsdp_call(self.sharded, self._call, args, kwargs)
        return self._call(*args, **kwargs)

    def _synchronising(self, sync: bool, *args, **kwargs) -> tuple[Any, bool]:
        """The call under DDP (fusionlens/distributed/ddp.py): with `sync`, by the program whose backward
        all-reduces the gradients where its entry has one; (result, whether it did)."""
        if self.last is not None and self.last.synced is not None:
            self.last.synced.disarm()
        self._sync = sync
        try:
            result = self._call(*args, **kwargs)
        finally:
            self._sync = False
        entry = self.last
        if not sync or entry is None or entry.synced is None:
            return result, False
        if entry.eager_fallback:  # every rank all-reduces the same buckets, whichever ran its program
            entry.synced.after_eager_backward()
        return result, True

    def _call(self, *args, **kwargs):
        key, leaves = self._key(args, kwargs)  # leaves, and below tensors: computed once a call
        tensors = None if len(key) == 2 else frontend.user_tensors(self.fn, args, kwargs)
        entry = self.cache.get(key)
        if entry is not None and entry.grad_mask and torch.is_grad_enabled() and entry.grad_mask != tuple(
                t.requires_grad for t in entry.compiled.constants):  # a parameter frozen or unfrozen since
            entry = None
        why = None  # why this call compiles again: the guard that failed, at the line that made it
        first = None  # (the result of the compile's checked run, where it was this call's own)
        if entry is not None and entry.captured is not None and not entry.captured.holds():  # a global rebound
            message, where = entry.captured.failing()
            entry, why = None, _Why(message, where, R.DiagnosticCode.CAPTURED_CONSTANT)
        if entry is not None and entry.values is not None:  # it branched on a value: the branch of this call's
            entry, why = _branch(entry, list(args) if tensors is None else tensors)
        if entry is not None and entry.aliases is not None:  # it writes into an input: as this call's share memory?
            entry = self._aliased(key, entry, list(args) if tensors is None else tensors)
        if entry is None:
            self.misses += 1
            entry, shape_why = self._dynamic_entry(key, list(args) if tensors is None else tensors, leaves)
            if entry is None:
                dims, ints = self._dynamic(key, args, kwargs)
                if aliasing.Relation(list(args) if tensors is None else tensors, (), self.fn).value:
                    dims, ints = (), frozenset()  # tensors that share memory: traced on copies that do, static
                said = _why_said(why or shape_why or self._static_why(key))  # an input of the report's assembly
                entry = self._compile(key, args, kwargs, dims, ints, said)
                if entry.compiled.guards is not None:
                    self.symbolic.setdefault(_erased(key), []).append(entry)
            if len(self.cache) >= self.max_entries:  # forget the oldest signature
                self.cache.pop(next(iter(self.cache)))
            _join(self.cache.get(key), entry)
            self.cache[key] = entry
            if entry.aliases is not None:
                if len(self.aliased) >= self.max_entries:
                    self.aliased.clear()
                self.aliased[(key, entry.aliases.value)] = entry
            # (not a checked training call's: the check's float64 run swapped its leaves' data, so
            # the traced result's graph ends at accumulators the leaves no longer have: fuzz
            # backward 25047, gradients None; it runs again, eagerly)
            checked_training = entry.compiled.differentiated is not None and entry.compiled.eager_only is None
            if entry.eager_fallback and entry.compiled.traced.eager_output is not None and \
                    not entry.compiled.traced.rerun and not checked_training:
                self.last = entry  # tracing was this call, run eagerly: do not run the code twice
                result = entry.compiled.traced.as_the_call()
                entry.compiled.traced.release()
                return result
            entry.compiled.traced.release()
            first = entry.compiled.take_result()  # the checked run was this call's: not run twice
        else:
            self._hits += 1
        self.last = entry
        if entry.eager_fallback:
            return self.fn(*args, **kwargs)
        self.fast.arm(entry, args, kwargs, _STATE_GENERATION)  # from this call's form, before it updates a cache
        c = entry.compiled
        if c.guards is not None and c.guards.ints:  # the program reads its int arguments' symbols
            c.guards.bind(leaves)
        if first is not None:
            return first[0]
        fn = entry.synced.fn if self._sync and entry.synced is not None else c.fn
        try:
            with intra_op.one_thread(c.one_thread):  # a small program: as its generated call runs it
                if tensors is None:  # positional tensors only: they are the program's inputs
                    return fn(*args, *c.constants)
                result = fn(*tensors, *c.constants)
            return _with_states(c.traced, result, leaves) if c.traced.objects_passed else result
        except ShapeChanged as e:  # raised before the program wrote anything back
            _fall_back(entry, e)
            self.fast.drop(entry)
            return self.fn(*args, **kwargs)

    def _state_ids(self) -> tuple[tuple[int, ...], ...]:
        """Ids of the module's parameters and buffers, recomputed only after some module
        somewhere registered a parameter or buffer (walking the module on every call costs
        more than the rest of the call)."""
        generation = _state_generation()
        if self._state_generation != generation:
            self._state_generation = generation
            self._state = (tuple(map(id, self.fn.parameters())), tuple(map(id, self.fn.buffers())))
        return self._state

    def _dynamic_entry(self, key, tensors: list, leaves: list) -> tuple[CacheEntry | None, _Why | None]:
        """A dynamic program compiled before whose guards this call's sizes (of its user
        `tensors`, and its int `leaves`) and values pass; else why the latest does not."""
        entries = self.symbolic.get(_erased(key))
        if not entries:
            return None, None
        why = None
        for entry in reversed(entries):  # the latest is the most general
            guards = entry.compiled.guards
            if guards is None or entry.eager_fallback or entry.aliases is not None and \
                    not entry.aliases.holds(tensors) or entry.captured is not None and not entry.captured.holds():
                continue
            if not all(p < len(leaves) and leaves[p] == v for p, v in entry.static_ints.items()):
                continue
            if not guards.check(tensors, leaves):
                names = [v.name for v in entry.compiled.acquired.inputs if v.role is ValueRole.INPUT]
                failed = guards.failing(tensors, leaves, names) if why is None else None
                why = why or (_Why(f"the dynamic program's guard {failed[0]} does not hold", failed[1],
                                   R.DiagnosticCode.DYNAMIC_SHAPES) if failed else None)
                continue
            served, value_why = _branch(entry, tensors)
            if served is not None:
                return served, None
            why = why or value_why
        return None, why

    def _aliased(self, key, entry: CacheEntry, tensors: list) -> CacheEntry | None:
        """`entry` (a program that writes into an input) where this call's tensors share memory as
        its compile's did; else the program compiled for this call's sharing, if any."""
        if entry.aliases is None or entry.aliases.holds(tensors):
            return entry
        found = self.aliased.get((key, entry.aliases.now(tensors)))
        if found is not None and found.values is not None and \
                found.values.failing([*tensors, *found.compiled.constants]) is not None:
            return None  # (its value guards fail: compiled again)
        return found

    def _static_why(self, key) -> _Why | None:
        """Why a call at new sizes compiled again where an earlier program of its erased
        signature is static: that program's own reason (it could not be traced symbolic)."""
        erased = _erased(key)
        for entry in self.cache.values():
            if entry.compiled.guards is None and _erased(entry.signature) == erased:
                said = [d for d in entry.report.diagnostics if d.code == R.DiagnosticCode.DYNAMIC_SHAPES]
                if said:
                    return _Why(f"the sizes changed and the program for {_shapes(entry)} is static: {said[0].message}",
                                None, R.DiagnosticCode.DYNAMIC_SHAPES)
                if entry.eager_fallback:  # no symbolic program to serve other sizes (fuzz dynamic 6549)
                    reason = entry.compiled.eager_only or "the check rejected its program"
                    return _Why(f"the sizes changed and the signature for {_shapes(entry)} runs eagerly ({reason}): "
                                "each size is traced again to see whether it can compile", None,
                                R.DiagnosticCode.DYNAMIC_SHAPES)
        return None

    def _dynamic(self, key, args, kwargs) -> tuple[DynamicDims, frozenset[int]]:
        """What to compile symbolic: per user tensor, the dims marked (dynamic.mark_dynamic) and
        those whose size changed since this signature was first seen, and the int arguments
        (positions among the flat leaves) whose value changed; all of them with `dynamic=True`."""
        if self.dynamic is False:
            return (), frozenset()
        tensors = frontend.user_tensors(self.fn, args, kwargs)
        shapes = [tuple(t.shape) for t in tensors]
        leaves = pytree.tree_leaves((args, kwargs)) if len(key) == 3 else []
        ints_seen = [leaf if type(leaf) is int else None for leaf in leaves]  # no object kept alive here
        first_shapes, first_leaves = self.first_seen.setdefault(_erased(key), (shapes, ints_seen))
        dims = []
        grown = self._grown(args, kwargs, tensors) if self.dynamic is None else {}
        for i, (t, shape, seen) in enumerate(zip(tensors, shapes, first_shapes)):
            changed = {i for i, (a, b) in enumerate(zip(shape, seen)) if a != b} if self.dynamic is None else \
                set(range(t.ndim))
            grows = {grown[i]} if i in grown else set()
            dims.append(frozenset(d for d in changed | grows | dynamic.marked_dims(t) if shape[d] > 1))
        ints = frozenset(i for i, (a, b) in enumerate(zip(leaves, first_leaves)) if type(a) is int
                         and (a != b or self.dynamic is True))
        return (tuple(dims) if any(dims) else ()), ints

    def _grown(self, args, kwargs, tensors: list) -> dict[int, int]:
        """User tensor index -> the dim it grows along: a passed object's slot that an earlier
        program replaced by a cat along that dim (dynamic.growing: a KV cache's layers)."""
        if not self.growing:
            return {}
        index = {id(t): i for i, t in enumerate(tensors)}
        out = {}
        for state in objects.passed_states(pytree.tree_leaves((args, kwargs))):
            for path, v in objects.leaves(state):
                if isinstance(v, torch.Tensor) and path in self.growing and id(v) in index \
                        and self.growing[path] < v.ndim:
                    out[index[id(v)]] = self.growing[path]
        return out

    def _compile(self, key, args, kwargs, dims: DynamicDims = (), ints: frozenset[int] = frozenset(),
                 said: list[R.Diagnostic] | None = None) -> CacheEntry:
        # The random stream is put back as it was before compiling (tracing and checking draw
        # from it): the program's first run then takes the draws (dropout's masks) eager would.
        # Not when the signature runs eagerly: its first result is the traced run's own.
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        cpu_state, cuda_state = torch.random.get_rng_state(), torch.cuda.get_rng_state() if cuda else None
        self.compiles += 1
        entry = self._compile_here(key, args, kwargs, dims, ints, said or [])
        self.growing.update(dynamic.growing(entry.compiled.traced))
        if not entry.eager_fallback:
            torch.random.set_rng_state(cpu_state)
            if cuda_state is not None:
                torch.cuda.set_rng_state(cuda_state)
        return entry

    def _compile_here(self, key, args, kwargs, dims: DynamicDims, ints: frozenset[int],
                      said: list[R.Diagnostic]) -> CacheEntry:
        dtensors = collectives.dtensor_arguments(args, kwargs) is not None  # such calls run eagerly: no TP
        transforms = [t for t in self.transforms if not (dtensors and isinstance(t, Parallel))]
        c, rep, failed = api.compile_checked(self.fn, args, kwargs, self.options, frontend.target_name(self.fn),
                                             benchmark=False, eager_on_failure=True, dims=dims, ints=ints,
                                             transforms=transforms, said=said, first_call=True)
        symbolic = set(c.guards.ints) if c.guards is not None else set()
        leaves = pytree.tree_leaves((args, kwargs)) if len(key) == 3 else []
        static_ints = {i: x for i, x in enumerate(leaves) if type(x) is int and i not in symbolic}
        aliases = aliasing.Relation(frontend.user_tensors(self.fn, args, kwargs), c.constants, self.fn) \
            if c.traced.mutated else None  # (a program that writes into no input serves any aliasing)
        reached = captured.of_program(self.fn, c.acquired, c.constants, _counted)  # globals: the names reaching them
        entry = CacheEntry(c, rep, key, dims if c.guards is not None else (), static_ints, eager_fallback=failed,
                           grad_mask=tuple(t.requires_grad for t in c.constants), synced=ddp_overlap.synced_of(c),
                           values=value_guards.of(c.traced.trace, c.traced.reads), aliases=aliases,
                           captured=reached if reached is not None and reached.checks else None)
        for note in reached.notes if reached is not None else ():
            _said(entry, wire.diagnostic(note))
        return entry

    def cache_info(self) -> dict[str, Any]:
        """hits and misses of the signature cache; compiles (a miss a dynamic program serves
        compiles nothing); entries; dynamic (the programs that serve many sizes); signatures."""
        return {"hits": self.hits, "misses": self.misses, "compiles": self.compiles, "entries": len(self.cache),
                "dynamic": sum(map(len, self.symbolic.values())),
                "signatures": [e.report.signature for e in {id(e): e for e in self.cache.values()}.values()]}

    def reset(self) -> None:
        self.cache.clear()
        self.symbolic.clear()
        self.aliased.clear()
        self.first_seen.clear()
        self.growing.clear()
        self.fast.clear()
        self._hits = self.misses = self.compiles = self.fast.served = 0
        self.last = None


def _with_states(traced: frontend.TraceResult, result, leaves: list):
    """The program's result as this call's: what the call leaves in the objects passed in (a
    cache) set in this call's objects, and a result that holds one of them (a model output's
    cache) holding this call's, not the traced call's."""
    now = objects.passed_states(leaves)
    if traced.states:
        result, changes = result
        objects.apply_all(now, changes)
    return objects.resolve(result, now)


def _erased(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A signature with each tensor's sizes replaced by its number of dims, and each int
    argument's value by `int`: what a dynamic program is found by (its guards then check the
    sizes and the int symbols, `CacheEntry.static_ints` the ints it specialised on)."""
    def erase(k):
        if isinstance(k, tuple) and k and isinstance(k[0], torch.Size):
            return (len(k[0]),) + k[1:]
        if isinstance(k, tuple) and len(k) == 2 and k[0] is int:  # an int argument: its value may be a symbol
            return (int,)
        if isinstance(k, tuple) and k and k[0] == "state":  # a cache's tensors: (path, their key)
            return k[:2] + (tuple((path, erase(leaf)) for path, leaf in k[2]),)
        return k
    return key[:-1] + (tuple(erase(k) for k in key[-1]),)


@dataclass
class _Why:
    """Why a call compiles again: the guard that failed (as users read it), where it was made."""
    message: str
    where: Any  # a Provenance, or None
    code: str


def _branch(entry: CacheEntry, tensors: list) -> tuple[CacheEntry | None, _Why | None]:
    """The entry among `entry`'s branches whose value guards this call's user `tensors` (and
    the entry's parameters) pass; else (None, why the first branch does not)."""
    why = None
    for e in entry.branches or [entry]:
        failed = e.values.failing([*tensors, *e.compiled.constants]) if e.values is not None else None
        if failed is None:
            return e, None
        read, now = failed
        why = why or _Why(f"the value guard {read.text()} does not hold (this call: {read.text(now)})", read.where,
                          R.DiagnosticCode.VALUE_GUARD)
    return None, why


def _shapes(entry: CacheEntry) -> str:
    shown = [f"{v.name} {list(v.shape)}" for v in entry.compiled.acquired.inputs if v.role is ValueRole.INPUT]
    return ", ".join(shown) or "the earlier sizes"


def _join(previous: CacheEntry | None, entry: CacheEntry) -> None:
    """A signature's programs for other branches stay reachable from its cache entry."""
    if previous is None or previous is entry or previous.values is None:
        return
    entry.branches = previous.branches or [previous]
    if entry not in entry.branches:
        entry.branches.append(entry)


def _why_said(why: _Why | None) -> list[R.Diagnostic]:
    """What a recompile says, at the line of the guard that failed (the last of its report's
    diagnostics, given to its assembly)."""
    if why is None:
        return []
    where = why.where
    return [R.Diagnostic("information", f"compiled again: {why.message}", getattr(where, "file", None),
                         getattr(where, "line", None), code=why.code)]


def _fall_back(entry: CacheEntry, e: ShapeChanged) -> None:
    """A data-dependent shape changed since the signature was compiled: its calls run eagerly
    from now on (it is likely to change again), and its report says so at the op's line."""
    entry.eager_fallback = True
    _said(entry, R.Diagnostic("warning", f"{e}: this signature runs eagerly from now on", e.file, e.line,
                              code=R.DiagnosticCode.EAGER_FALLBACK))


def _said(entry: CacheEntry, diagnostic: R.Diagnostic) -> None:
    """The entry's report from now on: its compile's, with what a later call found said last (a
    new report: one already handed out is not changed)."""
    entry.report = dataclasses.replace(entry.report, diagnostics=[*entry.report.diagnostics, diagnostic])


def jit(fn, executors: list[str] | None = None, max_entries: int = 64,
        options: CompileOptions | None = None, dynamic: bool | None = None) -> JitFunction:
    """`fn` compiled once per input signature; `options` default to the environment's.
    `dynamic`: None (the default) compiles a dim symbolic once its size has changed (one
    program then serves every size, as torch.compile's automatic dynamic shapes); True makes
    every dim symbolic from the first call; False compiles every shape on its own.
    `fusionlens.mark_dynamic(x, dim)` declares one tensor's dims dynamic up front."""
    return JitFunction(fn, executors, max_entries, options, dynamic)


def _last_entry(jfn) -> CacheEntry:
    if not isinstance(jfn, JitFunction):
        raise TypeError("expected a function returned by fusionlens.jit")
    if jfn.last is None:
        raise RuntimeError("this function has not been called yet")
    return jfn.last


def last_report(jfn) -> R.CompileReport:
    return _last_entry(jfn).report


def last_traces(jfn) -> dict[str, Trace]:
    """Stage name -> Trace of the last call's forward program (print one with `.python()`);
    `last_compiled(jfn).programs` has every program's."""
    return {wire.stage(s): t for s, t in _last_entry(jfn).compiled.forward.traces.items()}


def last_compiled(jfn) -> Compiled:
    """The pipeline.Compiled of the last call: its programs, traces and plans."""
    return _last_entry(jfn).compiled
