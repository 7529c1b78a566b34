"""The cached call as generated code (fusionlens/driver/fast_path.py): what it serves, what it
must not, and that it walks no Python structure (counted, never timed: benchmarks/ time it)."""

import copy

import pytest
import torch
import torch.nn.functional as F

import compiler
from fusionlens.driver import jit_cache
from fusionlens.frontend import arguments, objects
from zoo_imports import transformers

TOL = {torch.float32: dict(rtol=1.3e-6, atol=1e-5), torch.float64: dict(rtol=1e-7, atol=1e-7)}


def same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape and got.device == want.device
    if got.device.type != "meta":
        torch.testing.assert_close(got, want, **TOL.get(want.dtype, {}))


def _f(x, y):
    return torch.tanh(x * y + 1.0) - y


def _served(jfn, call, *args):
    """(the result, whether the generated code served the call)."""
    before = jfn.fast.served
    out = call(*args)
    return out, jfn.fast.served == before + 1


def test_a_repeated_call_is_served_by_its_generated_code_with_no_key_walk(monkeypatch):
    jfn = compiler.jit(_f)
    x, y = torch.randn(5), torch.randn(5)
    jfn(x, y)  # compiles, then arms the program's generated code
    keyed = []
    monkeypatch.setattr(jit_cache.JitFunction, "_key", lambda *a: keyed.append(a))  # the generic key
    for _ in range(3):
        x, y = torch.randn(5), torch.randn(5)
        out, fast = _served(jfn, jfn, x, y)
        assert fast
        same(out, _f(x, y))
    assert keyed == [] and jfn.cache_info()["compiles"] == 1
    source = jfn.fast.source(jfn.last)
    assert "def fast(args, kwargs)" in source and "tree_flatten" not in source and ".check(" in source


class _Modal(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = self.lin(x)
        return F.gelu(h) if self.training else h * 2.0


def _rejects(jfn, eager, first_args, second_args, setup=lambda: None):
    """The first call arms the generated code; after `setup`, the second must not be served by
    it (another program serves it, as eager computes it), and the first's form still is."""
    same(jfn(*first_args), eager(*first_args))
    setup()
    out, fast = _served(jfn, jfn, *second_args)
    assert not fast, "the generated code served a call it must reject"
    return out


def test_the_generated_guards_reject_another_device():
    """Only the CPU here, and a meta tensor's program cannot be checked against eager (its check
    reads values): the generated code itself must answer MISS, leaving the call to the generic path."""
    from fusionlens.driver import fast_path

    jfn = compiler.jit(_f)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    jfn(x, y)
    assert jfn.fast.serve((x.to("meta"), y.to("meta")), {}) is fast_path.MISS
    assert jfn.fast.serve((x, y.to("meta")), {}) is fast_path.MISS
    out = jfn.fast.serve((x, y), {})
    assert out is not fast_path.MISS
    same(out, _f(x, y))


@pytest.mark.parametrize("change", ["dtype", "requires_grad", "strides"])
def test_the_generated_guards_reject_a_tensor_that_changed(change):
    jfn = compiler.jit(_f)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    other = {"dtype": lambda t: t.double(), "requires_grad": lambda t: t.clone().requires_grad_(),
             "strides": lambda t: t.t().contiguous().t()}[change]  # same shape, column-major
    x2, y2 = other(x), other(y) if change != "requires_grad" else y
    out = _rejects(jfn, _f, (x, y), (x2, y2))
    same(out, _f(x2, y2))
    if change == "requires_grad":  # the training program: gradients as eager's
        out.sum().backward()
        x3 = x2.detach().clone().requires_grad_()
        _f(x3, y2).sum().backward()
        same(x2.grad, x3.grad)
    out, fast = _served(jfn, jfn, x2, y2)  # now this form has generated code of its own
    assert fast
    same(out, _f(x2, y2))


class _Sub(torch.Tensor):
    """A tensor subclass with no behaviour of its own: the same dispatch keys as a Tensor."""


@pytest.mark.parametrize("other", ["parameter", "subclass", "float"])
def test_the_generated_guards_reject_another_python_type(other):
    """The one C++ check of the call's tensors (TensorGuards) compares each one's exact Python
    type, so the generated code checks none of its own (fast_path._checks_type): a Parameter, a
    subclass or a number where a Tensor was is still not served."""
    from fusionlens.driver import fast_path

    assert fast_path._checks_type()
    jfn = compiler.jit(_f)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    x2 = {"parameter": lambda: torch.nn.Parameter(x.clone(), requires_grad=False),
          "subclass": lambda: x.clone().as_subclass(_Sub), "float": lambda: 0.5}[other]()
    with torch.no_grad():
        out = _rejects(jfn, _f, (x, y), (x2, y))
        want = _f(x2, y)
        assert type(out) is type(want)
        same(out.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor))
        assert "type(" not in jfn.fast.source(jfn.cache[jfn.signature((x, y), {})])


