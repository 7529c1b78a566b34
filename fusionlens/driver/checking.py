"""Comparing compiled results with eager PyTorch: one tolerance per dtype, used everywhere,
and the check every compiled program passes on its example inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fusionlens.frontend import aliasing, intra_op, objects, overlap
from fusionlens.middle.autograd import torch_rules
from fusionlens.ops.torch_ops.fallbacks import ShapeChanged
from fusionlens.ir.program_calls import write_back
from fusionlens.ir import torch_compat
from fusionlens.ir.trace import OpTag
from fusionlens.ir.vocabulary import ValueRole
from fusionlens.report.schema import Diagnostic, DiagnosticCode

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


def mismatch(actual, expected, depth: int = 8, values: bool = True) -> str | None:
    """None when every tensor in `actual` matches `expected`; else what differs, in words.
    Objects pytree does not take apart (a library's cache) are compared attribute by attribute.
    `values=False`: tensors' shapes and dtypes only (a program that draws random numbers)."""
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
                inner = mismatch(vars(a), vars(e), depth - 1, values)
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
        if not values:
            continue
        if a.layout != torch.strided or e.layout != torch.strided:  # sparse: compare the values
            a, e = a.to_dense(), e.to_dense()
        # equal, the common case: 0.06 ms where isclose's first call costs 0.4 ms
        if torch_compat.plainly_equal(a, e):
            continue
        rtol, atol = tolerance(e.dtype)
        # torch.isclose rather than torch.testing.assert_close: the latter imports
        # torch.distributed on first use, which costs half a second in every process.
        close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True) if e.numel() else torch.ones(())
        if not bool(close.all()):
            bad = int((~close).sum())
            diff = (a.detach().double() - e.detach().double()).abs()
            diff = diff[~close]
            return (f"output {i}: {bad} of {e.numel()} elements differ beyond rtol={rtol}, atol={atol}"
                    f" (largest difference {float(diff.max()):.3g})")
    return None


# --- a compiled program against eager --------------------------------------------------------

def is_random(acquired) -> bool:
    """Whether the program draws random numbers: an op tagged so where its symbol (or, for a
    call with none, torch_ops.fallback_tags) is made, or one drawing a dropout mask inside."""
    return any(OpTag.RANDOM in b.sym.tags or torch_rules.draws_dropout(b) for b in acquired.bound_symbols)


def check_program(c, inputs: list[torch.Tensor], target, call: tuple | None = None,
                  any_rank: Callable[[bool], bool] = bool) -> list[Diagnostic]:
    """Run the compiled program `c` (a pipeline.Compiled) on `inputs` and compare it with the
    eager result recorded while tracing, and the inputs it updates in place with their values
    after the eager call (on copies: checking must not update the caller's tensors); the
    report's diagnostics, located at `target`. `call`: the user's (fn, args, kwargs), run in
    float64 to judge a result past its tolerance (without it, such a result is an error).
    `any_rank(need)`: whether some rank needs that float64 run (collectives.any_rank), for a
    call that communicates: then every rank runs it, so that their collectives match."""
    return checked_run(c, inputs, target, call, any_rank)[0]


