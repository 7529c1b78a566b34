"""fusionlens.middle.verify: real programs keep every rule at every stage; a trace or FusionGroup
broken by hand, one rule at a time, is rejected with the op and its user line."""

from __future__ import annotations

import dataclasses
import inspect
import os

import pytest
import torch
import torch.nn.functional as F

from fusionlens.middle import fusion
from fusionlens.driver import pipeline
from fusionlens.ir.trace import SymbolKind
from fusionlens.ir.trace import BoundSymbol, Symbol, Trace, Value, format_call
from fusionlens.ops import prims
from fusionlens.middle.verify import VerifyError, verify, verify_group
from test_training import Block as _Block  # a pre-norm MLP block: norm, linears, GELU

HERE = os.path.basename(__file__)


# --- programs ------------------------------------------------------------------------------

def _mlp(x, w1, b1, w2, b2):
    h = F.linear(x, w1, b1)
    h = torch.relu(h)
    return F.linear(h, w2, b2)


def _layer_norm(x, w, b):
    return F.layer_norm(x, (16,), w, b)


def _add_in_place(x, y):
    x.add_(y)
    return torch.relu(x) * 2




def _training_step(model, x, target):
    return F.mse_loss(model(x), target)


def _recomputed(x):
    return torch.sin(x * 2)  # the backward recomputes x * 2 rather than save it


def _programs_to_compile():
    block = _Block()
    return {
        "mlp": (_mlp, (torch.randn(4, 16), torch.randn(32, 16), torch.randn(32), torch.randn(8, 32),
                       torch.randn(8)), False),
        "layer_norm": (_layer_norm, (torch.randn(16, 16), torch.randn(16), torch.randn(16)), False),
        "in_place": (_add_in_place, (torch.randn(4), torch.randn(4)), False),
        "training_step": (lambda x, target: _training_step(block, x, target),
                          (torch.randn(3, 5, 16), torch.randn(3, 5, 16)), True),
    }


def _compile(fn, args, names: list[str], train: bool = False):
    """compile_program with these executors, through CompileOptions where the pipeline takes them."""
    try:
        from fusionlens.options import CompileOptions
    except ImportError:
        options = names
    else:
        options = CompileOptions(executors=tuple(names))
    with torch.set_grad_enabled(train):
        return pipeline.compile_program(fn, args, {}, options)


def _traces(compiled) -> list[dict[str, Trace]]:
    """Each program's traces (stage -> Trace), whichever shape Compiled has."""
    programs = getattr(compiled, "programs", None)
    if programs is not None:
        return [p.traces for p in programs]
    backward = getattr(compiled, "backward", None)
    return [compiled.traces] + ([backward.traces] if backward is not None else [])


def _groups(flat: Trace, fusers: list) -> list[fusion.FusionGroup]:
    nodes, make_group = fusion.clusters(flat, fusers)
    return [make_group(n, f"G{i}") for i, n in enumerate(nodes) if isinstance(n, fusion.Cluster)]


def _line(fn, text: str) -> int:
    """The line of `fn`'s source holding `text`: where its ops' provenance points."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _rejects(trace_or_group, stage=None, fusers=None) -> VerifyError:
    with pytest.raises(VerifyError) as info:
        if stage is None:
            verify_group(trace_or_group)
        else:
            verify(trace_or_group, stage, fusers)
    return info.value


def _names(e: VerifyError, fn, text: str) -> None:
    """The error names its op (as the trace prints it) and that op's user line."""
    assert e.op is not None and format_call(e.op)[:40] in str(e), str(e)
    assert e.where is not None and e.where.line == _line(fn, text), str(e)
    assert f"({HERE}:{_line(fn, text)})" in str(e), str(e)


# --- real programs -------------------------------------------------------------------------

