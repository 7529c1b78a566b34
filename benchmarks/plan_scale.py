"""Planning time and memory for Llama 3 models from 1B to 405B (transformers' LlamaForCausalLM
from its config, meta device), one block traced (the default) and every block traced.
Each plan runs in a fresh process: its wall time and peak RSS are the whole command's.

    python benchmarks/plan_scale.py     # the table of benchmarks/RESULTS.md
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD = """
import json, resource, sys, time
sys.path[:0] = [{repo!r} + "/tests", {repo!r} + "/examples/plan"]
start = time.perf_counter()
import torch, zoo_imports  # noqa: F401  (transformers against the CPU torch)
from plan_llama import Step, llama
from fusionlens.plan import api
with torch.device("meta"):
    _, model, args = llama({size!r})
    rep = api.plan(Step(model), *args, cluster="128x8xH100", tp=8, pp=8, global_batch=1024, sp=True,
                   recompute="selective", blocks={blocks})
print(json.dumps({{"s": time.perf_counter() - start, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "params": rep.params, "step": rep.step_s, "mfu": rep.mfu, "plan": rep.planning_s}}))
"""


def run(size: str, blocks) -> dict:
    code = CHILD.format(repo=REPO, size=size, blocks=blocks)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    data["wall"] = time.perf_counter() - t0
    return data


def main() -> None:
    print("| model | parameters | blocks traced | trace + plan s | whole process s | peak RSS MiB | predicted step s "
          "| MFU |")
    print("|---|---|---|---|---|---|---|---|")
    for size in ("1b", "8b", "70b", "405b"):
        for blocks in (1, None):
            d = run(size, blocks)
            which = "one" if blocks else "all"
            print(f"| Llama {size.upper()} | {d['params'] / 1e9:.1f}B | {which} | {d['plan']:.1f} | {d['wall']:.1f} | "
                  f"{d['rss'] / 1024:.0f} | {d['step']:.2f} | {d['mfu']:.1%} |", flush=True)


if __name__ == "__main__":
    main()
