"""The triton executor: turns a FusionGroup into readable @triton.jit kernels and a launcher.

What it generates (see fusionlens/middle/contract.py for the FusionGroup contract):

- pointwise groups: one kernel over the group's domain flattened into a 1-D index space.
  Each input is read through its own strides (stride 0 where a broadcast_in_dim spreads
  it), never copied; adjacent dims are coalesced where every access allows it, so a
  contiguous input is read with a plain `offs`. Tails are masked.
- reduction groups: one kernel, one program per block of rows (a row = one index of the
  kept dims, its elements = the reduced dims flattened). When a row fits in one register
  block (tuning.MAX_SINGLE_PASS elements) the whole region is straight-line code on a
  [BLOCK_M, BLOCK_N] tile. Otherwise it loops over each row in BLOCK_N chunks, one loop per
  pass: a pass computes every reduction whose inputs are available; softmax's
  amax-then-sum(exp(x - max)) runs as one online pass (running max, rescaled sum), and
  var_mean as one Welford pass (per-lane count, mean and M2 combined with Chan's formula); a
  final pass recomputes and stores the full-shape outputs. Lanes keep their own running state;
  one combine after the loop. A one-pass reduction of few long rows (or over the leading dim)
  is split across programs and combined by a second kernel (docs/kernels.md).
- two-axis groups (a norm's backward: row reductions and column sums of the same rows): one
  kernel whose programs each loop over a share of the row blocks, computing the rows' outputs
  and accumulating partial column sums in registers, stored once a program; a second small
  kernel combines the partials in a fixed order (two_axis.py, docs/kernels.md). Few long rows
  are tiled by column blocks instead (two_axis_tiles.py): a statistics kernel stores each row's
  partials a tile, a dx kernel combines them and sums whole columns (its module name still says
  `_combine`).
- float16/bfloat16/float32 values are loaded, computed and accumulated in float32 and cast
  back at the store; integer and bool values keep their types. float64 and complex are
  declined.

Kernels are specialised to one stride signature (runtime.py); on a CPU they run under
Triton's interpreter with TRITON_INTERPRET=1 (support.py); each distinct generated module
is exec'd once per process (module.py), so identical regions share their compiled kernels.

A dynamic program's group (shapes of symbols, fusionlens/ir/symbols.py) gets kernels that take
every size depending on a symbol as an argument (sizes.py): the launcher reads each symbol
from an input that has it as a dim and computes the rest, so one source serves every size;
a variant is specialised to the inputs' stride pattern (broadcast, contiguous, unit or other
dims), block sizes come from the example's sizes, a row whose length is a symbol's is
looped, and 64-bit indexing is a constexpr the launcher sets per call. A symbol no input
carries as a dim is declined.

The modules, down the pipeline:
    tuning      block sizes and limits (module attributes, for tests and benchmarks)
    support     availability here; which prims and dtypes are generated (can_take)
    analysis    the stride-independent analysis of a group; identifiers and literals
    sizes       a symbolic group's size arguments and stride patterns
    emitter     loads and prim expressions for one stride signature; the _fl_* helpers
    writer      what the two kernel writers share
    pointwise   the pointwise kernel writer
    reduction   the reduction kernel writer (single pass, looped, online, Welford)
    two_axis    a two-axis group's kernel pair: rows (dx) and partial column sums, then their combine
    polynomial  whether a row sum can be taken a tile at a time (few long rows)
    two_axis_tiles  few long rows: statistics partials by column block, then dx and whole columns
    module      module source (header, helpers, kernel, launcher); exec once per source
    runtime     generate / source_only / source_for, Generated and its stride variants
    launch      each kernel's launch bound once (no per-call JIT dispatch on a GPU)
    aot         ahead-of-time compile for a GPU target without a GPU (python -m), specialised as the JIT
    static      every kernel's launch and its compile for the target GPU, for the report
"""

from __future__ import annotations


from fusionlens.middle.contract import FusionGroup, Layout
from fusionlens.executors.base import FusionExecutor

from . import support
from .module import KernelSpec, build_source, load_source
from .runtime import Generated, generate, preview, source_for, source_only

__all__ = ["EXECUTOR", "Generated", "KernelSpec", "TritonExecutor", "build_source", "generate", "load_source",
           "source_for", "source_only"]


class TritonExecutor(FusionExecutor):
    name = "triton"
    stores_in_place = True  # an in-place scatter (middle/reinplace.py) stores its window into the base itself

    def available(self, device) -> tuple[bool, str]:
        return support.available(device)

    def can_take(self, bsym) -> str | None:
        return support.can_take(bsym)

    def takes_columns(self, domain, reduction_dims, column_dims, bsyms) -> str | None:
        return support.takes_columns(domain, reduction_dims, column_dims, bsyms)

    def generate(self, group: FusionGroup, device=None) -> Generated:
        return generate(group, device)

    def definition_source(self, group: FusionGroup) -> str:
        """The code this executor would run for `group` (contiguous inputs), without running
        or even importing triton: for reports on machines where the executor is unavailable."""
        return source_only(group)

    def preview(self, group: FusionGroup) -> tuple[str, int]:
        return preview(group)

    def describe_kernels(self, pairs: list, gpu: str, compile_static: bool) -> list:
        from . import static  # the report's kernel analysis: docs/kernels.md

        return static.describe(pairs, gpu, compile_static)

    def source_for(self, group: FusionGroup, layouts: list[Layout], device: str = "cuda") -> str:
        """The module (kernels and launcher) for inputs of these strides, as `generate` would
        make it for them; the kernels do not depend on `device`."""
        return source_for(group, layouts)


EXECUTOR = TritonExecutor()
