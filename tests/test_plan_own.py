"""A target's own parallelism planned (issue 28 part 2; fusionlens/plan/own.py): its
`parallelize_module` plan is what is sharded, and a torchtitan-style target that builds its
DeviceMesh and parallelizes itself plans under a fake process group, with no ranks."""

from __future__ import annotations

import os

import plan_targets
import torch

from fusionlens.driver import targets as targets_mod
from fusionlens.plan import api
from fusionlens.report.discovery import find_targets

OWN = os.path.join(plan_targets.EXAMPLES, "plan_own.py")


def _plan(name: str, **options):
    return plan_targets.plan(OWN, name, **options)


def test_the_targets_own_plan_shards_exactly_its_linears():
    """Only the MLP is parallel in the target's plan: fc1 column, fc2 row, attention whole."""
    import torch.distributed as dist

    rep = _plan("gpt_mlp_tp")
    assert not dist.is_initialized()  # the fake process group was the example's only
    column = [n.split(" ")[0] for n in rep.linears["column"]]
    row = [n.split(" ")[0] for n in rep.linears["row"]]
    assert column == ["p_blocks_0_fc1_weight"] and row == ["p_blocks_0_fc2_weight"]
    assert rep.options["tp"] == 4 and rep.options["dp"] == 2  # the mesh's tp; dp what the cluster leaves
    tp_lines = sorted({c.line for c in rep.collectives if c.group == "tp" and c.line})
    assert tp_lines == [42, 43]  # fc1's input gradient, fc2's output: no embedding, no attention
    hidden, layers, vocab, seq = 1024, 4, 8192, 512
    mlp = 2 * 4 * hidden * hidden  # fc1 and fc2 weights, sharded 4 ways
    rest = layers * (3 * hidden * hidden + hidden * hidden) + (vocab + seq) * hidden  # whole on every GPU
    vectors = layers * (4 * hidden + hidden + 3 * hidden + hidden + 4 * hidden) + 2 * hidden
    params = (layers * mlp / 4 + rest + vectors) * 2  # bf16
    assert abs(rep.memory_gib.params * 2**30 - params) / params < 1e-3
    # the planner's own inference on the same model shards attention and the embedding too
    inferred = _infer_same_model(tp=4)
    assert len(inferred.linears["column"]) > 1 and inferred.memory_gib.params < rep.memory_gib.params


def _infer_same_model(**options):
    from plan_gpt import gpt

    with torch.device("meta"):
        model, args = gpt(1024, 16, 4, micro_batch=2, seq=512, vocab=8192)
    return api.plan(model, *args, cluster="1x8xH100", global_batch=16, **options)


def test_a_torchtitan_style_target_plans_without_ranks():
    """init_device_mesh + parallelize_module + fully_shard inside the target, as torchtitan's
    parallelize_llama: its world is the planned cluster's 32 GPUs, faked; its plan is costed."""
    import torch.distributed as dist

    rep = _plan("gpt_titan")
    assert not dist.is_initialized()
    o = rep.options
    assert (o["tp"], o["dp"], o["zero"]) == (8, 4, 3) and not o["sp"]
    assert len(rep.linears["column"]) == 2 and len(rep.linears["row"]) == 2
    dp = {c.kind for c in rep.collectives if c.group == "dp"}
    assert dp == {"all_gather_into_tensor", "reduce_scatter_tensor"}
    assert any("own parallelism" in n for n in rep.notes)
    # the tied output layer is left replicated by its plan: no vocab-parallel loss, no embedding all-reduce
    assert not any(c.line in (59, 62) for c in rep.collectives if c.group == "tp")
    # another world: the same target builds its mesh from what it finds
    rep2 = _plan("gpt_titan", cluster="8x8xH100", global_batch=64)
    assert (rep2.options["tp"], rep2.options["dp"]) == (8, 8)


def test_example_imports_resolve():
    """The target file itself is ordinary code: discovery finds both targets with their plans."""
    with open(OWN, encoding="utf-8") as f:
        found = {t.name: t.plan for t in find_targets(f.read(), OWN)}
    assert found["gpt_titan"]["cluster"] == "4x8xH100" and targets_mod is not None
