"""`fusionlens repro`: one fusion region as a standalone Python script, for a bug report.

The script needs torch and triton (or nvFuser, for an nvFuser region), never FusionLens. It
holds the region's generated kernel verbatim (the Triton module with its launcher, or the
nvFuser FusionDefinition), random inputs of the shapes, dtypes and strides the region saw,
the eager reference (the region's prims spelled as plain torch calls), a check of the kernel
against eager with FusionLens's tolerance per dtype (`checking.TOLERANCES`), and a benchmark
against eager and torch.compile (`triton.testing.do_bench` on a GPU; on a CPU the kernel runs
under TRITON_INTERPRET=1 and the script says its timings mean nothing).

Region ids accepted (`region_choices` lists a target's):
  R<n>             a region that ran through a fusion executor here (triton, nvfuser)
  P<n>             a preview region: the code a fusion executor that cannot run here would
                   run (Triton's on a CPU with the default settings); Triton's preview first
                   when both Triton and nvFuser have one
  triton:P<n>, nvfuser:P<n>   a preview of that executor
  B<n>, PB<n>, triton:PB<n>   the same, of a training target's backward program: its inputs are
                   what a forward run saves and fixed cotangents (checking.backward_inputs)
A torch region (one torch call, such as a matmul) has no generated kernel: ReproError, which
names the ids that work. Writing a repro runs the user's example (like `fusionlens compile`)
and, for an R region, the compiled program up to that region, to see its inputs.
"""

from __future__ import annotations

import inspect
import operator
import os
import sys
import textwrap
from dataclasses import dataclass

import torch
from torch.utils import _pytree as pytree

from fusionlens.driver import checking, pipeline, targets
from fusionlens import executors as executor_registry
from fusionlens.frontend import tracer as frontend
from fusionlens.executors import lowering
from fusionlens.middle import reinplace
from fusionlens.middle.contract import Decline, Layout
from fusionlens.ir.interpret import run_ops
from fusionlens.ir.trace import BoundSymbol, SymbolKind, Value, format_arg
from fusionlens.middle.programs import ProgramKind
from fusionlens.ops import prims
from fusionlens.options import CompileOptions
from fusionlens.report.schema import RegionRef

FUSION_EXECUTORS = ("triton", "nvfuser")  # the executors a repro can be written for


class ReproError(Exception):
    """No script for this request: the target fails, or the region id names no kernel."""


@dataclass
class Repro:
    text: str  # the script
    region: str  # "R3", or "triton:P1" for a preview
    executor: str
    file_name: str  # a suggested file name
    summary: str  # one line for people


@dataclass
class _Material:
    rid: str
    executor: str
    preview: bool
    bsyms: list[BoundSymbol]  # the region's ops (prims), in order
    inputs: list[Value]
    outputs: list[Value]
    tensors: list[torch.Tensor]  # the inputs the region saw
    kernel: str  # the generated source
    device: torch.device


# --- which region ---------------------------------------------------------------------------

def region_choices(c: pipeline.Compiled) -> list[str]:
    """The region ids a repro can be written for, as people read them ("R2 (triton)")."""
    out = []
    for program in c.programs:
        out += [f"{r.id} ({r.executor})" for r in program.plan.regions if r.executor in FUSION_EXECUTORS]
        for p in sorted(program.previews, key=lambda p: p.executor != "triton"):
            out += [f"{p.executor}:{r.id} ({p.executor} preview)" for r in p.plan.regions]
    return out


def _no_region(c, message: str) -> ReproError:
    choices = region_choices(c)
    return ReproError(f"{message}; repro scripts are written for fusion regions and previews: "
                      + (", ".join(choices) if choices else "this target has none"))


