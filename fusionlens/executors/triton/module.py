"""The generated module: header comments, the helpers it uses, the kernel and its launcher
(one stride signature), and the exec of such a module, once per distinct source."""

from __future__ import annotations

import collections
import itertools
import linecache
import math
import os
import threading
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

from fusionlens.middle.contract import FusionGroup
from fusionlens.executors import symbolic
from fusionlens.ir.sizes import contiguous_strides
from fusionlens.middle.reinplace import IN_PLACE_SCATTERS, STRIDED_SCATTER_

from . import tuning
from .analysis import _Analysis, _ident
from .emitter import HELPER_DEPS, HELPERS, _type_str
from .pointwise import PointwiseWriter
from .reduction import ReductionWriter
from .two_axis import TwoAxisWriter
from .sizes import pattern_strides
from .support import PTR_TYPE
from .writer import INDEX_LIMIT

# the order helpers appear in a module
_HELPER_ORDER = ("_fl_expm1", "_fl_log1p", "_fl_tanh", "_fl_round", "_fl_trunc", "_fl_bf16", "_fl_imod", "_fl_mul",
                 "_fl_max", "_fl_min", "_fl_welford", "_fl_online")


@dataclass
class KernelSpec:
    """What an ahead-of-time compile of one kernel needs (triton.compile with ASTSource)."""

    name: str
    signature: dict[str, str]  # arg name -> "*fp32" | "constexpr" ...
    constexprs: dict[str, int]  # arg name -> value
    num_warps: int
    num_stages: int = 1
    grid: list[int] = field(default_factory=list)  # programs along each grid axis, at the example's sizes
    hints: dict[str, int] = field(default_factory=dict)  # integer arguments' example values (aot: divisibility)
    bytes_read: int = 0  # bytes the kernel reads, an input read in two passes counted twice
    min_read: int = 0  # bytes the region must read: each input once
    passes: int = 1  # passes over the region's largest input
    row_bytes: int = 0  # a reduction's row of its largest input, in bytes (0: pointwise)
    autotune: list[int] = field(default_factory=list)  # the num_warps a GPU launch times (tuning.autotune_warps)


def _region_ident(rid: str) -> str:
    return "fl_" + _ident(str(rid)).removeprefix("v_")


def variant_strides(an: _Analysis, key: list[tuple]) -> list[tuple]:
    """The strides a variant key stands for: a static group's key is its strides; a symbolic
    group's is a stride pattern per input (sizes.py), read as expressions of the sizes."""
    if an.env is None:
        return [tuple(k) for k in key]
    return [pattern_strides(an.shape(v), tuple(k), _ident(v.name)) for v, k in zip(an.inputs, key)]


def _nbytes(an: _Analysis, v) -> int:
    return math.prod(int(an.hint(d)) for d in an.shape(v)) * v.dtype.itemsize


def _reads(an: _Analysis, em, extra: int = 0) -> tuple[int, int]:
    """(bytes a kernel reads, passes over its largest input) from the loads its emitter wrote:
    an input loaded in two loops (two passes over each row) is read twice."""
    scopes: dict[str, set[int]] = {}
    for scope, name in em.loads:
        scopes.setdefault(name, set()).add(scope)
    read = extra + sum(len(scopes.get(v.name, ())) * _nbytes(an, v) for v in an.inputs)
    largest = max(an.inputs, key=lambda v: _nbytes(an, v), default=None)
    return read, max(1, len(scopes.get(largest.name, ()))) if largest is not None else 1


def _kernel_lines(name: str, args: list[str], consts: list[str], lines: list[str]) -> list[str]:
    return (["@triton.jit", f"def {name}({', '.join(args + [c + ': tl.constexpr' for c in consts])}):"]
            + lines + ["", ""])


