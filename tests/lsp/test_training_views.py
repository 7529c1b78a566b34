"""A training target in the editor: the real server compiles examples/train_cnn.py (declared
`@compiler.example(train=True)`), and its lines carry their backward kernels and saved
activations (hover, a second inlay hint), its lens the training step."""

from __future__ import annotations

import re

import pytest

from lsp_helpers import EXAMPLES, SUMMARY_RE, HINT_MAX, hover_text, line_of, tooltip_text

pytestmark = pytest.mark.asyncio

CNN = EXAMPLES / "train_cnn.py"
BACKWARD_HINT = re.compile(r"^bwd ((B\d+(\+B\d+)?|B\d+ \+\d+)( · [\d.]+ (ms|µs)| · \w+)( · [\d.]+ [KMG]?B saved)?"
                           r"|[\d.]+ [KMG]?B saved)$")


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_training_target_shows_backward_kernels_and_saved_memory(start_server):
    s = await start_server({"compileTrigger": "onOpen"})
    uri = s.open(CNN)
    result = await s.wait_targets(uri, ("ok", "error"), timeout=600)
    assert [t.status for t in result.targets] == ["ok"], result.targets
    title = (await s.lenses(uri))[0].command.title
    assert SUMMARY_RE.match(title) and title.startswith("fwd+bwd ") and " saved · " in title, title

    conv = line_of(CNN, "out = F.relu(self.bn1(self.conv1(x)))")
    hints = [h for h in await s.hints(uri) if h.position.line == conv]
    labels = [h.label for h in hints]
    back = [h for h in hints if h.label.startswith("bwd")]
    assert len(back) == 1 and BACKWARD_HINT.match(back[0].label), labels
    assert all(len(h.label) <= HINT_MAX for h in hints), labels
    assert "backward of this line" in tooltip_text(back[0])

    text = hover_text(await s.hover(uri, conv))
    assert "**backward of this line:**" in text and "| `B" in text, text
    assert "convolution_backward" in text or "batch_norm_backward" in text, text
    assert "**saved for backward:**" in text and "float32[8, 16, 16, 16]" in text, text
    target = line_of(CNN, "def cnn_loss_example")
    assert "training step: compiled" in hover_text(await s.hover(uri, target))
