"""The collective symbols: one issue symbol per CollectiveKind and one `wait`, which every
family records (torch.distributed's calls, the functional collectives, DDP's buckets, FSDP2's
gathers and reduce-scatters, tensor parallel's f and g), printed the same in every trace.

An issue's arguments are laid out alike: the tensor each rank sends, then its `Group`, then by
keyword what the family adds: the reduce op, the gradient's path (`Grad`, which the one backward
rule of distributed/autograd_rules.py reads), a broadcast's or reduce's root, an all-to-all's
splits, an all-gather's `regather` (FSDP2's reshard after forward) and `reduce_dtype` (its
MixedPrecisionPolicy's). What an issue returns is
pending until `wait` takes it (the verifier checks it). Each runs as torch's functional
collective (`torch.ops._c10d_functional`), so what runs between an issue and its wait overlaps
it; `reduce`, which has none, communicates in its issue.

A printed program names them by the kind (`t3 = all_reduce(t2, Group('0', (0, 1)), op=ReduceOp.SUM,
grad=Grad.IDENTITY)`); `program_globals` is what it needs in its namespace to run.
"""

from __future__ import annotations

import enum
from typing import Any

import torch

from fusionlens.distributed.vocabulary import WAITING, Collective, CollectiveKind, CollectiveSymbol, Group, ReduceOp
from fusionlens.ir.pending import Phase
from fusionlens.ir.trace import OpTag


class Grad(enum.StrEnum):
    """How the gradient passes a collective (an issue's `grad` argument)."""

    NONE = "none"  # not differentiated: a functional collective, dist.*, DDP's bucket, a backward's own
    IDENTITY = "identity"  # each rank's part gets the cotangent unchanged: tensor parallel's g (a replicated sum)
    REDUCE_SCATTER = "reduce_scatter"  # the mean over the ranks reduce-scattered back: FSDP2's all-gather

    def __repr__(self) -> str:  # printed so, the program runs it (Grad is one of its globals)
        return f"Grad.{self.name}"


def _c10d() -> Any:
    return torch.ops._c10d_functional


