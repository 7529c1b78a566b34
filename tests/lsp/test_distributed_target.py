"""A distributed target (@compiler.example(nproc=2)) through the real server: the worker
launches its ranks as `fusionlens compile` does, and the line that communicates carries the
collective in its hover."""

from __future__ import annotations

import pytest

from lsp_helpers import EXAMPLES, hover_text, line_of

pytestmark = [pytest.mark.asyncio, pytest.mark.distributed]

DDP = EXAMPLES / "ddp_train.py"


async def test_a_distributed_target_compiles_on_its_ranks_and_its_collective_shows(start_server):
    s = await start_server({"compileTrigger": "manual"})
    uri = s.open(DDP)
    answer = await s.compile(uri, "all_reduce_sum")
    assert answer["ok"], answer
    target = next(t for t in (await s.regions(uri)).targets if t.name == "all_reduce_sum")
    assert target.status == "ok", target.message
    line = line_of(DDP, "dist.all_reduce(y)")
    labels = [h.label for h in await s.hints(uri) if h.position.line == line]
    assert any(label.startswith("all_reduce 4.0 KB") and "(slowest rank)" in label for label in labels), labels
    text = hover_text(await s.hover(uri, line))
    assert "**all_reduce**" in text and "over 2 ranks" in text and "slowest rank" in text, text
    assert "dist_all_reduce" in text
