"""Shared pytest setup for the compiler tests: fresh random inputs each run, seed printed.

Every test runs under a new random torch seed (FUSIONLENS_SEED=<n> reruns one); the seed
is printed, so pytest shows it with the output of a failing test. torch is imported only
when a test has already imported it (the language-server tests do not need it).
"""

import os
import random
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture(autouse=True)
def _random_seed():
    seed = int(os.environ.get("FUSIONLENS_SEED") or random.SystemRandom().randrange(2**31))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
        print(f"torch seed: {seed} (rerun with FUSIONLENS_SEED={seed})")
    yield seed