def _dense(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous()  # gloo and NCCL take dense tensors


def all_reduce(x: torch.Tensor, group: Group, op: ReduceOp = ReduceOp.SUM, grad: Grad = Grad.NONE) -> torch.Tensor:
    return _c10d().all_reduce(_dense(x), str(op), group.name)


def all_gather_into_tensor(x: torch.Tensor, group: Group, grad: Grad = Grad.NONE,
                           regather: bool = False, reduce_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The ranks' `x` stacked on dim 0. `regather`: the backward gathers it again rather than
    keep the result (FSDP2's reshard after forward: autograd_rules.regather); `reduce_dtype`:
    the dtype its backward reduce-scatters the gradient in (FSDP2's MixedPrecisionPolicy)."""
    return _c10d().all_gather_into_tensor(_dense(x), group.size, group.name)


def reduce_scatter_tensor(x: torch.Tensor, group: Group, op: ReduceOp = ReduceOp.SUM,
                          grad: Grad = Grad.NONE) -> torch.Tensor:
    return _c10d().reduce_scatter_tensor(_dense(x), str(op), group.size, group.name)


def broadcast(x: torch.Tensor, group: Group, root: int = 0) -> torch.Tensor:
    """The group's rank `root`'s `x` (a rank of the group, not a global one)."""
    return _c10d().broadcast(_dense(x), root, group.name)


def reduce(x: torch.Tensor, group: Group, root: int = 0, op: ReduceOp = ReduceOp.SUM) -> torch.Tensor:
    """`x` reduced into the group's rank `root` (the others' as torch.distributed.reduce leaves
    them). No functional form: it communicates here, its wait has nothing left to wait for."""
    import torch.distributed as dist

    pg = dist.distributed_c10d._resolve_process_group(group.name)  # type: ignore[arg-type]
    out = torch.clone(x, memory_format=torch.contiguous_format)
    dist.reduce(out, dst=dist.get_global_rank(pg, root), op=getattr(dist.ReduceOp, _TORCH_OPS[op]), group=pg)
    return out


_TORCH_OPS = {ReduceOp.SUM: "SUM", ReduceOp.AVG: "AVG", ReduceOp.MAX: "MAX", ReduceOp.MIN: "MIN",
              ReduceOp.PRODUCT: "PRODUCT", ReduceOp.BAND: "BAND", ReduceOp.BOR: "BOR", ReduceOp.BXOR: "BXOR"}


def all_to_all_single(x: torch.Tensor, group: Group, output_split_sizes: list[int] | None = None,
                      input_split_sizes: list[int] | None = None) -> torch.Tensor:
    even = [x.shape[0] // group.size] * group.size
    return _c10d().all_to_all_single(_dense(x), output_split_sizes or even, input_split_sizes or even, group.name)


def wait(t: torch.Tensor) -> torch.Tensor:
    """The issued collective's result, once it is done."""
    return _c10d().wait_tensor(t)


def _gathered(x: torch.Tensor, group: Group, *rest: Any, **kwargs: Any) -> torch.Tensor:
    return x.new_empty((x.shape[0] * group.size, *x.shape[1:]))


def _scattered(x: torch.Tensor, group: Group, *rest: Any, **kwargs: Any) -> torch.Tensor:
    return x.new_empty((x.shape[0] // group.size, *x.shape[1:]))


def _exchanged(x: torch.Tensor, group: Group, output_split_sizes: list[int] | None = None,
               input_split_sizes: list[int] | None = None) -> torch.Tensor:
    return x.new_empty((sum(output_split_sizes) if output_split_sizes else x.shape[0], *x.shape[1:]))


def _like(x: torch.Tensor, *rest: Any, **kwargs: Any) -> torch.Tensor:
    return torch.empty_like(x)


_TAGS = (OpTag.LIBRARY_CALL, OpTag.COLLECTIVE, OpTag.PROGRAM_GLOBAL)


def _issue(kind: CollectiveKind, impl: Any, meta: Any, op: bool) -> CollectiveSymbol:
    """The issue symbol of `kind`: the tensor sent first, the group second, the op by keyword."""
    described = Collective(kind, Phase.ISSUE, sent=0, op="op" if op else None, group=1,
                           default_op=ReduceOp.SUM if op else None)
    # CSE merges an issue identical to an earlier one, and then its wait: every rank's program
    # merges alike (FSDP2's block called twice gathers once, and its gradient is reduce-scattered once)
    return CollectiveSymbol(str(kind), impl, described, tags=_TAGS, meta=meta)


ALL_REDUCE = _issue(CollectiveKind.ALL_REDUCE, all_reduce, _like, True)
ALL_GATHER = _issue(CollectiveKind.ALL_GATHER, all_gather_into_tensor, _gathered, False)
REDUCE_SCATTER = _issue(CollectiveKind.REDUCE_SCATTER, reduce_scatter_tensor, _scattered, True)
BROADCAST = _issue(CollectiveKind.BROADCAST, broadcast, _like, False)
REDUCE = _issue(CollectiveKind.REDUCE, reduce, _like, True)
ALL_TO_ALL = _issue(CollectiveKind.ALL_TO_ALL, all_to_all_single, _exchanged, False)
WAIT = CollectiveSymbol("wait", wait, WAITING, tags=_TAGS, meta=_like)

ISSUE: dict[CollectiveKind, CollectiveSymbol] = {s.collective.kind: s for s in (  # type: ignore[misc]
    ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, REDUCE, ALL_TO_ALL)}


def program_globals() -> dict[str, Any]:
    """What a printed program that issues collectives needs by name: the symbols' functions and
    the types their arguments print as."""
    named: dict[str, Any] = {s.name: s.impl for s in (*ISSUE.values(), WAIT)}
    return {**named, "Group": Group, "ReduceOp": ReduceOp, "Grad": Grad}


def declare(tracer: Any) -> None:
    """`program_globals` declared to `tracer` (a frontend Recorder) recording a collective."""
    for name, obj in program_globals().items():
        tracer.program_global(name, obj)
