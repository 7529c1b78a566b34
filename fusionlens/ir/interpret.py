"""The op-by-op interpreter: the reference semantics every executor is compared with."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils import _pytree as pytree

from fusionlens.ir.trace import Value
from fusionlens.ir.sizes import evaluate, symbol_values


def run_ops(bsyms, env: dict, sizes: dict[str, int] | None = None) -> dict:
    """Run ops one by one with their torch impls, reading and writing `env` (name -> tensor).
    The reference semantics every executor is compared with. `sizes`: a dynamic program's int
    symbols' values (its SIZES global); the others are read from the tensors in `env`."""
    values = {**symbol_values(*_symbolic_inputs(bsyms, env)), **(sizes or {})} if sizes or _has_symbols(bsyms) else {}
    read = lambda x: env[x.name] if isinstance(x, Value) else evaluate(x, values) if values else x  # noqa: E731
    with torch.no_grad():
        for b in bsyms:
            args, kwargs = pytree.tree_map(read, (b.args, b.kwargs))
            result = b.sym.impl(*args, **kwargs)
            flat = [result] if b.out_spec is None else [x for x in pytree.tree_leaves(result)
                                                         if isinstance(x, torch.Tensor)]
            for v, x in zip(b.outputs, flat):
                env[v.name] = x
    return env


def _has_symbols(bsyms) -> bool:
    return any(v.symbolic for b in bsyms for v in b.outputs)


def _symbolic_inputs(bsyms, env: dict) -> tuple[list[Value], list]:
    """The Values `bsyms` read that `env` holds (a dynamic program's inputs), and their tensors."""
    seen: dict[str, Value] = {}
    for b in bsyms:
        for v in b.inputs():
            if v.name in env and v.symbolic:
                seen.setdefault(v.name, v)
    return list(seen.values()), [env[n] for n in seen]


def ops_callable(bsyms, inputs, outputs) -> Callable:
    """A function of the `inputs` tensors returning the `outputs` tuple, running `bsyms`."""
    bsyms, names, results = list(bsyms), [v.name for v in inputs], [v.name for v in outputs]

    def run(*tensors):
        env = run_ops(bsyms, dict(zip(names, tensors)))
        return tuple(env[n] for n in results)
    return run
