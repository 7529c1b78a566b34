"""Data parallel training on 2 ranks: `fusionlens compile examples/ddp_train.py` launches them
(torch.distributed.run; gloo on a CPU, NCCL on GPUs) and prints one report merged over them.

`ddp_mlp` is a small MLP under DistributedDataParallel, compiled for training: each rank runs
the compiled module, whose backward issues the gradients' all-reduces bucket by bucket as they
fill (two buckets here: the first overlaps the rest of the backward; docs/distributed.md).
`reduced` calls dist.all_reduce itself: a collective traced at its line, between two fusion
regions."""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

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
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


@compiler.example(nproc=2, train=True)
def ddp_mlp():
    torch.manual_seed(0)  # the same initial parameters on every rank (DDP broadcasts rank 0's anyway)
    model = DDP(MLP().to(_device()), bucket_cap_mb=0.1)  # fc2 and fc1.weight, then fc1.bias
    torch.manual_seed(1 + dist.get_rank())  # each rank its own batch
    return model, (torch.randn(32, 64, device=_device()),)


def reduced(x):
    y = x * 2 + 1
    dist.all_reduce(y)  # summed over the ranks: the regions before and after it are separate kernels
    return y.sin()


@compiler.example(nproc=2)
def all_reduce_sum():
    torch.manual_seed(dist.get_rank())
    return reduced, (torch.randn(1024, device=_device()),)
