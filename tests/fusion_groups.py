"""Test helper: one FusionGroup of every prim of a function, without the partitioner.

For testing and benchmarking a fusion executor on its own (tests/test_triton*.py,
tests/test_nvfuser.py, benchmarks/bench_fusion.py).
"""

from __future__ import annotations

import math

import torch
from torch.utils import _pytree as pytree

from compiler import frontend, passes
from compiler.contract import FusionGroup, source_comments
from compiler.ir import external_inputs, values_in


def group_from_fn(fn, *args, gid: str = "R0") -> tuple:
    """(group, its input tensors in order); raises ValueError when `fn` is not one fusible region."""
    traced = frontend.trace(fn, args, {}, getattr(fn, "__name__", "fn"))
    trace = passes.optimise(passes.decompose(traced.trace))
    bsyms = passes.flatten(trace.bound_symbols)
    for b in bsyms:
        if b.sym.kind != "prim":
            raise ValueError(f"{b.sym.name} is not decomposed into prims ({b.note})")
    produced = {o.name for b in bsyms for o in b.outputs}
    inputs = external_inputs(bsyms)
    outputs = []
    for v in values_in(trace.output):
        if v.name in produced and all(v.name != o.name for o in outputs):
            outputs.append(v)
    shapes = [tuple(v.shape) for b in bsyms for v in list(b.inputs()) + list(b.outputs)]
    domain = max(shapes, key=lambda s: (math.prod(s), len(s)))
    rdims = set()
    for b in bsyms:
        if "reduction" in b.sym.tags:
            domain = tuple(b.args[0].shape)
            rdims.add(tuple(sorted(b.args[1])))
    if len(rdims) > 1:
        raise ValueError(f"reductions over different dims {sorted(rdims)}")
    group = FusionGroup(gid, bsyms, inputs, outputs, tuple(domain), next(iter(rdims), ()),
                        source_comments(bsyms))
    user = [v for v in traced.trace.inputs if v.role == "input"]
    given = [x for x in pytree.tree_leaves(args) if isinstance(x, torch.Tensor)]
    tensors = {v.name: t for v, t in zip(user, given)}
    tensors.update(traced.constants)
    return group, [tensors[v.name] for v in inputs]
