"""A call's arguments as the program sees them: their names, the tensors it takes (and in
what order), how a signature describes them. The frontend traces with these; jit calls
`user_tensors` on every call, so it stays cheap.
"""

from __future__ import annotations

import inspect

import torch
from torch.utils import _pytree as pytree

from fusionlens.frontend import objects
from fusionlens.ir.trace import dtype_name
from fusionlens.ir.vocabulary import ValueRole


def sanitize(name: str) -> str:
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)  # re's \W, without compiling it
    return name if name and not name[0].isdigit() else f"_{name}"


def parameter_names(fn) -> dict[int, tuple[ValueRole, str]]:
    """id(tensor) -> (role, name) for a module's parameters and buffers."""
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    if not isinstance(module, torch.nn.Module):
        return {}
    known: dict[int, tuple[ValueRole, str]] = {}
    for name, p in module.named_parameters():
        known.setdefault(id(p), (ValueRole.PARAM, "p_" + sanitize(name)))
    for name, b in module.named_buffers():
        known.setdefault(id(b), (ValueRole.BUFFER, "b_" + sanitize(name)))
    return known


def target_name(fn) -> str:
    named = type(fn).__name__ if isinstance(fn, torch.nn.Module) else getattr(fn, "__name__", type(fn).__name__)
    return sanitize(named)


_SIGNATURES: dict = {}  # (function, bound or not) -> its inspect.Signature: jit binds every call


def _signature(target) -> inspect.Signature:
    key = (getattr(target, "__func__", target), hasattr(target, "__self__"))
    found = _SIGNATURES.get(key)
    if found is None:
        if len(_SIGNATURES) > 1024:  # functions made on the fly (lambdas) must not pile up
            _SIGNATURES.clear()
        found = _SIGNATURES[key] = inspect.signature(target)
    return found


def signature_names(fn, args, kwargs) -> list:
    """(name, value) for each argument, by the callable's own parameter names."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        bound = _signature(target).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    out = []
    for pname, value in bound.arguments.items():
        kind = bound.signature.parameters[pname].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            out += [(f"{pname}{i}", v) for i, v in enumerate(value)]
        elif kind is inspect.Parameter.VAR_KEYWORD:
            out += list(value.items())
        else:
            out.append((pname, value))
    return out


def user_tensors(fn, args, kwargs) -> list:
    """The call's tensors in the order `trace` names them (the program's user inputs): the
    arguments' tensors, then those held by objects passed in (a cache: objects.state_tensors)."""
    if not kwargs:
        leaves = pytree.tree_leaves(args)
    else:
        leaves = [x for _, v in signature_names(fn, args, kwargs) for x in pytree.tree_leaves(v)]
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    if len(tensors) == len(leaves):
        return tensors
    seen = {id(t) for t in tensors}
    for state in objects.passed_states(leaves):
        for t in objects.state_tensors(state):
            if id(t) not in seen:
                seen.add(id(t))
                tensors.append(t)
    return tensors


def describe_input(name: str, x) -> str:
    if isinstance(x, torch.Tensor):
        layout = (str(x.layout).removeprefix("torch.") if x.layout != torch.strided else
                  "contiguous" if x.is_contiguous() else f"strides {tuple(x.stride())}")
        return (f"{name}: {dtype_name(x.dtype)}{list(x.shape)} on {x.device}, {layout}, "
                f"requires_grad={x.requires_grad}")
    if isinstance(x, torch.SymInt):  # an int argument a dynamic program serves every value of
        return f"{name} = {x} (dynamic)"
    return f"{name} = {x!r} (specialised)"
