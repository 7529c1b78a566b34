"""In-place writes into inputs whose elements share memory (an expanded input: stride 0), as
eager does them: the write lands in the shared memory and every aliasing element shows it;
where eager refuses the op, the compiled call raises eager's error type at the user's line
(fusionlens/frontend/overlap.py, views.py). The fuzzer found both defects (dynamic mode,
seeds 61 and 70: tests/test_fuzz_regressions.py has those programs)."""

from __future__ import annotations

import pytest
import torch

import compiler
from fusionlens.driver import checking
from fusionlens.frontend import overlap
from fusionlens.report.schema import DiagnosticCode

EXECUTORS = ["torch"]
MODES = [pytest.param(False, id="static"), pytest.param(True, id="dynamic")]


def _same(actual, expected) -> None:
    problem = checking.mismatch(actual, expected)
    assert problem is None, problem


def _expanded(shape, dims, dtype=torch.float32):
    """A tensor of `shape` whose `dims` are one memory location each (stride 0), and a twin
    of it with memory of its own for eager to update; fresh values (the test's torch seed,
    which tests/conftest.py prints)."""
    row = [1 if d in dims else n for d, n in enumerate(shape)]
    base = torch.randn(row).to(dtype) if dtype.is_floating_point else torch.randint(-4, 5, row).to(dtype)
    return base.expand(shape), base.clone().expand(shape)


def _check_calls(fn, calls, dynamic: bool):
    """`fn` compiled and eager on each call's (expanded input, other inputs): results and the
    inputs' contents after the call."""
    jfn = compiler.jit(fn, executors=EXECUTORS, dynamic=dynamic)
    for args, twins in calls:
        expected = fn(*twins)
        _same(jfn(*args), expected)
        _same(list(args), list(twins))
    return jfn


def _row_set(x):
    x[0] = 1  # every row of x is one memory row: eager's write shows in all
    return x * 2, x.sum(0)


def _row_set_tensor(x, y):
    x[1] = y
    return x.cumsum(0)


def _select_add(x):
    x[0].add_(1.5)
    return x.amax(0), x - x[1]


def _diagonal(x):
    x.diagonal().add_(1)
    return x + 0


def _fill(x):
    x.fill_(2.5)
    return x.sum()


def _masked(x):
    x[x > 0] = 0
    return x.mean(0)


def _middle(x, v):
    x[:, 1] = v  # x: [a, 3, c], dim 1 expanded
    return x.sum(1), x


def _two_dims(x, y):
    x[0, 1] = y  # x: [2, 3, c], dims 0 and 1 expanded
    return x.reshape(-1, x.shape[-1]).sum(0)


def _read_then_write(x):
    before = x.sum(0)
    x[0].mul_(3)
    return before, x.sum(0)


CASES = {  # fn, [(shape, expanded dims) of x], shapes of the other inputs (a function of x's)
    "row_set": (_row_set, [((2, 1), (0,)), ((3, 4), (0,)), ((5, 2), (0,))], lambda s: []),
    "row_set_tensor": (_row_set_tensor, [((3, 4), (0,)), ((4, 5), (0,)), ((6, 3), (0,))], lambda s: [s[1:]]),
    "select_add": (_select_add, [((3, 4), (0,)), ((4, 6), (0,)), ((2, 3), (0,))], lambda s: []),
    "diagonal": (_diagonal, [((3, 3), (0,)), ((4, 4), (0,)), ((5, 5), (0,))], lambda s: []),
    "fill": (_fill, [((3, 4), (0,)), ((4, 5), (0,)), ((2, 2), (0,))], lambda s: []),
    "masked": (_masked, [((3, 4), (0,)), ((4, 5), (0,)), ((6, 2), (0,))], lambda s: []),
    "middle": (_middle, [((2, 3, 4), (1,)), ((3, 3, 5), (1,)), ((4, 3, 2), (1,))], lambda s: [(s[0], s[2])]),
    "two_dims": (_two_dims, [((2, 3, 4), (0, 1)), ((2, 3, 5), (0, 1)), ((2, 3, 7), (0, 1))], lambda s: [s[2:]]),
    "read_then_write": (_read_then_write, [((3, 4), (0,)), ((4, 5), (0,)), ((5, 3), (0,))], lambda s: []),
}