@pytest.mark.parametrize("with_fuser", [True, False], ids=["testfuser", "torch-only"])
@pytest.mark.parametrize("name", list(_programs_to_compile()))
def test_real_programs_keep_every_rule_at_every_stage(name, with_fuser, fuser):
    fn, args, train = _programs_to_compile()[name]
    fusers = [fuser] if with_fuser else []
    compiled = _compile(fn, args, ["testfuser", "torch"] if with_fuser else ["torch"], train)
    programs = _traces(compiled)
    assert len(programs) == (2 if train else 1)
    groups = []
    for traces in programs:
        assert "fusion" in traces and "execution" in traces
        for stage, trace in traces.items():
            verify(trace, stage, fusers if stage == "fusion" else None)
        if with_fuser:
            groups += _groups(traces["fusion"], fusers)
    for group in groups:
        verify_group(group)
    assert bool(groups) == with_fuser  # the group rules ran on something
    if name in ("layer_norm", "training_step") and with_fuser:
        assert any(g.reduction_dims for g in groups)
    if name == "in_place":
        assert programs[0]["acquired"].writeback  # the write-back rule had one to check


def test_the_joint_trace_of_a_program_that_recomputes_is_in_ssa():
    compiled = _compile(_recomputed, (torch.randn(8, requires_grad=True),), ["torch"], train=True)
    for traces in _traces(compiled):
        for stage, trace in traces.items():
            verify(trace, stage)


def test_a_joint_trace_that_repeats_a_recomputed_op_is_rejected():
    """What autograd/transform._split once made: the backward's recomputed forward op again."""
    compiled = _compile(_recomputed, (torch.randn(8, requires_grad=True),), ["torch"], train=True)
    joint = next(t["joint"] for t in _traces(compiled) if "joint" in t)
    first = joint.bound_symbols[0]  # x * 2, which the backward recomputes
    broken = joint.with_("joint", list(joint.bound_symbols) + [first])
    e = _rejects(broken, "joint")
    assert "is defined twice" in e.message
    _names(e, _recomputed, "torch.sin(x * 2)")


# --- one rule at a time, broken by hand -------------------------------------------------------

def _mlp_stage(fuser, stage: str) -> Trace:
    """The MLP's trace at `stage`, compiled with `fuser` (the fixture registers it)."""
    fn, args, _ = _programs_to_compile()["mlp"]
    return _traces(_compile(fn, args, ["testfuser", "torch"]))[0][stage]


def _first(trace: Trace, sym: Symbol) -> int:
    return next(i for i, b in enumerate(trace.bound_symbols) if b.sym is sym)


def _at(trace: Trace, fn, text: str) -> int:
    """The first op made at the line of `fn` holding `text`."""
    line = _line(fn, text)
    return next(i for i, b in enumerate(trace.bound_symbols) if b.provenance and b.provenance.line == line)


def _reader(trace: Trace, value: Value) -> int:
    return next(i for i, b in enumerate(trace.bound_symbols) if value.name in {v.name for v in b.inputs()})


def test_a_value_read_before_it_is_defined(fuser):
    flat = _mlp_stage(fuser, "fusion")
    ops = list(flat.bound_symbols)
    i = _first(flat, prims.le)  # relu is le then where
    made = ops[i].outputs[0]
    j = _reader(flat, made)
    moved = ops[:i] + [ops[j]] + ops[i:j] + ops[j + 1:]  # the reader first
    e = _rejects(flat.with_("fusion", moved), "fusion")
    assert e.op is ops[j] and e.message == f"{made.name} is used before it is defined"
    _names(e, _mlp, "torch.relu(h)")

    dropped = ops[:i] + ops[i + 1:]  # the maker gone
    e = _rejects(flat.with_("fusion", dropped), "fusion")
    assert e.op is ops[j] and f"{made.name} is not defined" in e.message
    _names(e, _mlp, "torch.relu(h)")


