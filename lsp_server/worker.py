"""The compile worker: runs user code on behalf of the language server.

Started by the server as `python -m lsp_server.worker`. The messages, one JSON object a line,
are lsp_server/protocol.py's. Before anything else the worker moves the protocol onto
duplicated file descriptors and points fd 1 at stderr and fd 0 at /dev/null, so `print()` or
`input()` in user code (or in any library, at the C level too) can never corrupt or consume
the protocol stream.

Each compile sees the workspace's modules as they are now (its file's folder first on
sys.path, modules that changed or that another folder holds imported afresh, open buffers'
text): lsp_server/worker_imports.py, which also tells the server what the compile imported.

Where a compile hung or died. The server kills a compile that runs past its timeout and
cannot ask a dead worker anything, so the worker says beforehand where the user's code is
(the innermost *user* frame of the main thread, by `fusionlens.ir.provenance.is_user_file`, and
the chain of user frames, innermost first):
  - WhereEvents: a sampler thread sends the main thread's user stack every SAMPLE_S
    seconds while it changes (the last known position for a SIGKILL, e.g. the OOM killer)
    and once more shortly before the compile's timeout; os._exit() in user code sends one,
    with its exit code, before exiting;
  - the stacks file (FUSIONLENS_WORKER_STACKS, made by the server): `faulthandler` dumps all
    threads' Python stacks there on a fatal signal (SIGSEGV, SIGABRT, ...) and, when the
    sampler could not run before the timeout (a C call holding the GIL), just before it.
    The server parses the dump with the Ready message's `stacks`: the main thread's
    id and the path roots that are not user code.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import functools
import os
import signal
import sys
import threading
import time
import traceback
from types import FrameType
from typing import Any, TextIO
from collections.abc import Callable

from lsp_server.protocol import (CompileAnswer, CompileRequest, ExitRequest, Failure, Message, PingAnswer,
                                 PingRequest, Ready, ReproAnswer, ReproRequest, ReproScript, Stacks, Started,
                                 UserFrame, Where, WhereEvent, decode, encode)
from lsp_server import process_tree
from lsp_server.worker_imports import Modules

SAMPLE_S = 0.25
_LSP_DIR = os.path.dirname(os.path.abspath(__file__))
_REAL_EXIT = os._exit
_WORKER_PID = os.getpid()  # a process user code forks is not the worker
_OUT_LOCK = threading.Lock()  # the main thread and the sampler both write to the protocol
_STACKS_FD: int | None = None
_MODULES: Modules | None = None  # the workspace modules between compiles (_modules())


class _Current:
    """The request in progress (read and written under _OUT_LOCK)."""

    id: int | None = None
    out: TextIO | None = None
    final_at: float | None = None  # monotonic time of the last sample before its timeout


_CURRENT = _Current()


def _take_over_stdio() -> tuple[TextIO, TextIO]:
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(2, 1)  # user prints (Python or C) end up on stderr
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return proto_in, proto_out


def _send(out: TextIO, message: Message) -> None:
    text = encode(message) + "\n"
    with _OUT_LOCK:
        out.write(text)
        out.flush()


# --- where the user's code is ---------------------------------------------------------------

def _code_roots() -> dict[str, list[str]]:
    """fusionlens.ir.provenance's folders for deciding which frames are user (model) code, sent to
    the server, which classifies a crash dump's frames with them (it imports no compiler)."""
    try:
        from fusionlens.ir import provenance

        return {k: list(v) for k, v in dataclasses.asdict(provenance.code_roots()).items()}
    except Exception:  # noqa: BLE001 - the compiler is broken: the standard library at least
        import sysconfig

        paths = sysconfig.get_paths()
        return {"never": [_LSP_DIR], "stdlib": [os.path.abspath(paths[k]) for k in ("stdlib", "platstdlib")],
                "packages": [os.path.abspath(paths[k]) for k in ("purelib", "platlib")]}


def _is_user(filename: str) -> bool:
    try:
        from fusionlens.ir.provenance import is_user_file
    except Exception:  # noqa: BLE001
        return bool(filename) and not filename.startswith("<")
    return is_user_file(filename)


def _user_stack(frame: FrameType | None, limit: int = 40) -> list[UserFrame]:
    """The user frames of a Python stack, innermost first."""
    stack: list[UserFrame] = []
    while frame is not None and len(stack) < limit:
        code = frame.f_code
        if frame.f_lineno and _is_user(code.co_filename):
            stack.append(UserFrame(os.path.abspath(code.co_filename), frame.f_lineno, code.co_name))
        frame = frame.f_back
    return stack


