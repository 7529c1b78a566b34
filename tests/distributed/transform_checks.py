"""Run by torch.distributed.run on 2 gloo ranks (tests/test_distributed_transform.py): each
transform of transform_models.TRANSFORMS applied to the model with torch's own API on the
world, a training step compiled by fusionlens.jit, and the collectives its report lists
written (rank 0) to the JSON file named by FUSIONLENS_TRANSFORM_OUT, for the test to compare
with the same transform applied on a mesh with no process group."""

from __future__ import annotations

import json
import os
import sys

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fusionlens  # noqa: E402
import transform_models  # noqa: E402
from runner import run  # noqa: E402

RECORDED: dict[str, list] = {}


def check_real_runs_record_their_collectives():
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("dp",))
    for name, transform in transform_models.TRANSFORMS.items():
        jfn = fusionlens.jit(transform.wrap(transform_models.model(), mesh))
        jfn(transform_models.example()).backward()
        report = fusionlens.last_report(jfn)
        RECORDED[name] = [[c.op, c.program, c.bytes, c.group_size, c.file, c.line] for c in report.collectives]
        assert RECORDED[name], f"{name}: no collective recorded"
    if dist.get_rank() == 0:
        with open(os.environ["FUSIONLENS_TRANSFORM_OUT"], "w", encoding="utf-8") as f:
            json.dump(RECORDED, f)


if __name__ == "__main__":
    run([check_real_runs_record_their_collectives])
