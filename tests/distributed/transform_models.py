"""The small models a mesh-applied transform and a real 2-rank run both compile
(tests/test_distributed_transform.py): one file, so that their collectives' lines are the same."""

from __future__ import annotations

import torch

from fusionlens.distributed.transform import DDP, FSDP2, Style, TensorParallel


class Block(torch.nn.Module):
    """Two Linears and a GELU, then a loss: a training step's forward."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 40)
        self.fc2 = torch.nn.Linear(40, 16)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))  # FC1
        return self.fc2(h).square().mean()  # FC2


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return Block()


def example() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(6, 16, requires_grad=True)  # requires grad: tensor parallel's f all-reduces its gradient


# each transform as the real run applies it (torch's own API, on the world) and as a Transform
TRANSFORMS = {
    "ddp": DDP("dp", bucket_cap_mb=0.001),  # a small cap: more than one bucket
    "fsdp2": FSDP2("dp", units=("fc1", "fc2")),
    "tensor_parallel": TensorParallel("dp", {"fc1": Style.COLWISE, "fc2": Style.ROWWISE}),
}
