"""fusionlens.targetGpu end to end: the setting reaches the worker, and on a CPU the hints,
hover and fusionlens/regions estimate for that GPU."""

from __future__ import annotations

import pytest

from lsp_helpers import EXAMPLES, HINT_RE, hover_text, line_of

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_target_gpu_reaches_the_worker_and_every_view_says_est(start_server):
    s = await start_server({"compileTrigger": "manual", "targetGpu": "l4"})
    path = EXAMPLES / "softmax.py"
    uri = s.open(path)
    assert (await s.compile(uri, "softmax_example"))["ok"]
    line = line_of(path, "torch.softmax(x, dim=-1)")
    hint = next(h.label for h in await s.hints(uri, line, line))
    assert HINT_RE.match(hint) and " · est " in hint, hint  # a CPU: estimated, never a CPU time
    assert "est. " in hover_text(await s.hover(uri, line)) and " on L4 (" in hover_text(await s.hover(uri, line))
    target = (await s.regions(uri)).targets[0]
    region = target.regions[0]
    assert region.roofline.device == "L4" and region.roofline.estimate and region.headroomMs is None
    assert target.previews and all(p.device == "L4" for p in target.previews)
    assert (await s.command("fusionlens.debugInfo"))["settings"]["targetGpu"] == "L4"
