"""In-place writes into inputs that share memory with one another (`f(x, x[0])`, `f(a, a.view(-1))`,
`f(base, base[:, 1:])`, an argument that is a module's buffer or a view of it), as eager does
them: a write through one shows in the others, a read before it sees the old values, and the
caller's tensors end as eager leaves them (fusionlens/frontend/aliasing.py). jit keys a program
that writes into an input by how its call's tensors share memory, so a program built for
aliased inputs never serves independent ones, nor the reverse; where the write cannot be
followed (autograd records it) the signature runs eagerly, and where eager raises, so does
the compiled call. torch.compile(backend="eager") matches eager on each of these programs."""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

import compiler
from fusionlens.driver import api, checking
from fusionlens.frontend import aliasing
from fusionlens.options import CompileOptions
from fusionlens.report.schema import DiagnosticCode


def _same(actual, expected) -> None:
    problem = checking.mismatch(actual, expected)
    assert problem is None, problem


FORMS = {  # the aliasing forms: (the two arguments from one tensor, the same from two tensors)
    "row": lambda t, u: (t, u[0]),  # x and x[0]
    "flat": lambda t, u: (t, u.view(-1)),  # a and a.view(-1)
    "slice": lambda t, u: (t, u[:, 1:]),  # base and base[:, 1:]
}


def _write_view_read_base(x, r):
    r.add_(1.5)
    return x * 2


def _read_then_write(a, v):
    before = a.sum(1)  # eager reads the old values
    v.mul_(-2)
    return a + 1, before


def _write_base_read_view(base, s):
    base.add_(1)
    return s * 3


def _return_both(x, r):
    r.zero_()
    return x, r  # the caller's own tensors, updated


def _both_written(x, r):
    y = r * 3  # (not r.sin(): its backward reads r, which eager then finds updated)
    r.add_(1)
    x.mul_(2)  # also doubles r's elements
    return r + y, x.sum()


FUNCTIONS = {f.__name__.lstrip("_"): f for f in (_write_view_read_base, _read_then_write, _write_base_read_view,
                                               _return_both, _both_written)}


def _calls(form, pattern: str, shape=(3, 4), device="cpu"):
    """A call per letter of `pattern`: A, aliased arguments (`form` of one tensor); P, plain
    ones (the same shapes and strides from two tensors); each with a twin for eager, fresh
    random values each."""
    out = []
    for kind in pattern:
        t = torch.randn(shape, device=device)
        u = t if kind == "A" else torch.randn(shape, device=device)
        t2 = t.clone()
        u2 = t2 if u is t else u.clone()
        out.append(((t, u), form(t, u), (t2, u2), form(t2, u2)))
    return out


def _check(jfn, fn, calls) -> None:
    """Each call: the results and the caller's tensors after it as eager's; a result that is an
    argument is the caller's own tensor, as in eager."""
    for memory, args, memory2, twins in calls:
        expected = fn(*twins)
        got = jfn(*args)
        _same(got, expected)
        _same(list(memory), list(memory2))
        for g, e in zip(pytree.tree_leaves(got), pytree.tree_leaves(expected)):
            assert (g is args[0]) == (e is twins[0]) and (g is args[1]) == (e is twins[1])


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_a_write_through_one_input_shows_in_the_other_and_each_kind_of_call_gets_its_program(name, form):
    fn = FUNCTIONS[name]
    jfn = compiler.jit(fn, executors=["torch"])
    _check(jfn, fn, _calls(FORMS[form], "AAPPAP"))
    info = jfn.cache_info()
    assert info["compiles"] == 2 and info["hits"] == 4  # one program for aliased calls, one for plain ones
    assert jfn.fast.served >= 2  # cached calls of both kinds served by the generated code
    report = compiler.last_report(jfn)
    assert not [d for d in report.diagnostics if d.severity == "error" or d.code == DiagnosticCode.EAGER_FALLBACK]


