"""Real model code compiles correctly, natively, with each op on the model's own line.

Each model of tests/zoo.py (transformers from tiny configs, torchvision with weights=None,
timm with pretrained=False; nothing downloaded), in eval mode under torch.no_grad():

- `compiler.jit(model)` on its example inputs returns what eager returns: the same
  structure, types included (ModelOutput dataclasses, caches, tuples), every tensor within
  checking's tolerance;
- natively: the program runs (no error diagnostic, no "runs eagerly" fallback), and a second
  call with fresh inputs of the same signature reuses it and still matches eager (a program
  that returned values captured while tracing would fail here);
- every op's report location is a line of code in the model's library (e.g.
  .../transformers/models/gpt2/modeling_gpt2.py), and the file defining the model's class
  is among them;
- it prints its fallbacks (run with -s or -rP to see them).

A model that fails one of these today is marked xfail(strict=True) with the failure as it
is now: when a fix makes it pass, the unexpected pass fails the run, and the mark goes.
"""

from __future__ import annotations

import collections
import inspect
import os

import pytest
import torch

import compiler
import zoo
from zoo_imports import stubbed_operators

# name -> (exception, the failure today); empty since the fixes for caches, MultiheadAttention
# and results of any structure landed
EXPECTED_FAILURES: dict = {}


def _param(entry: zoo.ZooModel, failures: dict = EXPECTED_FAILURES):
    """A zoo model as a test parameter: skipped where its library is missing, a strict xfail
    where `failures` (name -> (exception, reason)) names it."""
    marks = []
    if zoo.LIBRARIES[entry.library] is None:
        marks.append(pytest.mark.skip(reason=f"{entry.library} is not installed (bash .ci/run installs it)"))
    if entry.name in failures:
        raises, reason = failures[entry.name]
        marks.append(pytest.mark.xfail(strict=True, raises=raises, reason=reason))
    return pytest.param(entry, id=entry.name, marks=marks)


def print_fallbacks(name: str, report) -> None:
    counted = collections.Counter((f.op, f.reason, os.path.basename(f.file or "?"), f.line) for f in report.fallbacks)
    print(f"{name}: {len(report.ops)} ops, {len(report.fallbacks)} fallbacks")
    for (op, reason, file, line), n in counted.items():
        print(f"  {n} x {op} at {file}:{line}: {reason}")


def assert_native(report) -> None:
    eager = [d.message for d in report.diagnostics if d.severity == "error" or "runs eagerly" in d.message]
    assert not eager, f"the program does not run natively: {eager[0]!r}"


@pytest.mark.parametrize("entry", [_param(m) for m in zoo.MODELS])
def test_model_compiles_natively_at_its_own_lines(entry):
    model = entry.build().eval()
    jfn = compiler.jit(model)
    with torch.no_grad():
        args, kwargs = entry.inputs()
        expected = model(*args, **kwargs)
        actual = jfn(*args, **kwargs)
        report = compiler.last_report(jfn)
        print_fallbacks(entry.name, report)
        problem = zoo.difference(actual, expected)
        assert problem is None, f"example inputs: {problem}"
        assert_native(report)
        assert not getattr(jfn.last, "eager_fallback", False)

        args, kwargs = entry.inputs()
        expected = model(*args, **kwargs)
        actual = jfn(*args, **kwargs)
        assert (jfn.cache_info()["hits"], jfn.cache_info()["misses"]) == (1, 1), jfn.cache_info()
        problem = zoo.difference(actual, expected)
        assert problem is None, f"fresh inputs: {problem}"

    root = zoo.library_root(entry.library)
    assert report.ops
    misplaced = zoo.misplaced_ops(report, root)
    assert not misplaced, f"{len(misplaced)} ops are not at a line of {root}: {misplaced[:5]}"
    own = os.path.abspath(inspect.getsourcefile(type(model)))
    assert own in {os.path.abspath(op.file) for op in report.ops}, f"no op points into {own}"


def test_difference_sees_types_keys_and_values():
    a = {"x": torch.ones(2), "y": (torch.zeros(1), None)}
    assert zoo.difference(a, {"x": torch.ones(2), "y": (torch.zeros(1), None)}) is None
    assert "keys" in zoo.difference(a, {"y": a["y"], "x": a["x"]})
    assert "tuple where eager gives list" in zoo.difference(a, {"x": a["x"], "y": [torch.zeros(1), None]})
    assert "output['y'][0]" in zoo.difference(a, {"x": a["x"], "y": (torch.ones(1), None)})

    class Cache:  # compared attribute by attribute, like a DynamicCache
        def __init__(self, t):
            self.layers = [t]

    assert zoo.difference(Cache(torch.ones(3)), Cache(torch.ones(3))) is None
    assert "output.layers[0]" in zoo.difference(Cache(torch.ones(3)), Cache(torch.zeros(3)))


@pytest.mark.skipif(zoo.LIBRARIES["torchvision"] is None, reason="torchvision is not installed")
def test_torchvision_imports_and_its_compiled_ops_say_they_are_missing():
    torchvision = zoo.LIBRARIES["torchvision"]
    if not stubbed_operators:  # _C.so loaded: a torchvision built for this torch
        pytest.skip("torchvision's C++ operators loaded; nothing was stubbed")
    assert stubbed_operators == ("torchvision::nms", "torchvision::qnms")
    assert not torchvision.extension._has_ops()
    with pytest.raises(RuntimeError, match="Couldn't load custom C\\+\\+ ops"):
        torchvision.ops.nms(torch.rand(3, 4), torch.rand(3), 0.5)
    with pytest.raises(NotImplementedError, match="torchvision::nms"):
        torch.ops.torchvision.nms(torch.rand(3, 4), torch.rand(3), 0.5)
