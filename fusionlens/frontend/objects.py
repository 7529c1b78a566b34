"""Objects in a traced result that hold computed tensors but are no pytree node (a library's
cache class, e.g. transformers' DynamicCache): taken apart through their attributes, and
rebuilt when the program returns as copies of the traced object holding the program's
tensors. Everything else about the object (its other attributes, its class) is kept.

An ObjectTemplate is a pytree node: its children are the attributes that hold tensors, so
every pass sees the Values inside it, and `ir.output_builder` rebuilds the real object.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fusionlens.ir.trace import Value

MAX_DEPTH = 8  # attribute levels searched for tensors (EncoderDecoderCache -> DynamicCache -> layers -> keys)


class ObjectTemplate:
    """The traced object `obj` with `fields` (attribute -> subtree of Values) in place of its
    tensor-holding attributes."""

    def __init__(self, obj, fields: dict):
        self.obj, self.fields = obj, fields

    @property
    def type_name(self) -> str:
        return type(self.obj).__name__

    def __repr__(self) -> str:
        return f"{self.type_name}({', '.join(self.fields)})"


def _flatten(t: ObjectTemplate):
    return list(t.fields.values()), (t.obj, tuple(t.fields))


def _unflatten(children, context):
    obj, names = context
    if any(isinstance(x, (Value, ObjectTemplate)) for x in pytree.tree_leaves(list(children))):
        return ObjectTemplate(obj, dict(zip(names, children)))  # still a template (a pass renamed Values)
    new = copy.copy(obj)
    for name, value in zip(names, children):
        object.__setattr__(new, name, value)
    return new


pytree.register_pytree_node(ObjectTemplate, _flatten, _unflatten)


def template(obj, to_value, computed, keep: set, seen=None, depth: int = MAX_DEPTH):
    """`obj` with its tensors replaced by Values (`to_value`), objects holding computed
    tensors (`computed(tensor)`) made ObjectTemplates; objects in `keep` (passed in by the
    caller) are left as they are. Returns `obj` itself when nothing inside it was computed."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        return to_value(obj) if computed(obj) else obj
    if depth == 0 or id(obj) in seen or id(obj) in keep or isinstance(
            obj, (str, bytes, int, float, bool, complex, type(None), type, torch.nn.Module)):
        return obj
    seen.add(id(obj))
    if type(obj) in (list, tuple):
        items = [template(x, to_value, computed, keep, seen, depth - 1) for x in obj]
        return obj if all(a is b for a, b in zip(items, obj)) else type(obj)(items)
    if type(obj) is dict:
        entries = {k: template(v, to_value, computed, keep, seen, depth - 1) for k, v in obj.items()}
        return obj if all(entries[k] is v for k, v in obj.items()) else entries
    attrs = getattr(obj, "__dict__", None)
    if not isinstance(attrs, dict):
        return obj
    fields = {}
    for name, value in attrs.items():
        new = template(value, to_value, computed, keep, seen, depth - 1)
        if new is not value:
            fields[name] = new
    if not fields:
        return obj
    held = copy.copy(obj)  # without the traced tensors: a template lives as long as its program
    for name in fields:
        object.__setattr__(held, name, None)
    return ObjectTemplate(held, fields)


# --- objects the caller passes in, which the call updates (a KV cache) ---------------------
#
# Their tensors are inputs of the program and what the call leaves in them is part of its
# result: `updates` lists each slot (a path of attribute names, list indices, dict keys) the
# call changed and what it holds after; `apply` does the same to the caller's object.

Path = tuple  # of steps: a str is an attribute, an int a list index, a ("key", k) a dict key
_PLAIN = (str, bytes, int, float, bool, complex, type(None), torch.dtype, torch.device,
          torch.SymInt, torch.SymFloat, torch.SymBool)


def _slots(obj):
    """(step, value) of a container's slots: list/tuple items, dict entries, an object's attributes."""
    if type(obj) in (list, tuple):
        return list(enumerate(obj))
    if type(obj) is dict:
        return [(("key", k), v) for k, v in obj.items()]
    attrs = getattr(obj, "__dict__", None)
    return list(attrs.items()) if isinstance(attrs, dict) else []


