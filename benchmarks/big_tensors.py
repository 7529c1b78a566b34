"""Generated kernels over more than 2**31 elements: a pointwise region and a softmax.

    python3 benchmarks/big_tensors.py            # on a GPU: ~4.3 GB bf16 inputs, ~20 GB at most
    python3 benchmarks/big_tensors.py --dry-run  # on a CPU (TRITON_INTERPRET=1), tiny sizes with
                                                 # 64-bit indexing forced: checks the script

Offsets past 2**31 need 64-bit indexing (fusionlens/executors/triton/writer.py). Each output is
allocated where a NaN-filled block was just freed (the caching allocator hands the same memory
back), so an element the kernel never writes stays NaN; the whole output is checked finite, and
sampled rows (the first, the last, those around element 2**31) are compared with eager.
One JSON line a case (and to $FUSIONLENS_RESULTS); exit 1 on any failure.
"""

from __future__ import annotations

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from results import emit  # noqa: E402

COLS = 4096


def pointwise(x):
    return x * 2.0 + 1.0


def softmax(x):
    return torch.softmax(x, -1)


def _nan_poisoned(nbytes: int, device) -> None:
    """Leave a NaN-filled block of `nbytes` in the caching allocator for the next allocation."""
    if device.type == "cuda":
        block = torch.full((nbytes // 2,), float("nan"), dtype=torch.bfloat16, device=device)
        del block


def _rows_to_sample(rows: int, cols: int) -> list[int]:
    from fusionlens.executors.triton import writer

    boundary = min(rows - 1, min(2**31, writer.INDEX_LIMIT) // cols)
    picks = {0, rows - 1, min(rows - 1, boundary), max(0, boundary - 1), min(rows - 1, boundary + 1), rows // 2}
    return sorted(picks)


def run_case(name: str, fn, rows: int, cols: int, device) -> dict:
    from fusion_groups import group_from_fn
    from fusionlens.driver import checking
    from fusionlens.executors import triton as tx

    start = time.monotonic()
    torch.manual_seed(0)
    x = torch.randn(rows, cols, device=device, dtype=torch.bfloat16)
    group, ins = group_from_fn(fn, x, gid=f"BIG_{name}")
    gen = tx.generate(group, device)
    assert gen.fn is not None  # generate() gives the launcher
    _nan_poisoned(x.numel() * 2, device)
    (out,) = gen.fn(*ins)
    row: dict = {"case": name, "numel": x.numel(), "dtype": "bfloat16", "int64": "tl.int64" in gen.source}
    finite = bool(torch.isfinite(out).all())
    errors = []
    sampled = _rows_to_sample(rows, cols)
    for i in sampled:
        expected = fn(x[i:i + 1])
        problem = checking.mismatch([out[i:i + 1]], [expected])
        if problem:
            errors.append(f"row {i}: {problem[:120]}")
        row["max_error"] = max(row.get("max_error", 0.0), float((out[i].float() - expected[0].float()).abs().max()))
    row.update(sampled_rows=len(sampled), seconds=round(time.monotonic() - start, 2))
    row["status"] = "ok" if finite and not errors and row["int64"] else (
        "; ".join((["unwritten (NaN) or non-finite elements"] if not finite else [])
                  + (["no 64-bit indexing"] if not row["int64"] else []) + errors))
    return row


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    dry = "--dry-run" in argv
    device = torch.device("cuda" if torch.cuda.is_available() and not dry else "cpu")
    if device.type == "cpu" and not dry:
        print(json.dumps({"status": "skipped: no GPU (--dry-run checks the script on a CPU)"}))
        return 0
    if dry:  # tiny sizes; the 64-bit path forced by lowering the limit it is taken from
        from fusionlens.executors.triton import writer

        writer.INDEX_LIMIT = 1000
        rows, cols = 3, 400
    else:
        cols = COLS
        rows = (2**31) // cols + 3  # 2**31 + 12288 elements
    status = 0
    for name, fn in (("pointwise", pointwise), ("softmax", softmax)):
        try:
            row = run_case(name, fn, rows, cols, device)
        except Exception as e:
            row = {"case": name, "status": f"ERROR {type(e).__name__}: {str(e)[:300]}"}
        print(json.dumps(row), flush=True)
        emit("big", **row)
        status |= row["status"] != "ok"
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return status


if __name__ == "__main__":
    sys.exit(main())
