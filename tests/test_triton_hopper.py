"""Every kernel the Triton generator makes for the test cases compiles for Hopper (sm_90).

No GPU is needed: the sources are generated here, then one subprocess (without
TRITON_INTERPRET, which would replace @triton.jit by the interpreter) runs
`python -m fusionlens.executors.triton.aot`, which calls
`triton.compile(ASTSource(kernel, signature, constexprs), target=GPUTarget("cuda", 90, 32))`
down to a cubin with the ptxas bundled in the triton wheel. Nothing is launched.

Covered: every case of tests/test_triton_cases.py in each of its dtypes (single-pass
reductions), the reductions again in their looped form, and a strided-input variant.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from fusion_groups import group_from_fn  # noqa: E402
from fusionlens.executors import triton as tx  # noqa: E402
from fusionlens.executors.triton import analysis, runtime, tuning  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_triton_cases as C  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _ptxas_problem():
    try:
        import triton

        base = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    except Exception as e:  # pragma: no cover
        return f"triton does not import: {e}"
    if not base.exists() and not os.environ.get("TRITON_PTXAS_PATH"):
        return f"no ptxas in the triton wheel ({base}) and TRITON_PTXAS_PATH is not set"
    return None


def _sources(monkeypatch):
    out = []

    def add(label, case, dt, args=None):
        args = args if args is not None else case.make(torch.device("cpu"), dt)
        group, inputs = group_from_fn(case.fn, *args, gid=f"H_{case.name}")
        gen = tx.generate(group, torch.device("cpu"))
        if args is not None:  # a strided call adds its own variant
            key = tuple(runtime._stride_key(v.shape, t.stride()) for v, t in zip(group.inputs, inputs))
            if key not in gen.variants:
                src, _, _, specs = tx.build_source(group, analysis._Analysis(group), list(key))
                out.append({"label": label + "/strided", "source": src, "specs": [dataclasses.asdict(s) for s in specs]})
        out.append({"label": label, "source": gen.source, "specs": [dataclasses.asdict(s) for s in gen.specs]})

    for case in C.CASES:
        for dt in case.dtypes:
            add(f"{case.name}/{str(dt).removeprefix('torch.')}", case, dt)
    monkeypatch.setattr(tuning, "MAX_SINGLE_PASS", 16)
    monkeypatch.setattr(tuning, "LOOP_BLOCK_N", 16)
    for name in C.LOOPED:
        case = C.by_name(name)
        add(f"{name}/looped", case, case.dtypes[-1])
    return out


def test_every_generated_kernel_compiles_for_sm90(monkeypatch, tmp_path):
    problem = _ptxas_problem()
    if problem:
        pytest.skip(problem)
    cases = _sources(monkeypatch)
    path = tmp_path / "kernels.json"
    path.write_text(json.dumps(cases))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    proc = subprocess.run([sys.executable, "-m", "fusionlens.executors.triton.aot", str(path), "--arch", "90"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    failed = [r for r in rows if not r.get("ok")]
    assert rows and len(rows) == sum(len(c["specs"]) for c in cases), proc.stderr[-3000:]
    assert not failed, "\n".join(f"{r['label']}: {r.get('error')}" for r in failed)
    for r in rows:
        assert r["cubin_bytes"] > 0, r


def _row(fn_name, n, dtype):
    import torch.nn.functional as F

    fns = {
        "softmax": (lambda x: torch.softmax(x, -1), lambda: (torch.randn(4, n, dtype=dtype),)),
        "layer_norm": (lambda x, w, b: F.layer_norm(x, (n,), w, b),
                       lambda: (torch.randn(4, n, dtype=dtype), torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype))),
        "residual_norm": (C.residual_norm, lambda: (torch.randn(4, n, dtype=dtype), torch.randn(4, n, dtype=dtype),
                                                     torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype))),
    }
    fn, make = fns[fn_name]
    group, _ = group_from_fn(fn, *make(), gid=f"H_{fn_name}_{n}")
    gen = tx.generate(group, torch.device("cpu"))
    return {"label": f"{fn_name}/{n}/{str(dtype).removeprefix('torch.')}", "source": gen.source,
            "specs": [dataclasses.asdict(s) for s in gen.specs]}


def test_full_size_rows_compile_without_spills(tmp_path):
    """Rows of 16k (one pass in registers, the largest) and 32k (looped) elements."""
    problem = _ptxas_problem()
    if problem:
        pytest.skip(problem)
    cases = [_row(name, n, torch.float32) for name in ("softmax", "layer_norm", "residual_norm")
             for n in (tuning.MAX_SINGLE_PASS, 2 * tuning.MAX_SINGLE_PASS)]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(cases))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    proc = subprocess.run([sys.executable, "-m", "fusionlens.executors.triton.aot", str(path)], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=600)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == len(cases), proc.stderr[-3000:]
    for r in rows:
        assert r["ok"], r
        if "local_bytes" in r:  # cuobjdump was there to read the resource usage
            assert r["local_bytes"] == 0 and r.get("stack_bytes", 0) == 0, r
