"""Tuning knobs of the Triton generator, and the heuristic that picks warps and stages.

Module attributes, read at each generation, so that tests and benchmarks can lower or raise
them (`monkeypatch.setattr(tuning, "MAX_SINGLE_PASS", 16)` forces the looped reductions,
`monkeypatch.setattr(tuning, "SM_COUNT", 2)` with `SPLIT_MIN_BYTES = 0` the split ones).
docs/kernels.md explains each choice.
"""

# Largest row (reduced elements) kept in registers in one pass. At 16384 float32 elements
# and 16 warps (32 a thread) the sm_90 cubins of softmax / LayerNorm / residual+LayerNorm
# spill nothing (tests/test_triton_static.py); longer rows loop in LOOP_BLOCK_N chunks and
# read their input twice (one statistics pass, one output pass).
MAX_SINGLE_PASS = 16384
LOOP_BLOCK_N = 2048  # chunk of a row per loop iteration when the row does not fit
POINTWISE_BLOCK = 1024
ONE_PROGRAM_LIMIT = 1 << 16  # a full reduction (one row) this large is split, or left to torch when it cannot be

# Split reductions: a reduction of few rows (or over the leading dim) that launches fewer than
# PROGRAMS_PER_SM x SM_COUNT programs cuts each row into chunks, one program a chunk, and a
# second small kernel combines the partial results in a fixed order (deterministic).
SM_COUNT = 132  # H100 SXM / H200; generate() on a GPU reads the device's own count
PROGRAMS_PER_SM = 2
SPLIT_MIN_BYTES = 4 << 20  # below this a second launch costs more than the idle SMs do
MAX_SPLIT = 512  # partial results per row (the combine kernel reads them in one block)

# warps: about ELEMENTS_PER_THREAD elements of a tile per thread (four 128-bit loads of
# float32), between 1 and MAX_WARPS warps (32 warps would cap a block's registers at 64 a thread)
ELEMENTS_PER_THREAD = 16
MAX_WARPS = 16


def warps_for(tile: int) -> int:
    """num_warps for a block of `tile` elements (a power of two)."""
    w = max(1, tile // (32 * ELEMENTS_PER_THREAD))
    return min(MAX_WARPS, 1 << (w.bit_length() - 1))


def stages_for(looped: bool) -> int:
    """num_stages: a loop over a row prefetches its next chunk while it reduces this one
    (Triton's software pipeliner); straight-line code has nothing to pipeline."""
    return 2 if looped else 1


def autotune_warps(warps: int) -> list[int]:
    """The configurations a GPU launch times once per shape (at most four): the heuristic's
    warps, half and double of it, within 1..MAX_WARPS."""
    out = [warps] + [w for w in (warps // 2, warps * 2) if 1 <= w <= MAX_WARPS]
    return list(dict.fromkeys(out))[:4]


# A two-axis kernel's programs (a norm's backward: two_axis.py) each loop over a share of the
# row blocks, so they should all be resident at once: one wave, no tail. How many fit on an SM
# is estimated from the registers a thread holds, about TWO_AXIS_REGS_PER_ELEMENT a tile element
# it owns (its operands and the partial column sums' accumulators) plus 32 (the sm_90 compile of
# LayerNorm's backward at 8192 columns: 16 elements a thread, 99 registers).
TWO_AXIS_REGS_PER_ELEMENT = 4
# The longest row a two-axis kernel holds in registers: at 16384 bf16 columns its 16 warps hold 32
# elements a thread of each operand and accumulator and the sm_90 compile spills (344 bytes a
# thread). Longer rows loop over chunks (two_axis.py): a pass for the row statistics, one for dx
# adding each chunk's column sums to the program's row of partial sums in global memory.
TWO_AXIS_MAX_ROW = 8192
# The looped kernel's tile: TWO_AXIS_LOOP_TILE elements (16 a thread at 8 warps, as the one-pass
# kernel at 8192), up to TWO_AXIS_LOOP_ROWS rows a block: each block loads and stores its
# program's partial row (8 bytes a column a sum), so 8 rows make that a byte a column a row.
TWO_AXIS_LOOP_TILE = 4096
TWO_AXIS_LOOP_ROWS = 8
# Rows a two-axis program takes at least, where there are few rows: each program writes a row of
# partial sums (4 bytes a column a sum) for the combine to read back, so a program of few rows
# would move nearly as many partial bytes as it reads (1024 rows: 132 programs, not 264); never
# fewer than one an SM where there are row blocks enough
TWO_AXIS_MIN_ROWS = 8
# ... and never fewer programs than SMs while each still gets TWO_AXIS_FILL_ROWS rows: a looped
# row kernel's partial sums (4 bytes a column a sum, written and read back) then cost at most
# what a third read of bf16 dy and x would. Fewer rows than this a program at every SM, over
# rows longer than TWO_AXIS_MAX_ROW, and the domain is tiled by column blocks instead
# (two_axis_tiles.py): a statistics kernel of TWO_AXIS_MAX_ROW-column tiles storing each row's
# partials, then a dx kernel whose programs each own a block of columns over every row, at
# least TWO_AXIS_TILE_MIN_COLS wide (64: a 128-byte bf16 segment a row, 128-bit accesses).
TWO_AXIS_FILL_ROWS = 4
TWO_AXIS_TILE_MIN_COLS = 64
TWO_AXIS_TILE_WAVES = 8  # the statistics kernel's programs: about this many waves, whatever an SM holds
SM_REGISTERS = 65536
SM_WARPS = 64


def resident_programs(warps: int, tile: int, accumulators: int = 0) -> int:
    """Programs of `warps` warps over a `tile`-element block an SM holds at once (at most
    PROGRAMS_PER_SM): the least of what its warps and its registers (allocated 256 a warp) allow.
    `accumulators`: lane-wise accumulators a looped kernel keeps beside its operands (one a
    sum, three a Welford: LayerNorm's backward recomputing its statistics, 138 registers at sm_90)."""
    regs = 32 + (TWO_AXIS_REGS_PER_ELEMENT + accumulators) * max(1, tile // (32 * warps))
    per_warp = -(-regs * 32 // 256) * 256
    return max(1, min(PROGRAMS_PER_SM, SM_WARPS // warps, SM_REGISTERS // (per_warp * warps)))
