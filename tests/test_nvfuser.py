"""Tests of the nvFuser executor (compiler/executors/nvfuser_executor.py).

Every generated FusionDefinition is built and executed: against tests/nvfuser_reference.py
(a torch re-implementation of the nvFuser Python API subset the executor writes, injected as
the `nvfuser_direct` or the older `nvfuser` module) always, and against the real nvFuser
package where it imports and CUDA is available. Results are compared with eager PyTorch.

- translation tests: one FusionGroup per prim of the fusion vocabulary (several dtypes,
  python scalars, broadcasts, keepdim-style shapes): the definition builds and its result
  equals the prim's torch impl;
- groups traced from small functions (softmax, LayerNorm, RMSNorm, GELU, SiLU gate,
  residual + norm, broadcasts, keepdim reductions, mixed dtypes), hand-wrapped in a
  FusionGroup as the fusion pass would;
- input signatures: contiguous, transposed, expanded, size-1 dims each build (and cache)
  their own definition;
- every example in examples/ through the fusion pass with executors=["nvfuser", "torch"]
  (when compiler.fusion.plan_with_fusion exists), with the reference posing as nvFuser;
- the unavailable path: compile on CPU without nvFuser gives correct results and says why
  nvFuser did not run.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler import checking
from compiler.fusion import Decline, FusionGroup, group_from_fn
from compiler.ir import NameGen, TraceContext, Value, tracing
from compiler.ops import prims
from compiler.executors import nvfuser_executor as nx

import nvfuser_reference as ref

REPO = Path(__file__).resolve().parents[1]


def _real_nvfuser() -> bool:
    return torch.cuda.is_available() and nx.load_backend()[0] is not None


REAL = _real_nvfuser()

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

    def context(self):
        if self.kind == "real":
            return _nullcontext()
        return nx.use_backend(ref, api=self.api)

    def to(self, x):
        return x.to(self.device) if isinstance(x, torch.Tensor) else x


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


@pytest.fixture(params=BACKENDS)
def runner(request):
    r = Runner(request.param)
    with r.context():
        yield r


def assert_close(actual, expected, what=""):
    problem = checking.mismatch(tuple(actual), tuple(expected))
    assert problem is None, f"{what}: {problem}"


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
        why = nx.can_take(b)
        assert why is None, f"{b.sym.name}: {why}"
    with torch.no_grad():
        return group, tensors, fn(*args)


def run_generated(runner, group, tensors):
    gen = nx.generate(group, runner.device)
    assert gen.runnable, gen.note
    out = gen.fn(*[runner.to(t) for t in tensors])
    expected = gen.eager_fn(*[runner.to(t) for t in tensors])
    assert all(o.is_contiguous() for o in out)
    return gen, out, expected


# --- translation: one prim at a time ----------------------------------------------------------

def f32(*shape, low=-2.0, high=2.0, dtype=torch.float32):
    return torch.empty(shape, dtype=torch.float32).uniform_(low, high).to(dtype)


def ints(*shape, low=-5, high=6, dtype=torch.int64):
    return torch.randint(low, high, shape, dtype=dtype)


def bools(*shape):
    return torch.rand(shape) > 0.5


POSITIVE = {"log", "log2", "log1p", "sqrt", "rsqrt", "reciprocal"}
UNARY_CASES = []
for _name in sorted(nx.UNARY):
    if _name in ("logical_not",):
        UNARY_CASES.append((_name, lambda: bools(4, 8)))
    elif _name == "bitwise_not":
        UNARY_CASES += [(_name, lambda: bools(4, 8)), (_name, lambda: ints(4, 8, dtype=torch.int32))]
    else:
        for _dt in (torch.float32, torch.float16, torch.bfloat16):
            lo = 0.1 if _name in POSITIVE else -2.0
            UNARY_CASES.append((_name, (lambda lo=lo, dt=_dt: f32(4, 8, low=lo, dtype=dt))))
        if _name in ("abs", "neg", "sign"):
            UNARY_CASES.append((_name, lambda: ints(4, 8)))
        if _name == "isnan":
            UNARY_CASES.append((_name, lambda: torch.tensor([[0.0, float("nan")], [float("inf"), 1.0]])))


@pytest.mark.parametrize("name,make", UNARY_CASES,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(UNARY_CASES)])
def test_unary_prim(runner, name, make):
    group, tensors = prim_group(getattr(prims, name if name != "slice" else "slice_"), make(), device=runner.device)
    gen, out, expected = run_generated(runner, group, tensors)
    assert f"fd.ops.{'logical_not' if name == 'bitwise_not' and tensors[0].dtype == torch.bool else name}(" \
        in gen.source
    assert_close(out, expected, name)


def _binary_cases():
    cases = []
    for name in sorted(nx.BINARY):
        if name.startswith("bitwise"):
            cases += [(name, lambda: (ints(4, 8, dtype=torch.int32), ints(4, 8, dtype=torch.int32))),
                      (name, lambda: (bools(4, 8), bools(4, 8))),
                      (name, lambda: (ints(4, 8), 3))]
            continue
        if name == "pow":
            cases += [(name, lambda: (f32(4, 8, low=0.1), f32(4, 8, low=-1, high=1))),
                      (name, lambda: (f32(4, 8), 2.0)),
                      (name, lambda: (2.0, f32(4, 8))),
                      (name, lambda: (ints(4, 8, low=0, high=4), 3)),
                      (name, lambda: (f32(4, 8, low=0.1, dtype=torch.float16), 0.5))]
            continue
        safe = name in ("div", "remainder")
        lo = 0.5 if safe else -2.0
        cases += [(name, lambda lo=lo: (f32(4, 8), f32(4, 8, low=lo))),
                  (name, lambda lo=lo: (f32(4, 8), 1.5)),
                  (name, lambda lo=lo: (-1.5, f32(4, 8, low=lo))),
                  (name, lambda lo=lo: (f32(4, 8, dtype=torch.float16), f32(4, 8, low=lo, dtype=torch.float16))),
                  (name, lambda lo=lo: (f32(4, 8, dtype=torch.bfloat16), 0.75)),
                  (name, lambda: (f32(4, 1), f32(4, 1, low=0.5)))]
        if name != "div":  # prim operands share one dtype: a div of integers keeps it, torch's does not
            cases += [(name, lambda: (ints(4, 8), ints(4, 8, low=1, high=4))),
                      (name, lambda: (ints(4, 8, dtype=torch.int32), 3))]
        if name in ("eq", "ne"):
            cases.append((name, lambda: (bools(4, 8), bools(4, 8))))
        if name == "remainder":
            cases.append((name, lambda: (f32(4, 8), -1.25)))
    return cases


BINARY_CASES = _binary_cases()


@pytest.mark.parametrize("name,make", BINARY_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BINARY_CASES)])
def test_binary_prim(runner, name, make):
    group, tensors = prim_group(getattr(prims, name), *make(), device=runner.device)
    gen, out, expected = run_generated(runner, group, tensors)
    assert f"fd.ops.{name}(" in gen.source
    assert_close(out, expected, name)


WHERE_CASES = [
    lambda: (bools(4, 8), f32(4, 8), f32(4, 8)),
    lambda: (bools(4, 8), f32(4, 8), 0.0),
    lambda: (bools(4, 8), -1.0, f32(4, 8, dtype=torch.float16)),
    lambda: (bools(4, 8), ints(4, 8), 7),
    lambda: (bools(4, 1), f32(4, 1), f32(4, 1)),
]


@pytest.mark.parametrize("k", range(len(WHERE_CASES)))
def test_where_prim(runner, k):
    group, tensors = prim_group(prims.where, *WHERE_CASES[k](), device=runner.device)
    gen, out, expected = run_generated(runner, group, tensors)
    assert "fd.ops.where(" in gen.source
    assert_close(out, expected, "where")


CASTS = [(torch.float32, torch.float16), (torch.float32, torch.bfloat16), (torch.float16, torch.float32),
         (torch.float32, torch.int32), (torch.float32, torch.int64), (torch.bool, torch.float32),
         (torch.int64, torch.float64), (torch.float16, torch.bfloat16), (torch.int32, torch.bool)]


@pytest.mark.parametrize("src,dst", CASTS, ids=[f"{a}-{b}" for a, b in CASTS])
def test_convert_element_type_prim(runner, src, dst):
    x = bools(4, 8) if src == torch.bool else (ints(4, 8, dtype=src) if not src.is_floating_point
                                                 else f32(4, 8, low=-20, high=20, dtype=src))
    group, tensors = prim_group(prims.convert_element_type, x, dst, device=runner.device)
    gen, out, expected = run_generated(runner, group, tensors)
    assert "fd.ops.cast(" in gen.source
    assert out[0].dtype == dst
    assert_close(out, expected, "cast")


BROADCASTS = [((8,), (4, 8), (1,)), ((4, 1), (4, 8), (0, 1)), ((4,), (4, 1), (0,)), ((), (4, 8), ()),
              ((1, 8), (3, 4, 8), (1, 2)), ((4, 8), (4, 2, 8), (0, 2)), ((4,), (4, 8), (0,))]


@pytest.mark.parametrize("src,shape,dims", BROADCASTS, ids=[str(b) for b in BROADCASTS])
def test_broadcast_in_dim_prim(runner, src, shape, dims):
    group, tensors = prim_group(prims.broadcast_in_dim, f32(*src), shape, dims, device=runner.device)
    gen, out, expected = run_generated(runner, group, tensors)
    assert "fd.ops.broadcast_in_dim(" in gen.source
    assert_close(out, expected, "broadcast_in_dim")


REDUCTION_CASES = [(name, dims, dtype) for name in ("sum", "amax", "amin", "prod")
                   for dims in ((1,), (0,), (0, 1)) for dtype in (torch.float32,)]
REDUCTION_CASES += [("amax", (1,), torch.float16), ("amin", (0,), torch.bfloat16), ("sum", (1,), torch.int64),
                    ("sum", (0, 2), torch.float32), ("amax", (1,), torch.int64), ("prod", (1,), torch.int64),
                    ("amax", (1,), torch.int32)]


@pytest.mark.parametrize("name,dims,dtype", REDUCTION_CASES,
                         ids=[f"{n}-{d}-{t}" for n, d, t in REDUCTION_CASES])
def test_reduction_prim(runner, name, dims, dtype):
    shape = (4, 8, 3) if 2 in dims else (4, 8)
    if dtype == torch.bool:
        x = bools(*shape)
    elif dtype.is_floating_point:
        x = f32(*shape, low=0.5 if name == "prod" else -2, high=1.5 if name == "prod" else 2, dtype=dtype)
    else:
        x = ints(*shape, low=-2, high=3, dtype=dtype)
    group, tensors = prim_group(getattr(prims, name), x, dims, device=runner.device)
    gen, out, expected = run_generated(runner, group, tensors)
    assert f"fd.ops.{nx.REDUCTIONS[name]}(" in gen.source
    assert_close(out, expected, name)


@pytest.mark.parametrize("dims,correction", [((1,), 0), ((1,), 1), ((0, 1), 1), ((0,), 0)])
def test_var_mean_prim(runner, dims, correction):
    group, tensors = prim_group(prims.var_mean, f32(6, 10), dims, correction, device=runner.device)
    gen, out, expected = run_generated(runner, group, tensors)
    assert "fd.ops.var_mean(" in gen.source
    assert len(out) == 2
    assert_close(out, expected, "var_mean")


def test_every_fusion_prim_is_translated():
    """The executor maps every elementwise, broadcast and reduction prim of fusion.py's vocabulary."""
    vocabulary = {n for n, s in prims.ALL.items() if s.tags & {prims.ELEMENTWISE}} | {
        "broadcast_in_dim", "sum", "amax", "amin", "prod", "var_mean"}
    mapped = set(nx.UNARY) | set(nx.BINARY) | set(nx.REDUCTIONS) | nx.OTHERS
    assert vocabulary <= mapped, sorted(vocabulary - mapped)
    tested = ({n for n, _ in UNARY_CASES} | {n for n, _ in BINARY_CASES} | {n for n, _, _ in REDUCTION_CASES}
              | {"where", "convert_element_type", "broadcast_in_dim", "var_mean"})
    assert vocabulary <= tested, sorted(vocabulary - tested)


