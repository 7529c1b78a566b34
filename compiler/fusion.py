"""Fusion: partition the flat prim trace into regions that one kernel can run.

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
  broadcast_in_dim inside the group maps to the domain; they may have any strides.
- `outputs` are the values used outside the group, in a fixed order; the generated
  callable takes `inputs` (tensors, in order) and returns a tuple of `outputs`, freshly
  allocated and contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FusionGroup:
    id: str
    bsyms: list
    inputs: list
    outputs: list
    domain: tuple
    reduction_dims: tuple = ()
    source_lines: list = field(default_factory=list)  # ["file.py:12  source text", ...] for comments

    @property
    def reduced_shape(self) -> tuple:
        return tuple(s for i, s in enumerate(self.domain) if i not in self.reduction_dims)

    @property
    def kind(self) -> str:
        return "reduction" if self.reduction_dims else "pointwise"


class Decline(Exception):
    """A fusion executor refuses a group (a shape or dtype it cannot run); says why."""
