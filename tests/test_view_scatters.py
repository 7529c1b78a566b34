"""View updates as fused scatters (issue 30 part 3): the write-back of an in-place update through
a view is one scatter prim into its base (strided_scatter: slices, selects, steps, diagonals,
chains of them; scatter: index_copy_ and a setitem at a tensor of positions), which the Triton
executor stores into a copy of the base in the kernel that computed the update. Each kind is
checked against eager on fresh random inputs: the result, the caller's tensors afterwards, and
gradients in training; no fallback is reported for any of them."""

import pytest
import torch

import compiler
from fusionlens.driver import checking
from fusionlens.ops import prims
from fusionlens.middle import reinplace
from zoo_imports import transformers
from nvfuser_testing import runner  # noqa: F401 - a fixture: the nvFuser reference (and nvFuser on a GPU)

SHAPE = (4, 6)


def _same(actual, expected):
    problem = checking.mismatch(actual, expected)
    assert problem is None, problem


def slice_iadd(b, y):
    b[:, :3] += y[:, :3] * 2
    return b


def flat_step_zero(b, y):
    b.view(-1)[::2].zero_()
    return b * y


def transposed_select(b, y):
    b.transpose(0, 1)[0].add_(1.0)
    return b + y


def step_setitem(b, y):
    b[1:, 1:5:2] = y[1:, :2].exp()
    return b


def narrow_copy(b, y):
    b.narrow(1, 2, 3).copy_(y[:, :3] * 2)
    return b


def diagonal_add(b, y):
    b[:, :4].diagonal().add_(y[0, :4].sin())
    return b


def offset_diagonal(b, y):
    b.diagonal(1).mul_(3)
    return b - y


def index_copy(b, y):
    b.index_copy_(1, torch.tensor([4, 0]), y[:, :2].tanh())
    return b


def positions_setitem(b, y):
    b[:, torch.tensor([1, -1])] = y[:, 2:4] + 1
    return b


def unfold_mul(b, y):
    b.unfold(1, 2, 3).mul_(y[:, :2, None] + 1)  # no window of b's numbers: put at the numbers it holds
    return b


CASES = [slice_iadd, flat_step_zero, transposed_select, step_setitem, narrow_copy, diagonal_add, offset_diagonal,
         index_copy, positions_setitem, unfold_mul]


# an update of an input is stored into the input itself (middle/reinplace.py): the in-place prims
SCATTER_NAMES = (prims.strided_scatter.name, prims.scatter.name, reinplace.STRIDED_SCATTER_.name,
                 reinplace.SCATTER_.name)


def _scatters(report) -> int:
    return sum(op in SCATTER_NAMES for r in report.forward.regions for op in r.ops if r.executor != "torch")


def _check_no_fallback(jfn):
    report = compiler.last_report(jfn)
    assert not report.fallbacks, [(f.op, f.reason) for f in report.fallbacks]
    assert not [d.message for d in report.diagnostics if d.severity in ("warning", "error")]
    assert jfn.cache_info()["misses"] == 1
    return report


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_each_scatter_kind_is_a_scatter_prim_with_no_fallback(case):
    for dtype in (torch.float32, torch.bfloat16):
        jfn = compiler.jit(case, executors=["torch"])
        with torch.no_grad():
            for _ in range(2):
                b, y = torch.randn(SHAPE, dtype=dtype), torch.randn(SHAPE, dtype=dtype)
                eb = b.clone()
                _same(jfn(b, y), case(eb, y))
                _same(b, eb)  # the caller's base afterwards
        report = _check_no_fallback(jfn)
    assert {prims.strided_scatter.name, prims.scatter.name} & {p for op in report.ops for p in op.prims}