# --- what the executor declines ----------------------------------------------------------------

def test_can_take_declines_with_reasons():
    cases = [
        (prims.sum, (f32(4, 8, dtype=torch.float16), (1,)), "float32"),
        (prims.var_mean, (f32(4, 8, dtype=torch.bfloat16), (1,), 0), "float32"),
        (prims.reshape, (f32(4, 8), (32,)), "fusion vocabulary"),
        (prims.permute, (f32(4, 8), (1, 0)), "fusion vocabulary"),
        (prims.floor, (ints(4, 8),), "copy"),
        (prims.sum, (f32(4, 8), ()), "no dims"),
        (prims.add, (f32(4, 8, dtype=torch.float64).to(torch.complex64), 1.0), "DataType"),
        (prims.argmax, (f32(4, 8), 1), "fusion vocabulary"),
        # prim uses whose declared dtype is not torch's (decompositions never make them)
        (prims.exp, (ints(4, 8, dtype=torch.int32),), "torch gives a float"),
        (prims.div, (ints(4, 8), ints(4, 8)), "divides truly"),
        (prims.sum, (ints(4, 8, dtype=torch.int32), (1,)), "int64"),
        (prims.sum, (bools(4, 8), (1,)), "int64"),
        (prims.add, (ints(4, 8), 1.5), "share one dtype"),
        (prims.where, (bools(4, 8), ints(4, 8), 0.5), "share one dtype"),
    ]
    for prim, args, words in cases:
        group, _ = prim_group(prim, *args)
        why = nx.can_take(group.bsyms[0])
        assert why is not None and words in why, (prim, why)
        with pytest.raises(Decline):
            nx.definition_source(group)


