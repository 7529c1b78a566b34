"""Every op sample of tests/op_samples.py compiled with executors=["nvfuser", "torch"].

The nvFuser executor's definitions run on tests/nvfuser_reference.py (posing as the
`nvfuser_direct` package: an executor given it as its backend, registered as "nvfuser")
and, where nvFuser imports and CUDA is available, on the real package. `compiler.compile` checks each program against
eager PyTorch on the sample's inputs (an error diagnostic on mismatch); this test also
checks that the nvFuser regions hold real definitions and that nothing errors.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

import compiler

from nvfuser_testing import REAL, reference_backend, registered
from op_samples import SAMPLES, clone_args


def _cases():
    out = []
    for s in SAMPLES:
        out += [pytest.param(s, dtype, id=s.id(dtype)) for dtype in s.dtypes]
    return out


@pytest.fixture(params=["reference"] + (["real"] if REAL else []))  # real: only where nvFuser runs
def device(request):
    if request.param == "real":
        yield torch.device("cuda")
        return
    with registered(reference_backend()):
        yield torch.device("cpu")


def _eager(s, args):
    try:
        with torch.no_grad():
            return s.fn(*clone_args(args))
    except (RuntimeError, NotImplementedError) as e:
        if "not implemented for" in str(e) or "Half" in str(e) or "BFloat16" in str(e):
            pytest.skip(f"eager PyTorch on this device: {e}")
        raise


def _compile(s, args, executors):
    try:
        rep = compiler.compile(s.fn, *clone_args(args), executors=executors)
    except Exception as e:  # noqa: BLE001 - reported as the error it is
        return None, [f"{type(e).__name__}: {e}"]
    errors = [d.message for d in rep.diagnostics if d.severity == "error"]
    if s.random:
        errors = [m for m in errors if "does not match eager" not in m]
    if rep.status != "ok":
        errors.append(f"status {rep.status}")
    return rep, errors


@pytest.mark.parametrize("s,dtype", _cases())
def test_op_sample_through_nvfuser(device, s, dtype):
    args = pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, s.make(dtype))
    _eager(s, args)
    rep, errors = _compile(s, args, ["nvfuser", "torch"])
    if errors:  # a compiler bug outside nvFuser fails with the torch executor alone too
        _, torch_errors = _compile(s, args, ["torch"])
        if torch_errors:
            pytest.xfail(f"not an nvFuser problem: executors=['torch'] fails too: {torch_errors[0]}")
    assert not errors, errors
    for r in rep.forward.regions:
        if r.executor == "nvfuser":  # a definition, with its status line
            assert "fd.define_tensor(" in r.code and "fd.add_output(" in r.code, r.code