def _where(stack: list[UserFrame], exit: int | None = None) -> Where | None:
    if not stack:
        return None
    return Where(stack[0].file, stack[0].line, stack[0].function, stack, exit=exit)


def _send_where(where: Where, req_id: int | None = None) -> None:
    with _OUT_LOCK:
        out, current = _CURRENT.out, _CURRENT.id
        if current is None or out is None or (req_id is not None and req_id != current):
            return  # that compile is over
        try:
            out.write(encode(WhereEvent(current, where)) + "\n")
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
    last: Any = None
    while True:
        final_at = _CURRENT.final_at
        time.sleep(SAMPLE_S if final_at is None else min(SAMPLE_S, max(final_at - time.monotonic(), 0.01)))
        req_id, final_at = _CURRENT.id, _CURRENT.final_at
        if req_id is None:
            last = None
            continue
        final = final_at is not None and time.monotonic() >= final_at
        if final:
            with _OUT_LOCK:
                if _CURRENT.id == req_id:
                    _CURRENT.final_at = None
                    _cancel_dump()
        try:
            where = _where(_user_stack(sys._current_frames().get(main or 0)))
        except Exception:  # noqa: BLE001 - a sample is worth no crash
            continue
        key = (req_id, where and (where.file, where.line, len(where.stack)))
        if where is not None and (key != last or final):
            last = key
            _send_where(where, req_id)


def _cancel_dump() -> None:
    try:
        faulthandler.cancel_dump_traceback_later()
    except RuntimeError:
        pass


def _exit_reporting_where(code: int = 0) -> None:
    """os._exit in user code: say where, then exit (the exit code tells the server the rest);
    the worker itself ends its processes first (a forked child of user code only exits)."""
    if os.getpid() != _WORKER_PID:
        _REAL_EXIT(code)
    try:
        process_tree.kill_tree(_WORKER_PID, include_root=False)
        if threading.current_thread() is threading.main_thread():
            where = _where(_user_stack(sys._getframe(1)), exit=code)
            if where is not None:
                _send_where(where)
    except Exception:  # noqa: BLE001
        pass
    _REAL_EXIT(code)


def _set_up_stacks() -> Stacks:
    """Fatal signals dump the Python stacks into the server's stacks file; os._exit and a
    sampler report positions. Returns the Ready message's `stacks`."""
    global _STACKS_FD
    path = os.environ.get("FUSIONLENS_WORKER_STACKS")
    if path:
        try:
            _STACKS_FD = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
            faulthandler.enable(file=_STACKS_FD, all_threads=True)
        except (OSError, ValueError, RuntimeError):
            _STACKS_FD = None
    os._exit = _exit_reporting_where  # type: ignore[assignment]
    threading.Thread(target=_sampler, name="fusionlens-where", daemon=True).start()
    return Stacks(threading.main_thread().ident, _code_roots())


def _watch_compile(req_id: int, timeout: float | None, out: TextIO) -> None:
    """A compile starts: positions are about it, and the stacks are dumped shortly before
    its timeout (the server kills it at the timeout)."""
    seconds = float(timeout or 0)
    margin = min(1.0, 0.25 * seconds)
    with _OUT_LOCK:
        _CURRENT.id, _CURRENT.out = req_id, out
        _CURRENT.final_at = time.monotonic() + seconds - margin if seconds > 0 else None
        if _STACKS_FD is None:
            return
        try:
            os.ftruncate(_STACKS_FD, 0)  # the file is about this compile only
            if seconds > 0:  # the sampler cancels it when it gets to run (see _sampler)
                faulthandler.dump_traceback_later(max(seconds - margin / 2, 0.05), file=_STACKS_FD)
        except (OSError, ValueError, RuntimeError):
            pass


def _unwatch_compile() -> None:
    with _OUT_LOCK:
        _CURRENT.id, _CURRENT.out, _CURRENT.final_at = None, None, None
        _cancel_dump()


def _compile_function() -> Callable[..., Any]:
    """The compile entry point; FUSIONLENS_WORKER_COMPILE=module:function overrides it
    (development and tests of the worker machinery only)."""
    spec = os.environ.get("FUSIONLENS_WORKER_COMPILE")
    if spec:
        import importlib

        module, _, name = spec.partition(":")
        return getattr(importlib.import_module(module), name)
    from fusionlens.driver.targets import compile_target

    return compile_target


def _device() -> tuple[str, str]:
    try:
        import torch

        if torch.cuda.is_available():
            return "cuda", torch.cuda.get_device_name(0)
        return "cpu", "CPU"
    except Exception as e:  # torch missing or broken: compiles will say so
        return "cpu", f"CPU (torch unavailable: {e})"


