"""Reinplacing (fusionlens/middle/reinplace.py): an update of an input (a KV cache's
index_copy_, a slice assignment, `out[:, :n] += y`) written into the input itself, the work
the window's as in eager, not a scatter into a copy of the whole base copied back.

Each compiled call is compared with eager on fresh inputs (its result and the caller's tensors
after it); what the program writes is counted op by op under a TorchDispatchMode (elements
each aten op writes), never timed. Where the pass must decline (the old value read after the
write, an operand sharing the base's memory, a shape check after the write, a training forward
that saves the update, aliased inputs, an executor that stores into a copy) the trace is left
as it was and the program still matches eager. An update written in place keeps its
write-back, `write_back(x, t)` with t the in-place op's result: x itself, nothing copied."""

import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import compiler
from fusionlens.driver import checking
from fusionlens.frontend import objects
from fusionlens.ir.trace import BoundSymbol, Trace, Value
from fusionlens.ir.vocabulary import Stage, ValueRole
from fusionlens.middle import cost, reinplace
from fusionlens.ops import prims, torch_ops
from fusionlens.ops.torch_ops import fallbacks
from zoo_imports import transformers

B, H, S, D = 2, 2, 16, 8  # a [batch, heads, positions, head dim] cache


def _same(actual, expected):
    problem = checking.mismatch(actual, expected)
    assert problem is None, problem


# --- decode steps, as model code writes them ------------------------------------------------

def index_copy_step(k_cache, v_cache, q, k, v, pos):
    """StaticCache's update (index_copy_ at the positions), then attention over the cache."""
    k_cache.index_copy_(2, pos, k * 1.5)
    v_cache.index_copy_(2, pos, v)
    scores = torch.softmax(q @ k_cache.transpose(-1, -2) / D ** 0.5, dim=-1)
    return scores @ v_cache


def slice_step(k_cache, v_cache, q, k, v, pos):
    """A slice assignment at a tensor of positions, and one of a fixed window."""
    k_cache[:, :, pos] = k
    v_cache[:, :, 3:4] = v + 1
    return (q @ k_cache.transpose(-1, -2)).softmax(-1) @ v_cache


def iadd_step(k_cache, v_cache, q, k, v, pos):
    """`out[:, :n] += y`: the window read, updated and written back."""
    k_cache[:, :, :4] += k.expand(-1, -1, 4, -1)
    return k_cache.sum(2) + q.sum(2) + v.sum(2) + pos


STEPS = [index_copy_step, slice_step, iadd_step]


def _step_inputs(step: int):
    g = torch.Generator().manual_seed(step)
    caches = [torch.randn(B, H, S, D, generator=g) for _ in range(2)]
    q, k, v = (torch.randn(B, H, 1, D, generator=g) for _ in range(3))
    return caches + [q, k, v, torch.tensor([step % S])]


def _calls_match_eager(jfn, fn, steps=3):
    """Each call on fresh inputs: the result and both caches after it, against eager's."""
    for step in range(steps):
        args = _step_inputs(step)
        eager = [a.clone() for a in args]
        with torch.no_grad():
            _same(jfn(*args), fn(*eager))
        _same(args[:2], eager[:2])
    _compiled_and_checked(jfn)


def _compiled_and_checked(jfn):
    """The calls ran the program (not eager after a failed check): its check found no mismatch."""
    assert not jfn.last.eager_fallback
    errors = [d.message for d in compiler.last_report(jfn).diagnostics if d.severity == "error"]
    assert not errors, errors


def _execution(jfn):
    return compiler.last_compiled(jfn).forward.plan.trace


def _written_in_place(trace) -> set[str]:
    """The inputs the program updates by an in-place op (their write-back, `write_back(x, t)`
    with t the op's result, is x itself: nothing is copied)."""
    made = {o.name: b for b in trace.bound_symbols for o in b.outputs}
    return {dst.name for dst, src in trace.writeback if src.name in made and made[src.name].sym in reinplace.IN_PLACE}


