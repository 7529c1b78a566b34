"""Training: compiled forward and backward through autograd behave as eager does.

Gradients of the compiled program against eager's on fresh random inputs and cotangents;
autograd's semantics through `compiler.jit` (loss.backward(), accumulation, retain_graph,
no_grad, frozen parameters, optimizer steps without a recompile); training-mode modules
(dropout's masks, BatchNorm's running statistics); the report's backward section on the
training examples; and the check itself failing on a wrong backward rule.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler
from fusionlens.driver import checking
from fusionlens.middle.autograd import prim_rules
from fusionlens.ops import prims
from fusionlens.driver.targets import compile_target

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def grads_close(actual, expected):
    for i, (a, e) in enumerate(zip(actual, expected)):
        problem = checking.grad_mismatch(a, e)
        assert problem is None, f"gradient {i}: {problem}"


class Block(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return x + self.proj(F.gelu(self.fc(self.norm(x)), approximate="tanh"))


def test_gradients_match_eager_and_the_backward_is_compiled():
    model = Block()
    jfn = compiler.jit(model)
    x = torch.randn(3, 5, 16, requires_grad=True)
    out = jfn(x)
    assert type(out.grad_fn).__name__ == "CompiledFunctionBackward"
    cot = torch.randn_like(out)
    wrt = [x, *model.parameters()]
    grads_close(torch.autograd.grad(out, wrt, cot), torch.autograd.grad(model(x), wrt, cot))
    report = compiler.last_report(jfn)
    assert report.training is not None and report.program("backward").regions
    assert sorted(report.training.grad_inputs) == sorted(["x", "p_fc_weight", "p_fc_bias", "p_proj_weight",
                                                          "p_proj_bias", "p_norm_weight", "p_norm_bias"])
    # backward regions differentiate this file's lines
    assert all(s.file == __file__ for r in report.program("backward").regions for s in r.source_lines)
    # fresh inputs of the same signature reuse the program and still match
    y = torch.randn(3, 5, 16, requires_grad=True)
    grads_close(torch.autograd.grad(jfn(y), [y], cot), torch.autograd.grad(model(y), [y], cot))
    assert jfn.cache_info()["misses"] == 1


def test_backward_accumulation_retain_graph_and_optimizer_steps_as_eager():
    torch.manual_seed(0)
    model = Block()
    twin = copy.deepcopy(model)
    jfn = compiler.jit(model)
    opt, twin_opt = (torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, twin))
    x = torch.randn(4, 16)
    for _ in range(3):
        loss = jfn(x).pow(2).mean()
        loss.backward(retain_graph=True)
        loss.backward()  # retain_graph: a second backward through the same graph accumulates
        twin_loss = twin(x).pow(2).mean()
        twin_loss.backward(retain_graph=True)
        twin_loss.backward()
        grads_close([p.grad for p in model.parameters()], [p.grad for p in twin.parameters()])
        opt.step(), twin_opt.step()
        opt.zero_grad(), twin_opt.zero_grad()
    grads_close(list(model.parameters()), list(twin.parameters()))
    assert jfn.cache_info()["misses"] == 1  # parameters updated in place: no recompile


def test_no_grad_and_frozen_parameters():
    model = Block()
    jfn = compiler.jit(model)
    x = torch.randn(2, 16)
    with torch.no_grad():
        assert jfn(x).grad_fn is None
    model.fc.weight.requires_grad_(False)
    jfn(x).sum().backward()
    assert model.fc.weight.grad is None and model.fc.bias.grad is not None
    report = compiler.last_report(jfn)
    assert "p_fc_weight" not in report.training.grad_inputs and "p_fc_bias" in report.training.grad_inputs
    model.fc.weight.requires_grad_(True)
    jfn(x).sum().backward()
    assert model.fc.weight.grad is not None
    assert jfn.cache_info()["misses"] == 3  # inference, frozen, unfrozen


def test_an_input_no_gradient_reaches_keeps_grad_none_as_in_eager():
    """Unused, or used only through a non-differentiable op: eager leaves .grad None (an
    optimizer then skips it; weight decay would move a zero gradient's parameter)."""
    def f(x, unused, index_only, floored):
        return (x * 2).sum() + x[index_only.argmax()] + floored.floor().sum()  # floor's: zeros, not None

    def inputs():
        torch.manual_seed(3)
        return [torch.randn(4, requires_grad=True) for _ in range(4)]
    want, got = inputs(), inputs()
    f(*want).backward()
    compiler.jit(f)(*got).backward()
    assert [t.grad is None for t in got] == [t.grad is None for t in want] == [False, True, True, False]
    torch.testing.assert_close(got[0].grad, want[0].grad)
    torch.testing.assert_close(got[3].grad, want[3].grad)
    model = nn.ModuleDict({"used": nn.Linear(3, 2), "idle": nn.Linear(3, 2)})
    compiler.jit(lambda x: model["used"](x).sum())(torch.randn(2, 3)).backward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.5)
    before = model["idle"].weight.detach().clone()
    opt.step()
    assert model["idle"].weight.grad is None and torch.equal(model["idle"].weight, before)


