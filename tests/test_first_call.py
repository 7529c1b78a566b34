"""A jit's first call (issue 30 part 4: at most 0.15x Thunder's, benchmarks/bench_compile.py
times it): it runs the program once where the check's run was the call's own, its report prints
the traces only when they are read, and the per-process lookups it makes are cheap ones that
give what the expensive ones gave. Counted and compared here, never timed."""

import copy
import json
import math
import os
import pickle
import re
import sysconfig

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import compiler
from fusionlens.driver import checking, pipeline, reporting, wire
from fusionlens.frontend import arguments, intra_op, tracer
from fusionlens.ir import provenance
from fusionlens.ir.trace import Trace
from fusionlens.middle import passes
from fusionlens.options import CompileOptions
from fusionlens.report import schema as R
from fusionlens.report.discovery import is_model_code


def _chain(x, y):
    return torch.relu(torch.sin(x * y + 1.0) - x) * 3.0


def _close(got, want):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.fixture
def runs(monkeypatch):
    """How often a compiled program ran: every Compiled's call counted."""
    count = [0]
    compile_program = pipeline.compile_program

    def counted(*args, **kwargs):
        c = compile_program(*args, **kwargs)
        fn = c.fn

        def run(*a):
            count[0] += 1
            return fn(*a)
        c.fn = run
        return c
    monkeypatch.setattr(pipeline, "compile_program", counted)
    return count


@pytest.mark.parametrize("check", [True, False])
def test_the_first_call_runs_the_program_once(runs, check):
    jfn = compiler.jit(_chain, options=CompileOptions(check=check))
    x, y = torch.randn(6), torch.randn(6)
    with torch.no_grad():
        out = jfn(x, y)
        assert runs[0] == 1, "checked, then run again for the call"
        _close(out, _chain(x, y))
        x2, y2 = torch.randn(6), torch.randn(6)  # fresh inputs: a cached call runs it once more
        _close(jfn(x2, y2), _chain(x2, y2))
    assert runs[0] == 2 and jfn.cache_info()["compiles"] == 1
    assert jfn.last.compiled.first_result is None, "a jit entry keeps no call's tensors"


def _updates(x, y):
    x.add_(y)
    return x * 2.0


def test_a_call_that_updates_its_input_runs_on_it_once(runs):
    jfn = compiler.jit(_updates)
    x, y = torch.randn(5), torch.randn(5)
    expected_x = x.clone()
    expected = _updates(expected_x, y)
    with torch.no_grad():
        out = jfn(x, y)
    assert runs[0] == 2  # the check ran on a copy: the call's own run updates x, once
    _close(x, expected_x)
    _close(out, expected)


def _dropped(x):
    return F.dropout(x, 0.5, training=True) * 2.0


def test_a_random_program_draws_eagers_numbers_on_its_first_call(runs):
    x = torch.randn(64)
    torch.manual_seed(7)
    expected = _dropped(x)
    jfn = compiler.jit(_dropped)
    torch.manual_seed(7)
    with torch.no_grad():
        out = jfn(x)
    assert runs[0] == 2  # the random stream put back, the call draws eager's mask itself
    _close(out, expected)


def test_a_training_first_call_gives_eagers_gradients(runs):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    jfn = compiler.jit(model)
    x = torch.randn(3, 8, requires_grad=True)
    cot = torch.randn(3, 4)
    got = torch.autograd.grad(jfn(x), [x, *model.parameters()], cot)
    want = torch.autograd.grad(model(x), [x, *model.parameters()], cot)
    for g, w in zip(got, want):
        _close(g, w)
    assert not jfn.last.eager_fallback
    # checked, its gradients checked, then run for the call: a training result's graph is the
    # call's own (the check's float64 judgement may swap its leaves' data)
    assert runs[0] == 3


