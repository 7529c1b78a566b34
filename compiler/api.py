"""The headless API: compile a callable once into a report, or jit it into a cached callable.

    report = compiler.compile(model, x, executors=["triton", "torch"], benchmark=True)
    jfn = compiler.jit(model)
    y = jfn(x)                                   # traces and compiles on a new signature
    compiler.last_report(jfn), compiler.last_traces(jfn), jfn.cache_info()
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import platform
import time
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.utils import _pytree as pytree

from compiler import checking, executors as executor_registry, frontend, passes, program, report as R, timing
from compiler.ir import distinct_lines, external_inputs, format_call, ops_callable

__all__ = ["compile", "jit", "last_report", "last_traces", "CompileError"]


class CompileError(Exception):
    """Compiling failed in the user's code or input; `.report` says where (report.error)."""

    def __init__(self, report: R.CompileReport):
        e = report.error
        where = f"{e.file}:{e.line}: " if e and e.file and e.line else ""
        super().__init__(f"{where}{e.message if e else 'compile failed'}")
        self.report = report


@dataclass
class Compiled:
    name: str
    traces: dict  # stage -> Trace
    plan: program.Plan
    fn: Any  # the program: takes user tensors then constants
    constants: list  # tensors appended to the user's tensors at each call
    n_user_inputs: int
    traced: frontend.TraceResult
    compile_ms: float
    device: torch.device
    executors: list  # resolved, in priority order


def user_tensors(fn, args, kwargs) -> list:
    """The call's tensors in the order the frontend names them."""
    if not kwargs:
        return [x for x in pytree.tree_leaves(args) if isinstance(x, torch.Tensor)]
    pairs = frontend.signature_names(fn, args, kwargs)
    return [x for _, v in pairs for x in pytree.tree_leaves(v) if isinstance(x, torch.Tensor)]


def _device_of(tensors) -> torch.device:
    for t in tensors:
        if t.device.type != "cpu":
            return t.device
    return torch.device("cpu")


def build(fn, args, kwargs, executors: Optional[list] = None, name: Optional[str] = None,
          previews: bool = False) -> Compiled:
    """Trace to callable. `previews`: with the default executors, also write the code of the
    fusion executors that cannot run here (for reports; jit does not need it)."""
    start = time.perf_counter()
    traced = frontend.trace(fn, args, kwargs, name)
    acquired = traced.trace
    decomposed = passes.decompose(acquired)
    optimised = passes.optimise(decomposed)
    user = [v for v in acquired.inputs if v.role == "input"]
    device = _device_of(user_tensors(fn, args, kwargs) + list(traced.constants.values()))
    names = executor_registry.resolve(executors, device)
    plan = program.plan(optimised, names, device, preview_all=previews and executors is None)
    fn_compiled = plan.trace.python_callable()
    constants = [traced.constants[v.name] for v in acquired.inputs if v.role != "input"]
    traces = {"acquired": acquired, "decomposed": decomposed, "optimised": optimised, "execution": plan.trace}
    return Compiled(acquired.name, traces, plan, fn_compiled, constants, len(user), traced,
                    (time.perf_counter() - start) * 1e3, device, names)


@functools.lru_cache(maxsize=1)
def _versions() -> dict:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        # nvFuser wheels are named per CUDA and torch version (nvfuser-cu130-torch210)
        if name in ("fusionlens", "triton") or name.startswith("nvfuser"):
            out["nvfuser" if name.startswith("nvfuser") else name] = dist.version
    return dict(out)


def _tensor_info(v) -> R.TensorInfo:
    return R.TensorInfo(v.name, list(v.shape), str(v.dtype).removeprefix("torch."), str(v.device))


def _diag(severity, message, where) -> R.Diagnostic:
    if where is None:
        return R.Diagnostic(severity, message)
    return R.Diagnostic(severity, message, where.file, where.line, where.col, where.end_line, where.end_col)


def _source_lines(bsyms) -> list:
    return [R.SourceLine(p.file, p.line) for p in distinct_lines(bsyms)]


def target_of(fn, name: str) -> R.Target:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        lines, start = inspect.getsourcelines(target)
        return R.Target(name, inspect.getsourcefile(target), start, start + len(lines) - 1)
    except (OSError, TypeError):
        return R.Target(name, None, None, None)


