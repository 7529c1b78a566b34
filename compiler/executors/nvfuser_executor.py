"""The nvfuser executor (code generation lands with its own issue; until then it declines)."""


class _Pending:
    name = "nvfuser"
    fuses = True

    def available(self, device):
        return False, "the nvfuser code generator is not part of this version yet"


EXECUTOR = _Pending()