def test_structured_results_and_non_differentiable_outputs():
    w = torch.randn(8, 8, requires_grad=True)

    def fn(x):
        h = torch.tanh(x @ w)
        return {"h": h, "best": h.argmax(-1), "pair": (h.sum(), x.shape[0])}

    x = torch.randn(3, 8, requires_grad=True)
    out = compiler.jit(fn)(x)
    ref = fn(x)
    assert out["pair"][1] == 3 and not out["best"].requires_grad and out["best"].dtype == torch.int64
    loss, ref_loss = out["h"].square().sum() + out["pair"][0], ref["h"].square().sum() + ref["pair"][0]
    grads_close(torch.autograd.grad(loss, [x, w]), torch.autograd.grad(ref_loss, [x, w]))


def test_dropout_takes_eagers_masks_in_training_mode():
    model = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.3), nn.ReLU(), nn.Linear(32, 4)).train()
    jfn = compiler.jit(model)
    x = torch.randn(8, 16, requires_grad=True)
    cot = torch.randn(8, 4)
    for _ in range(2):  # the same random stream gives the same masks, call after call
        torch.manual_seed(7)
        got = jfn(x)
        g = torch.autograd.grad(got, [x, model[0].weight], cot)
        torch.manual_seed(7)
        ref = model(x)
        e = torch.autograd.grad(ref, [x, model[0].weight], cot)
        assert checking.mismatch(got.detach(), ref.detach()) is None
        grads_close(g, e)
    assert "bernoulli" in compiler.last_report(jfn).forward.traces["forward"]


def test_attention_dropout_takes_eagers_masks_and_is_differentiated_natively():
    # SDPA draws its dropout mask inside the kernel; a training forward runs it as torch's math
    # path does, with the mask in the open (what HF models pass in train mode: dropout_p=0.1)
    def attention(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.25, enable_gqa=True)

    q = torch.randn(2, 4, 6, 8, requires_grad=True)
    k, v = (torch.randn(2, 2, 6, 8, requires_grad=True) for _ in range(2))
    mask = torch.randn(2, 1, 6, 6)
    jfn = compiler.jit(attention)
    cot = torch.randn(2, 4, 6, 8)
    for _ in range(2):
        torch.manual_seed(11)
        got = jfn(q, k, v, mask)
        g = torch.autograd.grad(got, [q, k, v], cot)
        torch.manual_seed(11)
        ref = attention(q, k, v, mask)
        assert checking.mismatch(got.detach(), ref.detach()) is None
        grads_close(g, torch.autograd.grad(ref, [q, k, v], cot))
    assert not jfn.last.eager_fallback
    report = compiler.last_report(jfn)
    assert "bernoulli" in report.forward.traces["forward"] and "vjp_" not in report.program("backward").traces["backward"]
    with torch.no_grad():  # inference keeps the one fused call
        jfn(q, k, v, mask)
    assert "scaled_dot_product_attention(" in compiler.last_report(jfn).forward.traces["execution"]


