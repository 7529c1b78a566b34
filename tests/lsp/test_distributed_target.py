"""A distributed target (@compiler.example(nproc=2)) through the real server: the worker
launches its ranks as `fusionlens compile` does, and the line that communicates carries the
collective in its hint and hover: the slowest rank's time, each rank's, the model on this
machine's calibration beside the measurement, the estimate on FUSIONLENS_CLUSTER with its
exposed part. A stand-in compile (no ranks) gives an overlapped collective its hint."""

from __future__ import annotations

import dataclasses

import os

import pytest

from fusionlens.report.schema import Collective, RankSpread
from lsp_helpers import EXAMPLES, hover_text, line_of

pytestmark = pytest.mark.asyncio

DDP = EXAMPLES / "ddp_train.py"
OVERLAPPED = {"FUSIONLENS_WORKER_COMPILE": "test_distributed_target:compile_overlapped"}
SOURCE = '''import torch
import torch.distributed as dist
import compiler


def forward(x):
    y = torch.relu(x)
    dist.all_reduce(y)
    return torch.sigmoid(y)


@compiler.example
def model_example():
    return forward, (torch.randn(4),)
'''


@pytest.mark.distributed
async def test_a_distributed_target_compiles_on_its_ranks_and_its_collective_shows(start_server):
    s = await start_server({"compileTrigger": "manual"}, env={"FUSIONLENS_CLUSTER": "64x8xH100"})
    uri = s.open(DDP)
    answer = await s.compile(uri, "all_reduce_sum")
    assert answer["ok"], answer
    target = next(t for t in (await s.regions(uri)).targets if t.name == "all_reduce_sum")
    assert target.status == "ok", target.message
    line = line_of(DDP, "dist.all_reduce(y)")
    labels = [h.label for h in await s.hints(uri) if h.position.line == line]
    assert any(label.startswith("all_reduce 4.0 KB") and label.endswith("(slowest rank)") for label in labels), labels
    text = hover_text(await s.hover(uri, line))
    assert "**all_reduce**" in text and "4.0 KB a rank over 2 ranks" in text and "slowest rank" in text, text
    assert "per rank: rank 0 " in text and " · rank 1 " in text, text
    assert "est " in text and "on 64x8xH100 (tree), " in text and " ms exposed" in text, text
    assert "- measured " in text and " · model " in text, text  # the calibration's model beside it
    assert "`all_reduce`" in text  # the issue symbol, printed as its kind


def compile_overlapped(path, target_name, *args, **kwargs):
    """The fake compiler's report with the `all_reduce` line's collective as a launch leaves an
    asynchronous one: timed on 2 ranks, overlapped by R1, estimated and modelled."""
    from lsp_fake_compile import compile_target

    report = compile_target(path, target_name, *args, **kwargs)
    with open(path, encoding="utf-8") as f:
        line = next(i for i, text in enumerate(f.read().splitlines(), 1) if "all_reduce(" in text)
    return dataclasses.replace(report, collectives=[  # a report is a value: a new one with these collectives
        Collective("all_reduce", "traced", 2 << 20, 2, "forward", "R0", os.path.abspath(path), line,
                   "est 1.2 ms on 64x8xH100 (ring), 0.3 ms exposed", 1.2, RankSpread(0.25, 0.28, 0.31), ["R1"], 0.3,
                   0.28, [0.25, 0.31])])


@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_an_overlapped_collective_says_so_in_its_hint_and_hover(start_server, tmp_path):
    path = tmp_path / "model.py"
    path.write_text(SOURCE)
    s = await start_server({"compileTrigger": "manual"}, root=tmp_path, env=OVERLAPPED)
    uri = s.open(path)
    assert (await s.compile(uri, "model_example"))["ok"]
    line = line_of(path, "dist.all_reduce(y)")
    labels = [h.label for h in await s.hints(uri) if h.position.line == line]
    assert "all_reduce 2.0 MB · 0.31 ms (slowest rank) · overlapped" in labels, labels
    text = hover_text(await s.hover(uri, line))
    assert "2.0 MB a rank over 2 ranks" in text, text
    assert "per rank: rank 0 0.25 ms · rank 1 0.31 ms" in text, text
    assert "measured 0.31 ms · model 0.28 ms" in text, text
    assert "est 1.2 ms on 64x8xH100 (ring), 0.3 ms exposed" in text and "overlapped by `R1`" in text, text
