"""A two-layer MLP, as an nn.Module and as a plain function."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler


class MLP(nn.Module):
    def __init__(self, dim, hidden=None, dropout=0.1):
        super().__init__()
        hidden = hidden or 4 * dim
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.fc2(x)
        x = self.drop(x)
        return x


def mlp(x, w1, b1, w2, b2):
    h = F.linear(x, w1, b1)
    h = F.relu(h)
    return F.linear(h, w2, b2)


@compiler.example
def mlp_example():
    torch.manual_seed(0)
    model = MLP(512, 1024).eval()
    return model, (torch.randn(64, 512),)


@compiler.example
def mlp_function_example():
    torch.manual_seed(0)
    d, h = 512, 1024
    x = torch.randn(64, d)
    w1 = torch.randn(h, d) / d ** 0.5
    b1 = torch.zeros(h)
    w2 = torch.randn(d, h) / h ** 0.5
    b2 = torch.zeros(d)
    return mlp, (x, w1, b1, w2, b2)


if __name__ == "__main__":
    for target in (mlp_example, mlp_function_example):
        fn, args, *rest = target()
        with torch.no_grad():
            out = fn(*args, **(rest[0] if rest else {}))
        print(f"{target.__name__}: {tuple(out.shape)} {out.dtype}")
