"""Time on the target GPU: each op of the programs, each collective of the plan.

    GEMM          2MNK / (peak x GEMM_EFFICIENCY x tiles x depth)   (docs/plan.md)
      tiles  = useful / padded 128x128 output tiles, times the last wave's fill of the SMs
      depth  = K / (K + GEMM_K_HALF): a short reduction spends its time in prologue and epilogue
    attention     FLOPs / (peak x ATTENTION_EFFICIENCY)                (a flash-style kernel)
    memory-bound  bytes / (HBM bandwidth x MEMORY_EFFICIENCY) + KERNEL_LAUNCH_S
    collective    comm_model.estimate on the group's links, at NCCL's achieved bus bandwidth
                  (NVLINK_EFFICIENCY, NIC_EFFICIENCY); NVLS all-reduce in a node moves n once

Every coefficient is named here and in docs/plan.md with where it comes from: a datasheet
(the System table), a physical argument, or a published measurement of the kernel class
(GEMM_EFFICIENCY, MEMORY_EFFICIENCY, ATTENTION_EFFICIENCY, the NCCL efficiencies). None is
fitted to a row of tests/test_plan_published.py; the set checks them all at once.
"""

from __future__ import annotations

import dataclasses
import math

from fusionlens.ir.trace import BoundSymbol, Value
from fusionlens.ir.vocabulary import ValueRole
from fusionlens.middle import cost as region_cost
from fusionlens.plan.layout import Layout
from fusionlens.plan.parallel import Collective, OpShard, is_gemm
from fusionlens.report import comm_model

GEMM_EFFICIENCY = 0.80  # cuBLAS's large bf16 GEMMs: 75-85% of dense peak on A100 and H100 (docs/plan.md)
GEMM_TILE = 128  # the output tile cuBLAS's bf16 kernels use on A100/H100 (CUTLASS default 128x128)
GEMM_K_HALF = 128  # physical: two 64-deep k-tiles of prologue and epilogue
ATTENTION_EFFICIENCY = 0.55  # FlashAttention-2 forward+backward on A100/H100: 50-70% of peak (Dao 2023)
FLASH_BACKWARD_FLOPS = 2.5  # its backward's matmuls over its forward's: 5 against 2 (Dao 2023, section 3.1)
MEMORY_EFFICIENCY = 0.80  # STREAM-like copies and fused elementwise kernels: 80-90% of HBM peak
KERNEL_LAUNCH_S = 4e-6  # a launch and its tail on an idle stream (CUDA's documented 3-5 us)
NVLINK_EFFICIENCY = 0.80  # nccl-tests all_reduce bus bandwidth: ~235 of 300 GB/s (A100), ~360 of 450 (H100)
NIC_EFFICIENCY = 0.92  # nccl-tests across nodes: ~23 of 25 GB/s (HDR), ~46 of 50 (NDR)
OPTIMIZER_BYTES = 4 * (2 + 2 + 2) + 4 + 2  # AdamW: fp32 master, m, v read and written; fp32 grad read; bf16 param


@dataclasses.dataclass
class OpTime:
    seconds: float
    flops: float  # what it computed on one GPU
    nbytes: float
    kind: str  # "gemm", "attention", "memory", "view"