def _material(c: pipeline.Compiled, spec: str, inputs: list) -> _Material:
    executor, _, rid = spec.rpartition(":")
    ref = RegionRef.parse(f"{executor.strip().lower()}:{rid.strip().upper()}" if executor else rid.strip().upper())
    if ref is None:
        raise _no_region(c, f"no region {spec}")
    program = c.program(ProgramKind(ref.program))
    if program is None:
        raise _no_region(c, f"{ref.id} names a backward region, and this target is compiled for inference")
    if program.kind is ProgramKind.BACKWARD:
        inputs = checking.backward_inputs(c, inputs)
    if ref.preview is None:
        r = next((r for r in program.plan.regions if r.id == ref.id), None)
        if r is None:
            raise _no_region(c, f"no region {ref.id}")
        if r.executor not in FUSION_EXECUTORS or r.generated is None:
            what = ", ".join(b.sym.name for b in r.bsyms)
            raise _no_region(c, f"region {ref.id} runs through {r.executor} ({what}): FusionLens generated no "
                                "kernel for it")
        return _ran(c, program.plan, r, inputs)
    # P1 alone is Triton's preview, else the first executor's that has one
    wanted = [ref.preview] if executor else sorted((p.executor for p in program.previews), key=lambda e: e != "triton")
    for name in wanted:
        preview = next((p for p in program.previews if p.executor == name), None)
        if preview is not None and any(r.id == ref.id for r in preview.plan.regions):
            return _previewed(program, name, ref.id, inputs)
    raise _no_region(c, f"no region {spec}")


def _ran(c, plan, r, inputs: list) -> _Material:
    """A region that ran: its inputs as the program gives them (run up to it), and its code
    for their strides (the variant, or definition, that ran for them)."""
    tensors = _inputs_of(plan, r, inputs)
    kernel = _code_for(r, tensors, c.device.type)
    return _Material(r.id, r.executor, False, list(r.bsyms), list(r.inputs), list(r.outputs), tensors, kernel,
                     c.device)


def _previewed(program: pipeline.Program, executor: str, rid: str, inputs: list) -> _Material:
    """A preview: the program's values computed with torch (its preview plan's ops run them),
    and the code written for the strides they have (the report's preview shows the variant
    for contiguous inputs)."""
    plan = next(p.plan for p in program.previews if p.executor == executor)
    r = next(r for r in plan.regions if r.id == rid)
    tensors = _inputs_of(plan, r, inputs)
    try:
        kernel = _code_for(r, tensors, "cuda")
    except Decline as e:
        raise ReproError(f"{executor} would decline {rid} for the strides of its inputs here: {e}") from e
    return _Material(f"{executor}:{rid}", executor, True, list(r.bsyms), list(r.inputs), list(r.outputs), tensors,
                     kernel, torch.device("cuda"))


def _inputs_of(plan: lowering.Plan, r: lowering.Region, inputs: list) -> list[torch.Tensor]:
    """The tensors region `r` reads when the plan's execution trace runs on `inputs`, up to it."""
    bsyms = plan.trace.bound_symbols
    k = next(i for i, b in enumerate(bsyms) if b is r.bound)
    env = run_ops(bsyms[:k], {v.name: x for v, x in zip(plan.trace.inputs, inputs)})
    return [env[v.name] for v in r.inputs]


def _code_for(r: lowering.Region, tensors: list[torch.Tensor], device: str) -> str:
    """Region `r`'s code for inputs laid out as `tensors` on a `device` device, as its executor
    (found by name) writes it: the executor contract's source_for."""
    layouts = [Layout.of_tensor(t) for t in tensors]
    return executor_registry.get(r.executor).source_for(r.group, layouts, device)


# --- the eager reference: prims as plain torch ----------------------------------------------

# Prims whose impl is a lambda, spelled as that lambda (tests/test_repro.py checks each is
# the impl's own lambda in prims.py, by AST). Prims whose impl is a torch or operator function are
# spelled by its name, those whose impl is a named function in prims.py by its source.
LAMBDA_PRIMS = {
    "convert_element_type": "lambda a, dtype: a.to(dtype)",
    "reshape": "lambda a, shape: a.reshape(shape)",
    "permute": "lambda a, dims: a.permute(dims)",
    "cat": "lambda tensors, dim: torch.cat(tensors, dim)",
    "take_along_axis": "lambda a, index, dim: torch.take_along_dim(a, index, dim)",
    "scatter_add": "lambda a, index, src, dim: a.scatter_add(dim, index, src)",
    "scatter": "lambda a, index, src, dim: a.scatter(dim, index, src)",
    "sum": "lambda a, dims: torch.sum(a, dims, dtype=a.dtype)",
    "amax": "lambda a, dims: torch.amax(a, dims)",
    "amin": "lambda a, dims: torch.amin(a, dims)",
    "var_mean": "lambda a, dims, correction: torch.var_mean(a, dims, correction=correction)",
    "argmax": "lambda a, dim: torch.argmax(a, dim)",
    "argmin": "lambda a, dim: torch.argmin(a, dim)",
    "full": "lambda shape, fill_value, *, dtype, device: torch.full(shape, fill_value, dtype=dtype, "
            "device=device)",
    "iota": "lambda length, *, start, step, dtype, device: torch.arange(start, start + length * step, step, "
            "dtype=dtype, device=device)[:length]",
}
_HELPERS = {"_is_tensor": "def _is_tensor(x):\n    return isinstance(x, torch.Tensor)\n"}


