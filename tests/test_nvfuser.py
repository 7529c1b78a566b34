"""Tests of the nvFuser executor (fusionlens/executors/nvfuser/): availability, what ran, runtime.

Definitions run on tests/nvfuser_reference.py (a torch re-implementation of the nvFuser
Python API subset the executor writes, given to the executor as a Backend that is not
nvFuser) always, and on the real nvFuser package where it imports and CUDA is available.

- never claim nvFuser ran: reference runs are labelled; without nvFuser, generate gives the
  source and says why it does not run; `available` gives exact reasons;
- the unavailable path: compile on CPU without nvFuser gives correct results and says why
  nvFuser did not run;
- every example in examples/ through the fusion pass with executors=["nvfuser", "torch"],
  with the reference posing as nvFuser;
- the real-package plumbing (CUDA, scheduler, IR, declines, torch fallbacks) with a
  stand-in that answers like nvFuser; jit reuse.

The definitions themselves are tested in tests/test_nvfuser_definitions.py.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import compiler
from fusionlens.middle.contract import Decline, Layout
from fusionlens.executors import nvfuser as nx
from fusionlens.executors.nvfuser import backend as nvb
from fusionlens.executors.nvfuser import runtime, support
from fusionlens.executors.nvfuser.backend import Backend

import nvfuser_reference as ref
from nvfuser_testing import (  # noqa: F401 - runner is a fixture
    REAL, assert_close, f32, function_group, names, registered, run_generated, runner)

REPO = Path(__file__).resolve().parents[1]


# --- never claim nvFuser ran --------------------------------------------------------------------

def test_reference_runs_are_labelled(runner):
    if runner.kind == "real":
        pytest.skip("the real package is labelled by test_real_nvfuser_reports_kernels")
    group, tensors, _ = function_group(lambda x: torch.softmax(x, -1), f32(8, 32), device=runner.device)
    gen, out, _ = run_generated(runner, group, tensors)
    assert gen.executions == 1
    assert gen.nvfuser_ran is False
    assert gen.backend == ref.LABEL
    assert gen.note.startswith("nvFuser did not run")
    assert gen.cuda_source is None and gen.scheduler is None


def test_without_nvfuser_generate_gives_source_but_does_not_run(monkeypatch):
    monkeypatch.setattr(nvb, "_find_spec", lambda name: None)
    group, tensors, _ = function_group(lambda x: torch.softmax(x, -1), f32(8, 32))
    assert nx.EXECUTOR.available(torch.device("cpu")) == (False, nvb.NOT_INSTALLED)
    gen = nx.EXECUTOR.generate(group, "cpu")
    assert "fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float" in gen.source
    assert "from nvfuser_direct import FusionDefinition, DataType" in gen.source
    assert not gen.runnable and not gen.nvfuser_ran and gen.backend == ""
    assert gen.note == f"nvFuser did not run: {nvb.NOT_INSTALLED}. This is the definition that would run."
    assert gen.source.startswith(f"# status: {gen.note}\n# nvFuser FusionDefinition for fusion region F0")
    assert gen.report_code() == gen.source
    with pytest.raises(RuntimeError, match="cannot run here: nvFuser is not installed"):
        gen.fn(*tensors)


def _fake_importer(errors: dict):
    def import_module(name):
        raise errors[name]
    return types.SimpleNamespace(import_module=import_module)


def test_available_reasons(monkeypatch):
    # nothing installed: said without importing anything, whatever the device
    monkeypatch.setattr(nvb, "_loaded", None)
    monkeypatch.setattr(nvb, "_find_spec", lambda name: None)
    monkeypatch.setattr(nvb, "importlib", _fake_importer({}))  # an import attempt would raise KeyError
    assert nx.EXECUTOR.available("cuda") == (False, "nvFuser is not installed (no module nvfuser_direct or nvfuser)")
    assert nx.EXECUTOR.available("cpu") == (False, "nvFuser is not installed (no module nvfuser_direct or nvfuser)")
    # installed, CPU tensor: not even imported
    monkeypatch.setattr(nvb, "_find_spec", lambda name: object() if name == "nvfuser_direct" else None)
    assert nx.EXECUTOR.available(torch.device("cpu")) == (False, "nvFuser needs a CUDA device; this tensor is on cpu")
    assert nvb._loaded is None
    # installed but broken: the ImportError text
    monkeypatch.setattr(nvb, "importlib", _fake_importer({
        "nvfuser_direct": ImportError("libnvrtc.so.13: cannot open shared object file: No such file or directory"),
        "nvfuser": ModuleNotFoundError("No module named 'nvfuser'", name="nvfuser")}))
    ok, why = nx.EXECUTOR.available("cuda")
    assert not ok and why == ("importing nvfuser_direct failed: ImportError: libnvrtc.so.13: cannot open shared "
                              "object file: No such file or directory")
    # installed and importing, CUDA tensor
    monkeypatch.setattr(nvb, "_loaded", (Backend(ref, "nvfuser_direct", "0.2.34"), ""))
    assert nx.EXECUTOR.available(torch.device("cuda", 0)) == (True, "")
    assert nx.EXECUTOR.available(torch.device("cpu")) == (False, "nvFuser needs a CUDA device; this tensor is on cpu")


def test_unavailable_path_through_compile(monkeypatch):
    """On CPU without the hook, compile works through torch and says why nvFuser did not run."""
    x = f32(8, 32)
    rep = compiler.compile(lambda x: torch.softmax(x, -1) * 2, x, executors=["nvfuser", "torch"])
    assert not [d for d in rep.diagnostics if d.severity == "error"], rep.diagnostics
    expected = nvb.NOT_INSTALLED if nvb.installed_api() is None else "nvFuser needs a CUDA device; this tensor is on cpu"
    messages = [d.message for d in rep.diagnostics]
    assert f"executor nvfuser is not usable here: {expected}; its work goes to the next executor" in messages
    assert all(r.executor == "torch" for r in rep.forward.regions)


# --- the real package (only where it imports and CUDA is there) --------------------------------

@pytest.mark.skipif(not REAL, reason="nvFuser does not import here or there is no CUDA")
def test_real_nvfuser_reports_kernels():
    group, tensors, eager = function_group(lambda x: torch.softmax(x, -1), f32(64, 1024), device="cuda")
    gen = nx.EXECUTOR.generate(group, torch.device("cuda"))  # compiles on example inputs
    assert gen.nvfuser_ran and gen.executions >= 1
    assert gen.cuda_source and "__global__" in gen.cuda_source
    assert gen.scheduler  # e.g. "inner_persistent"
    assert gen.source.startswith("# status: ran on nvfuser")
    assert "__global__" in gen.report_code()
    out = gen.fn(*tensors)
    assert_close(out, (eager,), "real")


# --- the examples through the fusion pass -------------------------------------------------------

def _example_targets():
    out = []
    for path in sorted((REPO / "examples").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_nvf_examples_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.parent))
        try:
            spec.loader.exec_module(module)
        except Exception as e:  # noqa: BLE001 - an example that does not import is reported, not hidden
            out.append(pytest.param(path.stem, None, id=path.stem,
                                    marks=pytest.mark.skip(reason=f"import failed: {e}")))
            continue
        finally:
            sys.path.remove(str(path.parent))
        for name in dir(module):
            target = getattr(module, name)
            if callable(target) and getattr(target, "__fusionlens_example__", False) \
                    and not getattr(target, "__fusionlens_nproc__", None):  # distributed: tests/test_launch.py
                out.append(pytest.param(path.stem, target, id=f"{path.stem}.{name}"))
    return out


def _xfail_if_torch_alone_fails(fn, args, kwargs, errors):
    """A compiler bug outside nvFuser (the torch executor alone fails too) is xfail, said so."""
    try:
        alone = compiler.compile(fn, *args, executors=["torch"], **kwargs)
        torch_errors = [d.message for d in alone.diagnostics if d.severity == "error"]
    except Exception as e:  # noqa: BLE001
        torch_errors = [f"{type(e).__name__}: {e}"]
    if torch_errors:
        pytest.xfail(f"not an nvFuser problem: executors=['torch'] fails too: {torch_errors[0]}")


@pytest.mark.parametrize("stem,target", _example_targets())
def test_example_through_fusion_pass(runner, stem, target):
    fn, args, *rest = target()
    kwargs = rest[0] if rest else {}
    args = tuple(runner.to(a) for a in args)
    if isinstance(fn, torch.nn.Module):
        fn = fn.to(runner.device)
    try:
        rep = compiler.compile(fn, *args, executors=["nvfuser", "torch"], **kwargs)
        errors = [d.message for d in rep.diagnostics if d.severity == "error"]
    except Exception as e:  # noqa: BLE001 - compared with the torch executor alone below
        rep, errors = None, [f"{type(e).__name__}: {e}"]
    if errors:
        _xfail_if_torch_alone_fails(fn, args, kwargs, errors)
    assert not errors, errors
    nv = [r for r in rep.forward.regions if r.executor == "nvfuser"]
    mapped = names(support.UNARY, support.BINARY, support.REDUCTIONS) | {"where", "var_mean"}
    fusible_on_torch = [r for r in rep.forward.regions if r.executor == "torch" and r.note == ""
                        and any(op.removeprefix("prims.") in mapped for op in r.ops)]
    assert nv or not fusible_on_torch, [(r.id, r.ops) for r in fusible_on_torch]
    for r in nv:
        assert "fd.define_tensor(" in r.code and "fd.add_output(" in r.code
        first = r.code.splitlines()[0]
        if runner.kind == "real":
            assert first.startswith("# status: ran on nvfuser"), first
        else:
            assert first.startswith("# status: nvFuser did not run: this region runs through tests/"), first


# --- the real-package plumbing, with a stand-in that answers like nvFuser -------------------------

FAKE_CUDA = """// Codegen generated code
__global__ void nvfuser_inner_persistent_f0_c1_r0_g0(Tensor<float, 2, 2> T0, Tensor<float, 2, 2> T1) {
}
__global__ void nvfuser_pointwise_f0_c1_r0_g1(Tensor<float, 2, 2> T1, Tensor<float, 2, 2> T2) {
}
"""


def _stand_in(api: str):
    """A module posing as the real package: the reference computes; it answers the CUDA queries."""

    class FusionDefinition(ref.FusionDefinition):
        def execute(self, inputs, **kwargs):
            out = super().execute(inputs, **kwargs)
            if api == "nvfuser_direct":
                self.fec = types.SimpleNamespace(get_cuda_kernel=lambda inputs, intrinsic_code=False, device=0:
                                                 FAKE_CUDA,
                                                 get_most_recent_scheduled_ir=lambda tensor_transforms=False: "IR")
            return out

        def last_cuda_code(self, intrinsic_code=False, **kwargs):
            return FAKE_CUDA

        def last_scheduled_fusion_ir(self, tensor_transforms=False, **kwargs):
            return "IR"

    return types.SimpleNamespace(FusionDefinition=FusionDefinition, DataType=ref.DataType, __version__="0.0-stand-in")


def _real_backend(module, api: str = "nvfuser_direct") -> Backend:
    """`module` as the executor takes the real package (real=True: CUDA only, "ran on ...")."""
    return Backend(module, api, nvb.version(module))


@pytest.mark.parametrize("api", ["nvfuser_direct", "nvfuser"])
def test_real_package_plumbing_with_a_stand_in(monkeypatch, api):
    group, tensors, eager = function_group(lambda x: torch.softmax(x, -1) * 2, f32(8, 32))
    for v in group.inputs:  # the group as traced on a GPU
        v.device = torch.device("cuda")
    monkeypatch.setattr(runtime, "example_inputs", lambda g, device: [t.clone() for t in tensors])
    with registered(_real_backend(_stand_in(api), api)) as ex:
        assert ex.available(torch.device("cpu")) == (False, "nvFuser needs a CUDA device; this tensor is on cpu")
        assert ex.available(torch.device("cuda")) == (True, "")
        gen = ex.generate(group, torch.device("cuda"))  # compiles on the example inputs
        assert gen.nvfuser_ran and gen.executions == 1 and gen.runnable
        assert gen.backend == f"{api} 0.0-stand-in"
        assert gen.kernels == 2 and gen.scheduler == "inner_persistent, pointwise"
        assert gen.cuda_source == FAKE_CUDA and gen.scheduled_ir == "IR" and not gen.errors
        assert gen.status() == f"ran on {api} 0.0-stand-in: 2 kernels (inner_persistent, pointwise scheduler)"
        assert gen.source.startswith(f"# status: {gen.status()}\n")
        assert f"from {api} import FusionDefinition, DataType" in gen.source
        assert gen.report_code().endswith(FAKE_CUDA)
        out = gen.fn(*tensors)
        assert gen.executions == 2
        assert_close(out, (eager,), "stand-in")


def test_a_definition_nvfuser_rejects_is_declined(monkeypatch):
    group, tensors, _ = function_group(lambda x: torch.exp(x), f32(8, 32))
    for v in group.inputs:
        v.device = torch.device("cuda")
    monkeypatch.setattr(runtime, "example_inputs", lambda g, device: [t.clone() for t in tensors])

    class Broken(ref.FusionDefinition):
        def execute(self, inputs, **kwargs):
            raise RuntimeError("INTERNAL ASSERT FAILED at csrc/scheduler/registry.cpp\nmore lines")

    fake = types.SimpleNamespace(FusionDefinition=Broken, DataType=ref.DataType, __version__="x")
    with registered(_real_backend(fake)) as ex:
        with pytest.raises(Decline, match="nvFuser could not compile this region: RuntimeError: INTERNAL ASSERT "
                                          "FAILED at csrc/scheduler/registry.cpp$"):
            ex.generate(group, torch.device("cuda"))


# --- jit reuse, and inputs nvFuser cannot take ------------------------------------------------------

def test_jit_reuses_the_region_and_its_definitions(runner):
    fn = lambda x, w: F.silu(x) * w + 1  # noqa: E731
    jfn = compiler.jit(fn, executors=["nvfuser", "torch"])
    x, w = runner.to(f32(8, 32)), runner.to(f32(32))
    for _ in range(3):
        assert_close((jfn(x, w),), (fn(x, w),), "jit")
    assert jfn.cache_info()["misses"] == 1 and jfn.cache_info()["hits"] == 2
    regions = [r for r in jfn.last.compiled.forward.plan.regions if r.executor == "nvfuser"]
    assert len(regions) == 1
    xt = runner.to(f32(32, 8)).t()  # a new signature: a new compile
    assert_close((jfn(xt, w),), (fn(xt, w),), "jit transposed")


def test_source_for_layouts_is_the_definition_that_ran_for_them(runner):
    # the executor contract's source_for: what fusionlens/driver/repro.py writes, with no nvFuser internals
    group, tensors, _ = function_group(lambda x, w: torch.softmax(x, -1) * w, f32(32, 8).t(), f32(32))
    gen, _, _ = run_generated(runner, group, tensors)
    ((key, ran),) = gen.definitions.items()
    layouts = [Layout.of_tensor(runner.to(t)) for t in tensors]
    assert runner.executor.source_for(group, layouts, runner.device.type) == ran
    assert f"from {runner.api} import FusionDefinition" in ran and "stride_order=[0, 1]" in ran
    contiguous = [Layout.contiguous(v) for v in group.inputs]
    assert "stride_order=[1, 0]" in runner.executor.source_for(group, contiguous, runner.device.type)
    # a 0-dim CPU tensor is a CPU scalar to a CUDA definition, an ordinary tensor on a CPU one
    scalar, cpu_tensors, _ = function_group(lambda x, s: x * s, f32(4), torch.tensor(2.0))
    cpu = [Layout.of_tensor(t) for t in cpu_tensors]
    assert runner.executor.source_for(scalar, cpu, "cuda").count("is_cpu=True") == 1
    assert "is_cpu=True" not in runner.executor.source_for(scalar, cpu, "cpu")


def test_cpu_tensor_inputs_on_a_cuda_device_are_declined(monkeypatch):
    group, _, _ = function_group(lambda x: torch.exp(x), f32(8, 32))  # traced on the CPU
    with registered(_real_backend(_stand_in("nvfuser_direct"))) as ex:
        with pytest.raises(Decline, match="input x is a CPU tensor with 2 dims; nvFuser takes only 0-dim CPU tensors"):
            ex.generate(group, torch.device("cuda"))


def test_inputs_nvfuser_fails_on_run_through_torch_and_say_so(monkeypatch):
    group, tensors, eager = function_group(lambda x: torch.softmax(x, -1), f32(8, 32))
    for v in group.inputs:
        v.device = torch.device("cuda")
    monkeypatch.setattr(runtime, "example_inputs", lambda g, device: [t.clone() for t in tensors])
    stand_in = _stand_in("nvfuser_direct")

    class Picky(stand_in.FusionDefinition):
        def execute(self, inputs, **kwargs):
            if not inputs[0].is_contiguous():
                raise RuntimeError("unsupported allocation domain\nmore")
            return super().execute(inputs, **kwargs)

    stand_in.FusionDefinition = Picky
    with registered(_real_backend(stand_in)) as ex:
        gen = ex.generate(group, torch.device("cuda"))
        xt = f32(32, 8).t()
        for _ in range(2):
            assert_close(gen.fn(xt), (torch.softmax(xt, -1),), "fallback")
        assert gen.torch_fallbacks == 2 and gen.executions == 1  # the compile in generate
        assert "RuntimeError: unsupported allocation domain; these inputs run the region's prims through torch" \
            in gen.errors[0]
        assert "2 calls ran through torch instead" in gen.status()
        assert_close(gen.fn(*tensors), (eager,), "contiguous still on nvFuser")
        assert gen.executions == 2
