"""The fusion contract: what the partitioner (fusionlens/middle/fusion.py) hands a fusion executor
(fusionlens/executors/), how an executor refuses it, and why a region ends. Both sides import
it; it imports neither.

A FusionGroup is what a fusion executor (triton, nvfuser) turns into code. Its contract:

- `bsyms` are prims in SSA, topological order, each one of: an elementwise prim (tag
  "elementwise": unary/binary ops, where, convert_element_type), `prims.broadcast_in_dim`,
  or a reduction prim (`sum`, `amax`, `amin`, `prod`, `var_mean`) over exactly
  `reduction_dims` of a value whose shape is `domain`.
- `domain` is the iteration shape: every value in the group has shape `domain` ("full")
  or, when `reduction_dims` is not empty, `reduced_shape` (domain without the reduced dims).
  A reduced value is brought back to the full shape only by a broadcast_in_dim whose
  broadcast_dims are the kept dims (after inserting size-1 dims, possibly through a
  broadcast to the keepdim shape first). Inputs (`inputs`) may have any shape that a
  broadcast_in_dim inside the group maps to the domain, also through a chain of broadcasts
  whose middle values have neither shape (`[4,8,8] -> [1,4,8,8] -> [2,4,8,8]`: the executors
  compose such a chain into one index map, and nothing reads its middle as data); they may
  have any strides.
- a scatter prim (tag "scatter": `strided_scatter`, `scatter`; a view update's write-back)
  iterates over its window: its src (and index) have shape `domain`, its base is an input of
  the group (any shape), its result has the base's shape and is an output that no op of the
  group reads; a group with a scatter has no reduction. Executors write the result as a new
  tensor: the base copied, the window stored into it (Triton: a store at the window's
  addresses; nvFuser: `fd.ops.scatter`).
- a two-axis group (`column_dims` not empty: a norm's backward) also has column reductions:
  `sum`s of float values of shape `domain` over exactly `column_dims`, the dims `reduction_dims`
  keep (dx reduces each row, the weight and bias gradients each column of the same rows). What
  a column reduction makes (shape `column_shape`) and the elementwise ops on it are the
  group's outputs only: no other op of the group reads them, so a kernel over row blocks
  accumulates them and a second small kernel combines its programs' partial results. Only
  an executor whose `takes_columns` accepts the group is handed one.
- `outputs` are the values used outside the group, in a fixed order; the generated
  callable takes `inputs` (tensors, in order) and returns a tuple of `outputs`, freshly
  allocated and contiguous.

An executor raises `Decline` for a group it refuses (its prims then run through torch), and
writes the code of a group for given input `Layout`s (fusionlens/executors/base.py).
`BoundaryCode` is the kind of a region's end, typed: `boundary` makes a `Boundary` of one (the
compiler's own frozen type; fusionlens/driver/wire.py turns it into the report's).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from fusionlens.ir.sizes import contiguous_strides
from fusionlens.ir.trace import BoundSymbol, Provenance, Value, distinct_lines


@dataclass
class FusionGroup:
    id: str
    bsyms: list[BoundSymbol]
    inputs: list[Value]
    outputs: list[Value]
    domain: tuple[int, ...]
    reduction_dims: tuple[int, ...] = ()
    source_lines: list[str] = field(default_factory=list)  # ["file.py:12  source text", ...] for comments
    column_dims: tuple[int, ...] = ()  # a two-axis group's column reductions' dims (the kept dims)

    @property
    def reduced_shape(self) -> tuple[int, ...]:
        return tuple(s for i, s in enumerate(self.domain) if i not in self.reduction_dims)

    @property
    def column_shape(self) -> tuple[int, ...]:
        """What a column reduction of a two-axis group makes: the domain without `column_dims`."""
        return tuple(s for i, s in enumerate(self.domain) if i not in self.column_dims)

    @property
    def kind(self) -> str:
        if self.column_dims:
            return "two-axis reduction"
        return "reduction" if self.reduction_dims else "pointwise"


class Decline(Exception):
    """A fusion executor refuses a group (a shape or dtype it cannot run); says why."""


def source_comments(bsyms: list[BoundSymbol]) -> list[str]:
    """One `path:line  source` comment per distinct user line of `bsyms` (FusionGroup.source_lines)."""
    return [p.source_comment() for p in distinct_lines(bsyms)]


# --- input layouts ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """One input tensor as a kernel sees it: what an executor's code is specialised to."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: str  # the tensor's device type: "cuda", "cpu"

    @classmethod
    def of_tensor(cls, t: torch.Tensor) -> Layout:
        return cls(tuple(t.shape), tuple(t.stride()), t.dtype, t.device.type)

    @classmethod
    def contiguous(cls, v: Value) -> Layout:
        """The layout of a fresh contiguous tensor of value `v`."""
        return cls(tuple(v.shape), tuple(contiguous_strides(v.shape)), v.dtype, v.device.type)