def prim_spelling(name: str) -> tuple:
    """(expression, function definitions it needs) of the prim `name` ("add") in plain torch;
    ReproError for a prim nobody spelled yet."""
    sym = prims.ALL.get(name)
    if sym is None:
        raise ReproError(f"prims.{name} is no prim")
    impl = sym.impl
    if getattr(torch, getattr(impl, "__name__", ""), None) is impl:
        return f"torch.{impl.__name__}", []
    if getattr(operator, getattr(impl, "__name__", ""), None) is impl:
        return f"operator.{impl.__name__}", []
    if impl.__name__ == "<lambda>":
        if name not in LAMBDA_PRIMS:
            raise ReproError(f"prims.{name} has no torch spelling for repro scripts (add it to "
                             "fusionlens/driver/repro.py's LAMBDA_PRIMS)")
        return LAMBDA_PRIMS[name], []
    if getattr(prims, impl.__name__, None) is impl:  # a named function of prims.py: its source
        source = textwrap.dedent(inspect.getsource(impl))
        needs = [_HELPERS[h] for h in _HELPERS if h in source]
        return impl.__name__, needs + [source]
    raise ReproError(f"prims.{name}: its impl {impl!r} has no torch spelling for repro scripts")


_RESERVED = {"torch", "operator", "math", "builtins", "prims", "inf", "nan", "DEVICE", "types", "os", "sys"}


class _Names:
    def __init__(self, values: list):
        self.map = {v.name: v.name + "_" if v.name in _RESERVED or v.name.startswith("_") else v.name
                    for v in values}

    def arg(self, x) -> str:
        if isinstance(x, Value):
            return self.map.setdefault(x.name, x.name)
        if isinstance(x, torch.device):
            return "DEVICE"
        if isinstance(x, tuple):
            inner = ", ".join(self.arg(e) for e in x)
            return f"({inner},)" if len(x) == 1 else f"({inner})"
        if isinstance(x, list):
            return "[" + ", ".join(self.arg(e) for e in x) + "]"
        return format_arg(x)

    def call(self, b) -> str:
        parts = [self.arg(a) for a in b.args] + [f"{k}={self.arg(v)}" for k, v in b.kwargs.items()]
        call = f"{b.sym.name}({', '.join(parts)})"
        if b.out_spec is None:
            return f"{self.arg(b.outputs[0])} = {call}"
        lhs = self.arg(pytree.tree_unflatten(list(b.outputs), b.out_spec))
        if lhs[:1] in "([" and lhs[-1:] in ")]":
            lhs = lhs[1:-1].rstrip(",")
        return f"{lhs + ',' if len(b.outputs) == 1 else lhs} = {call}"


def eager_source(m: _Material) -> str:
    """The prims namespace and `def eager(...)`: the region's ops as torch calls."""
    names = _Names(m.inputs)
    used, defs = {}, []
    # an in-place scatter (middle/reinplace.py) as its out-of-place prim: the same value, and the
    # reference leaves its inputs as they were
    out_of_place = {v: k for k, v in reinplace.PRIMS_IN_PLACE.items()}
    bsyms = [reinplace.with_symbol(b, out_of_place[b.sym]) if b.sym in out_of_place else b for b in m.bsyms]
    for b in bsyms:
        if not b.sym.name.startswith("prims.") or b.sym.kind is not SymbolKind.PRIM:
            root = b.sym.name.split(".")[0]
            if root not in ("torch", "operator", "math"):
                raise ReproError(f"region {m.rid}: {b.sym.name} has no torch spelling")
            continue
        short = b.sym.name.removeprefix("prims.")
        if short not in used:
            used[short], needs = prim_spelling(short)
            defs += [d for d in needs if d not in defs]
    out = [d.rstrip("\n") + "\n\n" for d in defs]
    out.append("prims = types.SimpleNamespace(\n" + "".join(f"    {k}={v},\n" for k, v in used.items()) + ")\n\n")
    out.append(f"def eager({', '.join(names.arg(v) for v in m.inputs)}):")
    last = None
    for b in bsyms:
        p = b.provenance
        if p is not None and (p.file, p.line) != last:
            last = (p.file, p.line)
            out.append(f"    # {p.source_comment()}")
        out.append(f"    {names.call(b)}")
    results = ", ".join(names.arg(v) for v in m.outputs)
    out.append(f"    return ({results},)" if len(m.outputs) == 1 else f"    return ({results})")
    return "\n".join(out) + "\n"