def test_a_value_read_with_another_shape_than_it_was_made_with(fuser):
    flat = _mlp_stage(fuser, "fusion")
    ops = list(flat.bound_symbols)
    i = _first(flat, prims.where)
    v = ops[i].inputs()[-1]
    wrong = Value(v.name, (1,) + v.shape, v.dtype, v.device)
    ops[i] = ops[i].replace({v.name: wrong})
    e = _rejects(flat.with_("fusion", ops), "fusion")
    assert e.op is ops[i] and f"{v.name} is read as" in e.message
    _names(e, _mlp, "torch.relu(h)")


def test_a_decomposition_reads_only_its_op_arguments_and_makes_its_outputs(fuser):
    decomposed = _mlp_stage(fuser, "decomposed")
    ops = list(decomposed.bound_symbols)
    i = _at(decomposed, _mlp, "torch.relu(h)")
    relu = ops[i]
    outsider = decomposed.inputs[-1]  # b2: defined, but not an argument of relu
    first = relu.subsymbols[0]
    broken = dataclasses.replace(relu, subsymbols=[first.replace({first.inputs()[0].name: outsider})]
                                 + relu.subsymbols[1:])
    e = _rejects(decomposed.with_("decomposed", ops[:i] + [broken] + ops[i + 1:]), "decomposed")
    assert f"{outsider.name} is neither an argument of the op" in e.message
    assert e.op is broken.subsymbols[0] and f"inside {relu.sym.name} ({relu.outputs[0].name})" in e.message
    _names(e, _mlp, "torch.relu(h)")

    unfinished = dataclasses.replace(relu, subsymbols=relu.subsymbols[:-1])
    e = _rejects(decomposed.with_("decomposed", ops[:i] + [unfinished] + ops[i + 1:]), "decomposed")
    assert e.op is unfinished and "its decomposition does not make its output" in e.message
    _names(e, _mlp, "torch.relu(h)")


def test_a_name_is_defined_once(fuser):
    flat = _mlp_stage(fuser, "fusion")
    ops = list(flat.bound_symbols)
    i = _first(flat, prims.mul) if any(b.sym is prims.mul for b in ops) else len(ops) - 1
    twice = ops[:i + 1] + [dataclasses.replace(ops[i])] + ops[i + 1:]
    e = _rejects(flat.with_("fusion", twice), "fusion")
    assert e.op is twice[i + 1] and "is defined twice" in e.message

    relu = _at(flat, _mlp, "torch.relu(h)")
    x = flat.inputs[0]
    out = ops[relu].outputs[0]
    shadowing = ops[relu].replace({out.name: Value(x.name, out.shape, out.dtype, out.device)})
    e = _rejects(flat.with_("fusion", ops[:relu] + [shadowing] + ops[relu + 1:]), "fusion")
    assert e.message == f"{x.name} shadows the trace input of that name"
    _names(e, _mlp, "torch.relu(h)")


def test_a_decomposition_names_its_intermediates_afresh(fuser):
    decomposed = _mlp_stage(fuser, "decomposed")
    ops = list(decomposed.bound_symbols)
    i = _at(decomposed, _mlp, "torch.relu(h)")
    relu = ops[i]
    inner = next(s for s in relu.subsymbols if s.outputs[0].name not in {o.name for o in relu.outputs})
    taken = decomposed.inputs[-1].name  # b2
    renamed = relu.replace({inner.outputs[0].name: Value(taken, inner.outputs[0].shape, inner.outputs[0].dtype,
                                                         inner.outputs[0].device)})
    e = _rejects(decomposed.with_("decomposed", ops[:i] + [renamed] + ops[i + 1:]), "decomposed")
    assert f"{taken} is defined again" in e.message
    _names(e, _mlp, "torch.relu(h)")

    last = relu.subsymbols[-1]  # it makes relu's output: twice now
    twice = dataclasses.replace(relu, subsymbols=relu.subsymbols + [dataclasses.replace(last)])
    e = _rejects(decomposed.with_("decomposed", ops[:i] + [twice] + ops[i + 1:]), "decomposed")
    assert e.op is twice.subsymbols[-1] and f"{relu.outputs[0].name} is made twice by its decomposition" in e.message
    _names(e, _mlp, "torch.relu(h)")


