"""The headless API: compile a callable once into a report.

    report = fusionlens.compile(model, x, executors=["triton", "torch"], benchmark=True)

`fusionlens.jit` (fusionlens/driver/jit_cache.py) builds on the same compile-check-report path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
from collections.abc import Sequence
from typing import Any

from fusionlens.driver import benchmark as bench, checking, pipeline, reporting
from fusionlens.distributed import collectives, transform
from fusionlens.distributed.staging import CompileTransform
from fusionlens.frontend import dynamic, tracer as frontend
from fusionlens.frontend.notes import Severity
from fusionlens.middle.programs import ProgramKind
from fusionlens.report import schema as R
from fusionlens.options import CompileOptions

__all__ = ["compile", "CompileError", "CompileOptions", "Report"]


class Report(R.CompileReport):
    """What `compile` returns: the CompileReport, and its page (`to_html`)."""

    def to_html(self, path: str | None = None, *, sources: dict[str, str] | None = None,
                nonce: str | None = None) -> str:
        """The report as one self-contained HTML page (fusionlens/report/html), written to `path`
        when given; `sources` maps a file of the report to its text (by default read)."""
        from fusionlens.report import html as html_report

        page = html_report.render(self, sources, nonce=nonce)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(page)
        return page

    def __eq__(self, other: object) -> bool:
        """Equal to a CompileReport of the same fields (what from_json reads back)."""
        if not isinstance(other, R.CompileReport):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(R.CompileReport))

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it extends


class CompileError(Exception):
    """Compiling failed in the user's code or input; `.report` says where (report.error)."""

    def __init__(self, report: R.CompileReport):
        e = report.error
        where = f"{e.file}:{e.line}: " if e and e.file and e.line else ""
        super().__init__(f"{where}{e.message if e else 'compile failed'}")
        self.report = report

    @classmethod
    def like(cls, report: R.CompileReport, eager: BaseException | None) -> CompileError:
        """The error for a call whose user code raised `eager` while traced: a CompileError that
        is also eager's type (a RuntimeError torch raised stays catchable as one)."""
        if not isinstance(eager, Exception) or isinstance(eager, CompileError):
            return cls(report)
        try:
            return _like(type(eager))(report)  # type: ignore[arg-type]  # (a class is hashable)
        except TypeError:  # an exception type that cannot be built from a message
            return cls(report)


@functools.lru_cache(maxsize=64)
def _like(kind: type[Exception]) -> type[CompileError]:
    """The CompileError that is also a `kind`, eager's exception type."""
    try:
        return type(CompileError.__name__, (CompileError, kind), {"__module__": CompileError.__module__})
    except TypeError:  # a layout that cannot be mixed in
        return CompileError


def compile(fn, *args, executors: list[str] | None = None, benchmark: bool = False, repeats: int = 20,
            warmup: int = 3, torch_compile: bool = False, name: str | None = None,
            options: CompileOptions | None = None, **kwargs) -> Report:
    """Trace `fn(*args, **kwargs)`, compile it, check it against eager, and report.
    `options` default to what the environment sets (options.ENVIRONMENT); `executors`, when
    given, replaces theirs.

    Raises CompileError (with `.report`) when the user's code fails while tracing.
    """
    options = (options or CompileOptions.from_env()).replace(previews=True)
    if executors is not None:
        options = options.replace(executors=executors)
    report = compile_wrapped(fn, args, kwargs, options, name or frontend.target_name(fn), benchmark=benchmark,
                             repeats=repeats, warmup=warmup, torch_compile=torch_compile)[1]
    return Report(**{f.name: getattr(report, f.name) for f in dataclasses.fields(report)})


