"""The OpInfo sweep: every op of torch's OpInfo database, compiled by FusionLens.

For each OpInfo that supports float32 on the CPU (torch.testing._internal's `op_db`, which
needs the `expecttest` package) and its first few sample inputs, `lambda *a, **k: op(*a, **k)`
is compiled with the torch executor and checked against eager. Each op is classified by its
worst sample:

- native: every op the trace recorded is a known symbol and decomposes into prims;
- library: known symbols only, some of them run whole as a library call (matmul, sort, ...);
- declined: known symbols only, but a decomposition declines these arguments (or fails), or the
  op is its input at these shapes and the program hands it out (passes.decompose runs it whole so
  the caller gets eager's tensor: the summary counts those apart): that op runs whole, the
  report's fallbacks say why;
- fallback: some op has no symbol and runs as one opaque torch call; the result is eager's;
- mismatch: the compiled program's result differs from eager's (for ops whose eager values
  change from seed to seed, random draws and torch.empty, only shapes and dtypes count);
- raise: compiling raised where eager did not (a compiler bug);
- eager fails: eager PyTorch raises on every sample (not counted against us).

    python tests/opinfo_sweep.py                 # the summary table, and every op not native
    python tests/opinfo_sweep.py --markdown      # docs/opinfo.md
    python tests/opinfo_sweep.py --only cumsum,topk -v
"""

from __future__ import annotations

import argparse
import builtins
import itertools
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils import _pytree as pytree

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KINDS = ("native", "library", "declined", "fallback", "mismatch", "raise", "eager fails")
NO_FALLBACK = ("native", "library", "declined")  # every op it records is a known symbol
COMPILED = ("native", "library")  # and none of them runs as a whole-op torch call it declined
# passes.decompose's note for an op that is its input at a sample's shapes (x.t() of a vector,
# sum of a 0-d tensor) when the program hands it out: the torch call makes eager's tensor
IDENTITY_NOTE = "is its input here, and the program hands it out"
SAMPLES_PER_OP = 3


@dataclass
class Outcome:
    kind: str
    detail: str = ""  # why: the fallbacks' reasons, the mismatch, the exception
    fallbacks: list = field(default_factory=list)  # [(op, reason)]


@dataclass
class OpResult:
    name: str
    kind: str
    detail: str
    samples: int
    fallbacks: list = field(default_factory=list)


def op_db() -> list:
    """The OpInfos that support float32 on the CPU, sorted by name (deterministic)."""
    from torch.testing._internal.common_methods_invocations import op_db as db

    ops = [op for op in db if torch.float32 in op.supported_dtypes("cpu")]
    return sorted(ops, key=op_name)


def op_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def samples(op, n: int = SAMPLES_PER_OP) -> list:
    """The first `n` sample inputs of `op`, each (args, kwargs), made from a fixed seed."""
    torch.manual_seed(0)
    out = []
    for s in itertools.islice(op.sample_inputs("cpu", torch.float32, requires_grad=False), n):
        out.append(((s.input, *s.args), dict(s.kwargs)))
    return out


def _clone(tree):
    return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) and x.layout == torch.strided
                           else x, tree)


def _eager(op, args, kwargs):
    torch.manual_seed(0)
    with torch.no_grad():
        return op(*_clone(args), **_clone(kwargs))


# OpInfos whose values eager does not reproduce in the compiled program: random draws under a
# seed of their own (the program draws again), dropouts in a sample, uninitialised memory.
UNREPRODUCIBLE = {"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided",
                  "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal", "uniform",
          "nn.functional.alpha_dropout", "nn.functional.dropout", "nn.functional.dropout2d",
          "nn.functional.dropout3d", "nn.functional.feature_alpha_dropout", "nn.functional.fractional_max_pool2d",
          "nn.functional.fractional_max_pool3d", "nn.functional.rrelu", "nn.functional.scaled_dot_product_attention",
          "nn.functional.multi_head_attention_forward"}


def _eager_reproduces(op, args, kwargs) -> bool:
    """Whether eager gives the same values twice from different seeds (not so for random
    draws and torch.empty): only then do a compiled program's values have to match."""
    from fusionlens.driver import checking

    if op.name in UNREPRODUCIBLE:
        return False
    first = _eager(op, args, kwargs)
    torch.manual_seed(1)
    with torch.no_grad():
        second = op(*_clone(args), **_clone(kwargs))
    return checking.mismatch(second, first) is None