def _descends(x) -> bool:
    return not isinstance(x, (torch.Tensor, *_PLAIN, type, torch.nn.Module)) and not callable(x)


# what driver/fast_path.py reads to write a passed object's key as straight-line checks
PLAIN, slots, descends = _PLAIN, _slots, _descends


def leaves(obj, depth: int = MAX_DEPTH, path: Path = ()):
    """(path, value) of every tensor and plain value in `obj`'s slots, in a fixed order."""
    for step, value in _slots(obj):
        here = path + (step,)
        if isinstance(value, (torch.Tensor, *_PLAIN)):
            yield here, value
        elif depth > 1 and _descends(value):
            yield from leaves(value, depth - 1, here)


def is_state(obj) -> bool:
    """Whether `obj` (a pytree leaf) is an object a call may update: keyed by its contents."""
    return _descends(obj) and isinstance(getattr(obj, "__dict__", None), dict)


def passed_states(tree) -> list:
    """The objects among a call's pytree leaves the call may update (with attributes: a cache,
    empty or holding tensors), each once, in order."""
    found: dict[int, object] = {}
    for leaf in pytree.tree_leaves(tree):
        if id(leaf) not in found and _descends(leaf) and isinstance(getattr(leaf, "__dict__", None), dict):
            found[id(leaf)] = leaf
    return list(found.values())


def state_tensors(obj) -> list[torch.Tensor]:
    """The tensors of a passed object, each once, in `leaves` order: inputs of the program."""
    seen: dict[int, torch.Tensor] = {}
    for _, v in leaves(obj):
        if isinstance(v, torch.Tensor):
            seen.setdefault(id(v), v)
    return list(seen.values())


def state_key(obj, tensor_key) -> tuple:
    """What a signature keys a passed object by: its class, each slot's path, and its
    tensors' `tensor_key` and plain values (a cache's contents, not its identity)."""
    items = []
    for path, v in leaves(obj):
        if isinstance(v, torch.Tensor):
            items.append((path, tensor_key(v)))
        else:
            items.append((path, v if isinstance(v, (str, int, float, bool, type(None))) else type(v)))
    return ("state", type(obj), tuple(items))


def snapshot(obj, depth: int = MAX_DEPTH) -> list:
    """Every container reachable from `obj` with a shallow copy of its slots: `restore` puts
    back what the call replaced, appended or set, so tracing and checking leave it as it was."""
    saved: list[tuple[Any, Any]] = []
    seen: set[int] = set()

    def visit(x, d):
        if id(x) in seen or d == 0 or not _descends(x) or type(x) is tuple:
            return
        seen.add(id(x))
        if type(x) is list:
            saved.append((x, list(x)))
        elif type(x) is dict:
            saved.append((x, dict(x)))
        elif isinstance(getattr(x, "__dict__", None), dict):
            saved.append((x, dict(x.__dict__)))
        for _, v in _slots(x):
            visit(v, d - 1)
    visit(obj, depth)
    return saved


def restore(saved: list) -> None:
    for container, slots in saved:
        if type(container) is list:
            container[:] = slots
        elif type(container) is dict:
            container.clear()
            container.update(slots)
        else:
            container.__dict__.clear()
            container.__dict__.update(slots)


def swap_copies(obj, copy, depth: int = MAX_DEPTH) -> None:
    """Put `copy(t)` in every tensor slot of `obj` (tuples are rebuilt): the call then updates
    copies, and `restore` of a snapshot taken before puts the caller's tensors back."""
    for step, value in _slots(obj):
        if isinstance(value, torch.Tensor):
            _set(obj, step, copy(value))
        elif depth > 1 and _descends(value):
            if type(value) is tuple:
                value = list(value)
                swap_copies(value, copy, depth - 1)
                _set(obj, step, tuple(value))
            else:
                swap_copies(value, copy, depth - 1)


def _set(container, step, value) -> None:
    if isinstance(step, tuple):
        container[step[1]] = value
    elif type(container) is list:
        container[step] = value
    else:
        object.__setattr__(container, step, value)


def _get(container, step):
    if isinstance(step, tuple):
        return container[step[1]]
    if type(container) in (list, tuple):
        return container[step]
    return getattr(container, step)


