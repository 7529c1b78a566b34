"""Results of any structure come back as eager returns them: same types, same values,
passed-through objects kept, and objects the trace cannot take apart never named by a string."""

import collections
import dataclasses

import torch
from torch.utils import _pytree as pytree

import compiler
from compiler import checking

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
    source = compiler.last_report(jfn).traces["execution"]
    assert "return fusionlens_output(" in source and "# tuple(Pair(" in source
    assert not [d for d in compiler.last_report(jfn).diagnostics if d.severity != "information"]


def test_plain_containers_still_print_as_literals():
    rep = compiler.compile(lambda x: (x.sin(), [x.cos()], {"a": x.exp()}), torch.randn(2), executors=["torch"])
    last = rep.traces["execution"].rstrip().splitlines()[-1]
    assert last.startswith("  return (") and "fusionlens_output" not in last


def test_a_result_hiding_tensors_in_an_object_runs_eagerly_and_says_why():
    jfn = compiler.jit(lambda x: (x.sin(), Opaque(x.cos())), executors=["torch"])
    for _ in range(2):
        x = torch.randn(4)
        first, box = jfn(x)
        assert torch.equal(box.t, x.cos()) and torch.equal(first, x.sin())
    messages = [d.message for d in compiler.last_report(jfn).diagnostics]
    assert any("inside Opaque" in m and "run eagerly" in m for m in messages), messages


def test_a_structure_mismatch_is_a_mismatch():
    assert "eager returned" in checking.mismatch((torch.ones(1),), [torch.ones(1)])
    assert "eager returned" in checking.mismatch(Pair(1, 2), (1, 2))
