"""The collectives' vocabulary: what a collective is, as types, never parsed from a name.

Every collective a program issues is a `CollectiveSymbol` (an ir.pending.AsyncSymbol): its
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


WAIT = Collective(None, Phase.WAIT, sent=None)
# the functional collectives' argument layouts: (input, [op,] [group size,] group name)
ALL_REDUCE = Collective(CollectiveKind.ALL_REDUCE, Phase.ISSUE, 0, 1, 2)
ALL_GATHER = Collective(CollectiveKind.ALL_GATHER, Phase.ISSUE, 0, None, 2)
REDUCE_SCATTER = Collective(CollectiveKind.REDUCE_SCATTER, Phase.ISSUE, 0, 1, 3)


def synchronous(c: Collective) -> Collective:
    """The same collective run synchronously (issued and waited in one op)."""
    return Collective(c.kind, Phase.SYNC, c.sent, c.op, c.group, c.default_op)


# torch.distributed's collectives recorded in their functional form, arguments by keyword
# (collectives.functional): the tensor each sends, its op, its group
_DIST = {
    "all_reduce": Collective(CollectiveKind.ALL_REDUCE, Phase.SYNC, "tensor", "op", "group", ReduceOp.SUM),
    "broadcast": Collective(CollectiveKind.BROADCAST, Phase.SYNC, "tensor", None, "group"),
    "reduce": Collective(CollectiveKind.REDUCE, Phase.SYNC, "tensor", "op", "group", ReduceOp.SUM),
    "all_gather_into_tensor": Collective(CollectiveKind.ALL_GATHER, Phase.SYNC, "input_tensor", None, "group"),
    "reduce_scatter_tensor": Collective(CollectiveKind.REDUCE_SCATTER, Phase.SYNC, "input", "op", "group",
                                        ReduceOp.SUM),
    "all_to_all_single": Collective(CollectiveKind.ALL_TO_ALL, Phase.SYNC, "input", None, "group"),
}


def of_dist(name: str) -> Collective:
    """The Collective of torch.distributed's `name` (a key of collectives.RECORDED)."""
    return _DIST[name]


def _c10d_table() -> dict[Any, Collective]:
    """torch.ops._c10d_functional's ops (packets) -> what they do, as the tracer records them
    when the user's code calls them directly (ops/torch_ops/fallbacks.py tags them collective).
    Their results are AsyncCollectiveTensors waited for by their own `wait_tensor` calls, which
    the user's code may leave to torch: they are described, not verified as pairs (SYNC)."""
    import torch

    ops = torch.ops._c10d_functional
    table = {ops.all_reduce: synchronous(ALL_REDUCE), ops.all_reduce_: synchronous(ALL_REDUCE),
             ops.all_gather_into_tensor: synchronous(ALL_GATHER),
             ops.reduce_scatter_tensor: synchronous(REDUCE_SCATTER),
             ops.all_to_all_single: Collective(CollectiveKind.ALL_TO_ALL, Phase.SYNC, 0, None, 3),
             ops.broadcast: Collective(CollectiveKind.BROADCAST, Phase.SYNC, 0, None, 2),
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