# --- groups from small functions ---------------------------------------------------------------

def _ln(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def _rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


FUNCTIONS = {
    "softmax": (lambda x: torch.softmax(x, -1), lambda: (f32(8, 32),)),
    "safe_softmax": (lambda x: (lambda e: e / e.sum(-1, keepdim=True))(torch.exp(x - x.amax(-1, keepdim=True))),
                     lambda: (20 * f32(8, 32),)),
    "layernorm": (_ln, lambda: (f32(8, 32), f32(32), f32(32))),
    "rmsnorm": (_rms, lambda: (f32(8, 32), f32(32))),
    "gelu": (lambda x: F.gelu(x), lambda: (f32(8, 32),)),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), lambda: (f32(8, 32),)),
    "silu_gate": (lambda a, b: F.silu(a) * b, lambda: (f32(8, 32), f32(8, 32))),
    "residual_norm": (lambda x, r, w, b: _ln(x + r, w, b), lambda: (f32(8, 32), f32(8, 32), f32(32), f32(32))),
    "bias_row": (lambda x, b: torch.relu(x + b), lambda: (f32(8, 32), f32(32))),
    "col_scale": (lambda x, s: x * s, lambda: (f32(8, 32), f32(8, 1))),
    "keepdim_center": (lambda x: x - x.mean(-1, keepdim=True), lambda: (f32(8, 32),)),
    "keepdim_max_dim0": (lambda x: x.amax(0, keepdim=True) - x, lambda: (f32(8, 32),)),
    "var_mean_3d": (lambda x: torch.var_mean(x, -1), lambda: (f32(2, 8, 32),)),
    "half_softmax": (lambda x: torch.softmax(x.float(), -1).half(), lambda: (f32(8, 32, dtype=torch.float16),)),
    "bf16_rmsnorm": (lambda x, w: _rms(x.float(), w.float()).to(torch.bfloat16),
                     lambda: (f32(8, 32, dtype=torch.bfloat16), f32(32, dtype=torch.bfloat16))),
    "int_times_float": (lambda x, i: x * i + 1, lambda: (f32(8, 32), ints(8, 32))),
    "mask_fill": (lambda x: torch.where(x > 0, x, 0.0) * 2, lambda: (f32(8, 32),)),
    "two_outputs": (lambda x: (torch.exp(x), torch.sigmoid(x) * x), lambda: (f32(8, 32),)),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_group(runner, name):
    fn, make = FUNCTIONS[name]
    group, tensors, eager = function_group(fn, *make(), device=runner.device)
    gen, out, expected = run_generated(runner, group, tensors)
    assert_close(out, expected, f"{name} vs the group's prims")
    eager = eager if isinstance(eager, tuple) else (eager,)
    assert_close(out, eager, f"{name} vs eager torch")
    code = [line.split("#")[0] for line in gen.source.split("def nvfuser_fusion_")[1].splitlines()]
    assert not [c for c in code if "torch." in c]  # every op goes through fd.ops
    assert gen.source.count("fd.add_output(") == len(group.outputs)


