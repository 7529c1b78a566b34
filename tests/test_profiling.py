"""CompileOptions.profile (FUSIONLENS_PROFILE=1, --profile): each region runs in a profiler
range named after it and its first user line (fusionlens/executors/profiling.py); without it the program
has no range in it at all."""

import torch
from torch.profiler import ProfilerActivity, profile

from fusionlens.driver import pipeline
from fusionlens.executors import profiling
from fusionlens.options import CompileOptions
from fusionlens.ir.trace import PROFILE_RANGE
from fusionlens.driver.targets import load_module

MODEL = '''\
import torch


def f(x, w):
    y = torch.relu(x) * 2
    return torch.matmul(y, w)
'''


def _compiled(tmp_path, profile: bool):
    path = tmp_path / "tiny_model.py"
    path.write_text(MODEL)
    f = load_module(str(path)).f
    return pipeline.compile_program(f, (torch.randn(8, 16), torch.randn(16, 4)), {}, CompileOptions(profile=profile))


def test_regions_show_in_torch_profiler_with_their_user_lines(tmp_path):
    c = _compiled(tmp_path, profile=True)
    names = set(c.forward.plan.trace.ranges.values())
    assert len(names) == len(c.forward.plan.regions) and "R0 tiny_model.py:5" in names, names
    matmul = next(r.id for r in c.forward.plan.regions if any(b.sym.name == "torch.matmul" for b in r.bsyms))
    assert f"with {PROFILE_RANGE}('{matmul} tiny_model.py:6'):" in c.forward.plan.trace.python()
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = c.fn(x, w)
    recorded = {e.key for e in prof.key_averages()}
    assert names <= recorded, names - recorded
    torch.testing.assert_close(out, torch.matmul(torch.relu(x) * 2, w))


def test_without_the_flag_the_program_has_no_range(tmp_path):
    c = _compiled(tmp_path, profile=False)
    assert c.forward.plan.trace.ranges == {} and PROFILE_RANGE not in c.forward.plan.trace.python()
    assert PROFILE_RANGE not in c.forward.plan.trace.extra_globals
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        c.fn(torch.randn(8, 16), torch.randn(16, 4))
    assert not any(e.key.startswith("R0 ") for e in prof.key_averages())


def test_nvtx_only_where_cuda_is():
    assert profiling.range_for("cuda").nvtx and not profiling.range_for("cpu").nvtx


def test_the_environment_sets_the_options_at_the_entry_points():
    assert CompileOptions.from_env({"FUSIONLENS_PROFILE": "1"}).profile
    assert not CompileOptions.from_env({"FUSIONLENS_PROFILE": "0"}).profile
    assert not CompileOptions.from_env({}).profile
    env = {"FUSIONLENS_DEBUG": "2", "FUSIONLENS_GPU": "L4", "FUSIONLENS_VERIFY": "yes"}
    options = CompileOptions.from_env(env, executors=["torch"], gpu="H200")
    assert (options.debug, options.gpu, options.verify, options.executors) == (2, "H200", True, ("torch",))
    assert CompileOptions.from_env({"FUSIONLENS_DEBUG": "verbose"}).debug == 0  # a bad level is ignored
