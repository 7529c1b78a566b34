"""The fuzzer's view family, counted (issue 30 part 3): of a compiled program's fallbacks, those
of an in-place update or of its write-back into a base (setitem, copy_, fill_, a view made
again, a scatter), which the executors take as scatter prims and so should report none.

Left out: a write-back that is its own input handed out (an empty window, a copy of a tensor
of the same shape and dtype): the program runs it as its torch call by design, so that the
caller's tensors never alias each other (fusionlens/middle/passes.py's decompose)."""

from __future__ import annotations

# the symbols an in-place update and its write-back record (fusionlens/frontend/views.py)
UPDATES = {"setitem", "torch.ops.aten.copy.default", "torch.ops.aten.fill", "torch.index_copy", "torch.slice_scatter",
           "torch.select_scatter", "torch.diagonal_scatter", "torch.reshape", "torch.permute", "operator.getitem",
           "torch.index_put", "torch.arange"}
_BY_DESIGN = "is its input here, and the program hands it out"


def view_update_fallbacks(report) -> list[str]:
    """`op: reason` of each fallback of `report` that is a view update's (see the module)."""
    return [f"{f.op}: {f.reason}" for f in report.fallbacks
            if (f.op in UPDATES or (f.op.startswith("op_Tensor_") and f.op.endswith("_")))
            and _BY_DESIGN not in f.reason]
