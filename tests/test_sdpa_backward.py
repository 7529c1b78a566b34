"""A training step through F.scaled_dot_product_attention keeps no [B, H, L, S] matrix.

Where eager's dispatcher runs torch's fused CPU kernel (flash attention), a training forward
runs SDPA as `sdpa_flash_cpu` (fusionlens/middle/autograd/attention_rules.py), which saves the
output and each query row's logsumexp, and the backward is one call of the fused backward
(`sdpa_flash_cpu_backward`), as eager's autograd. Checked here, small shapes:

- the fused path is taken where the dispatcher takes it (causal or not, boolean and float
  masks, `scale`, GQA, float64), counted in the traces: the forward saves the logsumexp
  ([B, H, L], float32 for 16-bit inputs) and the output; the backward is one library call and
  holds no value of [.., L, S] but the user's mask;
- where the kernel does not apply (3-d, unequal head dims, broadcast batch, a mask that requires
  grad, `sdpa_kernel(MATH)`, dropout) the math rule or the explicit dropout forward runs, and
  the gradients are still eager's;
- gradients against eager's (torch's own autograd on the same call) on fresh random inputs,
  float32 and bfloat16 (bfloat16 judged by the float64 result rounded once where eager's own
  strays, docs/fuzzing.md);
- remat never recomputes the fused forward in the backward;
- a GPT-2 and a Llama (GQA) training step from transformers through fusionlens.jit: the loss and
  every parameter's gradient against eager.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import fusionlens
from fusionlens.driver import checking, pipeline
from fusionlens.middle import passes
from fusionlens.middle.autograd import remat
from fusionlens.ops.torch_ops import attention
from fusionlens.options import CompileOptions

B, H, L, S, E = 2, 4, 6, 10, 8  # batch, heads, queries, keys, head dim
FUSED, FUSED_BACKWARD = "sdpa_flash_cpu(", "sdpa_flash_cpu_backward("


def _t(*shape, dtype=torch.float32, grad=True):
    return torch.randn(shape).to(dtype).requires_grad_(grad)


def _qkv(dtype, kv_heads=H, ev=E):
    return _t(B, H, L, E, dtype=dtype), _t(B, kv_heads, S, E, dtype=dtype), _t(B, kv_heads, S, ev, dtype=dtype)


def _bool_mask():
    m = torch.rand(B, 1, L, S) > 0.4
    m[..., 0] = True  # every query sees a key
    return m


def _sdpa(**kw):
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw)


def _masked(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


# name -> (fn, inputs of a dtype); all take the fused CPU kernel on torch >= 2.13
FUSED_CASES = {
    "plain": (_sdpa(), lambda dt: _qkv(dt)),
    "causal": (_sdpa(is_causal=True), lambda dt: _qkv(dt)),
    "scale": (_sdpa(scale=0.3), lambda dt: _qkv(dt)),
    "bool mask": (_masked, lambda dt: (*_qkv(dt), _bool_mask())),
    "float mask": (_masked, lambda dt: (*_qkv(dt), torch.randn(L, S).to(dt))),
    "gqa causal": (_sdpa(is_causal=True, enable_gqa=True), lambda dt: _qkv(dt, kv_heads=2)),
}
# name -> (fn, inputs): the math rule (or the dropout forward) on the same call
FALLBACK_CASES = {
    "3-d": (_sdpa(), lambda dt: (_t(B, L, E, dtype=dt), _t(B, S, E, dtype=dt), _t(B, S, E, dtype=dt))),
    "unequal head dims": (_sdpa(), lambda dt: _qkv(dt, ev=5)),
    "broadcast batch": (_sdpa(), lambda dt: (_t(B, H, L, E, dtype=dt), _t(1, H, S, E, dtype=dt),
                                             _t(1, H, S, E, dtype=dt))),
    "mask requires grad": (_masked, lambda dt: (*_qkv(dt), _t(L, S, dtype=dt))),
    "heads broadcast, no gqa": (_sdpa(), lambda dt: (_t(B, H, L, E, dtype=dt), _t(B, 1, S, E, dtype=dt),
                                                     _t(B, 1, S, E, dtype=dt))),
}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def _compile(fn, args):
    c = pipeline.compile_program(fn, tuple(args), {}, CompileOptions(executors=("torch",)))
    assert c.traced.eager_only is None and c.differentiated is not None, c.traced.eager_only
    return c


def _grads_match_eager(c, fn, make, dtype):
    """Outputs and gradients of the compiled program on fresh inputs and a fresh cotangent, against
    eager's; a 16-bit gradient that strays is judged by the float64 result rounded once."""
    args = make(dtype)
    wrt = [a for a in args if a.requires_grad]
    out = c.fn(*args, *c.constants)
    fresh = [a.detach().requires_grad_(a.requires_grad) for a in args]
    want = fn(*fresh)
    dy = torch.randn_like(want)
    got = torch.autograd.grad(out, wrt, dy)
    eager = torch.autograd.grad(want, [a for a in fresh if a.requires_grad], dy)
    assert checking.mismatch(out.detach(), want.detach()) is None, checking.mismatch(out, want)
    for i, (g, e) in enumerate(zip(got, eager)):
        problem = checking.grad_mismatch(g, e)
        if problem is not None and dtype != torch.float32:
            wide = [a.detach().double().requires_grad_(a.requires_grad) for a in args]
            exact = torch.autograd.grad(fn(*wide), [a for a in wide if a.requires_grad], dy.double())[i]
            problem = checking.grad_mismatch(g, exact.to(dtype))
        assert problem is None, f"gradient {i}: {problem}"


