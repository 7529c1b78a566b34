"""Imports for the model zoo (tests/test_model_zoo.py): torchvision, timm and transformers,
made importable against the CPU torch these tests run on. Test-only; the product never
imports any of them.

Why torchvision needs help here. torchvision's PyPI wheel (0.28.0 is the release built for
torch 2.13.0) ships its C++ operators (nms, roi_align, deform_conv2d, ...) in
`torchvision/_C.so`, linked against the CUDA build of torch (`libtorch_cuda.so`,
`libc10_cuda.so`). With the CPU torch those libraries do not exist, so
`torchvision.extension` fails to load `_C.so`. torchvision expects that: it catches the
error, `torchvision.extension._has_ops()` returns False, and every registration of those
operators' meta, autograd and autocast kernels is skipped, except two.
`torchvision/_meta_registrations.py` registers the fake kernels of `torchvision::nms` and
`torchvision::qnms` with `torch.library.register_fake` unconditionally, and that raises
`RuntimeError: operator torchvision::nms does not exist`, so `import torchvision` fails,
and with it `import timm` and any `transformers` model (transformers imports
`torchvision.transforms` when torchvision is installed).

What this module does about it, and only when that exact failure happens. It tries
`import torchvision` as it is. If that raises the RuntimeError above, it removes the half
imported `torchvision` modules from `sys.modules`, defines the two operators' schemas (as
torchvision's C++ source declares them) in the `torchvision`
namespace, with no kernel at all, and imports torchvision again: the two fake-kernel
registrations then find their operators. Nothing else changes. The C++ operators stay
unavailable, and say so: `torchvision.ops.nms` (or roi_align, ...) raises torchvision's own
"Couldn't load custom C++ ops" error, and calling `torch.ops.torchvision.nms` directly
raises torch's "could not run 'torchvision::nms' with arguments from the 'CPU' backend".
So models that need those operators (detection, segmentation heads) are out of the zoo's
scope; classification models are pure Python over torch ops and run as they are.

Where `_C.so` loads (a CUDA torch with a matching torchvision), the first import succeeds
and this module changes nothing.

    from zoo_imports import torchvision, timm, transformers   # each None when not installed

A package that is installed but fails to import (a missing dependency) raises here, so the
zoo fails rather than skipping.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import torch

# The schemas torchvision's _C.so would have defined: its C++ sources declare them in
# TORCH_LIBRARY_FRAGMENT(torchvision, m) (csrc/ops/nms.cpp for nms), and the same strings
# are in the wheel's _C.so (`strings torchvision/_C.so | grep 'torchvision::q\?nms('`).
_MISSING_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_FAILURE = "operator torchvision::{} does not exist"

_stub_library = None  # kept alive: a torch.library.Library's definitions go with it
stubbed_operators: tuple = ()  # which operators this module defined (empty when none)


def _forget_torchvision() -> None:
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]


def _import_torchvision():
    global _stub_library, stubbed_operators
    if importlib.util.find_spec("torchvision") is None:
        return None
    try:
        import torchvision  # noqa: F401
    except RuntimeError as e:
        if not any(_FAILURE.format(op) in str(e) for op in _MISSING_SCHEMAS):
            raise
        _forget_torchvision()
        _stub_library = torch.library.Library("torchvision", "FRAGMENT")  # noqa: TOR901
        for schema in _MISSING_SCHEMAS.values():
            _stub_library.define(schema)
        stubbed_operators = tuple(f"torchvision::{op}" for op in _MISSING_SCHEMAS)
        import torchvision  # noqa: F401, F811
    return sys.modules["torchvision"]


def _optional(name: str):
    """The package, or None when it is not installed (a broken install raises)."""
    return importlib.import_module(name) if importlib.util.find_spec(name) is not None else None


torchvision = _import_torchvision()
timm = _optional("timm")  # imports torchvision: only after the above
transformers = _optional("transformers")