def _modules() -> Modules:
    """The workspace modules' keeper (worker_imports.py), made and installed on first use."""
    global _MODULES
    if _MODULES is None:
        from fusionlens.report.discovery import CodeRoots

        roots = _code_roots()
        _MODULES = Modules(CodeRoots(**{k: tuple(v) for k, v in roots.items()}))
        _MODULES.install()
    return _MODULES


def _run(req: CompileRequest | ReproRequest, out: TextIO, work: Callable[[], Message]) -> None:
    """Run a request's user code: sys.path and the workspace modules as they are now (the
    file's folder first, then the request's), its working folder, Started, the watch on
    where its user code is; then its answer (with the files it imported), or a Failure."""
    modules: Modules | None = None
    try:
        modules = _modules()
        modules.prepare(req.path, req.sys_path, req.overlays)
    except Exception:  # noqa: BLE001 - the compiler does not import (the compile says so), or a bug
        traceback.print_exc()  # to the server's log
        modules = None
    if req.cwd:
        try:
            os.chdir(req.cwd)
        except OSError:
            pass
    _send(out, Started(req.id))
    _watch_compile(req.id, req.timeout, out)
    try:
        message = work()
        imports = modules.finish(req.path) if modules is not None else {}  # (records what was loaded)
        if isinstance(message, CompileAnswer):
            message.imports = imports
        answer = encode(message)
    except BaseException as e:  # noqa: BLE001 - everything becomes a message
        if isinstance(e, KeyboardInterrupt):
            raise
        answer = encode(Failure(req.id, f"{type(e).__name__}: {e}", traceback.format_exc()))
    _unwatch_compile()
    sys.stdout.flush()
    sys.stderr.flush()
    with _OUT_LOCK:
        out.write(answer + "\n")
        out.flush()


def _compile(req: CompileRequest) -> CompileAnswer:
    from fusionlens.options import CompileOptions

    nproc = _nproc(req)
    if nproc:  # a distributed target: its ranks, launched as `fusionlens compile` launches them
        return CompileAnswer(req.id, _launch(req, nproc).to_dict())
    compile_target = _compile_function()
    extra = {"source": req.source} if req.source is not None else {}  # an unsaved buffer
    # the worker is an entry point: the environment's options (FUSIONLENS_DEBUG, ...), then
    # the settings' (fusionlens.executors, fusionlens.targetGpu) over them
    # the editor shows each Triton kernel's static analysis (launch, sm_90 compile, findings:
    # docs/kernels.md) unless the environment says otherwise: a second a kernel once, then cached
    static = None if os.environ.get("FUSIONLENS_STATIC", "").strip() else True
    options = CompileOptions.from_env(executors=req.executors, gpu=req.gpu, static_kernels=static)
    report = compile_target(req.path, req.target, executors=req.executors, options=options, **extra,
                            benchmark=req.benchmark, repeats=req.repeats, device=req.device)
    answer = CompileAnswer(req.id, report.to_dict() if hasattr(report, "to_dict") else report)
    if getattr(report, "status", None) == "ok":
        answer.plan, answer.plan_error = _plan(req)
    return answer


def _plan(req: CompileRequest) -> tuple[dict | None, str]:
    """A target with `@fusionlens.example(train=True, plan=dict(...))` planned at scale (on the
    meta device: nothing allocated; fusionlens/plan), or why not; (None, "") without a plan."""
    from fusionlens.report.discovery import find_targets

    try:
        text = req.source if req.source is not None else open(req.path, encoding="utf-8").read()
        info = next((t for t in find_targets(text, req.path) if t.name == req.target), None)
    except (OSError, SyntaxError, ValueError):
        return None, ""
    if info is None or not info.plan:
        return None, ""
    from fusionlens.plan import api

    try:
        return api.plan_target(req.path, info, source=req.source, **info.plan).to_dict(), ""
    except Exception as e:  # noqa: BLE001 - the compile stands; the plan says why it is missing
        return None, f"{type(e).__name__}: {getattr(e, 'message', e)}"


def _nproc(req: CompileRequest) -> int | None:
    """The ranks `@fusionlens.example(nproc=N)` asks for (discovery reads it from the source)."""
    from fusionlens.report.discovery import find_targets

    try:
        text = req.source if req.source is not None else open(req.path, encoding="utf-8").read()
        return next((t.nproc for t in find_targets(text, req.path) if t.name == req.target), None)
    except (OSError, SyntaxError, ValueError):
        return None  # compile_target says what is wrong with the file


