"""The triton executor (code generation lands with its own issue; until then it declines)."""


class _Pending:
    name = "triton"
    fuses = True

    def available(self, device):
        return False, "the triton code generator is not part of this version yet"


EXECUTOR = _Pending()
