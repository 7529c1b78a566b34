"""Test helpers for the nvFuser executor (tests/test_nvfuser*.py).

- `registered(backend)`: NvFuserExecutor(backend=...) registered as "nvfuser" for a block, so
  that compile and jit use it too; `reference_backend(api)`: tests/nvfuser_reference.py as
  such a backend (real=False: usable on any device, never said to be nvFuser);
- the `runner` fixture: where definitions run, the reference under either API name and,
  where it can run (a GPU machine with nvFuser), the real package;
- FusionGroups of one prim or of a traced function, and random inputs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import pytest
import torch

from fusionlens.driver import checking
from fusionlens import executors
from fusionlens.executors import nvfuser as nx
from fusionlens.executors.nvfuser.backend import Backend, load_backend, version
from fusionlens.executors.nvfuser.support import can_take
from fusionlens.middle.fusion import FusionGroup
from fusionlens.ir.trace import NameGen, TraceContext, Value, tracing
from fusionlens.ops import prims

import nvfuser_reference as ref
from fusion_groups import group_from_fn


def reference_backend(api: str = "nvfuser_direct") -> Backend:
    """tests/nvfuser_reference.py posing as nvFuser's `api`: not nvFuser, and said so."""
    return Backend(ref, api, version(ref), label=ref.LABEL, real=False, about=ref.ABOUT)


@contextlib.contextmanager
def registered(backend: Backend):
    """Within the block, executor "nvfuser" runs on `backend`; yields that executor."""
    executor = nx.NvFuserExecutor(backend=backend)
    previous = executors.get("nvfuser")
    executors.register(executor)
    try:
        yield executor
    finally:
        executors.unregister("nvfuser")
        if executors.get("nvfuser") is not previous:  # it was registered by an enclosing block
            executors.register(previous)


def names(*tables) -> set:
    """The prim names ("exp") of the Symbols in the executor's tables."""
    return {s.name.removeprefix("prims.") for table in tables for s in table}


REAL = torch.cuda.is_available() and load_backend()[0] is not None

# The real package joins the parametrization only where it can run (a GPU machine with
# nvFuser); elsewhere test_real_nvfuser_reports_kernels says, once, that it was skipped.
BACKENDS = [
    pytest.param("reference-direct", id="reference-nvfuser_direct"),
    pytest.param("reference-legacy", id="reference-nvfuser"),
] + ([pytest.param("real", id="real-nvfuser")] if REAL else [])


class Runner:
    """Where definitions run: the reference under either API name, or the real package."""

    def __init__(self, kind: str):
        self.kind = kind
        self.device = torch.device("cuda") if kind == "real" else torch.device("cpu")
        self.api = "nvfuser" if kind == "reference-legacy" else "nvfuser_direct"
        self.executor = nx.EXECUTOR  # set by context()

    def context(self):
        if self.kind == "real":
            return contextlib.nullcontext(nx.EXECUTOR)
        return registered(reference_backend(self.api))

    def to(self, x):
        return x.to(self.device) if isinstance(x, torch.Tensor) else x


@pytest.fixture(params=BACKENDS)
def runner(request):
    r = Runner(request.param)
    with r.context() as executor:
        r.executor = executor
        yield r


def assert_close(actual, expected, what=""):
    problem = checking.mismatch(tuple(actual), tuple(expected))
    assert problem is None, f"{what}: {problem}"


# --- inputs ------------------------------------------------------------------------------------

def f32(*shape, low=-2.0, high=2.0, dtype=torch.float32):
    return torch.empty(shape, dtype=torch.float32).uniform_(low, high).to(dtype)


def ints(*shape, low=-5, high=6, dtype=torch.int64):
    return torch.randint(low, high, shape, dtype=dtype)


def bools(*shape):
    return torch.rand(shape) > 0.5


# --- building groups -------------------------------------------------------------------------

def prim_group(prim, *args, gid="P0", device=None, **kwargs):
    """A FusionGroup of one prim applied to `args` (tensors, moved to `device`, become input Values)."""
    ctx = TraceContext(NameGen("t"))
    inputs, tensors = [], []

    def to_value(a):
        if isinstance(a, torch.Tensor):
            a = a.to(device) if device is not None else a
            v = Value(f"a{len(inputs)}", a.shape, a.dtype, a.device, "input")
            inputs.append(v)
            tensors.append(a)
            return v
        return a
    vargs = [to_value(a) for a in args]
    with tracing(ctx):
        prim(*vargs, **kwargs)
    (b,) = ctx.bound_symbols
    shapes = [v.shape for v in inputs + list(b.outputs)]
    domain = max(shapes, key=lambda s: (len(s), torch.Size(s).numel()))
    rdims = b.args[1] if b.sym.tags & {prims.REDUCTION} else ()
    rdims = tuple(sorted((rdims,) if isinstance(rdims, int) else rdims))
    return FusionGroup(gid, [b], inputs, list(b.outputs), tuple(domain), rdims), tensors


def function_group(fn, *args, gid="F0", device=None):
    """Trace fn (on `device`) into one FusionGroup of all its prims; every prim must be one
    nvFuser takes. (group, its input tensors, eager result)."""
    if device is not None:
        args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)
    group, tensors = group_from_fn(fn, *args, gid=gid)
    for b in group.bsyms:
        why = can_take(b)
        assert why is None, f"{b.sym.name}: {why}"
    with torch.no_grad():
        return group, tensors, fn(*args)


