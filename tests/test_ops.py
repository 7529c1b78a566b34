"""Differential tests of every supported torch-level op against eager PyTorch.

For each sample in op_samples.py and each dtype it supports:

- trace it, decompose it, and run the printed traces on their own: the decomposed trace
  and its flattened form (the leaves of the decomposition: prims and library calls), which
  really runs the prims; each matches eager within the dtype's tolerance
  (fusionlens.driver.checking). An op with a decomposition is decomposed (no fallback note) unless
  the sample says it is not;
- compile it with `compiler.compile` (no error diagnostics) and run it with `compiler.jit`.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils import _pytree as pytree

import compiler
from fusionlens.driver import checking
from fusionlens.frontend import tracer as frontend
from fusionlens.middle import passes
from fusionlens.ops import torch_ops

import op_samples
from op_samples import F32, SAMPLES, clone_args

# The op tests run the torch executor unless told otherwise (fusion executors are tested
# by their own suites; here they would multiply the run time).
EXECUTORS = os.environ.get("FUSIONLENS_OP_EXECUTORS", "torch").split(",")

# Bugs in fusionlens/ found by these samples, reported with a repro and a suggested fix.
# Each marks the listed samples' tests xfail(strict=True): once fixed, delete the entry.
BUGS: dict = {}  # sample name -> reason, for a known compiler bug (xfail strict)


def _cases(bugs):
    out = []
    for s in SAMPLES:
        for dtype in s.dtypes:
            reason = bugs.get(s.id(dtype)) or bugs.get(s.name)
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            out.append(pytest.param(s, dtype, id=s.id(dtype), marks=marks))
    return out


def eager(s, args):
    """Eager result on a copy of the arguments; skip dtypes the CPU lacks for this op."""
    try:
        with torch.no_grad():
            return s.fn(*clone_args(args))
    except (RuntimeError, NotImplementedError) as e:
        if "not implemented for" in str(e) or "Half" in str(e) or "BFloat16" in str(e):
            pytest.skip(f"eager PyTorch on this CPU: {e}")
        raise


def trace_inputs(res, args) -> list:
    """The positional inputs of a printed trace: the user's tensors, then its constants."""
    user = [x for x in pytree.tree_leaves(args) if isinstance(x, torch.Tensor)]
    return user + [res.constants[v.name] for v in res.trace.inputs if v.role != "input"]


def assert_matches(actual, expected, what, s, args=None):
    if s.random:
        a, e = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
        assert [(x.shape, x.dtype) for x in a] == [(x.shape, x.dtype) for x in e], what
        return
    problem = checking.mismatch(actual, expected)
    if problem is not None and args is not None:
        problem = _judged_in_float64(actual, s, args) and problem
    assert problem is None, f"{what}: {problem}"


def _judged_in_float64(actual, s, args):
    """A 16-bit result checked against the float64 result rounded once: eager's 16-bit kernels
    may accumulate or round where a decomposition (float32 accumulation) does not, and where the
    two stray apart by cancellation eager is not the better answer (nll_loss_weights_nd bf16, a
    weighted sum: 0.057 from eager's). None where it matches, else the mismatch."""
    leaves = [x for x in pytree.tree_leaves(args) if isinstance(x, torch.Tensor)]
    if not any(x.dtype in (torch.float16, torch.bfloat16) for x in leaves):
        return "not a 16-bit case"
    wide = pytree.tree_map(lambda x: x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x,
                           clone_args(args))
    with torch.no_grad():
        exact, spec = pytree.tree_flatten(s.fn(*wide))
    got = pytree.tree_leaves(actual)
    if len(got) != len(exact):
        return "another structure"
    rounded = [e.to(g.dtype) if isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor) else e
               for e, g in zip(exact, got)]
    return checking.mismatch(actual, pytree.tree_unflatten(rounded, spec))


def _is_alias(b) -> bool:
    """A nested op whose result is one of its inputs (`t0 = torch.reshape(t0, ...)`)."""
    names = {v.name for v in b.inputs()}
    return bool(b.outputs) and all(o.name in names for o in b.outputs)


