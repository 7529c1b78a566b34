"""In-place updates through views are functionalised (fusionlens/frontend/views.py): the program computes
the update, writes it back into the base and makes every other view of that base again from
it, natively, as eager's aliasing has it. Each view kind is run in inference (the base is the
caller's input: its values afterwards are compared too) and in training (the base is computed
from inputs that require grad: gradients are compared), on fresh random inputs, against eager
with the tolerance of each dtype."""

import pytest
import torch
import torch.nn.functional as F

import compiler
from fusionlens.driver import checking
from fusionlens.report.schema import DiagnosticCode

EXECUTORS = ["torch"]
SHAPE = (4, 6)


def _same(actual, expected):
    problem = checking.mismatch(actual, expected)
    assert problem is None, problem


# Each case updates `b`, shape SHAPE, through a view, reading `y` (SHAPE too).
def slice_iadd(b, y):
    b[:, :3] += y[:, :3]  # a timm CNN's `out[:, :c] += shortcut`
    return b.sin()


def narrow_copy(b, y):
    b.narrow(1, 2, 3).copy_(y[:, :3])
    return b * 2


def view_add(b, y):
    b.view(-1).add_(y.reshape(-1))
    return b


def select_mul(b, y):
    b[0].mul_(2)
    return b + y


def t_add(b, y):
    b.t().add_(1)
    return b * y


def expand_fill(b, y):
    b[:1].expand(3, 6).fill_(0.5)  # legal: every aliased element gets the one value
    return b + y


def transpose_setitem(b, y):
    b.transpose(0, 1)[2] = y[:, 0]
    return b


def unsqueeze_add(b, y):
    b.unsqueeze(0).add_(y)
    return b


def stale_view(b, y):
    v = b[1]  # taken before its base is updated: it reads the new values
    b.mul_(y)
    return v * 2


def chained_step(b, y):
    u = b[1:]
    u[:, ::2].mul_(y[1:, ::2])  # a step: a strided scatter
    return u.sum(0), b


def chunk_mul(b, y):
    a, c = b.chunk(2, dim=1)
    c.mul_(3)
    return a + 1, b


def diagonal_add(b, y):
    b[:, :4].diagonal().add_(y[0, :4])  # no box: a diagonal scatter
    return b


def relu_inplace(b, y):
    F.relu(b[1:3], inplace=True)
    return b * y


def masked_setitem(b, y):
    v = b[1:]
    v[v > 0] = 0.0
    return b + y


def permuted_chain(b, y):
    b.view(2, 2, 6).permute(2, 0, 1)[1].mul_(2)
    return b


def detached_zero(b, y):
    b.detach()[0].zero_()  # autograd does not see it: the gradient passes as if it had not happened
    return b * y


def no_grad_update(b, y):
    with torch.no_grad():
        b[2].mul_(0.5)
    return b * y


CASES = [slice_iadd, narrow_copy, view_add, select_mul, t_add, expand_fill, transpose_setitem, unsqueeze_add,
         stale_view, chained_step, chunk_mul, diagonal_add, relu_inplace, masked_setitem, permuted_chain,
         detached_zero, no_grad_update]
# eager's autograd refuses these: the update of an expanded view in its backward (its elements
# share memory), of one of several views one call returns as it runs
TRAINING = [c for c in CASES if c not in (expand_fill, chunk_mul)]


def _native(jfn):
    """The last call ran the compiled program: nothing made its signature run eagerly."""
    report = compiler.last_report(jfn)
    bad = [d.message for d in report.diagnostics if d.severity in ("warning", "error")]
    assert not bad, bad
    assert jfn.cache_info()["misses"] == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_inference_updates_the_callers_base_through_each_view_kind(case, dtype):
    jfn = compiler.jit(case, executors=EXECUTORS)
    with torch.no_grad():
        for _ in range(3):
            b, y = torch.randn(SHAPE, dtype=dtype), torch.randn(SHAPE, dtype=dtype)
            eb, ey = b.clone(), y.clone()
            expected = case(eb, ey)
            _same(jfn(b, y), expected)
            _same((b, y), (eb, ey))  # the caller's tensors afterwards
    _native(jfn)


@pytest.mark.parametrize("case", [slice_iadd, transpose_setitem, stale_view, diagonal_add, no_grad_update],
                         ids=lambda c: c.__name__)
