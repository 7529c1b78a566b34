"""Trace passes (decompose, flatten, DCE, CSE) and the trace printer."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import compiler
from fusionlens.driver import checking
from fusionlens.frontend import tracer as frontend
from fusionlens.middle import passes
from fusionlens.ir.trace import SymbolKind
from fusionlens.ir.provenance import display_path


def acquire(fn, *args, **kwargs):
    return frontend.trace(fn, args, kwargs)


def optimised(fn, *args):
    res = acquire(fn, *args)
    return res, passes.optimise(passes.decompose(res.trace))


def names(trace) -> list:
    return [b.sym.name for b in trace.bound_symbols]


def run(trace, res, *args):
    consts = [res.constants[v.name] for v in trace.inputs if v.role != "input"]
    return trace.python_callable()(*args, *consts)


# --- DCE -----------------------------------------------------------------------------------

def test_dce_removes_unused_ops():
    def fn(x):
        unused = torch.exp(x) * 2  # noqa: F841
        y = torch.sin(x)
        _ = y.sum()
        return y + 1

    x = torch.randn(3, 4)
    res = acquire(fn, x)
    assert names(res.trace) == ["torch.exp", "torch.mul", "torch.sin", "torch.sum", "torch.add"]
    out = passes.dce(res.trace)
    assert names(out) == ["torch.sin", "torch.add"]
    assert checking.mismatch(run(out, res, x), fn(x)) is None


def test_dce_keeps_everything_that_reaches_any_output():
    def fn(x):
        a = x.exp()
        b = a.sum(-1)
        return a, {"b": b}

    res = acquire(fn, torch.randn(3, 4))
    assert names(passes.dce(res.trace)) == names(res.trace)


def test_dce_drops_ops_on_unused_inputs_and_parameters():
    lin = torch.nn.Linear(4, 4)

    def fn(x, y):
        lin(y)
        return x * 2

    x = torch.randn(2, 4)
    res = acquire(fn, x, torch.randn(2, 4))
    assert names(passes.dce(res.trace)) == ["torch.mul"]


# --- CSE -----------------------------------------------------------------------------------

def test_cse_merges_duplicate_ops():
    def fn(x):
        return torch.exp(x) + torch.exp(x)

    x = torch.randn(3, 4)
    res, opt = optimised(fn, x)
    assert names(res.trace).count("torch.exp") == 2
    assert names(opt).count("torch.exp") == 1
    (add,) = [b for b in opt.bound_symbols if b.sym.name == "torch.add"]
    assert add.args[0] is add.args[1] or add.args[0].name == add.args[1].name
    assert checking.mismatch(run(opt, res, x), fn(x)) is None


def test_cse_merges_chains_and_respects_arguments():
    def fn(x):
        a = (x * 2).sum(-1)
        b = (x * 2).sum(-1)  # same chain: merged
        c = (x * 2).sum(0)  # different dim: kept
        d = (x * 3).sum(-1)  # different scalar: kept
        return a + b, c, d

    x = torch.randn(3, 3)
    res, opt = optimised(fn, x)
    assert names(opt).count("torch.mul") == 2
    assert names(opt).count("torch.sum") == 3
    assert checking.mismatch(run(opt, res, x), fn(x)) is None


def test_cse_does_not_merge_random_ops():
    def fn(x):
        return torch.rand_like(x) - torch.rand_like(x)

    res, opt = optimised(fn, torch.ones(8, 8))
    assert names(opt).count("torch.rand_like") == 2
    out = run(opt, res, torch.ones(8, 8))
    assert out.abs().sum() > 0


def test_cse_does_not_merge_dropout_in_training():
    def fn(x):
        return F.dropout(x, 0.5, training=True) - F.dropout(x, 0.5, training=True)

    res, opt = optimised(fn, torch.ones(8, 8))
    assert names(opt).count("torch.nn.functional.dropout") == 2
    out = run(opt, res, torch.ones(8, 8))
    assert out.abs().sum() > 0  # two independent masks differ somewhere


def test_dropout_in_eval_is_removed():
    def fn(x):
        return F.dropout(x, 0.5, training=False) * 2

    res = acquire(fn, torch.randn(3))
    dec = passes.decompose(res.trace)
    assert names(dec) == ["torch.mul"]  # an alias of its input: dropped, its use reads x
    assert dec.bound_symbols[0].args[0].name == "x"


# --- decompose and flatten -----------------------------------------------------------------

def test_decompose_keeps_names_and_nests_prims():
    def fn(x, w):
        return F.softmax(x @ w, dim=-1).contiguous()

    x, w = torch.randn(2, 3), torch.randn(3, 4)
    res = acquire(fn, x, w)
    dec = passes.decompose(res.trace)
    assert [o.name for b in dec.bound_symbols for o in b.outputs] == ["t0", "t1"]  # contiguous: alias
    matmul, softmax = dec.bound_symbols
    assert matmul.subsymbols == [] and matmul.note == ""  # a library call
    leaves = passes.flatten([softmax])
    assert all(b.sym.kind is SymbolKind.PRIM for b in leaves)
    assert {"prims.amax", "prims.exp", "prims.sum", "prims.div"} <= {b.sym.name for b in leaves}
    assert leaves[-1].outputs[0].name == "t1"
    assert dec.output.name == "t1"
    flat = dec.with_("fusion", passes.flatten(dec.bound_symbols))
    assert checking.mismatch(run(flat, res, x, w), fn(x, w)) is None


def test_decompose_notes_ops_it_cannot_decompose():
    def fn(x):
        return torch.where(x > 0, 1.0, 0.0)

    dec = passes.decompose(acquire(fn, torch.randn(3)).trace)
    b = dec.bound_symbols[-1]
    assert b.subsymbols == [] and "scalar branches" in b.note


# --- printer -------------------------------------------------------------------------------

def _fn_for_printing(x, w):
    h = x @ w
    h = torch.relu(h) * 2.0
    return h.sum(-1)


def test_printer_type_comments_and_source_lines():
    x, w = torch.randn(4, 8), torch.randn(8, 16)
    res = acquire(_fn_for_printing, x, w)
    text = res.trace.python()
    assert "def _fn_for_printing(x, w):" in text
    assert "  # x: f32[4, 8] cpu" in text and "  # w: f32[8, 16] cpu" in text
    assert re.search(r"^  t0 = torch\.matmul\(x, w\)  # t0: f32\[4, 16\] cpu$", text, re.M)
    assert re.search(r"  # t\d+: f32\[4\] cpu$", text, re.M)
    first = _fn_for_printing.__code__.co_firstlineno
    here = display_path(__file__)
    loc_lines = [line.strip() for line in text.splitlines() if line.strip().startswith(f"# {here}:")]
    # one location comment per source line, each when the line changes: 3 lines in the body
    assert loc_lines == [f"# {here}:{first + 1}  h = x @ w", f"# {here}:{first + 2}  h = torch.relu(h) * 2.0",
                         f"# {here}:{first + 3}  return h.sum(-1)"]
    # relu and mul share a line: one comment above both
    body = text.splitlines()
    i = body.index(f"  # {here}:{first + 2}  h = torch.relu(h) * 2.0")
    assert "torch.nn.functional.relu" in body[i + 1] and "torch.mul" in body[i + 2]


def test_printer_dtype_and_shape_types():
    def fn(x, i):
        return x.half(), x.to(torch.bfloat16), i > 0, i.sum(), torch.zeros((), dtype=torch.float64) + x.double()

    res = acquire(fn, torch.randn(2, 0, 3), torch.randint(0, 5, (5,), dtype=torch.int32))
    text = res.trace.python()
    for t in ("f16[2, 0, 3] cpu", "bf16[2, 0, 3] cpu", "b8[5] cpu", "i64[] cpu", "f64[2, 0, 3] cpu",
              "# i: i32[5] cpu"):
        assert t in text, t


def test_decomposed_stage_prints_nested_ops():
    x, w = torch.randn(4, 8), torch.randn(8, 16)
    report = compiler.compile(_fn_for_printing, x, w, executors=["torch"])
    dec = report.forward.traces["decomposed"]
    lines = dec.splitlines()
    relu = next(i for i, line in enumerate(lines) if line.startswith("  t") and "relu" in line)
    nested = []
    for line in lines[relu + 1:]:
        if not (line.startswith("    ") and line.lstrip().startswith("# t")):
            break
        nested.append(line)
    assert nested and any("prims.where" in line for line in nested), lines[relu:relu + 6]
    assert any(line.startswith("      # t") for line in nested)  # prims nested under torch.le / where
    assert all(re.search(r"# t\d+: \w+\[.*\] cpu$", line) for line in nested)
    # the other stages print flat, runnable calls only
    for stage in ("acquired", "optimised", "execution"):
        assert "    # t" not in report.forward.traces[stage], stage


def test_every_report_stage_is_valid_python():
    report = compiler.compile(_fn_for_printing, torch.randn(4, 8), torch.randn(8, 16), executors=["torch"])
    assert set(report.forward.traces) >= {"acquired", "decomposed", "optimised", "execution"}
    for stage, src in report.forward.traces.items():
        compile(src, stage, "exec")
        assert f"stage: {stage}" in src.splitlines()[0]


def test_printer_special_values_round_trip():
    def fn(x):
        return x.masked_fill(x > 0, float("-inf")).clamp(min=float("-inf"), max=float("inf")), x.masked_fill(
            x < 0, float("nan"))

    x = torch.randn(3, 3)
    res = acquire(fn, x)
    for stage in (res.trace, passes.decompose(res.trace)):
        assert checking.mismatch(run(stage, res, x), fn(x)) is None


def test_cse_sees_through_keyword_spelling():
    from fusionlens.frontend import tracer as frontend
    from fusionlens.middle import passes

    def f(x):
        return torch.softmax(x, -1) + torch.softmax(x, dim=-1)

    t = passes.optimise(passes.decompose(frontend.trace(f, (torch.randn(3, 4),)).trace))
    assert sum("softmax" in b.sym.name for b in t.bound_symbols) == 1