@pytest.fixture
def printed(monkeypatch):
    """How many traces were printed."""
    count = [0]
    python = Trace.python

    def counted(self, nested=False):
        count[0] += 1
        return python(self, nested)
    monkeypatch.setattr(Trace, "python", counted)
    return count


def test_a_jit_report_prints_its_traces_when_they_are_read(printed):
    jfn = compiler.jit(_chain)
    x, y = torch.randn(4), torch.randn(4)
    jfn(x, y)
    report = compiler.last_report(jfn)
    program = report.programs[0]
    assert printed[0] == 1, "the first call printed a trace beside the program it runs"
    assert program.traces == wire.traces(compiler.last_compiled(jfn).forward.traces)
    assert printed[0] == 1 + 2 * len(R.TRACE_STAGES)  # read: each stage printed once (and here once more)
    expected = wire.traces(compiler.last_compiled(jfn).forward.traces)
    assert list(program.traces) == list(R.TRACE_STAGES)
    assert "def _chain(x, y):" in program.traces["execution"]
    again = R.CompileReport.from_json(report.to_json())
    assert again.programs[0].traces == expected and again == report


def test_a_compile_report_prints_its_traces_as_it_is_made(printed):
    report = compiler.compile(_chain, torch.randn(4), torch.randn(4))
    assert printed[0] > 0 and type(report.programs[0].traces) is dict


def test_a_dynamic_programs_traces_read_later_are_those_of_its_compile():
    jfn = compiler.jit(_chain, dynamic=True)
    jfn(torch.randn(4), torch.randn(4))
    at_compile = wire.traces(compiler.last_compiled(jfn).forward.traces)
    for n in (5, 9, 17):  # later calls at other sizes, served by the same program
        jfn(torch.randn(n), torch.randn(n))
    assert jfn.cache_info()["compiles"] == 1
    traces = compiler.last_report(jfn).programs[0].traces
    assert traces == at_compile and "s0" in traces["execution"]


def test_deferred_reads_as_the_dict_it_makes():
    made = []

    def make():
        made.append(1)
        return {"a": "x", "b": "y"}
    plain = {"a": "x", "b": "y"}
    d = R.Deferred(make=make)
    assert made == []
    assert d == plain and plain == R.Deferred(make=make) and made == [1, 1]
    assert d["a"] == "x" and d.get("b") == "y" and list(d) == ["a", "b"] and len(d) == 2 and made == [1, 1]
    for read in (lambda d: dict(d), lambda d: {**d}, lambda d: list(d.items()), lambda d: "a" in d,
                 lambda d: pickle.loads(pickle.dumps(d)), copy.deepcopy, copy.copy, repr, bool, sorted,
                 lambda d: d | {}, lambda d: d.copy(), json.dumps, lambda d: json.dumps(d, indent=1)):
        fresh, want = R.Deferred(make=make), read(dict(plain))
        assert read(fresh) == want, read
    assert R.Deferred(make=make) != {"a": "x"} and not R.Deferred(make=dict)
    report = R.ProgramReport("forward", R.Deferred(make=make))
    assert json.loads(json.dumps(dict(report.traces))) == plain
    assert R.ProgramReport.__eq__(report, R.ProgramReport("forward", plain))


def test_the_reports_versions_are_looked_up_when_read():
    report = compiler.compile(_chain, torch.randn(4), torch.randn(4))
    assert report.versions == reporting.versions() and report.versions["torch"] == torch.__version__
    assert json.loads(report.to_json())["versions"] == reporting.versions()


def test_code_roots_classify_sysconfigs_folders_as_sysconfig_names_them():
    roots = provenance.code_roots()
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib"):
        assert not is_model_code(os.path.join(paths[key], "json", "decoder.py"), roots), key
    for key in ("purelib", "platlib"):
        assert is_model_code(os.path.join(paths[key], "transformers", "x.py"), roots), key
    torch_file = os.path.join(os.path.dirname(torch.__file__), "nn", "functional.py")
    assert not is_model_code(torch_file, roots) and is_model_code(__file__, roots)


