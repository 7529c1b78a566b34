"""A slice of the OpInfo sweep (tests/opinfo_sweep.py) in CI: torch's own sample inputs for
its ops, compiled and checked against eager.

Every op of the slice gives eager's result, or falls back saying why; compiling never raises
where eager does not. The slice is deterministic: every STRIDE-th float32 OpInfo by name,
from OFFSET (FUSIONLENS_OPINFO_SHARD=k/STRIDE picks another one), plus the ops real model
code leans on. `python tests/opinfo_sweep.py` runs all of them.
"""

from __future__ import annotations

import os

import pytest
import torch

import compiler

pytest.importorskip("expecttest")  # torch.testing._internal imports it

import opinfo_sweep  # noqa: E402

STRIDE = 20
OFFSET = 7
# issue 18's gaps, decomposed now (or library calls): each must stay compiled, not decline or fall back
COMPILED = ("nn.functional.pad.reflect", "nn.functional.pad.circular", "nn.functional.cross_entropy",
            "nn.functional.nll_loss", "nn.functional.binary_cross_entropy_with_logits", "nn.functional.pdist",
            "nn.functional.pixel_shuffle", "nn.functional.unfold", "nn.functional.max_unpool2d",
            "nn.functional.adaptive_avg_pool2d", "round.decimals_3", "div.trunc_rounding", "sparse.mm.reduce",
            "native_layer_norm", "gradient")
ALWAYS = COMPILED + (
    "__getitem__", "index_select", "gather", "take_along_dim", "scatter_add", "index_put", "masked_select", "nonzero",
    "cumsum", "topk", "sort", "kthvalue", "einsum", "where", "addmm", "baddbmm", "tensordot",
    "nn.functional.multi_head_attention_forward")

# Known compiler bugs an op of the sweep hits (outside compiler/ops), each with its fix; the
# ops' tests are xfail(strict=True): once fixed, delete the entry.
KNOWN: dict = {}  # none left: the bugs the sweep found are fixed


def _shard():
    spec = os.environ.get("FUSIONLENS_OPINFO_SHARD")
    return (int(spec.split("/")[0]), int(spec.split("/")[1])) if spec else (OFFSET, STRIDE)


def _slice():
    try:
        ops = opinfo_sweep.op_db()
    except Exception as e:  # noqa: BLE001 - torch's internal test package did not import
        pytest.skip(f"torch's OpInfo database: {e}", allow_module_level=True)
    k, n = _shard()
    picked = {opinfo_sweep.op_name(op) for op in ops[k::n]} | set(ALWAYS)
    return [op for op in ops if opinfo_sweep.op_name(op) in picked]


OPS = _slice()
_results: dict = {}


def _cases():
    for op in OPS:
        name = opinfo_sweep.op_name(op)
        marks = [pytest.mark.xfail(reason=KNOWN[name], strict=True)] if name in KNOWN else []
        yield pytest.param(op, id=name, marks=marks)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("op", _cases())
def test_op_gives_eagers_result_or_says_why(op):
    r = opinfo_sweep.sweep_op(op)
    _results[r.name] = r
    assert r.kind not in ("raise", "mismatch"), f"{r.name}: {r.kind}: {r.detail}"
    if r.kind in ("fallback", "declined"):
        assert r.detail and "runs as one torch call" in r.detail, r.detail
    if r.name in COMPILED:
        assert r.kind in opinfo_sweep.COMPILED, f"{r.name}: {r.kind}: {r.detail}"


def test_most_of_the_slice_has_no_fallback():
    """Three quarters of the ops (all of op_db's: docs/opinfo.md) record only known symbols."""
    results = _results or {opinfo_sweep.op_name(op): opinfo_sweep.sweep_op(op) for op in OPS}
    counted = [r for r in results.values() if r.kind != "eager fails"]
    known = [r for r in counted if r.kind in opinfo_sweep.NO_FALLBACK]
    assert len(known) >= 0.75 * len(counted), [(r.name, r.kind) for r in counted if r not in known]


# --- what the frontend does not do yet: each passes once fusionlens/frontend/tracer.py maps it ---------

def test_multihead_attention_without_weights():
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    q = torch.randn(2, 5, 16)
    with torch.no_grad():
        report = compiler.compile(lambda x: mha(x, x, x, need_weights=False)[0], q, executors=["torch"])
    assert not [d for d in report.diagnostics if d.severity == "error"] and not report.fallbacks


def test_setitem_is_the_functional_symbol():
    def fn(x, i):
        x = x.clone()
        x[..., 0] = 1.0
        x[i] = x[0] * 2
        return x

    report = compiler.compile(fn, torch.randn(4, 3), torch.tensor([1, 3]), executors=["torch"])
    assert not [d for d in report.diagnostics if d.severity == "error"]
    assert not report.fallbacks, report.fallbacks