def test_multihead_attention_with_dropout_runs_eagerly_and_says_why():
    # nn.MultiheadAttention draws its mask inside multi_head_attention_forward, which has no
    # rule: a generic backward would draw another. The signature runs eagerly (eager's
    # gradients, for the same seed), and the warning names the op; without dropout it compiles.
    for dropout in (0.1, 0.0):
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=dropout, batch_first=True).train()
        twin = copy.deepcopy(layer)
        x = torch.randn(2, 5, 16, requires_grad=True)
        jfn = compiler.jit(layer)
        cot = torch.randn(2, 5, 16)
        torch.manual_seed(3)
        got = torch.autograd.grad(jfn(x), [x, *layer.parameters()], cot)
        torch.manual_seed(3)
        grads_close(got, torch.autograd.grad(twin(x), [x, *twin.parameters()], cot))
        warnings = [d.message for d in compiler.last_report(jfn).diagnostics if d.severity == "warning"]
        if dropout:
            assert jfn.last.eager_fallback
            assert any("multi_head_attention_forward draws its dropout mask" in m for m in warnings), warnings
            where = [(d.file, d.line) for d in compiler.last_report(jfn).diagnostics if "draws its dropout" in d.message]
            assert where[0][0] == __file__, where  # the user's line that calls the layer
        else:
            assert not jfn.last.eager_fallback, warnings


def test_batch_norm_training_updates_running_statistics_once_per_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).train()
    twin = copy.deepcopy(model)
    jfn = compiler.jit(model)
    for _ in range(3):
        x = torch.randn(4, 3, 8, 8)
        jfn(x).square().mean().backward()
        twin(x).square().mean().backward()
    bn, twin_bn = model[1], twin[1]
    assert int(bn.num_batches_tracked) == 3
    grads_close([bn.running_mean, bn.running_var], [twin_bn.running_mean, twin_bn.running_var])
    grads_close([p.grad for p in model.parameters()], [p.grad for p in twin.parameters()])


def test_a_leaf_that_requires_grad_updated_in_place_raises_eagers_error():
    def fn(x):
        y = x * 2
        y.add_(1)
        return y.sum()

    def mutating(x, buf):
        buf.mul_(2)
        return (x * buf).sum()

    x = torch.randn(4, requires_grad=True)
    assert compiler.jit(fn)(x).grad_fn is not None  # a computed tensor updated in place is fine
    buf = torch.randn(4, requires_grad=True)
    leaf = buf.clone().detach().requires_grad_()
    jfn = compiler.jit(lambda x, b: mutating(x, b))
    # as eager: a leaf that requires grad cannot be updated in place (eager's message, at the user's line)
    with pytest.raises(compiler.CompileError, match="a leaf Variable that requires grad"):
        jfn(x, leaf)
    with pytest.raises(RuntimeError):
        mutating(x, leaf)


def test_a_wrong_backward_rule_is_an_error_at_the_target(monkeypatch):
    # exp's rule made wrong: the gradient check (not the forward check) must catch it
    monkeypatch.setitem(prim_rules.RULES, prims.exp, lambda b, cots: [prims.mul(cots[0], 2.0)])
    x = torch.randn(4, 8, requires_grad=True)
    report = compiler.compile(lambda x: torch.exp(x).sum(-1), x)
    errors = [d.message for d in report.diagnostics if d.severity == "error"]
    assert errors and "compiled backward does not match eager" in errors[0], errors


def test_a_rule_wrong_by_one_percent_is_an_error_after_the_float64_judgement(monkeypatch):
    # past float32's gradient tolerance the product asks a float64 run; 1% off is wrong there too
    monkeypatch.setitem(prim_rules.RULES, prims.exp, lambda b, cots: [prims.mul(prims.mul(cots[0], b.output), 1.01)])
    x = torch.randn(4, 8, requires_grad=True)
    report = compiler.compile(lambda x: torch.exp(x).sum(-1), x)
    errors = [d.message for d in report.diagnostics if d.severity == "error"]
    assert errors and "the gradient of x" in errors[0], errors


def test_a_gradient_past_float32_tolerance_but_as_accurate_as_eager_stays_compiled(monkeypatch):
    # as if float32's two roundings had differed beyond the tolerance (an ill-conditioned
    # gradient): the float64 run finds the compiled gradient as accurate as eager's
    monkeypatch.setattr(checking, "grad_mismatch", lambda a, e, through=(): "differs (forced by the test)")
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    jfn = compiler.jit(model)
    x = torch.randn(5, 8, requires_grad=True)
    cot = torch.randn(5, 4)
    for a, e in zip(torch.autograd.grad(jfn(x), [x, *model.parameters()], cot),
                    torch.autograd.grad(model(x), [x, *model.parameters()], cot)):
        torch.testing.assert_close(a, e)
    assert not jfn.last.eager_fallback
    notes = [d.message for d in compiler.last_report(jfn).diagnostics if d.severity == "information"]
    assert any("as close to a float64 run as eager's" in m for m in notes), notes