def _classify(c) -> Outcome:
    """native / library / declined / fallback from the decomposed trace of a Compiled."""
    from fusionlens.middle import passes
    from fusionlens.ops import torch_ops

    opaque = [(b.sym.name, b.note) for b in c.forward.traces["decomposed"].bound_symbols if b.sym.kind == "opaque"]
    if opaque:
        return Outcome("fallback", "; ".join(sorted({n for _, n in opaque})), opaque)
    declined = [(b.sym.name, b.note) for b in c.forward.traces["decomposed"].bound_symbols if b.note]
    if declined:
        return Outcome("declined", "; ".join(sorted({n for _, n in declined})), declined)
    leaves = passes.flatten(c.forward.traces["decomposed"].bound_symbols)
    library = sorted({b.sym.name for b in leaves if torch_ops.LIBRARY in b.sym.tags})
    return Outcome("library", ", ".join(library)) if library else Outcome("native")


def run_sample(op, args, kwargs) -> Outcome:
    """Compile `op` on one sample and classify it (eager must work on the sample)."""
    from fusionlens.driver import api
    from fusionlens.options import CompileOptions

    fn = lambda *a, **k: op(*a, **k)  # noqa: E731
    torch.manual_seed(0)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            options = CompileOptions.from_env(executors=["torch"])  # the suite's FUSIONLENS_VERIFY too
            c, report, failed = api.compile_checked(fn, _clone(args), _clone(kwargs), options, "op", benchmark=False)
    except Exception as e:  # noqa: BLE001 - a raise is what this sweep looks for
        message = getattr(e, "message", None) or str(e)
        return Outcome("raise", f"{type(e).__name__}: {message}".splitlines()[0][:300])
    errors = [d.message for d in report.diagnostics if d.severity == "error"]
    if failed and not (all("elements differ" in m for m in errors) and not _eager_reproduces(op, args, kwargs)):
        return Outcome("mismatch", "; ".join(errors)[:300])
    return _classify(c)


def sweep_op(op, n: int = SAMPLES_PER_OP) -> OpResult:
    """The op's worst outcome over its first `n` samples on which eager works."""
    outcomes = []
    try:
        cases = samples(op, n)
    except Exception as e:  # noqa: BLE001 - torch's own sample generator
        return OpResult(op_name(op), "eager fails", f"sample inputs: {type(e).__name__}: {e}"[:200], 0)
    for args, kwargs in cases:
        try:
            _eager(op, args, kwargs)
        except Exception:  # noqa: BLE001 - a sample eager rejects says nothing about us
            continue
        outcomes.append(run_sample(op, args, kwargs))
    if not outcomes:
        return OpResult(op_name(op), "eager fails", "eager raises on every sample", 0)
    worst = max(outcomes, key=lambda o: KINDS.index(o.kind))
    fallbacks = sorted({f for o in outcomes for f in o.fallbacks if o.kind == "fallback"})
    return OpResult(op_name(op), worst.kind, worst.detail, len(outcomes), fallbacks)


def sweep(ops, n: int = SAMPLES_PER_OP, verbose: bool = False) -> list:
    results = []
    for op in ops:
        r = sweep_op(op, n)
        results.append(r)
        if verbose:
            print(f"{r.kind:12} {r.name}  {r.detail}", file=sys.stderr)
    return results


def counts(results) -> Counter:
    return Counter(r.kind for r in results)


def identity_declines(results) -> list:
    """The declined ops whose only decline is an identity handed out (IDENTITY_NOTE): each
    decomposes, but the sweep's sample makes the op's result the program's."""
    return [r for r in results if r.kind == "declined" and all(IDENTITY_NOTE in part for part in r.detail.split("; "))]


def _share(n: int, total: int) -> str:
    return f"{n} of {total} ({100 * n / max(total, 1):.0f}%)"


def summary(results) -> str:
    c = counts(results)
    total = len(results)
    lines = [f"{'outcome':12} {'ops':>5}", "-" * 18]
    lines += [f"{k:12} {c[k]:5}" for k in KINDS]
    known = builtins.sum(c[k] for k in NO_FALLBACK)
    compiled = builtins.sum(c[k] for k in COMPILED)
    lines += ["-" * 18, f"{'total':12} {total:5}",
              f"compiled (native or library, no op declined to a whole torch call): {_share(compiled, total)}",
              f"no fallback (known symbols: native, library or declined): {_share(known, total)}",
              f"  of the declined, an identity at the sample's shapes handed out: {len(identity_declines(results))}",
              f"eager's result (all but mismatch and raise): {total - c['mismatch'] - c['raise']} of {total}"]
    return "\n".join(lines)