def gemm_dims(b: BoundSymbol, flops: float) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of a matmul from its first operand and its FLOPs (2 batch M N K)."""
    a = next(v for v in b.inputs() if isinstance(v, Value))
    k = int(a.shape[-1]) if a.shape else 1
    m = int(a.shape[-2]) if len(a.shape) >= 2 else 1
    batch = max(a.numel() // max(m * k, 1), 1)
    n = max(int(round(flops / max(2 * batch * m * k, 1))), 1)
    return batch, m, n, k


def gemm_efficiency(batch: int, m: int, n: int, k: int, sms: int) -> float:
    t = GEMM_TILE
    tm, tn = math.ceil(m / t), math.ceil(n / t)
    tiles = batch * tm * tn
    waves = math.ceil(tiles / sms)
    padding = (m * n) / (tm * t * tn * t)
    return GEMM_EFFICIENCY * padding * tiles / (waves * sms) * k / (k + GEMM_K_HALF)


def op_time(b: BoundSymbol, s: OpShard, layout: Layout) -> OpTime:
    c = region_cost.region_cost([b], [v for v in b.inputs() if isinstance(v, Value)], b.outputs)
    g = layout.system
    flops, nbytes = c.flops / s.divide, c.bytes / s.divide
    if b.sym.name.endswith("scaled_dot_product_attention"):
        return OpTime(flops / (g.bf16_tflops * 1e12 * ATTENTION_EFFICIENCY) + KERNEL_LAUNCH_S, flops, nbytes,
                      "attention")
    if is_gemm(b) and c.flops > 0:
        batch, m, n, k = gemm_dims(b, c.flops)
        m, n, k, batch = _split(s, batch, m, n, k)
        peak = g.bf16_tflops * 1e12 * (1.0 if c.math == "bf16" else 0.5)  # TF32 runs at half the BF16 rate
        eff = gemm_efficiency(batch, m, n, k, g.sms)
        compute = flops / (peak * eff)
        return OpTime(max(compute, nbytes / (g.hbm_gbs * 1e9 * MEMORY_EFFICIENCY)) + KERNEL_LAUNCH_S, flops, nbytes,
                      "gemm")
    if nbytes == 0:
        return OpTime(0.0, 0.0, 0.0, "view")
    return OpTime(nbytes / (g.hbm_gbs * 1e9 * MEMORY_EFFICIENCY) + KERNEL_LAUNCH_S, flops, nbytes, "memory")


def _split(s: OpShard, batch: int, m: int, n: int, k: int) -> tuple[int, int, int, int]:
    """The GEMM one GPU runs: a Linear's sharded dim (column: N, row: K), an activation GEMM's
    heads (its batch), the sequence for sequence and context parallelism (M)."""
    d = s.divide
    if d == 1:
        return m, n, k, batch
    if s.gemm == "column":
        return m, max(n // d, 1), k, batch
    if s.gemm == "row":
        return m, n, max(k // d, 1), batch
    if s.gemm == "activation" and batch >= d:
        return m, n, k, batch // d
    dims = {"m": m, "n": n, "k": k}
    big = max(dims, key=lambda x: dims[x])
    dims[big] = max(dims[big] // d, 1)
    return dims["m"], dims["n"], dims["k"], batch


def collective_time(c: Collective, layout: Layout) -> float:
    """Seconds the collective takes on its group's links (comm_model), at achieved bandwidth."""
    size = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp, "dpcp": layout.dp * layout.cp}
    p = size[c.group]
    if p == 1 or c.nbytes == 0:
        return 0.0
    fp = layout.footprint(c.group)
    fp = dataclasses.replace(fp, intra=_derate(fp.intra, NVLINK_EFFICIENCY),
                             inter=_derate(fp.inter, NIC_EFFICIENCY) if fp.inter else None)
    if c.kind == "ring":  # ring attention: p-1 steps, each passing this rank's K and V chunk on
        link = fp.inter if fp.inter is not None else fp.intra
        return (p - 1) * (link.latency_s + c.nbytes / link.bytes_per_s)
    if c.kind == "send_recv":
        link = fp.inter if fp.inter is not None else fp.intra
        return link.latency_s + c.nbytes / link.bytes_per_s
    if c.kind == "all_reduce" and layout.system.nvls and fp.nodes == 1:  # NVLink SHARP: reduced in the switch
        return fp.intra.latency_s * 2 + c.nbytes / fp.intra.bytes_per_s
    return comm_model.estimate(c.kind, c.nbytes, fp.world, fp).seconds


def _derate(link: comm_model.Link, efficiency: float) -> comm_model.Link:
    return dataclasses.replace(link, gbs=link.gbs * efficiency)


def optimizer_seconds(params_per_gpu: float, layout: Layout) -> float:
    """AdamW over this GPU's share of the parameters: a memory-bound pass (OPTIMIZER_BYTES each)."""
    g = layout.system
    return params_per_gpu * OPTIMIZER_BYTES / (g.hbm_gbs * 1e9 * MEMORY_EFFICIENCY)


_UNFUSED = ("embedding", "embedding_dense_backward", "scatter_add", "full", "index_put", "cat")


def _fusible(b: BoundSymbol, s: OpShard) -> bool:
    return not is_gemm(b) and not b.sym.name.endswith(("scaled_dot_product_attention",) + _UNFUSED)