# --- input signatures and the definition cache ------------------------------------------------

def test_signatures_build_and_cache_definitions(runner):
    group, tensors, _ = function_group(lambda x, b: torch.softmax(x * b, -1), f32(8, 32), f32(32),
                                       device=runner.device)
    gen = nx.generate(group, runner.device)
    order = [v.name for v in group.inputs]  # the group's input order is its first reads' order
    x, b = runner.to(f32(8, 32)), runner.to(f32(32))
    variants = [
        (x, b),
        (x, b),  # same signature: cached
        (runner.to(f32(32, 8)).t(), b),  # transposed: stride order [0, 1]
        (runner.to(f32(8, 64))[:, ::2], b),  # strided: not contiguous
        (x, runner.to(f32(1)).expand(32)),  # expanded: stride 0
    ]
    for xs, bs in variants:
        named = {"x": xs, "b": bs}
        out = gen.fn(*[named[n] for n in order])
        assert_close(out, (torch.softmax(xs * bs, -1),), "signature")
    assert len(gen.definitions) == 4
    sources = list(gen.definitions.values())
    assert "stride_order=[0, 1]" in sources[1]
    assert "contiguity=[True, False]" in sources[2]  # strides (64, 2): the inner dim is strided
    assert "contiguity=[None]" in sources[3]


