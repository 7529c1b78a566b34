"""Repro scripts (fusionlens/driver/repro.py, `fusionlens repro`): written for the Triton regions of
every example, each runs in a Python that cannot import FusionLens and says its kernel
matches eager; a broken kernel makes it say it does not.

Like tests/test_triton.py, on a machine without CUDA this module imports triton under
TRITON_INTERPRET=1 and sets the variable while its tests run. The scripts run with the
variable unset: a script sets it itself when there is no GPU. The examples run at small
sizes (tests/fixtures/repro_examples.py), so that the interpreter takes seconds.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
import torch

CUDA = torch.cuda.is_available()
# tests/conftest.py imported triton for the interpreter (where no GPU is) before any test module

from fusionlens.driver import repro  # noqa: E402
from fusionlens.options import CompileOptions  # noqa: E402
from fusionlens.report.discovery import find_targets  # noqa: E402
from fusionlens.executors.triton import support  # noqa: E402
from fusionlens.ops import prims  # noqa: E402

pytest.importorskip("triton")
if not CUDA:
    pytest.importorskip("numpy", reason="Triton's interpreter needs numpy")
    if support._interpreter_problem():
        pytest.skip(support._interpreter_problem(), allow_module_level=True)

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "repro_examples.py"
TARGETS = [t.name for t in find_targets(FIXTURE.read_text(), str(FIXTURE))]
MATCH = "OK: the kernel matches eager"
MISMATCH = "MISMATCH: the kernel does not match eager"

# Runs each script given as __main__ (with --no-benchmark), in a Python that must not
# import FusionLens; prints each one's exit status.
DRIVER = """\
import importlib.util, runpy, sys
assert importlib.util.find_spec("compiler") is None and importlib.util.find_spec("fusionlens") is None, \
    "FusionLens is importable here"
try:
    import compiler  # noqa: F401
except ImportError:
    print("compiler: not importable")
