"""Rooflines in the editor (lsp_server/views.py, commands.py): "est." on a CPU, the preview
region a line would join, % of peak where measured on a GPU, regions by what can be won."""

from fusionlens.report.schema import (CompileReport, Cost, DevicePeaks, OpRecord, Preview, ProgramReport, ProgramTimings, Region,
                                      RegionTiming, Roofline, SourceLine, Target, Timing)
from lsp_server.annotations import Result, build_annotations, norm_path
from lsp_server.commands import _by_what_can_be_won, _roofline_fields
from lsp_server.views import HINT_MAX, hint_label, hover_markdown, lens_title, region_tooltip

PATH = "/x/model.py"


def _region(rid, line, ms, min_ms, estimate, pct=None, executor="torch"):
    return Region(rid, executor, ["torch.add"], [SourceLine(PATH, line)], "t1 = torch.add(x, y)", [], [],
                  RegionTiming(ms, ms, 0.0) if ms is not None else None, None, 1, "",
                  Cost(3_000_000, 1_000_000, "fp32"), Roofline("H100", 3350, 67, "memory", min_ms, pct, estimate))


def _report(device, regions, previews=()):
    ops = [OpRecord(i, "torch.add", r.id, PATH, r.source_lines[0].line, r.source_lines[0].line, 4, 20, [],
                    f"t{i} = torch.add(x, y)", ["prims.add"]) for i, r in enumerate(regions)]
    t = Timing(0.5, 0.4, 0.6, 0.05, 3, "perf_counter", device)
    forward = ProgramReport("forward", regions=list(regions), previews=list(previews),
                            timings=ProgramTimings(device, t, t, None, 1.5, None))
    return CompileReport(Target("t", PATH, 20, 22), programs=[forward], ops=ops, device=device,
                         peaks=DevicePeaks("H100", 3350, 67, 494.5, 989.5, device == "cpu"))


def _notes(report):
    res = Result("t", norm_path(PATH), None, "ok", "", report, {}, 19)
    return res, build_annotations(res, norm_path(PATH))


TRITON_PREVIEW = Preview("triton", "no CUDA device", [Region(
    "P1", "triton", ["prims.add", "prims.mul"], [SourceLine(PATH, 5), SourceLine(PATH, 6)],
    "@triton.jit\ndef k(): pass", [], [], cost=Cost(10_720_000, 2_000_000, "fp32"),
    roofline=Roofline("H100", 3350, 67, "memory", 0.0032, None, True, "fp32"))])


def test_on_a_cpu_hints_name_the_preview_region_or_the_estimate():
    rep = _report("cpu", [_region("R0", 5, 0.2, 0.0041, True), _region("R1", 7, 0.3, 0.0011, True)],
                  [TRITON_PREVIEW])
    _, ann = _notes(rep)
    joined = hint_label(ann.lines[4])
    assert joined == "P1 · triton (preview) · est 3.2 µs" and len(joined) <= HINT_MAX
    assert hint_label(ann.lines[6]) == "R1 · torch · est 1.1 µs"  # in no preview: its own estimate
    hover = hover_markdown(ann.lines[4], [], lambda r, rid: ann.region_lines[rid], 4)
    assert "**roofline:** est. 4.1 µs on H100 (memory-bound: 3 MB, 1 MFLOP)" in hover
    assert "into one kernel `P1` (2 ops) · est. 3.2 µs on H100" in hover
    tip = region_tooltip(ann.lines[4][0], [4])
    assert "roofline: est. 4.1 µs on H100" in tip and "`P1` · est. 3.2 µs on H100" in tip
    res = Result("t", norm_path(PATH), None, "ok", "", rep, {}, 19)
    assert "of peak" not in lens_title("ok", res)  # nothing measured on the GPU: no percentage


def test_measured_on_a_gpu_hints_show_percent_of_peak_and_the_lens_the_furthest_region():
    slow = _region("R1", 7, 0.050, 0.005, False, 10.0, "triton")  # 45 µs to win
    fine = _region("R0", 5, 0.010, 0.009, False, 90.0, "triton")  # 1 µs
    rep = _report("cuda:0", [fine, slow], [TRITON_PREVIEW])
    res, ann = _notes(rep)
    assert hint_label(ann.lines[4]) == "R0 · triton · 10.0 µs · 90% peak"  # previews only matter on a CPU
    assert lens_title("ok", res).endswith(" · R1 at 10% of peak")
    hover = hover_markdown(ann.lines[6], [], lambda r, rid: ann.region_lines[rid], 6)
    assert "**roofline:** 10% of peak on H100 (roofline 5.0 µs, memory-bound" in hover


def test_the_regions_view_sorts_by_what_can_be_won():
    entries = [dict(id=r.id, **_roofline_fields(r)) for r in [
        _region("R0", 5, 0.010, 0.009, False, 90.0), _region("R1", 6, None, 0.001, True),
        _region("R2", 7, 0.050, 0.005, False, 10.0), _region("R3", 8, None, 0.004, True)]]
    assert [e["id"] for e in sorted(entries, key=_by_what_can_be_won)] == ["R2", "R0", "R3", "R1"]
    r2 = next(e for e in entries if e["id"] == "R2")
    assert abs(r2["headroomMs"] - 0.045) < 1e-12 and r2["roofline"]["pctOfPeak"] == 10.0
    assert next(e for e in entries if e["id"] == "R1")["headroomMs"] is None  # an estimate: nothing to subtract