def checked_run(c, inputs: list[torch.Tensor], target, call: tuple | None = None,
                any_rank: Callable[[bool], bool] = bool) -> tuple[list[Diagnostic], Any]:
    """check_program's diagnostics, and the result of the program's run it checked (jit's first
    call returns it where that run was the call's own: api._reusable)."""
    names = [v.name for v in c.acquired.inputs]
    mutated = c.traced.mutated
    run_on = aliasing.copies(inputs, [n in mutated for n in names])  # (inputs sharing memory: alike)
    try:
        with intra_op.one_thread(small_program(c, run_on)):  # as the trace's eager run of its ops was
            result = c.fn(*run_on)
    except ShapeChanged as e:  # on the trace's own inputs: the program's data differ from eager's
        # (a 16-bit chain kept in float32 counted other elements, fuzz triton 17906)
        return [Diagnostic("error", f"the compiled program does not match eager PyTorch on the example inputs: "
                           f"{e}", target.file, target.line, code=DiagnosticCode.MISMATCH)], None
    actual = objects.resolve(result, c.traced.passed)  # the objects the call was passed, in its result
    problem = mismatch(actual, c.traced.eager_output)
    random = is_random(c.acquired)
    judged = []
    rejudge = any_rank(bool(problem) and not random and call is not None)
    errors = _judged_in_float64(c, inputs, actual, call) if rejudge and call is not None else None
    if not problem:  # judged for another rank's sake: nothing of its own to forgive
        errors = None
    if errors is not None:
        judged = [Diagnostic("information", f"the compiled result differs from eager's beyond the tolerance "
                             f"({problem}), but is as close to a float64 run as eager's is ({errors}): computed "
                             "in another precision or order, not wrong", target.file, target.line,
                             code=DiagnosticCode.PRECISION)]
        problem = None
    for n, x in zip(names, run_on):
        if n in mutated and problem is None:
            wrong = mismatch(x, mutated[n])
            problem = f"{n}, updated in place, differs from eager's update: {wrong}" if wrong else None
    if problem and random:  # random draws differ from eager's: shapes and dtypes only
        problem = mismatch(actual, c.traced.eager_output, values=False)
    if problem:
        return [Diagnostic("error", f"the compiled program does not match eager PyTorch on the example inputs: "
                           f"{problem}", target.file, target.line, code=DiagnosticCode.MISMATCH)], actual
    return judged, actual


def small_program(c, inputs: list[torch.Tensor]) -> bool:
    """Whether the forward program's inputs and every value it makes are small tensors
    (intra_op.small): its checked run then uses one intra-op thread. A dynamic program's sizes
    are symbols: never."""
    if c.guards is not None or not intra_op.small(inputs):
        return False
    return intra_op.small_ops(c.forward.plan.trace.bound_symbols)


def _judged_in_float64(c, inputs: list[torch.Tensor], actual, call: tuple) -> str | None:
    """Where the compiled results differ from eager's, whether each differing one is as close
    to a float64 run of the call as eager's is (as_accurate_as_eager, as the gradients are
    judged): the RMS errors in words when all are, else None. A program that computes a
    float16 chain in float32 is closer to float64 than eager, not wrong."""
    got = [t for t in pytree.tree_leaves(actual) if isinstance(t, torch.Tensor)]
    expected = [t for t in pytree.tree_leaves(c.traced.eager_output) if isinstance(t, torch.Tensor)]
    exact = _float64_results(c, inputs, call)
    if exact is None or not len(got) == len(expected) == len(exact):
        return None
    errors = []
    for a, e, x in zip(got, expected, exact):
        if mismatch(a, e) is None:
            continue
        if not (e.dtype.is_floating_point and x.shape == e.shape and e.layout == torch.strided) or \
                not as_accurate_as_eager(a, e, x):
            return None
        errors.append(f"RMS error {_rmse(a, x):.2g}, eager's {_rmse(e, x):.2g}")
    return "; ".join(errors) or None


