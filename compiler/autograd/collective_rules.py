"""Backward rules of the collectives a program issues itself (rules.lookup reads RULES).

Each rule is a function of its own, per collective: (forward op, cotangents of its outputs) ->
[(input Value, its cotangent)], recording the backward's ops (collectives among them) under
the forward op's line.
"""

from __future__ import annotations

import math

from compiler import fsdp, tensor_parallel
from compiler.autograd.torch_rules import Rule
from compiler.ir import BoundSymbol, Symbol, Value
from compiler.ops import prims as P


# --- FSDP2 (compiler/fsdp.py) -----------------------------------------------------------------

def fsdp_all_gather(b: BoundSymbol, cots: list[Value | None]) -> list[tuple[Value, Value]]:
    """A unit's all-gather: its gradient flows through its wait (which names the buffer sent),
    never through the issued tensor, which only the wait reads."""
    return []


def fsdp_wait(b: BoundSymbol, cots: list[Value | None]) -> list[tuple[Value, Value]]:
    """An all-gather's wait (it names the buffer sent and the group): each rank's gradient of
    the buffer it sent is the mean over the ranks of their gradients of the gathered buffer,
    reduce-scattered (FSDP2's default reduction) and issued here, where the unit's last
    gradient is made (the all-gather itself sits a unit earlier: the prefetch). Not waited for
    here: the copy-in's rule, last in the backward, waits for it. A wait of nothing gathered
    hands its cotangent on."""
    (g,) = cots
    if g is None:
        return []
    if len(b.args) == 1:
        return [(b.args[0], g)]
    _, flat, group_size, group_name = b.args
    return [(flat, fsdp.REDUCE_SCATTER(g, fsdp.REDUCE_OP, group_size, group_name))]


def fsdp_copy_in(b: BoundSymbol, cots: list[Value | None]) -> list[tuple[Value, Value]]:
    """The padded shards flattened into one buffer: the reduce-scatter of the buffer's gradient
    waited for, then each shard's part of it, its padding cut off."""
    (g,) = cots
    if g is None:
        return []
    shards, padded = b.args
    reduced, pairs, offset = fsdp.WAIT(g), [], 0
    for shard, rows in zip(shards, padded):
        numel = rows * math.prod(shard.shape[1:])
        grad = P.reshape(P.slice(reduced, [offset], [offset + numel]), (rows, *shard.shape[1:]))
        if shard.shape[0] != rows:
            grad = P.slice(grad, [0] * shard.ndim, list(shard.shape))
        pairs.append((shard, grad))
        offset += numel
    return pairs


# --- tensor parallel (compiler/tensor_parallel.py): Megatron's f and g --------------------------

def tp_all_reduce(b: BoundSymbol, cots: list[Value | None]) -> list[tuple[Value, Value]]:
    """g, the sum over the ranks of a rowwise layer's partial results: its cotangent passes to
    every rank's part unchanged (the result is replicated: each rank's cotangent is the same)."""
    (g,) = cots
    return [(b.args[0], g)] if g is not None else []


def tp_grad_all_reduce(b: BoundSymbol, cots: list[Value | None]) -> list[tuple[Value, Value]]:
    """f, the identity before a colwise layer: the input's gradient is the sum over the ranks
    of each rank's part, all-reduced in the backward."""
    (g,) = cots
    x, op, group_name = b.args
    return [(x, tensor_parallel.ALL_REDUCE(g, op, group_name))] if g is not None else []


RULES: dict[Symbol, Rule] = {  # by symbol; a collective's rule in a function of its own
    fsdp.COPY_IN: fsdp_copy_in,
    fsdp.ALL_GATHER: fsdp_all_gather,
    fsdp.WAIT: fsdp_wait,
    tensor_parallel.ALL_REDUCE: tp_all_reduce,
    tensor_parallel.GRAD_ALL_REDUCE: tp_grad_all_reduce,
}
