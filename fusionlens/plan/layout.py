"""The plan's parallel layout: the sizes of each group and how they lie on the cluster.

Groups are placed as Megatron-LM places them (its `RankGenerator` order tp-cp-dp-pp): tensor
parallel ranks innermost, on consecutive GPUs of a node, then context parallel, then data
parallel, pipeline stages outermost. A group's footprint on the cluster (how many of its
ranks share a node, over how many nodes) decides which links its collectives cross.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fusionlens.report import comm_model
from fusionlens.report.hardware import System

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Layout:
    """One plan: what `fusionlens plan` takes as options."""

    nodes: int
    gpus_per_node: int
    system: System
    tp: int = 1
    pp: int = 1
    vpp: int = 1  # virtual stages a GPU holds (interleaved 1F1B); 1: plain 1F1B
    cp: int = 1
    dp: int = 1
    sp: bool = False  # sequence parallel beside tensor parallel
    zero: int = 0  # 0: DDP all-reduce; 1, 2, 3: optimizer states, gradients, parameters sharded over dp
    global_batch: int = 0  # sequences a step; 0: one micro-batch a data-parallel rank
    micro_batch: int = 1
    recompute: str = "none"
    reshard_after_forward: bool = True  # ZeRO-3 (FSDP2): gather the parameters again for the backward

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def cluster_name(self) -> str:
        return f"{self.nodes}x{self.gpus_per_node}x{self.system.gpu}"

    @property
    def micro_batches(self) -> int:
        """Micro-batches each data-parallel rank runs a step (gradient accumulation)."""
        return max(self.global_batch // (self.dp * self.micro_batch), 1) if self.global_batch else 1

    @property
    def batch(self) -> int:
        return self.micro_batches * self.micro_batch * self.dp

    def check(self) -> None:
        if self.tp * self.pp * self.cp * self.dp != self.world:
            raise ValueError(f"tp {self.tp} x pp {self.pp} x cp {self.cp} x dp {self.dp} = "
                             f"{self.tp * self.pp * self.cp * self.dp} GPUs, but {self.cluster_name} has {self.world}")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute {self.recompute!r}: one of {', '.join(RECOMPUTE)}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero {self.zero}: one of 0, 1, 2, 3")
        if self.sp and self.tp == 1:
            raise ValueError("sequence parallel (--sp) shards along tensor parallel: it needs --tp 2 or more")
        if self.vpp > 1 and self.pp == 1:
            raise ValueError("virtual stages (--vpp) interleave a pipeline: they need --pp 2 or more")
        if self.global_batch and self.global_batch % (self.dp * self.micro_batch):
            raise ValueError(f"global batch {self.global_batch} is not a multiple of dp {self.dp} x micro-batch "
                             f"{self.micro_batch}")

    def footprint(self, group: str) -> comm_model.Cluster:
        """The links a group's collectives cross: its ranks per node and nodes, as a cluster."""
        size = {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp, "dpcp": self.dp * self.cp}[group]
        inner = {"tp": 1, "cp": self.tp, "dp": self.tp * self.cp, "dpcp": self.tp, "pp": self.tp * self.cp * self.dp}
        stride = inner[group]
        per_node = max(min(self.gpus_per_node // stride, size), 1) if stride < self.gpus_per_node else 1
        nodes = max(size // per_node, 1)
        s = self.system
        intra = comm_model.Link(s.nvlink_name, s.nvlink_gbs, 1e-6)
        inter = comm_model.Link(s.nic_name, s.nic_gbs, 5e-6) if nodes > 1 else None
        return comm_model.Cluster(nodes, per_node, s.gpu, intra, inter)


def parse_cluster(text: str) -> tuple[int, int, str]:
    """`128x8xH100` -> (128, 8, "H100"); `8xH100` is one node (the GPU's name may hold an x)."""
    m = re.fullmatch(r"(?:(\d+)x)?(\d+)x([A-Za-z][\w.-]*)", text.strip(), flags=re.IGNORECASE)
    if m is None:
        raise ValueError(f"cluster {text!r}: NODESxGPUSxGPU (128x8xH100) or GPUSxGPU (8xH100)")
    return int(m.group(1) or 1), int(m.group(2)), m.group(3).upper()
