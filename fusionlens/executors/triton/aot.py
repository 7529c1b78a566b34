"""Ahead-of-time compile of generated Triton kernels for a GPU target, without a GPU.

    python -m fusionlens.executors.triton.aot cases.json [--arch 90]

`cases.json` is a list of {"label", "source", "specs": [{"name", "signature", "constexprs",
"num_warps", "num_stages", "hints"}]} (what `Generated.source` / `Generated.specs` hold). Each
kernel goes through `triton.compile(ASTSource(fn, signature, constexprs, attrs),
target=GPUTarget("cuda", arch, 32))` down to a cubin (Triton's bundled ptxas); nothing runs.
Prints one JSON line per kernel: {"label", "kernel", "ok", "error", "ptx_lines", "cubin_bytes",
"shared", "regs", "local_bytes", "load_bits", "store_bits", ...}.

It specialises as Triton's JIT does at a launch (triton/runtime/jit.py `_pack_args` ->
`BaseBackend.parse_attr`): every pointer argument is 16-byte aligned (what torch's allocator
gives a fresh tensor) and every integer argument whose example value is a multiple of 16 is
marked so; both become `tt.divisibility = 16` attributes. Without them the compiler must assume
4-byte alignment and emits scalar `ld.global.b32`; with them contiguous fp32/bf16/fp16 rows load
and store 128 bits a thread (`ld.global.v4.b32`), as on the GPU.

It must run without TRITON_INTERPRET (the interpreter replaces @triton.jit), so tests call
it in a subprocess with that variable removed from the environment.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .module import load_source


def compile_one(source: str, spec: dict[str, Any], arch: int = 90) -> dict[str, Any]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel: Any = load_source(source, spec["name"], "aot")  # the named @triton.jit kernel (a JITFunction)
    attrs = specialisation(list(kernel.arg_names), spec)
    try:
        src = ASTSource(fn=kernel, signature=dict(spec["signature"]), constexprs=dict(spec["constexprs"]),
                        attrs=attrs)
    except TypeError:  # Triton < 3.3 spelt it `constants`, keyed by argument index
        names = list(kernel.arg_names)
        src = ASTSource(fn=kernel, signature={names.index(k): v for k, v in spec["signature"].items()
                                              if v != "constexpr"},
                        constants={names.index(k): v for k, v in spec["constexprs"].items()})
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": int(spec["num_warps"]),
                                       "num_stages": int(spec.get("num_stages", 1))})
    asm = compiled.asm
    ptx = asm.get("ptx", "")
    out: dict[str, Any] = {"ok": True, "ptx_lines": len(ptx.splitlines()), "cubin_bytes": len(asm.get("cubin", b""))}
    out.update(global_accesses(ptx))
    meta = getattr(compiled, "metadata", None)
    for key in ("shared", "num_warps"):
        if meta is not None and hasattr(meta, key):
            out[key] = getattr(meta, key)
    out.update(resource_usage(asm.get("cubin", b"")))
    return out


def specialisation(arg_names: list[str], spec: dict[str, Any]) -> dict[tuple[int, ...], list]:
    """The `tt.divisibility` attributes Triton's JIT would give this launch (see the module doc)."""
    attrs: dict[tuple[int, ...], list] = {}
    hints = spec.get("hints", {})
    for i, name in enumerate(arg_names):
        ty = spec["signature"].get(name, "constexpr")
        if ty.startswith("*") or (ty in ("i32", "i64") and hints.get(name, 0) % 16 == 0 and hints.get(name, 0)):
            attrs[(i,)] = [["tt.divisibility", 16]]
    return attrs


# ld.global / st.global with their cache and vector qualifiers: `ld.global.v4.b32`,
# `ld.global.L1::evict_last.v2.b16`, `st.global.b32`
_ACCESS = re.compile(r"\b(ld|st)\.global((?:\.[A-Za-z0-9_:]+)*?)\.(?:v(\d)\.)?[bfsu](\d+)\b")


def global_accesses(ptx: str) -> dict[str, int]:
    """The widest and narrowest global load and store of a kernel in bits a thread (vector
    width x element width), and how many of each the PTX has."""
    bits: dict[str, list[int]] = {"ld": [], "st": []}
    for m in _ACCESS.finditer(ptx):
        bits[m.group(1)].append(int(m.group(3) or 1) * int(m.group(4)))
    out: dict[str, int] = {}
    for op, name in (("ld", "load"), ("st", "store")):
        if bits[op]:
            out[f"{name}_bits"] = max(bits[op])
            out[f"{name}_bits_min"] = min(bits[op])
            out[f"{name}s"] = len(bits[op])
    return out


def resource_usage(cubin: bytes) -> dict[str, int]:
    """Registers, stack and local (spill) bytes per thread from the cubin, read with the
    cuobjdump bundled in the triton wheel; {} when it is not there."""
    import triton

    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    tool = str(bundled) if bundled.exists() else shutil.which("cuobjdump")
    if not tool or not cubin:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            text = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True,
                                  timeout=60).stdout
        except Exception:
            return {}
    out: dict[str, int] = {}
    for key, name in (("REG", "regs"), ("STACK", "stack_bytes"), ("LOCAL", "local_bytes")):
        m = re.search(rf"\b{key}:(\d+)", text)
        if m:
            out[name] = int(m.group(1))
    return out


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print(json.dumps({"ok": False, "error": "TRITON_INTERPRET=1 is set: unset it for AOT compiles"}))
        return 2
    arch = 90
    if "--arch" in argv:
        i = argv.index("--arch")
        arch = int(argv[i + 1])
        del argv[i:i + 2]
    with open(argv[0]) as f:
        cases = json.load(f)
    failed = 0
    for case in cases:
        for spec in case["specs"]:
            row = {"label": case["label"], "kernel": spec["name"]}
            try:
                row.update(compile_one(case["source"], spec, arch))
            except Exception as e:  # report and go on
                failed += 1
                row.update({"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]})
            print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
