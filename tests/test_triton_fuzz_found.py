"""Defects the differential fuzzer (tests/fuzz/, docs/fuzzing.md) found in the Triton executor,
each as the smallest program that showed it, compiled with `executors=["triton"]` and compared
with eager exactly (values, dtypes and the sign of zeros). Off a GPU the kernels run under
Triton's interpreter (the `triton` fixture of tests/conftest.py).
"""

from __future__ import annotations


import pytest
import torch

import compiler

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
pytestmark = pytest.mark.usefixtures("triton")  # tests/conftest.py: the interpreter off a GPU


def _same(fn, *args: torch.Tensor, kernels: int | None = 1) -> None:
    """`fn` compiled for Triton returns exactly eager's results (NaNs and zeros' signs too)."""
    jfn = compiler.jit(fn, executors=["triton"])
    got = jfn(*[a.clone() for a in args])
    want = fn(*[a.clone() for a in args])
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g.isnan(), w.isnan()) if w.is_floating_point() else True
        ok = ~w.isnan() if w.is_floating_point() else torch.ones_like(w, dtype=torch.bool)
        assert torch.equal(g[ok], w[ok]), (g, w)
        if w.is_floating_point():
            assert torch.equal(g[ok].signbit(), w[ok].signbit()), (g, w)  # a NaN's sign is not torch's promise
    entry = jfn.last
    assert entry is not None and not entry.eager_fallback
    if kernels is not None:
        regions = [r for r in entry.compiled.forward.plan.regions if r.executor == "triton"]
        assert len(regions) == kernels, [r.executor for r in entry.compiled.forward.plan.regions]


BOOLS = torch.tensor([True, False, True, False, True, True, False, False], device=DEVICE)


@pytest.mark.parametrize("fn", [lambda x, y: x + x, lambda x, y: x * y + x, lambda x, y: x.clone().add_(y),
                                lambda x, y: x * y, lambda x, y: (x + y) & ~x],
                         ids=["add", "mul_add", "add_", "mul", "add_and"])
def test_bool_add_is_or_and_mul_is_and(fn):
    _same(fn, BOOLS, BOOLS.flip(0))


@pytest.mark.parametrize("fn", [lambda x0, x1: torch.maximum(x1, x0.bfloat16()), lambda x0, x1: x1 * x1.bfloat16(),
                                lambda x0, x1: x1.bfloat16().float() - x1],
                         ids=["maximum", "mul", "round_trip"])
def test_an_explicit_bfloat16_cast_rounds_to_nearest_even(fn):
    g = torch.Generator().manual_seed(0)
    x0, x1 = (torch.randn(64, generator=g).to(DEVICE) for _ in range(2))
    # ties (exactly half a bfloat16 ulp) both ways, and values whose rounding carries into the exponent
    ties = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 2 - 2 ** -9, 255.75, 3.4e38, float("nan"),
                         -0.0], device=DEVICE)
    _same(fn, torch.cat([x0, ties]), torch.cat([x1, ties]))


@pytest.mark.parametrize("op", [torch.logical_and, torch.logical_or, torch.logical_xor])
def test_logical_ops_of_a_0d_float_and_a_vector(op):
    # the 0-d operand is one scalar load: its comparison with 0 must stay a bool when broadcast
    _same(lambda a, b: op(a, b), torch.tensor(1.5, device=DEVICE), torch.tensor([0.0, 2.0, -1.0, 0.0], device=DEVICE))
    _same(lambda a, b: op(b, a > 0), torch.tensor(-0.5, device=DEVICE), torch.tensor([0.0, 2.0, -1.0, 0.0],
                                                                                     device=DEVICE), kernels=None)


def test_round_keeps_the_sign_of_zero_and_is_exact_near_halves():
    x = torch.tensor([-0.0, -0.3, -0.5, 0.5, 1.5, 2.5, -2.5, 0.49999997, -0.49999997, 8388609.0, -8388609.0,
                      16777215.0, float("inf"), float("-inf"), float("nan"), 0.0], device=DEVICE)
    _same(torch.round, x)
    _same(lambda t: torch.atan2(torch.round(t), torch.full_like(t, -1.0)), x[:8])


@pytest.mark.parametrize("fn", [lambda x: torch.softmax(x, -1), lambda x: torch.log_softmax(x, 0),
                                lambda x: torch.softmax(x, 0) & x], ids=["softmax", "log_softmax", "softmax_and"])
def test_softmax_of_an_empty_bool_tensor_is_an_empty_bool_tensor(fn):
    # eager's answer (a non-empty bool softmax raises in eager); the prims run one by one would
    # subtract two bool tensors, which torch refuses. Softmax of an integer or bool tensor is
    # torch's own call since the fuzzer's triton 6708 (log_softmax of one raised): no kernel
    _same(fn, torch.zeros(0, 3, dtype=torch.bool, device=DEVICE), kernels=None)