def test_tensor_descriptor_follows_nvfuser_convention():
    # The two examples in the comment of nvFuser's computeTensorDescriptor.
    assert nx.tensor_descriptor([2, 1, 3, 1, 4, 3], [12, 4, 4, 4, 1, 0])[1:] == (
        (True, None, True, None, True, None), (5, 4, 3, 2, 1, 0))
    assert nx.tensor_descriptor([2, 3, 1, 5, 4], [28, 4, 14, 0, 1])[1:] == (
        (False, None, True, True, None), (4, 2, 3, 0, 1))
    assert nx.tensor_descriptor([4, 1, 8], [8, 8, 1])[0] == (-1, 1, -1)


def test_size_one_dims_are_broadcast_dims(runner):
    # A [8, 1] input is defined with shape [-1, 1]: nvFuser may expand only broadcast dims.
    group, tensors, eager = function_group(lambda x, s: x * s + s, f32(8, 32), f32(8, 1), device=runner.device)
    gen, out, _ = run_generated(runner, group, tensors)
    assert "shape=[-1, 1]" in gen.source
    assert_close(out, (eager,), "size-1")


# --- the source is a runnable script against either API ---------------------------------------

@pytest.mark.parametrize("api", ["nvfuser_direct", "nvfuser"])
def test_source_runs_as_a_script(monkeypatch, api):
    group, tensors, eager = function_group(_ln, f32(8, 32), f32(32), f32(32))
    source = nx.definition_source(group, api=api, device_type="cpu")
    assert source.splitlines()[0].startswith("# nvFuser FusionDefinition for fusion region F0")
    assert f"from {api} import FusionDefinition, DataType" in source
    monkeypatch.setitem(sys.modules, api, ref)
    namespace: dict = {}
    exec(compile(source, "<definition>", "exec"), namespace)
    fd = namespace["fd"]
    out = fd.execute(tensors)
    assert_close(out, (eager,), "script")
    assert "var_mean" in fd.recorded_ops and "rsqrt" in fd.recorded_ops


# --- never claim nvFuser ran --------------------------------------------------------------------

def test_reference_runs_are_labelled(runner):
    if runner.kind == "real":
        pytest.skip("the real package is labelled by test_real_nvfuser_reports_kernels")
    group, tensors, _ = function_group(lambda x: torch.softmax(x, -1), f32(8, 32), device=runner.device)
    gen, out, _ = run_generated(runner, group, tensors)
    assert gen.executions == 1
    assert gen.nvfuser_ran is False
    assert gen.backend == nx.REFERENCE_LABEL
    assert gen.note.startswith("nvFuser did not run")
    assert gen.cuda_source is None and gen.scheduler is None


def test_without_nvfuser_generate_gives_source_but_does_not_run(monkeypatch):
    monkeypatch.setattr(nx, "_override", None)
    monkeypatch.setattr(nx, "_find_spec", lambda name: None)
    group, tensors, _ = function_group(lambda x: torch.softmax(x, -1), f32(8, 32))
    assert nx.EXECUTOR.available(torch.device("cpu")) == (False, nx.NOT_INSTALLED)
    gen = nx.generate(group, "cpu")
    assert "fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float" in gen.source
    assert "from nvfuser_direct import FusionDefinition, DataType" in gen.source
    assert not gen.runnable and not gen.nvfuser_ran and gen.backend == ""
    assert gen.note == f"nvFuser did not run: {nx.NOT_INSTALLED}. This is the definition that would run."
    assert gen.source.startswith(f"# status: {gen.note}\n# nvFuser FusionDefinition for fusion region F0")
    assert gen.report_code() == gen.source
    with pytest.raises(RuntimeError, match="cannot run here: nvFuser is not installed"):
        gen.fn(*tensors)


def _fake_importer(errors: dict):
    def import_module(name):
        raise errors[name]
    return types.SimpleNamespace(import_module=import_module)


