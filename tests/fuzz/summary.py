"""A campaign's summary in Markdown: counts, each failure class with its programs (the shrunk
ones in full), and the failures as rows of tests/test_fuzz.py's KNOWN table."""

from __future__ import annotations

from tests.fuzz.program import Program
from tests.fuzz.runner import Campaign


def summary(result: Campaign, plan: dict[str, range]) -> str:
    seeds = ", ".join(f"{mode} {r.start}..{r.stop - 1}" for mode, r in plan.items())
    lines = [f"# Fuzz campaign: {seeds}", "",
             f"{result.ran} programs in {result.seconds:.0f} s: {len(result.failed)} failed, "
             f"{result.skipped} skipped (eager raises), {result.eager_only} ran eagerly by design.", ""]
    if result.figures.programs:
        lines += [result.figures.text() + ".", ""]
    for (mode, key), found in sorted(result.classes().items()):
        lines += [f"## {mode}: {key} ({len(found)} programs)", ""]
        for f in found:
            where = f" -> `{f.path.name}`" if f.path else ""
            lines.append(f"- seed {f.seed}{where}: {f.verdict.summary()}")
            if f.shrunk is not None:
                lines += _program(f.shrunk)
        lines.append("")
    if result.failed:
        lines += ["## As rows of tests/test_fuzz.py's KNOWN (name the defect)", "", "```python"]
        lines += [f'    ("{f.mode}", {f.seed}): (("{f.verdict.key()}",), "?"),' for f in result.failed]
        lines += ["```", ""]
    return "\n".join(lines)


def _program(p: Program) -> list[str]:
    inputs = ", ".join(f"{s.name} {s.dtype}{list(s.shape)} {s.layout}" + (" requires_grad" if s.requires_grad else "")
                       for s in p.inputs)
    return ["", "  ```python", *(f"  {line}" for line in p.source().rstrip().splitlines()), "  ```",
            f"  inputs: {inputs}", ""]