def _offset_variance(x):
    # float32 rounds the mean of values near 1e5 by up to 4e-3, and with the mean a constant
    # (detached) nothing cancels that rounding: the gradient 2 (x - mean), whose terms are
    # ~0.1, is ill-conditioned (with these values 0.7% off in eager float32 itself)
    return ((x - x.mean().detach()) ** 2).sum()


def test_float64_judgement_accepts_what_is_as_close_to_float64_as_eager_and_no_more():
    x = (1e5 + 0.1 * torch.randn(4096, generator=torch.Generator().manual_seed(4))).requires_grad_(True)
    (eager,) = torch.autograd.grad(_offset_variance(x), [x])
    (exact,) = checking.float64_gradients(_offset_variance, (x,), {}, [x], [x], [0], [torch.ones(())])
    assert x.dtype == torch.float32 and x.grad is None and exact.dtype == torch.float64  # x is given back
    eager_error = float((eager.double() - exact).abs().max() / exact.abs().max())
    assert eager_error > 1e-3, eager_error  # float32's own tolerance would fail a correct rounding
    assert checking.as_accurate_as_eager(exact.float(), eager, exact)
    assert checking.as_accurate_as_eager(eager, eager, exact)
    assert not checking.as_accurate_as_eager((exact + 3 * (eager.double() - exact)).float(), eager, exact)  # 3x eager's error
    assert not checking.as_accurate_as_eager(exact.float() * 1.5, eager, exact)


def test_float64_judgement_gives_up_on_code_that_fixes_its_own_dtype():
    w = torch.randn(8, 8, requires_grad=True)

    def fixed(x):
        return (x @ w.float().detach().to(torch.float32) @ torch.eye(8, dtype=torch.float32)).sum()
    x = torch.randn(8, requires_grad=True)
    assert checking.float64_gradients(fixed, (x,), {}, [x, w], [x], [0], [torch.ones(())]) is None
    assert x.dtype == w.dtype == torch.float32


def test_training_examples_compile_with_their_backward_section():
    for file, name in (("train_cnn.py", "cnn_loss_example"), ("train_gpt.py", "gpt_loss_dropout_example")):
        report = compile_target(str(EXAMPLES / file), name, benchmark=True, repeats=2)
        assert report.status == "ok", report.error
        assert not [d for d in report.diagnostics if d.severity == "error" or "runs eagerly" in d.message]
        b, t = report.program("backward"), report.training
        assert b is not None and list(b.traces) == ["backward", "fusion", "execution"]
        assert list(report.forward.traces) == ["acquired", "decomposed", "optimised", "joint", "forward", "fusion",
                                               "execution"]
        assert all(r.id.startswith("B") for r in b.regions)
        acts = [s for s in t.saved if s.kind == "activation"]
        assert acts and t.saved_bytes == sum(s.bytes for s in acts)
        assert all(s.bytes == torch.Size(s.shape).numel() * getattr(torch, s.dtype).itemsize for s in t.saved)
        assert all(s.line and os.path.basename(s.file) in (file, "gpt_block.py") for s in acts)
        assert t.step.compiled.median_ms > 0 and t.step.eager.median_ms > 0
        again = type(report).from_json(report.to_json())
        assert again.training.saved[0] == t.saved[0] and again.program("backward").regions[0].id == b.regions[0].id
        assert again == report
    assert t.recomputed  # GELU's elementwise intermediates are recomputed, not saved


def test_inference_targets_compile_without_a_backward():
    report = compile_target(str(EXAMPLES / "mlp.py"), "mlp_example", benchmark=False)
    assert report.status == "ok" and report.training is None


def _example_targets():
    from fusionlens.report.discovery import find_targets
    for path in sorted(EXAMPLES.glob("*.py")):
        for t in find_targets(path.read_text(), str(path)):
            if not t.nproc:  # a distributed target runs on its ranks: tests/test_launch.py
                yield pytest.param(path, t.name, id=f"{path.stem}.{t.name}")


@pytest.mark.parametrize("path,name", list(_example_targets()))
def test_every_example_compiles_for_training_and_its_gradients_match_eager(path, name):
    report = compile_target(str(path), name, benchmark=False, train=True)
    assert report.status == "ok", report.error
    problems = [d.message for d in report.diagnostics if d.severity == "error" or "runs eagerly" in d.message]
    assert not problems, problems[0]
    assert report.training is not None and report.training.grad_inputs