def test_results_and_write_backs_are_defined(fuser):
    fn, args, _ = _programs_to_compile()["in_place"]
    flat = _traces(_compile(fn, args, ["testfuser", "torch"]))[0]["fusion"]
    (dst, src), = flat.writeback
    e = _rejects(dataclasses.replace(flat, bound_symbols=[], output=flat.inputs[1]), "fusion")  # no ops
    assert e.message == f"{dst.name} is written back from {src.name}, which no trace input or op defines"
    assert e.op is None and str(e) == f"verify (fusion): {e.message}"

    e = _rejects(dataclasses.replace(flat, writeback=[(Value("t999", src.shape, src.dtype, src.device), src)]),
                 "fusion")
    assert "which is not a trace input" in e.message
    assert e.op is not None and src.name in str(e)
    _names(e, _add_in_place, "x.add_(y)")

    e = _rejects(dataclasses.replace(flat, writeback=[(dst, src), (dst, src)]), "fusion")
    assert e.message == f"{dst.name} is written back twice"

    returned = Value("t999", src.shape, src.dtype, src.device)
    e = _rejects(dataclasses.replace(flat, output=returned), "fusion")
    assert e.message == f"{flat.name} returns t999, which no trace input or op defines"


def test_the_fusion_stage_holds_prims_and_ops_no_executor_fuses(fuser):
    optimised = _mlp_stage(fuser, "optimised")
    as_fusion = optimised.with_("fusion", list(optimised.bound_symbols))
    verify(as_fusion, "fusion")  # with no fusion executor, prepare leaves every op whole
    e = _rejects(as_fusion, "fusion", [fuser])
    assert "is left whole, but testfuser fuses its prims.le" in e.message
    assert e.op.sym.name == "torch.nn.functional.relu"
    _names(e, _mlp, "torch.relu(h)")

    flat = _mlp_stage(fuser, "fusion")
    region = next(b for b in _mlp_stage(fuser, "execution").bound_symbols if b.sym.kind is SymbolKind.REGION)
    ops = list(flat.bound_symbols)
    i = _at(flat, _mlp, "torch.relu(h)")
    lowered = ops[:i] + [region] + ops[i + 2:]  # the region call in place of relu's two prims
    e = _rejects(flat.with_("fusion", lowered), "fusion", [fuser])
    assert e.op is region and e.message == "a region call before lowering"
    _names(e, _mlp, "torch.relu(h)")


def test_the_execution_stage_holds_region_calls_and_torch_ops_it_can_name(fuser):
    execution = _mlp_stage(fuser, "execution")
    i, region = next((k, b) for k, b in enumerate(execution.bound_symbols) if b.sym.kind is SymbolKind.REGION)
    lost = dataclasses.replace(execution, extra_globals={k: v for k, v in execution.extra_globals.items()
                                                         if k != region.sym.name})
    e = _rejects(lost, "execution")
    assert e.op is region and "is not the program global of that name" in e.message
    _names(e, _mlp, "torch.relu(h)")

    stray = BoundSymbol(Symbol("mystery.op", torch.relu, kind="opaque"), (region.outputs[0],), {},
                        [Value("t999", region.outputs[0].shape, torch.float32, "cpu")],
                        provenance=region.provenance)
    ops = list(execution.bound_symbols)
    e = _rejects(execution.with_("execution", ops[:i + 1] + [stray] + ops[i + 1:]), "execution")
    assert e.op is stray and e.message == "the program cannot find mystery.op: mystery is no program global"
    _names(e, _mlp, "torch.relu(h)")


def test_a_trace_is_verified_as_the_stage_it_says(fuser):
    optimised = _mlp_stage(fuser, "optimised")
    e = _rejects(optimised, "fusion")
    assert "says it is at stage 'optimised'" in str(e)
    with pytest.raises(ValueError):
        verify(optimised, "no such stage")


