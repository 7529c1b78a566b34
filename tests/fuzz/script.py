"""A failing program as a standalone script: torch and FusionLens only.

The script holds the program, the inputs of its three calls and the fuzzer's judge
(tests/fuzz/judge.py, verbatim), so it fails exactly as the fuzzer saw it fail; it exits 1
while the defect is there and 0 once it is fixed.
"""

from __future__ import annotations

import inspect

from tests.fuzz import judge
from tests.fuzz.judge import CALLS, Verdict
from tests.fuzz.modes import SIZE_SHIFTS, Mode
from tests.fuzz.program import PRELUDE, Program

FUTURE = "from __future__ import annotations\n"


def script(program: Program, mode: Mode, verdict: Verdict) -> str:
    text = inspect.getsource(judge)
    judged = text[text.index(FUTURE) + len(FUTURE):].strip()
    executors = list(mode.executors) if mode.executors else None
    how = f"executors={executors}" + (", gradients judged" if mode.grad else "")
    interpreter = ('if not os.path.exists("/dev/nvidia0"):  # Triton under its interpreter where no GPU is\n'
                   '    os.environ.setdefault("TRITON_INTERPRET", "1")\n') if mode.interpreter else ""
    return f'''"""FusionLens differential fuzzer: {verdict.summary()}

Program "{program.origin}" (shrunk), mode {mode.name}: {how}.
`python this_file.py` prints the verdict and exits 1 while the defect is there.
Written by tests/fuzz (docs/fuzzing.md); needs torch and FusionLens only.
"""

{FUTURE}
import os
import sys

{interpreter}
import torch
import torch.nn.functional as F

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
{PRELUDE}

{program.source()}

def inputs(call):
    """Call `call`'s inputs: new values each call, other strides on the second."""
    g = torch.Generator().manual_seed({program.value_seed} + call{" + (call > 0)" if mode.dynamic else ""})
    device = DEVICE
{_calls(program, mode)}


# --- the fuzzer's judge, as tests/fuzz/judge.py has it ---------------------------------------

{judged}


if __name__ == "__main__":
    verdict = check(program, inputs, {executors!r}, {mode.grad}{_dynamic(mode)})
    print(verdict.summary())
    sys.exit(1 if verdict.status == FAIL else 0)
'''


def _dynamic(mode: Mode) -> str:
    return f", dynamic=True, calls={len(SIZE_SHIFTS)}" if mode.dynamic else ""


def _calls(program: Program, mode: Mode) -> str:
    """Each call's inputs; the dynamic mode's at its sizes (as runner.run makes them)."""
    if mode.dynamic:
        made = [", ".join(s.source(call + (call > 0)) for s in program.resized(shift).inputs)
                for call, shift in enumerate(SIZE_SHIFTS)]
    else:
        made = [", ".join(s.source(call) for s in program.inputs) for call in range(CALLS)]
    lines = []
    for call in range(len(made) - 1):
        if made[call] != made[-1]:
            lines += [f"    if call == {call}:", f"        return [{made[call]}]"]
    return "\n".join(lines + [f"    return [{made[-1]}]"])