# --- inputs ---------------------------------------------------------------------------------

def _input_row(v: Value, t: torch.Tensor, region_device: torch.device, names: _Names) -> str:
    values = "None"
    if t.numel() and t.dtype != torch.bool and not (t.dtype.is_floating_point or t.dtype.is_complex):
        lo, hi = int(t.min()), int(t.max())
        hi = min(hi, torch.iinfo(t.dtype).max - 1, 2**62)
        values = repr((lo, max(lo, hi)))
    elif t.numel() and t.dtype.is_floating_point and bool((t >= 0).all()):
        values = '"non-negative"'
    on_cpu = t.device.type == "cpu" and region_device.type != "cpu" and t.ndim == 0
    return (f"    ({names.arg(v)!r}, {tuple(t.shape)!r}, {tuple(t.stride())!r}, {t.dtype}, {values}, {on_cpu}),"
            f"  # {v.type_str()}")


# --- the script -----------------------------------------------------------------------------

def _kernel_section(m: _Material) -> str:
    if m.executor == "triton":
        launcher = next(line.split("(")[0][4:] for line in m.kernel.splitlines()
                        if line.startswith("def ") and line.split("(")[0].endswith("_launch"))
        return (f"# ---- the kernel: the Triton module FusionLens generated, verbatim -------------------\n"
                f"{m.kernel.rstrip()}\n\n\nkernel = {launcher}\n")
    return ("# ---- the kernel: the nvFuser FusionDefinition FusionLens wrote, verbatim ------------\n"
            "def make_fusion():\n" + textwrap.indent(m.kernel.rstrip(), "    ") + "\n    return fd\n\n\n"
            "def kernel(*inputs):\n    return tuple(FUSION.execute(list(inputs)))\n")


def script(m: _Material, target: str, path: str) -> str:
    from fusionlens.driver import reporting

    names = _Names(m.inputs)
    rows = "\n".join(_input_row(v, t, m.device, names) for v, t in zip(m.inputs, m.tensors))
    lines = sorted({(b.provenance.file, b.provenance.line) for b in m.bsyms if b.provenance})
    where = ", ".join(f"{os.path.basename(f)}:{ln}" for f, ln in lines) or "?"
    versions = ", ".join(f"{k} {v}" for k, v in reporting.versions().items())
    what = (f"a preview: the code {m.executor} would run where it can (it did not run where this was written)"
            if m.preview else f"it ran through {m.executor} on {m.device}")
    tolerances = "".join(f"    {dt}: {tol!r},\n" for dt, tol in checking.TOLERANCES.items())
    head = _HEAD.replace("@RID@", m.rid).replace("@EXECUTOR@", m.executor).replace("@TARGET@", target)
    head = head.replace("@PATH@", path).replace("@WHERE@", where).replace("@WHAT@", what)
    head = head.replace("@OPS@", str(len(m.bsyms))).replace("@VERSIONS@", versions)
    tail = _TAIL.replace("@TOLERANCES@", tolerances).replace("@RID@", m.rid).replace("@EXECUTOR@", m.executor)
    tail = tail.replace("@TARGET@", target).replace("@WHERE@", where)
    return "\n".join([head, _kernel_section(m), "\n# ---- inputs: random, of the shapes, dtypes and strides the "
                      "region saw ---------\n# (name, shape, stride, dtype, values: (low, high) of integers or "
                      "\"non-negative\", on the CPU)\nINPUTS = [\n" + rows + "\n]\n", _INPUTS,
                      "# ---- the eager reference: the region's ops as torch calls ---------------------------",
                      eager_source(m), tail])


@dataclass
class Prepared:
    """A target compiled for repro scripts: `script(region)` writes one (several share it)."""

    path: str
    target: str
    compiled: pipeline.Compiled
    inputs: list[torch.Tensor]  # the program's inputs: the user's tensors, then constants

    def choices(self) -> list[str]:
        return region_choices(self.compiled)

    def script(self, region: str) -> Repro:
        with torch.no_grad():
            m = _material(self.compiled, region.strip(), self.inputs)
        stem = os.path.splitext(os.path.basename(self.path))[0]
        name = f"{stem}_{self.target}_{m.rid.replace(':', '_')}_repro.py"
        return Repro(script(m, self.target, self.path), m.rid, m.executor, name,
                     f"region {m.rid} ({m.executor}{' preview' if m.preview else ''}, {len(m.bsyms)} ops) of "
                     f"{self.target}")