def compile_wrapped(fn, args, kwargs, options: CompileOptions, name: str,
                    **run) -> tuple[pipeline.Compiled, R.CompileReport, bool]:
    """compile_checked of `fn` as fusionlens.jit compiles it under whatever wraps it (compile and
    compile_target share it): its wrappings unwrapped into transforms (distributed/transform.py
    `unwrap`: DDP's module, its backward's gradient all-reduces; an FSDP2 module as an
    fsdp.Sharded taking this rank's local shards by keyword; a tensor-parallel one on its local
    shards), the ranks agreeing on the check on the groups they communicate on."""
    unwrapped = transform.unwrap(fn, args, kwargs)
    return compile_checked(unwrapped.fn, args, unwrapped.kwargs, options, name, transforms=unwrapped.transforms,
                           **run)


@contextlib.contextmanager
def _no_full_collections():
    """The garbage collector off while a program compiles: a compile makes objects by the
    hundred thousand and frees them at the end, and each full collection it would trigger walks
    every object torch and the model hold (~280 ms each here; 1/3 of a 10,000-op training
    compile, benchmarks/RESULTS.md). Collection resumes, as it was, when compiling ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compile_checked(fn, args, kwargs, options: CompileOptions, name: str, *, benchmark: bool,
                    repeats: int = 0, warmup: int = 0, torch_compile: bool = False,
                    target: R.Target | None = None,
                    eager_on_failure: bool = False,
                    dims: tuple[frozenset[int], ...] | None = None,
                    ints: frozenset[int] = frozenset(),
                    transforms: Sequence[CompileTransform] = (),
                    said: Sequence[R.Diagnostic] = (),
                    first_call: bool = False) -> tuple[pipeline.Compiled, R.CompileReport, bool]:
    """Compile, check against eager, benchmark if asked, then report: what compile, jit and
    compile_target share. Returns (Compiled, report, whether the check failed).

    `target`: the report's target (compile_target's example); by default where `fn` is
    defined, which is also where the check's diagnostics point. `eager_on_failure`: the
    caller (jit) runs a signature that failed its check eagerly, and the report says so.
    `dims`: per user tensor, the dims compiled symbolic; by default those marked dynamic.
    `ints`: the int arguments compiled symbolic (positions among the flat leaves of the call).
    `transforms`: the call's wrappings (transform.unwrap): traced and checked under their
    `tracing`, applied by the pipeline, their report inputs assembled; on the groups they and the
    collectives the call makes communicate on, the ranks agree on the check (`_check`). Where a
    transform rewrote the backward (DDP's), the compile returned shows it, unless the check failed.
    `said`: the caller's diagnostics, last in the report (jit: why the signature compiled again).
    `first_call` (jit): the compile is for this call, whose result the checked run of the program
    is where it ran on the call's own tensors (`Compiled.take_result`); the report's traces are
    printed when first read.
    """
    with contextlib.ExitStack() as stack:
        for t in transforms:
            stack.enter_context(t.tracing())
        return _compile_checked(fn, args, kwargs, options, name, benchmark, repeats, warmup, torch_compile, target,
                                eager_on_failure, dims, ints, transforms, said, first_call)


def _compile_checked(fn, args, kwargs, options: CompileOptions, name: str, benchmark: bool, repeats: int,
                     warmup: int, torch_compile: bool, target: R.Target | None, eager_on_failure: bool,
                     dims: tuple[frozenset[int], ...] | None, ints: frozenset[int],
                     transforms: Sequence[CompileTransform], said: Sequence[R.Diagnostic] = (),
                     first_call: bool = False) -> tuple[pipeline.Compiled, R.CompileReport, bool]:
    defined = reporting.target_of(fn, name)
    target = target or defined
    if dims is None:  # the dims the example's tensors were marked with (fusionlens.mark_dynamic)
        dims = tuple(dynamic.marked_dims(t) for t in frontend.user_tensors(fn, args, kwargs))
    try:
        with _no_full_collections():
            c = pipeline.compile_program(fn, args, kwargs, options, name, dims, ints, transforms)
    except frontend.TraceError as e:
        raise CompileError.like(reporting.error_report(e, target, options.executors), e.__cause__) from e
    inputs = frontend.user_tensors(fn, args, kwargs) + c.constants
    groups = [g for t in transforms for g in t.groups()]
    talking = list(dict.fromkeys([*groups, *collectives.trace_groups(c.acquired)]))
    checked, failed, extra, result = _check(c, (fn, args, kwargs), inputs, defined, options.check, talking)
    measured = bench.measure_program(c, fn, args, kwargs, inputs, repeats=repeats, warmup=warmup,
                                     torch_compile=torch_compile) if benchmark else None
    if failed and eager_on_failure and not extra:
        extra = [R.Diagnostic("warning", "this signature runs eagerly: see the "
                              f"{'error' if c.eager_only is None else 'warning'} above",
                              code=R.DiagnosticCode.EAGER_FALLBACK)]
    training = c.program(ProgramKind.BACKWARD) is not None
    c = c.finished(transforms)
    added = [t.report(c.rewritten.rewrite if c.rewritten and c.rewritten.transform == t.name else None, failed,
                      training) for t in transforms]
    if any(a.rewritten for a in added):
        c = c.showing_rewritten()
    if first_call and result is not None and not failed and not transforms and _reusable(c):
        c.first_result = result
    return c, reporting.assemble(c, target, checked, measured, extra, added, said, deferred=first_call), failed


def _reusable(c: pipeline.Compiled) -> bool:
    """Whether the check's run of the program is the call's own: on the caller's tensors (the
    call updates none in place: those the check runs on copies), drawing no random numbers (jit
    puts the random stream back for the call to draw eager's), updating no object passed in (jit
    sets a cache's slots from the call's result), and an inference program (a training result's
    graph would end at gradient accumulators that the check's float64 run, which swaps the
    leaves' data, may have replaced). The call then returns it rather than running the program
    a second time, as Thunder's first call runs it once."""
    return (c.differentiated is None and not c.traced.mutated and not c.traced.objects_passed
            and not checking.is_random(c.acquired))


def _check(c: pipeline.Compiled, call: tuple[Any, tuple[Any, ...], dict[str, Any]], inputs: list[Any],
           defined: R.Target, check: bool,
           groups: list[str]) -> tuple[list[R.Diagnostic], bool, list[R.Diagnostic], tuple[Any] | None]:
    """(the check's diagnostics, whether the signature runs eagerly, a warning where only another
    rank failed, (the result of the program's run it checked,) or None). A call that
    communicates (`groups`) is checked alike on every rank: a step that may differ between
    ranks (the float64 re-judge, the gradient check after a forward that failed) runs on all of
    them once any needs it, and they agree on the outcome (one all-reduce of a flag per group,
    collectives.any_rank), so that none runs the program while another runs eagerly (their
    collectives would not match)."""
    any_rank = functools.partial(collectives.any_rank, groups=groups) if groups else bool
    erred = lambda ds: any(d.severity == Severity.ERROR for d in ds)  # noqa: E731
    check = check and c.eager_only is None  # a signature that runs eagerly: no program runs
    checked, result = checking.checked_run(c, inputs, defined, call, any_rank) if check else ([], None)
    if check and not any_rank(erred(checked)):
        fn, args, kwargs = call
        checked += checking.check_gradients(c, fn, args, kwargs, inputs, defined, any_rank)
    own = erred(checked) or c.eager_only is not None
    failed = any_rank(own)
    if failed and not own:
        return checked, True, [R.Diagnostic(
            "warning", "another rank's compile of this signature failed its check: it runs eagerly on every "
            "rank, so that all of them communicate alike", defined.file, defined.line,
            code=R.DiagnosticCode.EAGER_FALLBACK)], None
    return checked, failed, [], (result,) if check else None


# The driver's import leaves thousands of objects in the young generations; the collection that
# walks them would otherwise fall in whatever allocates next, usually the first compile (~1 ms of
# a small function's first call): it is the import's, so it runs here.
gc.collect(1)
