"""A static analysis of every Triton kernel of a region or a preview: how it launches
(`Region.launch`, always: it is read from the generator) and what it compiles to on the target
GPU (`Region.static`: widest loads and stores, registers, spills, shared memory, blocks per SM,
waves, bytes read against the least the region must read), with findings in plain words
(fusionlens/report/kernels.py). Nothing runs: the kernels go through `aot.py` for the target's
arch (sm_90 for an H100 or H200) on any machine, CPU-only ones included.

The compile costs about a second a kernel, in a subprocess (it must run without
TRITON_INTERPRET), so it is lazy: only when `CompileOptions.static_kernels` asks for it
(`fusionlens compile --static` or `--gpu`, FUSIONLENS_STATIC=1), and cached: in this process
and on disk under ~/.cache/fusionlens/, keyed by the kernel's source, its launch and the arch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from fusionlens.middle.contract import Decline
from fusionlens.report import kernels as K, schema as R

from .module import KernelSpec, build_source
from .analysis import _Analysis

_MEMO: dict[str, dict[str, Any]] = {}
MAX_MEMO = 4096  # rows of a few hundred bytes: far more kernels than a model has
_REPO = Path(__file__).resolve().parents[3]  # the folder holding the fusionlens package


def specs_of(region) -> tuple[str, list[KernelSpec]] | None:
    """(module source, its kernels) of a lowering Region that Triton generated or previewed."""
    g = getattr(region, "generated", None)
    if g is not None and getattr(g, "specs", None):
        return g.source, list(g.specs)
    group = getattr(region, "group", None)
    if region.executor != "triton" or group is None:
        return None
    try:
        an = _Analysis(group)
        from .runtime import _contiguous_key

        source, _, _, specs = build_source(group, an, _contiguous_key(an))
    except Decline:
        return None
    return source, specs


def launches(specs: list[KernelSpec]) -> list[R.KernelLaunch]:
    return [R.KernelLaunch(s.name, list(s.grid), s.num_warps, s.num_stages,
                           {k: v for k, v in s.constexprs.items() if isinstance(v, int) and not isinstance(v, bool)})
            for s in specs]


def _cache_dir() -> Path:
    try:
        import importlib.metadata

        version = importlib.metadata.version("triton")
    except Exception:
        version = "none"
    return Path.home() / ".cache" / "fusionlens" / f"static-triton-{version}"


def _key(source: str, spec: KernelSpec, arch: int) -> str:
    text = json.dumps([source, dataclasses.asdict(spec), arch], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _read_cached(key: str) -> dict[str, Any] | None:
    if key in _MEMO:
        return _MEMO[key]
    path = _cache_dir() / f"{key}.json"
    try:
        row = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    _remember(key, row)
    return row


def _remember(key: str, row: dict[str, Any]) -> None:
    """Bounded (a long-lived worker compiles without end; the disk keeps every row): past
    MAX_MEMO rows the oldest is dropped."""
    if len(_MEMO) >= MAX_MEMO:
        del _MEMO[next(iter(_MEMO))]
    _MEMO[key] = row


def _write_cached(key: str, row: dict[str, Any]) -> None:
    _remember(key, row)
    if not row.get("ok"):
        return  # a failure may be the machine's (no ptxas): try again next time
    try:
        folder = _cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(row))
        tmp.replace(folder / f"{key}.json")
    except OSError:
        pass


def compile_kernels(items: list[tuple[str, KernelSpec]], arch: int = 90) -> list[dict[str, Any]]:
    """aot.py's row for each (source, spec), compiled for sm_`arch`: from the cache, the rest in
    one subprocess."""
    keys = [_key(src, spec, arch) for src, spec in items]
    rows: dict[str, dict[str, Any]] = {}
    missing: dict[str, tuple[str, KernelSpec]] = {}
    for k, item in zip(keys, items):
        row = _read_cached(k)
        if row is None:
            missing[k] = item
        else:
            rows[k] = row
    if missing:
        rows.update(_run_aot(missing, arch))
    return [rows.get(k, {"ok": False, "error": "no answer from the compile"}) for k in keys]


def _run_aot(missing: dict[str, tuple[str, KernelSpec]], arch: int) -> dict[str, dict[str, Any]]:
    cases = [{"label": k, "source": src, "specs": [dataclasses.asdict(spec)]} for k, (src, spec) in missing.items()]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(_REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernels.json"
        path.write_text(json.dumps(cases))
        try:
            # -P and a folder of its own: the user's folder (a workspace's torch.py) never on its path
            proc = subprocess.run([sys.executable, "-P", "-m", "fusionlens.executors.triton.aot", str(path), "--arch",
                                   str(arch)], capture_output=True, text=True, env=env, timeout=900, cwd=tmp)
            lines, err = proc.stdout.splitlines(), proc.stderr
        except (OSError, subprocess.TimeoutExpired) as e:
            lines, err = [], f"{type(e).__name__}: {e}"
    for line in lines:
        if line.startswith("{"):
            row = json.loads(line)
            out[row["label"]] = row
    for k in missing:
        _write_cached(k, out.setdefault(k, {"ok": False, "error": (err.strip().splitlines() or ["?"])[-1]}))
    return out


def kernel_static(row: dict[str, Any], spec: KernelSpec, launch: R.KernelLaunch, gpu: str) -> R.KernelStatic:
    sm = K.sm_of(gpu)
    if not row.get("ok"):
        return R.KernelStatic(spec.name, f"sm_{sm.arch}", gpu, error=str(row.get("error", "?")))
    spill = None
    if "local_bytes" in row or "stack_bytes" in row:
        spill = int(row.get("local_bytes", 0)) + int(row.get("stack_bytes", 0))
    ratio = round(spec.bytes_read / spec.min_read, 3) if spec.min_read else None
    s = R.KernelStatic(spec.name, f"sm_{sm.arch}", gpu, row.get("load_bits"), row.get("store_bits"), row.get("regs"),
                       spill, int(row.get("shared", 0) or 0), passes=spec.passes, read_ratio=ratio)
    return K.complete(s, launch)


def describe(pairs: list[tuple[Any, R.Region]], gpu: str, compile_static: bool) -> list[R.Region]:
    """Each report Region of `pairs` with its `launch`, and with `compile_static` its `static` and
    `findings`, from its lowering Region (one subprocess for every kernel not cached), in order."""
    out = [report for _, report in pairs]
    found = []
    for i, (region, _) in enumerate(pairs):
        got = specs_of(region)
        if got is not None:
            found.append((i, got[0], got[1], launches(got[1])))
    if not compile_static or not found:
        for i, _, specs, launch in found:
            out[i] = dataclasses.replace(out[i], launch=launch, findings=K.findings(launch, [], specs[0].row_bytes))
        return out
    sm = K.sm_of(gpu)
    rows = iter(compile_kernels([(source, spec) for _, source, specs, _ in found for spec in specs], sm.arch))
    for i, _, specs, launch in found:
        static = [kernel_static(next(rows), spec, each, gpu) for spec, each in zip(specs, launch)]
        out[i] = dataclasses.replace(out[i], launch=launch, static=static,
                                     findings=K.findings(launch, static, specs[0].row_bytes))
    return out

