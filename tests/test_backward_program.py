"""The shape of a training compile's backward program: what it frees, and what it computes.

Each test also checks the gradients against eager's on fresh random inputs: a leaner program
that computes something else is no improvement.
"""

from __future__ import annotations

import copy
import weakref

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

import compiler
from fusionlens.driver import checking, pipeline
from fusionlens.frontend import tracer as frontend


def grads_match_eager(fn, args, wrt):
    jfn = compiler.jit(fn)
    got_out = jfn(*args)
    cot = torch.randn_like(got_out)
    got = torch.autograd.grad(got_out, wrt, cot)
    expected = torch.autograd.grad(fn(*args), wrt, cot)
    for i, (a, e) in enumerate(zip(got, expected)):
        assert checking.grad_mismatch(a, e) is None, f"gradient {i}: {checking.grad_mismatch(a, e)}"
    assert not jfn.last.eager_fallback
    return compiler.last_report(jfn)


class _Log(TorchFunctionMode):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.log.append(("op", getattr(func, "__name__", str(func))))
        return func(*args, **(kwargs or {}))


def test_the_backward_frees_each_saved_activation_after_its_last_use():
    # eager's autograd frees a node's saved tensors once it has run; a program that held them
    # all to its return would keep the whole forward's activations alive through the backward
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))
    x = torch.randn(16, 8)
    c = pipeline.compile_program(model, (x,), {})
    d = c.differentiated
    inputs = frontend.user_tensors(model, (x,), {}) + c.constants
    with torch.no_grad():
        outs = c.forward.fn(*inputs)
    saved = list(outs[d.n_results:])
    del outs
    log: list = []
    activations = [i for i, t in enumerate(saved) if not any(t is u for u in inputs)]
    assert len(activations) >= 3, [v.name for v in d.saved]
    for i in activations:
        weakref.finalize(saved[i], log.append, ("freed", i))
    cotangent = torch.randn(16, 4)
    with _Log(log):
        grads = c.program("backward").fn(saved, cotangent)
    assert saved == [] and len(grads) == len(d.grad_inputs)
    # the program's own ops (not the grad-mode switch around it)
    ops = [k for k, (kind, what) in enumerate(log) if kind == "op" and what != "_set_grad_enabled"]
    freed = {what: k for k, (kind, what) in enumerate(log) if kind == "freed"}
    assert sorted(freed) == activations, log
    assert all(k < ops[-1] for k in freed.values()), f"an activation lived to the end: {log}"
    grads_match_eager(model, (torch.randn(16, 8, requires_grad=True),), list(model.parameters()))


def test_retain_graph_keeps_the_saved_tensors_for_a_second_backward():
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1))
    jfn = compiler.jit(model)
    x = torch.randn(4, 8)
    loss = jfn(x).sum()
    first = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
    second = torch.autograd.grad(loss, list(model.parameters()))
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def test_a_stem_convolution_computes_no_input_gradient():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, stride=2))
    images = torch.randn(2, 3, 9, 9)
    report = grads_match_eager(model, (images,), list(model.parameters()))
    code = report.program("backward").traces["execution"]
    # the second conv's input (the first's output) needs its gradient, the images do not
    assert code.count("convolution_backward_input(") == 1, code
    assert code.count("convolution_backward_weight(") == 2, code
    x = torch.randn(2, 3, 9, 9, requires_grad=True)
    report = grads_match_eager(model, (x,), [x, *model.parameters()])
    assert report.program("backward").traces["execution"].count("convolution_backward_input(") == 2


def test_the_gradient_of_a_split_is_one_cat():
    proj = nn.Linear(16, 48)

    def attention_inputs(x):
        q, k, v = proj(x).split(16, dim=-1)
        return (q * k).sum(-1, keepdim=True) * v

    x = torch.randn(2, 5, 16, requires_grad=True)
    report = grads_match_eager(attention_inputs, (x,), [x, *proj.parameters()])
    code = report.program("backward").traces["execution"]
    assert "prims.cat(" in code and "prims.pad(" not in code, code


def test_pieces_that_do_not_tile_the_dim_keep_their_pads():
    def two_of_three(x):
        a, _, c = x.split([2, 3, 3], dim=0)
        return a.sum(0) * c.exp().sum(0)

    x = torch.randn(8, 4, requires_grad=True)
    code = grads_match_eager(two_of_three, (x,), [x]).program("backward").traces["execution"]
    assert "prims.pad(" in code and "prims.cat(" not in code, code


def _eval_batch_norm():
    bn = nn.BatchNorm2d(6).eval()
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.normal_()
    return bn


def test_norms_run_whole_and_give_eagers_results_exactly():
    # LayerNorm and BatchNorm run whole in a training forward, whose results are then eager's
    # to the bit; their backwards recompute the statistics with torch's own kernels (training)
    # or read the running ones (evaluation mode), as eager's backward does
    for norm, shape in ((nn.LayerNorm(12), (3, 5, 12)), (nn.BatchNorm2d(6).train(), (4, 6, 5, 5)),
                        (_eval_batch_norm(), (4, 6, 5, 5))):
        twin = copy.deepcopy(norm)
        x = torch.randn(*shape, requires_grad=True)
        cot = torch.randn(*shape)
        out, expected_out = compiler.jit(norm)(x), twin(x)
        assert torch.equal(out, expected_out), type(norm).__name__
        got = torch.autograd.grad(out, [x, *norm.parameters()], cot)
        expected = torch.autograd.grad(expected_out, [x, *twin.parameters()], cot)
        for a, e in zip(got, expected):
            assert torch.equal(a, e), (type(norm).__name__, norm.training, float((a - e).abs().max()))
