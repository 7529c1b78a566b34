"""Tensor parallel on 2 ranks (parallelize_module): `fusionlens compile examples/tp_mlp.py`
launches them (torch.distributed.run; gloo on a CPU, NCCL on GPUs) and prints one report merged
over them.

The MLP's fc1 is ColwiseParallel (each rank computes its half of the hidden features) and fc2
RowwiseParallel (each rank multiplies its half and the halves are summed): each rank's program
is Megatron-LM's, the all-reduce of fc2's partial products at the line that calls fc2.
`tp_mlp` compiles it for inference; `tp_mlp_train` for training, its input requiring grad, so
that the backward all-reduces the gradient of fc1's replicated input too (docs/distributed.md)."""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

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
        h = torch.nn.functional.gelu(self.fc1(x))  # training: the gradient of x all-reduced here
        return self.fc2(h)  # the sum of the ranks' partial products


def _parallel() -> nn.Module:
    torch.manual_seed(0)  # the same parameters on every rank (distribute_tensor sends rank 0's)
    mesh = init_device_mesh(_device().type, (dist.get_world_size(),))
    return parallelize_module(MLP().to(_device()), mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})


@compiler.example(nproc=2)
def tp_mlp():
    model = _parallel()
    torch.manual_seed(1)  # the same batch on every rank: tensor parallel splits the model, not the data
    return model, (torch.randn(32, 64, device=_device()),)


@compiler.example(nproc=2, train=True)
def tp_mlp_train():
    model = _parallel()
    torch.manual_seed(1)
    return model, (torch.randn(32, 64, device=_device(), requires_grad=True),)