def updates(obj, before: dict, containers: dict, convert, path: Path = (), depth: int = MAX_DEPTH) -> list:
    """[(path, what it holds now)] of the slots of `obj` the call changed, comparing with
    `before` (path -> the value there before: tensors by identity) and `containers` (path ->
    the container there before); `convert` makes a new value the program's (a tensor its
    Value, a new object its ObjectTemplate)."""
    out = []
    for step, value in _slots(obj):
        here = path + (step,)
        if isinstance(value, torch.Tensor) or not _descends(value):
            old = before.get(here, _MISSING)
            same = value is old if isinstance(value, torch.Tensor) or isinstance(old, torch.Tensor) else \
                (old is not _MISSING and type(old) is type(value) and old == value)
            if not same:
                out.append((here, convert(value)))
        elif containers.get(here) is value and type(value) is not tuple and depth > 1:
            out += updates(value, before, containers, convert, here, depth - 1)
        else:
            out.append((here, convert(value)))  # a new object (a layer made by the call), or a tuple rebuilt
    return out


_MISSING = object()


def containers_of(obj, depth: int = MAX_DEPTH, path: Path = ()) -> dict:
    """path -> the container object at it (what `updates` compares with by identity)."""
    found = {}
    for step, value in _slots(obj):
        here = path + (step,)
        if _descends(value) and not isinstance(value, _PLAIN):
            found[here] = value
            if depth > 1:
                found.update(containers_of(value, depth - 1, here))
    return found


def apply(obj, changes) -> None:
    """Set each slot of `changes` ([(path, value)], from `updates` with the program's tensors
    and rebuilt objects in) in the caller's object, as the call did in eager."""
    for path, value in changes:
        container = obj
        for step in path[:-1]:
            container = _get(container, step)
        if type(container) is tuple:
            raise TypeError(f"cannot update a tuple's item at {path}")
        if isinstance(path[-1], int) and type(container) is list and path[-1] == len(container):
            container.append(value)
        else:
            _set(container, path[-1], value)


class PassedStates:
    """The objects a traced call was passed that hold tensors (a KV cache), around that call:
    their tensors swapped for copies the call may update, what they held before, and
    `restore` to leave them as the caller had them."""

    def __init__(self, tree, copy):
        self.objects = passed_states(tree)
        self.saved = [snapshot(o) for o in self.objects]
        for o in self.objects:
            swap_copies(o, copy)
        self.before = [dict(leaves(o)) for o in self.objects]
        self.containers = [containers_of(o) for o in self.objects]

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        """(a name from its path, tensor) for each tensor the objects hold, in state_tensors order."""
        out, seen = [], set()
        for o in self.objects:
            for path, v in leaves(o):
                if isinstance(v, torch.Tensor) and id(v) not in seen:
                    seen.add(id(v))
                    steps = [str(s[1]) if isinstance(s, tuple) else str(s) for s in path]
                    out.append(("_".join([type(o).__name__.lower(), *steps]), v))
        return out

    def changes(self, convert) -> list[list]:
        return [updates(o, b, c, convert) for o, b, c in zip(self.objects, self.before, self.containers)]

    def restore(self) -> None:
        for saved in self.saved:
            restore(saved)


def apply_all(states: list, changes: list[list]) -> None:
    for o, ch in zip(states, changes):
        apply(o, ch)


class PassedRef:
    """In a program's result, the object the call was passed at position `index` (its
    passed_states order): the program must hand back this call's object, and must not keep
    the traced call's (a KV cache) alive. `resolve` puts the call's objects in."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __repr__(self) -> str:
        return f"PassedRef({self.index})"


def refer_to_passed(tree, passed: list):
    """`tree` with each object of `passed` in it (as a pytree leaf) a PassedRef."""
    where = {id(o): i for i, o in enumerate(passed)}
    return pytree.tree_map(lambda x: PassedRef(where[id(x)]) if id(x) in where else x, tree)


def resolve(tree, passed: list):
    """`tree` with each PassedRef the call's own object."""
    return pytree.tree_map(lambda x: passed[x.index] if isinstance(x, PassedRef) else x, tree)