def _matches_eager(jfn, fn, x, y):
    """jfn(x, y) against fn on copies: its result, the inputs after it, and (where x requires
    grad) the gradients of both inputs for one random cotangent."""
    grad = x.requires_grad
    ex, ey = (t.detach().clone().requires_grad_(grad) for t in (x, y))
    actual, expected = jfn(x, y), fn(ex, ey)
    _same(actual, expected)
    _same((x, y), (ex, ey))
    if grad:
        g = torch.randn_like(expected)
        _same(torch.autograd.grad(actual, (x, y), g), torch.autograd.grad(expected, (ex, ey), g))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_with_triton_the_scatter_is_stored_by_the_kernel_that_computed_it(case, triton):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for grad in (False, True):
        def fn(x, y, grad=grad):
            return case(x * 1.5 if grad else x, y)

        jfn = compiler.jit(fn, executors=triton)
        with torch.set_grad_enabled(grad):
            _matches_eager(jfn, fn, *(torch.randn(SHAPE, device=device, requires_grad=grad) for _ in range(2)))
        report = _check_no_fallback(jfn)
        assert _scatters(report) >= 1, [(r.executor, r.ops) for r in report.forward.regions]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_with_nvfuser_the_scatter_is_an_fd_ops_scatter_in_the_region(case, runner):  # noqa: F811 - the fixture
    for grad in (False, True):
        def fn(x, y, grad=grad):
            return case(x * 1.5 if grad else x, y)

        jfn = compiler.jit(fn, executors=["nvfuser", "torch"])
        with torch.set_grad_enabled(grad):
            for _ in range(2):
                _matches_eager(jfn, fn, *(runner.to(torch.randn(SHAPE)).requires_grad_(grad) for _ in range(2)))
        report = _check_no_fallback(jfn)
        assert _scatters(report) >= 1, [(r.executor, r.ops) for r in report.forward.regions]
        code = "".join(r.code for r in report.forward.regions if r.executor == "nvfuser")
        assert "fd.ops.scatter(" in code


def test_gradients_through_each_scatter_kind_match_eager():
    for case in CASES:
        def fn(x, y, case=case):
            return case(x * 1.5, y).square()

        jfn = compiler.jit(fn, executors=["torch"])
        x, y = torch.randn(SHAPE, requires_grad=True), torch.randn(SHAPE, requires_grad=True)
        ex, ey = (t.detach().clone().requires_grad_() for t in (x, y))
        actual, expected = jfn(x, y), fn(ex, ey)
        _same(actual, expected)
        g = torch.randn_like(expected)
        _same(torch.autograd.grad(actual, (x, y), g), torch.autograd.grad(expected, (ex, ey), g))
        _check_no_fallback(jfn)


@pytest.mark.skipif(transformers is None, reason="transformers is not installed")
def test_a_static_cache_decode_step_writes_the_cache_in_a_fused_region(triton):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 32, (1, 3))
    caches = [transformers.StaticCache(config=cfg, max_cache_len=8) for _ in range(2)]
    with torch.no_grad():
        for cache in caches:  # the prefill, eager in both
            model(input_ids=ids, past_key_values=cache, use_cache=True)
        step = torch.tensor([[5]])
        position = torch.tensor([3])
        want = model(input_ids=step, past_key_values=caches[0], cache_position=position, use_cache=True)
        jfn = compiler.jit(model, executors=triton)
        got = jfn(input_ids=step, past_key_values=caches[1], cache_position=position, use_cache=True)
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-4)
    from fusionlens.frontend import objects
    for a, b in zip(objects.state_tensors(caches[1]), objects.state_tensors(caches[0]), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    report = compiler.last_report(jfn)
    fused = [r for r in report.forward.regions if r.executor == "triton" and reinplace.SCATTER_.name in r.ops]
    # the keys' and the values' writes, in RoPE's region (they share the positions' index), into the cache itself
    assert sum(r.ops.count(reinplace.SCATTER_.name) for r in fused) == 2, [(r.executor, r.ops) for r in fused]
    assert any(prims.add.name in r.ops for r in fused)
    assert not [f for f in report.fallbacks if "index_copy" in f.op]


@pytest.mark.parametrize("mode", ["default", "backward"])
def test_the_fuzzers_in_place_programs_report_no_view_update_fallback(mode):
    """CI's fuzz tier's programs (tests/fuzz/modes.py) that update a tensor in place, each
    compiled for its first call: no update through a view falls back (tests/fuzz/view_updates.py)."""
    from tests.fuzz.generate import generate
    from tests.fuzz.modes import CI_PROGRAMS, MODES, device, environment
    from tests.fuzz.view_updates import view_update_fallbacks

    found, ran = {}, 0
    for seed in range(CI_PROGRAMS[mode]):
        program = generate(seed, MODES[mode])
        if not any(line.family == "inplace" for line in program.lines):
            continue
        with environment(MODES[mode]), torch.set_grad_enabled(MODES[mode].grad):
            jfn = compiler.jit(program.function())
            try:
                jfn(*program.make_inputs(0, device()))
            except Exception:  # noqa: BLE001 - what eager raises on too (the fuzz tier judges the rest)
                continue
        ran += 1
        if bad := view_update_fallbacks(compiler.last_report(jfn)):
            found[seed] = bad
    assert ran >= 50  # the family is drawn often enough to say something
    assert not found, found
