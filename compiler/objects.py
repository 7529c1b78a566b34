"""Objects in a traced result that hold computed tensors but are no pytree node (a library's
cache class, e.g. transformers' DynamicCache): taken apart through their attributes, and
rebuilt when the program returns as copies of the traced object holding the program's
tensors. Everything else about the object (its other attributes, its class) is kept.

An ObjectTemplate is a pytree node: its children are the attributes that hold tensors, so
every pass sees the Values inside it, and `ir.output_builder` rebuilds the real object.
"""

from __future__ import annotations

import copy

import torch
from torch.utils import _pytree as pytree

from compiler.ir import Value

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
    return ObjectTemplate(obj, fields) if fields else obj