def test_grad_mode_is_switched_off_around_the_program_inline_and_back_however_it_ends():
    """In grad mode an inference program (no tensor requires grad) runs with grad mode off, as its
    no_grad wrapper would; the generated code switches it itself, and puts it back when the
    program raises."""
    jfn = compiler.jit(_f)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    jfn(x, y)
    out, fast = _served(jfn, jfn, x, y)
    assert fast and not out.requires_grad and torch.is_grad_enabled()
    same(out, _f(x, y))
    entry = jfn.cache[jfn.signature((x, y), {})]
    assert "SET_GRAD(False)" in jfn.fast.source(entry)
    seen = []

    def raises(*args):
        seen.append(torch.is_grad_enabled())
        raise ValueError("inside the program")
    jfn.fast.armed[0][1].__globals__["PROGRAM"] = raises
    with pytest.raises(ValueError):
        jfn(x, y)
    assert seen == [False] and torch.is_grad_enabled()


def test_hits_count_the_calls_the_generated_code_served():
    jfn = compiler.jit(_f)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    for _ in range(4):
        jfn(x, y)
    assert jfn.fast.served == 3 and jfn.cache_info()["hits"] == 3 and jfn.cache_info()["misses"] == 1
    jfn.reset()
    assert jfn.cache_info()["hits"] == 0 and jfn.fast.served == 0


def test_the_generated_guards_reject_another_grad_mode():
    lin = torch.nn.Linear(4, 3)
    fn = lambda x: F.gelu(lin(x))  # noqa: E731
    jfn = compiler.jit(fn)
    x = torch.randn(2, 4)
    with torch.no_grad():
        jfn(x)
        assert _served(jfn, jfn, x)[1]
    out, fast = _served(jfn, jfn, x)  # grad mode on now: the parameters' gradients
    assert not fast and out.requires_grad
    out.sum().backward()
    want = lin.weight.grad.clone()
    lin.weight.grad = None
    fn(x).sum().backward()
    same(want, lin.weight.grad)


def test_the_generated_guards_reject_train_mode_and_a_replaced_parameter():
    model = _Modal().eval()
    jfn = compiler.jit(model)
    x = torch.randn(2, 4)
    with torch.no_grad():
        out = _rejects(jfn, model, (x,), (x,), setup=model.train)
        same(out, model(x))
        model.eval()
        same(jfn(x), model(x))
        out = _rejects(jfn, model, (x,), (x,),
                       setup=lambda: setattr(model.lin, "weight", torch.nn.Parameter(torch.randn(3, 4))))
        same(out, model(x))


def test_the_generated_guards_reject_a_frozen_parameter():
    model = _Modal().eval()
    jfn = compiler.jit(model)
    x = torch.randn(2, 4)
    out = _rejects(jfn, model, (x,), (x,), setup=lambda: model.lin.weight.requires_grad_(False))
    same(out, model(x))
    out.sum().backward()
    assert model.lin.weight.grad is None and model.lin.bias.grad is not None


