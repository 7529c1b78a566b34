"""One program compiled once by `compiler.jit`, called three times, judged against eager.

This module needs torch and FusionLens only: the fuzzer's standalone scripts carry its text
verbatim (tests/fuzz/script.py), so a script judges exactly as the fuzzer did.

The rule: each call's results, the inputs it updated in place and (training) the gradients
of the inputs that require grad must match eager's within fusionlens/driver/checking.py's tolerance
of their dtype; a floating result that does not passes when it is as close to a float64 run
of the same call as eager's own result is (`checking.as_accurate_as_eager`, dynamo's rule).
A discrete result (integers, booleans) that differs from eager passes where it equals the
float64 run's. A result that is an input (or shares one's memory) in eager must be so here, and
one that is new in eager must be new here (`tie`); an input the call updated from values that
require grad carries their history, judged as a further result. A call where eager raises skips the program. Where the jit's own check
rejected the program (the call ran eagerly), the compiled program is run directly and
judged too: a wrong program is a defect even when the check hides it, and so is a right
one the check rejects.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import compiler
from fusionlens.driver import checking
from fusionlens.options import CompileOptions

PASS, SKIP, FAIL = "pass", "skip", "fail"
RAISES = "raises"  # FusionLens raised where eager does not
WRONG = "wrong-result"  # a call returned a wrong value, or updated an input wrongly, silently
WRONG_GRAD = "wrong-gradient"  # a call's gradients are wrong, silently
CAUGHT = "caught-wrong"  # the check caught a wrong program, so the signature runs eagerly
REJECTS = "check-rejects"  # the check rejected a program that is as accurate as eager
CALLS = 3


@dataclass
class Verdict:
    status: str  # PASS, SKIP or FAIL
    category: str = ""  # for FAIL: one of the categories above
    call: int = -1  # the call that failed or skipped
    detail: str = ""
    eager_only: bool = False  # FusionLens chose to run a call eagerly, with a warning (no error)
    hits: int = 0  # calls the cached program served
    # dynamic mode: the first program's ops and fallback ops, how many programs the calls
    # compiled, and how many of the recompiles said why (a "compiled again" diagnostic)
    ops: int = 0
    fallbacks: int = 0
    compiles: int = 0
    explained: int = 0

    def key(self) -> str:
        """What a shrunk program must keep failing with: its category (and exception type)."""
        return f"{RAISES}:{self.detail.split(':')[0]}" if self.category == RAISES else self.category

    def summary(self) -> str:
        if self.status != FAIL:
            return self.status + (f" (call {self.call}: {self.detail})" if self.detail else "")
        return f"{self.category} on call {self.call}: {self.detail}"


@dataclass
class Observed:
    """What one call did: its results, its inputs after it, and the gradients of the inputs
    that require grad for fixed cotangents of the results that do."""
    outputs: list[torch.Tensor]
    inputs: list[torch.Tensor]
    positions: list[int]  # the results that require grad
    cotangents: list[torch.Tensor]
    grads: list[torch.Tensor | None]
    # per result: ("is", i) where it is input i itself, ("view", i) where it shares input i's memory
    ties: list[tuple[str, int] | None] = field(default_factory=list)


def tie(t, args: list[torch.Tensor]) -> tuple[str, int] | None:
    """Whether result `t` is one of the call's inputs, or shares one's memory (a view of it)."""
    if not isinstance(t, torch.Tensor):
        return None
    for i, a in enumerate(args):
        if t is a:
            return ("is", i)
    ptr = t.untyped_storage().data_ptr() if t.layout == torch.strided and t.numel() else 0
    for i, a in enumerate(args):
        if ptr and a.layout == torch.strided and a.untyped_storage().data_ptr() == ptr:
            return ("view", i)
    return None


def observe(fn: Callable, args: list[torch.Tensor], grad: bool, call: int,
            cots: list[torch.Tensor] | None = None) -> Observed:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fn(*args)
        outs = list(result) if isinstance(result, (tuple, list)) else [result]
        ties = [tie(o, args) for o in outs]
        # an input updated in place from values that require grad carries their history: judged
        # as a result after the results (args are leaves: one that required grad was not written)
        written = [a for a in args if a.grad_fn is not None and not any(a is o for o in outs)]
        diff = [(i, o) for i, o in enumerate(outs + written) if isinstance(o, torch.Tensor) and o.requires_grad]
        wrt = [a for a in args if a.requires_grad and a.grad_fn is None]
        grads: list[torch.Tensor | None] = []
        if cots is not None and [c.shape for c in cots] != [o.shape for _, o in diff]:
            grad = False  # not eager's differentiable results: `problems` says so
        if grad and diff and wrt:
            cots = cots if cots is not None else checking.cotangents(diff, seed=call)
            grads = list(torch.autograd.grad([o for _, o in diff], wrt, cots, allow_unused=True))
    detach = lambda t: t.detach() if isinstance(t, torch.Tensor) else t
    return Observed([detach(o) for o in outs], [a.detach() for a in args], [i for i, _ in diff],
                    list(cots or []), [detach(g) for g in grads], ties)


def float64_run(fn: Callable, args: list[torch.Tensor], grad: bool, call: int,
                expected: Observed) -> Observed | None:
    """The call in float64 (every floating input promoted, as checking.in_float64 does), with
    eager's cotangents; None where the program does not run so."""
    try:
        with checking.in_float64(args):
            seen = observe(fn, args, grad, call, [c.double() for c in expected.cotangents])
            return Observed(seen.outputs, [a.detach().clone() for a in args], seen.positions, seen.cotangents,
                            seen.grads, seen.ties)
    except Exception:  # noqa: BLE001 - no second opinion for a program that fixes its own dtypes
        return None


