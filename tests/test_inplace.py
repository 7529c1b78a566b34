"""In-place updates of inputs, buffers and parameters are visible to the caller, as in eager:
the trace is functional and the program writes the updates back at its end."""

import torch

import compiler
from fusionlens.driver import checking

EXECUTORS = ["torch"]


def _same(a, b):
    assert checking.mismatch(a, b) is None, checking.mismatch(a, b)


def test_inputs_updated_in_place_are_written_back_and_returned_as_themselves():
    def fn(x, y, z):
        x.add_(y)
        z[0] = 7.0  # setitem
        x *= 2
        return x, z.sum(), y

    jfn = compiler.jit(fn, executors=EXECUTORS)
    for _ in range(3):
        x, y, z = torch.randn(4), torch.randn(4), torch.randn(3)
        ex, ey, ez = x.clone(), y.clone(), z.clone()
        expected = fn(ex, ey, ez)
        out = jfn(x, y, z)
        _same(out, expected)
        _same((x, y, z), (ex, ey, ez))
        assert out[0] is x and out[2] is y  # the updated input itself, as eager returns it
    source = compiler.last_report(jfn).forward.traces["execution"]
    assert "write_back(x, " in source and "write_back(z, " in source and "write_back(y, " not in source
    assert "setitem_(z, " in source  # z's element written into z itself (reinplace.py): its write-back copies nothing
    assert jfn.cache_info()["misses"] == 1


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("total", torch.zeros(4))
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        self.steps += 1
        self.total.add_(x.sum(0))
        return self.lin(x) * self.steps


def test_buffers_updated_in_place_match_eager_call_after_call():
    torch.manual_seed(0)
    model, reference = Counter(), Counter()
    reference.load_state_dict(model.state_dict())
    jfn = compiler.jit(model, executors=EXECUTORS)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 4)
            _same(jfn(x), reference(x))
            _same((model.steps, model.total), (reference.steps, reference.total))
    assert int(model.steps) == 3


def test_batch_norm_training_updates_running_statistics_once_per_call():
    bn, reference = torch.nn.BatchNorm2d(3).train(), torch.nn.BatchNorm2d(3).train()
    jfn = compiler.jit(bn, executors=EXECUTORS)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(4, 3, 5, 5)
            _same(jfn(x), reference(x))
            _same((bn.running_mean, bn.running_var, bn.num_batches_tracked),
                  (reference.running_mean, reference.running_var, reference.num_batches_tracked))


def test_compile_checks_updates_on_copies_and_leaves_the_callers_tensors_alone():
    def fn(x):
        x.add_(1)
        return x * 2

    x = torch.zeros(3)
    rep = compiler.compile(fn, x, executors=EXECUTORS)
    assert not [d for d in rep.diagnostics if d.severity == "error"]
    assert torch.equal(x, torch.zeros(3))
