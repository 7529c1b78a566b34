"""Op meaning is typed data (issue 17): every symbol declares its kind (ir.SymbolKind) and tags
(ir.OpTag) where it is made; backward rules are found by the symbol object (rules.lookup);
a library call's FLOPs are its symbol's `flops`.

The old string checks are written here once, as the reference: whatever they inferred from a
name, a note or a name table, the declared tags must say too.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn import init

import compiler
from fusionlens.middle.autograd import composite_rules, prim_rules, rules, torch_rules
from fusionlens.ir.trace import OpTag, Symbol, SymbolKind
from fusionlens.ops import prims as P
from fusionlens.ops import torch_ops
from fusionlens.ops.torch_ops import activations, registry

# --- the old inferences, the reference ---------------------------------------------------

# checking._RANDOM_OPS: a program was random where an op's last name part, less "op_" and
# "Tensor_" (an opaque call's printed name), was one of these
OLD_RANDOM_SUFFIXES = ("rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "bernoulli",
                       "multinomial", "normal", "dropout", "uniform_", "normal_", "random_", "exponential_")
# what that rule missed (the list): random all the same
MISSED_BY_NAME = (torch.Tensor.cauchy_, torch.Tensor.geometric_, torch.Tensor.log_normal_, torch.Tensor.exponential_,
                  F.dropout2d, F.dropout3d, F.alpha_dropout, F.feature_alpha_dropout)
# cost.py's name tables: the library calls with a FLOPs formula, and which ran on tensor cores
OLD_MATMULS = {"torch.matmul", "torch.mm", "torch.bmm", "torch.Tensor.__rmatmul__", "torch.addmm", "torch.baddbmm",
               "torch.nn.functional.linear", "torch.einsum", "torch.nn.functional.scaled_dot_product_attention"}
OLD_CONVOLUTIONS = {f"torch.nn.functional.conv{t}{d}d" for t in ("", "_transpose") for d in (1, 2, 3)}
# prim_rules.NON_DIFFERENTIABLE
OLD_NON_DIFFERENTIABLE = {P.eq, P.ne, P.lt, P.le, P.gt, P.ge, P.logical_not, P.bitwise_not, P.isnan, P.bitwise_and,
                          P.bitwise_or, P.bitwise_xor, P.argmax, P.argmin, P.full, P.iota}
# the names torch_rules.RULES and composite_rules.RULES were keyed by
OLD_RULE_NAMES = (
    "torch.matmul", "torch.mm", "torch.bmm", "torch.Tensor.__rmatmul__", "torch.addmm", "torch.nn.functional.linear",
    "torch.nn.functional.embedding", "torch.nn.functional.conv1d", "torch.nn.functional.conv2d",
    "torch.nn.functional.conv3d", "torch.nn.functional.softmax", "torch.nn.functional.log_softmax", "torch.max",
    "torch.min", "torch.linalg.vector_norm", "torch.nn.functional.hardtanh", "torch.nn.functional.relu6",
    "torch.nn.functional.hardsigmoid", "torch.nn.functional.hardswish",
    "torch.nn.functional.scaled_dot_product_attention", "torch.nn.functional.gelu", "torch.nn.functional.silu",
    "torch.nn.functional.relu", "torch.tanh", "torch.sigmoid", "torch.nn.functional.batch_norm",
    "torch.nn.functional.layer_norm")


def old_random_by_name(name: str) -> bool:
    return name.rsplit(".", 1)[-1].removeprefix("op_").removeprefix("Tensor_") in OLD_RANDOM_SUFFIXES


def made_symbols() -> list[Symbol]:
    """Every symbol made at import: the registry's, the prims, and those rules and
    decompositions make for themselves (backward kernels, dropout's draw)."""
    extra = [v for m in (composite_rules, torch_rules, activations) for v in vars(m).values() if isinstance(v, Symbol)]
    return list(torch_ops.SYMBOLS.values()) + list(P.ALL.values()) + extra


def known_random(fn) -> bool:
    entry = torch_ops.lookup(fn)
    tags = entry[0].tags if entry is not None else torch_ops.fallback_tags(fn)
    return OpTag.RANDOM in tags


# --- declared tags cover the old inferences -----------------------------------------------

def test_every_symbol_declares_a_kind_and_typed_tags():
    for sym in made_symbols():
        assert isinstance(sym.kind, SymbolKind), sym
        assert all(isinstance(t, OpTag) for t in sym.tags), (sym, sym.tags)
    assert all(s.kind is SymbolKind.PRIM for s in P.ALL.values())
    assert all(s.kind is SymbolKind.TORCH for s in torch_ops.SYMBOLS.values())


def test_what_the_name_rule_called_random_is_tagged_random():
    named = [s for s in torch_ops.SYMBOLS.values() if old_random_by_name(s.name)]
    assert len(named) >= 10, [s.name for s in named]  # the rule, applied, finds the random ops
    assert [s.name for s in named if OpTag.RANDOM not in s.tags] == []
    # and no op is random that is not: the tagged ones are these
    tagged = {s.name for s in torch_ops.SYMBOLS.values() if OpTag.RANDOM in s.tags}
    draws = {f"torch.ops.aten.{n}.default" for n in ("cauchy", "exponential", "geometric", "log_normal", "uniform",
                                                    "normal_functional")} | {"torch.ops.aten.random"}
    dropouts = {f"torch.nn.functional.{n}" for n in ("dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                                                    "feature_alpha_dropout")} | {
        "torch.feature_dropout", "torch.alpha_dropout", "torch.feature_alpha_dropout"}
    pools = {f"torch.nn.functional.fractional_max_pool{d}d{s}" for d in (2, 3) for s in ("", "_with_indices")}
    assert tagged == {s.name for s in named} | {"torch.randperm", "torch.poisson", "torch.nn.functional.rrelu"} \
        | draws | dropouts | pools


def test_torch_callables_the_name_rule_called_random_are_known_random():
    """What an opaque call of each would have been named (its last name part) decided
    randomness; every public callable the rule matched, and the note rule (a note naming
    "random"), is random by its symbol's tags or the fallback table."""
    owners = {"torch": torch, "torch.Tensor": torch.Tensor, "torch.nn.functional": F, "torch.nn.init": init}
    matched = [getattr(owner, n) for owner in owners.values() for n in dir(owner)
               if not n.startswith("_") and (old_random_by_name(n) or "random" in n) and callable(getattr(owner, n))
               and "deprecated_init" not in getattr(getattr(owner, n), "__qualname__", "")]  # nn.init.normal
    assert len(matched) >= 15
    assert [fn for fn in matched if not known_random(fn)] == []
    assert [fn for fn in MISSED_BY_NAME if not known_random(fn)] == []


def test_the_fallback_table_holds_only_calls_with_no_symbol():
    assert [fn for fn in torch_ops.RANDOM_FALLBACKS if torch_ops.lookup(fn) is not None] == []
    assert torch_ops.fallback_tags(torch.Tensor.cauchy_) == {OpTag.LIBRARY_CALL, OpTag.RANDOM}
    assert torch_ops.fallback_tags(torch.Tensor.svd) == {OpTag.LIBRARY_CALL}


def test_library_calls_are_the_registered_symbols_with_no_decomposition():
    # the registry's docs: "a symbol with no decomposition is a library call"
    wrong = [s.name for s in torch_ops.SYMBOLS.values() if (OpTag.LIBRARY_CALL in s.tags) != (s.decomposition is None)]
    assert wrong == []


def test_flops_formulas_and_tensor_core_tags_are_those_cost_py_named():
    with_flops = {s.name for s in torch_ops.SYMBOLS.values() if s.flops is not None}
    assert with_flops == OLD_MATMULS | OLD_CONVOLUTIONS
    assert {s.name for s in torch_ops.SYMBOLS.values() if OpTag.MATMUL in s.tags} == OLD_MATMULS
    assert {s.name for s in torch_ops.SYMBOLS.values() if OpTag.CONVOLUTION in s.tags} == OLD_CONVOLUTIONS
    assert all(OpTag.LIBRARY_CALL in registry.registered(n).tags for n in with_flops)


def test_non_differentiable_prims_declare_it():
    assert {s for s in P.ALL.values() if OpTag.NON_DIFFERENTIABLE in s.tags} == OLD_NON_DIFFERENTIABLE
    assert OpTag.NON_DIFFERENTIABLE in activations.dropout_noise.tags and OpTag.RANDOM in activations.dropout_noise.tags


def test_the_old_names_are_the_enum_members():
    # fusion, the executors and tests still write P.ELEMENTWISE or "reduction"
    assert (P.ELEMENTWISE, P.REDUCTION, P.SHAPE, P.FACTORY, P.GATHER, P.CAT) == (
        OpTag.ELEMENTWISE, OpTag.REDUCTION, OpTag.SHAPE, OpTag.FACTORY, OpTag.GATHER, OpTag.CAT)
    assert torch_ops.LIBRARY is OpTag.LIBRARY_CALL
    assert "reduction" in P.sum.tags and P.add.kind == "prim"


def test_symbols_refuse_untyped_tags_and_unknown_kinds():
    with pytest.raises(TypeError):
        Symbol("f", torch.sin, tags=("random",))
    with pytest.raises(ValueError):
        Symbol("f", torch.sin, kind="primm")
    with pytest.raises(ValueError):  # two symbols of one name: the printed program could not tell them apart
        registry.library(torch.sin, name="torch.matmul")


# --- backward rules by symbol ------------------------------------------------------------

def test_every_old_rule_is_found_by_its_symbol():
    # F.layer_norm's rule moved to the op a training forward runs it as (torch_rules.EXPLICIT:
    # composite_rules.layer_norm_with_stats, whose backward reads the saved statistics)
    def found(sym):
        explicit = torch_rules.EXPLICIT.get(sym)
        return rules.lookup(sym) is not None or (
            explicit is composite_rules._layer_norm_explicit and rules.lookup(composite_rules.layer_norm_with_stats))

    assert [n for n in OLD_RULE_NAMES if not found(registry.registered(n))] == []
    assert all(rules.lookup(s) is not None for s in prim_rules.RULES)
    # by the object, not the name: a symbol that only shares matmul's name has no rule
    assert rules.lookup(Symbol("torch.matmul", torch.matmul)) is None
    assert rules.lookup(registry.registered("torch.cumsum")) is None  # the generic rule's


def test_a_misspelt_rule_fails_when_it_is_registered():
    with pytest.raises(LookupError, match="linaer"):
        torch_rules.rule("torch.nn.functional.linaer")
    with pytest.raises(LookupError):
        composite_rules._register("torch.nn.functional.gelu_", lambda b, cots: [])
    with pytest.raises(ValueError):  # a second rule for a symbol that has one
        torch_rules.rule("torch.matmul")
    with pytest.raises(ValueError):  # prim rules are for prims
        prim_rules.rule(registry.registered("torch.matmul"))
    assert rules.lookup(registry.registered("torch.matmul")) is torch_rules.RULES[registry.registered("torch.matmul")]


# --- through the pipeline ----------------------------------------------------------------

def _errors(report) -> list[str]:
    return [d.message for d in report.diagnostics if d.severity == "error"]


def test_a_random_symbol_makes_the_check_compare_shapes_only():
    report = compiler.compile(lambda x: torch.rand_like(x) + x, torch.randn(4, 4), executors=["torch"])
    assert _errors(report) == []


def test_a_random_call_with_no_symbol_makes_the_check_compare_shapes_only():
    report = compiler.compile(lambda x: x.clone().cauchy_() + x, torch.randn(4, 4), executors=["torch"])
    assert _errors(report) == []