def program_times(ops: list[BoundSymbol], parts: list[str], shards: list[OpShard], layout: Layout,
                  results: set[str], flash: dict | None = None, inputs: set[str] | None = None) -> list[OpTime]:
    """Each op's time in its program. Runs of memory-bound ops between library calls (same part,
    same sharding) are one fused region, as FusionLens's partitioner makes them: the region
    reads its inputs and writes what is used after it once; its time is shared among its ops
    by their own bytes (their lines' share). `flash`: a backward's forward SDPA lines -> their
    FLOPs on one GPU: the attention's backward ops there are one flash backward kernel."""
    last_use: dict[str, int] = {}
    for i, b in enumerate(ops):
        for v in b.inputs():
            if isinstance(v, Value):
                last_use[v.name] = i
    times = [op_time(b, s, layout) for b, s in zip(ops, shards)]
    for k in constant_ops(ops, inputs):  # a causal mask: made once (CSE hoists it), or an iota compare in a kernel
        times[k] = OpTime(0.0, 0.0, 0.0, "view")
    if flash:
        _flash_backward(ops, times, flash, layout)
    i = 0
    while i < len(ops):
        if not _fusible(ops[i], shards[i]) or times[i].kind == "view":
            i += 1
            continue
        j = i
        while j + 1 < len(ops) and _fusible(ops[j + 1], shards[j + 1]) and parts[j + 1] == parts[i] and \
                (shards[j + 1].divide == shards[i].divide or times[j + 1].kind == "view"):
            j += 1
        _fuse(ops, times, shards, i, j, last_use, results, layout)
        i = j + 1
    return times


def constant_ops(ops, inputs: set[str] | None) -> list[int]:
    """Ops that read nothing the program takes in (made from constants only)."""
    if inputs is None:
        return []
    flow, out = set(inputs), []
    for k, b in enumerate(ops):
        if any(isinstance(v, Value) and v.name in flow for v in b.inputs()):
            flow.update(o.name for o in b.outputs)
        else:
            out.append(k)
    return out


def _fuse(ops, times, shards, i: int, j: int, last_use, results, layout: Layout) -> None:
    made, read, written = set(), {}, 0.0
    for b in ops[i:j + 1]:
        for v in b.inputs():
            if isinstance(v, Value) and v.name not in made:
                read[v.name] = v.numel() * v.dtype.itemsize
        for o in b.outputs:
            made.add(o.name)
            if last_use.get(o.name, -1) > j or o.name in results:
                written += o.numel() * o.dtype.itemsize
    nbytes = (sum(read.values()) + written) / shards[i].divide
    own = [times[k].nbytes for k in range(i, j + 1)]
    if sum(own) == 0:
        return
    g = layout.system
    total = nbytes / (g.hbm_gbs * 1e9 * MEMORY_EFFICIENCY) + KERNEL_LAUNCH_S
    for k, share in zip(range(i, j + 1), own):
        t = times[k]
        times[k] = OpTime(total * share / sum(own), t.flops, nbytes * share / sum(own), "memory")


def in_flash_kernel(b, flash: dict) -> bool:
    """Whether backward op `b` is one of the ops of an SDPA's line (`flash`'s keys) that a flash
    backward kernel runs: it reads no parameter."""
    p = b.provenance
    return p is not None and (p.file, p.line) in flash and \
        not any(isinstance(v, Value) and v.role is ValueRole.PARAM for v in b.inputs())


def _flash_backward(ops, times, flash: dict, layout: Layout) -> None:
    """FusionLens differentiates SDPA into explicit ops (scores, softmax, matmuls); on a GPU the
    backward is a flash kernel: the ops of an SDPA's line that read no parameter become one,
    FLASH_BACKWARD_FLOPS times its forward's FLOPs at ATTENTION_EFFICIENCY."""
    peak = layout.system.bf16_tflops * 1e12 * ATTENTION_EFFICIENCY
    charged = set()
    for k, b in enumerate(ops):
        if not in_flash_kernel(b, flash):
            continue
        line = (b.provenance.file, b.provenance.line)
        if line in charged:
            times[k] = OpTime(0.0, 0.0, 0.0, "view")
        else:
            charged.add(line)
            f = flash[line] * FLASH_BACKWARD_FLOPS
            times[k] = OpTime(f / peak + KERNEL_LAUNCH_S, f, 0.0, "attention")
