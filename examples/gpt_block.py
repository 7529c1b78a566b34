"""A GPT-2 transformer block: pre-norm attention and MLP, each with a residual."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler


class NewGELU(nn.Module):
    """The tanh approximation of GELU used by GPT-2 (and BERT's original code)."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.use_sdpa = config.use_sdpa
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                             .view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = NewGELU() if not config.use_sdpa else nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        x = self.c_fc(x)
        x = self.gelu(x)
        x = self.c_proj(x)
        x = self.dropout(x)
        return x


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPTConfig:
    def __init__(self, n_embd=256, n_head=4, block_size=128, dropout=0.1, use_sdpa=False):
        self.n_embd = n_embd
        self.n_head = n_head
        self.block_size = block_size
        self.dropout = dropout
        self.use_sdpa = use_sdpa


@compiler.example
def gpt_block_example():
    torch.manual_seed(0)
    model = Block(GPTConfig(n_embd=256, n_head=4, block_size=128)).eval()
    return model, (torch.randn(2, 64, 256),)


@compiler.example
def gpt_block_sdpa_example():
    """The same block with F.gelu(approximate="tanh") (via nn.GELU) and scaled_dot_product_attention."""
    torch.manual_seed(0)
    model = Block(GPTConfig(n_embd=256, n_head=4, block_size=128, use_sdpa=True)).eval()
    return model, (torch.randn(2, 64, 256),)


if __name__ == "__main__":
    for target in (gpt_block_example, gpt_block_sdpa_example):
        fn, args, *rest = target()
        with torch.no_grad():
            out = fn(*args, **(rest[0] if rest else {}))
        print(f"{target.__name__}: {tuple(out.shape)} {out.dtype}")
    (a, (x,)), (b, _) = gpt_block_example(), gpt_block_sdpa_example()
    with torch.no_grad():
        print("manual vs sdpa max abs diff:", (a(x) - b(x)).abs().max().item())
