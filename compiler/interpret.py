"""The op-by-op interpreter: the reference semantics every executor is compared with."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils import _pytree as pytree

from compiler.ir import Value


def run_ops(bsyms, env: dict) -> dict:
    """Run ops one by one with their torch impls, reading and writing `env` (name -> tensor).
    The reference semantics every executor is compared with."""
    read = lambda x: env[x.name] if isinstance(x, Value) else x  # noqa: E731
    with torch.no_grad():
        for b in bsyms:
            args, kwargs = pytree.tree_map(read, (b.args, b.kwargs))
            result = b.sym.impl(*args, **kwargs)
            flat = [result] if b.out_spec is None else [x for x in pytree.tree_leaves(result)
                                                         if isinstance(x, torch.Tensor)]
            for v, x in zip(b.outputs, flat):
                env[v.name] = x
    return env


def ops_callable(bsyms, inputs, outputs) -> Callable:
    """A function of the `inputs` tensors returning the `outputs` tuple, running `bsyms`."""
    bsyms, names, results = list(bsyms), [v.name for v in inputs], [v.name for v in outputs]

    def run(*tensors):
        env = run_ops(bsyms, dict(zip(names, tensors)))
        return tuple(env[n] for n in results)
    return run
