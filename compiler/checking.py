"""Comparing compiled results with eager PyTorch: one tolerance per dtype, used everywhere,
and the check every compiled program passes on its example inputs."""

from __future__ import annotations

from typing import Optional

import torch
from torch.utils import _pytree as pytree

from compiler.report import Diagnostic

# (rtol, atol). Compiled programs reorder and fuse float math, so these are those of a
# compiler, not of one op: float32 results may differ in the last few bits of a long chain.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}


def tolerance(dtype: torch.dtype):
    return TOLERANCES.get(dtype, (0.0, 0.0))


def _structure(spec) -> str:
    text = str(spec)
    return text if len(text) <= 200 else text[:197] + "..."


def mismatch(actual, expected, depth: int = 8) -> Optional[str]:
    """None when every tensor in `actual` matches `expected`; else what differs, in words.
    Objects pytree does not take apart (a library's cache) are compared attribute by attribute."""
    a_flat, a_spec = pytree.tree_flatten(actual)
    e_flat, e_spec = pytree.tree_flatten(expected)
    if len(a_flat) != len(e_flat):
        return f"the compiled program returned {len(a_flat)} values, eager returned {len(e_flat)}"
    if a_spec != e_spec:
        return f"the compiled program returned {_structure(a_spec)}, eager returned {_structure(e_spec)}"
    for i, (a, e) in enumerate(zip(a_flat, e_flat)):
        if not isinstance(e, torch.Tensor):
            if a is e:
                continue
            if type(a) is type(e) and depth and isinstance(getattr(e, "__dict__", None), dict):
                inner = mismatch(vars(a), vars(e), depth - 1)
                if inner:
                    return f"output {i} ({type(e).__name__}): {inner}"
                continue
            if a != e:
                return f"output {i}: {a!r} != {e!r}"
            continue
        if not isinstance(a, torch.Tensor):
            return f"output {i}: expected a tensor, got {type(a).__name__}"
        if a.shape != e.shape or a.dtype != e.dtype:
            return (f"output {i}: got {a.dtype}{list(a.shape)}, eager gives {e.dtype}{list(e.shape)}")
        if a.layout != torch.strided or e.layout != torch.strided:  # sparse: compare the values
            a, e = a.to_dense(), e.to_dense()
        rtol, atol = tolerance(e.dtype)
        # torch.isclose rather than torch.testing.assert_close: the latter imports
        # torch.distributed on first use, which costs half a second in every process.
        close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True) if e.numel() else torch.ones(())
        if not bool(close.all()):
            bad = int((~close).sum())
            diff = (a.double() - e.double()).abs()
            diff = diff[~close]
            return (f"output {i}: {bad} of {e.numel()} elements differ beyond rtol={rtol}, atol={atol}"
                    f" (largest difference {float(diff.max()):.3g})")
    return None


# --- a compiled program against eager --------------------------------------------------------

_RANDOM_OPS = ("rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "bernoulli", "multinomial",
               "normal", "dropout", "uniform_", "normal_", "random_", "exponential_")


def _is_random(acquired) -> bool:
    return any("random" in b.sym.tags or b.sym.name.rsplit(".", 1)[-1].removeprefix("op_").removeprefix(
        "Tensor_") in _RANDOM_OPS for b in acquired.bound_symbols)


def _shapes_only(tree):
    return pytree.tree_map(lambda t: t.new_zeros(()).expand(t.shape) if isinstance(t, torch.Tensor) else t, tree)


def check_program(c, inputs: list, target) -> list:
    """Run the compiled program `c` (a pipeline.Compiled) on `inputs` and compare it with the
    eager result recorded while tracing, and the inputs it updates in place with their values
    after the eager call (on copies: checking must not update the caller's tensors); the
    report's diagnostics, located at `target`."""
    names = [v.name for v in c.traces["acquired"].inputs]
    mutated = c.traced.mutated
    run_on = [x.clone() if n in mutated else x for n, x in zip(names, inputs)]
    actual = c.fn(*run_on)
    problem = mismatch(actual, c.traced.eager_output)
    for n, x in zip(names, run_on):
        if n in mutated and problem is None:
            wrong = mismatch(x, mutated[n])
            problem = f"{n}, updated in place, differs from eager's update: {wrong}" if wrong else None
    if problem and _is_random(c.traces["acquired"]):  # random draws differ from eager's: shapes and dtypes only
        problem = mismatch(_shapes_only(actual), _shapes_only(c.traced.eager_output))
    out = []
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        out.append(Diagnostic(
            "information", "FusionLens compiles inference: the compiled program's outputs carry no autograd "
            "graph, though inputs or parameters require grad", target.file, target.line))
    if problem:
        out.append(Diagnostic(
            "error", f"the compiled program does not match eager PyTorch on the example inputs: {problem}",
            target.file, target.line))
    return out
