"""Training a small nanoGPT-style language model: token and position embeddings, GPT-2
blocks (examples/gpt_block.py), a tied LM head and the cross-entropy loss. The target is
compiled for training: its forward and its backward, with what the forward saves."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler
from gpt_block import Block, GPTConfig


class GPT(nn.Module):
    def __init__(self, config, vocab_size=512, n_layer=2):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList([Block(config) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as GPT-2

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


@compiler.example(train=True)
def gpt_loss_example():
    model = GPT(GPTConfig(n_embd=128, n_head=4, block_size=64, dropout=0.0, use_sdpa=True))
    idx = torch.randint(0, 512, (4, 64))
    return model, (idx, torch.roll(idx, -1, dims=1))


@compiler.example(train=True)
def gpt_loss_dropout_example():
    model = GPT(GPTConfig(n_embd=64, n_head=4, block_size=32, dropout=0.1, use_sdpa=False))
    idx = torch.randint(0, 512, (2, 32))
    return model, (idx, torch.roll(idx, -1, dims=1))
