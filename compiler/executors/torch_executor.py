"""The torch executor: runs any op as the torch call it stands for. Always available."""

from __future__ import annotations

from compiler.ir import format_call


class TorchExecutor:
    name = "torch"
    fuses = False

    def available(self, device):
        return True, ""

    def code(self, bsyms) -> str:
        return "\n".join(format_call(b) for b in bsyms)


EXECUTOR = TorchExecutor()
