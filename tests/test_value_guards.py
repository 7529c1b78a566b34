"""Branches on tensor values as guards (issue 30 part 1), and recompiles that say why (part 2).

Each guard kind (bool, item, all/any, a comparison of a size with a value) with a count of
compiles; transformers encoders at 8 sequence lengths with padding masks compile at most twice.
"""

from __future__ import annotations

import pytest
import torch

import compiler
from fusionlens.report.schema import DiagnosticCode

LENGTHS = [5, 7, 9, 11, 6, 13, 8, 10]


def _mask(n: int, padded: bool) -> torch.Tensor:
    m = torch.ones(2, n, dtype=torch.bool)
    if padded:
        m[1, n - 2:] = False
    return m


def _on_all(x, m):
    if m.all():
        return x * 2
    return x.masked_fill(~m, 0.0) * 3


def _on_any(x, m):
    if (~m).any():
        return x.masked_fill(~m, 0.0) + 1
    return x + 1


def _on_bool(x):
    if x.sum() > 0:
        return x.sin()
    return x.cos()


def _on_item(x, n):
    k = int(n.item())
    return x[:, :k] * 2


def _on_size(x):
    if x.shape[0] > 4:
        return x * 2
    return x - 1


def _guards(jfn) -> list[str]:
    return [d.message for d in compiler.last_report(jfn).diagnostics if d.code == DiagnosticCode.VALUE_GUARD]


@pytest.mark.parametrize("fn", [_on_all, _on_any], ids=["all", "any"])
def test_a_branch_on_all_or_any_compiles_each_branch_once(fn):
    jfn = compiler.jit(fn, dynamic=True)
    for i, n in enumerate(LENGTHS):
        x, m = torch.randn(2, n), _mask(n, padded=i % 2 == 1)
        torch.testing.assert_close(jfn(x, m), fn(x, m))
    assert jfn.cache_info()["compiles"] == 2  # one program a branch, each serving every length
    assert any("is True" in g or "is False" in g for g in _guards(jfn))


def test_a_branch_on_bool_of_a_value_compiles_the_other_branch_once():
    jfn = compiler.jit(_on_bool)
    x = torch.rand(3, 4)
    torch.testing.assert_close(jfn(x), _on_bool(x))
    torch.testing.assert_close(jfn(-x), _on_bool(-x))  # the guard fails: the other branch, right
    torch.testing.assert_close(jfn(x + 1), _on_bool(x + 1))
    torch.testing.assert_close(jfn(-x - 1), _on_bool(-x - 1))
    assert jfn.cache_info()["compiles"] == 2
    guard = _guards(jfn)[0]
    assert "bool(" in guard and "checks it before each call" in guard


def test_a_read_item_is_a_guard_on_its_value():
    jfn = compiler.jit(_on_item)
    x = torch.randn(2, 6)
    for k in (3, 3, 4, 3, 4):
        n = torch.tensor(k)
        torch.testing.assert_close(jfn(x, n), _on_item(x, n))
    assert jfn.cache_info()["compiles"] == 2
    assert any(".item() == " in g for g in _guards(jfn))


def test_a_comparison_of_a_size_compiles_each_side_once_and_says_why():
    jfn = compiler.jit(_on_size, dynamic=True)
    for n in (6, 3, 7, 2, 9, 4):
        x = torch.randn(n, 3)
        torch.testing.assert_close(jfn(x), _on_size(x))
    assert jfn.cache_info()["compiles"] == 2
    why = [d for d in compiler.last_report(jfn).diagnostics if d.message.startswith("compiled again")]
    assert why and "x.shape[0] > 4 (x.shape[0] = 3)" in why[0].message
    assert why[0].line == _on_size.__code__.co_firstlineno + 1  # the `if` that made the guard


def test_a_value_guard_that_fails_says_why_at_its_line():
    jfn = compiler.jit(_on_all)
    jfn(torch.randn(2, 5), _mask(5, padded=False))
    jfn(torch.randn(2, 5), _mask(5, padded=True))
    why = [d for d in compiler.last_report(jfn).diagnostics if d.message.startswith("compiled again")]
    assert why and "does not hold (this call: bool(" in why[0].message and "is False)" in why[0].message
    assert why[0].line == _on_all.__code__.co_firstlineno + 1