@pytest.mark.parametrize("form", FORMS)
def test_plain_first_then_aliased(form):
    """The reverse order: the program for independent tensors must not serve aliased ones."""
    fn = _write_base_read_view
    jfn = compiler.jit(fn, executors=["torch"])
    _check(jfn, fn, _calls(FORMS[form], "PPAAP"))
    assert jfn.cache_info()["compiles"] == 2


@pytest.mark.parametrize("case", ["write_view_read_base-row", "read_then_write-flat", "both_written-slice",
                                  "write_base_read_view-row"])
def test_triton_kernels_around_the_aliased_update(case, triton):
    name, form = case.split("-")
    fn = FUNCTIONS[name]
    jfn = compiler.jit(fn, executors=triton)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # (on the CPU: Triton's interpreter, tiny sizes)
    _check(jfn, fn, _calls(FORMS[form], "AAP", shape=(2, 3), device=device))
    assert jfn.cache_info()["compiles"] == 2
    aliased = [e for (_, relation), e in jfn.aliased.items() if relation]  # the program for aliased calls
    assert len(aliased) == 1 and not aliased[0].eager_fallback
    assert "triton" in {r.executor for r in aliased[0].report.forward.regions}


def test_the_program_reads_the_memory_once_and_views_the_other_input_from_it():
    jfn = compiler.jit(_write_view_read_base, executors=["torch"])
    x = torch.randn(3, 4)
    jfn(x, x[0])
    source = compiler.last_report(jfn).forward.traces["acquired"]
    assert "alias_span(" in source and "span_put(" in source and "span_view(" in source


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", ["write_view_read_base", "read_then_write", "return_both"])
def test_compile_checks_the_program_on_inputs_that_share_memory_and_leaves_them_as_they_were(name, form):
    """compiler.compile's check runs the program on copies that share memory as the example's
    do; the program it made is eager's on fresh aliased inputs too."""
    fn = FUNCTIONS[name]
    t = torch.randn(3, 4)
    before = t.clone()
    report = compiler.compile(fn, *FORMS[form](t, t), executors=["torch"])
    assert not [d for d in report.diagnostics if d.severity == "error" or d.code == DiagnosticCode.EAGER_FALLBACK]
    _same(t, before)
    c, _, failed = api.compile_checked(fn, FORMS[form](t, t), {}, CompileOptions.from_env().replace(
        executors=["torch"]), "fn", benchmark=False)
    assert not failed
    t, t2 = torch.randn(3, 4), None
    t2 = t.clone()
    _same(c.fn(*FORMS[form](t, t), *c.constants), fn(*FORMS[form](t2, t2)))
    _same(t, t2)


def test_writes_that_never_touch_an_aliased_input_compile_as_before():
    def fn(x, r, y):
        y.add_(1)
        return x + r, y

    jfn = compiler.jit(fn, executors=["torch"])
    for _ in range(2):
        t, y = torch.randn(3, 4), torch.randn(4)
        t2, y2 = t.clone(), y.clone()
        _same(jfn(t, t[0], y), fn(t2, t2[0], y2))
        _same([t, y], [t2, y2])
    source = compiler.last_report(jfn).forward.traces["acquired"]
    assert "alias_span" not in source
    assert not [d for d in compiler.last_report(jfn).diagnostics if d.code == DiagnosticCode.EAGER_FALLBACK]


