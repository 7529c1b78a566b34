"""Planning a target of one of examples/plan/'s files as the CLI does (`fusionlens plan FILE
--target NAME`): the decorator's `plan` options, overridden by the test's. Shared by
tests/test_plan_own.py and tests/test_plan_ranks.py."""

from __future__ import annotations

import os
import sys

from fusionlens.plan import api
from fusionlens.report.discovery import find_targets
from fusionlens.report.plan import PlanReport

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(REPO, "examples", "plan")
if EXAMPLES not in sys.path:  # the targets' files import each other's helpers (plan_gpt)
    sys.path.insert(0, EXAMPLES)


def plan(path: str, name: str, **options) -> PlanReport:
    """Target `name` of the file `path` planned with its decorator's options and `options`."""
    with open(path, encoding="utf-8") as f:
        info = next(t for t in find_targets(f.read(), path) if t.name == name)
    return api.plan_target(path, info, **{**info.plan, **options})