def build_source(group: FusionGroup, an: _Analysis, key: list[tuple]) -> tuple[str, str, str, list[KernelSpec]]:
    """(source, kernel name, launcher name, a KernelSpec a kernel) of the variant for `key`
    (runtime.py); a split reduction has two kernels (reduction.py)."""
    rid = _region_ident(group.id)
    strides = variant_strides(an, key)
    w = (TwoAxisWriter if an.cdims else ReductionWriter if an.is_reduction else PointwiseWriter)(an, strides, rid)
    lines, helpers, runs = w.write()
    combine = w.combine_kernel() if isinstance(w, ReductionWriter) and w.has_combine() else None
    if combine is not None:
        helpers = helpers | combine[1]
    for h in list(helpers):
        helpers.update(HELPER_DEPS.get(h, []))
    kname = f"{rid}_kernel"
    lname = f"{rid}_launch"
    args = w._signature()
    const_names = list(w.constexprs) + (["INDEX_64"] if w.symbolic else [])
    out = [f"# FusionLens · Triton code for region {group.id}", w.kind_comment()]
    if group.source_lines:
        out.append("# from:")
        for s in group.source_lines:
            out.append(f"#   {s}")
    out.append("# inputs: " + "; ".join(f"{v.name}: {_type_str(v)} strides {tuple(st)}"
                                        for v, st in zip(an.inputs, strides)))
    out.append("# outputs: " + "; ".join(f"{o.name}: {_type_str(o)}" for o in an.outputs))
    if w.sizes.args:  # a symbolic group's: the launcher computes them at each call
        out.append("# size arguments: " + ", ".join(n if e.is_Symbol else f"{n} = {e}"
                                                     for e, n in w.sizes.names.items()))
    out += ["import torch", "import triton", "import triton.language as tl", "", ""]
    for h in _HELPER_ORDER:
        if h in helpers:
            out += HELPERS[h].rstrip("\n").split("\n") + ["", ""]
    out += _kernel_lines(kname, args, const_names, lines)
    if combine is not None:
        assert isinstance(w, ReductionWriter)
        out += _kernel_lines(f"{rid}_combine", args, list(w.constexprs2), combine[0])
    out += _launcher(w, an, kname, lname)
    source = "\n".join(out) + "\n"
    sig: dict[str, str] = {}
    for v, a in zip(an.inputs, args):
        sig[a] = PTR_TYPE[v.dtype]
    for k, o in enumerate(an.outputs):
        sig[f"out{k}_ptr"] = PTR_TYPE[o.dtype]
    for p, dt in w.partials():
        sig[p] = PTR_TYPE[dt]
    sig.update(w.sizes.signature())
    hints = {n: int(w.sizes.hint(e)) for e, n in w.sizes.names.items() if n not in w.sizes.floats}
    min_read = sum(_nbytes(an, v) for v in an.inputs)
    largest = max(an.inputs, key=lambda v: _nbytes(an, v), default=None)
    row_bytes = int(an.hint(an.ncols)) * largest.dtype.itemsize if an.is_reduction and largest is not None else 0
    read, passes = _reads(an, w.em)
    constexprs = dict(w.constexprs) | ({"INDEX_64": False} if w.symbolic else {})
    specs = [KernelSpec(kname, sig | {c: "constexpr" for c in const_names}, constexprs, w.warps, w.stages,
                        list(w.grid_size), hints, read, min_read, passes, row_bytes, tuning.autotune_warps(w.warps))]
    if combine is not None:
        assert isinstance(w, ReductionWriter)
        part_bytes = math.prod(w.partial_shape) * 4 * len(w.partials())
        read2, _ = _reads(an, w.em2, part_bytes)
        specs.append(KernelSpec(f"{rid}_combine", sig | {c: "constexpr" for c in w.constexprs2}, dict(w.constexprs2),
                                w.warps2, 1, list(w.grid2_size), hints, read2, min_read, 1, 0,
                                [w.warps2]))
    return source, kname, lname, specs