def test_with_triton_the_update_and_its_write_back_fuse_and_match_eager(case, triton):
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def fn(x, y):
        return case(x * 1.5, y)

    for grad in (False, True):
        jfn = compiler.jit(fn, executors=triton)
        with torch.set_grad_enabled(grad):
            x, y = (torch.randn(SHAPE, device=device, requires_grad=grad) for _ in range(2))
            ex, ey = (t.detach().clone().requires_grad_(grad) for t in (x, y))
            expected, actual = fn(ex, ey), jfn(x, y)
            _same(actual, expected)
            if grad:
                cotangent = torch.randn_like(expected)
                _same(_grads([actual], (x, y), [cotangent]), _grads([expected], (ex, ey), [cotangent]))
        _native(jfn)
        regions = compiler.last_report(jfn).forward.regions
        assert any(r.executor == "triton" for r in regions), [r.executor for r in regions]


def _grads(outputs, inputs, cotangents):
    grads = torch.autograd.grad(outputs, inputs, cotangents, allow_unused=True)
    return [torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs)]


@pytest.mark.parametrize("case", TRAINING, ids=lambda c: c.__name__)
def test_training_differentiates_through_the_functional_form(case):
    def fn(x, y):
        return case(x * 1.5, y)

    jfn = compiler.jit(fn, executors=EXECUTORS)
    for _ in range(3):
        x, y = torch.randn(SHAPE, requires_grad=True), torch.randn(SHAPE, requires_grad=True)
        ex, ey = (t.detach().clone().requires_grad_() for t in (x, y))
        expected, actual = fn(ex, ey), jfn(x, y)
        _same(actual, expected)
        expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
        actual = [actual] if isinstance(actual, torch.Tensor) else list(actual)
        cotangents = [torch.randn_like(t) for t in expected]
        _same(_grads(actual, (x, y), cotangents), _grads(expected, (ex, ey), cotangents))
    _native(jfn)
    assert compiler.last_report(jfn).training is not None


def test_where_eagers_autograd_refuses_an_update_of_a_view_so_does_the_compiled_call():
    def fn(x):
        a, c = (x * 1.5).chunk(2, dim=1)  # views of one call that returns several
        c.mul_(3)
        return a

    x = torch.randn(SHAPE, requires_grad=True)
    with pytest.raises(RuntimeError) as eager:
        fn(x)
    with pytest.raises(Exception) as ours:
        compiler.jit(fn, executors=EXECUTORS)(x)
    assert str(eager.value) in str(ours.value)


def test_a_view_taken_before_its_base_is_updated_reads_the_new_values():
    def fn(x):
        v = x[0]
        x.add_(1)
        return v

    jfn = compiler.jit(fn, executors=EXECUTORS)
    x = torch.randn(3, 4)
    ex = x.clone()
    _same(jfn(x), fn(ex))
    _same(x, ex)
    report = compiler.last_report(jfn)
    assert report.forward.traces["acquired"].count("operator.getitem(") == 2  # taken, then made again
    assert not report.fallbacks  # a view made again is a view, the write-back a fused scatter


def test_the_write_back_is_a_setitem_that_fuses_and_the_base_is_written_to_the_caller():
    def fn(x, s):
        x[:, :2] += s
        return x.sum()

    jfn = compiler.jit(fn, executors=EXECUTORS)
    x, s = torch.randn(3, 4), torch.randn(3, 2)
    ex = x.clone()
    _same(jfn(x, s), fn(ex, s))
    _same(x, ex)
    traces = compiler.last_report(jfn).forward.traces
    assert traces["acquired"].count("setitem(") == 1  # Python's closing `x[k] = x[k]` is no op at all
    assert "write_back(x, " in traces["acquired"]
    # the program writes the window into the caller's x itself (middle/reinplace.py): its write-back copies nothing
    assert "setitem_(x, " in traces["execution"]


def test_an_update_of_a_view_of_a_leaf_that_requires_grad_raises_eagers_error_at_its_line():
    def fn(x):
        x[0].mul_(3)
        return x * 2

    x = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError) as eager:
        fn(x.detach().clone().requires_grad_())
    with pytest.raises(Exception) as ours:
        compiler.jit(fn, executors=EXECUTORS)(x)
    assert str(eager.value) in str(ours.value)
    assert f":{fn.__code__.co_firstlineno + 1}:" in str(ours.value)
    assert x.grad is None and not x.detach().isnan().any()


def test_an_update_through_a_view_it_cannot_write_back_runs_eagerly_and_says_where():
    def fn(x):
        v = x.as_strided((2,), (2,))
        v.mul_(3)  # as_strided reads the storage, not x's elements
        return x + 1

    jfn = compiler.jit(fn, executors=EXECUTORS)
    for _ in range(2):
        x = torch.randn(2, 3)
        ex = x.clone()
        _same(jfn(x), fn(ex))
        _same(x, ex)
    (w,) = [d for d in compiler.last_report(jfn).diagnostics if d.code == DiagnosticCode.INPLACE_VIEW]
    assert w.severity == "warning" and w.line == fn.__code__.co_firstlineno + 2


