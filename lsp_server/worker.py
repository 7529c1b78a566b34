"""The compile worker: runs user code on behalf of the language server.

Started by the server as `python -m lsp_server.worker`. The messages, one JSON object a line,
are lsp_server/protocol.py's. Before anything else the worker moves the protocol onto
duplicated file descriptors and points fd 1 at stderr and fd 0 at /dev/null, so `print()` or
`input()` in user code (or in any library, at the C level too) can never corrupt or consume
the protocol stream.

Where a compile hung or died. The server kills a compile that runs past its timeout and
cannot ask a dead worker anything, so the worker says beforehand where the user's code is
(the innermost *user* frame of the main thread, by `compiler.provenance.is_user_file`, and
the chain of user frames, innermost first):
  - "where" events: a sampler thread sends the main thread's user stack every SAMPLE_S
    seconds while it changes (the last known position for a SIGKILL, e.g. the OOM killer)
    and once more shortly before the compile's timeout; os._exit() in user code sends one,
    with its exit code, before exiting;
  - the stacks file (FUSIONLENS_WORKER_STACKS, made by the server): `faulthandler` dumps all
    threads' Python stacks there on a fatal signal (SIGSEGV, SIGABRT, ...) and, when the
    sampler could not run before the timeout (a C call holding the GIL), just before it.
    The server parses the dump with the "stacks" of the ready message: the main thread's
    id and the path roots that are not user code.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import os
import sys
import threading
import time
import traceback

SAMPLE_S = 0.25
_LSP_DIR = os.path.dirname(os.path.abspath(__file__))
_REAL_EXIT = os._exit
_OUT_LOCK = threading.Lock()  # the main thread and the sampler both write to the protocol
_STACKS_FD: "int | None" = None
_CURRENT: dict = {"id": None, "out": None, "final_at": None}  # the compile in progress (_OUT_LOCK)


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
    text = json.dumps(message, default=str) + "\n"
    with _OUT_LOCK:
        out.write(text)
        out.flush()


# --- where the user's code is ---------------------------------------------------------------

def _code_roots() -> dict:
    """compiler.provenance's folders for deciding which frames are user (model) code, sent to
    the server, which classifies a crash dump's frames with them (it imports no compiler)."""
    try:
        from compiler import provenance

        return dataclasses.asdict(provenance.code_roots())
    except Exception:  # noqa: BLE001 - the compiler is broken: the standard library at least
        import sysconfig

        paths = sysconfig.get_paths()
        return {"never": [_LSP_DIR], "stdlib": [os.path.abspath(paths[k]) for k in ("stdlib", "platstdlib")],
                "packages": [os.path.abspath(paths[k]) for k in ("purelib", "platlib")]}


def _is_user(filename: str) -> bool:
    try:
        from compiler.provenance import is_user_file
    except Exception:  # noqa: BLE001
        return bool(filename) and not filename.startswith("<")
    return is_user_file(filename)


def _user_stack(frame, limit: int = 40) -> list:
    """The user frames of a Python stack, innermost first."""
    stack = []
    while frame is not None and len(stack) < limit:
        code = frame.f_code
        if frame.f_lineno and _is_user(code.co_filename):
            stack.append({"file": os.path.abspath(code.co_filename), "line": frame.f_lineno,
                          "function": code.co_name})
        frame = frame.f_back
    return stack


def _where(stack: list, **extra) -> "dict | None":
    if not stack:
        return None
    return dict(stack[0], stack=stack, **extra)


def _send_where(where: dict, req_id=None) -> None:
    with _OUT_LOCK:
        out = _CURRENT["out"]
        if _CURRENT["id"] is None or out is None or (req_id is not None and req_id != _CURRENT["id"]):
            return  # that compile is over
        try:
            out.write(json.dumps({"id": _CURRENT["id"], "event": "where", "where": where}, default=str) + "\n")
            out.flush()
        except (OSError, ValueError):
            pass


def _sampler() -> None:
    """Send the main thread's user position while a compile runs (when it changes), and once
    more shortly before the timeout. That last sample needs the GIL, which is safe; only when
    it cannot get it (a C call holding the GIL) does the GIL-free faulthandler dump run: it
    reads the frames of a thread that may be running, and a thread that is changing them
    (a busy Python loop) can make it crash the worker."""
    main = threading.main_thread().ident
    last = None
    while True:
        final_at = _CURRENT["final_at"]
        time.sleep(SAMPLE_S if final_at is None else min(SAMPLE_S, max(final_at - time.monotonic(), 0.01)))
        req_id, final_at = _CURRENT["id"], _CURRENT["final_at"]
        if req_id is None:
            last = None
            continue
        final = final_at is not None and time.monotonic() >= final_at
        if final:
            with _OUT_LOCK:
                if _CURRENT["id"] == req_id:
                    _CURRENT["final_at"] = None
                    _cancel_dump()
        try:
            where = _where(_user_stack(sys._current_frames().get(main)))
        except Exception:  # noqa: BLE001 - a sample is worth no crash
            continue
        key = (req_id, where and (where["file"], where["line"], len(where["stack"])))
        if where is not None and (key != last or final):
            last = key
            _send_where(where, req_id)


def _cancel_dump() -> None:
    try:
        faulthandler.cancel_dump_traceback_later()
    except RuntimeError:
        pass


