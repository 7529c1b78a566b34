"""Tensors a compiled function reaches outside its arguments (fusionlens/frontend/captured.py):
module globals, closure cells, a global model's buffers, a cache in a global dict, class
attributes. Semantics are eager's: an in-place update of one is written once a call (the first
call too), a change of its values between calls is seen (values are never baked in), and a
name bound to another tensor between calls compiles again, as torch.compile guards a global it
lifted by identity. Every call is compared with eager running the same sequence on its own
copy of the state (the function with its globals dict copied, a closure made twice)."""

from __future__ import annotations

import copy
import inspect
import re
import types

import pytest
import torch
import torch.nn.functional as F

import compiler
from fusionlens.driver import api, checking
from fusionlens.options import CompileOptions
from fusionlens.report.schema import DiagnosticCode

G = torch.zeros(3)
CACHE = {"k": torch.zeros(4, 3)}
BN = torch.nn.BatchNorm1d(3)
RUNNING = torch.zeros(3)
W = torch.ones(3, requires_grad=True)
COUNT = torch.zeros(())


class Table:
    bias = torch.zeros(3)


def _same(actual, expected) -> None:
    problem = checking.mismatch(actual, expected)
    assert problem is None, problem


def _twin(fn, **state):
    """`fn` reading its own copy of the module's globals, with `state` in place of some."""
    scope = dict(fn.__globals__)
    scope.update(state)
    return types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)


def _line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


@pytest.fixture(autouse=True)
def _fresh_globals():
    """Each test starts from zeros (they write into the module's globals)."""
    global G, COUNT
    G, COUNT = torch.zeros(3), torch.zeros(())
    CACHE["k"] = torch.zeros(4, 3)
    Table.bias = torch.zeros(3)
    RUNNING.zero_()
    BN.reset_running_stats()
    BN.train()
    yield


def _add_to_global(x):
    G.add_(1)
    return x + G


def _read_global(x):
    return x * G + 1


def _calls(jfn, twin, n: int = 3, shape=(3,), between=None, twin_state=None, state=None):
    """`n` calls of the jit and of eager on fresh inputs (each its own copy), results and the
    state compared after each; `between(i)` runs before call i on both (by the caller)."""
    for i in range(n):
        if between is not None:
            between(i)
        x = torch.randn(shape)
        _same(jfn(x.clone()), twin(x.clone()))
        if state is not None:
            _same(state(), twin_state())


@pytest.mark.parametrize("no_grad", [False, True])
def test_a_global_written_in_place_is_written_once_a_call(no_grad):
    """The issue's program: eager prints x+G = 2, 3, 4 with G = 1, 2, 3 (compiled, the first call
    wrote twice and G then stayed at 1)."""
    jfn = compiler.jit(_add_to_global, executors=["torch"])
    mine = torch.zeros(3)
    twin = _twin(_add_to_global, G=mine)
    with torch.no_grad() if no_grad else torch.enable_grad():
        for expected in (1.0, 2.0, 3.0):
            x = torch.ones(3)
            _same(jfn(x), twin(x.clone()))
            _same(G, mine)
            assert G.tolist() == [expected] * 3
    assert jfn.cache_info()["compiles"] == 1 and jfn.fast.served >= 1  # the generated code served calls too


def test_the_issue_program_prints_eagers_numbers():
    jfn = compiler.jit(_add_to_global)
    printed = [(jfn(torch.ones(3)).tolist(), G.tolist()) for _ in range(3)]
    assert printed == [([2.0] * 3, [1.0] * 3), ([3.0] * 3, [2.0] * 3), ([4.0] * 3, [3.0] * 3)]


@pytest.mark.parametrize("fn", [_read_global, _add_to_global], ids=["read", "written"])
def test_a_globals_new_values_are_seen_without_compiling_again(fn):
    """G.fill_ outside the function between calls: eager sees the new values, so does the
    program (no value of G is baked in), from the same program."""
    jfn = compiler.jit(fn, executors=["torch"])
    mine = torch.zeros(3)
    twin = _twin(fn, G=mine)

    def refill(i):
        G.fill_(5.0 + i)
        mine.fill_(5.0 + i)
    _calls(jfn, twin, n=4, between=refill, state=lambda: G, twin_state=lambda: mine)
    assert jfn.cache_info()["compiles"] == 1


