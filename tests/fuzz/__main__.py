"""`python -m tests.fuzz`: a fuzz campaign (docs/fuzzing.md says when and how to run one)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.fuzz.modes import CI_PROGRAMS, MODES, prepare_interpreter


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--programs", type=int, default=1000, help="programs per mode (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="the first program's seed; programs are seed, seed+1, ...")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--out", type=Path, help="where shrunk failing programs are written as scripts, "
                        "with summary.md (default: nothing written)")
    parser.add_argument("--shrink-per-class", type=int, default=3,
                        help="failures shrunk and written per mode and category (default 3)")
    parser.add_argument("--shrink-seconds", type=float, default=60.0, help="time to shrink one failure (default 60)")
    parser.add_argument("--ci", action="store_true", help="the CI tier's programs (modes.CI_PROGRAMS), whatever "
                        "--programs, --seed and --modes say: its failures are the rows of tests/test_fuzz.py's KNOWN")
    parser.add_argument("-q", "--quiet", action="store_true", help="no line per failure while running")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown modes {unknown}; known: {list(MODES)}")
    prepare_interpreter()  # before anything imports triton
    from tests.fuzz.runner import campaign
    from tests.fuzz.summary import summary

    say = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    plan = {m: range(0, n) for m, n in CI_PROGRAMS.items()} if args.ci else \
        {m: range(args.seed, args.seed + args.programs) for m in modes}
    result = campaign(plan, args.out, args.shrink_per_class, args.shrink_seconds, say)
    text = summary(result, plan)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "summary.md").write_text(text)
    return 1 if result.failed else 0


if __name__ == "__main__":
    sys.exit(main())
