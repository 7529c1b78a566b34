"""jit: a callable that traces and compiles once per input signature, then reuses the program.

    jfn = fusionlens.jit(model)
    y = jfn(x)                                   # traces and compiles on a new signature
    fusionlens.last_report(jfn), fusionlens.last_traces(jfn), jfn.cache_info()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fusionlens.driver import api, reporting
from fusionlens.distributed import collectives, ddp_overlap
from fusionlens.frontend import dynamic, tracer as frontend, objects
from fusionlens.report import schema as R
from fusionlens.distributed.ddp import buckets as _ddp_buckets, call as _ddp_call, is_ddp as _is_ddp
from fusionlens.distributed.fsdp import Sharded as _Sharded, call as _fsdp_call
from fusionlens.distributed.tensor_parallel import compiling as _tp_compiling, find as _tp_plan
from fusionlens.frontend.dynamic import DynamicDims
from fusionlens.ir.trace import Trace
from fusionlens.ops.torch_ops.fallbacks import ShapeChanged
from fusionlens.options import CompileOptions
from fusionlens.driver.pipeline import Compiled

__all__ = ["jit", "last_report", "last_traces", "JitFunction"]


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


def _layout(x: torch.Tensor) -> bool | torch.layout:
    """Whether a strided tensor is contiguous; another layout (sparse CSR, which has no
    is_contiguous) keys as itself."""
    return x.is_contiguous() if x.layout is torch.strided else x.layout


_STATE_GENERATION = [0]  # bumped whenever any module registers (or replaces) a parameter or buffer


def _bump(*_):
    _STATE_GENERATION[0] += 1


torch.nn.modules.module.register_module_parameter_registration_hook(_bump)
torch.nn.modules.module.register_module_buffer_registration_hook(_bump)


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


class JitFunction:
    """A compiled callable: traces and compiles once per input signature, then reuses it."""

    def __init__(self, fn, executors: list[str] | None = None, max_entries: int = 64,
                 options: CompileOptions | None = None, dynamic: bool | None = None):
        # DistributedDataParallel: its module is compiled; its own forward runs around it (_ddp_call)
        self.wrapper = fn if _is_ddp(fn) else None
        self._sync = False  # DDP: this call synchronises gradients (its entry's `synced` call runs)
        fn = fn.module if self.wrapper is not None else fn
        # FSDP2 (fully_shard): the program takes the local shards and gathers them (fusionlens/distributed/fsdp.py)
        self.sharded = _Sharded.of(fn)
        fn = self.sharded or fn
        self.fn = fn
        self.dynamic = dynamic  # None: a dim is symbolic once its size changed; True: every dim; False: none
        self.tp = _tp_plan(fn)  # tensor parallel: traced on the local shards (distributed/tensor_parallel.py)
        if self.tp is not None:
            self.dynamic = False  # its collectives run on real tensors only, never on a dynamic trace's fakes
        self.groups = collectives.wrapping_groups(fn, self.wrapper)  # where the ranks agree on each check
        self.options = (options or CompileOptions.from_env()).replace(previews=False)
        if executors is not None:
            self.options = self.options.replace(executors=executors)
        self.max_entries = max_entries  # a Python number that changes every call would grow it forever
        self.cache: dict[tuple[Any, ...], CacheEntry] = {}
        self.symbolic: dict[tuple[Any, ...], list[CacheEntry]] = {}  # erased signature -> dynamic programs
        # erased signature -> the sizes and argument leaves first seen (what changes becomes symbolic)
        self.first_seen: dict[tuple[Any, ...], tuple[list[tuple[int, ...]], list[Any]]] = {}
        self.compiles = 0
        self.hits = 0
        self.misses = 0
        self.last: CacheEntry | None = None
        self._module = isinstance(fn, torch.nn.Module) or self.sharded is not None  # (Sharded: the module's)
        self._state_generation = -1
        self._state: tuple[tuple[int, ...], ...] = ()

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
                             a.is_contiguous() if a.layout is torch.strided else a.layout, type(a)))
            else:
                return (mode, tuple(keys)), []
        flat, spec = pytree.tree_flatten((args, kwargs))
        return (mode, spec, tuple(_leaf_key(x) for x in flat)), flat

    def __call__(self, *args, **kwargs):
        if self.wrapper is not None:
            overlap = ddp_overlap.unsupported(self.wrapper) is None
            return _ddp_call(self.wrapper, self._call, args, kwargs, self._synchronising if overlap else None)
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

    def _ddp_compiled(self, entry: CacheEntry) -> None:
        """A DDP module's new entry: the backward that issues its gradient all-reduces as buckets
        fill, in the report too (built where the signature runs eagerly too: the eager backward then
        all-reduces the same buckets, so that ranks that disagree on the check still meet); else
        the all-reduces its reducer runs, listed."""
        assert self.wrapper is not None
        entry.synced = ddp_overlap.synchronise(entry.compiled, self.wrapper)
        if entry.synced is not None and not entry.eager_fallback:
            ddp_overlap.report(entry.compiled, entry.report, entry.synced)
        elif entry.synced is not None:  # eager here, its gradients all-reduced as the program would
            entry.report.collectives += reporting.with_estimates(ddp_overlap.listed(entry.synced), self.options.cluster)
        elif torch.is_grad_enabled():  # a training call: DDP's reducer all-reduces in its backward
            entry.report.collectives += reporting.with_estimates(_ddp_buckets(self.wrapper), self.options.cluster)
            entry.report.diagnostics += [d for d in [ddp_overlap.reducer_note(self.wrapper)] if d is not None]

    def _call(self, *args, **kwargs):
        key, leaves = self._key(args, kwargs)  # leaves, and below tensors: computed once a call
        tensors = None if len(key) == 2 else frontend.user_tensors(self.fn, args, kwargs)
        entry = self.cache.get(key)
        if entry is not None and entry.grad_mask and torch.is_grad_enabled() and entry.grad_mask != tuple(
                t.requires_grad for t in entry.compiled.constants):  # a parameter frozen or unfrozen since
            entry = None
        if entry is None:
            self.misses += 1
            entry = self._dynamic_entry(key, list(args) if tensors is None else tensors, leaves)
            if entry is None:
                entry = self._compile(key, args, kwargs, *self._dynamic(key, args, kwargs))
                if self.wrapper is not None:  # DDP's gradient all-reduces
                    self._ddp_compiled(entry)
                if entry.compiled.guards is not None:
                    self.symbolic.setdefault(_erased(key), []).append(entry)
            if len(self.cache) >= self.max_entries:  # forget the oldest signature
                self.cache.pop(next(iter(self.cache)))
            self.cache[key] = entry
            if entry.eager_fallback and entry.compiled.traced.eager_output is not None:
                self.last = entry  # tracing was this call, run eagerly: do not run the code twice
                result = entry.compiled.traced.as_the_call()
                entry.compiled.traced.release()
                return result
            entry.compiled.traced.release()
        else:
            self.hits += 1
        self.last = entry
        if entry.eager_fallback:
            return self.fn(*args, **kwargs)
        c = entry.compiled
        if c.guards is not None and c.guards.ints:  # the program reads its int arguments' symbols
            c.guards.bind(leaves)
        fn = entry.synced.fn if self._sync and entry.synced is not None else c.fn
        try:
            if tensors is None:  # positional tensors only: they are the program's inputs
                return fn(*args, *c.constants)
            result = fn(*tensors, *c.constants)
            return _with_states(c.traced, result, leaves) if c.traced.objects_passed else result
        except ShapeChanged as e:  # raised before the program wrote anything back
            _fall_back(entry, e)
            return self.fn(*args, **kwargs)

    def _state_ids(self) -> tuple[tuple[int, ...], ...]:
        """Ids of the module's parameters and buffers, recomputed only after some module
        somewhere registered a parameter or buffer (walking the module on every call costs
        more than the rest of the call)."""
        if self._state_generation != _STATE_GENERATION[0]:
            self._state_generation = _STATE_GENERATION[0]
            self._state = (tuple(map(id, self.fn.parameters())), tuple(map(id, self.fn.buffers())))
        return self._state

    def _dynamic_entry(self, key, tensors: list, leaves: list) -> CacheEntry | None:
        """A dynamic program compiled before whose guards this call's sizes (of its user
        `tensors`, and its int `leaves`) pass."""
        entries = self.symbolic.get(_erased(key))
        if not entries:
            return None
        for entry in reversed(entries):  # the latest is the most general
            guards = entry.compiled.guards
            if guards is None or entry.eager_fallback:
                continue
            if all(p < len(leaves) and leaves[p] == v for p, v in entry.static_ints.items()) and \
                    guards.check(tensors, leaves):
                return entry
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
        for t, shape, seen in zip(tensors, shapes, first_shapes):
            changed = {i for i, (a, b) in enumerate(zip(shape, seen)) if a != b} if self.dynamic is None else \
                set(range(t.ndim))
            dims.append(frozenset(d for d in changed | dynamic.marked_dims(t) if shape[d] > 1))
        ints = frozenset(i for i, (a, b) in enumerate(zip(leaves, first_leaves)) if type(a) is int
                         and (a != b or self.dynamic is True))
        return (tuple(dims) if any(dims) else ()), ints

    def _compile(self, key, args, kwargs, dims: DynamicDims = (), ints: frozenset[int] = frozenset()) -> CacheEntry:
        # The random stream is put back as it was before compiling (tracing and checking draw
        # from it): the program's first run then takes the draws (dropout's masks) eager would.
        # Not when the signature runs eagerly: its first result is the traced run's own.
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        cpu_state, cuda_state = torch.random.get_rng_state(), torch.cuda.get_rng_state() if cuda else None
        self.compiles += 1
        entry = self._compile_here(key, args, kwargs, dims, ints)
        if not entry.eager_fallback:
            torch.random.set_rng_state(cpu_state)
            if cuda_state is not None:
                torch.cuda.set_rng_state(cuda_state)
        return entry

    def _compile_here(self, key, args, kwargs, dims: DynamicDims, ints: frozenset[int]) -> CacheEntry:
        plan = None if collectives.dtensor_arguments(args, kwargs) else self.tp  # DTensor arguments: eager
        with _tp_compiling(plan) as tp:
            c, rep, failed = api.compile_checked(self.fn, args, kwargs, self.options, frontend.target_name(self.fn),
                                                 benchmark=False, eager_on_failure=True, dims=dims, ints=ints,
                                                 groups=self.groups)
            failed = tp.settle(c, rep, failed)
        symbolic = set(c.guards.ints) if c.guards is not None else set()
        leaves = pytree.tree_leaves((args, kwargs)) if len(key) == 3 else []
        static_ints = {i: x for i, x in enumerate(leaves) if type(x) is int and i not in symbolic}
        return CacheEntry(c, rep, key, dims if c.guards is not None else (), static_ints, eager_fallback=failed,
                          grad_mask=tuple(t.requires_grad for t in c.constants))

    def cache_info(self) -> dict[str, Any]:
        """hits and misses of the signature cache; compiles (a miss a dynamic program serves
        compiles nothing); entries; dynamic (the programs that serve many sizes); signatures."""
        return {"hits": self.hits, "misses": self.misses, "compiles": self.compiles, "entries": len(self.cache),
                "dynamic": sum(map(len, self.symbolic.values())),
                "signatures": [e.report.signature for e in {id(e): e for e in self.cache.values()}.values()]}

    def reset(self) -> None:
        self.cache.clear()
        self.symbolic.clear()
        self.first_seen.clear()
        self.hits = self.misses = self.compiles = 0
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


def _fall_back(entry: CacheEntry, e: ShapeChanged) -> None:
    """A data-dependent shape changed since the signature was compiled: its calls run eagerly
    from now on (it is likely to change again), and its report says so at the op's line."""
    entry.eager_fallback = True
    entry.report.diagnostics.append(R.Diagnostic("warning", f"{e}: this signature runs eagerly from now on",
                                                 e.file, e.line, code=R.DiagnosticCode.EAGER_FALLBACK))


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
    return dict(_last_entry(jfn).compiled.forward.traces)


def last_compiled(jfn) -> Compiled:
    """The pipeline.Compiled of the last call: its programs, traces and plans."""
    return _last_entry(jfn).compiled