@pytest.mark.parametrize("fn", [_read_global, _add_to_global], ids=["read", "written"])
def test_a_global_rebound_between_calls_compiles_again(fn):
    """`G = torch.zeros(4)` between calls: the program read the old tensor; the guard sees the
    name bound to another one and compiles again, saying so at the line that reads G."""
    global G
    jfn = compiler.jit(fn, executors=["torch"])
    twin = _twin(fn, G=G.clone())
    _calls(jfn, twin, n=2, state=lambda: G, twin_state=lambda: twin.__globals__["G"])
    G = torch.full((3,), 2.0)  # the same shape: another tensor all the same
    twin.__globals__["G"] = G.clone()
    _calls(jfn, twin, n=2, state=lambda: G, twin_state=lambda: twin.__globals__["G"])
    assert jfn.cache_info()["compiles"] == 2
    said = [d for d in compiler.last_report(jfn).diagnostics if d.message.startswith("compiled again")]
    assert said and "G is now another tensor" in said[0].message and said[0].code == DiagnosticCode.CAPTURED_CONSTANT
    assert said[0].line == _line_of(fn, "G")
    G = torch.zeros(4)
    twin.__globals__["G"] = G.clone()
    _calls(jfn, twin, n=2, shape=(4,), state=lambda: G, twin_state=lambda: twin.__globals__["G"])
    assert jfn.cache_info()["compiles"] == 3


def test_a_global_resized_in_place_compiles_again():
    """The same tensor object with another shape (resize_): the program was compiled for the old
    layout, so the guard fails and the call compiles for the new one."""
    jfn = compiler.jit(_read_global, executors=["torch"])
    twin = _twin(_read_global, G=G.clone())
    _calls(jfn, twin, n=2)
    G.resize_(1).fill_(3.0)
    twin.__globals__["G"].resize_(1).fill_(3.0)
    _calls(jfn, twin, n=2)
    assert jfn.cache_info()["compiles"] == 2


def _counter():
    """A closure over a tensor it updates, and a way to rebind the cell from outside."""
    total = torch.zeros(3)

    def step(x):
        total.mul_(0.5).add_(x)  # an exponential moving sum
        return total * 2

    def rebind(t):
        nonlocal total
        total = t
    return step, rebind, lambda: total


def test_a_closure_tensor_written_in_place_and_its_cell_rebound():
    step, rebind, state = _counter()
    eager, eager_rebind, eager_state = _counter()
    jfn = compiler.jit(step, executors=["torch"])
    _calls(jfn, eager, n=3, state=state, twin_state=eager_state)
    rebind(torch.ones(3))
    eager_rebind(torch.ones(3))
    _calls(jfn, eager, n=2, state=state, twin_state=eager_state)
    assert jfn.cache_info()["compiles"] == 2


def _through_global_model(x):
    return BN(x) * 2


def test_a_global_models_buffers_are_updated_once_a_call():
    """A module the function calls (not the one compiled): batch_norm's running statistics,
    updated inside the torch call, and num_batches_tracked, updated by an add_ in its forward."""
    mine = copy.deepcopy(BN)
    twin = _twin(_through_global_model, BN=mine)
    jfn = compiler.jit(_through_global_model, executors=["torch"])
    for _ in range(3):
        x = torch.randn(5, 3)
        _same(jfn(x), twin(x))
        _same(dict(BN.named_buffers()), dict(mine.named_buffers()))
    assert int(BN.num_batches_tracked) == 3 and jfn.cache_info()["compiles"] == 1
    BN.running_mean = torch.ones(3)  # a buffer replaced: compiled again
    mine.running_mean = torch.ones(3)
    x = torch.randn(5, 3)
    _same(jfn(x), twin(x))
    _same(dict(BN.named_buffers()), dict(mine.named_buffers()))
    assert jfn.cache_info()["compiles"] == 2


LINEAR = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh(), torch.nn.Linear(3, 3))


def _through_global_linear(x):
    return LINEAR(x) + 1