def assemble(c: Compiled, target: R.Target, executors: list) -> R.CompileReport:
    plan = c.plan
    region_of = {}
    for r in plan.regions:
        for b in r.bsyms:
            for o in b.outputs:
                region_of[o.name] = r.id
    decomposed_by_output = {o.name: b for b in c.traces["decomposed"].bound_symbols for o in b.outputs}
    optimised_by_output = {o.name: b for b in c.traces["optimised"].bound_symbols for o in b.outputs}
    ops = []
    for i, b in enumerate(c.traces["acquired"].bound_symbols):
        p = b.provenance
        region = next((region_of[o.name] for o in b.outputs if o.name in region_of), None)
        dec = next((decomposed_by_output[o.name] for o in b.outputs if o.name in decomposed_by_output), None)
        prims = [s.sym.name for s in passes.flatten([dec])] if dec is not None and dec.subsymbols else []
        stack = [R.Frame(f.file, f.line, f.function) for f in (p.stack if p else ())]
        # its line as it runs: the optimised op (inputs renamed by CSE and aliases) if it survived
        shown = next((optimised_by_output[o.name] for o in b.outputs if o.name in optimised_by_output), b)
        ops.append(R.OpRecord(i, b.sym.name, region, p.file if p else "", p.line if p else 0,
                              p.end_line if p else 0, p.col if p else 0, p.end_col if p else 0,
                              stack, format_call(shown), prims))
    fallbacks = []
    for b in c.traces["decomposed"].bound_symbols:
        if b.note:
            p = b.provenance
            fallbacks.append(R.Fallback(b.sym.name, b.note, p.file if p else None, p.line if p else None))
    regions = [R.Region(r.id, r.executor, [b.sym.name for b in r.bsyms], _source_lines(r.bsyms), r.code,
                        [_tensor_info(v) for v in r.inputs], [_tensor_info(v) for v in r.outputs],
                        None, r.boundary, r.kernels, r.note) for r in plan.regions]
    diagnostics = [_diag(n.severity, n.message, n.where) for n in c.traced.notes]
    diagnostics += [_diag(sev, msg, where) for sev, msg, where in plan.notes]
    device = c.device
    return R.CompileReport(
        target=target, executors=executors,
        traces={"acquired": c.traces["acquired"].python(), "decomposed": c.traces["decomposed"].python(nested=True),
                "optimised": c.traces["optimised"].python(), "execution": plan.trace.python()},
        regions=regions, ops=ops, fallbacks=fallbacks, diagnostics=diagnostics,
        signature=list(c.traced.trace.signature), device=str(device), device_name=timing.device_name(device),
        versions=_versions(), compile_ms=round(c.compile_ms, 3), previews=list(plan.previews))


def _error_report(e: Exception, target: R.Target, executors) -> R.CompileReport:
    file, line = getattr(e, "file", None), getattr(e, "line", None)
    message = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
    return R.CompileReport(target=target, status="error", executors=list(executors or []),
                           error=R.Diagnostic("error", message, file, line), versions=_versions())


_RANDOM_OPS = ("rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "bernoulli", "multinomial",
               "normal", "dropout", "uniform_", "normal_", "random_", "exponential_")


def _is_random(c: Compiled) -> bool:
    return any("random" in b.sym.tags or b.sym.name.rsplit(".", 1)[-1].removeprefix("op_").removeprefix(
        "Tensor_") in _RANDOM_OPS for b in c.traces["acquired"].bound_symbols)


def _shapes_only(tree):
    return pytree.tree_map(lambda t: t.new_zeros(()).expand(t.shape) if isinstance(t, torch.Tensor) else t, tree)