def test_available_reasons(monkeypatch):
    monkeypatch.setattr(nx, "_override", None)
    # nothing installed: said without importing anything, whatever the device
    monkeypatch.setattr(nx, "_loaded", None)
    monkeypatch.setattr(nx, "_find_spec", lambda name: None)
    monkeypatch.setattr(nx, "importlib", _fake_importer({}))  # an import attempt would raise KeyError
    assert nx.EXECUTOR.available("cuda") == (False, "nvFuser is not installed (no module nvfuser_direct or nvfuser)")
    assert nx.EXECUTOR.available("cpu") == (False, "nvFuser is not installed (no module nvfuser_direct or nvfuser)")
    # installed, CPU tensor: not even imported
    monkeypatch.setattr(nx, "_find_spec", lambda name: object() if name == "nvfuser_direct" else None)
    assert nx.EXECUTOR.available(torch.device("cpu")) == (False, "nvFuser needs a CUDA device; this tensor is on cpu")
    assert nx._loaded is None
    # installed but broken: the ImportError text
    monkeypatch.setattr(nx, "importlib", _fake_importer({
        "nvfuser_direct": ImportError("libnvrtc.so.13: cannot open shared object file: No such file or directory"),
        "nvfuser": ModuleNotFoundError("No module named 'nvfuser'", name="nvfuser")}))
    ok, why = nx.EXECUTOR.available("cuda")
    assert not ok and why == ("importing nvfuser_direct failed: ImportError: libnvrtc.so.13: cannot open shared "
                              "object file: No such file or directory")
    # installed and importing, CUDA tensor
    monkeypatch.setattr(nx, "_loaded", (nx.Backend(ref, "nvfuser_direct", "0.2.34"), ""))
    assert nx.EXECUTOR.available(torch.device("cuda", 0)) == (True, "")
    assert nx.EXECUTOR.available(torch.device("cpu")) == (False, "nvFuser needs a CUDA device; this tensor is on cpu")


def test_unavailable_path_through_compile(monkeypatch):
    """On CPU without the hook, compile works through torch and says why nvFuser did not run."""
    monkeypatch.setattr(nx, "_override", None)
    x = f32(8, 32)
    rep = compiler.compile(lambda x: torch.softmax(x, -1) * 2, x, executors=["nvfuser", "torch"])
    assert not [d for d in rep.diagnostics if d.severity == "error"], rep.diagnostics
    expected = nx.NOT_INSTALLED if nx.installed_api() is None else "nvFuser needs a CUDA device; this tensor is on cpu"
    messages = [d.message for d in rep.diagnostics]
    assert f"executor nvfuser is not usable here: {expected}; its work goes to the next executor" in messages
    assert all(r.executor == "torch" for r in rep.regions)


# --- the real package (only where it imports and CUDA is there) --------------------------------

@pytest.mark.skipif(not REAL, reason="nvFuser does not import here or there is no CUDA")
def test_real_nvfuser_reports_kernels():
    group, tensors, eager = function_group(lambda x: torch.softmax(x, -1), f32(64, 1024), device="cuda")
    gen = nx.generate(group, torch.device("cuda"))  # compiles on example inputs
    assert gen.nvfuser_ran and gen.executions >= 1
    assert gen.cuda_source and "__global__" in gen.cuda_source
    assert gen.scheduler  # e.g. "inner_persistent"
    assert gen.source.startswith("# status: ran on nvfuser")
    assert "__global__" in gen.report_code()
    out = gen.fn(*tensors)
    assert_close(out, (eager,), "real")


# --- the examples through the fusion pass -------------------------------------------------------

def _example_targets():
    out = []
    for path in sorted((REPO / "examples").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_nvf_examples_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.parent))
        try:
            spec.loader.exec_module(module)
        except Exception as e:  # noqa: BLE001 - an example that does not import is reported, not hidden
            out.append(pytest.param(path.stem, None, id=path.stem,
                                    marks=pytest.mark.skip(reason=f"import failed: {e}")))
            continue
        finally:
            sys.path.remove(str(path.parent))
        for name in dir(module):
            target = getattr(module, name)
            if callable(target) and getattr(target, "__fusionlens_example__", False):
                out.append(pytest.param(path.stem, target, id=f"{path.stem}.{name}"))
    return out


HAS_PARTITIONER = hasattr(importlib.import_module("compiler.fusion"), "plan_with_fusion")


