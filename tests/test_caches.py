"""Caches the caller passes in and the model updates: decode steps and generate() on tiny
transformers models built from configs (no download), against eager.

A compiled forward must give eager's tokens exactly, leave every cache tensor as eager leaves
it, never run a call eagerly, and compile a bounded number of times (`cache_info()`).
"""

from __future__ import annotations

import copy

import pytest
import torch

import compiler
from zoo_imports import transformers

if transformers is None:  # pragma: no cover - the test extra installs it
    pytest.skip("transformers is not installed", allow_module_level=True)


def _llama():
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(cfg).eval()


def _mistral():
    cfg = transformers.MistralConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                     sliding_window=None)
    return transformers.MistralForCausalLM(cfg).eval()


def _t5():
    cfg = transformers.T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return transformers.T5ForConditionalGeneration(cfg).eval()


def _no_eager_calls(jfn) -> None:
    entries = {id(e): e for e in jfn.cache.values()}.values()
    assert not any(e.eager_fallback for e in entries)
    for e in entries:
        assert not [d.message for d in e.report.diagnostics if d.severity == "warning"]


def _cache_tensors(cache) -> list[torch.Tensor]:
    from fusionlens.frontend import objects
    return objects.state_tensors(cache)


@pytest.mark.parametrize("make", [_llama, _mistral], ids=["llama", "mistral"])
def test_decode_steps_with_a_dynamic_cache_match_eager(make):
    torch.manual_seed(0)
    model = make()
    jfn = compiler.jit(model)
    ids = torch.randint(0, 128, (1, 5))
    eager_cache = transformers.DynamicCache(config=model.config)
    compiled_cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        eager_ids = compiled_ids = ids
        for _ in range(12):
            want = model(input_ids=eager_ids, cache=eager_cache, use_cache=True)
            got = jfn(input_ids=compiled_ids, cache=compiled_cache, use_cache=True)
            torch.testing.assert_close(got.logits, want.logits, rtol=1e-5, atol=1e-5)
            assert got.past_key_values is compiled_cache  # the caller's cache, updated as eager updates it
            for a, b in zip(_cache_tensors(compiled_cache), _cache_tensors(eager_cache), strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
            eager_ids = want.logits[:, -1:].argmax(-1)
            compiled_ids = got.logits[:, -1:].argmax(-1)
    _no_eager_calls(jfn)
    assert jfn.cache_info()["compiles"] <= 2  # prefill, then one program for every length


@pytest.mark.parametrize("make,cache", [(_llama, "dynamic"), (_llama, "static"), (_mistral, "dynamic")],
                         ids=["llama-dynamic", "llama-static", "mistral-dynamic"])
def test_generate_gives_eagers_tokens_with_no_eager_call(make, cache):
    torch.manual_seed(0)
    model = make()
    ids = torch.randint(0, 128, (1, 6))
    options = {} if cache == "dynamic" else {"cache_implementation": "static"}
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=32, do_sample=False, **options)
        model.forward = compiler.jit(model.forward)  # the documented way: generate() calls it
        for _ in range(2):  # the second generate() runs on the programs the first compiled
            got = model.generate(ids, max_new_tokens=32, do_sample=False, **options)
            assert torch.equal(got, want)
    _no_eager_calls(model.forward)
    assert model.forward.cache_info()["compiles"] <= 2


def test_an_encoder_decoder_generates_eagers_tokens():
    torch.manual_seed(0)
    model = _t5()
    ids = torch.randint(2, 128, (1, 7))
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=10, do_sample=False)
        model.forward = compiler.jit(model.forward)
        got = model.generate(ids, max_new_tokens=10, do_sample=False)
    assert torch.equal(got, want)
    _no_eager_calls(model.forward)
    assert model.forward.cache_info()["compiles"] <= 4


def test_a_cache_keys_by_its_contents_and_is_restored_after_compiling():
    torch.manual_seed(0)
    model = _llama()
    jfn = compiler.jit(model)
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=torch.randint(0, 128, (1, 4)), cache=cache, use_cache=True)
        before = [t.clone() for t in _cache_tensors(cache)]
        snapshot = copy.deepcopy(cache)
        ids = torch.randint(0, 128, (1, 1))
        got = jfn(input_ids=ids, cache=cache, use_cache=True)  # compiles: traced, checked, run once
        want = model(input_ids=ids, cache=snapshot, use_cache=True)
    torch.testing.assert_close(got.logits, want.logits)
    after = _cache_tensors(cache)
    assert [t.shape[2] for t in after] == [b.shape[2] + 1 for b in before]  # one step, not one per compile stage
    for a, b in zip(after, _cache_tensors(snapshot), strict=True):
        torch.testing.assert_close(a, b)


def test_the_compiled_entries_keep_no_cache_of_their_calls_alive():
    import gc
    import weakref

    torch.manual_seed(0)
    model = _llama()
    jfn = compiler.jit(model)
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        ids = torch.randint(0, 128, (1, 4))
        for _ in range(4):  # prefill, then the decode steps' dynamic program (the cache's growth symbolic)
            out = jfn(input_ids=ids, cache=cache, use_cache=True)
            ids = out.logits[:, -1:].argmax(-1)
    gone = weakref.ref(cache)
    del cache, out
    gc.collect()
    assert gone() is None, [type(r).__name__ for r in gc.get_referrers(gone())]
    assert jfn.cache_info()["compiles"] == 2