def check_and_benchmark(c: Compiled, rep: R.CompileReport, fn, args, kwargs, *, benchmark: bool,
                        repeats: int, warmup: int, torch_compile: bool) -> None:
    """Check the program against eager on the example inputs; optionally time everything."""
    inputs = user_tensors(fn, args, kwargs) + c.constants
    actual = c.fn(*inputs)
    for region, r in zip(rep.regions, c.plan.regions):  # what ran may be known only now
        if hasattr(r.generated, "report_code"):
            region.code, region.note, region.kernels = r.generated.report_code(), r.generated.status(), \
                r.generated.kernels
    problem = checking.mismatch(actual, c.traced.eager_output)
    if problem and _is_random(c):  # random values differ from eager's draw: compare shapes and dtypes only
        problem = checking.mismatch(_shapes_only(actual), _shapes_only(c.traced.eager_output))
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        rep.diagnostics.append(R.Diagnostic(
            "information", "FusionLens compiles inference: the compiled program's outputs carry no autograd "
            "graph, though inputs or parameters require grad", rep.target.file, rep.target.line))
    if problem:
        rep.diagnostics.append(R.Diagnostic(
            "error", f"the compiled program does not match eager PyTorch on the example inputs: {problem}",
            rep.target.file, rep.target.line))
    if not benchmark:
        return
    device = torch.device(rep.device)
    if device.type == "cpu" and any(r.executor == "triton" for r in rep.regions):
        rep.diagnostics.append(R.Diagnostic(
            "information", "Triton kernels ran under Triton's interpreter (no GPU): their times measure "
            "the interpreter, not kernels"))
    eager, compiled = timing.compare([(fn, args, kwargs), (c.fn, inputs, {})], device, warmup, repeats)
    timings = R.ProgramTimings(str(device), compiled, eager,
                               speedup_vs_eager=round(eager.median_ms / compiled.median_ms, 3))
    if torch_compile:
        try:
            tc = torch.compile(fn)
            timings.torch_compile = timing.measure(tc, *args, device=device, warmup=max(warmup, 2),
                                                   repeats=repeats, **kwargs)
            timings.speedup_vs_torch_compile = round(timings.torch_compile.median_ms / compiled.median_ms, 3)
        except Exception as e:  # torch.compile may be unavailable (no compiler toolchain)
            rep.diagnostics.append(R.Diagnostic("warning", f"torch.compile baseline failed: {type(e).__name__}: {e}"))
    rep.timings = timings
    env = program.interpret(c.plan.trace, inputs)
    torch_env = None  # values of the torch-level program, for eager baselines of fused regions
    by_id = {r.id: r for r in c.plan.regions}
    reps = max(3, repeats // 2)
    for region in rep.regions:
        r = by_id[region.id]
        b = r.bound
        read = [env[v.name] for v in r.inputs]
        call = r.fn if r.fn is not None else ops_callable([b], b.inputs(), b.outputs)
        if r.fn is not None and r.eager_fn is not None:
            eager_call, eager_read = r.eager_fn, read
            sources = _source_ops(c.traces["optimised"], r)
            if sources:  # the torch calls the user wrote (F.layer_norm), not our prims one by one
                if torch_env is None:
                    torch_env = program.interpret(c.traces["optimised"], inputs)
                ins = external_inputs(sources)
                eager_call = ops_callable(sources, ins, [o for s in sources for o in s.outputs])
                eager_read = [torch_env[v.name] for v in ins]
            t, eager_t = timing.compare([(call, read, {}), (eager_call, eager_read, {})], device, 1, reps)
        else:  # a torch region is its own eager baseline
            t = eager_t = timing.measure(call, *read, device=device, warmup=1, repeats=reps)
        region.timing = R.RegionTiming(round(t.median_ms, 5), round(eager_t.median_ms, 5), round(t.iqr_ms, 5))


def _source_ops(optimised, region) -> list:
    """The torch-level ops whose every prim runs in `region`, when they account for all of
    it; else [] (the region then compares with its prims run one by one)."""
    produced = {o.name for b in region.bsyms for o in b.outputs}
    sources, covered = [], set()
    for b in optimised.bound_symbols:
        leaves = {o.name for leaf in passes.flatten([b]) for o in leaf.outputs}
        if b.subsymbols and leaves and leaves <= produced:
            sources.append(b)
            covered |= leaves
    return sources if sources and covered == produced else []


def compile(fn, *args, executors: Optional[list] = None, benchmark: bool = False, repeats: int = 20,
            warmup: int = 3, torch_compile: bool = False, name: Optional[str] = None,
            **kwargs) -> R.CompileReport:
    """Trace `fn(*args, **kwargs)`, compile it, check it against eager, and report.

    Raises CompileError (with `.report`) when the user's code fails while tracing.
    """
    c, rep = _compile_checked(fn, args, kwargs, executors, name or frontend.target_name(fn), previews=True,
                              benchmark=benchmark, repeats=repeats, warmup=warmup, torch_compile=torch_compile)
    return rep


def _compile_checked(fn, args, kwargs, executors, name, previews, **bench):
    """build + report + check against eager (+ benchmark): what compile and jit share."""
    target = target_of(fn, name)
    try:
        c = build(fn, args, kwargs, executors, name, previews)
    except frontend.TraceError as e:
        raise CompileError(_error_report(e, target, executors)) from e
    rep = assemble(c, target, c.executors)
    check_and_benchmark(c, rep, fn, args, kwargs, **bench)
    return c, rep


# --- jit ----------------------------------------------------------------------------------

def _leaf_key(x):
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), x.dtype, x.device, x.requires_grad, x.is_contiguous())
    try:
        hash(x)
        return (type(x), x)
    except TypeError:
        return (type(x), id(x))


