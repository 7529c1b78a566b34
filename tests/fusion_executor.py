"""A fusion executor for tests: takes every fusible prim, runs each group's prims via torch.

It lets the partitioner be tested on its own, deterministically and fast, without Triton.
It is registered by name for the duration of a test and never used by the product.
"""

from __future__ import annotations

from fusionlens.executors.base import FusionExecutor, Generated
from fusionlens.ir.interpret import ops_callable


def run_group(group):
    return ops_callable(group.bsyms, group.inputs, group.outputs)


class TorchFusion(FusionExecutor):
    name = "testfuser"

    def __init__(self, refuse=None):
        self.refuse = refuse or (lambda b: None)
        self.groups = []

    def can_take(self, b):
        return self.refuse(b)

    def generate(self, group, device):
        self.groups.append(group)
        fn = run_group(group)
        header = f"# {group.id}: {group.kind} over {list(group.domain)}"
        return Generated("\n".join([header, *group.source_lines]), fn, 1, fn)

    def definition_source(self, group):
        return self.generate(group, None).source
