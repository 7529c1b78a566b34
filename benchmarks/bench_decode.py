"""Greedy decoding with a KV cache: eager vs FusionLens vs torch.compile vs thunder.jit, in one run.

    python benchmarks/bench_decode.py [--tokens 32] [--repeats 3] [--layers 2] [--hidden 64]
                                      [--caches dynamic,static] [--systems eager,fusionlens,torch.compile,thunder]
                                      [--threads 1] [--cache-len N]

A tiny Llama built from a config (no download) generates `--tokens` tokens from a 16-token
prompt with `model.generate(ids, do_sample=False)`, the model's forward compiled the way each
system documents for generate():

    model.forward = compiler.jit(model.forward)       # FusionLens
    model.forward = torch.compile(model.forward)      # torch.compile (inductor, default mode)
    model.forward = thunder.jit(model.forward)        # thunder 0.2.x (benchmarks/thunder_shim.py)

`first` is the first generate() (every compile it needs included); `steady` the median of
`--repeats` later ones, as tokens per second. `compiles` is FusionLens's count
(`cache_info()`); `fast` the share of its calls in the steady runs that its generated
per-program code served (fusionlens/driver/fast_path.py: key, guards and write-back as
straight-line code) rather than the generic path; `--systems ...,fusionlens-generic` adds
FusionLens with that code off (every call keyed, looked up and written back by walking its
arguments and the cache), for the difference in one run. `--threads` is torch's
intra-op thread count (1 by default: on a shared, loaded machine more threads spin and
make every system's steady rate noise). `--cache-len N`: the StaticCache holds N positions (a
`transformers.StaticCache(max_cache_len=N)` passed to generate(); by default generate() sizes it
to the prompt and the new tokens): a decode step at a real model's cache length, where writing
the cache into a copy of it costs what the cache is, not what the token is (issue 30). Every
system's tokens are checked against eager's: a system whose tokens
differ is marked WRONG. A system that fails gets its error in the table. Prints a table;
never asserts.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tables import table  # noqa: E402
from zoo_imports import transformers  # noqa: E402  (torchvision's CPU import shim first)

import compiler  # noqa: E402


def _model(layers: int, hidden: int):
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=hidden, intermediate_size=2 * hidden,
                                   num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=512)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def _compile(system: str, model):
    if system in ("fusionlens", "fusionlens-generic"):
        model.forward = compiler.jit(model.forward)
        if system == "fusionlens-generic":  # no generated per-program code: every call keyed by walking it
            model.forward.fast.arm = lambda *args: None
    elif system == "torch.compile":
        model.forward = torch.compile(model.forward)
    elif system == "thunder":
        from thunder_shim import import_thunder
        thunder, why = import_thunder()
        if thunder is None:
            raise RuntimeError(why)
        model.forward = thunder.jit(model.forward)
    return model


def _generate(model, ids, tokens: int, cache: str, cache_len: int | None = None):
    options = {} if cache == "dynamic" else {"cache_implementation": "static"}
    if cache == "static" and cache_len:  # a fresh cache of that many positions for each generate()
        options = {"past_key_values": transformers.StaticCache(config=model.config, max_cache_len=cache_len)}
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, **options)


def _served(model, system: str) -> list[int]:
    """(calls, calls the generated fast path served) of FusionLens's jit so far."""
    if not system.startswith("fusionlens"):
        return [0, 0]
    info = model.forward.cache_info()
    return [info["hits"] + info["misses"], model.forward.fast.served]


def run(system: str, base, ids, want, args, cache: str) -> list:
    try:
        model = _compile(system, copy.deepcopy(base))
        start = time.perf_counter()
        got = _generate(model, ids, args.tokens, cache, args.cache_len)
        first = time.perf_counter() - start
        times = []
        served = _served(model, system)
        for _ in range(args.repeats):
            start = time.perf_counter()
            _generate(model, ids, args.tokens, cache, args.cache_len)
            times.append(time.perf_counter() - start)
        served = [a - b for a, b in zip(_served(model, system), served)]
    except Exception as e:  # noqa: BLE001 - a system that fails gets its error in the table
        return [system, cache, "-", "-", "-", "-", f"failed: {type(e).__name__}: {str(e).splitlines()[0][:60]}"]
    steady = statistics.median(times)
    compiles = model.forward.cache_info()["compiles"] if system.startswith("fusionlens") else "-"
    fast = f"{served[1] / max(served[0], 1):.0%}" if system.startswith("fusionlens") else "-"
    check = "ok" if torch.equal(got, want) else "WRONG: tokens differ from eager's"
    return [system, cache, f"{first:.2f} s", f"{args.tokens / steady:.0f} tok/s", compiles, fast, check]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--caches", default="dynamic,static")
    parser.add_argument("--systems", default="eager,fusionlens,torch.compile,thunder")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache-len", type=int, default=None, help="positions a StaticCache holds")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    base = _model(args.layers, args.hidden)
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(0))
    rows = []
    for cache in args.caches.split(","):
        want = _generate(copy.deepcopy(base), ids, args.tokens, cache, args.cache_len)
        rows += [run(s, base, ids, want, args, cache) for s in args.systems.split(",")]
    held = f", StaticCache of {args.cache_len} positions" if args.cache_len else ""
    print(f"generate(): tiny Llama, {args.layers} layers, hidden {args.hidden}, {args.tokens} new tokens{held}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    table(rows, ["system", "cache", "first", "steady", "compiles", "fast", "check"])


if __name__ == "__main__":
    main()