def _xfail_if_torch_alone_fails(fn, args, kwargs, errors):
    """A compiler bug outside nvFuser (the torch executor alone fails too) is xfail, said so."""
    try:
        alone = compiler.compile(fn, *args, executors=["torch"], **kwargs)
        torch_errors = [d.message for d in alone.diagnostics if d.severity == "error"]
    except Exception as e:  # noqa: BLE001
        torch_errors = [f"{type(e).__name__}: {e}"]
    if torch_errors:
        pytest.xfail(f"not an nvFuser problem: executors=['torch'] fails too: {torch_errors[0]}")


@pytest.mark.skipif(not HAS_PARTITIONER, reason="compiler.fusion.plan_with_fusion has not landed")
@pytest.mark.parametrize("stem,target", _example_targets())
def test_example_through_fusion_pass(runner, stem, target):
    fn, args, *rest = target()
    kwargs = rest[0] if rest else {}
    args = tuple(runner.to(a) for a in args)
    if isinstance(fn, torch.nn.Module):
        fn = fn.to(runner.device)
    try:
        rep = compiler.compile(fn, *args, executors=["nvfuser", "torch"], **kwargs)
        errors = [d.message for d in rep.diagnostics if d.severity == "error"]
    except Exception as e:  # noqa: BLE001 - compared with the torch executor alone below
        rep, errors = None, [f"{type(e).__name__}: {e}"]
    if errors:
        _xfail_if_torch_alone_fails(fn, args, kwargs, errors)
    assert not errors, errors
    nv = [r for r in rep.regions if r.executor == "nvfuser"]
    mapped = set(nx.UNARY) | set(nx.BINARY) | set(nx.REDUCTIONS) | {"where", "var_mean"}
    fusible_on_torch = [r for r in rep.regions if r.executor == "torch" and r.note == ""
                        and any(op.removeprefix("prims.") in mapped for op in r.ops)]
    assert nv or not fusible_on_torch, [(r.id, r.ops) for r in fusible_on_torch]
    for r in nv:
        assert "fd.define_tensor(" in r.code and "fd.add_output(" in r.code
        first = r.code.splitlines()[0]
        if runner.kind == "real":
            assert first.startswith("# status: ran on nvfuser"), first
        else:
            assert first.startswith("# status: nvFuser did not run: this region runs through tests/"), first


# --- the real-package plumbing, with a stand-in that answers like nvFuser -------------------------

FAKE_CUDA = """// Codegen generated code
__global__ void nvfuser_inner_persistent_f0_c1_r0_g0(Tensor<float, 2, 2> T0, Tensor<float, 2, 2> T1) {
}
__global__ void nvfuser_pointwise_f0_c1_r0_g1(Tensor<float, 2, 2> T1, Tensor<float, 2, 2> T2) {
}
"""


def _stand_in(api: str):
    """A module posing as the real package: the reference computes; it answers the CUDA queries."""

    class FusionDefinition(ref.FusionDefinition):
        def execute(self, inputs, **kwargs):
            out = super().execute(inputs, **kwargs)
            if api == "nvfuser_direct":
                self.fec = types.SimpleNamespace(get_cuda_kernel=lambda inputs, intrinsic_code=False, device=0:
                                                 FAKE_CUDA,
                                                 get_most_recent_scheduled_ir=lambda tensor_transforms=False: "IR")
            return out

        def last_cuda_code(self, intrinsic_code=False, **kwargs):
            return FAKE_CUDA

        def last_scheduled_fusion_ir(self, tensor_transforms=False, **kwargs):
            return "IR"

    return types.SimpleNamespace(FusionDefinition=FusionDefinition, DataType=ref.DataType, __version__="0.0-stand-in")


@pytest.mark.parametrize("api", ["nvfuser_direct", "nvfuser"])
def test_real_package_plumbing_with_a_stand_in(monkeypatch, api):
    group, tensors, eager = function_group(lambda x: torch.softmax(x, -1) * 2, f32(8, 32))
    for v in group.inputs:  # the group as traced on a GPU
        v.device = torch.device("cuda")
    monkeypatch.setattr(nx, "_example_inputs", lambda g, device: [t.clone() for t in tensors])
    with nx.use_backend(_stand_in(api), api=api, reference=False):
        assert nx.EXECUTOR.available(torch.device("cpu")) == (False, "nvFuser needs a CUDA device; this tensor is on cpu")
        assert nx.EXECUTOR.available(torch.device("cuda")) == (True, "")
        gen = nx.generate(group, torch.device("cuda"))  # compiles on the example inputs
        assert gen.nvfuser_ran and gen.executions == 1 and gen.runnable
        assert gen.backend == f"{api} 0.0-stand-in"
        assert gen.kernels == 2 and gen.scheduler == "inner_persistent, pointwise"
        assert gen.cuda_source == FAKE_CUDA and gen.scheduled_ir == "IR" and not gen.errors
        assert gen.status() == f"ran on {api} 0.0-stand-in: 2 kernels (inner_persistent, pointwise scheduler)"
        assert gen.source.startswith(f"# status: {gen.status()}\n")
        assert f"from {api} import FusionDefinition, DataType" in gen.source
        assert gen.report_code().endswith(FAKE_CUDA)
        out = gen.fn(*tensors)
        assert gen.executions == 2
        assert_close(out, (eager,), "stand-in")


