"""Compile time against program size: milliseconds per op, per stage, from 100 to 10,000 ops.

    python benchmarks/compile_time.py [--quick] [--layers 2,8,32,96] [--no-densenet] [--no-training]
                                      [--repeats N] [--wall] [--verify] [--profile MODEL:MODE:FILE]

Compiles GPT-2 (transformers, built from a config: n_embd=64, n_head=2, nothing downloaded)
with 2, 8, 32 and 96 layers and torchvision's DenseNet-121 (32x32 images), each in inference
(torch.no_grad) and in training (grad on, every parameter requiring grad: a forward and a
backward program), in eval mode, on the CPU. Sizes are tiny, so the run measures the
compiler, not the arithmetic. Each compile is what `compiler.compile` does (api.compile_checked:
the pipeline with previews, the check against eager, the report), step by step so that each
step is timed: the pipeline's stages from `Compiled.stage_ms` (fusionlens/driver/pipeline.py: trace,
decompose, optimise, autograd, fusion, lowering with the exec of the execution trace, and
previews: fusion and lowering for the executors that cannot run here, source only), then
checking.check_program and check_gradients (check) and reporting.assemble (report).

The table: model, mode, ops (the acquired trace's torch ops), the whole compile in ms, then
ms per op for each step, in all, in full (generation 2) garbage collections, and in all but
those. Flat columns down a model family mean compile time is linear in the program. Full
collections walk every live object; CPython runs one each time the objects that survived
grow by a quarter, so a compile too small to add a quarter to torch's own objects runs none
and a large one pays a steady share: that column rises from 0 and then stays flat.

Times are this process's CPU time (a shared machine's other work does not count; one torch
thread, so on a quiet machine it is the wall-clock time), --wall for wall-clock time;
--repeats N shows the fastest of N compiles. --verify runs the verifier after every stage
(as the test suite does) and adds its column. --profile gpt2-32:training:out.prof writes
cProfile statistics of that compile (`python -m pstats out.prof`). --quick: GPT-2 with 2
and 8 layers, in a few seconds. Prints tables; never asserts.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import gc
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))  # zoo_imports: torchvision with the CPU torch

from tables import table  # noqa: E402

from fusionlens.driver import checking, pipeline, reporting  # noqa: E402
from fusionlens.frontend import tracer as frontend  # noqa: E402
from fusionlens.options import CompileOptions  # noqa: E402

STEPS = pipeline.STAGE_TIMES + ("check", "report")
MODES = ("inference", "training")


@dataclass
class Model:
    name: str
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[], tuple]


def gpt2(layers: int) -> Model:
    from zoo_imports import transformers

    def build():
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_layer=layers, n_embd=64, n_head=2, n_inner=128, vocab_size=128, n_positions=64,
            bos_token_id=1, eos_token_id=2))
    return Model(f"gpt2-{layers}", build, lambda: (torch.randint(3, 128, (2, 8)),))


def densenet121() -> Model:
    from zoo_imports import torchvision

    return Model("densenet121", lambda: torchvision.models.densenet121(weights=None),
                 lambda: (torch.randn(1, 3, 32, 32),))


class _FullGcClock:
    """Milliseconds spent in full garbage collections while it is installed."""

    def __init__(self):
        self.ms, self._started = 0.0, 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = pipeline.stage_clock()
        elif info["generation"] == 2:
            self.ms += (pipeline.stage_clock() - self._started) * 1e3

    def __enter__(self):
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self)


def compile_once(model: Model, mode: str, options: CompileOptions,
                 profile: str | None = None) -> dict[str, float]:
    """One compile of `model` as compiler.compile does it; step -> ms, with ops, all, gc."""
    torch.manual_seed(0)
    module, args = model.build().eval(), model.inputs()
    module.requires_grad_(mode == "training")
    gc.collect()
    profiler = cProfile.Profile() if profile else None
    with torch.set_grad_enabled(mode == "training"), _FullGcClock() as gc_clock:
        if profiler:
            profiler.enable()
        clock = pipeline.stage_clock
        start = clock()
        c = pipeline.compile_program(module, args, {}, options, model.name.replace("-", "_"))
        t_check = clock()
        inputs = frontend.user_tensors(module, args, {}) + c.constants
        target = reporting.target_of(module, model.name)
        checked = checking.check_program(c, inputs, target, (module, args, {}))
        if not any(d.severity == "error" for d in checked):
            checked += checking.check_gradients(c, module, args, {}, inputs, target)
        t_report = clock()
        report = reporting.assemble(c, target, checked)
        end = clock()
        if profiler is not None and profile:
            profiler.disable()
            profiler.dump_stats(profile)
    errors = [d.message for d in report.diagnostics if d.severity == "error"]
    if errors or c.eager_only:
        print(f"  note: {model.name} {mode}: {(errors[0] if errors else str(c.eager_only))[:160]}")
    return {**c.stage_ms, "check": (t_report - t_check) * 1e3, "report": (end - t_report) * 1e3,
            "all": (end - start) * 1e3, "gc": gc_clock.ms, "ops": len(c.acquired.bound_symbols)}


def _row(name: str, mode: str, ms: dict[str, float], steps: tuple[str, ...]) -> list[str]:
    ops = int(ms["ops"])
    return ([name, mode, str(ops), f"{ms['all']:.0f}"] + [f"{ms[s] / ops:.3f}" for s in steps]
            + [f"{ms['all'] / ops:.3f}", f"{ms['gc'] / ops:.3f}", f"{(ms['all'] - ms['gc']) / ops:.3f}"])


def best_of(model: Model, mode: str, options: CompileOptions, repeats: int,
            profile: str | None) -> dict[str, float]:
    """The fastest of `repeats` compiles (the one profiled, if asked, is the first)."""
    runs = [compile_once(model, mode, options, profile if i == 0 else None) for i in range(repeats)]
    return min(runs, key=lambda r: r["all"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="GPT-2 with 2 and 8 layers only")
    p.add_argument("--layers", default="2,8,32,96", help="GPT-2 depths, comma-separated")
    p.add_argument("--no-densenet", action="store_true")
    p.add_argument("--no-training", action="store_true")
    p.add_argument("--repeats", type=int, default=1, help="compiles of each; the fastest is shown")
    p.add_argument("--wall", action="store_true", help="wall-clock time (default: this process's CPU time)")
    p.add_argument("--verify", action="store_true", help="run the verifier after every stage (its own column)")
    p.add_argument("--profile", default="", metavar="MODEL:MODE:FILE",
                   help="cProfile that one compile into FILE (e.g. gpt2-96:inference:/tmp/c.prof)")
    args = p.parse_args()
    torch.set_num_threads(1)
    if not args.wall:  # CPU time: other work on a shared machine does not count (one thread: the same on a quiet one)
        pipeline.stage_clock = time.process_time
    layers = [2, 8] if args.quick else [int(n) for n in args.layers.split(",") if n]
    models = [gpt2(n) for n in layers] + ([] if args.quick or args.no_densenet else [densenet121()])
    modes = MODES[:1] if args.no_training else MODES
    options = CompileOptions(verify=args.verify).replace(previews=True)  # as compiler.compile (no env)
    steps = STEPS + (("verify",) if args.verify else ())
    profile_model, profile_mode, profile_file = (args.profile.split(":", 2) + ["", "", ""])[:3]

    print(f"{datetime.date.today()} · {platform.machine()} CPU, {os.cpu_count()} cores, torch threads 1 · "
          f"python {platform.python_version()}, torch {torch.__version__} · "
          f"{'wall-clock' if args.wall else 'CPU'} time, best of {args.repeats}")
    compile_once(gpt2(1), modes[-1], options)  # imports and first-call caches, not counted
    rows = []
    for model in models:
        for mode in modes:
            profile = profile_file if (model.name, mode) == (profile_model, profile_mode) else None
            rows.append(_row(model.name, mode, best_of(model, mode, options, args.repeats, profile), steps))
    print("\nCompile time: the whole compile (ms), then ms per op for each step, in all, in full gcs, "
          "and in all but those")
    table(rows, ["model", "mode", "ops", "ms"] + list(steps) + ["all", "gc", "- gc"])


if __name__ == "__main__":
    main()
