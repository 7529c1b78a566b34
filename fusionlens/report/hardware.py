"""The systems a plan is costed on: one row a GPU in its DGX (or HGX) node, every figure from a
datasheet, and the same figures read from a user's file (`--hardware FILE`). No torch.

Figures per GPU: dense BF16 tensor-core peak, HBM bandwidth and capacity, streaming
multiprocessors (what a GEMM's tiles are spread over), NVLink and NIC bandwidth each way,
and whether the NVSwitch reduces in the switch (NVLS, SHARP in NVLink 4 and later).
docs/plan.md cites each.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from fusionlens.report import comm_model, roofline


@dataclass(frozen=True)
class System:
    gpu: str  # the key a cluster names: "8x8xH100" -> "H100"
    system: str  # "DGX H100"
    bf16_tflops: float  # dense BF16 tensor-core peak of one GPU
    hbm_gbs: float  # HBM bandwidth, GB/s
    hbm_gib: float  # HBM capacity, GiB (what a plan must fit in; datasheets print GB: 141 GB is 140 GiB)
    sms: int  # streaming multiprocessors: the GEMM model's waves
    nvlink_gbs: float  # GPU to GPU in a node, GB/s each way
    nic_gbs: float  # one NIC per GPU between nodes, GB/s each way
    gpus_per_node: int = 8
    nvls: bool = False  # NVSwitch reduces in the switch (NVLink SHARP): all-reduce moves n, not 2n(p-1)/p
    nvlink_name: str = "NVLink"
    nic_name: str = "InfiniBand"


def _row(gpu: str, hbm_gib: float, sms: int, nvls: bool) -> System:
    node = next(n for n in comm_model.NODES if n.gpu == gpu)
    peak = roofline.find(gpu)
    bf16, hbm = (peak.bf16_tflops, peak.hbm_gbs) if peak is not None else (2250.0, 8000.0)  # B200: below
    return System(gpu, node.system, bf16, hbm, hbm_gib, sms, node.nvlink.gbs, node.network.gbs, node.gpus,
                  nvls, node.nvlink.name, node.network.name)


# A100 SXM4 80GB (DGX A100: NVLink 3, 8 HDR 200 Gb/s NICs), H100 SXM5 80GB and H200 SXM 141GB
# (DGX H100/H200: NVLink 4 with NVLS, 8 NDR 400 Gb/s), B200 180GB (DGX B200: NVLink 5, 8 NDR
# 400 Gb/s): dense BF16 2.25 PFLOP/s and 8 TB/s HBM3e (the roofline table has no B200 row).
SYSTEMS = (
    _row("A100", 80, 108, False),
    _row("H100", 80, 132, True),
    _row("H200", 140, 132, True),  # 141 GB
    _row("B200", 179, 148, True),  # 180 GB
)
FIELDS = ("gpu", "bf16_tflops", "hbm_gbs", "hbm_gib", "nvlink_gbs", "nic_gbs")  # what a --hardware file must give


def find(name: str, extra: tuple[System, ...] = ()) -> System:
    for s in extra + SYSTEMS:
        if s.gpu.lower() == name.lower():
            return s
    known = ", ".join(s.gpu for s in extra + SYSTEMS)
    raise ValueError(f"unknown GPU {name!r} (known: {known}; describe others with --hardware FILE)")


def load(path: str) -> System:
    """A system from a JSON file: {"gpu": "MI300X", "bf16_tflops": 1307, "hbm_gbs": 5300,
    "hbm_gib": 192, "nvlink_gbs": 64, "nic_gbs": 50} (optional: sms, gpus_per_node, nvls)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return parse(data, path)


def parse(data: dict, where: str = "hardware") -> System:
    missing = [k for k in FIELDS if k not in data]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)} (a hardware file gives {', '.join(FIELDS)})")
    unknown = set(data) - set(asdict(SYSTEMS[0]))
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    numbers = {k: v for k, v in data.items() if k not in ("gpu", "system", "nvls", "nvlink_name", "nic_name")}
    if any(not isinstance(v, (int, float)) or v <= 0 for v in numbers.values()):
        raise ValueError(f"{where}: every figure must be a positive number")
    data = {"system": f"{data['gpu']} (from {where})", "sms": 132, **data}
    return System(**data)