def prepare(path: str, target: str, *, options: CompileOptions | None = None,
            executors: list[str] | None = None, device: str = "auto", source: str | None = None,
            train: bool = False) -> Prepared:
    """Run the example `target` of `path` (or of `source`, its editor buffer) and compile
    what it returns with `options` (`executors` replacing theirs) on `device`, loaded as `fusionlens compile` loads it
    (targets.load_example), so that region ids are the report's; nothing is checked or
    timed. ReproError for a problem in the user's code."""
    path = os.path.abspath(path)
    options = (options or CompileOptions.from_env()).replace(previews=True)
    if executors is not None:
        options = options.replace(executors=executors)
    try:
        example = targets.load_example(path, target, source=source, device=device, train=train)
        with example.context():
            c = pipeline.compile_program(example.fn, example.args, example.kwargs, options, target)
    except targets.TargetError as e:
        where = f"{e.file}:{e.line}: " if e.file and e.line else ""
        raise ReproError(f"{where}{e.message}") from e
    except frontend.TraceError as e:
        raise ReproError(f"tracing {target} failed: {e}") from e
    return Prepared(path, target, c, frontend.user_tensors(example.fn, example.args, example.kwargs) + c.constants)


def write_repro(path: str, target: str, region: str, *, options: CompileOptions | None = None,
                executors: list[str] | None = None, device: str = "auto", source: str | None = None,
                train: bool = False) -> Repro:
    """The repro script of region `region` ("R3", "P1", "triton:P1") of the example `target`
    in `path`: `prepare`, then `Prepared.script`. Runs the user's code; ReproError when
    there is no script."""
    return prepare(path, target, options=options, executors=executors, device=device, source=source,
                   train=train).script(region)


