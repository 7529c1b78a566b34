"""A training target in the editor: its lines carry their backward kernels and saved
activations (hover, a second inlay hint), its lens the training step. A hand-made schema-4
report checks the views of a backward program (the same functions as a forward's); the real
server then compiles examples/train_cnn.py (declared `@compiler.example(train=True)`)."""

from __future__ import annotations

import re

import pytest

from fusionlens.report.schema import (CompileReport, Cost, DevicePeaks, OpRecord, Preview, ProgramReport, ProgramTimings,
                                      Region, RegionTiming, Roofline, SavedTensor, SourceLine, Target, Timing, Training)
from lsp_helpers import EXAMPLES, HINT_MAX, SUMMARY_RE, hover_text, line_of, tooltip_text
from lsp_server.annotations import Result, build_annotations, norm_path
from lsp_server.commands import _target_entry, _trace
from lsp_server.documents import View
from lsp_server.features import Repro, repro_of
from lsp_server.views import hint_label, hover_markdown, lens_title, program_groups, target_hover

CNN = EXAMPLES / "train_cnn.py"
# `bwd B3 · torch · 1.2 MB saved`, `bwd B3+B4 · torch`, `bwd B3 +8 more · mixed · 12 µs`, on a CPU
# `bwd PB1 · triton (preview) · est 3.2 µs` or, with what the line saves, `bwd PB1 · 1.0 KB saved`
BACKWARD_HINT = re.compile(r"^bwd (\S+( \+\d+ more)?( · [\w./-]+( \(preview\))?)?( · (est )?[\d.]+ (ms|µs))?"
                           r"( · \d+% peak)?( · [\d.]+ [KMG]?B saved)?|[\d.]+ [KMG]?B saved)$")
PATH = "/x/train.py"


def _region(rid, executor, line, ops=("prims.mul",), ms=0.02):
    return Region(rid, executor, list(ops), [SourceLine(PATH, line)], f"# code of {rid}", [], [],
                  RegionTiming(ms, ms, 0.0), None, 1, "", Cost(4096, 1024, "fp32"),
                  Roofline("H100", 3350, 67, "memory", 0.0032, None, True, "fp32"))


def _preview(rid, line):
    return Preview("triton", "no CUDA device", [Region(rid, "triton", ["prims.mul", "prims.add"], [SourceLine(PATH, line)],
                                                       "@triton.jit\ndef k(): pass", [], [],
                                                       roofline=Roofline("H100", 3350, 67, "memory", 0.0032, None, True))])


def _training_report(device="cpu"):
    ops = [OpRecord(0, "torch.matmul", "R0", PATH, 8, 8, 11, 16, [], "t0 = torch.matmul(x, w)", ["prims.matmul"]),
           OpRecord(1, "torch.nn.functional.gelu", "R1", PATH, 8, 8, 4, 17, [], "t1 = gelu(t0)", ["prims.erf"])]
    t = Timing(0.5, 0.4, 0.6, 0.05, 3, "perf_counter", device)
    forward = ProgramReport("forward", {"execution": "def forward(): ..."}, [_region("R0", "torch", 8), _region("R1", "torch", 8)],
                            [_preview("P0", 8)], ProgramTimings(device, t, t, None, 1.2, None))
    backward = ProgramReport("backward", {"backward": "def bwd(): ...", "fusion": "...", "execution": "def backward(): ..."},
                             [_region("B0", "torch", 8, ("prims.mul", "torch.matmul")), _region("B1", "torch", 8),
                              _region("B2", "triton", 9)], [_preview("PB0", 8)])
    training = Training([SavedTensor("t1", [8, 32], "float32", 1024, "activation", PATH, 8),
                         SavedTensor("w", [16, 32], "float32", 2048, "input")], 1024, [], ["x", "w"],
                        ProgramTimings(device, t, t, None, 1.4, None))
    return CompileReport(Target("train", PATH, 12, 14), programs=[forward, backward], training=training, ops=ops,
                         device=device, peaks=DevicePeaks("H100", 3350, 67, 494.5, 989.5, device == "cpu"))


def _annotated(device="cpu"):
    res = Result("train", norm_path(PATH), None, "ok", "", _training_report(device), {}, 11)
    return res, build_annotations(res, norm_path(PATH))


