"""Llama 3.1 405B from its published config (transformers' LlamaForCausalLM, no download), planned
at full size on the meta device: nothing is allocated.

    fusionlens plan examples/plan/plan_llama.py --target llama_405b --cluster 128x8xH100 --tp 8 --pp 8 \
        --global-batch 1536
"""

import torch
import transformers

import fusionlens

SIZES = {  # hidden, intermediate, layers, heads, kv heads (the Llama 3 / 3.1 model cards)
    "1b": (2048, 8192, 16, 32, 8), "8b": (4096, 14336, 32, 32, 8), "70b": (8192, 28672, 80, 64, 8),
    "405b": (16384, 53248, 126, 128, 8),
}


def llama(size: str, seq: int = 8192, micro_batch: int = 1):
    hidden, inter, layers, heads, kv = SIZES[size]
    config = transformers.LlamaConfig(vocab_size=128256, hidden_size=hidden, intermediate_size=inter,
                                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                                      max_position_embeddings=131072, rope_theta=500000.0,
                                      attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    tokens = torch.randint(0, config.vocab_size, (micro_batch, seq))
    return lambda ids: model(input_ids=ids, labels=ids).loss, model, (tokens,)


class Step(torch.nn.Module):
    """The training step a plan traces: the model's loss on one micro-batch."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, labels=ids).loss


@fusionlens.example(train=True, plan=dict(cluster="128x8xH100", tp=8, pp=8, global_batch=1536, sp=True,
                                          recompute="selective"))
def llama_405b():
    _, model, args = llama("405b")
    return Step(model), args
