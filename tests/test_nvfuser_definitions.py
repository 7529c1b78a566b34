"""Tests of the nvFuser executor's definitions (fusionlens/executors/nvfuser/definition.py and
support.py): what it takes and the FusionDefinition it writes.

Every generated FusionDefinition is built and executed: against tests/nvfuser_reference.py
(a torch re-implementation of the nvFuser Python API subset the executor writes, as the
`nvfuser_direct` or the older `nvfuser` module) always, and against the real nvFuser
package where it imports and CUDA is available. Results are compared with eager PyTorch.

- translation tests: one FusionGroup per prim of the fusion vocabulary (several dtypes,
  python scalars, broadcasts, keepdim-style shapes): the definition builds and its result
  equals the prim's torch impl;
- what the executor declines, and why;
- groups traced from small functions (softmax, LayerNorm, RMSNorm, GELU, SiLU gate,
  residual + norm, broadcasts, keepdim reductions, mixed dtypes), hand-wrapped in a
  FusionGroup as the fusion pass would;
- input signatures: contiguous, transposed, expanded, size-1 dims each build (and cache)
  their own definition;
- the source is a runnable script against either API.

The executor itself (availability, labels, the real-package plumbing, the fusion pass, jit)
is tested in tests/test_nvfuser.py.
"""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F

from fusionlens.middle.contract import Decline
from fusionlens.executors.nvfuser import definition, support
from fusionlens.ops import prims

import nvfuser_reference as ref
from nvfuser_testing import (  # noqa: F401 - runner is a fixture
    assert_close, bools, f32, function_group, ints, names, prim_group, run_generated, runner)


# --- translation: one prim at a time ----------------------------------------------------------

POSITIVE = {"log", "log2", "log1p", "sqrt", "rsqrt", "reciprocal"}
UNARY_CASES = []
for _name in sorted(names(support.UNARY)):
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
    group, tensors = prim_group(getattr(prims, name), make(), device=runner.device)
    gen, out, expected = run_generated(runner, group, tensors)
    assert f"fd.ops.{'logical_not' if name == 'bitwise_not' and tensors[0].dtype == torch.bool else name}(" \
        in gen.source
    assert_close(out, expected, name)


def _binary_cases():
    cases = []
    for name in sorted(names(support.BINARY)):
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
                    ("amax", (1,), torch.int32), ("sum", (0,), torch.bfloat16), ("sum", (1,), torch.float16)]


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
    assert f"fd.ops.{support.REDUCTIONS[getattr(prims, name)]}(" in gen.source
    if name == "sum" and dtype in support.LOW_PRECISION:  # accumulated in Float, as torch does, rounded once
        assert "= fd.ops.cast(a0, dtype=DataType.Float)" in gen.source and \
            f"fd.ops.cast(t0, dtype=DataType.{support.DTYPES[dtype]})" in gen.source, gen.source
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
    mapped = names(support.UNARY, support.BINARY, support.REDUCTIONS, support.OTHERS)
    assert vocabulary <= mapped, sorted(vocabulary - mapped)
    tested = ({n for n, _ in UNARY_CASES} | {n for n, _ in BINARY_CASES} | {n for n, _, _ in REDUCTION_CASES}
              | {"where", "convert_element_type", "broadcast_in_dim", "var_mean"})
    assert vocabulary <= tested, sorted(vocabulary - tested)


# --- what the executor declines ----------------------------------------------------------------

def test_can_take_declines_with_reasons():
    cases = [
        (prims.prod, (f32(4, 8, dtype=torch.float16), (1,)), "float32"),
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
        why = support.can_take(group.bsyms[0])
        assert why is not None and words in why, (prim, why)
        with pytest.raises(Decline):
            definition.definition_source(group)


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
    gen = runner.executor.generate(group, runner.device)
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
    assert support.tensor_descriptor([2, 1, 3, 1, 4, 3], [12, 4, 4, 4, 1, 0])[1:] == (
        (True, None, True, None, True, None), (5, 4, 3, 2, 1, 0))
    assert support.tensor_descriptor([2, 3, 1, 5, 4], [28, 4, 14, 0, 1])[1:] == (
        (False, None, True, True, None), (4, 2, 3, 0, 1))
    assert support.tensor_descriptor([4, 1, 8], [8, 8, 1])[0] == (-1, 1, -1)


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
    source = definition.definition_source(group, api=api, device_type="cpu")
    assert source.splitlines()[0].startswith("# nvFuser FusionDefinition for fusion region F0")
    assert f"from {api} import FusionDefinition, DataType" in source
    monkeypatch.setitem(sys.modules, api, ref)
    namespace: dict = {}
    exec(compile(source, "<definition>", "exec"), namespace)
    fd = namespace["fd"]
    out = fd.execute(tensors)
    assert_close(out, (eager,), "script")
    assert "var_mean" in fd.recorded_ops and "rsqrt" in fd.recorded_ops

