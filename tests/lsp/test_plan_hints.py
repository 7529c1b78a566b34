"""A target with a plan (`@fusionlens.example(train=True, plan=dict(cluster=..., tp=..., pp=...,
global_batch=...))`) through the real language server: the worker compiles it and plans it at
scale (fusionlens/plan, meta device), the answer carries the PlanReport, and each planned line
gets an inlay hint (`128x8xH100: 1.2 ms a step · TP all-reduce 0.3 ms exposed`) and a hover with
its breakdown and memory (issue 28 part 6)."""

from __future__ import annotations

import re

import pytest

from lsp_helpers import HINT_MAX, hover_text, line_of, tooltip_text

pytestmark = pytest.mark.asyncio

SOURCE = '''import torch
from torch import nn

import fusionlens


class Block(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        h = nn.functional.gelu(self.fc1(self.norm(x)))
        return x + self.fc2(h)  # ROW


class Model(nn.Module):
    def __init__(self, vocab=64, hidden=32, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden) for _ in range(layers))
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens, labels):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return nn.functional.cross_entropy(self.head(x).flatten(0, 1), labels.flatten())


@fusionlens.example(train=True, plan=dict(cluster="128x8xH100", tp=8, pp=2, global_batch=1024))
def planned():
    tokens = torch.randint(0, 64, (2, 16))
    return Model(), (tokens, tokens.roll(-1, 1))
'''
HINT = re.compile(r"^128x8xH100: [\d.]+ (ms|µs|s) a step( · TP all-reduce [\d.]+ (ms|µs|s) exposed)?$")


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_a_planned_target_gets_hints_and_hovers_at_scale(start_server, tmp_path):
    path = tmp_path / "planned.py"
    path.write_text(SOURCE)
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path)
    uri = s.open(path)
    answer = await s.compile(uri, "planned", timeout=600)
    assert answer["ok"], answer
    row = line_of(path, "# ROW")
    hints = [h for h in await s.hints(uri) if h.position.line == row and h.label.startswith("128x8xH100: ")]
    assert len(hints) == 1, [h.label for h in await s.hints(uri) if h.position.line == row]
    label = hints[0].label
    # the issue's own words, longer than a compile hint's HINT_MAX: the cluster and the kind are the point
    assert HINT.match(label) and "TP all-reduce" in label and len(label) <= HINT_MAX + 20, label
    assert "**At scale**" in tooltip_text(hints[0])
    text = hover_text(await s.hover(uri, row))
    assert "**At scale** — 128x8xH100, " in text and "TP 8" in text and "PP 2" in text, text
    assert "| activations |" in text and " GiB" in text and "MFU" in text, text
    assert "(fits)" in text or "(does not fit)" in text, text
    # a line the compile annotates keeps its compile hints beside the plan's
    all_labels = [h.label for h in await s.hints(uri) if h.position.line == row]
    assert len(all_labels) >= 2, all_labels
    # the plan's pictures from the editor: fusionlens.reportHtml with {"plan": true}
    page = await s.command("fusionlens.reportHtml", uri, "planned", "A" * 24, {"plan": True})
    assert page["html"] and page["html"].count("Plotly.newPlot") == 2, page.get("message")
    assert "<script nonce='" + "A" * 24 + "'" in page["html"] and "planned on 128x8xH100" in page["html"]