def test_a_backward_program_is_annotated_and_labelled_like_a_forward():
    res, ann = _annotated()
    assert [(n.program.kind, n.region.id) for n in ann.lines[7]] == [
        ("forward", "R0"), ("forward", "R1"), ("backward", "B0"), ("backward", "B1")]
    assert ann.region_lines == {"R0": [7], "R1": [7], "B0": [7], "B1": [7], "B2": [8]}
    assert [t.name for t in ann.saved[7]] == ["t1"]  # activations only: inputs are alive anyway
    forward, backward = program_groups(ann.lines[7])
    # on a CPU both name the preview region the line joins; the saved memory takes the time's place
    assert hint_label(forward) == "P0 · triton (preview) · est 3.2 µs"
    assert hint_label(backward, saved=ann.saved[7]) == "bwd PB0 · 1.0 KB saved"
    assert hint_label([], saved=ann.saved[7]) == "bwd 1.0 KB saved"
    assert hint_label(program_groups(ann.lines[8])[0]) == "bwd B2 · triton · est 3.2 µs"
    _, on_gpu = _annotated("cuda:0")
    label = hint_label(program_groups(on_gpu.lines[7])[1], "stale · ", on_gpu.saved[7])
    assert label == "stale · bwd B0+B1 · torch · 1.0 KB saved" and BACKWARD_HINT.match(label[len("stale · "):])
    assert all(len(hint_label(g)) <= HINT_MAX for g in program_groups(ann.lines[7]))


def test_a_backward_programs_hover_repro_and_regions_entry():
    res, ann = _annotated()
    text = hover_markdown(ann.lines[7], [], lambda r, rid: ann.region_lines.get(rid, []), 7, ann.saved[7])
    assert "### FusionLens · 2 regions · target `train`" in text
    assert "### FusionLens · 2 backward regions · target `train`" in text and "| `B0` | torch | `mul`, `torch.matmul` |" in text
    assert "kernel `PB0` (2 ops)" in text and "**saved for backward:** 1 activation, 1.0 KB (`t1` float32[8, 32])" in text
    assert [repro_of(n) for n in ann.lines[7]][2] == Repro("train", "triton:PB0", res.path, "triton preview PB0")
    assert repro_of(ann.lines[8][0]) == Repro("train", "B2", res.path, "B2")
    view = View({}, {}, {(res.seq, "B0"): [7]}, {}, [], [])
    entry = _target_entry(res, res.report, view, norm_path(PATH))
    assert [(r["id"], r["program"]) for r in entry["regions"] if r["program"] == "backward"] == [
        ("B0", "backward"), ("B1", "backward"), ("B2", "backward")]
    assert next(r for r in entry["regions"] if r["id"] == "B0")["lines"] == [7]
    assert [(p["id"], p["program"], p["lines"]) for p in entry["previews"]] == [("P0", "forward", [7]),
                                                                               ("PB0", "backward", [7])]
    assert entry["speedup"] == 1.2  # the forward program's


def test_a_training_compiles_lens_hover_and_traces():
    res, _ = _annotated()
    assert lens_title("ok", res).startswith("fwd+bwd 1.4x vs eager · 1.0 KB saved · 2 regions · 2 kernels")
    assert SUMMARY_RE.match(lens_title("ok", res))
    text = target_hover("train", "ok", "", res)
    assert "- `B2` triton: 1 ops" in text and "training step: compiled 0.50 ms vs eager 0.50 ms" in text
    assert "largest saved: `t1` 1.0 KB (train.py:8)" in text
    assert _trace(res.report, None, None) == ("forward", "execution")
    assert _trace(res.report, None, "backward") == ("backward", "execution")
    assert _trace(res.report, "backward", None) == ("backward", "backward")
    assert _trace(res.report, "joint", None)[0] is None


@pytest.mark.asyncio
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
    tip = tooltip_text(back[0])
    assert "backward region `B" in tip and "**saved for backward:**" in tip, tip

    text = hover_text(await s.hover(uri, conv))
    assert "backward region" in text and "`B" in text, text
    assert "convolution_backward" in text or "batch_norm_backward" in text, text
    assert "**saved for backward:**" in text and "float32[8, 16, 16, 16]" in text, text
    target = line_of(CNN, "def cnn_loss_example")
    assert "training step: compiled" in hover_text(await s.hover(uri, target))
