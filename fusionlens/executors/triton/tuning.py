"""Tuning knobs of the Triton generator.

Module attributes, read at each generation, so that tests and benchmarks can lower or raise
them (`monkeypatch.setattr(tuning, "MAX_SINGLE_PASS", 16)` forces the looped reductions).
"""

# Largest row (reduced elements) kept in registers in one pass. At 16384 float32 elements
# and 32 warps (16 per thread) the sm_90 cubins of softmax / LayerNorm / residual+LayerNorm
# use 32-58 registers and spill nothing (cuobjdump); at 32768 they start to use stack.
MAX_SINGLE_PASS = 16384
LOOP_BLOCK_N = 2048  # chunk of a row per loop iteration when the row does not fit
POINTWISE_BLOCK = 1024
ONE_PROGRAM_LIMIT = 1 << 16  # a full reduction (one row) larger than this is left to torch
