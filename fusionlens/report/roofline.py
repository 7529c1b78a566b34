"""Rooflines: the least time a region can take on a GPU, from its cost and the GPU's peaks.

    min_ms = max(bytes / peak bandwidth, flops / peak FLOP/s)

Plain arithmetic and a table, no torch: the compiler fills the report's rooflines with it,
and the language server checks its `fusionlens.targetGpu` setting against the same table.
Every figure's datasheet is cited in docs/roofline.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusionlens.report.schema import Roofline


@dataclass(frozen=True)
class Gpu:
    name: str  # the table's key: what settings, flags and reports say ("H100")
    hbm_gbs: float  # memory bandwidth, GB/s (10**9 bytes a second)
    fp32_tflops: float  # FP32 on CUDA cores (no tensor cores)
    tf32_tflops: float  # TF32 tensor cores, dense (datasheets print 2x "with sparsity")
    bf16_tflops: float  # BF16 (and FP16) tensor cores with FP32 accumulate, dense
    aliases: tuple[str, ...] = ()  # substrings of torch.cuda.get_device_name() that mean this GPU


# Most specific first: "A100-SXM4-40GB" must not be taken for the 80 GB part.
GPUS = (
    Gpu("A100 40GB", 1555, 19.5, 156, 312, ("A100-SXM4-40GB", "A100-PCIE-40GB", "A100 40GB")),
    Gpu("A100", 2039, 19.5, 156, 312, ("A100",)),  # SXM4 80GB
    Gpu("H100 PCIe", 2000, 51, 378, 756, ("H100 PCIE",)),
    Gpu("H100", 3350, 67, 494.5, 989.5, ("H100",)),  # SXM5 80GB
    Gpu("H200", 4800, 67, 494.5, 989.5, ("H200",)),  # SXM 141GB
    Gpu("L4", 300, 30.3, 60, 121, ("L4",)),
    Gpu("RTX 4090", 1008, 82.6, 82.6, 165.2, ("RTX 4090",)),
)
DEFAULT_TARGET = "H100"
MATH = ("fp32", "tf32", "bf16")  # which peak bounds a region's FLOPs (fusionlens/middle/cost.py decides)



def names() -> list[str]:
    return [g.name for g in GPUS]


def find(name: str | None) -> Gpu | None:
    """The table's GPU for a key ("h100") or a device name ("NVIDIA H100 80GB HBM3"), else None."""
    if not name:
        return None
    wanted = " ".join(name.upper().replace("_", " ").split())
    exact = next((g for g in GPUS if g.name.upper() == wanted), None)
    if exact is not None:
        return exact
    # "L4" must match the word, not a part of "GL40": compare with spaces around the alias
    padded = f" {wanted.replace('-', ' ')} "
    return next((g for g in GPUS if any(f" {a.upper().replace('-', ' ')} " in padded for a in g.aliases)),
                None)


def target_name(name: str | None = None) -> str:
    """The GPU estimates are for where none runs: `name` (CompileOptions.gpu, which
    FUSIONLENS_GPU sets at the entry points), else H100."""
    return name or DEFAULT_TARGET


def peak_tflops(gpu: Gpu, math: str) -> float:
    return {"fp32": gpu.fp32_tflops, "tf32": gpu.tf32_tflops, "bf16": gpu.bf16_tflops}[math]


def roofline(nbytes: int, flops: int, math: str, gpu: Gpu, estimate: bool,
             measured_ms: float | None = None) -> Roofline:
    """The region's roofline on `gpu`. `measured_ms`: its median on that very GPU (ignored for
    an estimate): pct_of_peak = 100 * min_ms / measured_ms."""
    tflops = peak_tflops(gpu, math)
    memory_ms = nbytes / (gpu.hbm_gbs * 1e9) * 1e3
    compute_ms = flops / (tflops * 1e12) * 1e3
    min_ms = max(memory_ms, compute_ms)
    pct = None
    if not estimate and measured_ms:
        pct = round(100 * min_ms / measured_ms, 2)
    return Roofline(gpu.name, gpu.hbm_gbs, tflops, "compute" if compute_ms > memory_ms else "memory",
                    round(min_ms, 9), pct, estimate, math)


def headroom_ms(timed_ms: float | None, r: Roofline | None) -> float | None:
    """What can be won: the measured time minus the roofline minimum, when both are of the
    same GPU (None for an estimate: the time was measured elsewhere)."""
    if r is None or r.estimate or timed_ms is None:
        return None
    return max(timed_ms - r.min_ms, 0.0)
