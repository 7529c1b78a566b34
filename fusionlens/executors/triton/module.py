"""The generated module: header comments, the helpers it uses, the kernel and its launcher
(one stride signature), and the exec of such a module, once per distinct source."""

from __future__ import annotations

import itertools
import linecache
import os
import threading
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from fusionlens.middle.contract import FusionGroup
from fusionlens.executors import symbolic

from .analysis import _Analysis, _ident
from .emitter import HELPER_DEPS, HELPERS, _type_str
from .pointwise import PointwiseWriter
from .reduction import ReductionWriter
from .sizes import pattern_strides
from .support import PTR_TYPE
from .writer import INDEX_LIMIT

# the order helpers appear in a module
_HELPER_ORDER = ("_fl_expm1", "_fl_log1p", "_fl_tanh", "_fl_round", "_fl_trunc", "_fl_bf16", "_fl_imod", "_fl_mul",
                 "_fl_max", "_fl_min")


@dataclass
class KernelSpec:
    """What an ahead-of-time compile of one kernel needs (triton.compile with ASTSource)."""

    name: str
    signature: dict[str, str]  # arg name -> "*fp32" | "constexpr" ...
    constexprs: dict[str, int]  # arg name -> value
    num_warps: int


def _region_ident(rid: str) -> str:
    return "fl_" + _ident(str(rid)).removeprefix("v_")


def variant_strides(an: _Analysis, key: list[tuple]) -> list[tuple]:
    """The strides a variant key stands for: a static group's key is its strides; a symbolic
    group's is a stride pattern per input (sizes.py), read as expressions of the sizes."""
    if an.env is None:
        return [tuple(k) for k in key]
    return [pattern_strides(an.shape(v), tuple(k), _ident(v.name)) for v, k in zip(an.inputs, key)]


def build_source(group: FusionGroup, an: _Analysis, key: list[tuple]) -> tuple[str, str, str, KernelSpec]:
    """(source, kernel name, launcher name, KernelSpec) of the variant for `key` (runtime.py)."""
    rid = _region_ident(group.id)
    strides = variant_strides(an, key)
    w = (ReductionWriter if an.is_reduction else PointwiseWriter)(an, strides, rid)
    lines, helpers, runs = w.write()
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
    out.append("@triton.jit")
    out.append(f"def {kname}({', '.join(args + [c + ': tl.constexpr' for c in const_names])}):")
    out += lines
    out += ["", ""]
    out += _launcher(w, an, kname, lname)
    source = "\n".join(out) + "\n"
    sig: dict[str, str] = {}
    for v, a in zip(an.inputs, args):
        sig[a] = PTR_TYPE[v.dtype]
    for k, o in enumerate(an.outputs):
        sig[f"out{k}_ptr"] = PTR_TYPE[o.dtype]
    sig.update(w.sizes.signature())
    for c in const_names:
        sig[c] = "constexpr"
    constexprs = dict(w.constexprs) | ({"INDEX_64": False} if w.symbolic else {})
    spec = KernelSpec(kname, sig, constexprs, w.warps)
    return source, kname, lname, spec


def _launcher(w, an: _Analysis, kname: str, lname: str) -> list[str]:
    """The launcher: it takes the region's inputs, allocates the outputs and launches the
    kernel; for a symbolic group it first computes every size argument from the inputs."""
    dev = f"{_ident(an.inputs[0].name)}.device" if an.inputs else "torch.device('cuda')"
    largs = [_ident(v.name) for v in an.inputs]
    out = [f"def {lname}({', '.join(largs)}):"]
    consts = ", ".join(f"{c}={v}" for c, v in w.constexprs.items())
    if w.symbolic:
        from fusionlens.ir import symbols  # sympy: only a dynamic program's regions'
        shapes = [symbolic.dims(o.shape) for o in an.outputs]
        worst = w.worst_offsets()
        out += w.sizes.launcher_lines([d for s in shapes for d in s] + worst)
        far = ", ".join(symbols.source(x) for x in worst)  # the largest offset the kernel may form
        out.append(f"    index_64 = {far if len(worst) == 1 else f'max({far})'} >= {INDEX_LIMIT}")
        consts += ", INDEX_64=index_64"
    for k, o in enumerate(an.outputs):
        shape = symbols.source(symbolic.dims(o.shape)) if w.symbolic else repr(tuple(o.shape))
        out.append(f"    out{k} = torch.empty({shape}, dtype={o.dtype}, device={dev})  # {o.name}")
    call_args = ", ".join(largs + [f"out{k}" for k in range(len(an.outputs))] + w.sizes.args)
    out.append(f"    {kname}[{w.grid}]({call_args}, {consts}, num_warps={w.warps})")
    ret = ", ".join(f"out{k}" for k in range(len(an.outputs)))
    out.append(f"    return ({ret},)" if len(an.outputs) == 1 else f"    return ({ret})")
    return out


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
# (source, interpreted?) -> namespace: identical regions share compiled kernels
_MODULES: dict[tuple[str, bool], dict[str, Any]] = {}
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
    return namespace[launcher]


def _exec_source(source: str, label: str) -> dict[str, Any]:
    import triton  # noqa: F401  (imported here: TRITON_INTERPRET must be set before this)

    filename = f"<fusionlens-triton {label} #{next(_module_ids)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": f"fusionlens_triton_{label}", "__file__": filename}
    exec(compile(source, filename, "exec"), namespace)
    return namespace