def _values(trace):
    ops = passes.flatten(trace.bound_symbols)
    return list(trace.inputs) + [o for b in ops for o in b.outputs]


def _square(v) -> bool:
    return v.ndim >= 2 and tuple(v.shape[-2:]) == (L, S)


def _assert_fused(c, args):
    """The forward runs the fused kernel and saves its output and logsumexp; the backward is one
    call of the fused backward and holds no [.., L, S] value but the user's mask."""
    fwd = c.forward.traces["forward"].python()
    backward = c.program("backward").traces["backward"]
    assert FUSED in fwd, fwd
    assert backward.python().count(FUSED_BACKWARD) == 1, backward.python()
    assert FUSED not in backward.python(), backward.python()  # never recomputed (remat)
    q = args[0]
    stats = torch.float64 if q.dtype == torch.float64 else torch.float32
    saved = {v.name: v for v in c.differentiated.saved}
    lse = [v for v in saved.values() if tuple(v.shape) == (B, H, L)]
    assert len(lse) == 1 and lse[0].dtype == stats, [(v.name, v.shape, v.dtype) for v in saved.values()]
    assert any(tuple(v.shape) == (B, H, L, q.shape[-1]) and v.role.value == "saved" and v.name not in
               {i.name for i in c.differentiated.joint.inputs} for v in backward.inputs)  # the output
    masks = {v.name for v in c.differentiated.joint.inputs if _square(v)}
    for stage, trace in c.program("backward").traces.items():  # every stage, the execution trace's included
        square = [(v.name, v.shape) for v in _values(trace) if _square(v) and v.name not in masks]
        assert not square, (stage, square)


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("name", list(FUSED_CASES))
def test_fused_backward_holds_no_scores_and_matches_eager(name, dtype):
    fn, make = FUSED_CASES[name]
    args = make(dtype)
    c = _compile(fn, args)
    _assert_fused(c, args)
    _grads_match_eager(c, fn, make, dtype)