def _launch(req: CompileRequest, nproc: int):
    """A distributed target's merged report (fusionlens/driver/launch.py), or why there is none."""
    from fusionlens.driver import launch
    from fusionlens.report import schema as R

    where = R.Target(req.target, req.path, None, None)
    if req.source is not None:  # the ranks import the file from disk
        return R.CompileReport(where, "error", error=R.Diagnostic(
            "error", f"{req.target} runs on {nproc} ranks, which load the saved file: save it to compile", req.path))
    settings = launch.Settings(benchmark=req.benchmark, repeats=req.repeats, device=req.device,
                               executors=req.executors, gpu=req.gpu)
    launched = launch.launch(req.path, [req.target], settings, nproc)
    if launched.reports:
        return launched.reports[0]
    if launched.failure is not None:
        return launched.failure
    return R.CompileReport(where, "error", error=R.Diagnostic(
        "error", f"the {nproc} ranks failed: {launched.output[-2000:]}", req.path))


def _repro(req: ReproRequest) -> ReproAnswer:
    """A repro script of one region (fusionlens.driver.repro), or why there is none."""
    from fusionlens.driver import repro
    from fusionlens.options import CompileOptions

    try:
        r = repro.write_repro(req.path, req.target, req.region, options=CompileOptions.from_env(),
                              executors=req.executors, device=req.device, source=req.source)
    except repro.ReproError as e:
        return ReproAnswer(req.id, None, str(e))
    return ReproAnswer(req.id, ReproScript(r.text, r.region, r.executor, r.file_name, r.summary))


def _end_all(code: int) -> None:
    """End every process user code started (those that left the group too), then this one."""
    try:
        process_tree.kill_tree(_WORKER_PID, include_root=False)
        if hasattr(os, "killpg"):
            os.killpg(0, signal.SIGKILL)  # our own group, this process with it
    finally:
        _REAL_EXIT(code)


def _on_sigterm(signum: int, frame: object) -> None:
    if os.getpid() != _WORKER_PID:  # a child user code forked (multiprocessing): SIGTERM as usual
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _end_all(128 + signum)


def _exit_with_parent() -> None:
    """The worker runs in its own session; if the server goes away without killing it (a
    crash, SIGKILL), end the worker's processes, even in the middle of a user's endless loop:
    Linux signals the worker (SIGTERM) when its parent dies, and a watchdog thread notices a
    new parent anywhere. Orphans of user code are reparented to the worker (a subreaper), so
    they are found and ended with it (lsp_server/process_tree.py)."""
    parent = int(os.environ.get("FUSIONLENS_LSP_PID") or os.getppid())  # the server, even if already gone
    process_tree.become_subreaper()
    signal.signal(signal.SIGTERM, _on_sigterm)
    process_tree.signal_on_parent_death(signal.SIGTERM)

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                _end_all(70)
            time.sleep(0.5)

    threading.Thread(target=watch, name="fusionlens-parent-watch", daemon=True).start()


def _ready() -> Ready:
    """Import the compiler and torch (the first compile then starts at once) and set up the
    stacks: the Ready message."""
    error = None
    try:
        import fusionlens.driver.targets  # noqa: F401
        device, device_name = _device()
    except Exception as e:  # noqa: BLE001
        device, device_name, error = "cpu", "CPU", f"{type(e).__name__}: {e}"
    stacks = None
    try:
        stacks = _set_up_stacks()
    except Exception:  # noqa: BLE001 - compiles work without it
        pass
    try:
        _modules()  # sys.path as started, before any request changes the working folder
    except Exception:  # noqa: BLE001 - _run says so
        pass
    return Ready(os.getpid(), device, device_name, error, stacks)


def main() -> None:
    proto_in, proto_out = _take_over_stdio()
    _exit_with_parent()
    _send(proto_out, _ready())
    for line in proto_in:
        req = decode(line) if line.strip() else None
        if isinstance(req, CompileRequest):
            _run(req, proto_out, functools.partial(_compile, req))
        elif isinstance(req, ReproRequest):
            _run(req, proto_out, functools.partial(_repro, req))
        elif isinstance(req, PingRequest):
            _send(proto_out, PingAnswer(req.id, os.getpid(),
                                        sorted(m for m in ("torch", "fusionlens") if m in sys.modules)))
        elif isinstance(req, ExitRequest):
            break
    process_tree.kill_tree(_WORKER_PID, include_root=False)  # what user code left running


if __name__ == "__main__":
    main()