for path in sys.argv[1:]:
    sys.argv = [path, "--no-benchmark"]
    try:
        runpy.run_path(path, run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code
    print(f"exit {path}: {code}", flush=True)
"""


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    if not CUDA:
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def isolated(*args, cwd, timeout=600, extra_path=None):
    """Run `python ...` in `cwd` where FusionLens cannot be imported: without `site` (-S), so
    no .pth file runs (an editable install is one: it maps `compiler` to the repository),
    with the site-packages folders as plain PYTHONPATH entries (torch and triton import), no
    user site, not the repository; `extra_path` first (a folder of stand-ins). The Triton
    interpreter only where the script switches it on."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET", "PYTHONHOME")}
    env["PYTHONPATH"] = os.pathsep.join(([str(extra_path)] if extra_path else []) + site.getsitepackages())
    return subprocess.run([sys.executable, "-S", "-s", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def write(tmp_path, prepared, rid) -> Path:
    r = prepared.script(rid)
    path = tmp_path / r.file_name
    path.write_text(r.text)
    return path


@pytest.mark.parametrize("target", TARGETS)
def test_every_triton_region_of_each_example_matches_eager_without_fusionlens(target, tmp_path):
    prepared = repro.prepare(str(FIXTURE), target, executors=["triton", "torch"])
    rids = [c.split()[0] for c in prepared.choices() if c.endswith("(triton)") and c.startswith("R")]
    assert rids, prepared.choices()
    scripts = [write(tmp_path, prepared, rid) for rid in rids]
    for s in scripts:
        text = s.read_text()
        assert "import compiler" not in text and "from compiler" not in text
        assert "@triton.jit" in text and "def eager(" in text
    (tmp_path / "driver.py").write_text(DRIVER)
    p = isolated("driver.py", *map(str, scripts), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "compiler: not importable" in p.stdout
    assert p.stdout.count(MATCH) == len(scripts), p.stdout + p.stderr
    assert all(f"exit {s}: 0" in p.stdout for s in scripts), p.stdout


@pytest.mark.parametrize("target,executors", [("train_gpt_small", ["triton", "torch"]), ("softmax_small", None)])
def test_region_ids_are_the_reports(target, executors):
    from fusionlens.driver.targets import compile_target

    prepared = repro.prepare(str(FIXTURE), target, executors=executors)
    report = compile_target(str(FIXTURE), target, executors=executors, benchmark=False)
    assert report.status == "ok", report.error
    assert [(r.id, r.executor, r.ops) for r in report.forward.regions] == [
        (r.id, r.executor, [b.sym.name for b in r.bsyms]) for r in prepared.compiled.forward.plan.regions]
    for shown, program in zip(report.programs, prepared.compiled.programs):  # the backward's too
        assert [(r.id, r.executor, r.ops) for r in shown.regions] == [
            (r.id, r.executor, [b.sym.name for b in r.bsyms]) for r in program.plan.regions]
        assert [(p.executor, [(r.id, r.ops) for r in p.regions]) for p in shown.previews] == [
            (p.executor, [(r.id, [b.sym.name for b in r.bsyms]) for r in p.plan.regions]) for p in program.previews]
    if report.training is not None:
        torch_region = next(r.id for r in report.program("backward").regions if r.executor == "torch")
        with pytest.raises(repro.ReproError, match="generated no kernel"):
            prepared.script(torch_region)
    else:
        with pytest.raises(repro.ReproError, match="compiled for inference"):
            prepared.script("B0")


def test_backward_regions_and_previews_match_eager_without_fusionlens(tmp_path, monkeypatch):
    # a backward region's inputs are what the forward saved and the cotangents; the script
    # writes random ones of their shapes, dtypes and strides, as for a forward region
    prepared = repro.prepare(str(FIXTURE), "train_gpt_small", executors=["triton", "torch"])
    ran = [c.split()[0] for c in prepared.choices() if c.startswith("B") and c.endswith("(triton)")]
    scripts = [write(tmp_path, prepared, rid) for rid in ran[:2]]  # (writing runs the kernels: interpreted)
    if not CUDA:
        monkeypatch.delenv("TRITON_INTERPRET")  # Triton cannot run: it previews
    previewed = repro.prepare(str(FIXTURE), "train_gpt_small")
    preview = next(c.split()[0] for c in previewed.choices() if c.startswith("triton:PB"))
    scripts.append(write(tmp_path, previewed, preview))
    (tmp_path / "driver.py").write_text(DRIVER)
    p = isolated("driver.py", *map(str, scripts), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count(MATCH) == len(scripts), p.stdout + p.stderr


def test_a_broken_kernel_is_a_mismatch(tmp_path):
    prepared = repro.prepare(str(FIXTURE), "norms_small", executors=["triton", "torch"])
    path = write(tmp_path, prepared, "R0")
    text = path.read_text()
    broken, n = re.subn(r"tl\.store\((out0_ptr[^,]*), ([^,]+), mask=", r"tl.store(\1, \2 + 0.5, mask=", text)
    assert n == 1, text
    path.write_text(broken)
    p = isolated(str(path), "--no-benchmark", cwd=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert MISMATCH in p.stdout and "largest difference 0.5" in p.stdout, p.stdout


def test_benchmark_runs_and_says_interpreter_times_mean_nothing(tmp_path):
    prepared = repro.prepare(str(FIXTURE), "transposed_small", executors=["triton", "torch"])
    path = write(tmp_path, prepared, "R1")
    text = path.read_text()  # the transposed input: its strides, and the kernel variant for them
    assert "(5, 12), (1, 5), torch.float32" in text and "strides (1, 5)" in text
    p = isolated(str(path), "--repeats", "1", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert MATCH in p.stdout
    for label in ("kernel:", "eager:", "torch.compile:"):
        assert label in p.stdout, p.stdout
    if not CUDA:
        assert "Triton interpreter, TRITON_INTERPRET=1" in p.stdout
        assert "these timings mean nothing" in p.stdout


def test_preview_with_the_default_executors_on_a_cpu(tmp_path, monkeypatch):
    if CUDA:
        pytest.skip("previews are of executors that cannot run here")
    monkeypatch.delenv("TRITON_INTERPRET")  # Triton cannot run: it previews
    prepared = repro.prepare(str(FIXTURE), "softmax_small")
    assert all(r.executor == "torch" for r in prepared.compiled.forward.plan.regions)
    choices = prepared.choices()
    assert "triton:P0 (triton preview)" in choices and "nvfuser:P0 (nvfuser preview)" in choices, choices
    r = prepared.script("P0")  # Triton's first
    assert r.region == "triton:P0" and r.executor == "triton"
    path = tmp_path / r.file_name
    path.write_text(r.text)
    p = isolated(str(path), "--no-benchmark", cwd=tmp_path)
    assert p.returncode == 0 and MATCH in p.stdout, p.stdout + p.stderr


def test_nvfuser_preview_runs_on_a_stand_in_and_says_when_nvfuser_is_missing(tmp_path):
    prepared = repro.prepare(str(FIXTURE), "norms_small", executors=["nvfuser", "torch"])
    if any(r.executor == "nvfuser" for r in prepared.compiled.forward.plan.regions):
        pytest.skip("nvFuser runs here: no preview")
    r = prepared.script("nvfuser:P0")
    assert r.executor == "nvfuser" and "FusionDefinition" in r.text and "@triton.jit" not in r.text
    path = tmp_path / r.file_name
    path.write_text(r.text)
    p = isolated(str(path), "--no-benchmark", cwd=tmp_path)
    if importlib_missing("nvfuser_direct"):
        assert p.returncode == 2 and "needs nvFuser" in p.stdout, p.stdout + p.stderr
    # tests/nvfuser_reference.py posing as nvfuser_direct (torch semantics on any device)
    stand_in = tmp_path / "stand_in"
    stand_in.mkdir()
    shutil.copy(REPO / "tests" / "nvfuser_reference.py", stand_in / "nvfuser_direct.py")
    p = isolated(str(path), "--no-benchmark", cwd=tmp_path, extra_path=stand_in)
    assert p.returncode == 0 and MATCH in p.stdout, p.stdout + p.stderr


def test_nvfuser_region_that_ran_on_the_reference_backend(tmp_path):
    sys.path.insert(0, str(REPO / "tests"))
    from nvfuser_testing import reference_backend, registered

    with registered(reference_backend("nvfuser_direct")):
        prepared = repro.prepare(str(FIXTURE), "transposed_small", executors=["nvfuser", "torch"])
        rid = next(c.split()[0] for c in prepared.choices() if c.endswith("(nvfuser)"))
        r = prepared.script(rid)
    assert "from nvfuser_direct import FusionDefinition" in r.text and "(5, 12), (1, 5), torch.float32" in r.text
    assert "stride_order=[0, 1]" in r.text  # the definition of the transposed input, not the contiguous one
    path = tmp_path / r.file_name
    path.write_text(r.text)
    stand_in = tmp_path / "stand_in"
    stand_in.mkdir()
    shutil.copy(REPO / "tests" / "nvfuser_reference.py", stand_in / "nvfuser_direct.py")
    p = isolated(str(path), "--no-benchmark", cwd=tmp_path, extra_path=stand_in)
    assert p.returncode == 0 and MATCH in p.stdout, p.stdout + p.stderr


def importlib_missing(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is None


def test_torch_regions_and_unknown_ids_are_refused_with_the_ids_that_work():
    prepared = repro.prepare(str(FIXTURE), "mlp_small", executors=["triton", "torch"])
    torch_region = next(r.id for r in prepared.compiled.forward.plan.regions if r.executor == "torch")
    with pytest.raises(repro.ReproError, match=rf"region {torch_region} runs through torch .*R1 \(triton\)"):
        prepared.script(torch_region)
    with pytest.raises(repro.ReproError, match="no region R99"):
        prepared.script("R99")
    with pytest.raises(repro.ReproError, match="no @fusionlens.example target named 'nope'"):
        repro.prepare(str(FIXTURE), "nope")


def test_every_prim_has_a_torch_spelling():
    tree = ast.parse(inspect.getsource(prims))
    lambdas = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)]
    for name, sym in prims.ALL.items():
        expr, needs = repro.prim_spelling(name)
        namespace = {"torch": torch, "builtins": __import__("builtins"), "operator": __import__("operator")}
        for d in needs:
            exec(d, namespace)
        assert callable(eval(expr, namespace)), name
        if name in repro.LAMBDA_PRIMS:  # the impl's own lambda, as written in prims.py
            line = sym.impl.__code__.co_firstlineno
            want = ast.dump(ast.parse(repro.LAMBDA_PRIMS[name], mode="eval").body)
            assert any(ast.dump(n) == want for n in lambdas if n.lineno <= line <= n.end_lineno), name


def test_cli_writes_the_script(tmp_path):
    out = tmp_path / "r.py"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "compiler", "repro", str(FIXTURE), "--target", "norms_small",
                        "--region", "R0", "--executors", "triton", "torch", "-o", str(out)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert f"wrote {out}" in p.stdout and "@triton.jit" in out.read_text()
    p = subprocess.run([sys.executable, "-m", "compiler", "repro", str(FIXTURE), "--target", "norms_small",
                        "--region", "R7"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "no region R7" in p.stderr, p.stderr
