"""The torch releases FusionLens supports (issue 30 part 5): one module knows what differs
between them (fusionlens/ir/torch_compat.py), and the dependency range covers them."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from fusionlens.ir import torch_compat

REPO = Path(__file__).resolve().parents[1]
PRIVATE = re.compile(r"torch\.fx\.experimental\.symbolic_shapes|torch\._subclasses|torch\._dynamo\.source")


def test_versions_parse_as_torch_spells_them():
    assert torch_compat.version("2.14.1+cu130") == (2, 14, 1)
    assert torch_compat.version("2.15.0.dev20260101") == (2, 15, 0)
    assert torch_compat.version("2.13") == (2, 13, 0)
    assert torch_compat.TORCH[:2] == tuple(int(n) for n in torch.__version__.split(".")[:2])
    assert torch_compat.supported((2, 11, 0)) and torch_compat.supported((2, 14, 1))
    assert not torch_compat.supported((2, 10, 0)) and not torch_compat.supported((2, 15, 0))
    assert torch_compat.supported()  # the torch this suite runs on


def test_the_dependency_range_is_the_supported_one():
    text = (REPO / "pyproject.toml").read_text()
    low, high = re.search(r'"torch>=(\d+\.\d+),<(\d+\.\d+)"', text).groups()
    (lo_major, lo_minor), (hi_major, hi_minor) = torch_compat.SUPPORTED
    assert low == f"{lo_major}.{lo_minor}" and high == f"{hi_major}.{hi_minor + 1}"


def test_torch_private_api_is_imported_in_one_module():
    found = [str(path.relative_to(REPO)) for path in (REPO / "fusionlens").rglob("*.py")
             if path.name != "torch_compat.py" and PRIVATE.search(path.read_text())]
    assert found == [], f"import torch's private API through fusionlens/ir/torch_compat.py: {found}"


def test_the_private_classes_resolve_on_this_torch():
    env = torch_compat.ShapeEnv()
    mode = torch_compat.FakeTensorMode(shape_env=env)
    fake = mode.from_tensor(torch.randn(3, 4))
    assert torch_compat.is_fake(fake) and not torch_compat.is_fake(torch.randn(2))
    assert torch_compat.statically_known_true(True) and torch_compat.DimDynamic.DYNAMIC is not None
    assert torch_compat.LocalSource("t0").name == "L['t0']"
