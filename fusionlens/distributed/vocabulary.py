"""The collectives' vocabulary: what a collective is, as types, never parsed from a name.

Every collective a program issues is a `CollectiveSymbol` (an ir.pending.AsyncSymbol; the
seven every family records are in distributed/symbols.py): its
`collective` attribute says which collective it is (`CollectiveKind`), whether it issues
(its result pending until a wait takes it), waits, or runs synchronously (`Phase`), and where
among a bound symbol's arguments the tensor each rank sends, the reduce op and the process
group are. The report (driver/reporting.py), the launcher, the cost model's callers, the
ranks' agreement (collectives.trace_groups) and the verifier read these attributes; none
reads a symbol's name. The torch-level functional collectives the tracer records as torch
calls (`torch.ops._c10d_functional.*`, called directly) are described by the same types,
found by the torch callable they call (`describe`).

A process group is a `Group`: its name (c10d's `group_name`, which the functional collectives
take), its ranks and the mesh dimension it spans; hashable and printable.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fusionlens.ir.pending import AsyncSymbol, Phase
from fusionlens.ir.trace import BoundSymbol, Symbol


class CollectiveKind(enum.StrEnum):
    """Which collective (the values are the report's `op` strings, torch's c10d names)."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather_into_tensor"
    REDUCE_SCATTER = "reduce_scatter_tensor"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALL_TO_ALL = "all_to_all_single"


class ReduceOp(enum.StrEnum):
    """How a reducing collective combines the ranks' values (the functional collectives' strings)."""

    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"
    PRODUCT = "product"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"
    PREMUL_SUM = "premul_sum"

    @classmethod
    def of(cls, op: Any) -> ReduceOp:
        """From a functional collective's string ("sum", "prod") or a torch.distributed.ReduceOp."""
        if isinstance(op, ReduceOp):
            return op
        if isinstance(op, str):
            text = op.lower()
        else:  # ReduceOp.SUM (a RedOpType member: `.name`), or a ReduceOp object wrapping one
            text = str(getattr(op, "name", None) or str(op).rsplit(".", 1)[-1]).lower()
        return cls.PRODUCT if text == "prod" else cls(text)

    def __repr__(self) -> str:  # printed so in a program, which has ReduceOp among its globals
        return f"ReduceOp.{self.name}"


@dataclass(frozen=True)
class Group:
    """A process group: its name (the functional collectives' `group_name`), its ranks (global
    ranks, in group order) and the mesh dimension it spans (None: not a mesh's)."""

    name: str
    ranks: tuple[int, ...]
    mesh_dim: str | None = None

    @property
    def size(self) -> int:
        return len(self.ranks)

    def __str__(self) -> str:
        dim = f" {self.mesh_dim}" if self.mesh_dim else ""
        return f"group{dim} {self.name!r} ({self.size} ranks)"

    def __repr__(self) -> str:  # printed so in a program, which has Group among its globals
        dim = f", {self.mesh_dim!r}" if self.mesh_dim else ""
        r = self.ranks
        step = r[1] - r[0] if len(r) > 2 else 0
        evenly = step > 0 and all(b - a == step for a, b in zip(r, r[1:]))  # a mesh's thousands of ranks: short
        ranks = f"tuple(range({r[0]}, {r[-1] + step}{f', {step}' if step != 1 else ''}))" if evenly else repr(r)
        return f"Group({self.name!r}, {ranks}{dim})"

    @staticmethod
    def of(process_group: Any) -> Group:
        """The Group of a torch.distributed ProcessGroup (None: the default group)."""
        dist = _initialised()
        if dist is None:
            return Group("0", (0,))
        pg = process_group if process_group is not None else dist.group.WORLD
        return Group(pg.group_name, tuple(dist.get_process_group_ranks(pg)))

    @staticmethod
    def named(name: str) -> Group:
        """The Group c10d knows by `name` (the world's where this torch resolves it otherwise);
        a single rank's where no process group is up."""
        dist = _initialised()
        if dist is None:
            return Group(name, (0,))
        try:
            pg = dist.distributed_c10d._resolve_process_group(name)
        except Exception:  # noqa: BLE001 - a name this torch resolves otherwise: the world's
            pg = dist.group.WORLD
        return Group(name, tuple(dist.get_process_group_ranks(pg)))