class _Cache(torch.nn.Module):
    """A module whose buffer the caller also passes in (or a view of it)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.randn(3, 4))

    def forward(self, x):
        x.add_(1)  # x is the buffer, or a row of it
        return self.b * 2


@pytest.mark.parametrize("view", ["itself", "row", "flat"])
def test_an_argument_that_aliases_a_modules_buffer(view):
    make = {"itself": lambda b: b, "row": lambda b: b[1], "flat": lambda b: b.view(-1)}[view]
    m, twin = _Cache(), _Cache()
    twin.b.copy_(m.b)
    jm = compiler.jit(m, executors=["torch"])
    for _ in range(3):
        _same(jm(make(m.b)), twin(make(twin.b)))
        _same(m.b, twin.b)
    x, x2 = torch.randn(m.b.shape), None  # an argument that is not the buffer: another program
    x2 = x.clone()
    _same(jm(make(x)), twin(make(x2)))
    _same([m.b, x], [twin.b, x2])
    assert jm.cache_info()["compiles"] == 2
    report = compiler.compile(m, make(m.b), executors=["torch"])  # checked on copies that share memory alike
    assert not [d for d in report.diagnostics if d.severity == "error" or d.code == DiagnosticCode.EAGER_FALLBACK]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", ["write_view_read_base", "read_then_write", "both_written"])
def test_under_grad_a_write_autograd_records_runs_eagerly_with_eagers_results_and_gradients(name, form):
    """Views of a non-leaf that requires grad: eager's autograd records the write through one
    of them on their common base; the signature runs eagerly (the report says why, at the
    write's line), so values and gradients are eager's."""
    fn = FUNCTIONS[name]
    jfn = compiler.jit(fn, executors=["torch"])
    for _ in range(2):
        leaf = torch.randn(3, 4, requires_grad=True)
        leaf2 = leaf.detach().clone().requires_grad_()
        t, t2 = leaf * 1, leaf2 * 1
        got, expected = jfn(*FORMS[form](t, t)), fn(*FORMS[form](t2, t2))
        _same(got, expected)
        sum(g.sum() for g in pytree.tree_leaves(got)).backward()
        sum(e.sum() for e in pytree.tree_leaves(expected)).backward()
        _same(leaf.grad, leaf2.grad)
    said = [d for d in compiler.last_report(jfn).diagnostics if d.code == DiagnosticCode.INPLACE_VIEW]
    assert said and said[0].file == __file__ and "shares memory with another input" in said[0].message


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", ["write_view_read_base", "write_base_read_view"])
def test_where_eager_refuses_a_write_into_a_leaf_the_compiled_call_raises_its_error(name, form):
    fn = FUNCTIONS[name]
    leaf = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad") as eager:
        fn(*FORMS[form](leaf, leaf))
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad") as compiled:
        compiler.jit(fn, executors=["torch"])(*FORMS[form](leaf, leaf))
    assert isinstance(compiled.value, type(eager.value))
    error = getattr(compiled.value, "report", None) and compiled.value.report.error  # (traced: a CompileError)
    where = (error.file, error.line) if error else (str(compiled.traceback[-1].path), compiled.traceback[-1].lineno + 1)
    write = {"write_view_read_base": "r.add_(1.5)", "write_base_read_view": "base.add_(1)"}[name]
    assert where == (__file__, next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if write in text))
    assert leaf.grad is None


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, x, r):
        y = (x + self.w).pow(2).sum()  # its backward reads x as it was here
        r.add_(1)
        return y + (x * self.w).sum(), x


def test_a_training_call_whose_inputs_share_memory_runs_eagerly_with_eagers_gradients():
    """The inputs do not require grad, the parameter does: the program would be differentiated,
    and its backward would read values saved before the write; the signature runs eagerly."""
    m, twin = _Scaled(), _Scaled()
    twin.load_state_dict(m.state_dict())
    jm = compiler.jit(m, executors=["torch"])
    for _ in range(2):
        t = torch.randn(3, 4)
        t2 = t.clone()
        m.w.grad = twin.w.grad = None
        got, expected = jm(t, t[1]), twin(t2, t2[1])
        _same(got, expected)
        _same(t, t2)
        assert got[1] is t
        got[0].backward()
        expected[0].backward()
        _same(m.w.grad, twin.w.grad)
    assert [d for d in compiler.last_report(jm).diagnostics if d.code == DiagnosticCode.INPLACE_VIEW]


@pytest.mark.parametrize("form", FORMS)
def test_under_no_grad_tensors_that_require_grad_compile(form):
    fn = _both_written
    jfn = compiler.jit(fn, executors=["torch"])
    with torch.no_grad():
        for _ in range(2):
            leaf = torch.randn(3, 4, requires_grad=True)
            leaf2 = leaf.detach().clone().requires_grad_()
            _same(jfn(*FORMS[form](leaf, leaf)), fn(*FORMS[form](leaf2, leaf2)))
            _same(leaf, leaf2)
    assert jfn.cache_info()["compiles"] == 1
    assert not [d for d in compiler.last_report(jfn).diagnostics if d.code == DiagnosticCode.EAGER_FALLBACK]


def test_views_as_another_dtype_run_eagerly_and_match_eager():
    def fn(x, bits):
        bits.bitwise_xor_(-2**31)  # flips the sign bit of each float
        return x * 1

    jfn = compiler.jit(fn, executors=["torch"])
    for _ in range(2):
        x = torch.randn(3, 4)
        x2 = x.clone()
        _same(jfn(x, x.view(torch.int32)), fn(x2, x2.view(torch.int32)))
        _same(x, x2)


def test_an_overlapping_copy_eager_refuses_raises_its_error_at_the_users_line():
    def fn(x, r):
        x.copy_(r)  # r is x[0]: eager refuses a copy whose source and destination meet
        return x

    t = torch.randn(3, 4)
    with pytest.raises(RuntimeError, match="refer to a single memory location") as eager:
        fn(t, t[0])
    with pytest.raises(RuntimeError, match="refer to a single memory location") as compiled:
        compiler.jit(fn, executors=["torch"])(t, t[0])
    assert isinstance(compiled.value, type(eager.value))
    error = compiled.value.report.error
    assert (error.file, error.line) == (__file__, fn.__code__.co_firstlineno + 1)


_GLOBAL = torch.zeros(3, 4)


def _reads_a_global(x):
    x.add_(1)  # x is a row of _GLOBAL
    return _GLOBAL * 2


def test_an_input_that_shares_memory_with_a_global_the_function_reads_runs_eagerly():
    """The global is traced as itself (a captured constant), the input on a copy: the write
    would not show in it; the signature runs eagerly, its first call too, and says why."""
    jfn = compiler.jit(_reads_a_global, executors=["torch"])
    for _ in range(2):
        start = torch.randn(3, 4)
        _GLOBAL.copy_(start)
        expected, after = _reads_a_global(_GLOBAL[1]).clone(), _GLOBAL.clone()
        _GLOBAL.copy_(start)
        _same(jfn(_GLOBAL[1]), expected)
        _same(_GLOBAL, after)
    said = [d for d in compiler.last_report(jfn).diagnostics if d.code == DiagnosticCode.INPLACE_VIEW]
    assert said and (said[0].file, said[0].line) == (__file__, _reads_a_global.__code__.co_firstlineno + 1)


@pytest.mark.parametrize("form", FORMS)
def test_dynamo_agrees_with_eager_on_these_programs(form):
    """What torch.compile does for the same calls (backend="eager": dynamo and its guards, no
    code generation): eager's results too, which FusionLens matches above."""
    torch._dynamo.reset()
    fn = _both_written
    compiled = torch.compile(fn, backend="eager")
    for memory, args, memory2, twins in _calls(FORMS[form], "AP"):
        _same(compiled(*args), fn(*twins))
        _same(list(memory), list(memory2))
    torch._dynamo.reset()


def test_the_relation_is_one_pass_over_storages_where_none_is_shared():
    t, u = torch.randn(3, 4), torch.randn(3, 4)
    assert aliasing.of([t, u[0]]) == ()
    assert aliasing.of([t[0], t[1]]) == ()  # one storage, memory that never meets
    assert aliasing.of([t, t[1]]) == (((0, 0, (4, 1)), (1, 16, (1,))),)
    assert aliasing.of([t, t[1]]) != aliasing.of([t, t[2]])
    assert aliasing.of([u], [t], frozenset([aliasing._storage(t)])) == ()
    assert aliasing.of([t.view(-1)], [t], frozenset([aliasing._storage(t)])) != ()
