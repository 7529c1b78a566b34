"""The GPU check's preflight: the device, the versions, one trivial Triton launch checked.

    python3 benchmarks/preflight.py [--dry-run]

One JSON line (and one to $FUSIONLENS_RESULTS). Exit 1 when no GPU is there (without
--dry-run) or the launch fails: the steps after it would only fail slower.
"""

from __future__ import annotations

import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import emit  # noqa: E402


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    dry = "--dry-run" in argv
    import torch

    row: dict = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    cuda = torch.cuda.is_available()
    if cuda:
        props = torch.cuda.get_device_properties(0)
        row.update(device=props.name, sms=props.multi_processor_count,
                   l2_mib=round(getattr(props, "L2_cache_size", 0) / 2**20, 1),
                   memory_gib=round(props.total_memory / 2**30, 1))
    else:
        row["device"] = "CPU (dry run: Triton's interpreter)" if dry else "none"
    try:
        import triton
        import triton.language as tl

        row["triton"] = triton.__version__

        @triton.jit
        def add_one(x_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)

        x = torch.zeros(1000, device="cuda" if cuda else "cpu")
        add_one[(triton.cdiv(1000, 256),)](x, 1000, BLOCK=256)
        row["triton_launch"] = "ok" if bool((x == 1).all()) else "WRONG RESULT"
    except Exception as e:
        row["triton_launch"] = f"failed: {type(e).__name__}: {str(e)[:200]}"
    print(json.dumps(row), flush=True)
    emit("preflight", **row)
    return 0 if row["triton_launch"] == "ok" and (cuda or dry) else 1


if __name__ == "__main__":
    sys.exit(main())
