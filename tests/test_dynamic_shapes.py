"""Dynamic shapes: a dim whose size changes becomes symbolic, and one program serves every size.

Each test checks the compiled results against eager at every size, counts compiles through
`cache_info()`, and for each kind of guard checks that a call breaking it compiles anew
rather than returning a wrong result.
"""

from __future__ import annotations

import random

import pytest
import torch

import compiler
import fusionlens.frontend.dynamic
from fusionlens.driver import jit_cache

EXECUTORS = ["torch"]


def close(got, want, dtype=torch.float32):
    tol = {torch.float32: 1e-5, torch.float64: 1e-10}[dtype]
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)


def _mixed(x, w):
    y = torch.softmax(x * 2, -1)
    z = torch.nn.functional.layer_norm(y, y.shape[-1:])
    return y.reshape(-1).sum() + z.mean(1).sum(), y @ w[: y.shape[1]]


def test_sequence_lengths_5_to_64_in_any_order_compile_at_most_twice():
    jfn = compiler.jit(_mixed, executors=EXECUTORS)
    w = torch.randn(64, 4)
    sizes = list(range(5, 65))
    random.Random(0).shuffle(sizes)
    for n in sizes:
        x = torch.randn(3, n)
        close(jfn(x, w), _mixed(x, w))
    info = jfn.cache_info()
    assert info["compiles"] == 2 and info["dynamic"] == 1
    report = compiler.last_report(jfn)
    assert report.signature[0].startswith("x: float32[3, s0]")
    assert "2 <= x.shape[1]" in report.guards and "x.shape[1] <= 64" in report.guards
    # the program's shapes are the symbols' expressions, in the report and the printed trace
    shapes = [t.shape for r in report.forward.regions for t in r.inputs + r.outputs]
    assert [3, "s0"] in shapes
    source = compiler.last_compiled(jfn).forward.plan.trace.python()
    assert "s0 = x.shape[1]" in source and "f32[3, s0]" in source


def test_dynamic_true_and_mark_dynamic_compile_once():
    w = torch.randn(64, 4)
    for make in (lambda: compiler.jit(_mixed, executors=EXECUTORS, dynamic=True),
                 lambda: compiler.jit(_mixed, executors=EXECUTORS)):
        jfn = make()
        for n in (6, 9, 17, 40):
            x = torch.randn(3, n)
            if jfn.dynamic is None:
                compiler.mark_dynamic(x, 1)
            close(jfn(x, w), _mixed(x, w))
        assert jfn.cache_info()["compiles"] == 1


def test_mark_dynamic_refuses_a_dim_that_is_not_there():
    with pytest.raises(IndexError):
        compiler.mark_dynamic(torch.randn(3, 4), 2)
    with pytest.raises(IndexError):
        compiler.mark_dynamic(torch.tensor(1.0), 0)
    assert fusionlens.frontend.dynamic.marked_dims(compiler.mark_dynamic(torch.randn(3, 4), -1)) == {1}


def test_dynamic_false_compiles_every_shape():
    jfn = compiler.jit(_mixed, executors=EXECUTORS, dynamic=False)
    w = torch.randn(64, 4)
    for n in (6, 9, 17):
        x = torch.randn(3, n)
        close(jfn(x, w), _mixed(x, w))
    assert jfn.cache_info()["compiles"] == 3 and jfn.cache_info()["dynamic"] == 0


def _branchy(x):
    if x.shape[1] > 8:  # a guard on the symbol: s0 > 8
        return x.sum(1)
    return x.amax(1)


@pytest.mark.parametrize("kind", ["python-branch", "size-one", "bound-from-slice", "equal-dims", "static-dim"])
def test_a_failed_guard_recompiles_and_is_right(kind):
    w = torch.randn(16, 4)
    cases = {
        # (function, calls: tuples of arguments); the last call breaks a guard of the first two's program
        "python-branch": (_branchy, [(torch.randn(2, 10),), (torch.randn(2, 12),), (torch.randn(2, 5),)]),
        "size-one": (lambda x: x.softmax(-1), [(torch.randn(2, 4),), (torch.randn(2, 6),), (torch.randn(2, 1),)]),
        "bound-from-slice": (lambda x, w: x @ w[: x.shape[1]],
                             [(torch.randn(2, 4), w), (torch.randn(2, 6), w), (torch.randn(2, 20), torch.randn(20, 4))]),
        "equal-dims": (lambda x, y: x + y, [(torch.randn(4), torch.randn(4)), (torch.randn(6), torch.randn(6)),
                                            (torch.randn(5), torch.randn(1))]),
        "static-dim": (lambda x: x.sum(0), [(torch.randn(2, 4),), (torch.randn(2, 6),), (torch.randn(3, 6),)]),
    }
    fn, calls = cases[kind]
    jfn = compiler.jit(fn, executors=EXECUTORS)
    for args in calls:
        close(jfn(*args), fn(*args))
    info = jfn.cache_info()
    assert info["compiles"] == 3, info
    entry = jfn.last
    assert entry.compiled.guards is None or entry.compiled.guards.check(list(calls[-1]))


