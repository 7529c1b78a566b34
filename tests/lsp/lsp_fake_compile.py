"""A stand-in for fusionlens.driver.targets.compile_target that never runs user code.

Used through FUSIONLENS_WORKER_COMPILE=lsp_fake_compile:compile_target (with tests/lsp on
PYTHONPATH) by the latency benchmark and by tests of the worker machinery that must not
depend on the real compiler: it parses the file and turns every call on a line inside a
function body into an op, grouping consecutive lines into regions of up to three lines.
"""

from __future__ import annotations

import ast
import os

from fusionlens.report.schema import (Boundary, CompileReport, Diagnostic, OpRecord, ProgramReport, ProgramTimings, Region,
                                      RegionTiming, SourceLine, Target, Timing)


def compile_target(path, target_name, executors=None, options=None, benchmark=True, repeats=20, device="auto",
                   source=None):
    path = os.path.abspath(path)
    if source is None:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    tree = ast.parse(source, path)
    target = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == target_name), None)
    if target is None:
        return CompileReport(Target(target_name, path, None, None), status="error",
                             error=Diagnostic("error", f"no target {target_name}", path, 1))
    calls = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn is not target:
            for n in ast.walk(fn):
                if isinstance(n, ast.Call):
                    calls.setdefault(n.lineno, []).append(ast.unparse(n.func))
    lines = sorted(calls)
    src = source.splitlines()
    groups, cur = [], []
    for ln in lines:
        if cur and (ln != cur[-1] + 1 or len(cur) == 3):
            groups.append(cur)
            cur = []
        cur.append(ln)
    if cur:
        groups.append(cur)
    regions, ops = [], []
    for i, g in enumerate(groups):
        rid = f"R{i}"
        names = []
        for ln in g:
            name = ", ".join(calls[ln])
            names.append(name)
            ops.append(OpRecord(len(ops), name, rid, path, ln, ln, 0, len(src[ln - 1]), [],
                                f"t{len(ops)} = {name}(...)  # {os.path.basename(path)}:{ln}", ["prims.add"]))
        regions.append(Region(rid, "torch", names, [SourceLine(path, ln) for ln in g],
                              "def region_%d(x):\n    return x\n" % i, [], [],
                              RegionTiming(0.01 * (i + 1), 0.02 * (i + 1), 0.001),
                              Boundary("demo", "fake compiler groups three lines", path, g[-1])))
    t = Timing(0.5, 0.4, 0.6, 0.05, repeats, "perf_counter", "cpu")
    e = Timing(0.9, 0.8, 1.0, 0.05, repeats, "perf_counter", "cpu")
    forward = ProgramReport("forward", traces={"execution": "\n".join(o.trace for o in ops)}, regions=regions,
                            timings=ProgramTimings("cpu", t, e, None, 1.8, None))
    return CompileReport(Target(target_name, path, target.lineno, target.end_lineno), executors=["torch"],
                         programs=[forward], ops=ops)


def noisy_compile_target(*args, **kwargs):
    """compile_target, but first write to stdout the ways user code can."""
    import sys

    print("NOISE from print")
    sys.stdout.flush()
    os.write(1, b"NOISE from fd 1\n")
    return compile_target(*args, **kwargs)


def hanging_compile_target(*args, **kwargs):
    """Never returns (a stand-in for user code that hangs): for timeout and cancel tests."""
    import time

    while True:
        time.sleep(0.05)


def flooding_compile_target(path, target_name, *args, **kwargs):
    """Output past every bound the server sets: `crash_example` writes lines of 1 MiB and
    the worker dies; any other target first writes $FL_FLOOD_MIB MiB without a newline."""
    if target_name == "crash_example":
        for i in range(12):
            os.write(2, (f"line {i} " + "y" * (1 << 20) + "\n").encode())
        os._exit(3)
    chunk = b"x" * (1 << 20)
    for _ in range(int(os.environ.get("FL_FLOOD_MIB", "32"))):
        os.write(2, chunk)
    os.write(2, b"\nthe end of the flood\n")
    return compile_target(path, target_name, *args, **kwargs)


_SLEEPER = ("import os, sys, time\n"
            "open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close()\n"
            "time.sleep(600)\n")
_DAEMON = ("import subprocess, sys\n"
           "subprocess.Popen([sys.executable, '-c', sys.argv[2], sys.argv[1]], start_new_session=True)\n")


def forking_compile_target(*args, **kwargs):
    """Starts processes that a kill of the worker's process group alone would leave running,
    then hangs: a child in the worker's group, one in a session of its own (os.setsid), and
    a daemon (a child that starts a grandchild in a new session, then exits). Each sleeper
    writes its pid to a file in $FL_PIDS."""
    import subprocess
    import sys
    import time

    pids = os.environ["FL_PIDS"]
    subprocess.Popen([sys.executable, "-c", _SLEEPER, pids])
    subprocess.Popen([sys.executable, "-c", _SLEEPER, pids], start_new_session=True)
    subprocess.Popen([sys.executable, "-c", _DAEMON, pids, _SLEEPER]).wait()
    while True:
        time.sleep(0.05)