_STATE_GENERATION = [0]  # bumped whenever any module registers (or replaces) a parameter or buffer


def _bump(*_):
    _STATE_GENERATION[0] += 1


torch.nn.modules.module.register_module_parameter_registration_hook(_bump)
torch.nn.modules.module.register_module_buffer_registration_hook(_bump)


@dataclass
class CacheEntry:
    compiled: Optional[Compiled]
    report: R.CompileReport
    signature: tuple
    eager_fallback: bool = False  # the program failed its check: run eager for this signature


class JitFunction:
    """A compiled callable: traces and compiles once per input signature, then reuses it."""

    def __init__(self, fn, executors: Optional[list] = None, max_entries: int = 64):
        self.fn = fn
        self.executors = executors
        self.max_entries = max_entries  # a Python number that changes every call would grow it forever
        self.cache: dict = {}
        self.hits = 0
        self.misses = 0
        self.last: Optional[CacheEntry] = None
        self._module = isinstance(fn, torch.nn.Module)
        self._state_generation = -1
        self._state: tuple = ()

    def signature(self, args, kwargs) -> tuple:
        """The cache key. Positional tensors only (the common call) key as a pair and are
        passed to the program as they are; anything else keys with its pytree spec."""
        # A module traced in eval mode must not serve calls in training mode (dropout).
        # A replaced parameter or buffer is a new signature too.
        mode = (self.fn.training, self._state_ids()) if self._module else None
        if not kwargs and all(isinstance(a, torch.Tensor) for a in args):
            return (mode, tuple(_leaf_key(a) for a in args))
        flat, spec = pytree.tree_flatten((args, kwargs))
        return (mode, spec, tuple(_leaf_key(x) for x in flat))

    def __call__(self, *args, **kwargs):
        key = self.signature(args, kwargs)
        entry = self.cache.get(key)
        if entry is None:
            self.misses += 1
            entry = self._compile(key, args, kwargs)
            if len(self.cache) >= self.max_entries:  # forget the oldest signature
                self.cache.pop(next(iter(self.cache)))
            self.cache[key] = entry
        else:
            self.hits += 1
        self.last = entry
        if entry.eager_fallback:
            return self.fn(*args, **kwargs)
        c = entry.compiled
        if len(key) == 2:  # positional tensors only: they are the program's inputs
            return c.fn(*args, *c.constants)
        return c.fn(*user_tensors(self.fn, args, kwargs), *c.constants)

    def _state_ids(self) -> tuple:
        """Ids of the module's parameters and buffers, recomputed only after some module
        somewhere registered a parameter or buffer (walking the module on every call costs
        more than the rest of the call)."""
        if self._state_generation != _STATE_GENERATION[0]:
            self._state_generation = _STATE_GENERATION[0]
            self._state = (tuple(map(id, self.fn.parameters())), tuple(map(id, self.fn.buffers())))
        return self._state

    def _compile(self, key, args, kwargs) -> CacheEntry:
        c, rep = _compile_checked(self.fn, args, kwargs, self.executors, frontend.target_name(self.fn),
                                  previews=False, benchmark=False, repeats=0, warmup=0, torch_compile=False)
        failed = any(d.severity == "error" for d in rep.diagnostics)
        if failed:
            rep.diagnostics.append(R.Diagnostic("warning", "this signature runs eagerly: see the error above"))
        return CacheEntry(c, rep, key, eager_fallback=failed)

    def cache_info(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "entries": len(self.cache),
                "signatures": [e.report.signature for e in self.cache.values()]}

    def reset(self) -> None:
        self.cache.clear()
        self.hits = self.misses = 0
        self.last = None


def jit(fn, executors: Optional[list] = None, max_entries: int = 64) -> JitFunction:
    return JitFunction(fn, executors, max_entries)


def _require_jit(jfn) -> JitFunction:
    if not isinstance(jfn, JitFunction):
        raise TypeError("expected a function returned by compiler.jit")
    if jfn.last is None:
        raise RuntimeError("this function has not been called yet")
    return jfn


def last_report(jfn) -> R.CompileReport:
    return _require_jit(jfn).last.report


def last_traces(jfn) -> dict:
    """Stage name -> Trace of the last call's program (print one with `.python()`)."""
    return dict(_require_jit(jfn).last.compiled.traces)
