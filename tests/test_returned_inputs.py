"""A program that returns one of its inputs, or a view of one, returns it as eager does.

Eager returns the caller's tensor itself (`out[1] is x`) and a view of it that shares its
storage (`out[1]._base is x`). An inference program does so as printed; a training program runs
in a torch.autograd.Function, which would hand back a new view with its own grad_fn, so
middle/autograd/runtime.py returns the caller's tensor, and makes a view again from it, outside
the Function. Checked here, in training and inference, on the first call and the cached ones:
identity, requires_grad, gradients flowing to x through the returned tensor exactly as
eager's, and an in-place update of the returned tensor seen in x.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import compiler


def _pair(x, w):
    y = x * w
    return y, x


def _views(x):
    return x * 2, x[0], x.t()


def _shifted(x, w):  # saves neither operand for its backward: x may be updated after the call
    return x + w, x


def _updated(x, w):
    x.mul_(2)
    return x + w, x


CALLS = 3  # the first call (compiled), then the cached ones (fusionlens/driver/fast_path.py)


@pytest.mark.parametrize("x_grad,w_grad", [(True, True), (False, True), (True, False)],
                         ids=["both", "w-only", "x-only"])
def test_a_training_program_returns_the_callers_tensor(x_grad, w_grad):
    jfn = compiler.jit(_pair)
    for _ in range(CALLS):
        x, w = torch.randn(3, 4, requires_grad=x_grad), torch.randn(3, 4, requires_grad=w_grad)
        y, same = jfn(x, w)
        assert same is x and same.requires_grad == x_grad
        torch.testing.assert_close(y, x * w)
        dy = torch.randn_like(y)
        (y * dy).sum().backward()
        if x_grad:
            same.sum().backward()  # through the returned object: accumulates into x.grad
        if x_grad:
            torch.testing.assert_close(x.grad, w.detach() * dy + 1)
        if w_grad:
            torch.testing.assert_close(w.grad, x.detach() * dy)
    assert jfn.cache_info()["compiles"] == 1


def test_an_inference_program_returns_the_callers_tensor():
    jfn = compiler.jit(_pair)
    with torch.no_grad():
        for _ in range(CALLS):
            x, w = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4)
            y, same = jfn(x, w)
            assert same is x and not y.requires_grad
            torch.testing.assert_close(y, x * w)


def test_an_in_place_update_of_the_returned_tensor_is_seen_in_x():
    jfn = compiler.jit(_shifted)
    for _ in range(CALLS):
        a = torch.randn(3, 4, requires_grad=True)
        w = torch.randn(3, 4, requires_grad=True)
        x, x_eager = a * 1.5, a * 1.5  # non-leaves: eager allows their in-place update
        (y, same), (y_e, same_e) = jfn(x, w), _shifted(x_eager, w)
        same.add_(3.0)
        same_e.add_(3.0)
        torch.testing.assert_close(x, x_eager)
        dy = torch.randn_like(y)
        got = torch.autograd.grad((y * dy).sum() + (same ** 2).sum(), [a, w])
        want = torch.autograd.grad((y_e * dy).sum() + (same_e ** 2).sum(), [a, w])
        torch.testing.assert_close(got, want)


def test_an_in_place_update_of_a_returned_leaf_that_requires_grad_raises_as_eager():
    jfn = compiler.jit(_pair)
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        _pair(x, w)[1].add_(1.0)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        jfn(x, w)[1].add_(1.0)


@pytest.mark.parametrize("grad", [True, False], ids=["training", "inference"])
def test_views_of_an_input_share_its_storage(grad):
    jfn = compiler.jit(_views)
    for _ in range(CALLS):
        a = torch.randn(3, 3, requires_grad=True)
        x, x_eager = a * 1.0, a * 1.0
        with torch.set_grad_enabled(grad):
            out, want = jfn(x), _views(x_eager)
            for got, expected in zip(out[1:], want[1:]):
                assert got._base is x and got.data_ptr() == x.data_ptr() + (expected.data_ptr() - x_eager.data_ptr())
                assert (got.shape, got.stride(), got.requires_grad) == (expected.shape, expected.stride(),
                                                                         expected.requires_grad)
            torch.testing.assert_close(list(out), list(want))
            out[1].mul_(-1.0)  # through the view: x changes, as eager's does
            want[1].mul_(-1.0)
            torch.testing.assert_close(x, x_eager)
            torch.testing.assert_close(out[2], want[2])  # another view of x sees it
        if grad:
            dy = torch.randn(3, 3)
            got = torch.autograd.grad((out[0] * dy).sum() + out[1].sum() + (out[2] * dy).sum(), a)
            expected = torch.autograd.grad((want[0] * dy).sum() + want[1].sum() + (want[2] * dy).sum(), a)
            torch.testing.assert_close(got, expected)


def test_a_view_of_a_leaf_flows_its_gradient_into_x():
    jfn = compiler.jit(_views)
    x = torch.randn(3, 3, requires_grad=True)
    _, row, t = jfn(x)
    assert row._base is x and t._base is x
    (row.sum() * 2 + (t * torch.arange(9.0).view(3, 3)).sum()).backward()
    expected = torch.arange(9.0).view(3, 3).t().clone()
    expected[0] += 2
    torch.testing.assert_close(x.grad, expected)


def test_an_input_updated_in_place_is_returned_itself():
    jfn = compiler.jit(_updated)
    for grad_x in (True, False):
        a = torch.randn(2, 5, requires_grad=True)
        w = torch.randn(2, 5, requires_grad=True)
        x, x_eager = (a * 1.0, a * 1.0) if grad_x else (torch.randn(2, 5),) * 2
        x_eager = x_eager.clone()
        (y, same), (y_e, same_e) = jfn(x, w), _updated(x_eager, w)
        assert same is x
        torch.testing.assert_close(x, x_eager)
        grads = [a, w] if grad_x else [w]
        got = torch.autograd.grad(y.sum() * 3 + (same * y).sum(), grads)
        want = torch.autograd.grad(y_e.sum() * 3 + (same_e * y_e).sum(), grads)
        torch.testing.assert_close(got, want)


def test_a_modules_parameter_returned_is_the_parameter():
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(4))

        def forward(self, x):
            return x * self.weight, self.weight

    model = Scale()
    jm = compiler.jit(model)
    for _ in range(CALLS):
        y, weight = jm(torch.randn(2, 4, requires_grad=True))
        assert weight is model.weight
        (y.sum() + weight.sum()).backward()
    x = torch.ones(2, 4)
    model.weight.grad = None
    y, weight = jm(x)
    (y.sum() + weight.sum()).backward()
    torch.testing.assert_close(model.weight.grad, torch.full((4,), 3.0))


def _no_grad_view(x, w):
    with torch.no_grad():
        v = x[0]
    return x * w, v, v * w


def test_a_view_made_under_no_grad_runs_eagerly_and_says_why():
    """Eager's `x[0]` under no_grad requires grad but has no grad_fn: no gradient reaches x
    through it. The program's would carry one: its gradient check sees eager's outputs that
    carry gradients are not the program's, and the signature runs eagerly with that error at
    the function (it used to raise from autograd inside the check, where eager raises nothing)."""
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, requires_grad=True)
    jfn = compiler.jit(_no_grad_view)
    for _ in range(CALLS):
        grads = []
        for out in (jfn(x, w), _no_grad_view(x, w)):
            x.grad = w.grad = None
            (out[0].sum() + (out[1] * 2).sum() + out[2].sum()).backward()
            grads.append((x.grad.clone(), w.grad.clone(), out[1].grad_fn, out[2].requires_grad))
        (gx, gw, fn, rg), (ex, ew, efn, erg) = grads
        torch.testing.assert_close(gx, ex)
        torch.testing.assert_close(gw, ew)
        assert fn is None and efn is None and rg == erg
    assert jfn.last.eager_fallback and jfn.cache_info()["compiles"] == 1
    assert any("require grad are not the compiled program's" in d.message
               for d in compiler.last_report(jfn).diagnostics)
