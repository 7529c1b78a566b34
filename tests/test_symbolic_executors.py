"""The fusion executors on a dynamic program's groups: shapes of symbols (fusionlens/ir/symbols.py).

Each group is traced once on fake tensors of a SymbolEnv (tests/fusion_groups.py's
`symbolic_group_from_fn`), generated once, and run at several sizes against eager: through
Triton's interpreter (sizes are kernel arguments, so one source serves every size) and
through tests/nvfuser_reference.py (one definition, its extents symbolic, its scalars given
at each call). Generating a group must record no guard: a guard would specialise the
program to the example's sizes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fusionlens.middle.contract import Decline
from fusionlens.executors import nvfuser as nx

from fusion_groups import symbolic_group_from_fn
from nvfuser_testing import reference_backend

SIZES = (3, 7, 12)  # the interpreter is slow: tiny sizes, one of them the example's neither


def _weights(x):
    return x, torch.linspace(0.5, 1.5, 8), torch.linspace(-1.0, 1.0, 8)


# name -> (fn, argument shapes (a str dim is symbolic), what runs before fn untraced, or None)
CASES = {
    "pointwise": (lambda x: x * 2.0 + torch.sin(x), [(3, "n")], None),
    "pointwise_times_a_size": (lambda x: x * x.shape[1] + x.shape[1] / 2, [(3, "n")], None),
    "broadcast": (lambda x, y: x * y + 1.0, [(2, "n", 8), ("n", 1)], None),
    "broadcast_static_weight": (lambda x, w: (x + w).relu(), [(2, "n", 8), (8,)], None),
    "outer_sum_two_symbols": (lambda x, y: x + y, [("n", 1), (1, "m")], None),
    "sum_over_symbol": (lambda x: x.sum(-1), [(3, "n")], None),
    "sum_over_symbol_rows_contiguous": (lambda x: x.sum(0), [("n", 6)], None),
    "sum_symbolic_rows_contiguous": (lambda x: x.amax(0), [(8, "n")], None),
    "mean_subtracted": (lambda x: x - x.mean(1, keepdim=True), [(2, "n", 8)], None),
    "reshape_merged_dims": (lambda y: torch.softmax(y, -1), [(2, "n", 4)], lambda x: (x.reshape(2, -1),)),
    "softmax_symbolic_rows": (lambda x: torch.softmax(x, -1), [("n", 8)], None),
    "softmax_symbolic_row_length": (lambda x: torch.softmax(x, -1), [(2, "n")], None),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (8,), w, b), [(3, "n", 8), (8,), (8,)], None),
    "layer_norm_symbolic_width": (lambda x: F.layer_norm(x, (x.shape[-1],)), [(3, "n")], None),
}


def _real(shapes, n: int, weights: bool) -> list[torch.Tensor]:
    sizes = {"n": n, "m": n + 2}
    out = [torch.randn(*[sizes[d] if isinstance(d, str) else d for d in s]) for s in shapes]
    if weights:  # layer norm's weight and bias: fixed, not random (any would do)
        out[1:] = _weights(out[0])[1:]
    return out


def _eager(fn, before, args):
    return fn(*(before(*args) if before else args))


@pytest.mark.parametrize("case", sorted(CASES))
def test_triton_serves_every_size_with_one_kernel(triton, case):
    from fusionlens.executors.triton import generate

    fn, shapes, before = CASES[case]
    group, env, pick = symbolic_group_from_fn(fn, *shapes, before=before)
    guards = len(env.guards)
    gen = generate(group)
    assert len(env.guards) == guards, f"generating recorded guards: {env.guards[guards:]}"
    for n in SIZES:
        args = _real(shapes, n, case == "layer_norm")
        want = _eager(fn, before, args)
        got = gen.fn(*pick(args))[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"{case} at size {n}")
    assert list(gen.variants) == [gen.default_key], "one source for every size (contiguous inputs)"
    assert gen.report_code() == gen.source
    assert "one kernel serves every size" in gen.status()
    assert len(env.guards) == guards, f"running recorded guards: {env.guards[guards:]}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_nvfuser_reference_serves_every_size_with_one_definition(case):
    fn, shapes, before = CASES[case]
    group, env, pick = symbolic_group_from_fn(fn, *shapes, before=before)
    guards = len(env.guards)
    gen = nx.NvFuserExecutor(backend=reference_backend()).generate(group, "cpu")
    assert len(env.guards) == guards, f"generating recorded guards: {env.guards[guards:]}"
    for n in SIZES:
        args = _real(shapes, n, case == "layer_norm")
        want = _eager(fn, before, args)
        got = gen.fn(*pick(args))[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"{case} at size {n}")
        torch.testing.assert_close(gen.eager_fn(*pick(args))[0], want, msg=f"{case}: the prims through torch")
    assert len(gen.definitions) == 1 and gen.executions == len(SIZES)
    assert len(env.guards) == guards, f"running recorded guards: {env.guards[guards:]}"


def test_triton_kernel_takes_sizes_as_arguments(triton):
    from fusionlens.executors.triton import generate

    group, _, _ = symbolic_group_from_fn(lambda x, y: x * y + 1.0, (2, "n", 8), ("n", 1))
    src = generate(group).source
    assert "mask = offs < sz_numel" in src  # 16*s0, computed by the launcher
    assert "s0 = " in src and ".shape[" in src  # the launcher binds the symbol from an input's dim
    assert "sz_numel = 16*s0" in src and "triton.cdiv(sz_numel, " in src
    kernel = src[src.index("@triton.jit\ndef fl_R0_kernel"):src.index("def fl_R0_launch")]
    assert "* 40" not in kernel and "< 80" not in kernel  # no size of the example (n=5) in the kernel


def test_triton_reduction_over_a_symbol_loops_with_the_length_as_an_argument(triton):
    from fusionlens.executors.triton import generate

    group, _, _ = symbolic_group_from_fn(lambda x: torch.softmax(x, -1), (2, "n"))
    src = generate(group).source
    assert "for start in range(0, s0, BLOCK_N):" in src and "col_mask = cols < s0" in src
    assert "BLOCK_N=8" in src  # from the example's length (5), as a constexpr: not a guard


def test_triton_strided_inputs_get_one_variant_for_every_size(triton):
    from fusionlens.executors.triton import generate

    group, env, pick = symbolic_group_from_fn(lambda x: torch.exp(x) - x, ("n", 6))
    gen = generate(group)
    for n in SIZES:
        base = torch.randn(6, n)
        got = gen.fn(base.t())[0]  # strides (1, n): a pattern ("v", 1), its stride an argument
        torch.testing.assert_close(got, torch.exp(base.t()) - base.t())
    assert len(gen.variants) == 2 and gen.last_key != gen.default_key
    assert "st_x_1 = x.stride(1)" in gen.report_code()


def test_triton_declines_a_symbol_no_input_carries_plainly(triton):
    from fusionlens.executors.triton import generate

    group, _, _ = symbolic_group_from_fn(lambda y: y * 2.0, (3, "n"),
                                         before=lambda x: (torch.cat([x, x[:, :1]], 1),))
    with pytest.raises(Decline, match=r"the size s0 is carried by no input's shape as a dim of its own"):
        generate(group)


def test_nvfuser_definition_reads_extents_and_takes_scalars():
    group, _, pick = symbolic_group_from_fn(lambda x: x - x.mean(1, keepdim=True), (2, "n", 8))
    gen = nx.NvFuserExecutor(backend=reference_backend()).generate(group, "cpu")
    src = gen.source
    assert "shape=[-1, -1, -1]" in src  # the input's extents are symbolic, as always
    assert "fd.ops.size(x, dim=1)" in src  # the broadcast back to [2, s0, 8] takes x's extent
    assert "fd.define_scalar(None, dtype=DataType.Double)" in src  # 1/N (here N), given at each call
    x = torch.randn(2, 9, 8)
    torch.testing.assert_close(gen.fn(*pick([x]))[0], x - x.mean(1, keepdim=True))


def test_nvfuser_serves_a_symbol_no_input_carries_plainly():
    # the definition needs no value of s0: its extents are the inputs' own
    fn = lambda y: y * 2.0  # noqa: E731
    group, _, pick = symbolic_group_from_fn(fn, (3, "n"), before=lambda x: (torch.cat([x, x[:, :1]], 1),))
    gen = nx.NvFuserExecutor(backend=reference_backend()).generate(group, "cpu")
    for n in SIZES:
        x = torch.randn(3, n)
        y = torch.cat([x, x[:, :1]], 1)
        torch.testing.assert_close(gen.fn(*pick([x]))[0], y * 2.0)


def test_symbolic_kernels_compile_for_sm90(tmp_path):
    """The kernels above, compiled (not interpreted) for Hopper: their size arguments, and the
    INDEX_64 switch both ways, in Triton's real code generator (fusionlens/executors/triton/aot.py)."""
    import dataclasses
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton")
    import test_triton_hopper as hopper
    from fusionlens.executors.triton import analysis, build_source

    problem = hopper._ptxas_problem()
    if problem:
        pytest.skip(problem)
    cases = []
    for name in sorted(CASES):
        fn, shapes, before = CASES[name]
        group, _, _ = symbolic_group_from_fn(fn, *shapes, before=before, gid=f"S_{name}")
        an = analysis._Analysis(group)
        keys = {"contiguous": [tuple(0 if d == 1 else "c" for d in an.shape(v)) for v in an.inputs],
                "strided": [tuple("v" if d != 1 else 0 for d in an.shape(v)) for v in an.inputs]}
        for label, key in keys.items():
            src, _, _, (spec,) = build_source(group, an, key)  # symbolic groups are never split: one kernel
            for wide in (False, True):
                spec.constexprs["INDEX_64"] = wide
                cases.append({"label": f"{name}/{label}/index_64={wide}", "source": src,
                              "specs": [dataclasses.asdict(spec)]})
    path = tmp_path / "kernels.json"
    path.write_text(json.dumps(cases))
    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(repo) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "fusionlens.executors.triton.aot", str(path), "--arch", "90"],
                          capture_output=True, text=True, env=env, cwd=repo, timeout=600)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == len(cases), proc.stderr[-3000:]
    failed = [r for r in rows if not r.get("ok")]
    assert not failed, "\n".join(f"{r['label']}: {r.get('error')}" for r in failed)


def test_source_for_layouts_of_any_size(triton):
    """repro's question (fusionlens/executors/base.py source_for): the code for inputs of these
    layouts; for a symbolic group any size of its symbols, with no guard recorded."""
    from fusionlens.middle.contract import Layout
    from fusionlens.executors.triton import source_for

    group, env, _ = symbolic_group_from_fn(lambda x: torch.softmax(x, -1), (2, "n"))
    guards = len(env.guards)
    contiguous, transposed = Layout.of_tensor(torch.randn(2, 9)), Layout.of_tensor(torch.randn(9, 2).t())
    assert source_for(group, [contiguous]) == source_for(group, [Layout.of_tensor(torch.randn(2, 30))])
    assert "st_x_1 = x.stride(1)" in source_for(group, [transposed])  # strides (1, 2): dim 1 an argument
    definition = nx.NvFuserExecutor(backend=reference_backend()).source_for(group, [transposed], "cpu")
    assert "stride_order=[0, 1]" in definition
    assert len(env.guards) == guards