def flat_trace(trace):
    return trace.with_("fusion", passes.flatten(trace.bound_symbols))


@pytest.mark.filterwarnings("ignore:Implicit dimension choice")
@pytest.mark.parametrize("s,dtype", _cases(BUGS))
def test_op_matches_eager(s, dtype, _random_seed):
    """(a) the decomposed trace, run on its own, and (b) the compiled program match eager;
    a failure names its torch seed (its inputs are drawn from it)."""
    args = s.make(dtype)
    expected = eager(s, args)
    try:
        check_decomposed(s, args, expected)
        check_compiled(s, dtype, args, expected)
    except AssertionError as e:
        raise AssertionError(f"{e}\n(torch seed {_random_seed}: rerun with FUSIONLENS_SEED={_random_seed})") from e


def check_decomposed(s, args, expected):
    res = frontend.trace(s.fn, clone_args(args))
    assert_matches(res.eager_output, expected, "the traced call itself", s)  # eager's own kernels: no judge
    acquired = res.trace
    decomposed = passes.decompose(acquired)

    fallbacks = [(b.sym.name, b.note) for b in decomposed.bound_symbols
                 if b.note and b.sym.decomposition is not None]
    if s.decomposes:
        assert not fallbacks, f"ops fell back instead of decomposing: {fallbacks}\n{decomposed.python()}"
    else:  # a decomposition that declines these arguments, or an opaque call
        notes = [b.note for b in decomposed.bound_symbols if b.note]
        assert any(s.why_not in note for note in notes) or any(
            b.sym.kind == "opaque" for b in decomposed.bound_symbols), f"expected a fallback: {s.why_not!r}"
    flat = flat_trace(decomposed)
    for b in flat.bound_symbols:  # leaves are prims, library calls or opaque calls
        assert b.sym.kind in ("prim", "opaque") or b.sym.decomposition is None or b.note, b.sym.name

    for stage in (acquired, decomposed, flat):
        fn = stage.python_callable()
        inputs = clone_args(trace_inputs(res, args))
        assert_matches(fn(*inputs), expected, f"the {stage.stage} trace run on its own\n{stage.python()}", s, args)


def check_compiled(s, dtype, args, expected):
    if dtype == torch.float16:
        return  # float16 numerics are checked on the decomposed traces; the program path is bf16's
    if dtype == F32:  # compile and jit build the same report; compile once per sample
        report = compiler.compile(s.fn, *clone_args(args), executors=EXECUTORS)
        assert report.status == "ok" and not _errors(report, s), _errors(report, s)
    jfn = compiler.jit(s.fn, executors=EXECUTORS)
    assert_matches(jfn(*clone_args(args)), expected, "compiler.jit output", s, args)
    assert not _errors(compiler.last_report(jfn), s)
    assert not jfn.last.eager_fallback or s.random, "jit fell back to eager: " + "; ".join(
        d.message for d in compiler.last_report(jfn).diagnostics)


def _errors(report, s) -> list:
    errors = [d.message for d in report.diagnostics if d.severity == "error"]
    if s.random:
        errors = [m for m in errors if "does not match eager" not in m]
    return errors


def test_every_registered_callable_has_samples():
    """A torch callable added to torch_ops.REGISTRY without a sample here fails this test."""
    seen = set()
    for s in SAMPLES:
        seen.update(id(f) for f in op_samples.funcs_called(s))
    # (a callable of FusionLens's own, which the frontend records in place of the user's call,
    # e.g. batch_norm_cumulative's: its symbol's samples reach it through the user's call)
    missing = [fn for fn in torch_ops.REGISTRY if id(fn) not in seen
               and not (getattr(fn, "__module__", None) or "").startswith("fusionlens.")]
    # Some registered callables never reach a TorchFunctionMode themselves: operators
    # (`a + b` arrives as Tensor.add) and F.tanh/F.sigmoid (they call the Tensor method).
    # Those are covered when what they do reach is the same symbol, which has samples.
    unreached = []
    for fn in missing:
        reached = _reaches(fn)
        sym = torch_ops.REGISTRY[fn][0]
        if not reached or any(torch_ops.lookup(f) is None or torch_ops.lookup(f)[0] is not sym or id(f) not in seen
                              for f in reached):
            unreached.append(torch_ops.qualified_name(fn) or repr(fn))
    assert not unreached, f"registered torch callables without a sample in tests/samples_*.py: {unreached}"