def test_the_branch_taken_is_a_guard_in_the_report():
    jfn = compiler.jit(_branchy, executors=EXECUTORS, dynamic=True)
    jfn(torch.randn(2, 10))
    assert "9 <= x.shape[1]" in compiler.last_report(jfn).guards


class _Attention(torch.nn.Module):
    """A causal self-attention block: the sequence dim is the dynamic one."""

    def __init__(self, d: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).split(d, dim=-1)
        q, k, v = (a.view(b, t, self.heads, d // self.heads).transpose(1, 2) for a in (q, k, v))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return x + self.out(y)


def test_a_module_serves_every_sequence_length():
    torch.manual_seed(0)
    model = _Attention().eval()
    jfn = compiler.jit(model, executors=EXECUTORS)
    with torch.no_grad():
        for t in (5, 9, 3, 17, 12, 30):
            x = torch.randn(2, t, 16)
            close(jfn(x), model(x))
    assert jfn.cache_info()["compiles"] == 2


def test_training_with_a_dynamic_dim_matches_eager_gradients():
    torch.manual_seed(0)
    model = _Attention()
    jfn = compiler.jit(model, executors=EXECUTORS)
    for t in (5, 7, 11):
        x = torch.randn(2, t, 16, requires_grad=True)
        model.zero_grad()
        want = model(x)
        want.square().mean().backward()
        grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
        model.zero_grad()
        x.grad = None
        got = jfn(x)
        got.square().mean().backward()
        close(got, want)
        for g, w in zip([p.grad for p in model.parameters()] + [x.grad], grads):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert jfn.cache_info()["compiles"] == 2


def test_erased_signature_keys_tensors_by_rank():
    key = (True, ((torch.Size([3, 5]), torch.float32, torch.device("cpu"), False, True),))
    assert jit_cache._erased(key) == (True, ((2, torch.float32, torch.device("cpu"), False, True),))


class _CachedAttention(torch.nn.Module):
    """Meta's reference Llama style: a preallocated cache, updated in place at `start_pos`."""

    def __init__(self, d: int = 16, heads: int = 2, max_len: int = 64):
        super().__init__()
        self.h, self.d = heads, d
        self.wq, self.wk, self.wv, self.wo = (torch.nn.Linear(d, d, bias=False) for _ in range(4))
        self.register_buffer("cache_k", torch.zeros(1, max_len, heads, d // heads))
        self.register_buffer("cache_v", torch.zeros(1, max_len, heads, d // heads))

    def forward(self, x, start_pos: int):
        b, t, _ = x.shape
        q, k, v = (w(x).view(b, t, self.h, -1) for w in (self.wq, self.wk, self.wv))
        self.cache_k[:b, start_pos:start_pos + t] = k
        self.cache_v[:b, start_pos:start_pos + t] = v
        keys = self.cache_k[:b, :start_pos + t].transpose(1, 2)
        values = self.cache_v[:b, :start_pos + t].transpose(1, 2)
        att = (q.transpose(1, 2) @ keys.transpose(2, 3)) / (self.d // self.h) ** 0.5
        return self.wo((att.softmax(-1) @ values).transpose(1, 2).reshape(b, t, -1))


def test_an_int_argument_that_changes_every_call_is_a_symbol():
    torch.manual_seed(0)
    model, reference = _CachedAttention().eval(), _CachedAttention().eval()
    reference.load_state_dict(model.state_dict())
    jfn = compiler.jit(model, executors=EXECUTORS)
    with torch.no_grad():
        x, pos = torch.randn(1, 5, 16), 0
        for _ in range(24):
            close(jfn(x, pos), reference(x, pos))
            close(model.cache_k, reference.cache_k)
            close(model.cache_v, reference.cache_v)
            pos += x.shape[1]
            x = torch.randn(1, 1, 16)
    assert jfn.cache_info()["compiles"] == 2  # the prompt, then one program for every later position
    report = compiler.last_report(jfn)
    assert "start_pos = s0 (dynamic)" in report.signature
    assert "1 <= start_pos" in report.guards
    assert "s0 = fusionlens_sizes['s0']" in compiler.last_compiled(jfn).forward.plan.trace.python()


def test_a_branch_on_an_int_argument_is_a_guard():
    def fn(x, n):
        return x * n if n > 10 else x - n

    jfn = compiler.jit(fn, executors=EXECUTORS)
    x = torch.randn(3)
    for n in (12, 13, 14, 20, 5, 6, 11):
        close(jfn(x, n), fn(x, n))
    assert jfn.cache_info()["compiles"] == 3  # 12, then one program for n > 10, then one for n <= 10


def test_int_arguments_of_a_training_program_stay_specialised():
    w = torch.randn(8, requires_grad=True)

    def fn(x, n):
        return (x[:n] * w[:n]).sum()

    jfn = compiler.jit(fn, executors=EXECUTORS)
    for n in (3, 4, 5):
        x = torch.randn(8)
        w.grad = None
        jfn(x, n).backward()
        got = w.grad.clone()
        w.grad = None
        fn(x, n).backward()
        close(got, w.grad)
    assert jfn.cache_info()["compiles"] == 3


# --- symbolic programs as native as static ones (issue 30 part 2) -----------------------------------

def _pieces(x):
    return torch.chunk(x, 2, -1)[1] * 2, torch.tensor_split(x, 3, -1)[2] + 1, x.split(2, 0)[-1].sin()


def _lerps(a, b):
    return torch.lerp(a, b, 0.3) + torch.lerp(a, b, torch.tensor(0.7))


def _gather_cat_linear(x, w):
    t = torch.take_along_dim(x, torch.argsort(x, -1), -1)
    return torch.nn.functional.linear(torch.cat([t, x], -1), w)


def _norms(x, w):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], w) * x + x


@pytest.mark.parametrize("fn,make,sizes", [
    # sizes that keep torch's own guards: tensor_split(3)'s remainder, no piece of size 1
    (_pieces, lambda n: (torch.randn(8, n),), (7, 10, 13, 16)),
    (_lerps, lambda n: (torch.randn(n, 3), torch.randn(n, 3)), (4, 5, 7, 9)),
    (_gather_cat_linear, lambda n: (torch.randn(n, 4), torch.randn(5, 8)), (4, 5, 7, 9)),
    (_norms, lambda n: (torch.randn(n, 6), torch.randn(6)), (4, 5, 7, 9)),
], ids=["split-chunk-tensor_split", "lerp", "take_along_dim-cat-linear", "layer_norm-add-mul"])
def test_a_symbolic_program_compiles_once_with_no_more_fallbacks_than_static(fn, make, sizes):
    jfn, static = compiler.jit(fn, dynamic=True), compiler.jit(fn, dynamic=False)
    for n in sizes:
        args = make(n)
        for got, want in zip(jfn(*args) if isinstance(fn(*args), tuple) else (jfn(*args),),
                             fn(*args) if isinstance(fn(*args), tuple) else (fn(*args),)):
            close(got, want)
    static(*make(sizes[0]))
    assert jfn.cache_info()["compiles"] == 1, compiler.last_report(jfn).diagnostics
    assert len(compiler.last_report(jfn).fallbacks) <= len(compiler.last_report(static).fallbacks), \
        compiler.last_report(jfn).fallbacks


def test_a_split_whose_count_of_pieces_changes_recompiles_and_says_why():
    fn = lambda x: x.split(2, 0)[-1] * 2  # noqa: E731
    jfn = compiler.jit(fn, dynamic=True)
    for n in (8, 10, 8):  # 4 pieces, 5, 4: the count is a guard (torch's too), not the size itself
        x = torch.randn(n, 3)
        close(jfn(x), fn(x))
    assert jfn.cache_info()["compiles"] == 2
    why = [d.message for d in jfn.cache[jfn.signature((torch.randn(10, 3),), {})].report.diagnostics
           if d.message.startswith("compiled again")]
    assert why and "((1 + x.shape[0]) // 2) == 4 (x.shape[0] = 10)" in why[0], why