# --- FusionGroup contract --------------------------------------------------------------------

def _norm_group(fuser) -> fusion.FusionGroup:
    fn, args, _ = _programs_to_compile()["layer_norm"]
    flat = _traces(_compile(fn, args, ["testfuser", "torch"]))[0]["fusion"]
    group, = _groups(flat, [fuser])
    verify_group(group)
    assert group.reduction_dims == (1,) and group.domain == (16, 16)
    return group


def _with_op(group, i: int, b: BoundSymbol, **changes) -> fusion.FusionGroup:
    return dataclasses.replace(group, bsyms=group.bsyms[:i] + [b] + group.bsyms[i + 1:], **changes)


def _index(group, pred) -> int:
    return next(i for i, b in enumerate(group.bsyms) if pred(b))


NORM_LINE = "F.layer_norm(x, (16,), w, b)"


def test_a_group_holds_only_the_prims_a_kernel_writes(fuser):
    group = _norm_group(fuser)
    i = _index(group, lambda b: b.sym is prims.sub)
    sub = group.bsyms[i]
    reshape = BoundSymbol(prims.reshape, (sub.args[0], group.domain), {}, sub.outputs, None, sub.provenance)
    e = _rejects(_with_op(group, i, reshape))
    assert e.op is reshape and "prims.reshape may not be in a fusion group" in e.message
    assert str(e).startswith(f"verify (group {group.id}): ")
    _names(e, _layer_norm, NORM_LINE)


def test_a_group_is_in_topological_order_and_its_inputs_and_outputs_match(fuser):
    group = _norm_group(fuser)
    ops = list(group.bsyms)
    swapped = dataclasses.replace(group, bsyms=[ops[1], ops[0]] + ops[2:])
    e = _rejects(swapped)
    assert e.op is ops[1] and "is read before the op that makes it (not in topological order)" in e.message
    _names(e, _layer_norm, NORM_LINE)

    e = _rejects(dataclasses.replace(group, inputs=group.inputs[1:]))
    assert e.op is ops[0] and f"{group.inputs[0].name} is read but is not an input of the group" in e.message
    _names(e, _layer_norm, NORM_LINE)

    extra = Value("t999", (16,), torch.float32, "cpu")
    e = _rejects(dataclasses.replace(group, inputs=group.inputs + [extra]))
    assert e.message == "the input t999 is read by no op of the group"

    e = _rejects(dataclasses.replace(group, outputs=group.outputs + [group.inputs[0]]))
    assert e.message == f"the output {group.inputs[0].name} is not made inside the group"


def test_every_value_of_a_group_has_its_domain_or_reduced_shape(fuser):
    group = _norm_group(fuser)
    i = _index(group, lambda b: b.sym is prims.rsqrt)
    rsqrt = group.bsyms[i]
    x, out = rsqrt.args[0], rsqrt.outputs[0]
    wrong = BoundSymbol(prims.rsqrt, (x,), {}, [Value(out.name, (2, 16), out.dtype, out.device)], None,
                        rsqrt.provenance)
    e = _rejects(_with_op(group, i, wrong))
    assert e.op is wrong
    assert e.message == f"{out.name} has shape [2, 16], not the domain [16, 16] or the reduced shape [16]"
    _names(e, _layer_norm, NORM_LINE)