def cli(file: str, target: str, region: str, output: str | None, options: CompileOptions,
        device: str, train: bool = False) -> int:
    """`fusionlens repro`: 0 written, 1 no script (says why on stderr)."""
    try:
        r = write_repro(file, target, region, options=options, device=device, train=train)
    except ReproError as e:
        print(f"fusionlens repro: {e}", file=sys.stderr)
        return 1
    if output == "-":
        sys.stdout.write(r.text)
        return 0
    out = output or r.file_name
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(r.text)
    except OSError as e:
        print(f"fusionlens repro: cannot write {out}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"wrote {out}: {r.summary}; run it with `python {out}`")
    return 0


_HEAD = '''#!/usr/bin/env python3
"""FusionLens repro: region @RID@ (@EXECUTOR@) of target @TARGET@ in @PATH@.

The region's @OPS@ ops come from @WHERE@; @WHAT@.
Written by FusionLens with @VERSIONS@.

Self-contained: needs torch and triton (nvFuser for an nvFuser region), not FusionLens.
It runs the generated kernel on random inputs of the shapes, dtypes and strides the
region saw, checks it against the same ops run by eager PyTorch, then times kernel, eager
and torch.compile. Without a GPU the kernel runs under Triton's interpreter
(TRITON_INTERPRET=1, set below): the check means something, the timings nothing.

    python THIS_FILE.py [--no-benchmark] [--no-torch-compile] [--seed N]

Exit status: 0 the kernel matches eager, 1 it does not, 2 it cannot run here.
"""
import argparse
import builtins  # noqa: F401  (prims spelled from FusionLens's source may use it)
import math  # noqa: F401
import operator  # noqa: F401
import os
import statistics
import sys
import time
import types
from math import inf, nan  # noqa: F401

import torch

KIND = "@EXECUTOR@"
CUDA = torch.cuda.is_available()
if KIND == "triton" and not CUDA:
    # no GPU: Triton's interpreter (numpy) runs the kernel; it is read when triton is imported
    os.environ.setdefault("TRITON_INTERPRET", "1")
INTERPRETED = KIND == "triton" and os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = torch.device("cuda" if CUDA else "cpu")
'''

_INPUTS = '''
def make_inputs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for name, shape, stride, dtype, values, on_cpu in INPUTS:
        size = 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0
        if dtype == torch.bool:
            base = torch.randint(0, 2, (size,), generator=gen).bool()
        elif dtype.is_floating_point or dtype.is_complex:
            native = dtype in (torch.float32, torch.float64, torch.complex64, torch.complex128)
            base = torch.randn(size, generator=gen, dtype=dtype if native else torch.float32).to(dtype)
            if values == "non-negative":
                base = base.abs()
        else:
            low, high = values or (0, 9)
            base = torch.randint(low, high + 1, (size,), generator=gen, dtype=torch.int64).to(dtype)
        out.append(base.to("cpu" if on_cpu else DEVICE).as_strided(shape, stride))
    return out

'''

_TAIL = '''
# ---- the check: FusionLens's tolerance per dtype (rtol, atol) ------------------------------
TOLERANCES = {
@TOLERANCES@}


def mismatch(actual, expected):
    """None when every output matches; else what differs, in words."""
    if len(actual) != len(expected):
        return f"the kernel returned {len(actual)} outputs, eager {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if a.shape != e.shape or a.dtype != e.dtype:
            return f"output {i}: got {a.dtype}{list(a.shape)}, eager gives {e.dtype}{list(e.shape)}"
        rtol, atol = TOLERANCES.get(e.dtype, (0.0, 0.0))
        a, e = a.cpu(), e.cpu()
        close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True) if e.numel() else torch.ones(())
        if not bool(close.all()):
            diff = (a.double() - e.double()).abs()[~close]
            return (f"output {i}: {int((~close).sum())} of {e.numel()} elements differ beyond rtol={rtol}, "
                    f"atol={atol} (largest difference {float(diff.max()):.3g})")
    return None


def run_kernel(inputs):
    if INTERPRETED:
        import numpy  # the interpreter computes masked-off lanes too: its warnings are noise

        with numpy.errstate(all="ignore"):
            return kernel(*inputs)
    return kernel(*inputs)


def timed(fn, inputs, repeats):
    """Median milliseconds of fn(*inputs)."""
    if CUDA and not INTERPRETED:
        try:
            import triton.testing
        except ImportError:  # an nvFuser region on a machine without triton: CUDA events
            return _cuda_events(fn, inputs, max(repeats, 20))
        return triton.testing.do_bench(lambda: fn(*inputs), return_mode="median")
    fn(*inputs)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*inputs)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _cuda_events(fn, inputs, repeats):
    fn(*inputs)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*inputs)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description="FusionLens repro of region @RID@ (@EXECUTOR@) of @TARGET@")
    parser.add_argument("--no-benchmark", action="store_true", help="only check the kernel against eager")
    parser.add_argument("--no-torch-compile", action="store_true", help="do not time torch.compile")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls without a GPU (default 3)")
    args = parser.parse_args(argv)
    print("FusionLens repro: region @RID@ (@EXECUTOR@) of @TARGET@, from @WHERE@")
    print(f"device: {DEVICE}" + (" (Triton interpreter, TRITON_INTERPRET=1)" if INTERPRETED else "")
          + f"; torch {torch.__version__}")
    global FUSION
    if "make_fusion" in globals():
        if not CUDA:
            print("note: nvFuser runs on CUDA GPUs only; this machine has none")
        try:
            FUSION = make_fusion()
        except ImportError as e:
            print(f"cannot run: this region's kernel needs nvFuser ({e})")
            return 2
    inputs = make_inputs(args.seed)
    with torch.no_grad():
        expected = eager(*inputs)
        actual = run_kernel(inputs)
    problem = mismatch(actual, expected)
    if problem:
        print(f"MISMATCH: the kernel does not match eager: {problem}")
    else:
        print(f"OK: the kernel matches eager ({len(expected)} output{'s' if len(expected) != 1 else ''}, "
              "tolerance per dtype as FusionLens checks)")
    if not args.no_benchmark:
        with torch.no_grad():
            rows = [("kernel", lambda *xs: run_kernel(xs)), ("eager", eager)]
            if not args.no_torch_compile:
                rows.append(("torch.compile", torch.compile(eager)))
            for label, fn in rows:
                try:
                    print(f"{label:>14}: {timed(fn, inputs, args.repeats):.4f} ms (median)")
                except Exception as e:  # torch.compile needs a compiler toolchain
                    print(f"{label:>14}: failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        if INTERPRETED:
            print("note: these timings mean nothing: without a GPU the kernel runs in Triton's interpreter "
                  "(numpy) and eager on the CPU")
        elif not CUDA:
            print("note: these timings mean nothing: no GPU here")
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
'''
