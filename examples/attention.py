"""Causal self-attention, GPT-2 style: written out by hand, and with scaled_dot_product_attention."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout=0.1):
        super().__init__()
        assert n_embd % n_head == 0
        self.n_head = n_head
        self.n_embd = n_embd
        # key, query, value projections for all heads, in one batch
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        # causal mask: each position attends only to itself and the positions before it
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)

        y = self.resid_dropout(self.c_proj(y))
        return y


class FlashCausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, dropout=0.1):
        super().__init__()
        assert n_embd % n_head == 0
        self.n_head = n_head
        self.n_embd = n_embd
        self.dropout = dropout
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)

        y = self.resid_dropout(self.c_proj(y))
        return y


@compiler.example
def causal_attention_example():
    torch.manual_seed(0)
    model = CausalSelfAttention(n_embd=256, n_head=4, block_size=128).eval()
    return model, (torch.randn(4, 128, 256),)


@compiler.example
def sdpa_attention_example():
    torch.manual_seed(0)
    model = FlashCausalSelfAttention(n_embd=256, n_head=4).eval()
    return model, (torch.randn(4, 128, 256),)


@compiler.example
def sdpa_attention_any_length_example():
    """The sequence dim marked dynamic: one program for every length (its shapes read `s0`)."""
    torch.manual_seed(0)
    model = FlashCausalSelfAttention(n_embd=256, n_head=4).eval()
    return model, (compiler.mark_dynamic(torch.randn(4, 128, 256), 1),)


if __name__ == "__main__":
    for target in (causal_attention_example, sdpa_attention_example):
        fn, args, *rest = target()
        with torch.no_grad():
            out = fn(*args, **(rest[0] if rest else {}))
        print(f"{target.__name__}: {tuple(out.shape)} {out.dtype}")
    # The two spellings compute the same thing on the same weights.
    manual, (x,) = causal_attention_example()
    flash = FlashCausalSelfAttention(256, 4).eval()
    flash.load_state_dict(manual.state_dict(), strict=False)
    with torch.no_grad():
        print("manual vs sdpa max abs diff:", (manual(x) - flash(x)).abs().max().item())
