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
from tests.fuzz.modes import MODES, Mode, device, environment
from tests.fuzz.program import Program
from tests.fuzz.script import script
from tests.fuzz.shrink import shrink


def run(program: Program, mode: Mode) -> judge.Verdict:
    """`program` compiled once in `mode` and called three times, judged (tests/fuzz/judge.py)."""
    where = device()
    with environment(mode):
        try:
            fn = program.function()
        except Exception as e:  # noqa: BLE001 - a shrinker's candidate that is not Python
            return judge.Verdict(judge.SKIP, detail=f"not a program: {judge.describe(e)}")
        return judge.check(fn, lambda call: program.make_inputs(call, where),
                           list(mode.executors) if mode.executors else None, mode.grad)


@dataclass
class Found:
    mode: str
    seed: int
    verdict: judge.Verdict
    program: Program
    shrunk: Program | None = None
    path: Path | None = None


@dataclass
class Campaign:
    ran: int = 0
    skipped: int = 0
    eager_only: int = 0
    failed: list[Found] = field(default_factory=list)
    seconds: float = 0.0

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
