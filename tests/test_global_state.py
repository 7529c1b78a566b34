"""No hidden global state (issue 27 part 5): what a trace records into and how a printer names
objects are context, not module globals; importing FusionLens installs nothing in torch; the
caches modules hold are bounded."""

import subprocess
import sys
import threading

import torch

from fusionlens.frontend import recorder
from fusionlens.ir import provenance, trace as ir
from fusionlens.ir.trace import BoundSymbol, NameGen, Trace, TraceContext, Value
from fusionlens.ops import prims


def _traced_in_thread(ctx: TraceContext, x: Value, inside: threading.Barrier, out: dict, key: str):
    with ir.tracing(ctx):
        inside.wait()  # both threads are inside their own tracing context now
        out[key] = (ir._current() is ctx, prims.neg(x))
        inside.wait()  # neither leaves before the other has recorded


def test_two_threads_tracing_at_once_each_record_into_their_own_context():
    x = Value("x", (4,), torch.float32, "cpu", "input")
    a, b = TraceContext(NameGen("a")), TraceContext(NameGen("b"))
    inside, out = threading.Barrier(2, timeout=30), {}
    threads = [threading.Thread(target=_traced_in_thread, args=(c, x, inside, out, k)) for c, k in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert out["a"][0] and out["b"][0], "a thread saw the other's tracing context as its own"
    assert [o.name for bs in a.bound_symbols for o in bs.outputs] == ["a0"]
    assert [o.name for bs in b.bound_symbols for o in bs.outputs] == ["b0"]
    assert ir._current() is None  # and nothing is left behind here


class _Blocking:
    """An argument whose printing (its repr) waits while another thread formats."""

    def __init__(self, printing: threading.Event, formatted: threading.Event):
        self.printing, self.formatted = printing, formatted

    def __repr__(self):
        self.printing.set()
        self.formatted.wait(30)
        return "blocking"


def test_a_printer_names_objects_by_its_own_programs_globals_only():
    """While one thread prints a program whose global `helper` is `obj`, another thread's
    formatting of `obj` is its repr: the printer's naming is not a module global."""
    obj = type("Opaque", (), {"__repr__": lambda self: "Opaque()"})()
    printing, formatted = threading.Event(), threading.Event()
    x = Value("x", (2,), torch.float32, "cpu", "input")
    y = Value("y", (2,), torch.float32, "cpu")
    op = ir.Symbol("fn", lambda *a: a[0], kind="opaque")
    t = Trace("f", [x], [BoundSymbol(op, (x, _Blocking(printing, formatted), obj), {}, [y])], y,
              extra_globals={"helper": obj})
    printed = {}
    thread = threading.Thread(target=lambda: printed.setdefault("source", t.python()))
    thread.start()
    assert printing.wait(30)
    elsewhere = ir.format_arg(obj)
    formatted.set()
    thread.join(30)
    assert elsewhere == "Opaque()"
    assert "fn(x, blocking, helper)" in printed["source"]


def test_the_wrappings_record_into_this_threads_recorder_only():
    """The recorder collectives, FSDP and tensor parallel record through (frontend.recorder, once
    a module-level tracer list in tensor_parallel) is this thread's: another's is not seen."""
    seen, ready, done = {}, threading.Event(), threading.Event()

    def other():
        with recorder.active("other thread's recorder"):  # type: ignore[arg-type]
            ready.set()
            done.wait(30)

    thread = threading.Thread(target=other)
    thread.start()
    assert ready.wait(30)
    seen["here"] = recorder.current()
    done.set()
    thread.join(30)
    assert seen["here"] is None


_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
          "_global_backward_pre_hooks", "_global_parameter_registration_hooks",
          "_global_buffer_registration_hooks", "_global_module_registration_hooks")


def test_importing_fusionlens_installs_no_hook_in_torch():
    """Every module of the compiler imported (the driver imports all of them): torch's global
    module hooks are as they were. jit installs its registration hooks on its first module."""
    script = (
        "import torch.nn.modules.module as m\n"
        f"hooks = {_HOOKS!r}\n"
        "count = lambda: [len(getattr(m, h)) for h in hooks]\n"
        "before = count()\n"
        "import fusionlens.driver.jit_cache, fusionlens.driver.targets, fusionlens.driver.launch, fusionlens.cli\n"
        "assert count() == before, (before, count())\n"
        "import torch, fusionlens\n"
        "model = torch.nn.Linear(3, 3)\n"
        "fusionlens.jit(model)(torch.randn(2, 3))\n"
        "print(count()[4] - before[4], count()[5] - before[5])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["1", "1"]  # installed by the first jit call of a module, once


def test_the_positions_cache_is_bounded():
    info = provenance._positions.cache_info()
    assert info.maxsize is not None and info.maxsize <= 1 << 16
    codes = [compile(f"x = {i}", f"<gen {i}>", "exec") for i in range(info.maxsize + 10)]
    for code in codes:
        provenance._positions(code)
    assert provenance._positions.cache_info().currsize == info.maxsize


def test_the_triton_module_table_keeps_the_latest_sources_only(monkeypatch):
    from fusionlens.executors.triton import module

    made = []
    monkeypatch.setattr(module, "MAX_MODULES", 2)
    monkeypatch.setattr(module, "_MODULES", type(module._MODULES)())
    monkeypatch.setattr(module, "_exec_source", lambda source, label: made.append(source) or {"run": source})
    for source in ("a", "b", "a", "c"):  # `a` used again: `b` is the least recently used
        assert module.load_source(source, "run", "r") == source
    assert [k[0] for k in module._MODULES] == ["a", "c"]
    assert made == ["a", "b", "c"]
    module.load_source("b", "run", "r")
    assert made == ["a", "b", "c", "b"] and len(module._MODULES) == 2
