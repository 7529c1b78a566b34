"""CNN building blocks compile natively: convolutions, batch norm, pooling and the
MobileNet activations are known symbols (library calls or decompositions), not fallbacks."""

from __future__ import annotations

import torch
from torch import nn

import compiler
from fusionlens.frontend import tracer as frontend
from fusionlens.middle import passes
from fusionlens.ir.trace import SymbolKind
from fusionlens.ops import prims


class _SqueezeExcite(nn.Module):
    def __init__(self, c, r):
        super().__init__()
        self.pool, self.fc1, self.fc2 = nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, r, 1), nn.Conv2d(r, c, 1)

    def forward(self, x):
        return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(self.pool(x)))))


def _resnet_stem():
    return nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                         nn.MaxPool2d(3, 2, 1), nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                         nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(1), nn.Linear(8, 4))


def _mobilenet_block():
    return nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.Hardswish(),
                         nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False), nn.BatchNorm2d(8), nn.Hardswish(),
                         _SqueezeExcite(8, 4), nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.Linear(8, 4))


def _with_running_stats(model):
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn(4, 3, 16, 16))
    return model.eval()


def test_cnn_blocks_compile_without_fallbacks():
    for build in (_resnet_stem, _mobilenet_block):
        model = _with_running_stats(build())
        with torch.no_grad():
            report = compiler.compile(model, torch.randn(2, 3, 16, 16), executors=["torch"])
        assert report.status == "ok", report.error
        assert not report.fallbacks, [(f.op, f.reason) for f in report.fallbacks]
        assert not [d.message for d in report.diagnostics if d.severity == "error"]


def test_eval_batch_norm_is_elementwise():
    """Eval batch norm (and hardswish after it) becomes elementwise prims and broadcasts:
    all fusible with what follows."""
    model = _with_running_stats(nn.Sequential(nn.BatchNorm2d(3), nn.Hardswish()))
    res = frontend.trace(model, (torch.randn(2, 3, 4, 4),))
    decomposed = passes.decompose(res.trace)
    leaves = passes.flatten(decomposed.bound_symbols)
    assert all(b.sym.kind is SymbolKind.PRIM for b in leaves), [b.sym.name for b in leaves]
    assert all(prims.ELEMENTWISE in b.sym.tags or b.sym is prims.broadcast_in_dim for b in leaves)


def test_training_batch_norm_runs_whole():
    """Training mode updates the running statistics in place: one torch call, with the reason."""
    model = nn.BatchNorm2d(3).train()
    with torch.no_grad():
        report = compiler.compile(model, torch.randn(4, 3, 4, 4), executors=["torch"])
    assert [f.op for f in report.fallbacks] == ["torch.nn.functional.batch_norm"]
    assert "running statistics in place" in report.fallbacks[0].reason