def tensor_problem(got, expected, exact, grad: bool = False) -> str | None:
    """None when `got` is right by the rule above; else what is wrong, in words. `grad`:
    `got` is a gradient (checking.grad_mismatch's tolerance)."""
    problem = checking.grad_mismatch(got, expected) if grad else checking.mismatch(got, expected)
    if problem is None:
        return None
    if not all(isinstance(t, torch.Tensor) for t in (got, expected, exact)) or got.shape != expected.shape \
            or got.dtype != expected.dtype or exact.shape != expected.shape:
        return problem
    if got.is_floating_point():
        if checking.as_accurate_as_eager(got.detach(), expected.detach(), exact.detach()):
            return None
        return (f"{problem}; further from float64 than eager (RMS {_rmse(got, exact):.3g}, "
                f"eager's {_rmse(expected, exact):.3g})")
    differ = got != expected
    if bool((got[differ] == exact.to(got.dtype)[differ]).all()):
        return None
    return problem


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).square().mean().sqrt()) if a.numel() else 0.0


def _at(seen: Observed | None, part: str, i: int) -> torch.Tensor | None:
    values = getattr(seen, part) if seen is not None else []
    return values[i] if i < len(values) else None


def problems(got: Observed, expected: Observed, exact: Callable[[], Observed | None],
             ties: bool = True) -> tuple[str, str] | None:
    """(category, what differs) for the first thing `got` gets wrong, or None. `exact` runs
    the float64 call, only when a comparison needs it. `ties`: a result that is an input, or a
    view of one, in eager must be so here too (and no other result may be)."""
    if len(got.outputs) != len(expected.outputs):
        return WRONG, f"{len(got.outputs)} results, eager returns {len(expected.outputs)}"
    for k, (a, e) in enumerate(zip(got.ties, expected.ties) if ties else ()):
        # (the input itself and a view of it are alike here; where eager's is a view, a new
        # tensor of its values passes: a view of an input the call updates, or one at a
        # data-dependent offset, x[i] of a 0-d tensor i, is not one yet: docs/fuzzing.md)
        if a != e and (a is None or e is None or a[1] != e[1]) and not (e and e[0] == "view" and a is None):
            word = lambda t: f"input {t[1]}" + (" itself" if t[0] == "is" else "'s view") if t else "a new tensor"  # noqa: E731
            return WRONG, f"result {k} is {word(a)}, eager's is {word(e)}"
    if got.positions != expected.positions:
        return WRONG_GRAD, f"results {got.positions} require grad, eager's {expected.positions}"
    parts = [("outputs", "result {}", WRONG), ("inputs", "input {}, updated in place,", WRONG),
             ("grads", "the gradient of input {}", WRONG_GRAD)]
    ref: list[Observed | None] = []
    for part, what, category in parts:
        grad = part == "grads"
        for i, (a, e) in enumerate(zip(getattr(got, part), getattr(expected, part))):
            if tensor_problem(a, e, None, grad) is None:
                continue
            if not ref:
                ref.append(exact())
            problem = tensor_problem(a, e, _at(ref[0], part, i), grad)
            if problem is not None:
                return category, f"{what.format(i)}: {problem}"
    return None


