"""Torch callables FusionLens has no symbol for, whose meaning still matters: the frontend
records each as one opaque call, tagged with `fallback_tags(the callable the user called)`.

Randomness matters: a program that draws random numbers is checked against eager by shapes
and dtypes only, and has no backward that could replay its draws. The table lists the
callables themselves (in-place methods, nn.init functions, the dropouts torch runs as one
kernel), not names: what draws is known, not guessed from a name.

So do calls whose result's shape depends on the data (x[mask], nonzero, unique), with or
without a symbol: torch tags their aten ops (`DynamicShapes` counts those that run), the
frontend records such a call whole, and `shape_checked` makes its program stop with
`ShapeChanged` where a later call's shape is not the traced one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn import init
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from fusionlens.ir.trace import OpTag, Symbol
from fusionlens.ops.torch_ops.registry import NoDecomposition
from fusionlens.ir.provenance import Provenance

RANDOM_FALLBACKS: frozenset[Callable] = frozenset({
    # in-place draws into a tensor (the frontend records the functional form of each)
    torch.Tensor.bernoulli_, torch.Tensor.cauchy_, torch.Tensor.exponential_, torch.Tensor.geometric_,
    torch.Tensor.log_normal_, torch.Tensor.normal_, torch.Tensor.uniform_, torch.Tensor.random_,
    # the in-place dropouts (the functional ones are symbols: activations.dropout and its kin)
    torch.alpha_dropout_, torch.feature_dropout_, torch.feature_alpha_dropout_, torch.dropout_,
    # random in training mode (F.rrelu is a symbol: activations.rrelu)
    F.rrelu_, torch.rrelu_,
    # sampling inside an op (fractional max pooling is a library call: pooling.py)
    F.gumbel_softmax,
    # torch.distributions' samplers
    torch.binomial, torch._standard_gamma, torch._sample_dirichlet,
    # weight initialisation
    init.uniform_, init.normal_, init.trunc_normal_, init.xavier_uniform_, init.xavier_normal_,
    init.kaiming_uniform_, init.kaiming_normal_, init.orthogonal_, init.sparse_,
})


def fallback_tags(func: Callable) -> frozenset[OpTag]:
    """The tags of an opaque call of torch callable `func` (one that has no symbol)."""
    if func in RANDOM_FALLBACKS:
        return frozenset({OpTag.LIBRARY_CALL, OpTag.RANDOM})
    if _collective(func):  # torch.distributed._functional_collectives' ops and their wait
        return frozenset({OpTag.LIBRARY_CALL, OpTag.COLLECTIVE, OpTag.NON_DIFFERENTIABLE})
    return frozenset({OpTag.LIBRARY_CALL})


def _collective(func) -> bool:
    """Whether `func` is a functional collective's op (an OpOverload or, called as
    `torch.ops._c10d_functional.all_reduce(...)`, its OpOverloadPacket) or its wait; funcol's
    `_wrap_tensor_autograd` (the AsyncCollectiveTensor wrapping) communicates nothing."""
    qualified = getattr(func, "_qualified_op_name", None)  # a packet: "_c10d_functional::all_reduce"
    if qualified is None:
        schema = getattr(func, "_schema", None)
        qualified = getattr(schema, "name", "") if schema is not None else ""
    namespace, _, name = str(qualified).partition("::")
    if name.startswith("_wrap_tensor_autograd"):
        return False
    return namespace in ("_c10d_functional", "c10d_functional", "_c10d_functional_autograd")


# --- data-dependent shapes -----------------------------------------------------------------

class ShapeChanged(RuntimeError):
    """A program's call whose result's shape depends on the data gave another shape than when
    it was traced: the rest of the program is specialised to that one, so it stops rather than
    return a wrong value (fusionlens.jit then runs the call eagerly)."""

    def __init__(self, message: str, file: str | None, line: int | None):
        super().__init__(message)
        self.file, self.line = file, line


class DynamicShapes(TorchDispatchMode):
    """While active, `count`s the aten ops torch tags as having a data-dependent output shape."""

    supports_higher_order_operators = True  # flex_attention's and others pass through, as they are

    def __init__(self):
        super().__init__()
        self.count = 0

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in dynamo's disable, whose first call imports
        # torch._dynamo (and triton): a second on every first compile. Nothing here compiles.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.Tag.dynamic_output_shape in getattr(func, "tags", ()):
            self.count += 1
        return func(*args, **(kwargs or {}))


def static_shapes(func: Callable, args, kwargs) -> list[tuple[int, ...]] | None:
    """The shapes `func` gives on meta tensors (what the input shapes alone determine: index
    with integer tensors is tagged as data-dependent too), None where it cannot say."""
    meta = lambda x: torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")  # noqa: E731
    try:
        margs, mkwargs = pytree.tree_map_only(torch.Tensor, meta, (tuple(args), dict(kwargs)))
        out = func(*margs, **mkwargs)
    except Exception:  # noqa: BLE001 - no meta kernel (or no strides): the shape is read from the data
        return None
    return [tuple(t.shape) for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def shapes_text(shapes) -> str:
    return ", ".join(str(list(s)) for s in shapes)


def shape_checked(sym: Symbol, name: str, shapes: list[tuple[int, ...]], names: str,
                  where: Provenance | None) -> Symbol:
    """`sym` as the program global `name`, raising ShapeChanged where its tensors' shapes are
    not `shapes` (those of the values `names`, made `where`). Its decomposition, if any,
    only says why the op does not decompose: prims cannot follow a shape read from the data."""
    impl = sym.impl

    @functools.wraps(impl)
    def checked(*args, **kwargs):
        result = impl(*args, **kwargs)
        got = [tuple(t.shape) for t in pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]
        if got != shapes:
            raise ShapeChanged(f"the shape of {names} depends on the data: it is {shapes_text(got)} in this call "
                               f"and was {shapes_text(shapes)} when the program was traced, which the program "
                               "is specialised to", where.file if where else None, where.line if where else None)
        return result

    decompose = sym.decomposition

    def declined(*args, **kwargs):
        assert decompose is not None
        decompose(*args, **kwargs)  # raises NoDecomposition with its own reason, as a rule
        raise NoDecomposition("the shape of its result depends on the data")
    return Symbol(name, checked, kind=sym.kind, tags=sym.tags | {OpTag.PROGRAM_GLOBAL}, flops=sym.flops,
                  decomposition=None if decompose is None else functools.wraps(decompose)(declined))
