"""Sharded data parallel training on 2 ranks (FSDP2): `fusionlens compile examples/fsdp_train.py`
launches them (torch.distributed.run; gloo on a CPU, NCCL on GPUs) and prints one report merged
over them.

`fsdp_mlp` is a small MLP after `fully_shard` of each block and of the root, compiled for
training: each rank's program takes its shards of the parameters, all-gathers each block's at
the line that calls the block (issued one block ahead, so that fc2's all-gather overlaps fc1's
compute), and reduce-scatters each block's gradients in the backward as soon as they are made
(docs/distributed.md)."""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import compiler


def _device() -> torch.device:
    # the launcher picks NCCL where each rank has a GPU of its own (and makes it the current one)
    nccl = dist.get_backend() == "nccl"
    return torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")


class MLP(nn.Module):
    def __init__(self, dim=64, hidden=256):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))  # fc1's all-gather; fc2's issued here too
        return self.fc2(h)  # fc2's all-gather waited for here


@compiler.example(nproc=2, train=True)
def fsdp_mlp():
    torch.manual_seed(0)  # the same initial parameters on every rank: each keeps its shard of them
    mesh = init_device_mesh(_device().type, (dist.get_world_size(),))
    model = MLP().to(_device())
    for block in (model.fc1, model.fc2):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    torch.manual_seed(1 + dist.get_rank())  # each rank its own batch
    return model, (torch.randn(32, 64, device=_device()),)
