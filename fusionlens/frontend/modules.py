"""Which nn.Module each traced op belongs to: its path in the model ("h.0.attn"), as
`named_modules` spells it, recorded in the op's provenance (`Provenance.module`).

While a call is traced, torch's global module hooks keep a stack of the modules whose forward
is running; a module is named by its path below the module that called it, so a model called from a plain
function (a training step's closure) is named as well as one traced directly. The outermost
module is "" (its ops belong to the model as a whole). The report groups the fusion graph's
regions by these paths (docs/pictures.md).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

import torch

from fusionlens.ir import provenance

# The trace whose hooks name modules in this context: torch's module hooks are global, so a
# model called by another thread (or inside a nested trace) must not push onto this one's stack.
_OWNER: contextvars.ContextVar[object | None] = contextvars.ContextVar("fusionlens_module_owner", default=None)


@contextlib.contextmanager
def module_paths(entered: Callable[[torch.nn.Module], None] | None = None,
                 left: Callable[[], None] | None = None) -> Iterator[None]:
    """Set `provenance.MODULE` to the running module's path while the body runs; `entered(module)`
    before each module's forward, `left()` once the body ends (captured.py: a global module the
    call runs is traced on copies of its buffers, its own put back after)."""
    stack: list[tuple[torch.nn.Module, str, contextvars.Token[str]]] = []
    below: dict[int, dict[int, str]] = {}  # id(module) -> id(descendant) -> its path below it

    def name_in(parent: torch.nn.Module, module: torch.nn.Module) -> str | None:
        if id(parent) not in below:  # once a module: a block called from a ModuleList is `h.0`
            below[id(parent)] = {id(m): n for n, m in parent.named_modules(remove_duplicate=False) if n}
        return below[id(parent)].get(id(module))

    me = object()

    def enter(module: torch.nn.Module, _args) -> None:
        if _OWNER.get() is not me:
            return
        if entered is not None:
            entered(module)
        if not stack:
            path = ""
        else:
            parent, parent_path, _ = stack[-1]
            # a module its parent does not hold (made in forward, or passed in): its class' name
            name = name_in(parent, module) or type(module).__name__
            path = f"{parent_path}.{name}" if parent_path else name
        stack.append((module, path, provenance.MODULE.set(path)))

    def leave(module: torch.nn.Module, _args, _out) -> None:
        if _OWNER.get() is me and stack and stack[-1][0] is module:
            provenance.MODULE.reset(stack.pop()[2])

    owner = _OWNER.set(me)
    before = torch.nn.modules.module.register_module_forward_pre_hook(enter)
    after = torch.nn.modules.module.register_module_forward_hook(leave, always_call=True)
    try:
        yield
    finally:
        before.remove()
        after.remove()
        while stack:  # a forward that raised before its hook ran
            provenance.MODULE.reset(stack.pop()[2])
        _OWNER.reset(owner)
        if left is not None:
            left()

