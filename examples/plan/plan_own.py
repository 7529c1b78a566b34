"""Targets that parallelize themselves, as torchtitan's `parallelize_llama` does: they build a
DeviceMesh from the world they find and call torch's `parallelize_module` and `fully_shard`.
`fusionlens plan` runs them under a fake process group of the planned world size (no ranks) and
costs *their* plan (fusionlens/plan/own.py): only the Linears they shard are sharded.

    fusionlens plan examples/plan/plan_own.py --target gpt_mlp_tp --cluster 1x8xH100
    fusionlens plan examples/plan/plan_own.py --target gpt_titan --cluster 4x8xH100 --global-batch 64
"""

import torch
import torch.distributed as dist
from plan_gpt import gpt
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import fusionlens


def mlp_parallel(model, tp: int):
    """Tensor parallel on the MLPs only (attention replicated), on a mesh of `tp` ranks."""
    mesh = init_device_mesh("cuda", (dist.get_world_size() // tp, tp), mesh_dim_names=("dp", "tp"))
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    return model


def parallelize_gpt(model, tp: int):
    """torchtitan's recipe on a GPT: Megatron's pairs in every block, then FSDP2 over the
    data-parallel ranks, block by block and the root."""
    mesh = init_device_mesh("cuda", (dist.get_world_size() // tp, tp), mesh_dim_names=("dp", "tp"))
    plan = {"qkv": ColwiseParallel(), "proj": RowwiseParallel(), "fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], plan)
        fully_shard(block, mesh=mesh["dp"], reshard_after_forward=True)
    fully_shard(model, mesh=mesh["dp"], reshard_after_forward=False)
    return model


@fusionlens.example(train=True, plan=dict(cluster="1x8xH100", global_batch=16))
def gpt_mlp_tp():
    with torch.device("meta"):
        model, args = gpt(1024, 16, 4, micro_batch=2, seq=512, vocab=8192)
    return mlp_parallel(model, tp=4), args


@fusionlens.example(train=True, plan=dict(cluster="4x8xH100", global_batch=64))
def gpt_titan():
    with torch.device("meta"):
        model, args = gpt(1024, 16, 4, micro_batch=1, seq=512, vocab=8192)
    return parallelize_gpt(model, tp=8), args