def test_a_definition_nvfuser_rejects_is_declined(monkeypatch):
    group, tensors, _ = function_group(lambda x: torch.exp(x), f32(8, 32))
    for v in group.inputs:
        v.device = torch.device("cuda")
    monkeypatch.setattr(nx, "_example_inputs", lambda g, device: [t.clone() for t in tensors])

    class Broken(ref.FusionDefinition):
        def execute(self, inputs, **kwargs):
            raise RuntimeError("INTERNAL ASSERT FAILED at csrc/scheduler/registry.cpp\nmore lines")

    fake = types.SimpleNamespace(FusionDefinition=Broken, DataType=ref.DataType, __version__="x")
    with nx.use_backend(fake, reference=False):
        with pytest.raises(Decline, match="nvFuser could not compile this region: RuntimeError: INTERNAL ASSERT "
                                          "FAILED at csrc/scheduler/registry.cpp$"):
            nx.generate(group, torch.device("cuda"))


# --- jit reuse, and inputs nvFuser cannot take ------------------------------------------------------

def test_jit_reuses_the_region_and_its_definitions(runner):
    fn = lambda x, w: F.silu(x) * w + 1  # noqa: E731
    jfn = compiler.jit(fn, executors=["nvfuser", "torch"])
    x, w = runner.to(f32(8, 32)), runner.to(f32(32))
    for _ in range(3):
        assert_close((jfn(x, w),), (fn(x, w),), "jit")
    assert jfn.cache_info()["misses"] == 1 and jfn.cache_info()["hits"] == 2
    regions = [r for r in jfn.last.compiled.plan.regions if r.executor == "nvfuser"]
    assert len(regions) == 1
    xt = runner.to(f32(32, 8)).t()  # a new signature: a new compile
    assert_close((jfn(xt, w),), (fn(xt, w),), "jit transposed")


def test_cpu_tensor_inputs_on_a_cuda_device_are_declined(monkeypatch):
    group, _, _ = function_group(lambda x: torch.exp(x), f32(8, 32))  # traced on the CPU
    with nx.use_backend(_stand_in("nvfuser_direct"), reference=False):
        with pytest.raises(Decline, match="input x is a CPU tensor with 2 dims; nvFuser takes only 0-dim CPU tensors"):
            nx.generate(group, torch.device("cuda"))


def test_inputs_nvfuser_fails_on_run_through_torch_and_say_so(monkeypatch):
    group, tensors, eager = function_group(lambda x: torch.softmax(x, -1), f32(8, 32))
    for v in group.inputs:
        v.device = torch.device("cuda")
    monkeypatch.setattr(nx, "_example_inputs", lambda g, device: [t.clone() for t in tensors])
    stand_in = _stand_in("nvfuser_direct")

    class Picky(stand_in.FusionDefinition):
        def execute(self, inputs, **kwargs):
            if not inputs[0].is_contiguous():
                raise RuntimeError("unsupported allocation domain\nmore")
            return super().execute(inputs, **kwargs)

    stand_in.FusionDefinition = Picky
    with nx.use_backend(stand_in, reference=False):
        gen = nx.generate(group, torch.device("cuda"))
        xt = f32(32, 8).t()
        for _ in range(2):
            assert_close(gen.fn(xt), (torch.softmax(xt, -1),), "fallback")
        assert gen.torch_fallbacks == 2 and gen.executions == 1  # the compile in generate
        assert "RuntimeError: unsupported allocation domain; these inputs run the region's prims through torch" \
            in gen.errors[0]
        assert "2 calls ran through torch instead" in gen.status()
        assert_close(gen.fn(*tensors), (eager,), "contiguous still on nvFuser")
        assert gen.executions == 2