class _Written(TorchDispatchMode):
    """The elements each aten op writes: an in-place op its window (index_copy_: the source;
    copy_ into a view: the view), a view nothing, any other op its results."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.append((func.overloadpacket.__name__, _elements(func, args, out)))
        return out


def _elements(func, args, out) -> int:
    if func.is_view:
        return 0
    name = func.overloadpacket.__name__
    if name in ("index_copy_", "scatter_"):
        return args[3].numel()
    if name == "index_put_":
        return args[2].numel()
    if func._schema.is_mutable:
        return sum(a.numel() for a, arg in zip(args, func._schema.arguments)
                   if isinstance(a, torch.Tensor) and arg.alias_info is not None and arg.alias_info.is_write)
    return sum(t.numel() for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor))


def _written(fn, args) -> list[tuple[str, int]]:
    with torch.no_grad(), _Written() as mode:
        fn(*args)
    return mode.ops


@pytest.mark.parametrize("fn", STEPS, ids=lambda f: f.__name__)
def test_a_decode_step_writes_its_cache_in_place_and_matches_eager(fn):
    jfn = compiler.jit(fn, executors=["torch"])
    _calls_match_eager(jfn, fn)
    trace = _execution(jfn)
    assert _written_in_place(trace) == {dst.name for dst, _ in trace.writeback} != set(), trace.python()
    assert jfn.cache_info()["misses"] == 1


@pytest.mark.parametrize("fn", STEPS, ids=lambda f: f.__name__)
def test_a_compiled_step_writes_no_more_elements_than_eager(fn):
    """Counted, not timed: no op of the compiled call writes a whole cache (before the pass a
    scatter into a copy of it and the copy back did, two a cache), and all its ops together
    write no more elements than eager's."""
    jfn = compiler.jit(fn, executors=["torch"])
    _calls_match_eager(jfn, fn, steps=2)
    args = _step_inputs(5)
    compiled, eager = _written(jfn, args), _written(fn, [a.clone() for a in args])
    whole = B * H * S * D
    assert max(n for _, n in compiled) < whole, compiled
    assert sum(n for _, n in compiled) <= sum(n for _, n in eager), (compiled, eager)


def test_the_roofline_counts_an_in_place_write_as_its_window():
    """The report's cost of the region that writes the cache (middle/cost.py): what it reads
    besides the cache (the positions, the new keys) and the window it writes, not the cache."""
    jfn = compiler.jit(index_copy_step, executors=["torch"])
    _calls_match_eager(jfn, index_copy_step, steps=1)
    writes = [r for r in compiler.last_compiled(jfn).forward.plan.regions
              if r.bsyms[0].sym.name == "index_copy_"]
    assert len(writes) == 2
    for r in writes:
        base, index, source = r.bsyms[0].args[0], r.bsyms[0].args[2], r.bsyms[0].args[3]
        expected = index.numel() * 8 + 2 * source.numel() * 4  # read the index and the source, write the window
        assert cost.region_cost(r.bsyms, r.inputs, r.outputs).bytes == expected < base.numel() * 4


def test_the_printed_program_runs_as_printed():
    jfn = compiler.jit(index_copy_step, executors=["torch"])
    _calls_match_eager(jfn, index_copy_step, steps=1)
    trace = _execution(jfn)
    source = trace.python()
    assert "index_copy_(k_cache, 2, pos," in source
    namespace = {**trace.globals()}
    exec(compile(source, "<printed>", "exec"), namespace)  # noqa: S102 - the printed program itself
    args = _step_inputs(7)
    eager = [a.clone() for a in args]
    _same(namespace[trace.name](*args), index_copy_step(*eager))
    _same(args[:2], eager[:2])


