"""The compile worker: runs user code on behalf of the language server.

Started by the server as `python -m lsp_server.worker`. Protocol: one JSON object per line.
The server writes requests to the worker's stdin; the worker answers on its original stdout.
Before anything else the worker moves the protocol onto duplicated file descriptors and
points fd 1 at stderr and fd 0 at /dev/null, so `print()` or `input()` in user code (or in
any library, at the C level too) can never corrupt or consume the protocol stream.

Messages from the worker:
  {"event": "ready", "pid": int, "device": str, "device_name": str, "error": str | null}
  {"id": n, "event": "started"}
  {"id": n, "ok": true, "report": {...CompileReport.to_dict()...}}
  {"id": n, "ok": false, "error": str, "traceback": str}
Requests to the worker:
  {"id": n, "cmd": "compile", "path": str, "target": str, "executors": list | null,
   "repeats": int, "device": str, "benchmark": bool, "sys_path": [str], "cwd": str | null}
  {"id": n, "cmd": "ping"}
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def _take_over_stdio():
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(2, 1)  # user prints (Python or C) end up on stderr
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return proto_in, proto_out


def _send(out, message: dict) -> None:
    out.write(json.dumps(message, default=str) + "\n")
    out.flush()


def _compile_function():
    """The compile entry point; FUSIONLENS_WORKER_COMPILE=module:function overrides it
    (development and tests of the worker machinery only)."""
    spec = os.environ.get("FUSIONLENS_WORKER_COMPILE")
    if spec:
        import importlib

        module, _, name = spec.partition(":")
        return getattr(importlib.import_module(module), name)
    from compiler.targets import compile_target

    return compile_target


def _device() -> tuple[str, str]:
    try:
        import torch

        if torch.cuda.is_available():
            return "cuda", torch.cuda.get_device_name(0)
        return "cpu", "CPU"
    except Exception as e:  # torch missing or broken: compiles will say so
        return "cpu", f"CPU (torch unavailable: {e})"


def _handle_compile(req: dict, out) -> None:
    for p in reversed(req.get("sys_path") or []):
        if p and p not in sys.path:
            sys.path.insert(0, p)
    if req.get("cwd"):
        try:
            os.chdir(req["cwd"])
        except OSError:
            pass
    _send(out, {"id": req["id"], "event": "started"})
    try:
        compile_target = _compile_function()
        report = compile_target(req["path"], req["target"], executors=req.get("executors"),
                                benchmark=req.get("benchmark", True),
                                repeats=int(req.get("repeats", 20)),
                                device=req.get("device", "auto"))
        data = report.to_dict() if hasattr(report, "to_dict") else report
        text = json.dumps({"id": req["id"], "ok": True, "report": data}, default=str)
    except BaseException as e:  # noqa: BLE001 - everything becomes a message
        if isinstance(e, KeyboardInterrupt):
            raise
        text = json.dumps({"id": req["id"], "ok": False,
                           "error": f"{type(e).__name__}: {e}",
                           "traceback": traceback.format_exc()})
    sys.stdout.flush()
    sys.stderr.flush()
    out.write(text + "\n")
    out.flush()


def _exit_with_parent() -> None:
    """The worker runs in its own session; if the server goes away without killing it (a
    crash, SIGKILL), stop anyway, even in the middle of a user's endless loop."""
    import threading
    import time

    parent = os.getppid()

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(70)

    threading.Thread(target=watch, name="fusionlens-parent-watch", daemon=True).start()


def main() -> None:
    proto_in, proto_out = _take_over_stdio()
    _exit_with_parent()
    error = None
    try:
        import compiler.targets  # noqa: F401  (warm up: the compiler and torch)
        device, device_name = _device()
    except Exception as e:  # noqa: BLE001
        device, device_name, error = "cpu", "CPU", f"{type(e).__name__}: {e}"
    _send(proto_out, {"event": "ready", "pid": os.getpid(), "device": device,
                      "device_name": device_name, "error": error})
    for line in proto_in:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except ValueError:
            continue
        cmd = req.get("cmd")
        if cmd == "compile":
            _handle_compile(req, proto_out)
        elif cmd == "ping":
            _send(proto_out, {"id": req.get("id"), "ok": True, "pid": os.getpid(),
                              "modules": sorted(m for m in ("torch", "compiler") if m in sys.modules)})
        elif cmd == "exit":
            break


if __name__ == "__main__":
    main()
