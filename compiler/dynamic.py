"""Dynamic shapes: the call traced again on fake tensors whose dynamic dims are symbols.

The frontend's real trace (frontend.trace) gives eager's result and what the call updates;
a dynamic compile then traces the same call on fake tensors of a `symbols.SymbolEnv`, the
dims asked for made symbolic (`s0`, `s1`, ...), and the pipeline compiles that trace: one
program for every size. What the program assumes about the symbols (a decision the user's
code, a decomposition or an executor made on a size) is a guard of the ShapeEnv; `Guards`
checks them before each call, and a call that fails them is compiled anew.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from compiler import frontend

if TYPE_CHECKING:  # sympy's import takes a second: only a dynamic compile pays it
    from compiler import symbols

# per user tensor (in frontend.user_tensors order): the dims that are symbolic
DynamicDims = tuple[frozenset[int], ...]


def marked_dims(x: torch.Tensor) -> frozenset[int]:
    """Dims the user declared dynamic: `compiler.mark_dynamic(x, dim)` (or torch's own
    `torch._dynamo.mark_dynamic`, so code written for torch.compile keeps its marks)."""
    ours = getattr(x, "_fusionlens_dynamic", ())
    theirs = getattr(x, "_dynamo_dynamic_indices", ())
    return frozenset(d % max(x.ndim, 1) for d in (*ours, *theirs))


def mark_dynamic(x: torch.Tensor, dims: int | Sequence[int]) -> torch.Tensor:
    """Declare dims of `x` dynamic up front: a jit compiles a program for every size of them
    from the first call, rather than after a size has changed once. Returns `x`."""
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    for d in dims:
        if not -x.ndim <= d < max(x.ndim, 1):
            raise IndexError(f"dim {d} is out of range for a tensor of {x.ndim} dims")
    x._fusionlens_dynamic = tuple(sorted({*getattr(x, "_fusionlens_dynamic", ()), *(d % x.ndim for d in dims)}))
    return x


class Unsupported(Exception):
    """The call cannot be traced with symbolic sizes; it compiles for its static shapes."""


@dataclass
class Guards:
    """What a dynamic program assumes of its user tensors' sizes (and strides), as torch's
    ShapeEnv wrote it; `check(tensors)` before each call."""

    env: symbols.SymbolEnv
    fakes: list[torch.Tensor]  # the fake user tensors the trace ran on
    source: str = ""
    _check: Callable[[list[torch.Tensor]], bool] | None = None

    def finish(self) -> None:
        """Read the guards once every stage has run (each may add some)."""
        self.source = self.env.produce_guards_expression(self.fakes, ignore_static=False) or "True"
        code = compile(f"lambda L: {self.source}", "<fusionlens guards>", "eval")
        self._check = eval(code, {})  # noqa: S307 - the ShapeEnv's own expression over tensor sizes
        self.env.freeze()  # a later decision on a size would be a guard nobody checks

    def check(self, tensors: Sequence[torch.Tensor]) -> bool:
        assert self._check is not None, "Guards.finish() first"
        return bool(self._check({f"t{i}": t for i, t in enumerate(tensors)}))

    def describe(self, names: Sequence[str] = ()) -> list[str]:
        """The guards as users read them (`2 <= x.shape[1]`), the tensors by `names` (the
        program's user inputs, in order)."""
        if self.source == "True":
            return []
        name = lambda m: names[int(m.group(1))] if int(m.group(1)) < len(names) else f"t{m.group(1)}"  # noqa: E731
        text = re.sub(r"L\['t(\d+)'\]\.size\(\)\[(\d+)\]", lambda m: f"{name(m)}.shape[{m.group(2)}]", self.source)
        text = re.sub(r"L\['t(\d+)'\]\.stride\(\)\[(\d+)\]", lambda m: f"{name(m)}.stride({m.group(2)})", text)
        text = re.sub(r"L\['t(\d+)'\]\.", lambda m: f"{name(m)}.", text)
        return [g.strip() for g in text.split(" and ")]


def trace(fn, args, kwargs, name: str, dims: DynamicDims,
          real: frontend.TraceResult) -> tuple[frontend.TraceResult, Guards]:
    """`fn` traced on fake tensors with `dims` symbolic; `real` (its real trace) lends eager's
    result, the notes and the updates it found. Raises Unsupported where the symbolic trace
    cannot stand for the real one."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    from compiler import symbols
    env = symbols.SymbolEnv()
    fakes, by_id = [], {}

    def fake(x):
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) not in by_id:
            symbolic = dims[len(fakes)] if len(fakes) < len(dims) else frozenset()
            context = StatelessSymbolicContext(dynamic_sizes=[
                DimDynamic.DYNAMIC if i in symbolic else DimDynamic.STATIC for i in range(x.ndim)])
            by_id[id(x)] = env.fake.from_tensor(x, symbolic_context=context)
            fakes.append(by_id[id(x)])
        return by_id[id(x)]
    user = frontend.user_tensors(fn, args, kwargs)
    for x in user:  # in the order the program takes them, so dims[i] is the i-th's
        fake(x)
    try:
        with env.fake:
            symbolic = frontend.trace(fn, args, kwargs, name, clone=fake)
    except frontend.TraceError as e:
        raise Unsupported(e.message) from e
    except Exception as e:  # the fake run met what needs data (a .item(), a data-dependent shape)
        raise Unsupported(f"{type(e).__name__}: {e}") from e
    _same_program(real.trace, symbolic.trace)
    result = frontend.TraceResult(symbolic.trace, real.eager_output, real.constants, real.notes,
                                  real.eager_only, real.mutated, real.originals, real.copies, real.states, real.passed)
    return result, Guards(env, [by_id[id(x)] for x in user])


def _same_program(real, symbolic) -> None:
    """The symbolic trace stands for the real one only if the call took the same path."""
    ops = lambda t: [(b.sym.name, len(b.outputs)) for b in t.bound_symbols]  # noqa: E731
    if ops(real) != ops(symbolic):
        raise Unsupported("with symbolic sizes the call ran other ops than on the example")
    if [(d.name, s.name) for d, s in real.writeback] != [(d.name, s.name) for d, s in symbolic.writeback]:
        raise Unsupported("with symbolic sizes the call updated other tensors than on the example")