@pytest.mark.parametrize("dynamic", MODES)
@pytest.mark.parametrize("name", CASES)
def test_a_write_into_an_expanded_input_shows_in_every_element_that_aliases_it(name, dynamic):
    fn, shapes, others = CASES[name]
    calls = []
    for shape, dims in shapes if dynamic else [shapes[0]] * 3:  # static: one signature
        x, twin = _expanded(shape, dims)
        ys = [torch.randn(s) for s in others(shape)]
        calls.append(((x, *ys), (twin, *[y.clone() for y in ys])))
    jfn = _check_calls(fn, calls, dynamic)
    report = compiler.last_report(jfn)
    assert not [d for d in report.diagnostics if d.code == DiagnosticCode.INPLACE_VIEW]
    if not dynamic:  # the program compiled for the first call served the others
        assert jfn.cache_info()["misses"] == 1


def test_the_program_merges_the_update_and_writes_each_location_once():
    """The acquired trace follows the update with the merge (the first changed element of each
    aliased location), and the program writes the input back: no torch call is a fallback."""
    jfn = compiler.jit(_row_set, executors=EXECUTORS)
    x, twin = _expanded((3, 4), (0,))
    _same(jfn(x), _row_set(twin))
    source = compiler.last_report(jfn).forward.traces["acquired"]
    assert "torch.argmax" in source and "torch.gather" in source and "write_back(x, " in source


def _adds(x):
    y = x * 2
    x.add_(1)  # x overlaps itself: eager refuses
    return y


def _copies(x, y):
    x.copy_(y)
    return x


def _slices(x):
    x[0:2] = 1.0
    return x


def _tanh(x):
    return x.tanh_()


REFUSED = {"add_": (_adds, 0), "copy_": (_copies, 1), "slice_set": (_slices, 0), "tanh_": (_tanh, 0)}


@pytest.mark.parametrize("dynamic", MODES)
@pytest.mark.parametrize("name", REFUSED)
def test_where_eager_refuses_the_write_the_compiled_call_raises_its_error_at_the_users_line(name, dynamic):
    fn, others = REFUSED[name]
    x, twin = _expanded((3, 4), (0,))
    ys = [torch.randn(3, 4) for _ in range(others)]
    with pytest.raises(RuntimeError, match="refers to a single memory location") as eager:
        fn(twin, *ys)
    jfn = compiler.jit(fn, executors=EXECUTORS, dynamic=dynamic)
    with pytest.raises(RuntimeError, match="refers to a single memory location") as compiled:
        jfn(x, *ys)
    assert isinstance(compiled.value, compiler.CompileError) and type(eager.value) is RuntimeError
    error = compiled.value.report.error
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1)
                if f"def {fn.__name__}(" in text) + (2 if name == "add_" else 1)
    assert (error.file, error.line) == (__file__, line)
    _same(x, twin)  # neither call wrote anything


@pytest.mark.parametrize("dynamic", MODES)
def test_a_program_for_an_expanded_input_never_serves_a_plain_one_nor_the_reverse(dynamic):
    """Same shape, dtype and contiguity (none): only which elements share memory differs,
    which the jit keys on (overlap.layout_key) and the fast path's stride check sees."""
    def fn(x):
        x[0] = 1
        return x.sum(0)

    def plain():  # [3, 4], not contiguous, no two elements share memory
        t = torch.randn(4, 3).t()
        return t, t.clone()

    for order in ("expanded first", "plain first"):
        jfn = compiler.jit(fn, executors=EXECUTORS, dynamic=dynamic)
        kinds = [lambda: _expanded((3, 4), (0,)), plain]
        if order == "plain first":
            kinds.reverse()
        for k in range(6):  # alternating, each form more than once: cached and fast-path calls too
            x, twin = kinds[k % 2]()
            _same(jfn(x), fn(twin))
            _same(x, twin)
        assert jfn.cache_info()["misses"] == 2


def test_the_layout_key_tells_expanded_overlapping_and_plain_inputs_apart():
    row = torch.randn(1, 4)
    assert overlap.layout_key(torch.randn(3, 4)) is True
    assert overlap.layout_key(torch.randn(4, 3).t()) is False
    assert overlap.layout_key(row.expand(3, 4)) == (0,)
    assert overlap.layout_key(torch.randn(5)[::2]) is False
    windows = torch.randn(8).as_strided((3, 4), (2, 1))  # rows overlap by two elements
    assert overlap.layout_key(windows) == "overlapping" and overlap.overlaps(windows)
    assert not overlap.overlaps(torch.randn(2, 3, 4).permute(2, 0, 1))
    copy = overlap.clone(windows)
    assert copy.stride() == windows.stride() and torch.equal(copy, windows)
    assert copy.untyped_storage().data_ptr() != windows.untyped_storage().data_ptr()


