"""One FusionGroup from a whole function: trace, decompose, flatten to prims, and take
every prim as one region (the domain is the largest shape; reductions fix the reduced dims).

For testing and benchmarking the Triton generator on its own; the real partitioner is
compiler/fusion.py. Raises ValueError when the function is not a single fusible region.
"""

from __future__ import annotations

import math

import torch
from torch.utils import _pytree as pytree

from compiler import frontend, passes
from compiler.fusion import FusionGroup
from compiler.ir import display_path, values_in


def group_from_fn(fn, *args, gid: str = "R0") -> tuple:
    """(FusionGroup, the group's input tensors in order)."""
    traced = frontend.trace(fn, args, {}, getattr(fn, "__name__", "fn"))
    trace = passes.optimise(passes.decompose(traced.trace))
    bsyms = passes.flatten(trace.bound_symbols)
    for b in bsyms:
        if b.sym.kind != "prim":
            raise ValueError(f"{b.sym.name} is not decomposed into prims ({b.note})")
    produced = {o.name for b in bsyms for o in b.outputs}
    inputs, seen = [], set()
    for b in bsyms:
        for v in b.inputs():
            if v.name not in produced and v.name not in seen:
                seen.add(v.name)
                inputs.append(v)
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
    lines, seen_lines = [], set()
    for b in bsyms:
        p = b.provenance
        if p is not None and (p.file, p.line) not in seen_lines:
            seen_lines.add((p.file, p.line))
            lines.append(f"{display_path(p.file)}:{p.line}  {p.source().strip()}")
    group = FusionGroup(gid, bsyms, inputs, outputs, tuple(domain), next(iter(rdims), ()), lines)
    user = [v for v in traced.trace.inputs if v.role == "input"]
    tensors = {v.name: t for v, t in zip(user, _tensors(fn, args))}
    tensors.update(traced.constants)
    ins = [tensors[v.name] for v in inputs]
    return group, ins


def _tensors(fn, args):
    return [x for x in pytree.tree_leaves(args) if isinstance(x, torch.Tensor)]
