"""Shrinking a failing program: drop lines, outputs and inputs, make shapes smaller, layouts
contiguous, dtypes float32, while it keeps failing the same way (the same Verdict.key)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

from tests.fuzz import judge
from tests.fuzz.program import CONTIGUOUS, InputSpec, Line, Program


def shrink(program: Program, key: str, run: Callable[[Program], judge.Verdict], seconds: float = 60.0) -> Program:
    """The smallest program found that still fails with `key`: greedy, first improvement
    taken, passes repeated until none helps or `seconds` are spent."""
    deadline = time.perf_counter() + seconds
    best = program
    improved = True
    while improved and time.perf_counter() < deadline:
        improved = False
        for candidate in _candidates(best):
            if time.perf_counter() >= deadline:
                break
            verdict = run(candidate)
            if verdict.status == judge.FAIL and verdict.key() == key:
                best, improved = candidate, True
                break
    return best


def _candidates(p: Program) -> Iterator[Program]:
    yield from _fewer_lines(p)
    if len(p.outputs) > 1:
        for o in p.outputs:
            yield p.replace(outputs=tuple(x for x in p.outputs if x != o))
    yield from _fewer_inputs(p)
    yield from _smaller_shapes(p)
    for k, s in enumerate(p.inputs):
        simpler = [InputSpec(s.name, s.shape, s.dtype, CONTIGUOUS, s.requires_grad)] if s.layout != CONTIGUOUS else []
        if s.dtype in ("float16", "bfloat16"):
            simpler.append(InputSpec(s.name, s.shape, "float32", s.layout, s.requires_grad))
        if s.requires_grad:
            simpler.append(InputSpec(s.name, s.shape, s.dtype, s.layout, False))
        for spec in simpler:
            yield p.replace(inputs=p.inputs[:k] + (spec,) + p.inputs[k + 1:])


def _fewer_lines(p: Program) -> Iterator[Program]:
    """Each line dropped (last first), alone or with its value replaced by one it read."""
    for i in reversed(range(len(p.lines))):
        line = p.lines[i]
        rest = p.lines[:i] + p.lines[i + 1:]
        dropped = _with_outputs(p, rest, {line.target} if line.target else set())
        if dropped is not None:
            yield dropped
        if line.target is None:
            continue
        for read in sorted(line.reads()):
            renamed = tuple(_rename(ln, line.target, read) for ln in rest[i:])
            outs = tuple(dict.fromkeys(read if o == line.target else o for o in p.outputs))
            yield p.replace(lines=rest[:i] + renamed, outputs=outs)


def _with_outputs(p: Program, lines: tuple[Line, ...], gone: set[str]) -> Program | None:
    outs = tuple(o for o in p.outputs if o not in gone)
    if not outs:
        made = [ln.target for ln in lines if ln.target]
        if not made:
            return None
        outs = (made[-1],)
    return p.replace(lines=lines, outputs=outs)


def _rename(line: Line, old: str, new: str) -> Line:
    return Line(re.sub(rf"\b{old}\b", new, line.code), line.target, line.family)


def _fewer_inputs(p: Program) -> Iterator[Program]:
    used = set().union(*(ln.reads() for ln in p.lines)) | set(p.outputs) if p.lines else set(p.outputs)
    for k, s in enumerate(p.inputs):
        if s.name not in used and len(p.inputs) > 1:
            yield p.replace(inputs=p.inputs[:k] + p.inputs[k + 1:])


def _smaller_shapes(p: Program) -> Iterator[Program]:
    """Every occurrence of a size made smaller at once (inputs that broadcast together stay
    so), then one dim of one input."""
    sizes = sorted({d for s in p.inputs for d in s.shape if d > 1}, reverse=True)
    for size in sizes:
        for smaller in dict.fromkeys([1, size // 2, size - 1]):
            resize = lambda d, a=size, b=smaller: b if d == a else d
            yield p.replace(inputs=tuple(_resized(s, resize) for s in p.inputs))
    for k, s in enumerate(p.inputs):
        for j, d in enumerate(s.shape):
            for smaller in dict.fromkeys([1, d // 2] if d > 1 else []):
                shape = s.shape[:j] + (smaller,) + s.shape[j + 1:]
                spec = InputSpec(s.name, shape, s.dtype, s.layout, s.requires_grad)
                yield p.replace(inputs=p.inputs[:k] + (spec,) + p.inputs[k + 1:])


def _resized(s: InputSpec, size: Callable[[int], int]) -> InputSpec:
    return InputSpec(s.name, tuple(size(d) for d in s.shape), s.dtype, s.layout, s.requires_grad)