def _launcher(w, an: _Analysis, kname: str, lname: str) -> list[str]:
    """The launcher: it takes the region's inputs, allocates the outputs and launches the
    kernel; for a symbolic group it first computes every size argument from the inputs."""
    on_device = [v for v in an.inputs if v.name not in an.host_scalars]
    dev = f"{_ident(on_device[0].name)}.device" if on_device else "torch.device('cuda')"
    largs = [_ident(v.name) for v in an.inputs]
    out = [f"def {lname}({', '.join(largs)}, num_warps={w.warps}):"]
    if on_device:  # Triton launches on the current GPU: make it the inputs' one
        out += [f"    if {dev}.type == 'cuda' and {dev}.index != torch.cuda.current_device():",
                f"        with torch.cuda.device({dev}):",
                f"            return {lname}({', '.join(largs)}, num_warps=num_warps)"]
    for v in an.inputs:
        if v.name in an.host_scalars:  # a 0-dim CPU tensor read as a scalar (eager's rule)
            out.append(f"    {_ident(v.name)} = {_ident(v.name)}.to({dev})")
    consts = ", ".join(f"{c}={v}" for c, v in w.constexprs.items())
    if w.symbolic:
        from fusionlens.ir import symbols  # sympy: only a dynamic program's regions'
        shapes = [symbolic.dims(o.shape) for o in an.outputs]
        worst = w.worst_offsets()
        out += w.sizes.launcher_lines([d for s in shapes for d in s] + worst)
        far = ", ".join(symbols.source(x) for x in worst)  # the largest offset the kernel may form
        out.append(f"    index_64 = {far if len(worst) == 1 else f'max({far})'} >= {INDEX_LIMIT}")
        consts += ", INDEX_64=index_64"
    in_place = []  # (out{k}, its base) of in-place scatters
    for k, o in enumerate(an.outputs):
        if o.name in an.scatters:  # a new base: the kernel stores the window into a copy (pointwise.py)
            base = _ident(an.scatters[o.name].args[0].name)
            copy = f"{base}.clone(memory_format=torch.contiguous_format)"
            if an.scatters[o.name].sym in IN_PLACE_SCATTERS:
                out += _in_place_lines(an, k, o, base, copy)
                in_place.append((f"out{k}", base))
                continue
            out.append(f"    out{k} = {copy}  # {o.name}")
            continue
        if w.symbolic:
            shape = symbols.source(symbolic.dims(o.shape))
            out.append(f"    out{k} = torch.empty({shape}, dtype={o.dtype}, device={dev})  # {o.name}")
        else:  # constant shape and strides: the cheapest allocation torch has (benchmarks/RESULTS.md)
            out.append(f"    out{k} = {_empty(o.shape, o.dtype, dev)}  # {o.name}")
    parts = w.partials()
    for p, dt in parts:  # partial results: a split reduction's [split, rows], a two-axis [programs, columns]
        out.append(f"    {p[:-4]} = {_empty(w.partial_shape, dt, dev)}")
    call_args = ", ".join(largs + [f"out{k}" for k in range(len(an.outputs))] + [p[:-4] for p, _ in parts]
                          + w.sizes.args)
    stages = f", num_stages={w.stages}" if w.stages != 1 else ""
    out.append(f"    {kname}[{w.grid}]({call_args}, {consts}, num_warps=num_warps{stages})")
    if parts:
        consts2 = ", ".join(f"{c}={v}" for c, v in w.constexprs2.items())
        out.append(f"    {kname.removesuffix('_kernel')}_combine[{w.grid2}]({call_args}, {consts2}, "
                   f"num_warps={w.warps2})")
    for var, base in in_place:  # stored into a copy after all: copied in (the caller's tensor is the result)
        out += [f"    if {var} is not {base}:", f"        {var} = {base}.copy_({var})"]
    ret = ", ".join(f"out{k}" for k in range(len(an.outputs)))
    out.append(f"    return ({ret},)" if len(an.outputs) == 1 else f"    return ({ret})")
    return out


def _in_place_lines(an: _Analysis, k: int, o, base: str, copy: str) -> list[str]:
    """out{k} of an in-place scatter: the base itself, so the kernel stores only the window
    into its addresses, where that cannot race: the base is contiguous (the kernel addresses it
    by row-major numbers), no other op of the region reads it, and no other input shares its
    memory (a view of it made before the region: checked at each call) unless that input is
    the window itself, read element for element by the lane that stores it (`out[:, :n] += y`).
    Else a copy, copied in."""
    scatter = an.scatters[o.name]
    name = scatter.args[0].name
    if any(v.name == name for b in an.group.bsyms for v in (b.inputs() if b is not scatter else b.inputs()[1:])):
        return [f"    out{k} = {copy}  # {o.name}: the region reads {base} too"]
    shared = [_shares(v, base, scatter) for v in an.inputs if v.name != name]
    lines = [f"    out{k} = {base}  # {o.name}: the window stored into {base} itself (in place)"]
    if not shared:
        return lines + [f"    if not {base}.is_contiguous():", f"        out{k} = {copy}"]
    tests = [f"            {c} or" for c in shared[:-1]] + [f"            {shared[-1]}):"]
    return lines + [f"    if not {base}.is_contiguous() or ("] + tests + [f"        out{k} = {copy}"]


def _shares(v, base: str, scatter) -> str:
    """The launcher's test that input `v` shares the base's memory other than as the very window
    a strided scatter stores (same dtype, first element, strides and shape as the domain's)."""
    x = _ident(v.name)
    test = f"{x}.untyped_storage().data_ptr() == {base}.untyped_storage().data_ptr()"
    src = scatter.args[1] if scatter.sym is STRIDED_SCATTER_ else None
    if src is None or tuple(v.shape) != tuple(src.shape):
        return test
    offset, strides = scatter.args[2], tuple(scatter.args[3])
    window = f"{x}.dtype == {base}.dtype and {x}.stride() == {strides!r} and " \
             f"{x}.data_ptr() == {base}.data_ptr() + {offset} * {base}.element_size()"
    return f"{test} and not ({window})"


