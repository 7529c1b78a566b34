"""Layer norms and RMS norms: the built-in modules and the way people write them by hand."""

import torch
import torch.nn as nn

import compiler


class LayerNorm(nn.Module):
    """LayerNorm written out: mean, biased variance, rsqrt, affine."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        x = (x - mean) * torch.rsqrt(var + self.eps)
        return x * self.weight + self.bias


class RMSNorm(nn.Module):
    """RMSNorm the Llama way: compute in float32, cast back, then scale."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


class ResidualNorm(nn.Module):
    """Add the residual, then normalise: the pre-/post-norm pattern of a transformer."""

    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, residual):
        return self.norm(x + residual)


def _init_affine(module):
    # Non-trivial weights so the affine part is really checked.
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p))
    return module


@compiler.example
def layernorm_example():
    torch.manual_seed(0)
    model = _init_affine(nn.LayerNorm(1024)).eval()
    return model, (torch.randn(8, 128, 1024),)


@compiler.example
def manual_layernorm_example():
    torch.manual_seed(0)
    model = _init_affine(LayerNorm(1024)).eval()
    return model, (torch.randn(8, 128, 1024),)


@compiler.example
def rmsnorm_example():
    torch.manual_seed(0)
    model = _init_affine(RMSNorm(1024)).eval()
    return model, (torch.randn(8, 128, 1024),)


@compiler.example
def torch_rmsnorm_example():
    torch.manual_seed(0)
    model = _init_affine(nn.RMSNorm(1024, eps=1e-6)).eval()
    return model, (torch.randn(8, 128, 1024),)


@compiler.example
def residual_norm_example():
    torch.manual_seed(0)
    model = _init_affine(ResidualNorm(1024)).eval()
    return model, (torch.randn(8, 128, 1024), torch.randn(8, 128, 1024))


TARGETS = (layernorm_example, manual_layernorm_example, rmsnorm_example,
           torch_rmsnorm_example, residual_norm_example)

if __name__ == "__main__":
    for target in TARGETS:
        fn, args, *rest = target()
        with torch.no_grad():
            out = fn(*args, **(rest[0] if rest else {}))
        print(f"{target.__name__}: {tuple(out.shape)} {out.dtype}")