def test_float64_takes_the_fused_kernel_as_eagers_dispatcher_does():
    fn, make = FUSED_CASES["causal"]
    args = make(torch.float64)
    c = _compile(fn, args)
    _assert_fused(c, args)
    _grads_match_eager(c, fn, make, torch.float64)


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("name", list(FALLBACK_CASES))
def test_where_the_kernel_does_not_apply_the_math_rule_is_right(name, dtype):
    fn, make = FALLBACK_CASES[name]
    args = make(dtype)
    c = _compile(fn, args)
    assert FUSED not in c.forward.traces["forward"].python()
    backward = c.program("backward").traces["backward"]
    assert "vjp_" not in backward.python()
    assert any(_square(v) for v in _values(backward))  # the scores: what the fused path's count finds
    _grads_match_eager(c, fn, make, dtype)


def test_the_dispatchers_choice_is_asked():
    """flash_cpu_applies says what torch's _fused_sdp_choice says on the real tensors."""
    from fusionlens.ir.trace import Value

    def value(t, name):
        return Value(name, t.shape, t.dtype, t.device)

    calls = [(*_qkv(torch.float32), None, 0.0, False, None, False),
             (*_qkv(torch.float32), _bool_mask(), 0.0, False, None, False),
             (*_qkv(torch.float32), None, 0.1, False, None, False),
             (*_qkv(torch.float32, kv_heads=2), None, 0.0, True, 0.5, True),
             (*_qkv(torch.float32, ev=5), None, 0.0, False, None, False),
             (*_qkv(torch.float16), torch.randn(B, H, L, S).half(), 0.0, False, None, False)]
    for q, k, v, m, p, causal, scale, gqa in calls:
        want = torch.ops.aten._fused_sdp_choice(q, k, v, m, p, causal, scale=scale, enable_gqa=gqa)
        vals = [value(t, n) for t, n in zip((q, k, v), "qkv")] + [value(m, "m") if m is not None else None]
        got = attention.flash_cpu_applies(*vals, p, causal, scale, gqa, False)
        assert got == (want == attention.FLASH), (q.shape, k.shape, v.shape, p, want)
    q, k, v = (value(t, n) for t, n in zip(_qkv(torch.float32), "qkv"))
    assert not attention.flash_cpu_applies(q, k, v, value(torch.randn(L, S), "m"), 0.0, False, None, False, True)


def test_sdpa_kernel_math_keeps_the_math_rule():
    fn, make = FUSED_CASES["causal"]
    with sdpa_kernel([SDPBackend.MATH]):
        c = _compile(fn, make(torch.float32))
        assert FUSED not in c.forward.traces["forward"].python()
        _grads_match_eager(c, fn, make, torch.float32)


def test_dropout_keeps_the_explicit_math_forward_and_eagers_draws():
    """The CPU kernel takes no dropout (eager runs the math path): the mask is drawn in the open."""
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=True)

    q, k, v = _qkv(torch.float32)
    jfn = fusionlens.jit(fn)
    cot = torch.randn(B, H, L, E)
    for _ in range(2):
        torch.manual_seed(5)
        got = torch.autograd.grad(jfn(q, k, v), [q, k, v], cot)
        torch.manual_seed(5)
        want = torch.autograd.grad(fn(q, k, v), [q, k, v], cot)
        for g, w in zip(got, want):
            assert checking.grad_mismatch(g, w) is None, checking.grad_mismatch(g, w)
    report = fusionlens.last_report(jfn)
    assert not jfn.last.eager_fallback
    assert "bernoulli" in report.forward.traces["forward"] and FUSED not in report.forward.traces["forward"]


def test_remat_never_recomputes_the_fused_forward():
    """Elementwise ops after the attention are cheap to recompute, the fused op is not: its
    output and logsumexp are saved, the backward never calls the forward kernel."""
    def fn(q, k, v, w):
        return F.gelu(F.scaled_dot_product_attention(q, k, v, is_causal=True)) * w

    args = (*_qkv(torch.float32), _t(E))
    c = _compile(fn, args)
    fused = [b for b in c.differentiated.forward.bound_symbols if b.sym is attention.flash_cpu]
    assert len(fused) == 1 and not remat._cheap(fused[0])
    saved = {v.name for v in c.differentiated.saved}
    assert {o.name for o in fused[0].outputs} <= saved, saved
    assert not {o.name for o in fused[0].outputs} & set(c.differentiated.recomputed)
    assert FUSED not in c.program("backward").traces["backward"].python()
    _grads_match_eager(c, fn, lambda dt: (*_qkv(dt), _t(E, dtype=dt)), torch.float32)