def test_a_global_model_rebound_or_its_parameter_replaced_compiles_again():
    """The parameters of a global model are inputs reached through it: the model's name is
    checked at each call, the path to each parameter once any module registered one since (as
    jit keys a compiled module's own); a new parameter object, or a new model, compiles again,
    while an update of a parameter's values in place does not."""
    global LINEAR
    jfn = compiler.jit(_through_global_linear, executors=["torch"])
    with torch.no_grad():
        x = torch.randn(2, 3)
        _same(jfn(x), LINEAR(x) + 1)
        LINEAR[0].weight.mul_(2)  # values: read at the next call
        _same(jfn(x), LINEAR(x) + 1)
        assert jfn.cache_info()["compiles"] == 1
        LINEAR[2].weight = torch.nn.Parameter(torch.randn(3, 3))
        _same(jfn(x), LINEAR(x) + 1)
        assert jfn.cache_info()["compiles"] == 2
        LINEAR = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh(), torch.nn.Linear(3, 3))
        _same(jfn(x), LINEAR(x) + 1)
        assert jfn.cache_info()["compiles"] == 3
        said = [d for d in compiler.last_report(jfn).diagnostics if d.message.startswith("compiled again")]
        assert said and "LINEAR is now another Sequential" in said[0].message


def _running_stats(x):
    return F.batch_norm(x, RUNNING, torch.ones(3), training=True)


def test_a_global_updated_inside_a_torch_call():
    mine = torch.zeros(3)
    twin = _twin(_running_stats, RUNNING=mine)
    jfn = compiler.jit(_running_stats, executors=["torch"])
    _calls(jfn, twin, n=3, shape=(4, 3), state=lambda: RUNNING, twin_state=lambda: mine)


def _into_cache(x):
    k = CACHE["k"]
    k[1:3] += x  # through a view of the cached tensor
    return k.sum(0)


def test_a_cache_in_a_global_dict_written_through_a_view_and_replaced():
    mine = {"k": torch.zeros(4, 3)}
    twin = _twin(_into_cache, CACHE=mine)
    jfn = compiler.jit(_into_cache, executors=["torch"])
    _calls(jfn, twin, n=3, shape=(2, 3), state=lambda: CACHE["k"], twin_state=lambda: mine["k"])
    CACHE["k"] = torch.ones(4, 3)
    mine["k"] = torch.ones(4, 3)
    _calls(jfn, twin, n=2, shape=(2, 3), state=lambda: CACHE["k"], twin_state=lambda: mine["k"])
    assert jfn.cache_info()["compiles"] == 2


def _class_attribute(x):
    Table.bias.add_(x.mean())
    return x - Table.bias


def test_a_class_attribute_written_in_place_and_rebound():
    class Mine:
        bias = torch.zeros(3)
    twin = _twin(_class_attribute, Table=Mine)
    jfn = compiler.jit(_class_attribute, executors=["torch"])
    _calls(jfn, twin, n=3, state=lambda: Table.bias, twin_state=lambda: Mine.bias)
    Table.bias, Mine.bias = torch.ones(3), torch.ones(3)
    _calls(jfn, twin, n=2, state=lambda: Table.bias, twin_state=lambda: Mine.bias)
    assert jfn.cache_info()["compiles"] == 2


def test_dynamic_sizes_with_a_global_written_in_place():
    """A size that changes compiles a dynamic program (traced again on fake tensors, which must
    not update the real global either); it serves every later size."""
    mine = torch.zeros(3)
    twin = _twin(_add_to_global, G=mine)
    jfn = compiler.jit(_add_to_global, executors=["torch"])
    for n in (2, 3, 4, 5):
        global G
        G = torch.zeros(1) if n == 2 else G
        if n == 2:
            twin.__globals__["G"] = mine = torch.zeros(1)
        x = torch.randn(n)
        _same(jfn(x), twin(x))
        _same(G, mine)
    assert jfn.cache_info()["compiles"] == 2


def _add_to_global_and_read_input(x):
    G.add_(1)
    return x * 2  # x is a view of G: eager reads it after the update


def test_an_argument_that_views_the_global_it_updates_runs_eagerly():
    """f(G[:2]) where f updates G: the input shares G's memory, so the traced run on a copy of
    the input is not eager's; the signature runs eagerly (the first call too), once a call."""
    mine = torch.zeros(3)
    twin = _twin(_add_to_global_and_read_input, G=mine)
    jfn = compiler.jit(_add_to_global_and_read_input, executors=["torch"])
    for _ in range(3):
        _same(jfn(G[:2]), twin(mine[:2]))
        _same(G, mine)
    said = [d for d in compiler.last_report(jfn).diagnostics if d.severity == "warning"]
    assert said and "shares memory with" in said[0].message