def check_layouts(group: FusionGroup, layouts: list[Layout]) -> None:
    """ValueError unless `layouts` are of the group's inputs, in order (shapes and dtypes; a
    symbol's dim takes any size: comparing it would record a guard)."""
    if len(layouts) != len(group.inputs):
        raise ValueError(f"region {group.id} takes {len(group.inputs)} inputs, got {len(layouts)} layouts")
    for v, lay in zip(group.inputs, layouts):
        if (len(lay.shape) != len(v.shape) or lay.dtype != v.dtype
                or any(type(d) is int and d != n for d, n in zip(v.shape, lay.shape))):
            raise ValueError(f"region {group.id}: {v.name} is {v.dtype}{list(v.shape)}, the layout given is "
                             f"{lay.dtype}{list(lay.shape)}")


# --- why a region ends ------------------------------------------------------------------------

class BoundaryCode(enum.StrEnum):
    """The kind of a region's end (report.Boundary.code): consumers match on these."""

    LIBRARY_CALL = "library-call"  # the next op runs as a library call (a matmul, a convolution)
    UNSUPPORTED_OP = "unsupported-op"  # the next op is no fusible prim, or no executor takes it
    VIEW_OR_LAYOUT = "view-or-layout"  # the next op changes the layout (torch runs it, a view where it can)
    REDUCTION_AXIS = "reduction-axis"  # the next op reduces over other dims than the region
    SHAPE_REFUSED = "shape-refused"  # another iteration shape, or the executor declined the region
    OUTPUT_NEEDED = "output-needed"  # a value of the region is read by another region
    END_OF_PROGRAM = "end-of-program"  # no later op reads the region's values
    COLLECTIVE = "collective"  # the next op communicates with other ranks (torch.distributed)

    @property
    def reason(self) -> str:
        """The kind in words, as Boundary.reason has it."""
        return _REASONS[self]


_REASONS = {
    BoundaryCode.LIBRARY_CALL: "library call",
    BoundaryCode.UNSUPPORTED_OP: "unsupported op",
    BoundaryCode.VIEW_OR_LAYOUT: "view or layout op",
    BoundaryCode.REDUCTION_AXIS: "reduction over another axis",
    BoundaryCode.SHAPE_REFUSED: "shape the executor refuses",
    BoundaryCode.OUTPUT_NEEDED: "output needed elsewhere",
    BoundaryCode.END_OF_PROGRAM: "end of the program",
    BoundaryCode.COLLECTIVE: "collective",
}


@dataclass(frozen=True)
class Boundary:
    """Why a region ends where it does: its kind, the detail in words, the op that ends it."""

    code: BoundaryCode
    detail: str
    where: Provenance | None = None

    @property
    def reason(self) -> str:
        return self.code.reason


def boundary(code: BoundaryCode, detail: str, where: Provenance | None = None) -> Boundary:
    """A Boundary of this kind, at the user line of `where` (the op that ends it)."""
    return Boundary(code, detail, where)
