"""What a kernel's launch and its compile for a target GPU mean on that GPU's SMs, in plain words.

No torch: the compiler fills `Region.launch` and `Region.static` (fusionlens/executors/triton/
static.py), this module turns them into occupancy, waves and findings ("16 programs on 132 SMs:
12% of the GPU"), and formats them for the hover and the HTML report (docs/kernels.md).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .schema import KernelLaunch, KernelStatic, Region


@dataclass(frozen=True)
class Sm:
    """What bounds how many programs an SM holds (CUDA occupancy calculator, per compute capability)."""

    arch: int  # compute capability: 90 for sm_90
    sms: int
    regs: int = 65536  # registers an SM
    threads: int = 2048  # resident threads an SM
    blocks: int = 32  # resident blocks an SM
    shared: int = 228 * 1024  # shared memory an SM (of which 1 KiB a block is the system's)
    l2_bytes: int = 50 << 20


# by the roofline table's names (fusionlens/report/roofline.py)
SMS = {
    "A100 40GB": Sm(80, 108, shared=164 * 1024, l2_bytes=40 << 20),
    "A100": Sm(80, 108, shared=164 * 1024, l2_bytes=40 << 20),
    "H100 PCIe": Sm(90, 114),
    "H100": Sm(90, 132),
    "H200": Sm(90, 132),
    "L4": Sm(89, 58, threads=1536, blocks=24, shared=100 * 1024, l2_bytes=48 << 20),
    "RTX 4090": Sm(89, 128, threads=1536, blocks=24, shared=100 * 1024, l2_bytes=72 << 20),
}
DEFAULT_GPU = "H100"


def sm_of(gpu: str | None) -> Sm:
    return SMS.get(gpu or DEFAULT_GPU, SMS[DEFAULT_GPU])


def blocks_per_sm(sm: Sm, num_warps: int, regs: int | None, shared: int) -> int:
    """Resident programs an SM: the least of what threads, registers (allocated 256 a warp) and
    shared memory allow."""
    threads = 32 * num_warps
    by_threads = sm.threads // threads
    by_regs = by_threads
    if regs:
        per_warp = math.ceil(regs * 32 / 256) * 256
        by_regs = (sm.regs // per_warp) // num_warps
    by_shared = sm.shared // (shared + 1024) if shared else sm.blocks
    return max(0, min(by_threads, by_regs, by_shared, sm.blocks))


def programs(launch: KernelLaunch) -> int:
    return math.prod(launch.grid) if launch.grid else 0


def complete(static: KernelStatic, launch: KernelLaunch) -> KernelStatic:
    """`static` with blocks_per_sm and waves filled in for its GPU."""
    sm = sm_of(static.gpu)
    resident = blocks_per_sm(sm, launch.num_warps, static.regs, static.shared_bytes)
    return dataclasses.replace(static, blocks_per_sm=resident,
                               waves=round(programs(launch) / (sm.sms * max(resident, 1)), 3))


def size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.0f} {unit}" if n % scale == 0 or n >= 10 * scale else f"{n / scale:.1f} {unit}"
    return f"{n} B"


def findings(launches: list[KernelLaunch], statics: list[KernelStatic], row_bytes: int = 0) -> list[str]:
    """Plain sentences about what would keep the region's kernels from the GPU's bandwidth."""
    out: list[str] = []
    by_name = {s.kernel: s for s in statics}
    main = launches[0] if launches else None
    if main is not None:
        sm = sm_of(statics[0].gpu if statics else None)
        n = programs(main)
        gpu = statics[0].gpu if statics else DEFAULT_GPU
        if n < sm.sms:
            out.append(f"{n} programs on {sm.sms} SMs: {100 * n // sm.sms}% of the {gpu}")
    for launch in launches:
        s = by_name.get(launch.kernel)
        if s is None or s.error:
            if s is not None:
                out.append(f"{launch.kernel} did not compile for {s.arch}: {s.error[:200]}")
            continue
        if s.load_bits is not None and s.load_bits <= 32 and launch is main:
            out.append(f"scalar loads ({s.load_bits}-bit): alignment unknown or a strided input")
        if s.spill_bytes:
            out.append(f"{launch.kernel} spills {s.spill_bytes} bytes a thread to local memory")
        if launch is main and s.passes >= 2 and row_bytes:
            out.append(f"{s.passes} passes over a {size_text(row_bytes)} row")
        if s.blocks_per_sm and s.blocks_per_sm * launch.num_warps < 8 and programs(launch) >= sm_of(s.gpu).sms:
            out.append(f"{launch.kernel}: {s.blocks_per_sm * launch.num_warps} warps an SM (registers or shared "
                       "memory): little to hide memory latency")
    total = sum(s.read_ratio or 0.0 for s in statics)
    if total > 1.25:
        out.append(f"reads {total:.1f}x the bytes the region must read")
    return out


def launch_text(launch: KernelLaunch) -> str:
    blocks = ", ".join(f"{k}={v}" for k, v in launch.blocks.items())
    grid = " x ".join(str(g) for g in launch.grid)
    return (f"{launch.kernel}: grid {grid} ({programs(launch)} programs), {launch.num_warps} warps, "
            f"{launch.num_stages} stage{'s' if launch.num_stages != 1 else ''}" + (f", {blocks}" if blocks else ""))


def static_text(s: KernelStatic) -> str:
    if s.error:
        return f"{s.kernel} on {s.arch}: did not compile ({s.error[:120]})"
    parts = [f"{s.load_bits}-bit loads" if s.load_bits else "no loads",
             f"{s.store_bits}-bit stores" if s.store_bits else "no stores"]
    if s.regs is not None:
        parts.append(f"{s.regs} registers")
    if s.spill_bytes is not None:
        parts.append(f"{s.spill_bytes} B spilled" if s.spill_bytes else "no spills")
    parts += [f"{s.shared_bytes} B shared", f"{s.blocks_per_sm} blocks/SM", f"{s.waves:g} waves"]
    if s.read_ratio is not None:
        parts.append(f"reads {s.read_ratio:.2f}x the least")
    return f"{s.kernel} on {s.arch} ({s.gpu}): " + ", ".join(parts)


def markdown(region: Region) -> list[str]:
    """The hover's lines for a region's kernels: launch, static compile, findings; [] for none."""
    if not region.launch:
        return []
    out = ["**Kernels** (compiled for the target GPU here, nothing run):" if region.static else "**Kernels**:"]
    statics = {s.kernel: s for s in region.static}
    for launch in region.launch:
        out.append(f"- `{launch_text(launch)}`")
        if launch.kernel in statics:
            out.append(f"  - {static_text(statics[launch.kernel])}")
    out += [f"- ⚠ {f}" for f in region.findings]
    return out
