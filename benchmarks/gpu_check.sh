#!/usr/bin/env bash
# The GPU check, for a fresh GPU machine with torch and nothing else (no network: nothing is
# installed). Each step runs in its own process with its own budget (385 s in all, under 7
# minutes); every result is a JSON line in $OUT/results.jsonl the moment it is measured; the
# tables are built from those lines at the end ($OUT/summary.md, and dated in
# benchmarks/RESULTS.md). The steps and their budgets: benchmarks/gpu_check.py.
#
#   bash benchmarks/gpu_check.sh                       # on the GPU machine, from anywhere
#   bash benchmarks/gpu_check.sh --dry-run --out DIR   # on a CPU: every step at tiny sizes (CI runs it)
#
# Training benchmarks are a separate command: python3 benchmarks/bench_train.py --device cuda
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -u benchmarks/gpu_check.py "$@"
