"""The `__main__` of each check file run by torch.distributed.run: the gloo group up, each
check (or those named on the command line) run on every rank, `rank R: name ok (T s)` printed
for the launching test to count."""

from __future__ import annotations

import sys
import time

import torch.distributed as dist


def run(checks) -> None:
    dist.init_process_group("gloo")
    only = sys.argv[1:]  # check names to run alone (all by default)
    try:
        for check in checks:
            if only and check.__name__ not in only:
                continue
            start = time.perf_counter()
            check()
            print(f"rank {dist.get_rank()}: {check.__name__} ok ({time.perf_counter() - start:.1f} s)", flush=True)
    finally:
        dist.destroy_process_group()