def test_the_fused_calls_count_their_flops():
    """The forward region counts SDPA's FLOPs (docs/roofline.md), the backward's FlashAttention-2's
    (the scores again, four matmuls, ~8 a score): causal counts only the scores the mask keeps."""
    fn = _sdpa(is_causal=True)
    jfn = fusionlens.jit(fn)
    q, k, v = _qkv(torch.float32)
    jfn(q, k, v).sum().backward()
    report = fusionlens.last_report(jfn)
    kept = L * (L + 1) // 2  # query i sees keys 0..i (L < S: top-left aligned)
    (fwd,), (bwd,) = report.forward.regions, report.program("backward").regions
    assert fwd.cost.flops == B * H * kept * (2 * E + 2 * E + 5)
    assert bwd.cost.flops == B * H * kept * (6 * E + 4 * E + 8)


def test_a_dynamic_sequence_length_keeps_the_fused_path():
    """jit makes the sequence symbolic once it changes: that program takes the fused kernel too
    (its choice made at the example's sizes: only the symbolic dims' equalities matter, and duck
    sizing gives equal sizes one symbol) and serves the next length."""
    fn = _sdpa(is_causal=True)
    jfn = fusionlens.jit(fn)
    for n in (6, 9, 13):
        q, k, v = (_t(B, H, n, E) for _ in range(3))
        out = jfn(q, k, v)
        dy = torch.randn_like(out)
        got = torch.autograd.grad(out, [q, k, v], dy)
        want = torch.autograd.grad(fn(q, k, v), [q, k, v], dy)
        for g, w in zip(got, want):
            assert checking.grad_mismatch(g, w) is None, (n, checking.grad_mismatch(g, w))
        fwd = fusionlens.last_report(jfn).forward.traces["forward"]
        assert FUSED in fwd and (n == 6 or "s0" in fwd), fwd
    assert not jfn.last.eager_fallback


# --- transformers models: a training step through fusionlens.jit ------------------------------

def _gpt2(attn):
    from zoo_imports import transformers
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, n_inner=64, vocab_size=64, n_positions=32, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation=attn))