def _decayed(x):
    with torch.no_grad():
        W.mul_(0.5)  # a global that requires grad, updated where autograd does not record it
    return (x * W).sum()


def test_a_global_that_requires_grad_runs_eagerly_and_says_why():
    mine = W.detach().clone().requires_grad_(True)
    twin = _twin(_decayed, W=mine)
    jfn = compiler.jit(_decayed, executors=["torch"])
    for _ in range(3):
        x = torch.randn(3, requires_grad=True)
        x2 = x.detach().clone().requires_grad_(True)
        out, expected = jfn(x), twin(x2)
        _same(out, expected)
        out.backward()
        expected.backward()
        _same((x.grad, W.detach()), (x2.grad, mine.detach()))
        _same(W.grad, mine.grad)
    said = [d for d in compiler.last_report(jfn).diagnostics if d.code == DiagnosticCode.CAPTURED_CONSTANT
            and d.severity == "warning"]
    assert said and "requires grad" in said[0].message and said[0].line == _line_of(_decayed, "W.mul_")


def _rebinding(x):
    global COUNT
    COUNT = COUNT + x.sum()
    return x * COUNT


def test_a_function_that_rebinds_a_global_runs_eagerly():
    jfn = compiler.jit(_rebinding, executors=["torch"])
    twin = _twin(_rebinding, COUNT=torch.zeros(()))
    for _ in range(3):
        x = torch.randn(3)
        _same(jfn(x), twin(x))
        _same(COUNT, twin.__globals__["COUNT"])
    said = [d for d in compiler.last_report(jfn).diagnostics if d.code == DiagnosticCode.CAPTURED_CONSTANT
            and d.severity == "warning"]
    assert said and "rebinds the global COUNT" in said[0].message


def _replacing(x):
    CACHE["k"] = CACHE["k"] + x.sum()  # a new tensor in the global dict, at each call
    return CACHE["k"] * 2


def test_a_function_that_replaces_a_tensor_in_a_global_dict_runs_eagerly():
    mine = {"k": torch.zeros(4, 3)}
    twin = _twin(_replacing, CACHE=mine)
    jfn = compiler.jit(_replacing, executors=["torch"])
    _calls(jfn, twin, n=3, state=lambda: CACHE["k"], twin_state=lambda: mine["k"])
    said = [d for d in compiler.last_report(jfn).diagnostics if d.severity == "warning"]
    assert said and "sets CACHE['k'] to another object" in said[0].message
    assert jfn.cache_info()["compiles"] == 1


def test_compile_leaves_the_global_alone_and_its_program_writes_it():
    """compile is no call: tracing and the check leave G as it was; the compiled program, run
    again on fresh inputs, writes G as each eager call does."""
    c, _, failed = api.compile_checked(_add_to_global, (torch.ones(3),), {}, CompileOptions(executors=["torch"]),
                                       "f", benchmark=False)
    assert not failed and G.tolist() == [0.0] * 3
    mine = torch.zeros(3)
    twin = _twin(_add_to_global, G=mine)
    for _ in range(3):
        x = torch.randn(3)
        _same(c.fn(x, *c.constants), twin(x))
        _same(G, mine)


def test_triton_writes_the_global_once_a_call(triton):
    jfn = compiler.jit(_add_to_global, executors=triton)
    mine = torch.zeros(3)
    twin = _twin(_add_to_global, G=mine)
    _calls(jfn, twin, n=3, state=lambda: G, twin_state=lambda: mine)
    assert jfn.cache_info()["compiles"] == 1


# --- the names captured tensors print under: their Source, sanitised and unique ---------------------

class _Holder:
    def __init__(self):
        self.cache = torch.zeros(3)

    def step(self, self_cache):  # an argument named as the attribute would print: made unique
        self.cache.add_(1)
        return self_cache * self.cache


def _everything(x):
    return x * G + CACHE["k"][0] + Table.bias + BN.weight + LINEAR[0].bias