class KVCache(torch.nn.Module):
    """gpt-fast's cache: buffers written at a tensor of positions (`k_out[:, :, pos] = k`)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(B, H, S, D))
        self.register_buffer("v_cache", torch.zeros(B, H, S, D))

    def forward(self, q, k, v, pos):
        self.k_cache[:, :, pos] = k
        self.v_cache[:, :, pos] = v
        return torch.nn.functional.scaled_dot_product_attention(q, self.k_cache, self.v_cache)


def test_a_modules_buffer_cache_is_written_in_place_step_after_step():
    eager, compiled = KVCache(), KVCache()
    jfn = compiler.jit(compiled, executors=["torch"])
    for step in range(4):
        q, k, v = (torch.randn(B, H, 1, D) for _ in range(3))
        pos = torch.tensor([step])
        with torch.no_grad():
            _same(jfn(q, k, v, pos), eager(q, k, v, pos))
        _same((compiled.k_cache, compiled.v_cache), (eager.k_cache, eager.v_cache))
    _compiled_and_checked(jfn)
    assert jfn.cache_info()["misses"] == 1
    assert len(_written_in_place(_execution(jfn))) == 2, _execution(jfn).python()


def test_a_symbolic_program_writes_in_place_at_every_size():
    """dynamic=True: one program for every length, its setitem written into the input (the
    report's cost of it worked out without its sizes: fuzz dynamic 30009)."""
    def fn(x, y):
        t = x[:, None]
        t[0] = y[0]
        return t * 2

    jfn = compiler.jit(fn, executors=["torch"], dynamic=True)
    for n in (3, 5, 7):
        x, y = torch.randn(n), torch.randn(n, 1)
        ex = x.clone()
        with torch.no_grad():
            _same(jfn(x, y), fn(ex, y))
        _same(x, ex)
    _compiled_and_checked(jfn)
    assert jfn.cache_info()["compiles"] <= 2
    assert _written_in_place(_execution(jfn)) == {"x"}


# --- where the pass declines ----------------------------------------------------------------

def _v(name, shape=(4, 6), dtype=torch.float32, role=ValueRole.COMPUTED):
    return Value(name, shape, dtype, "cpu", role)


X, SRC, IDX = _v("x", role=ValueRole.INPUT), _v("src", (2, 6), role=ValueRole.INPUT), \
    _v("idx", (2,), torch.int64, ValueRole.INPUT)
INDEX_COPY, ADD = torch_ops.registered("torch.index_copy"), torch_ops.registered("torch.add")
GETITEM = torch_ops.registered("operator.getitem")


def _op(sym, args, out):
    return BoundSymbol(sym, args, {}, [out])


def _trace(ops, output, inputs=(X, SRC, IDX)):
    return Trace("f", list(inputs), ops, output, Stage.FUSION, writeback=[(X, ops[0].outputs[0])])


def _runs_alike(before: Trace, after: Trace):
    """Both traces as programs on copies of the same inputs: the results and x afterwards."""
    made = {"x": torch.randn(4, 6), "src": torch.randn(2, 6), "idx": torch.tensor([3, 1])}

    def run(trace):
        args = [made[v.name].clone() for v in trace.inputs]
        return trace.python_callable()(*args), args[0]
    _same(run(after), run(before))


def test_the_pass_rewrites_a_safe_update_and_drops_its_write_back():
    t0, t1 = _v("t0"), _v("t1")
    trace = _trace([_op(INDEX_COPY, (X, 0, IDX, SRC), t0), _op(ADD, (t0, 1.0), t1)], t1)
    done = reinplace.reinplace(trace)
    assert done.bound_symbols[0].sym.name == "index_copy_" and _written_in_place(done) == {"x"}
    _runs_alike(trace, done)


def _declines(trace, **kw):
    done = reinplace.reinplace(trace, **kw)
    assert done is trace  # nothing changed
    _runs_alike(trace, trace)


def test_the_pass_declines_where_the_old_value_is_read_after_the_write():
    t0, t1, t2 = _v("t0"), _v("t1"), _v("t2")
    _declines(_trace([_op(INDEX_COPY, (X, 0, IDX, SRC), t0), _op(ADD, (X, t0), t1)], t1))
    # through a view of it made before the write
    view = _v("view", (4, 3))
    key = (slice(None), slice(0, 3))
    ops = [_op(GETITEM, (X, key), view), _op(INDEX_COPY, (X, 0, IDX, SRC), t0), _op(ADD, (view, 1.0), t2)]
    trace = Trace("f", [X, SRC, IDX], ops, (t0, t2), Stage.FUSION, writeback=[(X, t0)])
    _declines(trace)
    # returned as it was
    _declines(_trace([_op(INDEX_COPY, (X, 0, IDX, SRC), t0)], (t0, X)))


def test_the_pass_declines_where_an_operand_shares_the_bases_memory():
    rows, t0 = _v("rows", (2, 6)), _v("t0")
    ops = [_op(GETITEM, (X, slice(0, 2)), rows), _op(INDEX_COPY, (X, 0, IDX, rows), t0)]
    _declines(Trace("f", [X, IDX], ops, t0, Stage.FUSION, writeback=[(X, t0)]))


def test_the_pass_declines_where_a_shape_check_follows_the_write():
    nonzero = torch_ops.registered("torch.nonzero")
    checked = fallbacks.shape_checked(nonzero, "nonzero_shape_checked", [(24, 2)], "t1", None)
    t0, t1 = _v("t0"), _v("t1", (24, 2), torch.int64)
    trace = _trace([_op(INDEX_COPY, (X, 0, IDX, SRC), t0), _op(checked, (t0,), t1)], t1)
    trace.extra_globals["nonzero_shape_checked"] = checked.impl
    assert reinplace.reinplace(trace) is trace


def test_a_training_forward_keeps_the_copy_it_saves_for_the_backward():
    t0 = _v("t0")
    trace = _trace([_op(INDEX_COPY, (X, 0, IDX, SRC), t0)], (t0,))  # t0 saved (or a result)
    assert reinplace.reinplace(trace, training=True) is trace
    assert reinplace.reinplace(trace, training=False) is not trace  # in inference, the result is x itself


class _Fuser:
    def __init__(self, in_place: bool):
        self.stores_in_place = in_place

    def can_take(self, b):
        return None


def test_a_scatter_a_fusion_executor_stores_into_a_copy_stays_out_of_place():
    where_to, t0 = _v("where_to", (2, 6), torch.int64), _v("t0")
    trace = Trace("f", [X, SRC, where_to], [_op(prims.scatter, (X, where_to, SRC, 0), t0)], t0, Stage.FUSION,
                  writeback=[(X, t0)])
    assert reinplace.reinplace(trace, [_Fuser(False)]) is trace  # nvFuser's (a scatter into a new tensor)
    done = reinplace.reinplace(trace, [_Fuser(True)])  # Triton's: the window stored into x
    assert done.bound_symbols[0].sym is reinplace.SCATTER_ and _written_in_place(done) == {"x"}
    assert reinplace.reinplace(trace, []).bound_symbols[0].sym is reinplace.SCATTER_  # torch runs it in place


@pytest.mark.parametrize("saved", [False, True], ids=["through_k", "cache_saved"])
def test_training_through_the_cache_matches_eager_gradients(saved):
    """Gradients flow through the cache's update into k, from the first call on. The cache's new
    value requires grad (it holds k * 2), so, as in eager, the caller's cache takes it with its
    history after the program's Function ran (a later step's gradient reaches k through it): a
    result of the forward, never written in place, whether or not the backward reads it."""
    def fn(cache, k, q, pos):
        cache.index_copy_(2, pos, k * 2)
        return (cache * q).sum()

    jfn = compiler.jit(fn, executors=["torch"])
    for step in range(3):
        cache, k, q = torch.randn(B, H, S, D), torch.randn(B, H, 1, D, requires_grad=True), torch.randn(B, H, S, D)
        q.requires_grad_(saved)
        ec, ek, eq = cache.clone(), k.detach().clone().requires_grad_(), q.detach().clone().requires_grad_(saved)
        pos = torch.tensor([step])
        got, want = jfn(cache, k, q, pos), fn(ec, ek, eq, pos)
        _same((got, cache), (want, ec))
        wrt, ewrt = ((k, q), (ek, eq)) if saved else ((k,), (ek,))
        _same(torch.autograd.grad(got, wrt), torch.autograd.grad(want, ewrt))
        assert cache.requires_grad and ec.requires_grad
    _compiled_and_checked(jfn)
    assert _written_in_place(_execution(jfn)) == set(), _execution(jfn).python()


def test_aliased_inputs_keep_their_copy_and_match_eager():
    def fn(cache, row, k, pos):
        cache.index_copy_(2, pos, k)
        return row * 2

    jfn = compiler.jit(fn, executors=["torch"])
    for step in range(2):
        cache = torch.randn(B, H, S, D)
        ec = cache.clone()
        k, pos = torch.randn(B, H, 1, D), torch.tensor([step])
        with torch.no_grad():
            _same(jfn(cache, cache[0], k, pos), fn(ec, ec[0], k, pos))
        _same(cache, ec)
    _compiled_and_checked(jfn)
    assert not _written_in_place(_execution(jfn))


def test_a_shape_check_after_the_write_sends_the_call_to_eager_before_anything_is_written():
    """The program raises ShapeChanged where nonzero's count differs from the traced one, and
    jit reruns the call eagerly on the caller's tensors: the update must land once."""
    def fn(cache, k, mask):
        cache[:, :, :2] += k
        return torch.nonzero(mask).float().sum() + cache.sum()

    jfn = compiler.jit(fn, executors=["torch"])
    for n in (3, 3, 5):
        cache, k, mask = torch.randn(B, H, S, D), torch.randn(B, H, 2, D), torch.zeros(8, dtype=torch.bool)
        mask[:n] = True
        ec = cache.clone()
        with torch.no_grad():
            _same(jfn(cache, k, mask), fn(ec, k, mask))
        _same(cache, ec)
    assert jfn.cache_info()["misses"] == 1  # the third call ran eagerly after ShapeChanged
    assert not _written_in_place(_execution(jfn))


# --- Triton: the window stored into the cache's own addresses ------------------------------

def test_with_triton_the_kernel_stores_the_window_into_the_cache_itself(triton):
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def fn(cache, k, pos):
        cache.index_copy_(2, pos, k * 2)
        return cache[:, :, :4] * 1.0

    jfn = compiler.jit(fn, executors=triton)
    for step in range(2):
        cache, k = torch.randn(1, 2, 8, 4, device=device), torch.randn(1, 2, 1, 4, device=device)
        pos = torch.tensor([step + 2], device=device)
        ec = cache.clone()
        with torch.no_grad():
            _same(jfn(cache, k, pos), fn(ec, k, pos))
        _same(cache, ec)
    _compiled_and_checked(jfn)
    region = next(r for r in compiler.last_compiled(jfn).forward.plan.regions if r.executor == "triton"
                  and any(b.sym is reinplace.SCATTER_ for b in r.bsyms))
    assert "stored into cache itself (in place)" in region.generated.source
    # the region's launcher on its own: its result is the cache itself, the window written there
    cache, k, pos = torch.randn(1, 2, 8, 4, device=device), torch.randn(1, 2, 1, 4, device=device), \
        torch.tensor([5], device=device)
    by_name = {"cache": cache, "k": k, "pos": pos}
    want = cache.clone().index_copy_(2, pos, k * 2)
    with torch.no_grad():
        out, = region.fn(*[by_name[v.name] for v in region.inputs])
    assert out is cache
    _same(cache, want)


def test_with_triton_a_window_read_and_written_back_is_updated_in_place(triton):
    """`out[:, :3] += y`: the region reads the window through a view of out made before it and
    stores it back: each lane reads and writes the same element, so the launcher writes into out
    itself (a view of out that is not exactly the window sends it to a copy, checked per call)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def fn(out, y):
        out[:, :3] += y
        return out.sum()

    jfn = compiler.jit(fn, executors=triton)
    for _ in range(2):
        out, y = torch.randn(4, 6, device=device), torch.randn(4, 3, device=device)
        expected = out.clone()
        with torch.no_grad():
            _same(jfn(out, y), fn(expected, y))
        _same(out, expected)
    _compiled_and_checked(jfn)
    region = next(r for r in compiler.last_compiled(jfn).forward.plan.regions
                  if any(b.sym is reinplace.STRIDED_SCATTER_ for b in r.bsyms))
    out, y = torch.randn(4, 6, device=device), torch.randn(4, 3, device=device)
    want = out.clone()
    want[:, :3] += y
    window = next(v.name for v in region.inputs if v.name not in ("out", "y"))
    by_name = {"out": out, "y": y, window: out[:, :3]}
    with torch.no_grad():
        got, = region.fn(*[by_name[v.name] for v in region.inputs])
    assert got is out
    _same(out, want)
    shifted = torch.randn(4, 6, device=device)  # a view of out one column over: not the window, a copy
    want = shifted.clone()
    want[:, :3] = shifted[:, 1:4] + y
    by_name = {"out": shifted, "y": y, window: shifted[:, 1:4]}
    with torch.no_grad():
        got, = region.fn(*[by_name[v.name] for v in region.inputs])
    assert got is shifted
    _same(shifted, want)


# --- a real model --------------------------------------------------------------------------

@pytest.mark.skipif(transformers is None, reason="transformers is not installed")
def test_llama_static_cache_decoding_gives_eagers_tokens_writing_the_cache_in_place():
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(3))
    jfn = compiler.jit(model, executors=["torch"])
    caches = [transformers.StaticCache(config=cfg, max_cache_len=16) for _ in range(2)]
    got, want = ids, ids
    with torch.no_grad():
        for step in range(6):  # prefill, then decode steps, greedy
            position = torch.arange(got.shape[1] - (1 if step else 0) * 1, got.shape[1]) if step else \
                torch.arange(ids.shape[1])
            tokens = [got[:, position], want[:, position]]
            a = jfn(input_ids=tokens[0], past_key_values=caches[0], cache_position=position, use_cache=True)
            b = model(input_ids=tokens[1], past_key_values=caches[1], cache_position=position, use_cache=True)
            got = torch.cat([got, a.logits[:, -1:].argmax(-1)], 1)
            want = torch.cat([want, b.logits[:, -1:].argmax(-1)], 1)
            torch.testing.assert_close(a.logits, b.logits, rtol=1e-4, atol=1e-4)
    assert torch.equal(got, want)
    for x, y in zip(objects.state_tensors(caches[0]), objects.state_tensors(caches[1]), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4)
    _compiled_and_checked(jfn)
    trace = _execution(jfn)  # the decode step's program
    # every layer's keys and values in place; copied back is each layer's 0-d position counter only
    # (`cumulative_length.add_(n)`: an add, no scatter)
    copied = {dst.name for dst, _ in trace.writeback} - _written_in_place(trace)
    assert all(dst.numel() == 1 for dst, _ in trace.writeback if dst.name in copied), copied
    assert sum(b.sym.name == "index_copy_" for b in trace.bound_symbols) == 2 * cfg.num_hidden_layers


def test_a_cache_written_from_values_that_require_grad_carries_their_history_across_steps():
    """As in eager, a cache that needs no gradient, written from values that do, requires grad
    after the call and carries their history: a later step's loss reaches an earlier step's k
    through it (the first call's result is differentiable too: its check runs on copies)."""
    def fn(cache, k, q, pos):
        cache.index_copy_(2, pos, k * 2)
        return (cache * q).sum()

    jfn = compiler.jit(fn, executors=["torch"])
    cache, ec = torch.zeros(B, H, S, D), torch.zeros(B, H, S, D)
    ks = [torch.randn(B, H, 1, D, requires_grad=True) for _ in range(3)]
    eks = [k.detach().clone().requires_grad_() for k in ks]
    q = torch.randn(B, H, S, D)
    total = expected = 0
    for step in range(3):
        pos = torch.tensor([step])
        total, expected = total + jfn(cache, ks[step], q, pos), expected + fn(ec, eks[step], q, pos)
        assert cache.requires_grad and ec.requires_grad
    _same(torch.autograd.grad(total, ks), torch.autograd.grad(expected, eks))
    assert not jfn.last.eager_fallback


def test_the_printed_program_says_a_write_back_into_itself_copies_nothing():
    def fn(cache, k, pos):
        cache.index_copy_(2, pos, k * 2)
        return cache.sum()

    jfn = compiler.jit(fn, executors=["torch"])
    with torch.no_grad():
        jfn(torch.zeros(B, H, S, D), torch.randn(B, H, 1, D), torch.tensor([1]))
    printed = _execution(jfn).python()
    assert "# cache was updated in place: nothing to copy" in printed and "written back" not in printed, printed