def describe(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


def check(fn: Callable, make_inputs: Callable[[int], list[torch.Tensor]], executors: list[str] | None,
          grad: bool, dynamic: bool = False, calls: int = CALLS) -> Verdict:
    """`fn` compiled once with `executors` (None: the defaults), called `calls` times on
    `make_inputs(call)`; the first thing it gets wrong, or PASS (SKIP where eager raises).
    `dynamic`: compiled with dynamic=True, each call at other sizes; a later call where eager
    raises (a line that needs the first sizes) is left out, and the Verdict counts programs."""
    dynamic_shapes = {"dynamic": True} if dynamic else {}
    jfn = compiler.jit(fn, executors=executors, options=CompileOptions(verify=True), **dynamic_shapes)
    eager_only = False
    first = None
    for call in range(calls):
        try:
            expected = observe(fn, make_inputs(call), grad, call)
        except Exception as e:  # noqa: BLE001 - eager raises: nothing to compare with
            if dynamic and call > 0:
                continue
            return Verdict(SKIP, call=call, detail=f"eager raises {describe(e)}")
        exact = lambda call=call, expected=expected: float64_run(fn, make_inputs(call), grad, call, expected)
        try:
            got = observe(jfn, make_inputs(call), grad, call, expected.cotangents or None)
        except Exception as e:  # noqa: BLE001 - FusionLens raises where eager does not
            return Verdict(FAIL, RAISES, call, describe(e), eager_only, jfn.hits)
        entry = jfn.last
        assert entry is not None
        first = first or entry
        found = problems(got, expected, exact)
        if found:
            return Verdict(FAIL, found[0], call, found[1], eager_only, jfn.hits)
        errors = [d.message for d in entry.report.diagnostics if d.severity == "error"]
        if entry.eager_fallback and (entry.compiled.eager_only is not None or not errors):
            # FusionLens chose to run it eagerly, and said why (an in-place update of a view; a
            # data-dependent shape that changed): by design, whatever the check said
            eager_only = True
        elif entry.eager_fallback:  # the check rejected the program
            c = entry.compiled
            raw = lambda *args, c=c: c.fn(*args, *c.constants)
            try:
                found = problems(observe(raw, make_inputs(call), grad, call, expected.cotangents or None),
                                 expected, exact, ties=False)
            except Exception as e:  # noqa: BLE001 - it raises on this call (ShapeChanged, say): still rejected
                found = (CAUGHT, f"the compiled program raises {describe(e)}")
            if found:
                return Verdict(FAIL, CAUGHT, call, f"{found[1]} (the jit's check caught it: this signature runs "
                               "eagerly)", eager_only, jfn.hits)
            return Verdict(FAIL, REJECTS, call, errors[0], eager_only, jfn.hits)
    if not dynamic or first is None:
        return Verdict(PASS, eager_only=eager_only, hits=jfn.hits)
    said = {id(e): e for e in jfn.cache.values()}.values()
    explained = sum(any(d.message.startswith("compiled again") for d in e.report.diagnostics) for e in said)
    return Verdict(PASS, eager_only=eager_only, hits=jfn.hits, ops=len(first.report.ops),
                   fallbacks=len(first.report.fallbacks), compiles=jfn.cache_info()["compiles"], explained=explained)
