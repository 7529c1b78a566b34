"""Results of any structure come back as eager returns them: same types, same values,
passed-through objects kept, and objects the trace cannot take apart never named by a string."""

import collections
import dataclasses

import torch
from torch.utils import _pytree as pytree

import compiler
from fusionlens.driver import checking

Pair = collections.namedtuple("Pair", "first second")


@dataclasses.dataclass
class Output:  # like a library's ModelOutput: registered with pytree by its library
    logits: torch.Tensor
    cache: list
    note: str = "done"


pytree.register_dataclass(Output)


class Opaque:
    def __init__(self, t):
        self.t = t


CONFIG = object()


def _structures(x, y):
    return (Pair(x.sin(), {"k": y.cos(), "n": 3, "none": None}),
            collections.OrderedDict(z=x + y, s="text"),
            [x, Output((x * y).exp(), [y.tanh(), y.abs()])],
            CONFIG)


def _assert_same(a, b):
    assert checking.mismatch(a, b) is None, checking.mismatch(a, b)
    assert pytree.tree_structure(a) == pytree.tree_structure(b)


def test_structures_types_and_passed_through_objects_are_kept():
    jfn = compiler.jit(_structures, executors=["torch"])
    for _ in range(2):  # the second call runs the cached program on new inputs
        x, y = torch.randn(3), torch.randn(3)
        out = jfn(x, y)
        _assert_same(out, _structures(x, y))
        assert type(out[0]) is Pair and type(out[1]) is collections.OrderedDict
        assert type(out[2][1]) is Output and out[2][1].note == "done"
        assert out[2][0] is x  # an input returned as it is stays that very tensor
        assert out[3] is CONFIG  # and so does any object passed through
    source = compiler.last_report(jfn).forward.traces["execution"]
    assert "return fusionlens_output(" in source and "# tuple(Pair(" in source
    assert not [d for d in compiler.last_report(jfn).diagnostics if d.severity != "information"]


def test_plain_containers_still_print_as_literals():
    rep = compiler.compile(lambda x: (x.sin(), [x.cos()], {"a": x.exp()}), torch.randn(2), executors=["torch"])
    last = rep.forward.traces["execution"].rstrip().splitlines()[-1]
    assert last.startswith("  return (") and "fusionlens_output" not in last


class Holder:  # like a cache class: no pytree registration, tensors in nested attributes
    def __init__(self, layers, meta="m"):
        self.layers, self.meta = layers, meta


def test_objects_holding_computed_tensors_are_rebuilt_with_the_programs_tensors():
    fn = lambda x: (x.sin(), Holder([Opaque(x.cos()), Opaque(x.exp())]))  # noqa: E731
    jfn = compiler.jit(fn, executors=["torch"])
    boxes = []
    for _ in range(2):
        x = torch.randn(4)
        first, holder = jfn(x)
        assert type(holder) is Holder and holder.meta == "m" and type(holder.layers[0]) is Opaque
        assert torch.equal(holder.layers[0].t, x.cos()) and torch.equal(holder.layers[1].t, x.exp())
        boxes.append(holder)
    assert boxes[0] is not boxes[1]  # a fresh object each call, as eager makes one
    rep = compiler.last_report(jfn)
    assert not [d for d in rep.diagnostics if "eagerly" in d.message]
    assert "# tuple(t0, Holder(" in rep.forward.traces["execution"]


class Cache:
    def __init__(self):
        self.items = []


def test_an_object_passed_in_and_updated_with_computed_tensors_is_compiled_and_updated_as_eager_does():
    def fn(x, cache):
        cache.items.append(x.sin())
        return x.cos(), cache

    jfn = compiler.jit(fn, executors=["torch"])
    for _ in range(2):  # a fresh cache each time: the second call is the compiled program's
        cache = Cache()
        for i in range(3):
            x = torch.randn(4)
            out, same_cache = jfn(x, cache)
            assert same_cache is cache and len(cache.items) == i + 1 and torch.equal(cache.items[-1], x.sin())
            assert torch.equal(out, x.cos())
    assert not any(e.eager_fallback for e in jfn.cache.values())
    messages = [d.message for d in compiler.last_report(jfn).diagnostics]
    assert not any("eagerly" in m for m in messages), messages
    assert jfn.cache_info()["hits"] >= 3  # keyed by what the cache holds, not by which cache it is


def test_a_structure_mismatch_is_a_mismatch():
    assert "eager returned" in checking.mismatch((torch.ones(1),), [torch.ones(1)])
    assert "eager returned" in checking.mismatch(Pair(1, 2), (1, 2))