def test_a_reshape_that_views_or_copies_by_strides_runs_eagerly_with_a_non_contiguous_input():
    def fn(x):
        x.flatten()[:3].mul_(2)  # x[:, ::2] flattens to a view of x, x.t() to a copy
        return x * 1

    jfn = compiler.jit(fn, executors=EXECUTORS)
    for base, make in ((torch.randn(3, 4), lambda b: b[:, ::2]), (torch.randn(2, 3), lambda b: b.t())):
        x, ex = make(base.clone()), make(base.clone())  # the same strides for eager
        _same(jfn(x), fn(ex))
        _same(x, ex)
    assert jfn.cache_info()["misses"] == 1  # both (3, 2), non-contiguous: one signature
    assert any(d.code == DiagnosticCode.INPLACE_VIEW for d in compiler.last_report(jfn).diagnostics)


class Stepper(torch.nn.Module):
    """Parameters updated inside forward: one used as a buffer (requires_grad=False), one
    updated under no_grad."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.steps = torch.nn.Parameter(torch.zeros(4), requires_grad=False)
        self.ema = torch.nn.Parameter(torch.zeros(4, 4))

    def forward(self, x):
        self.steps[1:].add_(1)
        with torch.no_grad():
            self.ema.mul_(0.5).add_(self.lin.weight, alpha=0.5)
        return self.lin(x) * self.steps + self.ema.sum()


def test_parameters_updated_inside_forward_are_written_back_natively_in_inference():
    torch.manual_seed(0)
    model, reference = Stepper(), Stepper()
    reference.load_state_dict(model.state_dict())
    jfn = compiler.jit(model, executors=EXECUTORS)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 4)
            _same(jfn(x), reference(x))
            _same((model.steps, model.ema), (reference.steps, reference.ema))
    _native(jfn)


def test_a_parameter_used_as_a_buffer_is_updated_natively_in_training():
    class Counted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.steps = torch.nn.Parameter(torch.zeros(4), requires_grad=False)

        def forward(self, x):
            self.steps[1:].add_(1)
            return self.lin(x) * self.steps

    torch.manual_seed(0)
    model, reference = Counted(), Counted()
    reference.load_state_dict(model.state_dict())
    jfn = compiler.jit(model, executors=EXECUTORS)
    for _ in range(3):
        x = torch.randn(2, 4)
        actual, expected = jfn(x), reference(x)
        _same(actual, expected)
        _same(model.steps, reference.steps)
        actual.sum().backward()
        expected.sum().backward()
        _same((model.lin.weight.grad, model.lin.bias.grad), (reference.lin.weight.grad, reference.lin.bias.grad))
    _native(jfn)
    assert compiler.last_report(jfn).training is not None


def test_compile_leaves_a_parameter_it_traced_an_update_of_as_it_was():
    model = Stepper()
    with torch.no_grad():
        before = [p.clone() for p in model.parameters()]
        compiler.compile(model, torch.randn(2, 4), executors=EXECUTORS)
    _same(list(model.parameters()), before)


def test_a_parameter_that_requires_grad_updated_under_no_grad_in_forward_trains_natively():
    class Decaying(torch.nn.Module):  # an EMA-like update of a trained weight inside forward
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            with torch.no_grad():
                self.lin.weight.mul_(0.9)
            return self.lin(x).tanh()

    torch.manual_seed(0)
    model, reference = Decaying(), Decaying()
    reference.load_state_dict(model.state_dict())
    jfn = compiler.jit(model, executors=EXECUTORS)
    for _ in range(3):
        x = torch.randn(2, 4)
        actual, expected = jfn(x), reference(x)
        _same(actual, expected)
        _same(model.lin.weight, reference.lin.weight)
        actual.square().sum().backward()
        expected.square().sum().backward()
        _same((model.lin.weight.grad, model.lin.bias.grad), (reference.lin.weight.grad, reference.lin.bias.grad))
    _native(jfn)
    assert compiler.last_report(jfn).training is not None


def test_an_input_that_requires_grad_updated_in_place_trains_natively():
    def fn(x, w):
        y = x * 2
        x.mul_(w)  # a non-leaf input: its new value and its history are the update's
        return (x * y).sum()

    jfn = compiler.jit(fn, executors=EXECUTORS)
    for _ in range(3):
        a, w = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
        a2, w2 = a.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        x_eager, x_compiled = a * 1, a2 * 1
        expected, actual = fn(x_eager, w), jfn(x_compiled, w2)
        _same(actual, expected)
        _same(x_compiled, x_eager)
        (expected + x_eager.sum()).backward()  # a later use of x reaches the update's history
        (actual + x_compiled.sum()).backward()
        _same((a2.grad, w2.grad), (a.grad, w.grad))
    _native(jfn)
