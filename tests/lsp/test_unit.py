"""Unit tests of the server's pure parts (no server process, no torch)."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from fusionlens.report.schema import (Boundary, CompileReport, DiagnosticCode, OpRecord, ProgramReport, ProgramTimings, Region,
                                      RegionTiming, SourceLine, Target, Timing)
from lsp_server.linemap import LineMap
from lsp_server.protocol import (CompileAnswer, CompileRequest, Failure, Ready, ReproAnswer, ReproScript, Stacks, Started,
                                 UserFrame, Where, WhereEvent, decode, encode)
from lsp_server.annotations import LineNote, Result, load_report, norm_path
from lsp_server.views import HINT_MAX, hint_label, lens_title, report_summary

REPO = Path(__file__).resolve().parents[2]


def _report(path="/x/model.py"):
    ops = [OpRecord(0, "torch.nn.functional.linear", "fusion_region_0", path, 5, 5, 8, 20, [], "t0 = linear(x)", []),
           OpRecord(1, "torch.relu", "fusion_region_0", path, 6, 6, 8, 20, [], "t1 = relu(t0)", ["prims.max"])]
    region = Region("fusion_region_0", "nvfuser_or_a_long_executor_name", ["linear", "relu"],
                    [SourceLine(path, 5), SourceLine(path, 6)], "def k(): pass", [], [],
                    RegionTiming(0.123, 0.3, 0.01), Boundary("library call", "matmul", path, 6), kernels=2)
    t = Timing(0.41, 0.4, 0.5, 0.01, 2, "perf_counter", "cpu")
    forward = ProgramReport("forward", regions=[region], timings=ProgramTimings("cpu", t, t, None, 1.8, None))
    return CompileReport(Target("t", path, 10, 12), programs=[forward], ops=ops)


def test_linemap_shifts_and_drops_lines():
    old = ["a", "b", "c", "d"]
    new = ["new", "a", "b", "C!", "d"]
    lm = LineMap(old, new)
    assert [lm(i) for i in range(4)] == [1, 2, None, 4]
    assert LineMap(old, list(old))(3) == 3


def test_load_report_keeps_region_op_names():
    data = json.loads(_report().to_json())
    rep = load_report(data)
    assert rep.forward.regions[0].ops == ["linear", "relu"]
    assert isinstance(rep.ops[0], OpRecord) and rep.ops[0].line == 5


def test_labels_are_short_and_summary_reads_well():
    rep = _report()
    res = Result("t", norm_path("/x/model.py"), None, "ok", "", rep, {}, 9)
    label = hint_label([LineNote(res, rep.forward, rep.forward.regions[0], 4, rep.ops[:1])])
    assert len(label) <= HINT_MAX and label.startswith("fusion_region_0")
    assert report_summary(rep) == "1 region · 2 kernels · 0.41 ms · 1.8x vs eager"
    assert lens_title("not compiled", None) == "Compile & benchmark"
    assert lens_title("ok", res) == "1 region · 2 kernels · 0.41 ms · 1.8x vs eager"


def test_importing_the_server_does_not_import_torch():
    code = "import sys, lsp_server.server, lsp_server.worker_client; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_worker_protocol_survives_user_prints(tmp_path):
    """Prints to sys.stdout and raw writes to fd 1 in the worker must not reach the pipe."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests" / "lsp")]),
               FUSIONLENS_WORKER_COMPILE="lsp_fake_compile:noisy_compile_target")
    proc = subprocess.Popen([sys.executable, "-m", "lsp_server.worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env=env, text=True)
    req = CompileRequest(str(REPO / "examples" / "mlp.py"), "mlp_example", sys_path=[str(REPO)], id=1, repeats=2)
    out, err = proc.communicate(encode(req) + "\n", timeout=120)
    messages = [decode(line) for line in out.splitlines()]  # every line is a protocol message
    assert isinstance(messages[0], Ready) and isinstance(messages[1], Started)
    assert isinstance(messages[-1], CompileAnswer) and messages[-1].id == 1, messages[-1]
    assert CompileReport.from_dict(messages[-1].report).forward.regions
    assert "NOISE from print" in err and "NOISE from fd 1" in err


def test_protocol_messages_round_trip_and_strangers_are_refused():
    where = Where("/x/m.py", 3, "f", [UserFrame("/x/m.py", 3, "f"), UserFrame("/x/run.py", 9, "main")], exit=1)
    for message in [CompileRequest("/x/m.py", "t", ["triton"], id=4, gpu="L4"), WhereEvent(4, where),
                    ReproAnswer(5, ReproScript("print()", "P1", "triton", "m_t_P1_repro.py", "one kernel")),
                    Ready(12, "cpu", "CPU", None, Stacks(7, {"never": ["/lib"]})), Failure(6, "boom")]:
        line = encode(message)
        assert "\n" not in line and decode(line) == message
    assert decode('{"type": "nonsense", "id": 1}') is None and decode("print output") is None


def test_boundaries_fallbacks_and_errors_land_on_user_lines():
    from fusionlens.report.schema import Diagnostic, Fallback
    from lsp_server.annotations import build_annotations
    from lsp_server.views import boundary_label, hover_markdown

    rep = dataclasses.replace(_report(), fallbacks=[Fallback("torch.cumsum", "no symbol", "/x/model.py", 6)])
    path = norm_path("/x/model.py")
    res = Result("t", path, None, "ok", "", rep, {}, 9)
    ann = build_annotations(res, path)
    assert sorted(ann.lines) == [4, 5] and ann.region_lines == {"fusion_region_0": [4, 5]}
    (region, boundary), = ann.boundaries[5]
    label = boundary_label(ann.boundaries[5])
    assert label.startswith("┆ fusion_region_0 ends") and len(label) <= HINT_MAX
    text = hover_markdown(ann.lines[5], ann.boundaries[5], lambda r, rid: ann.region_lines[rid], 5)
    assert "**region ends here:** library call — matmul" in text
    assert "**same region:** line 5" in text and "t1 = relu(t0)" in text
    assert [(d.line, d.severity, d.code) for d in ann.diags] == [(5, "information", "fallback")]

    failed = CompileReport(rep.target, status="error",
                           error=Diagnostic("error", "ValueError: boom", "/x/model.py", 3))
    ann = build_annotations(Result("t", path, None, "error", "ValueError: boom", failed, {}, 9), path)
    assert [(d.line, d.severity) for d in ann.diags] == [(2, "error"), (9, "error")]
    assert "model.py:3" in ann.diags[1].message


def test_settings_take_valid_values_and_refuse_the_rest():
    """Strict since settings are validated (a string "3" is not a number): see test_settings.py."""
    from lsp_server.settings import Settings

    s = Settings()
    changed, warnings = s.update({"fusionlens": {"allowExecution": False, "compileTrigger": "bogus",
                                                 "benchmarkRepeats": "3", "executors": ["triton", "torch"],
                                                 "timeoutSeconds": "x", "unknown": 1}})
    assert sorted(changed) == ["allowExecution", "executors"] and len(warnings) == 4  # 3 refused, 1 unknown key
    assert s.compileTrigger == "onOpen" and s.timeoutSeconds == 60.0
    assert s.options_key() == (("triton", "torch"), 20, "auto", "H100")


def test_hover_shows_what_triton_would_fuse_on_a_cpu():
    """On a machine without a GPU the torch executor runs every line; hover still shows the
    Triton kernel the line would become (report.previews)."""
    from fusionlens.driver.targets import compile_target
    from lsp_server.annotations import build_annotations
    from lsp_server.views import preview_section

    path = str(REPO / "examples" / "norms.py")
    report = compile_target(path, "rmsnorm_example", benchmark=False)
    assert any(p.executor == "triton" for p in report.forward.previews)
    line = next(o.line for o in report.ops if "rsqrt" in o.name) - 1
    ann = build_annotations(Result("rmsnorm_example", norm_path(path), None, "ok", "", report, {}, 0), norm_path(path))
    text = "\n".join(preview_section(ann.lines[line]))
    assert "where triton can run" in text and "@triton.jit" in text


def test_stack_dump_parses_to_the_innermost_user_frame():
    from fusionlens.report.discovery import CodeRoots
    from lsp_server.worker_client import parse_stack_dump

    dump = ('Timeout (0:00:03)!\n'
            'Thread 0x00007f0000000002 (most recent call first):\n'
            '  File "/proj/other.py", line 7 in spin\n'
            'Thread 0x00007f0000000001 (most recent call first):\n'
            '  File "/lib/torch/nn/modules/module.py", line 1520 in _call_impl\n'
            '  File "/proj/helper.py", line 4 in poke\n'
            '  File "/proj/model.py", line 12 in forward\n'
            '  File "/repo/compiler/targets.py", line 150 in compile_target\n')
    roots = CodeRoots(never=("/lib/torch", "/repo/compiler"))
    where = parse_stack_dump(dump, "Timeout", 0x7f0000000001, roots)
    assert (where.file, where.line, where.function) == ("/proj/helper.py", 4, "poke")
    assert [(f.file, f.line) for f in where.stack] == [("/proj/helper.py", 4), ("/proj/model.py", 12)]
    assert parse_stack_dump(dump, "Fatal Python error", 0x7f0000000001, roots) is None
    # a fatal signal: the crashing thread ("Current thread"), the last dump of the file
    crash = dump + ('Fatal Python error: Segmentation fault\n\n'
                    'Current thread 0x00007f0000000001 (most recent call first):\n'
                    '  File "/lib/python3/ctypes/__init__.py", line 519 in string_at\n'
                    '  File "/proj/\\xe9t\\xe9.py", line 9 in crash\n\n'
                    'Extension modules: torch._C (total: 1)\n')
    where = parse_stack_dump(crash, "Fatal Python error", 0x7f0000000001,
                             CodeRoots(never=roots.never, stdlib=("/lib/python3",)))
    assert (where.file, where.line) == ("/proj/été.py", 9)


def test_a_timeout_points_at_the_users_line_in_another_file():
    from lsp_server.annotations import build_annotations
    from lsp_server.protocol import UserFrame, Where

    path, helper = norm_path("/x/model.py"), norm_path("/x/helper.py")
    where = Where("/x/helper.py", 4, "poke", [UserFrame("/x/helper.py", 4, "poke"), UserFrame("/x/model.py", 12, "forward")],
                  note="timed out after 2 s here")
    res = Result("t", path, None, "error", "compile timed out after 2 s", None, {}, 9, "timeout", where=where)
    assert res.files() == {path, helper}
    at, = build_annotations(res, helper).diags
    assert (at.line, at.severity, at.code) == (3, "error", "timeout")
    assert at.message == "compiling t timed out after 2 s here (in poke)"
    on_def, = build_annotations(res, path).diags
    assert on_def.line == 9 and "(at helper.py:4 in poke)" in on_def.message
    assert on_def.related == [(helper, 3, at.message)]
    assert on_def.related_uris() == [(Path(helper).as_uri(), 3, at.message)]


def test_a_target_that_returned_no_tensor_says_so_in_its_lens():
    from fusionlens.report.schema import Diagnostic

    rep = CompileReport(Target("sizes", "/x/m.py", 3, 4), diagnostics=[Diagnostic(
        "warning", "sizes returned int and no tensor: there is nothing to compile",
        code=DiagnosticCode.NOTHING_TO_COMPILE)])
    res = Result("sizes", norm_path("/x/m.py"), None, "ok", report_summary(rep), rep, {}, 2)
    assert lens_title("ok", res) == "Nothing to compile: sizes returned int and no tensor"
    assert lens_title("not compiled", None, "compile cancelled: the document changed", cancelled=True) == \
        "Compile & benchmark (last run cancelled)"


def test_model_code_in_a_library_file_annotates_it_and_the_users_call_line():
    from fusionlens.report.schema import Frame
    from lsp_server.annotations import build_annotations

    lib, user = "/site/transformers/modeling_tiny.py", "/x/run.py"
    ops = [OpRecord(i, name, f"R{i}", lib, 10 + i, 10 + i, 4, 20,
                    [Frame(lib, 10 + i, "forward"), Frame(user, 5, "example")], f"t{i} = {name}(x)", [])
           for i, name in enumerate(["torch.nn.functional.linear", "torch.relu"])]
    regions = [Region(f"R{i}", "torch", [op.name], [SourceLine(lib, op.line)], "", [], [])
               for i, op in enumerate(ops)]
    rep = CompileReport(Target("example", user, 3, 5), programs=[ProgramReport("forward", regions=regions)], ops=ops)
    res = Result("example", norm_path(user), None, "ok", "", rep, {}, 2)
    assert res.files() == {norm_path(user), norm_path(lib)}
    in_lib = build_annotations(res, norm_path(lib))
    assert sorted(in_lib.lines) == [9, 10] and in_lib.region_lines == {"R0": [9], "R1": [10]}
    at_call = build_annotations(res, norm_path(user))
    assert list(at_call.lines) == [4] and at_call.region_lines == {}  # the call line summarises both regions
    assert [n.region.id for n in at_call.lines[4]] == ["R0", "R1"]
    assert hint_label(at_call.lines[4]) == "R0+R1 · torch"