def test_the_comparisons_without_regular_expressions_are_res():
    for name in ("abc", "a.b-c", "1x", "ñame", "x²", "a b", "", "_", "٣x", "forward", "Linear.0"):
        expected = re.sub(r"\W", "_", name)
        assert arguments.sanitize(name) == (expected if expected and not expected[0].isdigit() else f"_{expected}")
    names = ("t1", "t", "t12", "tx", "t٣", "t1a", "s1", "t²", "t007")
    trace = Trace("f", [], [], None)
    for name in names:  # passes.max_index reads `t<n>` names as re.fullmatch(r"t(\d+)") did
        found = re.fullmatch(r"t(\d+)", name)
        trace.bound_symbols = [type("B", (), {"outputs": [type("V", (), {"name": name})()], "subsymbols": []})()]
        assert passes.max_index(trace) == (int(found.group(1)) if found else -1), name


@pytest.mark.parametrize("a, b, same", [
    ([1.0, math.nan], [1.0, math.nan], True), ([0.0], [-0.0], True), ([1.0, 2.0], [1.0, 2.5], False),
    ([1.0, math.nan], [1.0, 2.0], False), ([math.inf], [math.inf], True)])
def test_equal_first_keeps_what_the_checks_call_equal(a, b, same):
    ta, tb = torch.tensor(a), torch.tensor(b)
    assert (checking.mismatch(ta, tb) is None) == (same or bool(torch.isclose(ta, tb, equal_nan=True).all()))
    assert tracer._same_values(ta, tb) == same


# --- the first call's runs of small ops on one intra-op thread (frontend/intra_op.py) -------------

class _Threads(TorchDispatchMode):
    """The intra-op thread count each aten op ran with, in order."""

    def __init__(self):
        super().__init__()
        self.ran: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ran.append((func.__name__, torch.get_num_threads()))
        return func(*args, **(kwargs or {}))

    def of(self, name: str) -> list[int]:
        return [n for f, n in self.ran if f.startswith(name)]


@pytest.fixture
def two_threads():
    """torch with two intra-op threads (its default on a 2-core machine), put back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


class _SmallMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


_SMALL_CALLS = {  # (function, example-input maker, the aten ops a run of it runs: how often)
    "softmax": (lambda x: torch.softmax(x, -1), lambda: torch.randn(2, 8), {"_softmax": 1}),
    "layer_norm": (torch.nn.LayerNorm(16).eval(), lambda: torch.randn(4, 16), {"native_layer_norm": 1}),
    "mlp": (_SmallMLP().eval(), lambda: torch.randn(2, 8), {"addmm": 2, "gelu": 1}),
}


@pytest.mark.parametrize("name", list(_SMALL_CALLS))
def test_a_small_first_call_runs_its_ops_once_each_way_on_one_thread(two_threads, name):
    """softmax, layer_norm and an MLP on a few elements: torch would split their rows over both
    threads and wait for the pool to wake (10-16 ms on a loaded 2-core machine, each run). The
    first call runs each op twice on real data (traced, then the checked program whose result is
    the call's), both on one thread; so does each later call (its generated code switches the
    count); the caller's thread count is put back after each."""
    fn, make, ops = _SMALL_CALLS[name]
    jfn = compiler.jit(fn)
    x = make()
    with torch.no_grad():
        want = fn(x)
        with _Threads() as first:
            got = jfn(x)
        assert torch.get_num_threads() == 2
        _close(got, want)
        for op, n in ops.items():
            assert first.of(op) == [1] * (2 * n), (op, first.ran)
        x2 = make()  # fresh inputs: the cached call
        with _Threads() as later:
            got2 = jfn(x2)
        assert torch.get_num_threads() == 2 and jfn.fast.served == 1
        _close(got2, fn(x2))
        for op, n in ops.items():
            assert later.of(op) == [1] * n, (op, later.ran)
        assert fn(x2) is not None and torch.get_num_threads() == 2
    assert not jfn.last.eager_fallback and jfn.cache_info()["compiles"] == 1 and jfn.last.compiled.one_thread


