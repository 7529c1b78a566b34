"""Ahead-of-time compile of generated Triton kernels for a GPU target, without a GPU.

    python -m fusionlens.executors.triton.aot cases.json [--arch 90]

`cases.json` is a list of {"label", "source", "specs": [{"name", "signature", "constexprs",
"num_warps"}]} (what `Generated.source` / `Generated.specs` hold). Each kernel goes through
`triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", arch, 32))`
down to a cubin (Triton's bundled ptxas); nothing runs. Prints one JSON line per kernel:
{"label", "kernel", "ok", "error", "ptx_lines", "cubin_bytes", "shared", "n_regs"...}.

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
    try:
        src = ASTSource(fn=kernel, signature=dict(spec["signature"]), constexprs=dict(spec["constexprs"]))
    except TypeError:  # Triton < 3.3 spelt it `constants`, keyed by argument index
        names = list(kernel.arg_names)
        src = ASTSource(fn=kernel, signature={names.index(k): v for k, v in spec["signature"].items()
                                              if v != "constexpr"},
                        constants={names.index(k): v for k, v in spec["constexprs"].items()})
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": int(spec["num_warps"])})
    asm = compiled.asm
    out: dict[str, Any] = {"ok": True, "ptx_lines": len(asm.get("ptx", "").splitlines()),
                           "cubin_bytes": len(asm.get("cubin", b""))}
    meta = getattr(compiled, "metadata", None)
    for key in ("shared", "num_warps"):
        if meta is not None and hasattr(meta, key):
            out[key] = getattr(meta, key)
    out.update(resource_usage(asm.get("cubin", b"")))
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