def test_int_arguments_of_a_dynamic_program_are_bound_by_the_generated_code():
    fn = lambda x, n: x[:n] * 2.0  # noqa: E731
    jfn = compiler.jit(fn)
    x = torch.randn(10, 3)
    for n in (2, 3):  # the second compiles the program for every n
        same(jfn(x, n), fn(x, n))
    for n in (4, 7, 5):
        out, fast = _served(jfn, jfn, x, n)
        assert fast
        same(out, fn(x, n))
    assert jfn.cache_info()["compiles"] == 2


def test_a_value_guard_is_checked_by_the_generated_code():
    def fn(x):
        return x * 2.0 if bool(x.sum() > 0) else x - 1.0

    jfn = compiler.jit(fn)
    pos, neg = torch.ones(4), -torch.ones(4)
    for x in (pos, neg, pos, neg, pos * 3, neg * 3):
        same(jfn(x), fn(x))
    assert jfn.cache_info()["compiles"] == 2


# --- a tiny Llama decoding (transformers, built from a config: no download) ------------------

def _llama():
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def _generate(model, ids, tokens: int, cache: str):
    options = {} if cache == "dynamic" else {"cache_implementation": "static"}
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, **options)


class _Counted:
    """Calls of the generic path's walkers: the pytree key, the objects' slot walk, user tensors."""

    def __init__(self, monkeypatch):
        self.calls = {"key": 0, "leaves": 0, "user_tensors": 0}
        for owner, name, label in ((jit_cache.JitFunction, "_key", "key"), (objects, "leaves", "leaves"),
                                   (arguments, "user_tensors", "user_tensors")):
            monkeypatch.setattr(owner, name, self._counting(getattr(owner, name), label))

    def _counting(self, original, label):
        def counted(*args, **kwargs):
            self.calls[label] += 1
            return original(*args, **kwargs)
        return counted


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_decoding_walks_no_cache_layers_once_compiled(cache, monkeypatch):
    base = _llama()
    ids = torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(0))
    model = copy.deepcopy(base)
    model.forward = compiler.jit(model.forward)
    first = 4 if cache == "dynamic" else 10  # a StaticCache's size is the generate's length: the same one
    assert torch.equal(_generate(model, ids, first, cache), _generate(base, ids, first, cache))
    compiles = model.forward.cache_info()["compiles"]
    # prefill, then one program for every decode step (a DynamicCache's growth symbolic from its first step)
    assert compiles <= 2, model.forward.cache_info()
    counted = _Counted(monkeypatch)
    served = model.forward.fast.served
    got = _generate(model, ids, 10, cache)  # (a DynamicCache: lengths the first generate never saw)
    assert torch.equal(got, _generate(base, ids, 10, cache))
    assert model.forward.cache_info()["compiles"] == compiles
    assert model.forward.fast.served - served == 10  # every step: prefill and 9 decode steps
    # the eager run above walks nothing of ours either: any count is the compiled calls'
    assert counted.calls == {"key": 0, "leaves": 0, "user_tensors": 0}, counted.calls


def test_prefill_and_10_decode_steps_with_a_dynamic_cache_compile_twice():
    """The cache's keys and values are a cat along the sequence dim in prefill's program: the
    first decode step is traced symbolic along it, so one program serves every later length."""
    base = _llama()
    ids = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(1))
    model = copy.deepcopy(base)
    model.forward = compiler.jit(model.forward)
    assert torch.equal(_generate(model, ids, 11, "dynamic"), _generate(base, ids, 11, "dynamic"))
    info = model.forward.cache_info()
    assert info["compiles"] == 2 and info["dynamic"] == 1, info
    assert model.forward.growing and set(model.forward.growing.values()) == {2}  # (batch, heads, length, dim)


def test_the_reports_versions_read_from_metadata_headers_are_importlibs():
    """The first call's report reads versions from METADATA's header lines (cheaper than
    importlib.metadata.version's full parse): the same strings."""
    import importlib.metadata

    from fusionlens.driver import reporting
    for dist in ("torch", "triton", "fusionlens", "no-such-distribution-here"):
        try:
            want = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            want = None
        assert reporting._version(dist) == want