def test_a_read_of_sizes_only_is_checked_once_per_size():
    def fn(x):
        if torch.arange(x.shape[0]).sum() > 10:  # a function of the size alone
            return x * 2
        return x + 1
    jfn = compiler.jit(fn, dynamic=True)
    for n in (6, 3, 7, 6, 3):
        x = torch.randn(n)
        torch.testing.assert_close(jfn(x), fn(x))
    entry = jfn.last
    assert entry is not None and entry.values is not None and not entry.values.needed  # reads no input's data
    assert len(entry.values.memo) >= 1  # the sizes it was checked at: no rerun at those


# --- transformers encoders with padding masks, at 8 sequence lengths --------------------------------

def _encoder(name: str):
    from zoo_imports import transformers
    if transformers is None:
        pytest.skip("transformers is not installed")
    small = dict(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                 max_position_embeddings=64)
    if name == "electra":
        return transformers.ElectraModel(transformers.ElectraConfig(embedding_size=16, **small))
    if name == "bert":
        return transformers.BertModel(transformers.BertConfig(**small))
    if name == "roberta":
        return transformers.RobertaModel(transformers.RobertaConfig(**{**small, "max_position_embeddings": 80}))
    if name == "distilbert":
        return transformers.DistilBertModel(transformers.DistilBertConfig(
            vocab_size=64, dim=16, n_layers=1, n_heads=2, hidden_dim=32, max_position_embeddings=64))
    return transformers.T5EncoderModel(transformers.T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32,
                                                             num_layers=1, num_heads=2))


@pytest.mark.parametrize("name", ["electra", "bert", "roberta", "distilbert", "t5"])
def test_an_encoder_with_padding_at_8_lengths_compiles_at_most_twice(name):
    torch.manual_seed(0)
    model = _encoder(name).eval()
    jm = compiler.jit(model)
    with torch.no_grad():
        for i, n in enumerate(LENGTHS):
            ids, mask = torch.randint(1, 64, (2, n)), _mask(n, padded=i % 3 != 2).long()
            got, want = jm(input_ids=ids, attention_mask=mask), model(input_ids=ids, attention_mask=mask)
            torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state, atol=1e-5, rtol=1e-4)
    assert jm.cache_info()["compiles"] <= 2, compiler.last_report(jm).diagnostics


# --- value-guarded programs on the fast path (fusionlens/driver/fast_path.py) -----------------------

def test_a_value_guarded_program_is_served_by_its_generated_code(monkeypatch):
    """The generated code re-reads the branch's value: counted (the generic key never runs),
    equal to eager, and a changed mask compiles the other branch once, both then served."""
    from fusionlens.driver import jit_cache
    jfn = compiler.jit(_on_all)
    jfn(torch.randn(2, 5), _mask(5, padded=False))
    assert jfn.last is not None and jfn.last.values is not None and jfn.fast.source(jfn.last) is not None
    keyed = []
    real_key = jit_cache.JitFunction._key
    monkeypatch.setattr(jit_cache.JitFunction, "_key", lambda *a: keyed.append(1) or real_key(*a))
    for padded in (False, False, True, True, False, True):
        x, m = torch.randn(2, 5), _mask(5, padded)
        before = jfn.fast.served
        torch.testing.assert_close(jfn(x, m), _on_all(x, m))
        if padded and len(keyed) == 0:  # the first padded call: its guard fails, the generic path compiles
            assert jfn.fast.served == before
    assert jfn.cache_info()["compiles"] == 2
    assert len(keyed) == 1  # only the call that compiled the other branch took the generic key
    assert jfn.fast.served == 5


def test_electra_with_a_padding_mask_takes_the_fast_path(monkeypatch):
    from fusionlens.driver import jit_cache
    torch.manual_seed(0)
    model = _encoder("electra").eval()
    jm = compiler.jit(model)
    keyed = []
    real_key = jit_cache.JitFunction._key
    with torch.no_grad():
        for i, padded in enumerate((True, True, False, True, False, True)):
            ids, mask = torch.randint(1, 64, (2, 7)), _mask(7, padded).long()
            got, want = jm(input_ids=ids, attention_mask=mask), model(input_ids=ids, attention_mask=mask)
            torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state, atol=1e-5, rtol=1e-4)
            if i == 0:
                assert jm.last is not None and jm.last.values is not None  # the mask check is a value guard
                monkeypatch.setattr(jit_cache.JitFunction, "_key", lambda *a: keyed.append(1) or real_key(*a))
    assert jm.cache_info()["compiles"] == 2
    assert len(keyed) == 1  # the unpadded call's miss; every other call served by generated code
    assert jm.fast.served == 4
