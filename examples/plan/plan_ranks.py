"""The same small model planned and run on 4 gloo ranks: each target builds its DeviceMesh and
parallelizes itself with torch's own API. `fusionlens compile --nproc 4` runs them and records
their collectives; `fusionlens plan --cluster 1x4xH100` plans them under a fake process group
(fusionlens/plan/own.py). tests/test_plan_ranks.py checks that both name the same collectives.

    fusionlens compile examples/plan/plan_ranks.py --nproc 4 --json
    fusionlens plan examples/plan/plan_ranks.py --target tensor_parallel --cluster 1x4xH100
"""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel

import fusionlens

HIDDEN, BATCH, SEQ = 16, 2, 8


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(HIDDEN, 4 * HIDDEN)
        self.fc2 = torch.nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(x)))  # the MLP's two Linears


class Stack(torch.nn.Module):
    def __init__(self, layers: int = 2):
        super().__init__()
        self.embed = torch.nn.Linear(HIDDEN, HIDDEN)  # before the blocks: their input needs a gradient
        self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return x.square().mean()  # the loss


def _model_and_batch():
    torch.manual_seed(0)
    model = Stack()
    torch.manual_seed(1 + (dist.get_rank() if dist.is_initialized() else 0))
    return model, torch.randn(BATCH, SEQ, HIDDEN)


def _mesh():
    return init_device_mesh("cpu", (dist.get_world_size() // 2, 2), mesh_dim_names=("dp", "tp"))


@fusionlens.example(train=True, nproc=4, plan=dict(cluster="1x4xH100"))
def tensor_parallel():
    """Megatron's pair in each block on the mesh's tp dimension (2 ranks)."""
    model, x = _model_and_batch()
    parallelize_module(model, _mesh()["tp"], {"blocks.*.fc1": ColwiseParallel(), "blocks.*.fc2": RowwiseParallel()})
    return model, (x,)


@fusionlens.example(train=True, nproc=4, plan=dict(cluster="1x4xH100"))
def data_parallel():
    """DDP over the 4 ranks. (torch's DDP refuses a tensor-parallel module's DTensor parameters:
    tp=2 with dp=2 is the tensor_parallel target's mesh, its gradients left unsynchronised.)"""
    model, x = _model_and_batch()
    return DistributedDataParallel(model), (x,)


@fusionlens.example(train=True, nproc=4, plan=dict(cluster="1x4xH100"))
def data_parallel_buckets():
    """DDP over the 4 ranks with 4 KiB buckets: five all-reduces, each issued where the backward
    finishes its bucket's last gradient (the blocks' line, then the embedding's)."""
    model, x = _model_and_batch()
    return DistributedDataParallel(model, bucket_cap_mb=4 / 1024), (x,)


@fusionlens.example(train=True, nproc=4, plan=dict(cluster="1x4xH100"))
def zero3():
    """FSDP2 (ZeRO-3) over all 4 ranks: each block a unit, then the root."""
    model, x = _model_and_batch()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("dp",))
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    return model, (x,)