def test_a_chain_of_elementwise_ops_keeps_the_callers_threads(two_threads):
    """Elementwise kernels below intra_op.SMALL elements run on one thread anyway: the generated
    call of such a program switches nothing (no cost a call)."""
    jfn = compiler.jit(_chain)
    x, y = torch.randn(6), torch.randn(6)
    with torch.no_grad():
        jfn(x, y)
        with _Threads() as later:
            _close(jfn(x, y), _chain(x, y))
    assert not jfn.last.compiled.one_thread and "THREADS" not in jfn.fast.source(jfn.last)
    assert set(n for _, n in later.ran) == {2}


def test_an_op_on_a_large_tensor_keeps_the_callers_threads(two_threads):
    """Past intra_op.SMALL elements parallel kernels pay off: traced and checked on both threads."""
    jfn = compiler.jit(lambda x: torch.softmax(x * 2.0, -1))
    x = torch.randn(64, intra_op.SMALL // 64 + 1)
    with torch.no_grad():
        with _Threads() as first:
            got = jfn(x)
        _close(got, torch.softmax(x * 2.0, -1))
        with _Threads() as later:
            again = jfn(x)
        _close(again, torch.softmax(x * 2.0, -1))
    assert first.of("_softmax") == [2, 2] and later.of("_softmax") == [2], (first.ran, later.ran)
    assert not jfn.last.compiled.one_thread


def test_a_transform_keeps_the_callers_threads(two_threads):
    """An FFT's CPU kernel may compute other bits on one thread than on two (the OpInfo sweep
    found ifft and ihfft 1e-8 apart): traced, checked and called on the caller's threads, so the
    results are eager's exactly."""
    fn = lambda x: torch.fft.ifft(x * 2.0).real  # noqa: E731
    jfn = compiler.jit(fn)
    x = torch.randn(4, 16)
    with torch.no_grad():
        with _Threads() as first:
            got = jfn(x)
        assert torch.equal(got, fn(x))
        with _Threads() as later:
            assert torch.equal(jfn(x), fn(x))
    assert set(first.of("_fft")) == {2} and set(later.of("_fft")) == {2}, (first.ran, later.ran)
    assert not jfn.last.compiled.one_thread


def test_a_dynamic_program_keeps_the_callers_threads(two_threads):
    """Its sizes are symbols: no size says it stays small, so its calls are left on the pool."""
    jfn = compiler.jit(lambda x: torch.softmax(x, -1), dynamic=True)
    with torch.no_grad():
        for n in (3, 5):
            x = torch.randn(2, n)
            _close(jfn(x), torch.softmax(x, -1))
    assert jfn.cache_info()["compiles"] == 1 and not jfn.last.compiled.one_thread


def test_the_callers_thread_count_is_back_after_a_traced_call_raises(two_threads):
    def bad(x):
        y = torch.softmax(x, -1)
        return y @ torch.ones(3, 3)  # [2, 8] @ [3, 3]: eager raises at this line

    with pytest.raises(compiler.CompileError):
        compiler.jit(bad)(torch.randn(2, 8))
    assert torch.get_num_threads() == 2


def test_only_plain_small_tensors_are_small():
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert intra_op.small([torch.randn(2, 8), 3, torch.nn.Parameter(torch.randn(4))])
    assert not intra_op.small([]) and not intra_op.small([1.0, None])  # no tensor: nothing runs on the pool
    assert not intra_op.small([torch.randn(intra_op.SMALL + 1)])
    assert not intra_op.small([torch.randn(2, 8, device="meta")])
    assert not intra_op.small([torch.randn(4, 4).to_sparse()])
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.randn(2, 8))
    assert not intra_op.small([fake])  # runs no kernel; its numel may be a symbol