def _llama(attn):
    from zoo_imports import transformers
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=64, max_position_embeddings=32, attn_implementation=attn))


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("build", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_transformers_training_step_matches_eager(build, attn):
    torch.manual_seed(0)
    model = build(attn).train()
    twin = copy.deepcopy(model)
    jfn = fusionlens.jit(model)
    for _ in range(2):  # the second call: the cached program on fresh tokens
        ids = torch.randint(3, 64, (2, 12))
        loss = jfn(ids, labels=ids).loss
        grads = torch.autograd.grad(loss, list(model.parameters()))
        want = twin(ids, labels=ids).loss
        eager = torch.autograd.grad(want, list(twin.parameters()))
        assert checking.mismatch(loss.detach(), want.detach()) is None, (loss, want)
        for (name, _), g, e in zip(model.named_parameters(), grads, eager):
            assert checking.grad_mismatch(g, e) is None, f"{name}: {checking.grad_mismatch(g, e)}"
    assert not jfn.last.eager_fallback
    report = fusionlens.last_report(jfn)
    fwd, bwd = report.forward.traces["forward"], report.program("backward").traces["backward"]
    if attn == "sdpa":
        assert fwd.count(FUSED) == 2 and bwd.count(FUSED_BACKWARD) == 2, fwd
    else:
        assert FUSED not in fwd


# --- the note at the user's line where the fused kernel does not apply -------------------------

def _dropout(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, dropout_p=0.2)  # DROPOUT LINE


def _broadcast_batch(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)  # BROADCAST LINE


def _line_of(marker: str) -> int:
    return next(i for i, text in enumerate(open(__file__), 1) if f"# {marker} LINE" in text)


def _attention_notes(fn, args):
    """The report's attention-backward diagnostics of a training compile of fn(*args) through jit,
    after one step checked against eager on fresh inputs."""
    jfn = fusionlens.jit(fn)
    torch.manual_seed(3)
    got = torch.autograd.grad(jfn(*args), args, torch.ones(args[0].shape[:-1] + (args[2].shape[-1],)))
    torch.manual_seed(3)
    want = torch.autograd.grad(fn(*args), args, torch.ones(args[0].shape[:-1] + (args[2].shape[-1],)))
    for g, w in zip(got, want):
        assert checking.grad_mismatch(g, w) is None, checking.grad_mismatch(g, w)
    assert not jfn.last.eager_fallback
    return [d for d in fusionlens.last_report(jfn).diagnostics if d.code == "attention-backward"]


@pytest.mark.parametrize("name", ["dropout", "broadcast batch"])
def test_a_backward_without_the_fused_kernel_is_said_at_the_users_line(name):
    """Dropout and a broadcast batch: an information note at the SDPA call's line naming the
    [B, H, L, S] tensors the backward holds and why the fused kernel does not apply."""
    fn, marker, why = {"dropout": (_dropout, "DROPOUT", "takes no dropout (dropout_p=0.2)"),
                       "broadcast batch": (_broadcast_batch, "BROADCAST", "the batch or heads broadcast")}[name]
    q = _t(B, H, L, E)
    k, v = (_t(B, H, S, E), _t(B, H, S, E)) if name == "dropout" else (_t(1, H, S, E), _t(1, H, S, E))
    (note,) = _attention_notes(fn, [q, k, v])
    assert note.severity == "information" and note.line == _line_of(marker), note
    assert note.file.endswith("test_sdpa_backward.py"), note
    assert f"[{B}, {H}, {L}, {S}]" in note.message and why in note.message, note.message
    verb = "reads" if name == "dropout" else "recomputes"
    assert f"backward {verb} the" in note.message, note.message


def test_the_notes_reasons_for_the_math_rule():
    """Each reason the math rule serves is named (the compile alone: the gradients are
    test_where_the_kernel_does_not_apply_the_math_rule_is_right's)."""
    reasons = {"3-d": "not 4-d", "unequal head dims": "the head dims differ",
               "mask requires grad": "the mask requires grad", "heads broadcast, no gqa": "batch or heads broadcast"}
    for name, why in reasons.items():
        fn, make = FALLBACK_CASES[name]
        c = _compile(fn, make(torch.float32))
        messages = [n.message for n in c.notes if n.code == "attention-backward"]
        assert len(messages) == 1 and why in messages[0], (name, messages)
    fn, make = FUSED_CASES["causal"]
    with sdpa_kernel([SDPBackend.MATH]):
        c = _compile(fn, make(torch.float32))
    (message,) = [n.message for n in c.notes if n.code == "attention-backward"]
    assert "the flash backend is off" in message, message
    # GQA (2 key heads for 4 query heads) with a mask that requires grad: the query's heads
    def gqa(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)
    c = _compile(gqa, (*_qkv(torch.float32, kv_heads=2), _t(L, S)))
    (message,) = [n.message for n in c.notes if n.code == "attention-backward"]
    assert f"[{B}, {H}, {L}, {S}]" in message and "the mask requires grad" in message, message


@pytest.mark.parametrize("name", list(FUSED_CASES))
def test_the_fused_kernel_gets_no_note(name):
    fn, make = FUSED_CASES[name]
    c = _compile(fn, make(torch.float32))
    assert not [n.message for n in c.notes if n.code == "attention-backward"], name
    inference = torch.no_grad()
    with inference:  # no training, no note either
        c = pipeline.compile_program(_broadcast_batch, (_t(B, H, L, E), _t(1, H, S, E), _t(1, H, S, E)), {},
                                     CompileOptions(executors=("torch",)))
    assert not [n for n in c.notes if n.code == "attention-backward"]
