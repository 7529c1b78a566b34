"""Gradient checks of the autograd rules (fusionlens/middle/autograd/), through the whole pipeline.

Each case is a tiny user function compiled for training by `pipeline.compile_program` on
float64 inputs that require grad, then checked:

- the program really was differentiated by the rule the case is about: the compile did not
  fall back to eager (`traced.eager_only`), the forward trace holds the prim (or the torch
  symbol with a rule) the case names, and the backward calls no generic `vjp_` op (torch's
  autograd re-run in the backward) unless the case says so;
- `torch.autograd.gradcheck` of the compiled program (float64, finite differences), where
  the function is differentiable at its inputs;
- its gradients against eager's (`torch.autograd.grad` with the same cotangent), always:
  this is the only check at ties and zeros, where eager picks a subgradient.

Sections: every prim with a VJP rule (prim_rules.RULES; a test fails if one has no case) and
the non-differentiable prims; every torch symbol with a rule (torch_rules.RULES); the torch
ops models use, differentiated through their decompositions; and a few rules again with the
Triton executor (under its interpreter on a CPU) to show backward regions fuse.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from fusionlens.driver import pipeline
from fusionlens.options import CompileOptions
from fusionlens.middle.autograd import composite_rules, prim_rules, runtime, torch_rules, transform
from fusionlens.ir.trace import BoundSymbol, NameGen, Trace, TraceContext, Value, tracing
from fusionlens.ops import prims as P

F64 = torch.float64
# gradcheck's fast mode compares one random projection of the Jacobian (u^T J v), not all of it;
# every case also compares the whole gradient with eager's for a random cotangent
FAST = os.environ.get("FUSIONLENS_SLOW_GRADCHECK") != "1"


# --- inputs -------------------------------------------------------------------------------

def r(*shape, dtype=F64):
    """Standard normal, requires grad."""
    return torch.randn(shape, dtype=dtype).requires_grad_()


def pos(*shape, dtype=F64):
    """In [0.5, 1.5), requires grad."""
    return (torch.rand(shape, dtype=dtype) + 0.5).requires_grad_()


def u(*shape, dtype=F64):
    """In [-1, 1), requires grad."""
    return (torch.rand(shape, dtype=dtype) * 2 - 1).requires_grad_()


def const(x, dtype=F64):
    """An exact tensor (ties, zeros), requires grad."""
    return torch.tensor(x, dtype=dtype).requires_grad_()


def idx(high, *shape):
    return torch.randint(0, high, shape)


# --- the check ----------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    fn: Callable
    make: Callable  # () -> tuple of arguments (tensors requiring grad, index tensors, ...)
    uses: tuple = ()  # strings the forward trace must hold: "prims.exp(", "torch.nn.functional.linear("
    backward: tuple = ()  # strings the backward trace must hold
    gradcheck: bool = True  # False at non-differentiable points (ties, zeros) or low precision
    generic: bool = False  # the backward may run an op's torch call under torch.autograd
    atol: float = 1e-7
    rtol: float = 1e-7

    def __repr__(self):
        return self.name


def compile_training(fn, args, executors=("torch",)):
    c = pipeline.compile_program(fn, tuple(args), {}, CompileOptions(executors=tuple(executors)))
    assert c.traced.eager_only is None, c.traced.eager_only
    assert c.differentiated is not None, "not compiled for training"
    return c


def _flat(out):
    return [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]


def _tensors(out):
    return [o for o in _flat(out) if o.requires_grad]


def eager_grads(fn, args, cots):
    args = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
    outs = _tensors(fn(*args))
    wrt = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    return torch.autograd.grad(outs, wrt, cots, allow_unused=True)


def check(case: Case, executors=("torch",)):
    args = case.make()
    c = compile_training(case.fn, args, executors)
    fwd = c.forward.traces["forward"].python()
    bwd = c.program("backward").traces["backward"].python()
    for s in case.uses:
        assert s in fwd, f"{case.name}: {s!r} not in the forward trace\n{fwd}"
    for s in case.backward:
        assert s in bwd, f"{case.name}: {s!r} not in the backward trace\n{bwd}"
    if not case.generic:
        assert "vjp_" not in bwd, f"{case.name}: the backward runs an op generically\n{bwd}"
    run = lambda *xs: c.fn(*xs, *c.constants)  # noqa: E731
    wrt = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    outs = _tensors(run(*args))
    cots = [torch.randn_like(o) for o in outs]
    got = torch.autograd.grad(outs, wrt, cots, allow_unused=True)
    want = eager_grads(case.fn, args, cots)
    for i, (g, w) in enumerate(zip(got, want)):
        w = torch.zeros_like(wrt[i]) if w is None else w
        g = torch.zeros_like(wrt[i]) if g is None else g
        torch.testing.assert_close(g, w, atol=case.atol, rtol=case.rtol, equal_nan=True,
                                   msg=lambda m, i=i: f"{case.name}: gradient of input {i} differs from eager: {m}")
    if case.gradcheck:  # of the float outputs only (gradcheck trips over an integer one)
        floats = lambda *xs: tuple(o for o in _flat(run(*xs)) if o.dtype.is_floating_point)  # noqa: E731
        assert torch.autograd.gradcheck(floats, tuple(args), eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=FAST)
    return c


def cases(*items):
    return [pytest.param(c, id=c.name) for c in items]


def prim(name):
    return f"prims.{name}("


# --- every prim with a rule ---------------------------------------------------------------

def _floor_times(op):
    return lambda x: op(x) * x


def _setitem_window(x, y):
    x = x * 1
    x[1:, ::2] = y * 2
    return x * 3


def _copy_into_view(x, y):
    x = x * 1
    x[1:, 1].copy_(y)  # float32 src, cast into x's float64
    return x.exp()


def _setitem_index(x, y):
    x = x.clone()
    x[:, torch.tensor([4, 1])] = y  # one integer index among full slices: a scatter along dim 1
    return x


PRIM_CASES = [
    Case("abs", torch.abs, lambda: (r(3, 4),), (prim("abs"),)),
    Case("neg", lambda x: -x, lambda: (r(3, 4),), (prim("neg"),)),
    Case("exp", torch.exp, lambda: (r(3, 4),), (prim("exp"),)),
    Case("exp2", torch.exp2, lambda: (r(3, 4),), (prim("exp2"),)),
    Case("log", torch.log, lambda: (pos(3, 4),), (prim("log"),)),
    Case("log2", torch.log2, lambda: (pos(3, 4),), (prim("log2"),)),
    Case("log1p", torch.log1p, lambda: (pos(3, 4),), (prim("log1p"),)),
    Case("expm1", torch.expm1, lambda: (r(3, 4),), (prim("expm1"),)),
    Case("sqrt", torch.sqrt, lambda: (pos(3, 4),), (prim("sqrt"),)),
    Case("rsqrt", torch.rsqrt, lambda: (pos(3, 4),), (prim("rsqrt"),)),
    Case("sin", torch.sin, lambda: (r(3, 4),), (prim("sin"),)),
    Case("cos", torch.cos, lambda: (r(3, 4),), (prim("cos"),)),
    Case("tan", torch.tan, lambda: (u(3, 4),), (prim("tan"),)),
    Case("erf", torch.erf, lambda: (r(3, 4),), (prim("erf"),)),
    Case("reciprocal", torch.reciprocal, lambda: (pos(3, 4),), (prim("reciprocal"),)),
    Case("floor", _floor_times(torch.floor), lambda: (r(3, 4),), (prim("floor"),)),
    Case("ceil", _floor_times(torch.ceil), lambda: (r(3, 4),), (prim("ceil"),)),
    Case("round", _floor_times(torch.round), lambda: (r(3, 4),), (prim("round"),)),
    Case("trunc", _floor_times(torch.trunc), lambda: (r(3, 4),), (prim("trunc"),)),
    Case("sign", _floor_times(torch.sign), lambda: (r(3, 4),), (prim("sign"),)),
    Case("add", lambda x, y: x + y, lambda: (r(3, 4), r(3, 4)), (prim("add"),)),
    Case("add-broadcast-scalar", lambda x, y: x + y + 2.0, lambda: (r(3, 4), r(4)),
         (prim("add"), prim("broadcast_in_dim"))),
    Case("add-alpha", lambda x, y: torch.add(x, y, alpha=3.0), lambda: (r(3, 4), r(3, 1)), (prim("add"),)),
    Case("sub", lambda x, y: x - y, lambda: (r(3, 4), r(3, 4)), (prim("sub"),)),
    Case("rsub", lambda x: 2.0 - x, lambda: (r(3, 4),), (prim("sub"),)),
    Case("mul", lambda x, y: x * y, lambda: (r(3, 4), r(3, 4)), (prim("mul"),)),
    Case("mul-scalar", lambda x: x * 3.0, lambda: (r(3, 4),), (prim("mul"),)),
    Case("div", lambda x, y: x / y, lambda: (r(3, 4), pos(3, 4)), (prim("div"),)),
    Case("rdiv", lambda x: 2.0 / x, lambda: (pos(3, 4),), (prim("div"),)),
    Case("pow-scalar-exponent", lambda x: x ** 3, lambda: (r(3, 4),), (prim("pow"),)),
    Case("pow-fractional-exponent", lambda x: x ** 2.5, lambda: (pos(3, 4),), (prim("pow"),)),
    Case("pow-tensor-exponent", torch.pow, lambda: (pos(3, 4), r(3, 4)), (prim("pow"),)),
    Case("pow-scalar-base", lambda y: 2.0 ** y, lambda: (r(3, 4),), (prim("pow"),)),
    Case("pow-base-zero", torch.pow, lambda: (const([0.0, 0.0, 0.0, 2.0, 0.5]), const([2.0, 0.0, 0.5, 0.0, -1.0])),
         (prim("pow"),), gradcheck=False),
    Case("pow-base-zero-negative-exponent", torch.pow, lambda: (const([0.0, 0.0]), const([-1.0, -2.0])),
         (prim("pow"),), gradcheck=False),
    Case("remainder", torch.remainder, lambda: (r(3, 4), pos(3, 4)), (prim("remainder"),)),
    Case("fmod", torch.fmod, lambda: (r(3, 4), pos(3, 4)), (prim("fmod"),)),
    Case("maximum", torch.maximum, lambda: (r(3, 4), r(3, 4)), (prim("maximum"),)),
    Case("minimum", torch.minimum, lambda: (r(3, 4), r(3, 4)), (prim("minimum"),)),
    Case("maximum-ties", torch.maximum, lambda: (const([1.0, 2.0, 3.0]), const([1.0, 0.0, 3.0])),
         (prim("maximum"),), gradcheck=False),
    Case("minimum-ties", torch.minimum, lambda: (const([1.0, 2.0, 3.0]), const([1.0, 0.0, 3.0])),
         (prim("minimum"),), gradcheck=False),
    Case("clamp-min-ties", lambda x: torch.clamp(x, min=0.0), lambda: (const([-1.0, 0.0, 2.0]),),
         (prim("maximum"),), gradcheck=False),
    Case("clamp-ties", lambda x: torch.clamp(x, -1.0, 1.0), lambda: (const([-2.0, -1.0, 0.0, 1.0, 2.0]),),
         (prim("maximum"), prim("minimum")), gradcheck=False),
    Case("where", lambda c, x, y: torch.where(c, x, y), lambda: (torch.rand(3, 4) > 0.5, r(3, 4), r(3, 4)),
         (prim("where"),)),
    Case("where-scalar", lambda x: torch.where(x > 0, x, 0.5), lambda: (r(3, 4),), (prim("where"),)),
    Case("convert_element_type", lambda x: x.to(F64) * 2, lambda: (r(3, 4, dtype=torch.float32),),
         (prim("convert_element_type"),), gradcheck=False, atol=1e-6, rtol=1e-6),
    Case("convert_element_type-down", lambda x: x.float().double(), lambda: (r(3, 4),),
         (prim("convert_element_type"),), gradcheck=False),
    Case("broadcast_in_dim", lambda x: x.expand(3, 4), lambda: (r(1, 4),), (prim("broadcast_in_dim"),)),
    Case("broadcast_in_dim-new-dims", lambda x: torch.broadcast_to(x, (2, 3, 4)), lambda: (r(3, 1),),
         (prim("broadcast_in_dim"),)),
    Case("reshape", lambda x: x.reshape(6, 2) * 1.0, lambda: (r(3, 4),), (prim("reshape"),)),
    Case("permute", lambda x: x.permute(2, 0, 1), lambda: (r(2, 3, 4),), (prim("permute"),)),
    Case("slice-step", lambda x: x[1:5:2], lambda: (r(6, 3),), (prim("slice"),)),
    Case("slice-2d", lambda x: x[:, 1:3], lambda: (r(3, 5),), (prim("slice"),)),
    Case("slice-steps-2d", lambda x: x[::2, 1::3], lambda: (r(5, 7),), (prim("slice"),)),
    Case("slice-step-tail", lambda x: x[..., 1:6:4], lambda: (r(2, 8),), (prim("slice"),)),
    Case("cat", lambda x, y: torch.cat([x, y], 1), lambda: (r(3, 2), r(3, 4)), (prim("cat"),)),
    Case("cat-three", lambda x, y: torch.cat([x, y, x], 0), lambda: (r(2, 3), r(1, 3)), (prim("cat"),)),
    Case("cat-non-float-member", lambda x, i: torch.cat([x, i], 1), lambda: (r(3, 2), idx(5, 3, 2)),
         (prim("cat"),)),
    Case("cat-frozen-member", lambda x: torch.cat([x, torch.ones(3, 1, dtype=F64)], 1), lambda: (r(3, 2),),
         (prim("cat"),)),
    Case("take_along_axis-gather", lambda x, i: torch.gather(x, 1, i), lambda: (r(3, 5), idx(5, 3, 4)),
         (prim("take_along_axis"),)),
    Case("take_along_axis-broadcast-index", lambda x, i: torch.take_along_dim(x, i, 1),
         lambda: (r(3, 5), idx(5, 1, 4)), (prim("take_along_axis"),)),
    Case("take_along_axis-broadcast-input", lambda x, i: torch.take_along_dim(x, i, 1),
         lambda: (r(1, 5), idx(5, 3, 4)), (prim("take_along_axis"),)),
    Case("sum", lambda x: x.sum(1), lambda: (r(3, 4),), (prim("sum"),)),
    Case("sum-all", lambda x: x.sum(), lambda: (r(3, 4),), (prim("sum"),)),
    Case("sum-keepdim", lambda x: x.sum((0, 2), keepdim=True), lambda: (r(2, 3, 4),), (prim("sum"),)),
    Case("amax", lambda x: x.amax(1), lambda: (r(3, 4),), (prim("amax"),)),
    Case("amin", lambda x: x.amin(0), lambda: (r(3, 4),), (prim("amin"),)),
    Case("amax-ties", lambda x: x.amax(1), lambda: (const([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]),), (prim("amax"),),
         gradcheck=False),
    Case("amin-ties", lambda x: x.amin(), lambda: (const([[1.0, 3.0, 1.0], [2.0, 1.0, 2.0]]),), (prim("amin"),),
         gradcheck=False),
    Case("prod", lambda x: x.prod(1), lambda: (r(3, 4),), (prim("prod"),)),
    Case("prod-all", lambda x: x.prod(), lambda: (pos(2, 3),), (prim("prod"),)),
    Case("prod-zeros", lambda x: x.prod(1), lambda: (const([[0.0, 2.0, 3.0], [0.0, 0.0, 2.0], [1.0, 2.0, 3.0]]),),
         (prim("prod"),)),
    Case("var_mean", lambda x: torch.var_mean(x, 1), lambda: (r(3, 4),), (prim("var_mean"),)),
    Case("var_mean-mean-only", lambda x: torch.var_mean(x, 1)[1], lambda: (r(3, 4),), (prim("var_mean"),)),
    Case("var-correction-0", lambda x: x.var(0, correction=0), lambda: (r(3, 4),), (prim("var_mean"),)),
    Case("std", lambda x: x.std(), lambda: (r(3, 4),), (prim("var_mean"),)),
    # the scatters of a view update: the window's cotangent goes to src, the rest to the base
    Case("strided_scatter-slice-step", lambda x, y: torch.slice_scatter(x, y, 1, 1, None, 2),
         lambda: (r(3, 5), r(3, 2)), (prim("strided_scatter"),)),
    Case("strided_scatter-select", lambda x, y: torch.select_scatter(x, y, 0, -1), lambda: (r(3, 4), r(4)),
         (prim("strided_scatter"),)),
    Case("strided_scatter-diagonal", lambda x, y: torch.diagonal_scatter(x, y, -1), lambda: (r(3, 4), r(2)),
         (prim("strided_scatter"),)),
    Case("strided_scatter-setitem", _setitem_window, lambda: (r(4, 5), r(3, 3)), (prim("strided_scatter"),)),
    Case("strided_scatter-broadcast-cast-src", _copy_into_view, lambda: (r(3, 4), r(2, dtype=torch.float32)),
         (prim("strided_scatter"),), gradcheck=False, atol=1e-6, rtol=1e-6),
    Case("scatter-index_copy", lambda x, y: x.index_copy(0, torch.tensor([3, 1]), y), lambda: (r(5, 3), r(2, 3)),
         (prim("scatter"),)),
    Case("scatter-setitem-index", _setitem_index, lambda: (r(2, 5, 3), r(2, 2, 3)), (prim("scatter"),)),
]


@pytest.mark.parametrize("case", cases(*PRIM_CASES))
def test_prim_rule(case):
    check(case)


# Prims no torch op reaches with a gradient: pad and scatter_add (the duals of slice and
# take_along_axis) come only from backward rules, and torch.tanh and torch.sigmoid have rules of
# their own (composite_rules). Their cases build a trace of the prim and differentiate it with
# the transform directly.

def _prim_program(build, tensors):
    """The training program of a trace `build(*input Values)` records, made by the transform
    (no frontend): (callable of the tensors, the Differentiated)."""
    names = NameGen("t")
    inputs = [Value(f"a{i}", t.shape, t.dtype, t.device, "input") for i, t in enumerate(tensors)]
    ctx = TraceContext(names)
    with tracing(ctx):
        out = build(*inputs)
    names.count = 100
    trace = Trace("f", inputs, ctx.bound_symbols, out, "optimised")
    d = transform.differentiate(trace, [t.requires_grad for t in tensors])
    fn = runtime.training_program(d.forward.python_callable(), d.backward.python_callable(), len(inputs),
                                  d.n_results, d.differentiable, d.grad_inputs, lambda *xs: xs[0])
    return fn, d


def _pad_config():
    return [(1, 2, 1), (0, 1, 0), (2, 0, 2)]


TRACE_PRIM_CASES = [  # (prim, case id, build from Values, make tensors, eager function)
    (P.pad, "pad", lambda a: P.pad(a, 0.0, _pad_config()), lambda: (r(2, 3, 2),),
     lambda a: P.pad.impl(a, 0.0, _pad_config())),
    (P.pad, "pad-value", lambda a: P.pad(a, 1.5, [(0, 0, 0), (1, 1, 0)]), lambda: (r(3, 2),),
     lambda a: P.pad.impl(a, 1.5, [(0, 0, 0), (1, 1, 0)])),
    (P.scatter_add, "scatter_add", lambda a, i, s: P.scatter_add(a, i, s, 1), lambda: (r(3, 5), idx(5, 3, 4), r(3, 4)),
     lambda a, i, s: a.scatter_add(1, i, s)),
    (P.strided_window, "strided_window", lambda a: P.strided_window(a, (2, 2), 1, (5, 2)), lambda: (r(3, 5),),
     lambda a: P.strided_window.impl(a, (2, 2), 1, (5, 2))),
    (P.strided_window, "strided_window-of-a-transpose", lambda a: P.strided_window(P.permute(a, (1, 0)), (2, 3), 2,
                                                                                    (1, 4)),
     lambda: (r(3, 4),), lambda a: P.strided_window.impl(a.t(), (2, 3), 2, (1, 4))),
    (P.tanh, "tanh", P.tanh, lambda: (r(3, 4),), torch.tanh),
    (P.sigmoid, "sigmoid", P.sigmoid, lambda: (r(3, 4),), torch.sigmoid),
]


@pytest.mark.parametrize("build,make,eager", [pytest.param(*c[2:], id=c[1]) for c in TRACE_PRIM_CASES])
def test_prim_rule_from_a_trace(build, make, eager):
    args = make()
    fn, d = _prim_program(build, args)
    assert "vjp_" not in d.backward.python()
    assert torch.autograd.gradcheck(fn, args, fast_mode=FAST)
    out = fn(*args)
    g = torch.randn_like(out)
    wrt = [a for a in args if a.requires_grad]
    got = torch.autograd.grad(out, wrt, g)
    want = torch.autograd.grad(eager(*args), wrt, g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_every_prim_rule_has_a_case():
    covered = {s.split("(")[0] for c in PRIM_CASES for s in c.uses if s.startswith("prims.")}
    covered |= {c[0].name for c in TRACE_PRIM_CASES}
    missing = sorted(s.name for s in prim_rules.RULES if s.name not in covered)
    assert not missing, f"prims with a rule and no gradient check: {missing}"


# A non-differentiable prim is kept as it is in the forward and gets no rule; only those that
# can read a float input on the gradient's path are reachable (bitwise ops take ints, full and
# iota no tensor at all)
NON_DIFFERENTIABLE_CASES = [
    Case("comparisons", lambda x, y: x * (x > y) + y * (x <= y) + x * (x == y) + y * (x != y) + x * (x < 0)
         + x * (x >= 1), lambda: (r(3, 4), r(3, 4)),
         tuple(prim(n) for n in ("gt", "le", "eq", "ne", "lt", "ge"))),
    Case("isnan-logical_not", lambda x: torch.where(torch.isnan(x), 0.0, x) * torch.logical_not(x),
         lambda: (r(3, 4),), (prim("isnan"), prim("logical_not"))),
    Case("argmax-argmin", lambda x: (x.argmax(1), x.argmin(0), x * 2), lambda: (r(3, 4),),
         (prim("argmax"), prim("argmin"))),
]


@pytest.mark.parametrize("case", cases(*NON_DIFFERENTIABLE_CASES))
def test_non_differentiable_prims_give_no_gradient(case):
    check(case)


def test_outputs_of_non_differentiable_prims_have_no_grad_fn():
    x = r(3, 4)
    c = compile_training(lambda x: (x.argmax(1), x > 0, x.sum()), (x,))
    idx_, mask, total = c.fn(x, *c.constants)
    assert not idx_.requires_grad and not mask.requires_grad and total.requires_grad
    assert c.differentiated.differentiable == [False, False, True]


# --- every torch symbol with a rule -------------------------------------------------------

def lib(name):
    return f"{name}("


LINEAR, MATMUL = lib("torch.nn.functional.linear"), lib("torch.matmul")
SOFTMAX, LOG_SOFTMAX = lib("torch.nn.functional.softmax"), lib("torch.nn.functional.log_softmax")
SDPA = lib("torch.nn.functional.scaled_dot_product_attention")
# where eager runs the fused CPU kernel: a training forward runs it, the backward its backward (attention_rules)
FLASH, FLASH_BACKWARD = lib("sdpa_flash_cpu"), lib("sdpa_flash_cpu_backward")
EMBEDDING = lib("torch.nn.functional.embedding")
GELU, RELU = lib("torch.nn.functional.gelu"), lib("torch.nn.functional.relu")
LAYER_NORM = lib("layer_norm_with_stats")  # F.layer_norm in a training forward: its statistics kept
NORM = lib("torch.linalg.vector_norm")


def _conv(n):
    return lib(f"torch.nn.functional.conv{n}d")


def _mask(*shape):
    return torch.rand(shape) > 0.3


def _causal_bool(L, S):
    return torch.ones(L, S, dtype=torch.bool).tril()


TORCH_CASES = [
    Case("linear", F.linear, lambda: (r(3, 4), r(5, 4), r(5)), (LINEAR,)),
    Case("linear-no-bias", F.linear, lambda: (r(3, 4), r(5, 4)), (LINEAR,)),
    Case("linear-3d", F.linear, lambda: (r(2, 3, 4), r(5, 4), r(5)), (LINEAR,)),
    Case("linear-1d", F.linear, lambda: (r(4), r(5, 4), r(5)), (LINEAR,)),
    Case("linear-frozen-weight", F.linear, lambda: (r(2, 3, 4), torch.randn(5, 4, dtype=F64)), (LINEAR,)),
    Case("linear-frozen-input", F.linear, lambda: (torch.randn(2, 3, 4, dtype=F64), r(5, 4), r(5)), (LINEAR,)),
    Case("matmul-2d", torch.matmul, lambda: (r(3, 4), r(4, 2)), (MATMUL,)),
    Case("matmul-1d-1d", torch.matmul, lambda: (r(4), r(4)), (MATMUL,)),
    Case("matmul-1d-2d", torch.matmul, lambda: (r(4), r(4, 3)), (MATMUL,)),
    Case("matmul-2d-1d", torch.matmul, lambda: (r(3, 4), r(4)), (MATMUL,)),
    Case("matmul-1d-3d", torch.matmul, lambda: (r(4), r(2, 4, 3)), (MATMUL,)),
    Case("matmul-3d-1d", torch.matmul, lambda: (r(2, 3, 4), r(4)), (MATMUL,)),
    Case("matmul-batched", lambda a, b: a @ b, lambda: (r(2, 3, 4), r(2, 4, 2)), (MATMUL,)),
    Case("matmul-3d-2d", lambda a, b: a @ b, lambda: (r(2, 3, 4), r(4, 2)), (MATMUL,)),
    Case("matmul-broadcast", torch.matmul, lambda: (r(2, 1, 3, 4), r(3, 4, 2)), (MATMUL,)),
    Case("matmul-broadcast-size-1", torch.matmul, lambda: (r(1, 3, 4), r(2, 4, 2)), (MATMUL,)),
    Case("mm", torch.mm, lambda: (r(3, 4), r(4, 2)), (lib("torch.mm"),)),
    Case("bmm", torch.bmm, lambda: (r(2, 3, 4), r(2, 4, 2)), (lib("torch.bmm"),)),
    Case("rmatmul", lambda a, b: b.__rmatmul__(a), lambda: (r(3, 4), r(4, 2)), (lib("torch.Tensor.__rmatmul__"),)),
    Case("rmatmul-1d", lambda a, b: b.__rmatmul__(a), lambda: (r(4), r(2, 4, 3)), (lib("torch.Tensor.__rmatmul__"),)),
    Case("embedding", lambda i, w: F.embedding(i, w), lambda: (idx(6, 2, 5), r(6, 3)), (EMBEDDING,)),
    Case("embedding-padding_idx", lambda i, w: F.embedding(i, w, padding_idx=0),
         lambda: (torch.tensor([[0, 1, 2, 0], [3, 0, 5, 1]]), r(6, 3)), (EMBEDDING,), gradcheck=False),
    Case("embedding-negative-padding_idx", lambda i, w: F.embedding(i, w, padding_idx=-1),
         lambda: (torch.tensor([5, 1, 5, 2]), r(6, 3)), (EMBEDDING,), gradcheck=False),
    Case("embedding-scale_grad_by_freq", lambda i, w: F.embedding(i, w, scale_grad_by_freq=True),
         lambda: (torch.tensor([1, 1, 2, 4, 1]), r(6, 3)), (EMBEDDING,), gradcheck=False),
    Case("conv1d", F.conv1d, lambda: (r(2, 3, 7), r(4, 3, 3), r(4)), (_conv(1),)),
    Case("conv1d-stride-padding-dilation", lambda x, w: F.conv1d(x, w, None, 2, 2, 2),
         lambda: (r(2, 3, 9), r(4, 3, 3)), (_conv(1),)),
    Case("conv2d", F.conv2d, lambda: (r(1, 2, 5, 5), r(3, 2, 3, 3), r(3)), (_conv(2),)),
    Case("conv2d-stride-padding", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 2)),
         lambda: (r(2, 2, 5, 4), r(3, 2, 3, 2), r(3)), (_conv(2),)),
    Case("conv2d-dilation-groups", lambda x, w: F.conv2d(x, w, dilation=2, groups=2),
         lambda: (r(1, 4, 6, 6), r(6, 2, 2, 2)), (_conv(2),)),
    Case("conv2d-depthwise", lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=3),
         lambda: (r(1, 3, 4, 4), r(3, 1, 3, 3), r(3)), (_conv(2),)),
    Case("conv2d-valid", lambda x, w: F.conv2d(x, w, padding="valid"), lambda: (r(1, 2, 4, 4), r(2, 2, 2, 2)),
         (_conv(2),)),
    Case("conv3d", lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=(1, 0, 1)),
         lambda: (r(1, 2, 3, 4, 3), r(2, 2, 2, 2, 2), r(2)), (_conv(3),)),
    Case("conv-frozen-input", F.conv1d, lambda: (torch.randn(2, 3, 7, dtype=F64), r(4, 3, 3)), (_conv(1),)),
    Case("softmax", lambda x: F.softmax(x, -1), lambda: (r(3, 5),), (SOFTMAX,)),
    Case("softmax-dim-0", lambda x: torch.softmax(x, 0), lambda: (r(3, 4, 2),), (SOFTMAX,)),
    Case("softmax-method", lambda x: x.softmax(1), lambda: (r(3, 4, 2),), (SOFTMAX,)),
    Case("softmax-dtype", lambda x: F.softmax(x, 1, dtype=F64), lambda: (r(3, 4, dtype=torch.float32),),
         (SOFTMAX,), gradcheck=False, atol=1e-6, rtol=1e-5),
    Case("softmax-low-precision", lambda x: F.softmax(x.half(), -1).double(), lambda: (r(3, 4),), (SOFTMAX,),
         gradcheck=False, atol=2e-3, rtol=2e-3),
    Case("log_softmax", lambda x: F.log_softmax(x, -1), lambda: (r(3, 5),), (LOG_SOFTMAX,)),
    Case("log_softmax-dim-0", lambda x: torch.log_softmax(x, 0), lambda: (r(3, 4, 2),), (LOG_SOFTMAX,)),
    Case("log_softmax-dtype", lambda x: F.log_softmax(x, 1, dtype=F64), lambda: (r(3, 4, dtype=torch.float32),),
         (LOG_SOFTMAX,), gradcheck=False, atol=1e-6, rtol=1e-5),
    Case("hardtanh", lambda x: F.hardtanh(x, -0.5, 0.8), lambda: (r(3, 4),), (lib("torch.nn.functional.hardtanh"),)),
    Case("hardtanh-at-bounds", F.hardtanh, lambda: (const([-2.0, -1.0, 0.0, 1.0, 2.0]),),
         (lib("torch.nn.functional.hardtanh"),), gradcheck=False),
    Case("relu6", F.relu6, lambda: (r(3, 4) * 4,), (lib("torch.nn.functional.relu6"),)),
    Case("relu6-at-bounds", F.relu6, lambda: (const([-1.0, 0.0, 3.0, 6.0, 7.0]),),
         (lib("torch.nn.functional.relu6"),), gradcheck=False),
    Case("hardsigmoid", F.hardsigmoid, lambda: (r(3, 4) * 4,), (lib("torch.nn.functional.hardsigmoid"),)),
    Case("hardsigmoid-at-kinks", F.hardsigmoid, lambda: (const([-4.0, -3.0, 0.0, 3.0, 4.0]),),
         (lib("torch.nn.functional.hardsigmoid"),), gradcheck=False),
    Case("hardswish", F.hardswish, lambda: (r(3, 4) * 4,), (lib("torch.nn.functional.hardswish"),)),
    Case("hardswish-at-kinks", F.hardswish, lambda: (const([-4.0, -3.0, 0.0, 3.0, 4.0]),),
         (lib("torch.nn.functional.hardswish"),), gradcheck=False),
    Case("hardswish-low-precision", lambda x: F.hardswish(x.bfloat16()).double(), lambda: (r(3, 4) * 4,),
         (lib("torch.nn.functional.hardswish"),), gradcheck=False, atol=1e-2, rtol=1e-2),
    # t.copy_(x) of x's shape and dtype, handed out, runs whole (fuzz backward 7173); a rule of its own
    Case("copy-into-a-made-value", lambda x: torch.log1p(x.abs()).copy_(x), lambda: (r(3, 4),),
         (lib("torch.ops.aten.copy.default"),)),
    Case("max-dim", lambda x: torch.max(x, 1).values, lambda: (r(3, 4),), (lib("torch.max"),)),
    Case("min-dim-keepdim", lambda x: torch.min(x, 0, keepdim=True)[0], lambda: (r(3, 4),), (lib("torch.min"),)),
    Case("max-dim-negative", lambda x: x.max(-1)[0], lambda: (r(2, 3, 4),), (lib("torch.max"),)),
    Case("max-dim-ties", lambda x: torch.max(x, 1).values, lambda: (const([[1.0, 3.0, 3.0], [2.0, 2.0, 1.0]]),),
         (lib("torch.max"),), gradcheck=False),
    Case("min-dim-keepdim-ties", lambda x: torch.min(x, 1, keepdim=True).values,
         lambda: (const([[1.0, 1.0, 3.0], [2.0, 0.0, 0.0]]),), (lib("torch.min"),), gradcheck=False),
    Case("max-all", lambda x: x.max(), lambda: (r(3, 4),), (lib("torch.max"),)),
    Case("max-all-ties", lambda x: x.max(), lambda: (const([[1.0, 3.0, 3.0], [3.0, 2.0, 1.0]]),),
         (lib("torch.max"),), gradcheck=False),
    Case("min-0d", lambda x: torch.min(x, 0)[0] + x.min(), lambda: (r(),), (lib("torch.min"),)),
    Case("max-binary", lambda x, y: torch.max(x, y), lambda: (r(3, 4), r(3, 4)), (lib("torch.max"),)),
    Case("min-binary-broadcast", lambda x, y: torch.min(x, y), lambda: (r(3, 4), r(4)), (lib("torch.min"),)),
    Case("max-binary-mixed-dtype", lambda x, y: torch.max(x, y), lambda: (r(3, 4), r(3, 1, dtype=torch.float32)),
         (lib("torch.max"),), gradcheck=False, atol=1e-6, rtol=1e-6),
    Case("max-binary-ties", lambda x, y: torch.max(x, y), lambda: (const([1.0, 2.0, 3.0]), const([1.0, 0.0, 3.0])),
         (lib("torch.max"),), gradcheck=False),
    Case("vector_norm", lambda x: torch.linalg.vector_norm(x, dim=1), lambda: (r(3, 4),), (NORM,)),
    Case("vector_norm-all", torch.linalg.vector_norm, lambda: (r(3, 4),), (NORM,)),
    Case("vector_norm-keepdim-dims", lambda x: torch.linalg.vector_norm(x, 2, (0, -1), keepdim=True),
         lambda: (r(2, 3, 4),), (NORM,)),
    Case("vector_norm-at-zero", lambda x: torch.linalg.vector_norm(x, dim=1),
         lambda: (const([[0.0, 0.0], [3.0, 4.0]]),), (NORM,), gradcheck=False),
    Case("normalize-zero-row", lambda x: F.normalize(x, dim=1), lambda: (const([[0.0, 0.0], [3.0, 4.0]]),),
         (NORM,), gradcheck=False),
    Case("normalize", lambda x: F.normalize(x, dim=-1), lambda: (r(3, 4),), (NORM,)),
    Case("sdpa", F.scaled_dot_product_attention, lambda: (r(1, 2, 3, 4), r(1, 2, 5, 4), r(1, 2, 5, 3)), (SDPA,)),
    Case("sdpa-3d", F.scaled_dot_product_attention, lambda: (r(2, 3, 4), r(2, 3, 4), r(2, 3, 4)), (SDPA,)),
    Case("sdpa-bool-mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
         lambda: (r(1, 2, 3, 4), r(1, 2, 4, 4), r(1, 2, 4, 4), _causal_bool(3, 4) | _mask(3, 4)), (FLASH,),
         (FLASH_BACKWARD,)),
    Case("sdpa-float-mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
         lambda: (r(1, 2, 3, 4), r(1, 2, 4, 4), r(1, 2, 4, 4), r(1, 1, 3, 4)), (SDPA,)),
    Case("sdpa-frozen-float-mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
         lambda: (r(2, 3, 4), r(2, 4, 4), r(2, 4, 4), torch.randn(3, 4, dtype=F64)), (SDPA,)),
    Case("sdpa-causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         lambda: (r(1, 2, 4, 3), r(1, 2, 4, 3), r(1, 2, 4, 3)), (FLASH,), (FLASH_BACKWARD,)),
    Case("sdpa-causal-rectangular", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         lambda: (r(1, 3, 3), r(1, 5, 3), r(1, 5, 2)), (SDPA,)),
    Case("sdpa-scale", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3),
         lambda: (r(1, 2, 3, 4), r(1, 2, 3, 4), r(1, 2, 3, 4)), (FLASH,), (FLASH_BACKWARD,)),
    Case("addmm", torch.addmm, lambda: (r(5), r(3, 4), r(4, 5)), ("torch.addmm(",)),
    Case("addmm-scaled", lambda i, a, b: torch.addmm(i, a, b, beta=0.5, alpha=-2.0),
         lambda: (r(3, 1), r(3, 4), r(4, 5)), ("torch.addmm(",)),
    Case("sdpa-gqa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
         lambda: (r(2, 4, 3, 4), r(2, 2, 3, 4), r(2, 2, 3, 5)), (SDPA,)),
    Case("sdpa-gqa-one-kv-head-masked", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                                                          enable_gqa=True),
         lambda: (r(1, 3, 2, 4), r(1, 1, 5, 4), r(1, 1, 5, 4), r(1, 3, 2, 5)), (SDPA,)),
    Case("sdpa-broadcast-batch", F.scaled_dot_product_attention, lambda: (r(2, 3, 4), r(1, 3, 4), r(1, 3, 4)),
         (SDPA,)),
    Case("sdpa-broadcast-heads", F.scaled_dot_product_attention,
         lambda: (r(2, 3, 4, 4), r(2, 1, 5, 4), r(1, 3, 5, 2)), (SDPA,)),
]


@pytest.mark.parametrize("case", cases(*TORCH_CASES))
def test_torch_rule(case):
    check(case)


def test_every_torch_rule_has_a_case():
    covered = {s.split("(")[0] for c in TORCH_CASES for s in c.uses}
    missing = sorted({s.name for s in torch_rules.RULES} - covered)  # RULES is keyed by symbol
    assert not missing, f"torch symbols with a rule and no gradient check: {missing}"


GENERIC_CASES = [  # arguments a rule does not cover: torch.autograd on the op's call, in the backward
    Case("conv2d-same", lambda x, w: F.conv2d(x, w, padding="same"), lambda: (r(1, 2, 4, 4), r(2, 2, 3, 3)),
         (_conv(2),), ("vjp_conv2d",), generic=True),
    Case("conv1d-unbatched", F.conv1d, lambda: (r(3, 7), r(4, 3, 3)), (_conv(1),), ("vjp_conv1d",), generic=True),
]


@pytest.mark.parametrize("case", cases(*GENERIC_CASES))
def test_generic_rule_takes_what_a_rule_does_not_cover(case):
    check(case)


def test_module_parameters_get_gradients():
    """nn.Linear / nn.Conv2d / nn.Embedding: parameters are program constants that require grad."""
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.Flatten(), torch.nn.Linear(48, 5),
                                torch.nn.LogSoftmax(-1)).double()
    x = r(2, 2, 4, 4)
    c = compile_training(model, (x,))
    assert "vjp_" not in c.program("backward").traces["backward"].python()
    params = list(model.parameters())
    assert all(any(p is k for k in c.constants) for p in params)
    run = lambda x, *ps: c.fn(x, *ps)  # noqa: E731
    assert torch.autograd.gradcheck(run, (x, *c.constants), fast_mode=True)
    g = torch.randn(2, 5, dtype=F64)
    got = torch.autograd.grad(c.fn(x, *c.constants), [x, *params], g)
    want = torch.autograd.grad(model(x), [x, *params], g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


# --- the torch ops models use, differentiated through their decompositions -------------

def _bn_eval(x, w, b):
    rm, rv = torch.linspace(-0.5, 0.5, x.shape[1], dtype=F64), torch.linspace(0.5, 1.5, x.shape[1], dtype=F64)
    return F.batch_norm(x, rm, rv, w, b, training=False)


_STATS = [torch.zeros(4, dtype=F64), torch.ones(4, dtype=F64)]  # updated by every call; gradients do not read them
# momentum=None: the factor read from num_batches_tracked as the program runs (frontend/value_guards.py)
_BN_CUMULATIVE = torch.nn.BatchNorm1d(4, momentum=None, affine=False, dtype=F64).train()


def _ce_targets(n, c, ignored=()):
    t = idx(c, n)
    for i in ignored:
        t[i] = -100
    return t


SWEEP_CASES = [
    Case("layer_norm", lambda x, w, b: F.layer_norm(x, (4,), w, b), lambda: (r(2, 3, 4), r(4), r(4)),
         (LAYER_NORM,)),
    Case("layer_norm-no-affine-2d", lambda x: F.layer_norm(x, (3, 4)), lambda: (r(2, 3, 4),), (LAYER_NORM,)),
    Case("rms_norm", lambda x, w: F.rms_norm(x, (4,), w, eps=1e-6), lambda: (r(2, 3, 4), r(4)), (prim("rsqrt"),)),
    Case("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), lambda: (r(2, 4, 3), r(4), r(4)),
         (prim("var_mean"),)),
    # batch_norm runs whole in both modes (composite_rules): its forward is eager's to the bit; in
    # training as an op that also returns the statistics its backward reads
    Case("batch_norm-eval", _bn_eval, lambda: (r(3, 4, 2), r(4), r(4)), (lib("torch.nn.functional.batch_norm"),)),
    Case("batch_norm-train", lambda x, w, b: F.batch_norm(x, _STATS[0], _STATS[1], w, b, training=True),
         lambda: (r(3, 4, 2), r(4), r(4)), (lib("batch_norm_with_update"),)),
    Case("batch_norm-train-no-stats", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
         lambda: (r(3, 4, 2), r(4), r(4)), (lib("batch_norm_with_stats"),)),
    Case("batch_norm-train-cumulative", lambda x: _BN_CUMULATIVE(x), lambda: (r(3, 4, 2),),
         (lib("batch_norm_cumulative_with_update"),)),
    # aten's native forms called directly: their returned statistics read, the op not run again
    Case("native_batch_norm-train", lambda x, w, b: torch.native_batch_norm(x, w, b, *_STATS, True, 0.1, 1e-5)[0],
         lambda: (r(3, 4, 2), r(4), r(4)), (lib("torch.native_batch_norm"),)),
    Case("native_batch_norm_legit-no-stats",
         lambda x, w, b: torch._native_batch_norm_legit(x, w, b, True, 0.1, 1e-5)[0],
         lambda: (r(3, 4, 2), r(4), r(4)), (lib("torch._native_batch_norm_legit"),)),
    Case("batch_norm_with_update",
         lambda x, w: torch.ops.aten._batch_norm_with_update(x, w, None, *_STATS, 0.1, 1e-5)[0],
         lambda: (r(3, 4, 2), r(4)), (lib("torch.ops.aten._batch_norm_with_update"),)),
    Case("gelu", F.gelu, lambda: (r(3, 4),), (GELU,)),
    Case("gelu-tanh", lambda x: F.gelu(x, approximate="tanh"), lambda: (r(3, 4),), (GELU,)),
    Case("silu", F.silu, lambda: (r(3, 4),), (lib("torch.nn.functional.silu"),)),
    Case("relu", F.relu, lambda: (r(3, 4),), (RELU,)),
    Case("relu-at-zero", torch.relu, lambda: (const([-1.0, 0.0, 1.0]),), (RELU,), gradcheck=False),
    Case("tanh", torch.tanh, lambda: (r(3, 4),), (lib("torch.tanh"),)),
    Case("sigmoid", F.sigmoid, lambda: (r(3, 4),), (lib("torch.sigmoid"),)),
    Case("softplus", lambda x: F.softplus(x * 10, beta=0.5, threshold=5.0), lambda: (r(3, 4),), (prim("log1p"),)),
    Case("mish", F.mish, lambda: (r(3, 4),), (prim("log1p"), lib("torch.tanh"))),
    Case("leaky_relu", lambda x: F.leaky_relu(x, 0.2), lambda: (r(3, 4),), (prim("where"),)),
    Case("elu", F.elu, lambda: (r(3, 4),), (prim("expm1"),)),
    Case("cross_entropy", F.cross_entropy, lambda: (r(4, 5), idx(5, 4)), (prim("take_along_axis"),)),
    Case("cross_entropy-ignore_index", lambda x, t: F.cross_entropy(x, t, ignore_index=-100),
         lambda: (r(5, 3), _ce_targets(5, 3, (1, 3))), (prim("take_along_axis"),)),
    Case("cross_entropy-sum", lambda x, t: F.cross_entropy(x, t, reduction="sum"),
         lambda: (r(3, 4), idx(4, 3)), (prim("take_along_axis"),)),
    Case("nll_loss", lambda x, t: F.nll_loss(F.log_softmax(x, -1), t), lambda: (r(4, 5), idx(5, 4)),
         (prim("take_along_axis"), LOG_SOFTMAX)),
    Case("nll_loss-none", lambda x, t: F.nll_loss(x, t, reduction="none"), lambda: (r(4, 5), idx(5, 4)),
         (prim("take_along_axis"),)),
    Case("mse_loss", F.mse_loss, lambda: (r(3, 4), r(3, 4)), (prim("sum"),)),
    Case("mean", lambda x: x.mean((0, 2)), lambda: (r(2, 3, 4),), (prim("sum"),)),
    Case("var", lambda x: x.var(1, keepdim=True), lambda: (r(3, 4),), (prim("var_mean"),)),
    Case("std-unbiased-false", lambda x: torch.std(x, 0, unbiased=False), lambda: (r(3, 4),), (prim("var_mean"),)),
    Case("logsumexp", lambda x: torch.logsumexp(x, 1), lambda: (r(3, 4),), (prim("amax"),)),
    Case("getitem-index", lambda x, i: x[i], lambda: (r(5, 3), torch.tensor([0, 2, 2, 4])),
         (prim("take_along_axis"),)),
    Case("getitem-slices", lambda x: x[:, 1:3] * x[-1, 1:3], lambda: (r(4, 5),), (prim("slice"),)),
    Case("getitem-none-ellipsis-int", lambda x: x[None, ..., 1] + x[1:, None, 2], lambda: (r(3, 4),),
         (prim("slice"),)),
    Case("gather", lambda x, i: torch.gather(x, 0, i), lambda: (r(4, 3), idx(4, 5, 3)), (prim("take_along_axis"),)),
    Case("index_select", lambda x, i: x.index_select(1, i), lambda: (r(3, 4), torch.tensor([3, 0, 3])),
         (prim("take_along_axis"),)),
    Case("flip", lambda x: x.flip(1), lambda: (r(3, 4),), (prim("take_along_axis"),)),
    Case("cat-stack", lambda x, y: torch.stack([x, y], 1).sum(0) + torch.cat([x, y]).sum(0),
         lambda: (r(2, 3), r(2, 3)), (prim("cat"),)),
    Case("split-chunk", lambda x: x.split([1, 3], 1)[1] * x.chunk(2, 1)[0].sum(), lambda: (r(3, 4),),
         (prim("slice"),)),
    Case("transpose-permute", lambda x: x.transpose(0, 2).permute(1, 0, 2), lambda: (r(2, 3, 4),),
         (prim("permute"),)),
    Case("reshape-view", lambda x: x.reshape(4, 6).view(2, 12).flatten() * x.view(-1), lambda: (r(2, 3, 4),),
         (prim("reshape"),)),
    Case("expand-unsqueeze", lambda x: x.unsqueeze(1).expand(3, 2, 4) * x[:, None, :] + x[:, None].squeeze(1)[:, None],
         lambda: (r(3, 4),), (prim("broadcast_in_dim"),)),
    Case("pow-tensor", lambda x, y: x.pow(y) + y ** x, lambda: (pos(3, 4), pos(3, 4)), (prim("pow"),)),
    Case("pow-square", lambda x: x.pow(2) + x ** 0.5, lambda: (pos(3, 4),), (prim("mul"),)),
    Case("clamp", lambda x: x.clamp(-0.5, 0.5), lambda: (r(3, 4),), (prim("maximum"),)),
    Case("clamp-tensor-bounds", lambda x, lo, hi: torch.clamp(x, lo, hi), lambda: (r(3, 4), r(3, 4) - 1, r(4) + 1),
         (prim("maximum"),)),
    Case("where", lambda x, y: torch.where(x > y, x * 2, y), lambda: (r(3, 4), r(3, 4)), (prim("where"),)),
    Case("square-mean", lambda x: (x * x).mean(), lambda: (r(3, 4),), (prim("sum"),)),
]

LIBRARY_SWEEP = [  # library calls with no rule of their own: the generic rule
    Case("cumsum", lambda x: torch.cumsum(x, 1), lambda: (r(3, 4),), (lib("torch.cumsum"),), ("vjp_cumsum",),
         generic=True),
    Case("topk-values", lambda x: torch.topk(x, 2, 1).values, lambda: (r(3, 4),), (lib("torch.topk"),),
         generic=True),
    Case("sort-values", lambda x: x.sort(1)[0] * 2, lambda: (r(3, 4),), (lib("torch.sort"),), generic=True),
    Case("norm", lambda x: x.norm(), lambda: (r(3, 4),), (), generic=True),
    Case("getitem-mask", lambda x, m: x[m], lambda: (r(3, 4), torch.rand(3, 4) > 0.5), (), generic=True),
    Case("cross_entropy-3d", lambda x, t: F.cross_entropy(x, t, reduction="sum"),
         lambda: (r(2, 4, 3), idx(4, 2, 3)), (), generic=True),
    Case("cross_entropy-label_smoothing", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
         lambda: (r(4, 5), idx(5, 4)), (), generic=True),
]


def test_every_composite_rule_has_a_case():
    covered = {s.split("(")[0] for c in SWEEP_CASES + TORCH_CASES + TRITON_CASES for s in c.uses}
    missing = sorted({s.name for s in composite_rules.RULES} - covered)  # RULES is keyed by symbol
    assert not missing, f"torch symbols with a composite rule and no gradient check: {missing}"


@pytest.mark.parametrize("case", cases(*SWEEP_CASES))
def test_decomposed_op(case):
    check(case)


@pytest.mark.parametrize("case", cases(*LIBRARY_SWEEP))
def test_library_op_without_a_rule(case):
    check(case)


def test_batch_norm_training_updates_running_stats_once():
    """Training-mode batch_norm with running statistics runs whole (it updates them in place):
    the gradients are eager's, and a forward and backward update the statistics as eager's do."""
    x, w, b = r(3, 4, 2), r(4), r(4)
    stats = [torch.zeros(4, dtype=F64), torch.ones(4, dtype=F64)]
    eager_stats = [s.clone() for s in stats]
    fn = lambda x, w, b: F.batch_norm(x, stats[0], stats[1], w, b, training=True)  # noqa: E731
    c = compile_training(fn, (x, w, b))
    for s, e in zip(stats, [torch.zeros(4, dtype=F64), torch.ones(4, dtype=F64)]):
        s.copy_(e)  # compiling ran the function once
    g = torch.randn(3, 4, 2, dtype=F64)
    got = torch.autograd.grad(c.fn(x, w, b, *c.constants), [x, w, b], g)
    fe = lambda x, w, b: F.batch_norm(x, eager_stats[0], eager_stats[1], w, b, training=True)  # noqa: E731
    want = torch.autograd.grad(fe(x, w, b), [x, w, b], g)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e)
    for s, e in zip(stats, eager_stats):
        torch.testing.assert_close(s, e)


# --- backward regions fuse: a few rules again with the Triton executor ----------------------
# Triton generates no float64, so these run in float32 and compare with eager's gradients at
# float32 tolerances. Without a GPU the kernels run under Triton's interpreter (slow: tiny sizes),
# which needs TRITON_INTERPRET=1 when triton is first imported (see tests/test_triton.py).

def _triton_problem() -> str | None:
    if torch.cuda.is_available():
        return None
    try:
        import numpy  # noqa: F401  (the interpreter's)
    except ImportError:
        return "Triton's interpreter needs numpy"
    if "triton" not in sys.modules:
        old = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1"
        try:
            import triton  # noqa: F401  (decorates its standard library for the interpreter)
        except ImportError:
            return "no triton"
        finally:
            if old is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = old
    from fusionlens.executors.triton import support
    return support._interpreter_problem()


F32 = torch.float32
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _r32(*shape):
    return torch.randn(shape, dtype=F32, device=DEVICE).requires_grad_()


TRITON_CASES = [
    Case("softmax-of-scaled", lambda x: F.softmax(x * 2.0, -1), lambda: (_r32(4, 8),), (SOFTMAX,)),
    Case("layer_norm-gelu", lambda x, w, b: F.gelu(F.layer_norm(x, (8,), w, b)),
         lambda: (_r32(4, 8), _r32(8), _r32(8)), (LAYER_NORM,)),
    Case("slice-cat-amax", lambda x: torch.cat([x[:, ::2], x[:, 1:3]], 1).amax(1), lambda: (_r32(4, 8),),
         (prim("slice"), prim("cat"), prim("amax"))),
    Case("prod-maximum", lambda x, y: torch.maximum(x, y).prod(1), lambda: (_r32(4, 6), _r32(4, 6)),
         (prim("prod"), prim("maximum"))),
    Case("hardswish-max-dim", lambda x: F.hardswish(x * 4).max(1).values, lambda: (_r32(4, 8),),
         (lib("torch.nn.functional.hardswish"), lib("torch.max"))),
]


@pytest.mark.parametrize("case", cases(*TRITON_CASES))
def test_backward_regions_fuse_with_triton(case, monkeypatch):
    problem = _triton_problem()
    if problem:
        pytest.skip(problem)
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    case = Case(case.name, case.fn, case.make, case.uses, gradcheck=False, atol=1e-5, rtol=1e-4)
    c = check(case, executors=("triton", "torch"))
    regions = c.program("backward").plan.regions
    fused = [r for r in regions if r.executor == "triton"]
    assert fused, [(r.id, r.executor, r.note) for r in regions]
    assert any(len(r.bsyms) > 1 for r in fused), "no backward region fuses more than one op"


# --- what stops a gradient in eager must stop it in the program ------------------------------

def test_detach_stops_the_gradient():
    # no gradcheck: finite differences see through detach(); eager's gradients are the reference
    check(Case("detach", lambda x, w: F.linear(x, w.detach()) * w.sum(), lambda: (r(3, 4), r(5, 4)), (LINEAR,),
               gradcheck=False))


def test_no_grad_block_stops_the_gradient():
    def f(x):
        with torch.no_grad():
            y = x * 2
        return x * y
    check(Case("no_grad", f, lambda: (r(3, 4),), gradcheck=False))


# --- the collectives (fusionlens/distributed/autograd_rules.py): one rule reads each issue's `grad` ---

def _issued(sym, x: Value, **kwargs):
    """`sym(x, a 2-rank group, **kwargs)` recorded in a fresh trace context: (its op, the context)."""
    from fusionlens.distributed.vocabulary import Group

    ctx = TraceContext(NameGen("t", 0, {"x", "g"}))
    with tracing(ctx):
        sym(x, Group("0", (0, 1)), **kwargs)
    return ctx.bound_symbols[-1], ctx


@pytest.mark.parametrize("grad", ["none", "identity", "reduce_scatter"])
def test_one_rule_serves_every_issued_collective_as_its_grad_says(grad):
    """No gradient (a functional collective, dist.*: where a cotangent reaches one, Unsupported at
    its line, training runs eagerly as eager's autograd differentiates it), the cotangent unchanged
    (tensor parallel's g), or reduce-scattered back, the mean over the ranks (FSDP2's all-gather);
    the wait hands its cotangent to what it waited for."""
    from fusionlens.distributed import autograd_rules, symbols as S
    from fusionlens.distributed.vocabulary import ReduceOp

    x = Value("x", (4, 3), torch.float32, "cpu", "input")
    sym = S.ALL_REDUCE if grad == "identity" else S.ALL_GATHER
    issue, ctx = _issued(sym, x, grad=S.Grad(grad))
    g = Value("g", issue.outputs[0].shape, torch.float32, "cpu")
    assert autograd_rules.RULES[S.WAIT](BoundSymbol(S.WAIT, (issue.outputs[0],), {}, [x]), [g]) == [
        (issue.outputs[0], g)]
    assert autograd_rules.RULES[sym](issue, [None]) == []
    if grad == "none":
        with tracing(ctx), pytest.raises(transform.Unsupported, match="collective of the user's code") as raised:
            autograd_rules.RULES[sym](issue, [g])
        assert raised.value.where is issue.provenance
        return
    with tracing(ctx):
        pairs = autograd_rules.RULES[sym](issue, [g])
    if grad == "identity":
        assert pairs == [(x, g)]
    else:
        scatter = ctx.bound_symbols[-1]
        assert scatter.sym is S.REDUCE_SCATTER and scatter.args == (g, issue.args[1]), scatter
        assert scatter.kwargs == {"op": ReduceOp.AVG} and pairs == [(x, scatter.outputs[0])]
        assert scatter.outputs[0].shape == x.shape


def test_a_reduce_scatter_the_backward_issues_moves_up_to_its_input():
    """autograd_rules.issue_early: FSDP2's reduce-scatter, issued where autograd reaches the
    prefetched all-gather, runs right after the op that completes the gradient it sends."""
    from fusionlens.distributed import autograd_rules, symbols as S
    from fusionlens.distributed.vocabulary import Group

    x = Value("x", (4, 3), torch.float32, "cpu", "input")
    ctx = TraceContext(NameGen("t", 0, {"x"}))
    with tracing(ctx):
        g = P.mul(x, 2.0)
        P.exp(x)  # what autograd records between the gradient and the all-gather's rule
        S.WAIT(S.REDUCE_SCATTER(g, Group("0", (0, 1))))
    made, other, scatter, wait = ctx.bound_symbols
    backward, unsaved = autograd_rules.issue_early([], [made, other, scatter, wait], set())
    assert [b.sym for b in backward] == [P.mul, S.REDUCE_SCATTER, P.exp, S.WAIT] and unsaved == []