def test_a_group_reduces_over_exactly_its_reduction_dims(fuser):
    group = _norm_group(fuser)
    i = _index(group, lambda b: b.sym is prims.var_mean)
    var_mean = group.bsyms[i]
    x = var_mean.args[0]
    other = BoundSymbol(prims.var_mean, (x, (0,), 0), {}, var_mean.outputs, var_mean.out_spec, var_mean.provenance)
    e = _rejects(_with_op(group, i, other))
    assert e.op is other and e.message == "it reduces over dims [0], not the group's reduction_dims [1]"
    _names(e, _layer_norm, NORM_LINE)

    e = _rejects(dataclasses.replace(group, reduction_dims=()))
    assert "not the group's reduction_dims []" in e.message

    # the reduced value goes back to the domain along the kept dims only (the square domain
    # lets it go along the reduced one too, shapes alone would not tell)
    mean = var_mean.outputs[1]
    j = _index(group, lambda b: b.sym is prims.broadcast_in_dim and b.args[0].name == mean.name)
    back = group.bsyms[j]
    out = back.outputs[0]
    sideways = BoundSymbol(prims.broadcast_in_dim, (mean, (16, 16), (1,)), {},
                           [Value(out.name, (16, 16), out.dtype, out.device)], None, back.provenance)
    e = _rejects(_with_op(group, j, sideways))
    assert e.op is sideways
    assert e.message == f"the reduced value {mean.name} is broadcast along dims [1], not the kept dims [0]"
    _names(e, _layer_norm, NORM_LINE)


# --- asynchronous work: a collective issued, waited for once, before its first use ------------

def _issued(x, y):
    return x + y  # the line the hand-made collectives below are recorded at


def _collective_trace(order: str) -> Trace:
    """x -> funcol all_reduce (issue: pending t1) -> wait (t2) -> t2 + y, the ops in `order`
    ('i' issue, 'w' wait, 'u' the use of the result, 'p' a use of the pending value itself,
    'W' a second wait, 'n' an op reading neither, 'v' a wait of the input x), made by hand from
    the real collective symbols."""
    from fusionlens.distributed import symbols
    from fusionlens.distributed.vocabulary import Group
    from fusionlens.ir.provenance import Provenance

    line = _line(_issued, "x + y")
    where = Provenance(__file__, line, line, 0, 0)
    x, y = (Value(n, (4,), torch.float32, "cpu", "input") for n in ("x", "y"))
    pending, ready, used, misused, again = (Value(n, (4,), torch.float32, "cpu") for n in ("t1", "t2", "t3", "t4",
                                                                                             "t5"))
    ops = {"i": BoundSymbol(symbols.ALL_REDUCE, (x, Group("0", (0,))), {}, [pending], None, where),
           "w": BoundSymbol(symbols.WAIT, (pending,), {}, [ready], None, where),
           "W": BoundSymbol(symbols.WAIT, (pending,), {}, [again], None, where),
           "u": BoundSymbol(prims.add, (ready, y), {}, [used], None, where),
           "p": BoundSymbol(prims.add, (pending, y), {}, [misused], None, where),
           "n": BoundSymbol(prims.add, (x, y), {}, [used], None, where),  # reads neither
           "v": BoundSymbol(symbols.WAIT, (x,), {}, [ready], None, where)}  # waits for an input
    out = used if "u" in order or "n" in order else ready
    return Trace("collective", [x, y], [ops[k] for k in order], out)


def test_a_collective_issued_and_waited_for_once_before_its_use_passes():
    verify(_collective_trace("iwu"), "acquired")


@pytest.mark.parametrize("order, message", [
    ("in", "is never waited for"),  # the wait dropped
    ("iwWu", "waited for twice"),
    ("ipwu", "only its wait may read it"),  # the pending value read before its wait
    ("iwpu", "only its wait may read it"),  # ... or after it: the wait's result is what is read
    ("vu", "which no issue made pending"),  # a wait of what no issue made
])
def test_a_collective_not_waited_for_exactly_once_before_its_use_is_rejected(order, message):
    e = _rejects(_collective_trace(order), "acquired")
    assert message in e.message, e.message
    assert e.where is not None and e.where.line == _line(_issued, "x + y")


def test_a_trace_returning_a_pending_value_is_rejected():
    trace = _collective_trace("iw")
    e = _rejects(Trace(trace.name, trace.inputs, trace.bound_symbols, trace.bound_symbols[0].outputs[0]), "acquired")
    assert "returns the pending t1" in e.message