def _runs_as_printed(fn, args) -> None:
    """Each stage's printed program of the acquired trace runs on its own (the user's tensors,
    then the constants by name, as tests/test_ops.py's check_decomposed runs them) and gives
    eager's result; the caller's state is put back after each run."""
    from fusionlens.frontend import tracer as frontend
    from fusionlens.middle import passes
    res = frontend.trace(fn, copy.deepcopy(args))
    expected = res.eager_output
    for stage in (res.trace, passes.decompose(res.trace)):
        inputs = list(args) + [res.constants[v.name] for v in res.trace.inputs if v.role != "input"]
        saved = [t.clone() for t in inputs]
        _same(stage.python_callable()(*inputs), expected)
        with torch.no_grad():
            for t, s in zip(inputs, saved):
                t.copy_(s)


def _inputs(trace: str) -> list[str]:
    head = next(line for line in trace.splitlines() if line.startswith("def "))
    return [n.strip() for n in head[head.index("(") + 1:head.index(")")].split(",")]


def test_captured_tensors_print_under_the_name_the_function_reads():
    with torch.no_grad():
        report = compiler.compile(_everything, torch.randn(3), executors=["torch"])
    acquired = report.programs[0].traces["acquired"]
    assert _inputs(acquired) == ["x", "G", "CACHE_k", "Table_bias", "BN_weight", "LINEAR_0_bias"], acquired
    notes = [d.message for d in report.diagnostics if d.code == DiagnosticCode.CAPTURED_CONSTANT]
    assert "captured tensor constant CACHE_k (f32[4, 3] cpu, read as CACHE['k'])" in " ".join(notes), notes
    assert not any(" c0 " in n or "c0," in n for n in notes)
    _runs_as_printed(_everything, (torch.randn(3),))


def test_a_closure_and_an_attribute_of_the_bound_object_by_name_made_unique():
    step, _, _ = _counter()
    jfn = compiler.jit(step, executors=["torch"])
    jfn(torch.randn(3))
    assert "total" in _inputs(compiler.last_report(jfn).programs[0].traces["acquired"])
    holder, twin = _Holder(), _Holder()
    jm = compiler.jit(holder.step, executors=["torch"])
    for _ in range(3):
        x = torch.randn(3)
        _same(jm(x), twin.step(x))
        _same(holder.cache, twin.cache)
    names = _inputs(compiler.last_report(jm).programs[0].traces["acquired"])
    assert names == ["self_cache", "self_cache_1"], names  # the argument keeps its own name


def test_a_global_models_buffers_print_under_its_name():
    with torch.no_grad():
        report = compiler.compile(_through_global_model, torch.randn(5, 3), executors=["torch"])
    names = _inputs(report.programs[0].traces["acquired"])
    assert {"b_BN_running_mean", "b_BN_running_var", "b_BN_num_batches_tracked", "BN_weight",
            "BN_bias"} <= set(names), names


def test_a_captured_name_never_shadows_a_value_or_a_program_global():
    """A global named as the trace names its values (t0) or as a name the program imports
    (torch is the module, so a tensor named `prims` here): each gets a unique name, and the
    printed program computes eager's result."""
    scope = {"torch": torch, "t0": torch.full((3,), 2.0), "prims": torch.arange(3.0)}
    exec("def f(x):\n    y = x * 2\n    return y * t0 + prims", scope)
    fn = scope["f"]
    with torch.no_grad():
        report = compiler.compile(fn, torch.randn(3), executors=["torch"])
    acquired = report.programs[0].traces["acquired"]
    names = _inputs(acquired)
    assert names == ["x", "t0_1", "prims_1"], acquired  # t0 is the value computed before it was met
    _runs_as_printed(fn, (torch.randn(3),))


def test_the_editors_hover_shows_the_captured_names():
    """The language server's hover of the line (its trace from this line) reads the report."""
    pytest.importorskip("pygls")
    from lsp_server.annotations import Result, build_annotations, norm_path
    from lsp_server.views import hover_markdown
    with torch.no_grad():
        report = compiler.compile(_everything, torch.randn(3), executors=["torch"])
    path = norm_path(__file__)
    ann = build_annotations(Result("everything", path, None, "ok", "", report, {}, 1), path)
    line = _line_of(_everything, "return x * G") - 1  # 0-based, as the editor's
    text = hover_markdown(ann.lines[line], [], lambda r, rid: ann.region_lines.get(rid, []), line)
    assert "**trace from this line:**" in text
    for name in ("G", "CACHE_k", "Table_bias", "BN_weight", "LINEAR_0_bias"):
        assert re.search(rf"\b{name}\b", text), (name, text)
    assert not re.search(r"\bc\d\b", text), text
