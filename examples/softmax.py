"""Softmax in its usual spellings, and a cross-entropy loss."""

import torch
import torch.nn.functional as F

import compiler


def softmax(x):
    return torch.softmax(x, dim=-1)


def functional_softmax(x):
    return F.softmax(x, dim=-1)


def log_softmax(x):
    return F.log_softmax(x, dim=-1)


def safe_softmax(x):
    # Subtract the row max so exp never overflows.
    x = x - x.amax(-1, keepdim=True)
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)


def cross_entropy(logits, targets):
    return F.cross_entropy(logits, targets)


@compiler.example
def softmax_example():
    torch.manual_seed(0)
    return softmax, (torch.randn(8, 128, 512),)


@compiler.example
def functional_softmax_example():
    torch.manual_seed(0)
    return functional_softmax, (torch.randn(8, 128, 512),)


@compiler.example
def log_softmax_example():
    torch.manual_seed(0)
    return log_softmax, (torch.randn(8, 128, 512),)


@compiler.example
def safe_softmax_example():
    torch.manual_seed(0)
    # Large logits: a naive exp of the largest would overflow to inf.
    return safe_softmax, (20.0 * torch.randn(8, 128, 512),)


@compiler.example
def cross_entropy_example():
    torch.manual_seed(0)
    n, c = 512, 1000
    logits = torch.randn(n, c)
    targets = torch.randint(0, c, (n,))
    return cross_entropy, (logits, targets)


TARGETS = (softmax_example, functional_softmax_example, log_softmax_example,
           safe_softmax_example, cross_entropy_example)

if __name__ == "__main__":
    for target in TARGETS:
        fn, args, *rest = target()
        with torch.no_grad():
            out = fn(*args, **(rest[0] if rest else {}))
        print(f"{target.__name__}: {tuple(out.shape)} {out.dtype}")