def test_a_write_into_windows_that_overlap_runs_eagerly_and_says_why_at_the_users_line():
    """Elements that meet through strides other than 0 (as_strided): no merge follows them,
    so the signature runs eagerly, with the reason at the line of the write."""
    def fn(x):
        y = x.sum(1)
        x[0] = 0.0
        return y, x.sum(1)

    jfn = compiler.jit(fn, executors=EXECUTORS)
    for _ in range(2):
        memory = torch.randn(8)
        twin_memory = memory.clone()
        x, twin = memory.as_strided((3, 4), (2, 1)), twin_memory.as_strided((3, 4), (2, 1))
        _same(jfn(x), fn(twin))
        _same(memory, twin_memory)
    report = compiler.last_report(jfn)
    note = next(d for d in report.diagnostics if d.code == DiagnosticCode.INPLACE_VIEW)
    assert "overlap in memory" in note.message and note.line == fn.__code__.co_firstlineno + 2
    assert note.file == __file__


def test_several_values_written_into_one_location_run_eagerly_and_say_why():
    """`x[[0, 1]] = y` writes two rows of y into x's one memory row: which lands is eager's
    loop order (torch warns it is deprecated), so that call runs eagerly, saying so."""
    def fn(x, y):
        x[[0, 1]] = y
        return x * 1

    jfn = compiler.jit(fn, executors=EXECUTORS)
    x, twin = _expanded((2, 3), (0,))
    y = torch.randn(2, 3)
    with pytest.warns(UserWarning):
        expected = fn(twin, y)
    with pytest.warns(UserWarning):
        _same(jfn(x, y), expected)
    _same(x, twin)
    note = next(d for d in compiler.last_report(jfn).diagnostics if d.code == DiagnosticCode.INPLACE_VIEW)
    assert "several values into one location" in note.message and note.line == fn.__code__.co_firstlineno + 1


def test_the_merge_runs_in_triton_kernels_too(triton):
    """Under Triton (its interpreter where no GPU is), tiny: the update, its merge and the
    write-back."""
    jfn = compiler.jit(_select_add, executors=triton)
    for _ in range(2):
        x, twin = _expanded((3, 4), (0,))
        _same(jfn(x), _select_add(twin))
        _same(x, twin)


def test_a_value_written_into_an_expanded_input_gets_eagers_gradient():
    """`x[1] = y` into an x whose rows are one memory row, y requiring grad: every row is y,
    so y's gradient counts each row, as eager's autograd does."""
    def fn(x, y):
        x[1] = y
        return (x * torch.arange(1.0, 4.0)[:, None]).sum(0)

    jfn = compiler.jit(fn, executors=EXECUTORS)
    for _ in range(2):
        x, twin = _expanded((3, 4), (0,))
        y = torch.randn(4, requires_grad=True)
        y_eager = y.detach().clone().requires_grad_()
        cotangent = torch.randn(4)
        out, expected = jfn(x, y), fn(twin, y_eager)
        _same(out, expected)
        _same(x.detach(), twin.detach())
        (grad,) = torch.autograd.grad(out, y, cotangent)
        (grad_eager,) = torch.autograd.grad(expected, y_eager, cotangent)
        torch.testing.assert_close(grad, grad_eager)


def test_a_write_into_an_expanded_input_that_requires_grad_runs_eagerly_with_eagers_gradients():
    """x = w.expand(...) of a non-leaf w: eager's autograd records `x[1] = y` on w's history;
    that signature runs eagerly, saying why at the write's line, and the gradients are eager's."""
    def fn(x, y):
        x[1] = y
        return (x * torch.arange(1.0, 4.0)[:, None]).sum(0)

    w0, y0 = torch.randn(1, 4, requires_grad=True), torch.randn(4, requires_grad=True)

    def run(f):
        w, y = w0 * 1, y0 * 1
        x = w.expand(3, 4)
        out = f(x, y)
        return out, x, torch.autograd.grad(out.sum() + x.sum(), (w0, y0))

    jfn = compiler.jit(fn, executors=EXECUTORS)
    for _ in range(2):
        (out, x, grads), (out_eager, x_eager, grads_eager) = run(jfn), run(fn)
        _same([out.detach(), x.detach(), *grads], [out_eager.detach(), x_eager.detach(), *grads_eager])
    note = next(d for d in compiler.last_report(jfn).diagnostics if d.code == DiagnosticCode.INPLACE_VIEW)
    assert "requires grad" in note.message and note.line == fn.__code__.co_firstlineno + 1
