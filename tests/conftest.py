"""Shared pytest setup for the compiler tests: fresh random inputs each run, seed printed.

The verifier (fusionlens/middle/verify.py) runs between the stages of every compile.
Every test runs under a new random torch seed (FUSIONLENS_SEED=<n> reruns one); the seed
is printed, so pytest shows it with the output of a failing test. torch is imported only
when a test has already imported it (the language-server tests do not need it).
"""

import importlib.util
import os
import random
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _triton_for_the_interpreter() -> None:
    """Where no GPU is, import triton with TRITON_INTERPRET=1 before any test module does.
    Its standard library (tl.sum, tl.max, ...) is decorated for the interpreter at import
    time, and importing torchvision (tests/zoo_imports.py) imports triton through
    torch._dynamo: without this, test_triton.py and test_repro.py, collected after the zoo,
    found triton imported the wrong way and skipped themselves whole. The variable is put
    back: the tests that run the interpreter set it themselves (the default executors must
    not pick Triton up everywhere)."""
    if "triton" in sys.modules or os.path.exists("/dev/nvidia0") or importlib.util.find_spec("triton") is None:
        return
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken triton install: the Triton tests say so themselves
        pass
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old


_triton_for_the_interpreter()
# fusionlens/middle/verify.py runs after every stage of every compile the suite makes (the entry points
# read it into CompileOptions.verify; subprocesses, the CLI and the editor's worker, inherit it).
os.environ.setdefault("FUSIONLENS_VERIFY", "1")


@pytest.fixture(autouse=True)
def _random_seed():
    seed = int(os.environ.get("FUSIONLENS_SEED") or random.SystemRandom().randrange(2**31))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
        print(f"torch seed: {seed} (rerun with FUSIONLENS_SEED={seed})")
    yield seed


@pytest.fixture
def triton(monkeypatch):
    """executors=["triton"], on Triton's interpreter where no GPU is (TRITON_INTERPRET=1 while
    the test runs); skipped where Triton cannot run here."""
    import torch

    if not torch.cuda.is_available():
        try:
            import numpy  # noqa: F401  (the interpreter's)
            import triton  # noqa: F401  (imported above for the interpreter)
        except ImportError as e:
            pytest.skip(f"no triton interpreter: {e}")
        from fusionlens.executors.triton import support

        if support._interpreter_problem():
            pytest.skip(support._interpreter_problem())
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    return ["triton"]


@pytest.fixture
def fuser():
    """tests/fusion_executor.py's TorchFusion, registered as the executor "testfuser" while the
    test runs: the partitioner and lowering tested without Triton."""
    from fusionlens import executors
    from fusion_executor import TorchFusion

    ex = TorchFusion()
    executors.register(ex)
    yield ex
    executors.unregister(ex.name)
