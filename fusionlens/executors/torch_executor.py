"""The torch executor: runs any op as the torch call it stands for. Always available."""

from __future__ import annotations

from fusionlens.executors.base import Executor


class TorchExecutor(Executor):
    name = "torch"


EXECUTOR = TorchExecutor()