def run_generated(runner, group, tensors):
    gen = runner.executor.generate(group, runner.device)
    assert gen.runnable, gen.note
    out = gen.fn(*[runner.to(t) for t in tensors])
    expected = gen.eager_fn(*[runner.to(t) for t in tensors])
    assert all(o.is_contiguous() for o in out)
    return gen, out, expected


# --- what nvFuser's inner-outer persistent scheduler takes as one fusion -----------------------

@dataclass
class _Op:
    """An op as the check reads it: its name, the values it reads and makes, and for a reduction
    its dims and which dims of its input are broadcast dims."""

    name: str
    reads: list
    makes: list
    dims: tuple | None = None
    broadcast: tuple = ()


def _ops_of_prims(bsyms) -> list[_Op]:
    """FusionLens prims as a definition of them has them: a size-1 dim is a broadcast dim."""
    out = []
    for b in bsyms:
        reads, makes = [v.name for v in b.inputs()], [o.name for o in b.outputs]
        if b.sym.tags & {prims.REDUCTION}:
            shape = b.args[0].shape
            out.append(_Op(b.sym.name, reads, makes, tuple(sorted(int(d) for d in b.args[1])),
                           tuple(type(s) is int and s == 1 for s in shape)))
        else:
            out.append(_Op(b.sym.name, reads, makes))
    return out


def _ops_of_definition(fd) -> list[_Op]:
    """A definition built on tests/nvfuser_reference.py, as its recorded fd.ops."""
    out = []
    for name, operands, outputs, attributes in fd.log:
        reads = [o.index for o in operands if isinstance(o, ref.Tensor)]
        makes = [o.index for o in outputs]
        if name in ("sum", "max", "min", "prod", "var_mean"):
            (arg,) = [o for o in operands if isinstance(o, ref.Tensor)]
            out.append(_Op(f"fd.ops.{name}", reads, makes, tuple(attributes["dims"]),
                           tuple(a or e for a, e in zip(arg.broadcast, arg.expanded))))
        else:
            out.append(_Op(f"fd.ops.{name}", reads, makes))
    return out


def inner_outer_problem(what, domain=None) -> str | None:
    """Why nvFuser's inner-outer persistent scheduler would not take a definition as one fusion,
    or None where its compile-time check passes: its conditions restated independently of
    support.takes_columns, over a definition built on tests/nvfuser_reference.py (`what`: its fd)
    or over FusionLens's prims (`what`: bsyms over `domain`, a size-1 dim a broadcast dim as the
    definition writes it unsqueezed). From NVIDIA/Fuser
    csrc/scheduler/normalization_inner_outer.cpp (canScheduleCompileTime) and
    csrc/scheduler/normalization_utils.cpp (checkIfReductionsAreInnerOuter: inner reductions
    [I, ..., R, R], outer [R, R, ..., I, I], a broadcast dim neither; isReductionIterationAxisMatched;
    hasSharedInput; isConnectedOnlyThroughReductionProducer)."""
    if isinstance(what, ref.FusionDefinition):
        ops = _ops_of_definition(what)
    else:
        ops = _ops_of_prims(what)
        if any(type(d) is int and d == 1 for d in domain):
            return f"a size-1 (broadcast) dim in the domain {list(domain)}"
    reductions = [o for o in ops if o.dims is not None]
    n = len(domain) if domain is not None else (len(reductions[0].broadcast) if reductions else 0)
    inner, outer = [], []
    for b in reductions:
        if len(b.broadcast) != n:
            return f"{b.name} of a rank-{len(b.broadcast)} value in a rank-{n} domain"
        if any(b.broadcast):
            return f"{b.name} of a value with broadcast dims {b.broadcast}: neither iteration nor reduction dims"
        if b.dims == tuple(range(n - len(b.dims), n)):
            inner.append(b)
        elif b.dims == tuple(range(len(b.dims))):
            outer.append(b)
        else:
            return f"{b.name} over dims {list(b.dims)}: neither [I, .., R] nor [R, .., I]"
    if not inner or not outer:
        return f"{len(inner)} inner and {len(outer)} outer reductions: not an inner-outer fusion"
    if len({b.dims for b in inner}) > 1 or len({b.dims for b in outer}) > 1:
        return "reductions of one kind over different dims"
    if set(outer[0].dims) != set(range(n)) - set(inner[0].dims):
        return "the outer reductions do not reduce exactly the inner ones' iteration dims"
    made = {m: o for o in ops for m in o.makes}

    def fusion_inputs(op, seen) -> set:
        out = set()
        for v in op.reads:
            if v not in seen:
                seen.add(v)
                out |= fusion_inputs(made[v], seen) if v in made else {v}
        return out
    shared = set().union(*(fusion_inputs(b, set()) for b in inner))
    if not shared & set().union(*(fusion_inputs(b, set()) for b in outer)):
        return "the inner and outer reductions share no input"
    for b in outer:
        downstream = set(b.makes)
        for c in ops:
            if set(c.reads) & downstream:
                if not set(c.reads) <= downstream:
                    return f"{c.name} reads an outer reduction's result beside other values"
                downstream |= set(c.makes)
    return None


def built_definitions(generated, group) -> list:
    """The definitions a region's `generated` built (one per input signature it ran on), built
    again on tests/nvfuser_reference.py, to be checked as nvFuser would see them."""
    from fusionlens.executors.nvfuser.definition import build_definition, write_definition

    backend = reference_backend(generated.api)
    return [build_definition(write_definition(group, list(key), generated.api).body, backend)
            for key in generated.definitions]
