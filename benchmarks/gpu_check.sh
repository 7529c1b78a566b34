#!/usr/bin/env bash
# One call on the GPU machine (torch 2.11, triton 3.6, Python 3.12, no network):
#   1. the Triton generator's tests on the GPU (no interpreter), including the sm_90 AOT compiles;
#   2. benchmarks/bench_fusion.py: generated kernels vs eager vs torch.compile, achieved bandwidth
#      against the device's copy bandwidth, on standalone regions and on every example;
#      its tables are appended to benchmarks/RESULTS.md (and kept under $OUT when that is set);
#   3. benchmarks/roofline_check.py: achieved % of peak per region of every example (its
#      roofline on this GPU against its measured median, docs/roofline.md), and whether each
#      region's profiler range (FUSIONLENS_PROFILE=1: "R3 gpt_block.py:77") is in torch.profiler;
#   4. optional, only with TRAIN_BENCH=1: benchmarks/bench_train.py --device cuda, training steps
#      (forward, backward, AdamW) of eager, compiler.jit, torch.compile and thunder.jit (where it
#      imports); kept under $OUT as bench_train.txt and bench_train.json, appended nowhere.
# Each step has its own time limit so the whole run stays under ~6 minutes (~10 with step 4); a failing step
# is reported and the next one still runs. Exit status: 0 only when every step passed.
#
#   bash benchmarks/gpu_check.sh            # from the repository root or anywhere
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export TRITON_DEFAULT_FP_FUSION="${TRITON_DEFAULT_FP_FUSION:-1}"
unset TRITON_INTERPRET
OUT_DIR="${OUT:-$ROOT/benchmarks/out}"
mkdir -p "$OUT_DIR"
status=0
start=$(date +%s)

echo "== environment"
python - <<'PY' || status=1
import platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| device", torch.cuda.get_device_name() if torch.cuda.is_available() else "NONE")
try:
    import triton
    print("triton", triton.__version__)
except Exception as e:
    print("triton does not import:", e)
PY
python -c "import compiler" 2>/dev/null || pip install -e . --no-deps -q >/dev/null 2>&1 || true

echo "== 1. tests on the GPU (tests/test_triton*.py)"
timeout 170 python -m pytest tests/test_triton.py tests/test_triton_hopper.py -q -p no:cacheprovider \
    -o addopts="" --durations=8 --junitxml="$OUT_DIR/test_triton.xml" 2>&1 | tail -n 60
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then echo "!! tests failed or timed out (exit $rc)"; status=1; fi
echo "   ($(( $(date +%s) - start )) s so far)"

echo "== 2. benchmarks (benchmarks/bench_fusion.py)"
left=$(( 300 - ($(date +%s) - start) ))
[ "$left" -lt 60 ] && left=60
timeout $(( left + 30 )) python benchmarks/bench_fusion.py --budget "$left" \
    --results benchmarks/RESULTS.md 2>&1 | tee "$OUT_DIR/bench_fusion.txt" | tail -n 120
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then echo "!! benchmark failed or timed out (exit $rc)"; status=1; fi
cp benchmarks/RESULTS.md "$OUT_DIR/RESULTS.md" 2>/dev/null || true

echo "== 3. % of peak per region, profiler ranges (benchmarks/roofline_check.py)"
timeout 150 python benchmarks/roofline_check.py --repeats 20 2>&1 | tee "$OUT_DIR/roofline_check.txt" | tail -n 150
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then echo "!! roofline check failed or timed out (exit $rc)"; status=1; fi

echo "== 4. training steps (benchmarks/bench_train.py; optional)"
if [ "${TRAIN_BENCH:-0}" = 1 ]; then
    timeout 270 python benchmarks/bench_train.py --device cuda --steps 20 --warmup 3 \
        --json "$OUT_DIR/bench_train.json" 2>&1 | tee "$OUT_DIR/bench_train.txt" | tail -n 30
    rc=${PIPESTATUS[0]}
    if [ "$rc" -ne 0 ]; then echo "!! training benchmark failed or timed out (exit $rc)"; status=1; fi
else
    echo "   skipped (TRAIN_BENCH=1 runs it: a few minutes, most of them torch.compile's cold compiles)"
fi
echo "== done in $(( $(date +%s) - start )) s, status $status"
exit $status