def _exit_reporting_where(code=0):
    """os._exit in user code: say where, then exit (the exit code tells the server the rest)."""
    try:
        if threading.current_thread() is threading.main_thread():
            where = _where(_user_stack(sys._getframe(1)), exit=code)
            if where is not None:
                _send_where(where)
    except Exception:  # noqa: BLE001
        pass
    _REAL_EXIT(code)


def _set_up_stacks() -> dict:
    """Fatal signals dump the Python stacks into the server's stacks file; os._exit and a
    sampler report positions. Returns the ready message's "stacks"."""
    global _STACKS_FD
    path = os.environ.get("FUSIONLENS_WORKER_STACKS")
    if path:
        try:
            _STACKS_FD = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
            faulthandler.enable(file=_STACKS_FD, all_threads=True)
        except (OSError, ValueError, RuntimeError):
            _STACKS_FD = None
    os._exit = _exit_reporting_where
    threading.Thread(target=_sampler, name="fusionlens-where", daemon=True).start()
    return {"thread": threading.main_thread().ident, "roots": _code_roots()}


def _watch_compile(req: dict, out) -> None:
    """A compile starts: positions are about it, and the stacks are dumped shortly before
    its timeout (the server kills it at the timeout)."""
    try:
        timeout = float(req.get("timeout") or 0)
    except (TypeError, ValueError):
        timeout = 0.0
    margin = min(1.0, 0.25 * timeout)
    with _OUT_LOCK:
        _CURRENT.update(id=req["id"], out=out,
                        final_at=time.monotonic() + timeout - margin if timeout > 0 else None)
        if _STACKS_FD is None:
            return
        try:
            os.ftruncate(_STACKS_FD, 0)  # the file is about this compile only
            if timeout > 0:  # the sampler cancels it when it gets to run (see _sampler)
                faulthandler.dump_traceback_later(max(timeout - margin / 2, 0.05), file=_STACKS_FD)
        except (OSError, ValueError, RuntimeError):
            pass


def _unwatch_compile() -> None:
    with _OUT_LOCK:
        _CURRENT.update(id=None, out=None, final_at=None)
        _cancel_dump()


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


def _start_request(req: dict, out) -> None:
    """A request that runs user code begins: its folders first on sys.path, its working
    folder, "started", and the watch on where its user code is."""
    for p in reversed(req.get("sys_path") or []):
        if p and p not in sys.path:
            sys.path.insert(0, p)
    if req.get("cwd"):
        try:
            os.chdir(req["cwd"])
        except OSError:
            pass
    _send(out, {"id": req["id"], "event": "started"})
    _watch_compile(req, out)


def _end_request(text: str, out) -> None:
    _unwatch_compile()
    sys.stdout.flush()
    sys.stderr.flush()
    with _OUT_LOCK:
        out.write(text + "\n")
        out.flush()


def _handle_repro(req: dict, out) -> None:
    """A repro script of one region (compiler.repro): {"ok": true, "repro": {text, region,
    executor, file_name, summary}}, or "repro": null and "problem" when there is none."""
    _start_request(req, out)
    try:
        from compiler import repro

        try:
            r = repro.write_repro(req["path"], req["target"], req["region"], executors=req.get("executors"),
                                  device=req.get("device", "auto"), source=req.get("source"))
            answer = {"id": req["id"], "ok": True, "repro": {"text": r.text, "region": r.region,
                                                             "executor": r.executor, "file_name": r.file_name,
                                                             "summary": r.summary}}
        except repro.ReproError as e:
            answer = {"id": req["id"], "ok": True, "repro": None, "problem": str(e)}
        text = json.dumps(answer, default=str)
    except BaseException as e:  # noqa: BLE001 - everything becomes a message
        if isinstance(e, KeyboardInterrupt):
            raise
        text = json.dumps({"id": req["id"], "ok": False, "error": f"{type(e).__name__}: {e}",
                           "traceback": traceback.format_exc()})
    _end_request(text, out)


def _handle_compile(req: dict, out) -> None:
    _start_request(req, out)
    try:
        compile_target = _compile_function()
        extra = {"source": req["source"]} if req.get("source") is not None else {}  # an unsaved buffer
        from compiler import roofline

        with roofline.targeting(req.get("gpu")):  # fusionlens.targetGpu
            report = compile_target(req["path"], req["target"], executors=req.get("executors"), **extra,
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
    _end_request(text, out)


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
                _REAL_EXIT(70)

    threading.Thread(target=watch, name="fusionlens-parent-watch", daemon=True).start()


def main() -> None:
    proto_in, proto_out = _take_over_stdio()
    _exit_with_parent()
    stacks = None
    error = None
    try:
        import compiler.targets  # noqa: F401  (warm up: the compiler and torch)
        device, device_name = _device()
    except Exception as e:  # noqa: BLE001
        device, device_name, error = "cpu", "CPU", f"{type(e).__name__}: {e}"
    try:
        stacks = _set_up_stacks()
    except Exception:  # noqa: BLE001 - compiles work without it
        pass
    _send(proto_out, {"event": "ready", "pid": os.getpid(), "device": device,
                      "device_name": device_name, "error": error, "stacks": stacks})
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
        elif cmd == "repro":
            _handle_repro(req, proto_out)
        elif cmd == "ping":
            _send(proto_out, {"id": req.get("id"), "ok": True, "pid": os.getpid(),
                              "modules": sorted(m for m in ("torch", "compiler") if m in sys.modules)})
        elif cmd == "exit":
            break


if __name__ == "__main__":
    main()
