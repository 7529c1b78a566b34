"""Host cost of one call of a generated Triton launcher (issue 29 part 5), before and after.

    python3 benchmarks/bench_launch.py [--repeats 200]

- On any machine: the launcher's own Python (device check, output allocation, the launch
  call) with the kernels replaced by a no-op, so what is timed is the launcher, not Triton's
  interpreter: outputs made with `torch.empty(shape)` (before) against
  `torch.empty_strided(shape, strides)` of constant tuples (now).
- On a GPU: the whole call, JIT launch (`kernel[grid](...)` through JITFunction.run, before)
  against the bound launch (fusionlens/executors/triton/launch.py, now), CUDA synchronised
  once per batch of 50 calls.

Prints a table; never asserts.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

CASES: dict[str, tuple[Callable, list[tuple[int, ...]]]] = {
    "softmax [64, 512]": (lambda x: torch.softmax(x, -1), [(64, 512)]),
    "layer_norm + residual [64, 512]": (lambda x, r, w, b: (x + r, F.layer_norm(x + r, (512,), w, b)),
                                        [(64, 512), (64, 512), (512,), (512,)]),
    "LayerNorm backward columns [256, 512]": (lambda dy, xh: ((dy * xh).sum(0), dy.sum(0)), [(256, 512), (256, 512)]),
}


class _NoKernel:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def _per_call_us(fn, args, repeats: int, batch: int, sync) -> float:
    for _ in range(batch):
        fn(*args)
    sync()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter_ns()
        for _ in range(batch):
            fn(*args)
        sync()
        samples.append((time.perf_counter_ns() - t) / batch / 1e3)
    return statistics.median(samples)


def _launcher(source: str, group_id: str, stub: bool):
    from fusionlens.executors.triton.module import _region_ident

    rid = _region_ident(group_id)
    namespace: dict = {"__name__": "bench"}
    if stub:  # the launcher alone: no kernel, so no Triton (nor its interpreter) in the figure
        source = re.sub(r"^@triton\.jit\n", "", source, flags=re.M)
    exec(compile(source, "<bench>", "exec"), namespace)
    if stub:
        for k in (f"{rid}_kernel", f"{rid}_combine"):
            namespace[k] = _NoKernel()
    return namespace[f"{rid}_launch"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=200)
    args = p.parse_args()
    torch.set_num_threads(1)
    from fusion_groups import group_from_fn
    from fusionlens.executors.triton import generate
    from fusionlens.executors.triton.analysis import _Analysis
    from fusionlens.executors.triton.module import build_source
    from fusionlens.executors.triton.runtime import _contiguous_key

    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    print(f"host cost of a generated launcher, median of {args.repeats} batches, us a call · torch {torch.__version__}"
          f" · {torch.cuda.get_device_name() if cuda else 'CPU, kernels replaced by a no-op'}")
    rows = []
    for name, (fn, shapes) in CASES.items():
        xs = [torch.randn(s, device=dev) for s in shapes]
        group, inputs = group_from_fn(fn, *xs)
        an = _Analysis(group)
        source = build_source(group, an, _contiguous_key(an))[0]
        before = re.sub(r"torch\.empty_strided\((\([^)]*\)), \([^)]*\), ", r"torch.empty(\1, ", source)
        if not cuda:
            old = _per_call_us(_launcher(before, group.id, True), inputs, args.repeats, 20, lambda: None)
            new = _per_call_us(_launcher(source, group.id, True), inputs, args.repeats, 20, lambda: None)
            rows.append((name, "torch.empty a call", old, "empty_strided, constant tuples", new))
        else:
            gen = generate(group, dev)
            jit_path = _launcher(before, group.id, False)
            sync = torch.cuda.synchronize
            old = _per_call_us(jit_path, inputs, args.repeats, 50, sync)
            new = _per_call_us(gen.fn, inputs, args.repeats, 50, sync)
            rows.append((name, "JIT launch, torch.empty", old, "bound launch, empty_strided", new))
    for name, a, old, b, new in rows:
        print(f"| {name} | {a}: {old:.2f} | {b}: {new:.2f} | {old / new:.2f}x |")


if __name__ == "__main__":
    main()