def _float64_results(c, inputs: list[torch.Tensor], call: tuple) -> list[torch.Tensor] | None:
    """The user's call run eagerly in float64 (every floating input, parameter and buffer
    promoted for it, as for the gradients), its state restored after: not the traced ops
    replayed, which would share any fault of the trace (an update through a view it missed).
    None where the call does not run in float64."""
    fn, args, kwargs = call
    state = [x for v, x in zip(c.acquired.inputs, inputs) if v.role is ValueRole.BUFFER or v.name in c.traced.mutated]
    try:
        with restored(state), in_float64(inputs), torch.no_grad(), \
                torch.random.fork_rng(devices=_cuda_devices(inputs)):
            torch.manual_seed(0)
            out = fn(*args, **kwargs)
            return [t.detach().clone() for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    except Exception:  # noqa: BLE001 - user code that cannot run in float64: no second opinion
        return None


# --- gradients of a training compile against eager's ---------------------------------------

def grad_mismatch(actual, expected, through=()) -> str | None:
    """None when gradient `actual` matches eager's `expected`. Gradients are sums over many
    terms, so the tolerance is ten times the dtype's, relative to the gradient's largest element; the
    loosest of `through`'s dtypes when lower precision values carried it (an fp16 model's
    float32 master gradient)."""
    if expected is None or actual is None:
        other = actual if expected is None else expected
        return None if other is None or not bool(other.ne(0).any()) else "one of them is missing"
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return f"got {actual.dtype}{list(actual.shape)}, eager gives {expected.dtype}{list(expected.shape)}"
    actual, expected = actual.detach(), expected.detach()
    if actual.layout != torch.strided or expected.layout != torch.strided:  # a sparse input's gradient
        actual, expected = actual.to_dense(), expected.to_dense()
    # ten times the forward's tolerance: a gradient sums over a whole backward (a BatchNorm
    # CNN's input gradient differs from eager's by ~1e-4 of its scale from rounding alone);
    # a wrong rule is off by far more
    rtol, atol = (10 * t for t in max(tolerance(d) for d in {expected.dtype, *through}))
    scale = max(1.0, float(expected.abs().max())) if expected.numel() else 1.0
    close = torch.isclose(actual, expected, rtol=rtol, atol=atol * scale, equal_nan=True)
    if bool(close.all()):
        return None
    diff = (actual.double() - expected.double()).abs()[~close]
    return (f"{int((~close).sum())} of {expected.numel()} elements differ beyond rtol={rtol}, "
            f"atol={atol}x{scale:.3g} (largest difference {float(diff.max()):.3g})")


def differentiable_outputs(result) -> list[tuple[int, torch.Tensor]]:
    """(position, tensor) of each tensor in a result that autograd can differentiate."""
    return [(i, t) for i, t in enumerate(pytree.tree_leaves(result))
            if isinstance(t, torch.Tensor) and _carries_gradient(t)]


def _carries_gradient(t: torch.Tensor) -> bool:
    """Not a view made under no_grad of a tensor that requires grad: it requires grad too but has
    no grad_fn, and no gradient goes through it (one whose base changed since raises when asked).
    A view made a leaf that requires grad (`base[::2].requires_grad_()`) carries one."""
    try:
        return t.requires_grad and (t._base is None or t.grad_fn is not None or not t._base.requires_grad)
    except RuntimeError:
        return False


def cotangents(outputs: list[tuple[int, torch.Tensor]], seed: int = 0) -> list[torch.Tensor]:
    """Fixed random cotangents for (position, tensor) outputs: the same ones for every run."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(t.shape, generator=gen, dtype=torch.float64).to(t.dtype).to(t.device) for _, t in outputs]


def backward_inputs(c, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """What a training compile's backward program reads, for a forward run on `inputs`: the
    tensors that forward saves, then fixed cotangents of its differentiable results."""
    d = c.differentiated
    with torch.no_grad():
        results = c.forward.fn(*inputs)
    diff = [t for t, ok in zip(results[:d.n_results], d.differentiable) if ok]
    return list(results[d.n_results:]) + cotangents(list(enumerate(diff)))


class restored:
    """Restores tensors (a module's buffers, inputs a call updates) when the block ends: the
    eager run a check makes must not update the caller's state a second time."""

    def __init__(self, tensors):
        self.tensors = [t for t in tensors if isinstance(t, torch.Tensor)]

    def __enter__(self):
        with torch.no_grad():
            self.saved = [t.clone() for t in self.tensors]
        return self

    def __exit__(self, *exc):
        with torch.no_grad():
            for t, s in zip(self.tensors, self.saved):
                write_back(t, s)  # (an expanded input: each memory location once)
        return False


class in_float64:
    """Inside the block every floating tensor of `tensors` holds a float64 copy of its values
    (as `model.double()` would make it, without copying the model) and factory calls make
    float64; after it each holds its own storage again, so whatever the block updates in place
    lands in the copies."""

    def __init__(self, tensors):
        unique = {id(t): t for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()}
        self.tensors = list(unique.values())

    def __enter__(self):
        self.default = torch.get_default_dtype()
        self.storage = [t.data for t in self.tensors]
        for t in self.tensors:
            t.data = t.data.double()
        torch.set_default_dtype(torch.float64)
        return self

    def __exit__(self, *exc):
        torch.set_default_dtype(self.default)
        for t, data in zip(self.tensors, self.storage):
            t.data = data
        return False


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.sqrt(torch.mean(torch.square(a.detach().double() - b.detach().double())))) if a.numel() else 0.0


def as_accurate_as_eager(actual, expected, exact) -> bool:
    """Whether a compiled result is as close to `exact` (a float64 run of the same call) as
    eager's `expected` is, as torch._dynamo's accuracy check judges it: its RMS error at most
    twice eager's (three times for small tensors and 1x1 convolution weights, where rounding
    noise dominates: dynamo's multiplier), plus the dtype's tolerance of the result's scale."""
    if actual is None or expected is None or exact is None or not bool(torch.isfinite(actual).all()):
        return False
    small = exact.numel() < 1000 or (exact.ndim == 4 and exact.shape[-1] == exact.shape[-2] == 1)
    floor = tolerance(expected.dtype)[1] * max(1.0, float(exact.abs().max()) if exact.numel() else 1.0)
    return _rmse(actual, exact) <= (3.0 if small else 2.0) * _rmse(expected, exact) + floor


def float64_gradients(fn, args, kwargs, inputs: list[torch.Tensor], wrt: list[torch.Tensor], positions: list[int],
                      cots: list[torch.Tensor]) -> list[torch.Tensor | None] | None:
    """The gradients of `wrt` from eager `fn` run in float64 (every floating input, parameter
    and buffer promoted for the call), for the same cotangents of the outputs at `positions`;
    None when the call does not run in float64 (code that fixes its own dtypes)."""
    try:
        with in_float64(list(inputs) + list(wrt)), torch.random.fork_rng(devices=_cuda_devices(inputs)):
            torch.manual_seed(0)
            outs = dict(differentiable_outputs(fn(*args, **kwargs)))
            if sorted(outs) != sorted(positions):
                return None
            grads = torch.autograd.grad([outs[i] for i in positions], wrt, [g.double() for g in cots],
                                        allow_unused=True)
            return [g.detach().clone() if g is not None else None for g in grads]
    except Exception:  # noqa: BLE001 - user code that cannot run in float64: no second opinion
        return None


def _cuda_devices(inputs) -> list[int]:
    return sorted({t.device.index or 0 for t in inputs if isinstance(t, torch.Tensor) and t.device.type == "cuda"})


def check_gradients(c, fn, args, kwargs, inputs: list[torch.Tensor], target,
                    any_rank: Callable[[bool], bool] = bool) -> list[Diagnostic]:
    """A training compile's gradients of every input that requires grad, against eager's, for
    fixed random cotangents of the differentiable outputs; both runs see the same random
    stream, and neither updates the caller's tensors or buffers for good. A gradient that
    differs from eager float32's is judged again against a float64 run, as torch._dynamo's
    accuracy check does: where a gradient is ill-conditioned (a BatchNorm's or a squeeze-
    excitation's, over few values) two float32 roundings differ by more than any tolerance
    while both are as close to the exact value as float32 allows. `any_rank`: as check_program's."""
    d = c.differentiated
    if d is None:
        return []
    wrt = [inputs[i] for i in d.wrt]
    names = [c.acquired.inputs[i].name for i in d.wrt]
    state = [x for v, x in zip(c.acquired.inputs, inputs) if v.role is ValueRole.BUFFER or v.name in c.traced.mutated]
    updated = [i for i, v in enumerate(c.acquired.inputs) if v.role is ValueRole.INPUT and v.name in c.traced.mutated]
    with restored(state), torch.random.fork_rng(devices=_cuda_devices(inputs)):  # each run from the same state
        torch.manual_seed(0)
        run_on, wrt_compiled, _ = _own_copies(d, inputs, wrt, args, kwargs, updated)
        outs = differentiable_outputs(c.fn(*run_on))
        cots = cotangents(outs)
        got = torch.autograd.grad([t for _, t in outs], wrt_compiled, cots, allow_unused=True) if outs else []
    with restored(state), torch.random.fork_rng(devices=_cuda_devices(inputs)):
        torch.manual_seed(0)
        _, wrt_eager, (eager_args, eager_kwargs) = _own_copies(d, inputs, wrt, args, kwargs, updated)
        eager = dict(differentiable_outputs(fn(*eager_args, **eager_kwargs)))
        pairs = [(eager[i], g) for (i, _), g in zip(outs, cots) if i in eager]
        # eager's backward reads what its forward saved (batch_norm: the running statistics),
        # so it runs before the block restores them
        expected = torch.autograd.grad([t for t, _ in pairs], wrt_eager, [g for _, g in pairs],
                                       allow_unused=True) if pairs and len(pairs) == len(outs) else []
    if len(pairs) != len(outs):
        return [_gradient_error("eager's outputs that require grad are not the compiled program's", target)]
    through = {t.dtype for t in inputs} | {t.dtype for _, t in outs}
    through = {d for d in through if d.is_floating_point}
    differing = [(k, m) for k, (a, e) in enumerate(zip(got, expected)) if (m := grad_mismatch(a, e, through))]
    if not any_rank(bool(differing)):
        return []
    with restored(state):  # on every rank where one needs it: the float64 call communicates too
        _, _, (args, kwargs) = _own_copies(d, inputs, wrt, args, kwargs, updated)
        exact = float64_gradients(fn, args, kwargs, inputs, wrt, [i for i, _ in outs], cots)
    if not differing:
        return []
    wrong = [(k, m) for k, m in differing if exact is None or not as_accurate_as_eager(got[k], expected[k], exact[k])]
    if wrong:
        k, m = wrong[0]
        return [_gradient_error(f"the gradient of {names[k]}: {m}", target)]
    shown = ", ".join(names[k] for k, _ in differing[:3]) + (" ..." if len(differing) > 3 else "")
    return [Diagnostic("information", f"the compiled gradients of {shown} differ from eager float32's beyond "
                       "the tolerance, but are as close to a float64 run as eager's are: ill-conditioned "
                       "there, not wrong", target.file, target.line, code=DiagnosticCode.ILL_CONDITIONED)]


def _own_copies(d, inputs: list[torch.Tensor], wrt: list[torch.Tensor], args, kwargs, updated=()):
    """(inputs, what to differentiate for, (args, kwargs)) of one checking run: where the call
    updates a non-leaf input that requires grad in place (d.written), that run gets its own
    copy, a non-leaf made from a fresh leaf as the caller's is, the gradient taken at the fresh
    leaf: the compiled and the eager run must not update the same tensor. So does a user input
    it updates (`updated`) that needs no gradient (a KV cache): eager's update under grad mode
    would give the caller's tensor a graph, which the check's backward then frees, and the
    call's result, whose graph reaches it, could not be differentiated. (A leaf that requires
    grad, updated under no_grad, is state: `restored` puts it back between the runs.)"""
    swap: dict[int, torch.Tensor] = {}
    at: dict[int, torch.Tensor] = {}
    for i in d.written:
        x = inputs[i]
        if x.is_leaf:
            continue
        base = x.detach().clone().requires_grad_(x.requires_grad)
        swap[id(x)], at[id(x)] = base.clone(), base
    for i in updated:
        x = inputs[i]
        if id(x) not in swap and not x.requires_grad:
            swap[id(x)] = overlap.exact_copy(x)
    if not swap:
        return inputs, wrt, (args, kwargs)
    own = lambda t: swap.get(id(t), t) if isinstance(t, torch.Tensor) else t  # noqa: E731
    return ([own(x) for x in inputs], [at.get(id(x), x) for x in wrt],
            pytree.tree_map(own, (tuple(args), dict(kwargs))))


def _gradient_error(problem: str, target) -> Diagnostic:
    return Diagnostic("error", f"the compiled backward does not match eager PyTorch on the example inputs: "
                      f"{problem}", target.file, target.line, code=DiagnosticCode.GRADIENT_MISMATCH)