def fallback_reasons(results) -> Counter:
    """How many ops each fallen-back torch callable accounts for."""
    return Counter(op for r in results for op in {f[0] for f in r.fallbacks})


def markdown(results, n: int = SAMPLES_PER_OP) -> str:
    c = counts(results)
    total = len(results)
    lines = [
        "# OpInfo sweep",
        "",
        "Generated by `python tests/opinfo_sweep.py --markdown > docs/opinfo.md`; do not edit by hand.",
        "",
        f"Every OpInfo of torch {torch.__version__.split('+')[0]}'s `op_db` that supports float32 on the CPU, "
        f"compiled on its first {n} sample inputs",
        "with the torch executor and checked against eager (see [ops.md](ops.md) for the symbols). An op is",
        "*native* when every op it records decomposes into prims, *library* when some run whole as a",
        "known library call, *declined* when a known symbol's decomposition declines the sample's",
        "arguments (it runs whole, and says why; an op that is its input at the sample's shapes, and so",
        "the program's result, runs whole too, so that the caller gets eager's tensor), *fallback* when",
        "some op has no symbol and runs as one opaque torch call (the result is still eager's),",
        "*mismatch* when the result differs from eager's (only shapes and dtypes count for random draws",
        "and `torch.empty`), *raise* when compiling raises where eager does not. An op's outcome is its",
        "worst sample's; *compiled* counts the native and library ones.",
        "`tests/test_opinfo.py` runs a slice of this sweep in CI.",
        "",
        "| outcome | ops |",
        "|---|---|",
    ]
    lines += [f"| {k} | {c[k]} |" for k in KINDS]
    known = builtins.sum(c[k] for k in NO_FALLBACK)
    compiled = builtins.sum(c[k] for k in COMPILED)
    lines += [f"| **compiled** (native + library) | **{compiled} of {total}** |",
              f"| **no fallback** (native + library + declined) | **{known} of {total}** |",
              f"| declined as an identity at the sample's shapes, handed out | {len(identity_declines(results))} |", ""]
    lines += ["## Ops that decline, fall back, mismatch or raise", "", "| op | outcome | why |", "|---|---|---|"]
    for r in results:
        if r.kind not in ("native", "library", "eager fails"):
            lines.append(f"| `{r.name}` | {r.kind} | {_cell(r.detail)} |")
    lines += ["", "## Torch calls with no symbol, by the number of ops that reach them", "",
              "| torch call | ops |", "|---|---|"]
    for name, k in sorted(fallback_reasons(results).items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"| `{name}` | {k} |")
    lines += ["", "## Every op", ""]
    for kind in KINDS:
        names = [r.name for r in results if r.kind == kind]
        if names:
            lines += [f"**{kind}** ({len(names)}): " + ", ".join(f"`{x}`" for x in names), ""]
    return "\n".join(lines)


def _cell(text: str) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 160 else text[:157] + "..."


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--markdown", action="store_true", help="print docs/opinfo.md")
    p.add_argument("--samples", type=int, default=SAMPLES_PER_OP, help="sample inputs per op")
    p.add_argument("--only", default="", help="comma-separated op names (OpInfo name or name.variant)")
    p.add_argument("-v", "--verbose", action="store_true", help="a line per op as it runs (stderr)")
    a = p.parse_args(argv)
    ops = op_db()
    if a.only:
        wanted = set(a.only.split(","))
        ops = [op for op in ops if op.name in wanted or op_name(op) in wanted]
    start = time.perf_counter()
    results = sweep(ops, a.samples, a.verbose)
    if a.markdown:
        sys.stdout.write(markdown(results, a.samples))
        return 0
    print(summary(results))
    print(f"({time.perf_counter() - start:.0f} s)\n")
    for r in results:
        if r.kind not in ("native", "library"):
            print(f"{r.kind:12} {r.name}  {r.detail}")
    print("\nmost common fallbacks:", ", ".join(f"{k} ({v})" for k, v in fallback_reasons(results).most_common(25)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
