"""The CLI as a user runs it: `fusionlens compile FILE`."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args):
    return subprocess.run([sys.executable, "-m", "compiler", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_compile_prints_trace_regions_and_timings():
    p = run("compile", "examples/mlp.py", "--target", "mlp_example", "--repeats", "3")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "== mlp_example" in out
    assert "-- trace (execution) --" in out and "def " in out and "# examples/mlp.py:" in out
    assert "-- regions" in out and "linear" in out
    assert "-- timings" in out and "compiled" in out and "eager" in out


def test_json_is_the_report():
    p = run("compile", "examples/softmax.py", "--target", "softmax_example", "--json", "--no-benchmark")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["target"]["name"] == "softmax_example" and data["status"] == "ok"
    assert data["programs"][0]["timings"] is None


def test_error_exit_status_and_user_line():
    p = run("compile", "tests/fixtures/raises.py", "--no-benchmark")
    assert p.returncode == 1
    assert "tests/fixtures/raises.py:17: error: " in p.stderr.replace(ROOT + "/", "")


def test_syntax_error_file():
    p = run("compile", "tests/fixtures/syntax_error.py")
    assert p.returncode == 1 and "syntax_error.py:13" in p.stderr and "SyntaxError" in p.stderr


def test_missing_target_and_file():
    assert run("compile", "examples/mlp.py", "--target", "nope").returncode == 2
    assert run("compile", "no/such/file.py").returncode == 2
