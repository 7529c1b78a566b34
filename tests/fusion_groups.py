"""Test helper: one FusionGroup of every prim of a function, without the partitioner.

For testing and benchmarking a fusion executor on its own (tests/test_triton*.py,
tests/test_nvfuser.py, benchmarks/bench_fusion.py). `symbolic_group_from_fn` traces on fake
tensors of a `symbols.SymbolEnv` instead, the dims asked for symbolic: a dynamic program's
group (tests/test_symbolic_executors.py).
"""

from __future__ import annotations

import math

import torch
from torch.utils import _pytree as pytree

from fusionlens.frontend import tracer as frontend
from fusionlens.middle import passes
from fusionlens.middle.contract import FusionGroup, source_comments
from fusionlens.executors import symbolic
from fusionlens.ir.trace import OpTag, external_inputs, values_in
from fusionlens.ir.vocabulary import ValueRole


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
    # by the example's sizes: comparing symbolic ones would record guards
    domain = max(shapes, key=lambda s: (math.prod(symbolic.example_shape(s)), len(s)))
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


def symbolic_group_from_fn(fn, *shapes, dtype: torch.dtype = torch.float32, sizes: dict[str, int] | None = None,
                           before=None, gid: str = "R0") -> tuple:
    """(group, env, pick): `fn` traced on fake tensors of `shapes` (one a positional argument),
    where a dim given by name (`(2, "n", 8)`) is symbolic, its example size `sizes[name]`
    (n=5, m=6 by default); `before(*tensors)`, when given, runs untraced first and its results
    are `fn`'s arguments (a reshape merging a symbolic dim: an input of size 8*s0).
    `pick(tensors)` gives the group's input tensors for real tensors of `shapes`. Each named dim
    of each argument gets a symbol of its own; the trace unifies those of one name where the
    code combines them (a guard `s1 == s0`), as torch does."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    from fusionlens.ir import symbols

    sizes = {"n": 5, "m": 6, **(sizes or {})}
    env = symbols.SymbolEnv()
    fakes = []
    for shape in shapes:
        example = torch.empty([sizes[d] if isinstance(d, str) else d for d in shape], dtype=dtype)
        context = StatelessSymbolicContext(dynamic_sizes=[
            DimDynamic.DYNAMIC if isinstance(d, str) else DimDynamic.STATIC for d in shape])
        fakes.append(env.fake.from_tensor(example, symbolic_context=context))
    prepare = before or (lambda *ts: ts)
    with env.fake:
        args = list(prepare(*fakes))
        group, inputs = group_from_fn(fn, *args, gid=gid)
    where = [next(i for i, a in enumerate(args) if a is t) for t in inputs]
    return group, env, lambda tensors: [list(prepare(*tensors))[i] for i in where]


def partitioned_group_from_fn(fn, *args, gid: str = "R0", executor=None) -> tuple:
    """(group, its input tensors in order, the index in `group.outputs` of each of `fn`'s results):
    the one region the partitioner makes of `fn` with `executor` (Triton's by default), as a
    program's would be, so a two-axis group (row and column reductions: a norm's backward) too;
    ValueError when `fn` is not one region."""
    from fusionlens.middle import fusion

    if executor is None:
        from fusionlens.executors.triton import EXECUTOR as executor
    traced = frontend.trace(fn, args, {}, getattr(fn, "__name__", "fn"))
    flat = fusion.prepare(passes.optimise(passes.decompose(traced.trace)), [executor])
    nodes, make_group = fusion.clusters(flat, [executor])
    regions = [n for n in nodes if isinstance(n, fusion.Cluster)]
    if len(regions) != 1 or len(nodes) != 1:
        raise ValueError(f"{len(regions)} regions and {len(nodes) - len(regions)} other ops, not one region")
    group = make_group(regions[0], gid)
    user = [v for v in traced.trace.inputs if v.role == "input"]
    given = [x for x in pytree.tree_leaves(args) if isinstance(x, torch.Tensor)]
    tensors = {v.name: t for v, t in zip(user, given)}
    tensors.update(traced.constants)
    names = [o.name for o in group.outputs]
    return group, [tensors[v.name] for v in group.inputs], [names.index(v.name) for v in values_in(flat.output)]


def layer_norm_backward(x, w, dy):
    """A LayerNorm's backward that recomputes its statistics from x (a training step's reads the
    forward's saved mean and rstd instead: composite_rules.layer_norm_with_stats): dx by rows, dw
    and db by columns (a two-axis group once partitioned: partitioned_group_from_fn); rows of any
    number of leading dims, the columns summed over all of them."""
    xf, dyf = x.float(), dy.float()
    var, mean = torch.var_mean(xf, -1, correction=0, keepdim=True)
    rstd = torch.rsqrt(var + 1e-5)
    xhat = (xf - mean) * rstd
    wdy = dyf * w.float()
    dx = (wdy - xhat * (xhat * wdy).mean(-1, keepdim=True) - wdy.mean(-1, keepdim=True)) * rstd
    rows = tuple(range(x.ndim - 1))
    return dx.to(x.dtype), (dyf * xhat).sum(rows).to(w.dtype), dyf.sum(rows).to(w.dtype)


def reductions_not_reading_a_cotangent(backward) -> list[str]:
    """The reductions of a backward trace that read nothing made from its cotangents (its inputs
    that are not saved values): a statistic recomputed from the forward's values, where a
    backward that reads saved statistics has none."""
    ops = passes.flatten(backward.bound_symbols)
    from_dy = {v.name for v in backward.inputs if v.role is not ValueRole.SAVED}
    lonely = []
    for b in ops:
        reads_dy = any(v.name in from_dy for v in b.inputs())
        if OpTag.REDUCTION in b.sym.tags and not reads_dy:
            lonely.append(f"{b.sym.name} of {b.inputs()[0].name}")
        if reads_dy:
            from_dy.update(o.name for o in b.outputs)
    return lonely
