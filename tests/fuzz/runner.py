"""Running fuzz programs: one program in one mode (`run`), and a campaign of many (`campaign`),
which shrinks what fails and writes each as a standalone script."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz import judge
from tests.fuzz.generate import generate
from tests.fuzz.modes import MODES, SIZE_SHIFTS, Mode, device, environment
from tests.fuzz.program import Program
from tests.fuzz.script import script
from tests.fuzz.shrink import shrink


def run(program: Program, mode: Mode) -> judge.Verdict:
    """`program` compiled once in `mode` and called three times (the dynamic mode: once at each
    of SIZE_SHIFTS' sizes), judged (tests/fuzz/judge.py)."""
    where = device()
    with environment(mode):
        try:
            fn = program.function()
        except Exception as e:  # noqa: BLE001 - a shrinker's candidate that is not Python
            return judge.Verdict(judge.SKIP, detail=f"not a program: {judge.describe(e)}")
        executors = list(mode.executors) if mode.executors else None
        if mode.dynamic:
            # new values each call, in the first call's layouts (make_inputs(1) has other strides)
            sized = lambda call: program.resized(SIZE_SHIFTS[call]).make_inputs(call + (call > 0), where)  # noqa: E731
            return judge.check(fn, sized, executors, mode.grad, dynamic=True, calls=len(SIZE_SHIFTS))
        return judge.check(fn, lambda call: program.make_inputs(call, where), executors, mode.grad)


def static_fallbacks(program: Program, mode: Mode) -> int:
    """The fallback ops of `program` compiled for its first call's static shapes: what the
    dynamic mode's first program is compared with."""
    import compiler
    with environment(mode):
        jfn = compiler.jit(program.function(), executors=list(mode.executors) if mode.executors else None,
                           dynamic=False)
        jfn(*program.make_inputs(0, device()))
        return len(compiler.last_report(jfn).fallbacks)


@dataclass
class Found:
    mode: str
    seed: int
    verdict: judge.Verdict
    program: Program
    shrunk: Program | None = None
    path: Path | None = None


@dataclass
class Figures:
    """The dynamic mode's: ops and fallback ops of its programs compiled statically and with
    dynamic=True, programs compiled more than once, and those that did without saying why."""
    programs: int = 0
    ops: int = 0
    static: int = 0
    symbolic: int = 0
    recompiled: int = 0
    silent: int = 0

    def add(self, verdict: judge.Verdict, static: int) -> None:
        self.programs += 1
        self.ops += verdict.ops
        self.static += static
        self.symbolic += verdict.fallbacks
        self.recompiled += verdict.compiles > 1
        self.silent += verdict.compiles > 1 and verdict.explained < verdict.compiles - 1

    def text(self) -> str:
        share = lambda n: f"{100 * n / max(self.ops, 1):.1f}%"  # noqa: E731
        return (f"dynamic mode: {self.programs} programs, {self.ops} ops; fallback share {share(self.static)} "
                f"static, {share(self.symbolic)} symbolic; {self.recompiled} compiled more than once "
                f"({self.silent} without saying why)")


@dataclass
class Campaign:
    ran: int = 0
    skipped: int = 0
    eager_only: int = 0
    failed: list[Found] = field(default_factory=list)
    seconds: float = 0.0
    figures: Figures = field(default_factory=lambda: Figures())

    def classes(self) -> dict[tuple[str, str], list[Found]]:
        out: dict[tuple[str, str], list[Found]] = {}
        for f in self.failed:
            out.setdefault((f.mode, f.verdict.key()), []).append(f)
        return out


def campaign(plan: dict[str, range], out: Path | None, shrink_per_class: int = 3,
             shrink_seconds: float = 60.0, progress: Callable[[str], None] | None = None) -> Campaign:
    """The seeds `plan` gives each mode. The first `shrink_per_class` failures of each (mode, category)
    are shrunk (for at most `shrink_seconds` each) and written under `out` as scripts."""
    result = Campaign()
    start = time.perf_counter()
    for name, seeds in plan.items():
        mode = MODES[name]
        for seed in seeds:
            program = generate(seed, mode)
            verdict = run(program, mode)
            result.ran += 1
            result.skipped += verdict.status == judge.SKIP
            result.eager_only += verdict.eager_only
            if mode.dynamic and verdict.status == judge.PASS:
                result.figures.add(verdict, static_fallbacks(program, mode))
            if verdict.status != judge.FAIL:
                continue
            found = Found(name, seed, verdict, program)
            result.failed.append(found)
            if out is not None and len(result.classes()[(name, verdict.key())]) <= shrink_per_class:
                found.shrunk = shrink(program, verdict.key(), functools.partial(run, mode=mode), shrink_seconds)
                found.path = write(found, out)
            if progress:
                progress(f"{name} {seed}: {verdict.summary()}")
    result.seconds = time.perf_counter() - start
    return result


def write(found: Found, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    program = found.shrunk or found.program
    mode = MODES[found.mode]
    verdict = run(program, mode)  # the shrunk program's own failure, for the script's header
    path = out / f"{found.mode}-{found.verdict.key().replace(':', '-')}-{found.seed}.py"
    path.write_text(script(program, mode, verdict))
    return path