def _initialised() -> Any:
    """torch.distributed where a process group is up (its import is not forced), else None."""
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() and dist.is_initialized() else None


Where = int | str | None  # an argument's position, or its keyword, or absent


@dataclass(frozen=True)
class Collective:
    """What a collective symbol does: its kind (None for a wait), its phase, and where its
    sent tensor, reduce op and group are among a bound symbol's arguments (`default_op`: the
    op where none is passed; a group absent or None is the default group)."""

    kind: CollectiveKind | None
    phase: Phase
    sent: Where = 0
    op: Where = None
    group: Where = None
    default_op: ReduceOp | None = None

    def sent_of(self, b: BoundSymbol) -> Any:
        """The argument each rank sends in (the input, not the output it writes)."""
        return _argument(b, self.sent)

    def reduce_op_of(self, b: BoundSymbol) -> ReduceOp | None:
        op = _argument(b, self.op)
        return ReduceOp.of(op) if op is not None else self.default_op

    def group_of(self, b: BoundSymbol) -> Group:
        """The group it communicates on: named (a functional collective's), a ProcessGroup, or
        the default group."""
        group = _argument(b, self.group)
        if isinstance(group, Group):  # the collective symbols' (distributed/symbols.py)
            return group
        return Group.named(group) if isinstance(group, str) else Group.of(group)


def _argument(b: BoundSymbol, where: Where) -> Any:
    if isinstance(where, int):
        return b.args[where] if where < len(b.args) else None
    return b.kwargs.get(where) if where is not None else None


class CollectiveSymbol(AsyncSymbol):
    """A symbol that communicates: `collective` says what it does."""

    def __init__(self, name: str, impl: Callable, collective: Collective, **kwargs: Any):
        super().__init__(name, impl, phase=collective.phase, **kwargs)
        self.collective = collective


WAITING = Collective(None, Phase.WAIT, sent=None)  # what the one wait symbol does (distributed/symbols.py)


def synchronous(kind: CollectiveKind, op: Where, group: Where) -> Collective:
    """A torch-level functional collective the user's code calls: issued and waited in one op
    as FusionLens describes it (its input first)."""
    return Collective(kind, Phase.SYNC, 0, op, group)


def _c10d_table() -> dict[Any, Collective]:
    """torch.ops._c10d_functional's ops (packets) -> what they do, as the tracer records them
    when the user's code calls them directly (ops/torch_ops/fallbacks.py tags them collective).
    Their results are AsyncCollectiveTensors waited for by their own `wait_tensor` calls, which
    the user's code may leave to torch: they are described, not verified as pairs (SYNC)."""
    import torch

    ops = torch.ops._c10d_functional
    # (input, [op,] [group size,] group name), as torch declares them
    table = {ops.all_reduce: synchronous(CollectiveKind.ALL_REDUCE, 1, 2),
             ops.all_reduce_: synchronous(CollectiveKind.ALL_REDUCE, 1, 2),
             ops.all_gather_into_tensor: synchronous(CollectiveKind.ALL_GATHER, None, 2),
             ops.reduce_scatter_tensor: synchronous(CollectiveKind.REDUCE_SCATTER, 1, 3),
             ops.all_to_all_single: synchronous(CollectiveKind.ALL_TO_ALL, None, 3),
             ops.broadcast: synchronous(CollectiveKind.BROADCAST, None, 2),
             ops.wait_tensor: Collective(None, Phase.SYNC, sent=None)}
    return table


_C10D: dict[Any, Collective] = {}


def describe(sym: Symbol) -> Collective | None:
    """What `sym` does as a collective (a wait: kind None), None where it communicates nothing."""
    if isinstance(sym, CollectiveSymbol):
        return sym.collective
    impl = sym.impl
    packet = getattr(impl, "overloadpacket", impl)  # an OpOverload's packet, or the packet itself
    if type(packet).__name__ != "OpOverloadPacket":
        return None
    if not _C10D:
        _C10D.update(_c10d_table())
    return _C10D.get(packet)


def is_wait(sym: Symbol) -> bool:
    """Whether `sym` waits for a collective (a wait ends the collective it waits for)."""
    described = describe(sym)
    return described is not None and described.kind is None
