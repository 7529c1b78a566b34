"""GPT as Megatron-LM's papers describe it (Narayanan et al. 2021, Korthikanti et al. 2022):
learned position embeddings, pre-LayerNorm blocks, attention written out (QK^T, softmax,
dropout, times V: the papers predate fused attention kernels), a GELU MLP of 4h, dropout after
each block's projection, the output layer tied to the word embedding. The planner's published
checks (tests/test_plan_published.py, benchmarks/RESULTS.md) plan these models at full size
on the meta device.

    fusionlens plan examples/plan/plan_gpt.py --target gpt_22b --cluster 1x8xA100 --tp 8
"""

import math

import torch
from torch import nn

import fusionlens


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, dropout: float = 0.1):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)
        self.dropout = dropout

    def attention(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        probs = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        probs = nn.functional.dropout(probs, self.dropout, self.training)
        context = (probs @ v).transpose(1, 2).reshape(b, s, h)
        return nn.functional.dropout(self.proj(context), self.dropout, self.training)

    def mlp(self, x):
        y = nn.functional.gelu(self.fc1(x))
        return nn.functional.dropout(self.fc2(y), self.dropout, self.training)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, hidden: int, heads: int, layers: int, vocab: int = 51200, seq: int = 2048):
        super().__init__()
        self.words = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, tokens, labels):
        x = self.words(tokens) + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.words.weight.t()  # tied output layer
        return nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def gpt(hidden: int, heads: int, layers: int, micro_batch: int = 1, seq: int = 2048, vocab: int = 51200):
    """A bf16 GPT and one micro-batch of tokens and labels (on the meta device under a plan)."""
    model = GPT(hidden, heads, layers, vocab, seq).to(torch.bfloat16)
    tokens = torch.randint(0, vocab, (micro_batch, seq))
    return model, (tokens, tokens.roll(-1, 1))


@fusionlens.example(train=True, plan=dict(cluster="1x8xA100", tp=8, global_batch=4, recompute="selective", sp=True))
def gpt_22b():
    return gpt(6144, 64, 48, micro_batch=4)


@fusionlens.example(train=True, plan=dict(cluster="8x8xA100", tp=8, pp=8, vpp=3, global_batch=64))
def gpt_175b():
    return gpt(12288, 96, 96)


@fusionlens.example(train=True)
def gpt_tiny():
    return gpt(64, 4, 2, micro_batch=2, seq=32, vocab=128)
