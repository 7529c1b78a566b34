"""The model zoo: real model code from transformers, torchvision and timm, each built from a
tiny config (random weights, nothing downloaded) with small inputs, and the checks
tests/test_model_zoo.py makes of a compiled call: the result equals eager's in structure
(types included: ModelOutput dataclasses, caches, tuples) and in every tensor, and every op
points at a line of the model's own library.

Each entry builds its model (the test puts it in eval mode) and makes fresh inputs of one
signature on every call: the test compiles on one set and runs the program on a second.
"""

from __future__ import annotations

import linecache
import os
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from fusionlens.driver import checking
from zoo_imports import timm, torchvision, transformers

VOCAB = 128


@dataclass(frozen=True)
class ZooModel:
    name: str
    library: str  # the package whose files hold the model's code
    build: Callable[[], torch.nn.Module]  # random weights, nothing downloaded
    inputs: Callable[[], tuple]  # fresh (args, kwargs) each call, one signature


FIRST_TOKEN = 3  # ids 0, 1, 2 are pad, bos and eos: inputs never hold them, so masks stay put


def _tokens(batch=2, length=8):
    return torch.randint(FIRST_TOKEN, VOCAB, (batch, length))


def _image(size=32, batch=1):
    return torch.randn(batch, 3, size, size)


def _ids():
    return (_tokens(),), {}


def _padded_ids():
    ids = _tokens()
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0  # the second sequence is padded
    return (ids,), {"attention_mask": mask}


def _seq2seq_ids():
    return (_tokens(),), {"decoder_input_ids": _tokens(length=5)}


def _pixels():
    return (_image(),), {}


# --- transformers ---------------------------------------------------------------------------

_SPECIAL = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
_DECODER = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64, **_SPECIAL)


def gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, n_inner=128, vocab_size=VOCAB, n_positions=64, bos_token_id=1,
        eos_token_id=2))


def llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**_DECODER))


def mistral():
    return transformers.MistralForCausalLM(transformers.MistralConfig(**_DECODER, sliding_window=None))


def qwen2():
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**_DECODER))


def bert():
    return transformers.BertModel(transformers.BertConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=VOCAB,
        max_position_embeddings=64, pad_token_id=0))


def t5():
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        d_model=64, d_ff=128, d_kv=16, num_layers=2, num_decoder_layers=2, num_heads=4, vocab_size=VOCAB,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))


def bart():
    return transformers.BartForConditionalGeneration(transformers.BartConfig(
        d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=VOCAB, max_position_embeddings=64,
        decoder_start_token_id=2, forced_eos_token_id=None, **_SPECIAL))


def hf_vit():
    return transformers.ViTModel(transformers.ViTConfig(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128))


# --- torchvision (weights=None) and timm (pretrained=False), at 32x32 -------------------------

def _tv(name, **kwargs):
    return lambda: getattr(torchvision.models, name)(weights=None, **kwargs)


def _timm(name, **kwargs):
    return lambda: timm.create_model(name, pretrained=False, **kwargs)


MODELS = [
    ZooModel("gpt2", "transformers", gpt2, _ids),
    ZooModel("llama", "transformers", llama, _ids),
    ZooModel("mistral", "transformers", mistral, _ids),
    ZooModel("qwen2", "transformers", qwen2, _ids),
    ZooModel("bert", "transformers", bert, _padded_ids),
    ZooModel("t5", "transformers", t5, _seq2seq_ids),
    ZooModel("bart", "transformers", bart, _seq2seq_ids),
    ZooModel("hf_vit", "transformers", hf_vit, _pixels),
    ZooModel("tv_resnet18", "torchvision", _tv("resnet18"), _pixels),
    ZooModel("tv_mobilenet_v3_small", "torchvision", _tv("mobilenet_v3_small"), _pixels),
    ZooModel("tv_efficientnet_b0", "torchvision", _tv("efficientnet_b0"), _pixels),
    ZooModel("tv_vit_b_16", "torchvision", _tv("vit_b_16", image_size=32), _pixels),  # 2x2 patches
    ZooModel("tv_swin_t", "torchvision", _tv("swin_t"), _pixels),
    ZooModel("timm_resnet10t", "timm", _timm("resnet10t"), _pixels),
    ZooModel("timm_mobilenetv3_small_050", "timm", _timm("mobilenetv3_small_050"), _pixels),
    ZooModel("timm_vit_tiny_patch16_224", "timm", _timm("vit_tiny_patch16_224", img_size=32), _pixels),
    ZooModel("timm_convnext_atto", "timm", _timm("convnext_atto"), _pixels),
]

LIBRARIES = {"transformers": transformers, "torchvision": torchvision, "timm": timm}


def library_root(library: str) -> Optional[str]:
    module = LIBRARIES[library]
    return os.path.dirname(os.path.abspath(module.__file__)) if module is not None else None


# --- the checks ------------------------------------------------------------------------------

_SCALARS = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)


def difference(actual, expected, path: str = "output", _seen=None) -> Optional[str]:
    """None when `actual` is `expected` in structure and value: the same type at every level
    (a ModelOutput subclass, a cache, a tuple), the same keys and lengths, equal Python values
    and tensors within checking.mismatch's tolerance. Objects that are none of these (a
    DynamicCache and its layers) are compared attribute by attribute. Else where and how
    they differ, in words."""
    if type(actual) is not type(expected):
        return f"{path}: {type(actual).__qualname__} where eager gives {type(expected).__qualname__}"
    if isinstance(expected, torch.Tensor):
        problem = checking.mismatch(actual, expected)
        return f"{path}: {problem}" if problem else None
    if isinstance(expected, _SCALARS) or isinstance(expected, type) or callable(expected):
        return None if actual == expected else f"{path}: {actual!r} where eager gives {expected!r}"
    _seen = set() if _seen is None else _seen
    if id(expected) in _seen:
        return None
    _seen.add(id(expected))
    if isinstance(expected, dict):  # ModelOutput is an OrderedDict
        if list(actual) != list(expected):
            return f"{path}: keys {list(actual)} where eager gives {list(expected)}"
        items = [(f"{path}[{k!r}]", actual[k], expected[k]) for k in expected]
    elif isinstance(expected, (tuple, list)):
        if len(actual) != len(expected):
            return f"{path}: {len(actual)} items where eager gives {len(expected)}"
        items = [(f"{path}[{i}]", a, e) for i, (a, e) in enumerate(zip(actual, expected))]
    elif hasattr(expected, "__dict__"):
        a_vars, e_vars = vars(actual), vars(expected)
        if list(a_vars) != list(e_vars):
            return f"{path}: attributes {list(a_vars)} where eager gives {list(e_vars)}"
        items = [(f"{path}.{k}", a_vars[k], e_vars[k]) for k in e_vars]
    else:
        return None if actual == expected else f"{path}: {actual!r} where eager gives {expected!r}"
    for where, a, e in items:
        problem = difference(a, e, where, _seen)
        if problem:
            return problem
    return None


def misplaced_ops(report, root: str) -> list:
    """The report's ops whose location is not a line of code in a file under `root`."""
    bad = []
    for op in report.ops:
        inside = op.file and os.path.abspath(op.file).startswith(root + os.sep)
        text = linecache.getline(op.file, op.line).strip() if inside and op.line else ""
        if not inside or not text or text.startswith("#"):
            bad.append(f"{op.name} at {op.file}:{op.line}")
    return bad