def _reaches(fn) -> list:
    """The callables the frontend's mode sees when user code calls `fn` on tensors."""
    x = torch.rand(3, 3) + 0.5
    mode = op_samples._Seen()
    for args in ((x, x), (x,)):
        try:
            with torch.no_grad(), mode:
                fn(*args)
            return mode.funcs
        except TypeError:
            mode.funcs.clear()
    return []


def test_every_symbol_has_samples():
    ops = {s.op for s in SAMPLES}
    missing = [name for name in torch_ops.SYMBOLS if name not in ops]
    assert not missing, f"symbols without a sample: {missing}"


def test_low_precision_is_covered():
    decomposed_ops = {s.op for s in SAMPLES if torch.float16 in s.dtypes and torch.bfloat16 in s.dtypes}
    assert len(decomposed_ops) > 0.7 * len({s.op for s in SAMPLES})


def test_samples_cover_layouts_and_scalars():
    recipes = [a for s in SAMPLES for a in pytree.tree_leaves(s.args, is_leaf=lambda a: isinstance(a, op_samples.T))]
    tensors = [a for a in recipes if isinstance(a, op_samples.T)]
    assert any(a.layout == "t" for a in tensors) and any(a.layout == "slice" for a in tensors)
    assert any(0 in a.shape for a in tensors)
    assert any(a.shape == () for a in tensors)


def test_data_dependent_control_flow_warns():
    def fn(x):
        if x.sum() > 0:
            return x * 2
        return x - 1

    x = torch.randn(4, 4)
    report = compiler.compile(fn, x, executors=EXECUTORS)
    warnings = [d for d in report.diagnostics if d.severity == "warning" and "control flow" in d.message]
    assert warnings, report.diagnostics
    assert warnings[0].line == fn.__code__.co_firstlineno + 1
    assert not [d for d in report.diagnostics if d.severity == "error"]
    jfn = compiler.jit(fn, executors=EXECUTORS)
    assert checking.mismatch(jfn(x), fn(x)) is None


def test_docs_ops_md_is_current():
    """docs/ops.md is generated; regenerate it with `python tests/op_samples.py --markdown`."""
    path = os.path.join(os.path.dirname(__file__), "..", "docs", "ops.md")
    with open(path) as f:
        committed = f.read()
    from fusionlens.ops import prims

    for name in torch_ops.SYMBOLS:
        assert f"| `{name}` |" in committed, f"docs/ops.md lacks {name}: regenerate it"
    for name in prims.ALL:
        assert f"| `prims.{name}` |" in committed, f"docs/ops.md lacks prims.{name}: regenerate it"


def test_flattened_decomposition_has_no_alias_ops():
    """A nested decomposition returning its input (reshape to the same shape) leaves no op."""
    def fn(a):
        return a.repeat(2, 3)[..., 1:3] + a[0]

    res = frontend.trace(fn, (torch.randn(3, 2),))
    flat = flat_trace(passes.decompose(res.trace))
    aliases = [b for b in flat.bound_symbols if _is_alias(b)]
    assert not aliases, "\n".join(ir_line(b) for b in aliases)
    defined = set()
    for b in flat.bound_symbols:  # SSA: every value is assigned once
        for o in b.outputs:
            assert o.name not in defined, o.name
            defined.add(o.name)


def ir_line(b):
    from fusionlens.ir.trace import format_call

    return format_call(b)