def _empty(shape, dtype, dev: str) -> str:
    """A new contiguous tensor of a static shape, its own storage (outputs are independent tensors
    to the user: one block sliced into all would share a storage, seen by torch.save and resize_)."""
    shape = tuple(int(d) for d in shape)
    return f"torch.empty_strided({shape!r}, {contiguous_strides(shape)!r}, dtype={dtype}, device={dev})"


def all_outputs_empty(group: FusionGroup) -> bool:
    """Every output has no elements: nothing to compute, so no kernel (and nothing for a prim's
    dtype rules to reject: softmax of an empty bool tensor is an empty bool tensor in eager)."""
    return bool(group.outputs) and all(any(isinstance(d, int) and d == 0 for d in symbolic.dims(o.shape))
                                       for o in group.outputs)


def build_empty_source(group: FusionGroup) -> tuple[str, str]:
    """(source, launcher name) of a region whose outputs are all empty: a launcher that makes them."""
    lname = f"{_region_ident(group.id)}_launch"
    out = [f"# FusionLens · Triton code for region {group.id}",
           "# every output is empty (a zero-size dimension): no kernel, the launcher makes them"]
    out += [f"#   {s}" for s in (["from:"] if group.source_lines else []) + group.source_lines]
    out.append("# inputs: " + "; ".join(f"{v.name}: {_type_str(v)}" for v in group.inputs))
    out.append("# outputs: " + "; ".join(f"{o.name}: {_type_str(o)}" for o in group.outputs))
    out += ["import torch", "", ""]
    largs = [_ident(v.name) for v in group.inputs]
    dev = f"{largs[0]}.device" if largs else repr(str(group.outputs[0].device))
    out.append(f"def {lname}({', '.join(largs)}):")
    shapes = [repr(tuple(o.shape)) for o in group.outputs]
    if any(symbolic.is_symbolic(o.shape) for o in group.outputs):  # an empty dim beside a symbol's
        from fusionlens.ir import symbols

        dims = [symbolic.dims(o.shape) for o in group.outputs]
        binding = symbolic.bind(group.inputs, symbolic.free_symbols([d for s in dims for d in s]))
        out += symbolic.binding_lines(binding, largs)
        shapes = [symbols.source(s) for s in dims]
    for k, (o, shape) in enumerate(zip(group.outputs, shapes)):
        out.append(f"    out{k} = torch.empty({shape}, dtype={o.dtype}, device={dev})  # {o.name}")
    ret = ", ".join(f"out{k}" for k in range(len(group.outputs)))
    out.append(f"    return ({ret},)" if len(group.outputs) == 1 else f"    return ({ret})")
    return "\n".join(out) + "\n", lname


_module_ids = itertools.count()
# (source, interpreted?) -> namespace, least recently loaded first: identical regions share
# compiled kernels. Bounded: each namespace holds a kernel's compiled binaries, and a process
# that compiles many programs (the language server's worker, a sweep) must not keep every one.
# 1024 distinct sources is several times a large model's forward and backward (a 12-layer
# GPT's are under 200); past it the least recently loaded is dropped, which costs only a
# later identical region its exec and JIT: a program already loaded keeps its own kernels.
MAX_MODULES = 1024
_MODULES: collections.OrderedDict[tuple[str, bool], dict[str, Any]] = collections.OrderedDict()
_MODULES_LOCK = threading.Lock()


def load_source(source: str, launcher: str, label: str) -> Callable:
    """Exec a generated module once per distinct source; returns the object named `launcher`
    (or a kernel). The source is registered with linecache so tracebacks and Triton (which
    reads the kernel's source) see it."""
    key = (source, os.environ.get("TRITON_INTERPRET") == "1")
    with _MODULES_LOCK:
        namespace = _MODULES.get(key)
        if namespace is None:
            namespace = _MODULES[key] = _exec_source(source, label)
            while len(_MODULES) > MAX_MODULES:
                _MODULES.popitem(last=False)
        _MODULES.move_to_end(key)
    return namespace[launcher]


def _exec_source(source: str, label: str) -> dict[str, Any]:
    import triton  # noqa: F401  (imported here: TRITON_INTERPRET must be set before this)

    filename = f"<fusionlens-triton {label} #{next(_module_ids)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": f"fusionlens_triton_{label}", "__file__": filename}
    exec(compile(source, filename, "exec"), namespace)
    return namespace
