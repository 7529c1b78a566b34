"""The nvFuser executor: a FusionGroup becomes an nvFuser FusionDefinition, run by fd.execute.

For each fusion region this module writes the FusionDefinition as readable Python source
against nvFuser's public Python API, and, where nvFuser really imports and the device is
CUDA, executes that source to build the definition and runs it with `fd.execute(inputs)`.
Definitions are built once per input signature (dtypes, ranks, size-1 dims, contiguity and
stride order of every input) and cached.

Where nvFuser is missing, `available()` says exactly why (the fusion pass then gives the
work to the next executor), `generate()` still returns the definition source (so a report
can show what would run) and `definition_source(group)` works without nvFuser. The returned
`Generated` says in so many words whether nvFuser ran: `nvfuser_ran` is True only after the
real package's `fd.execute` has returned; `backend` names what `fn` runs on.

Two Python APIs are supported:

- `nvfuser_direct` (nvFuser >= 0.2.34, preferred): `nvfuser_direct.FusionDefinition` is a
  context manager over a Fusion; `fd.execute(inputs)` builds `fd.fec`, a
  FusionExecutorCache, whose `get_cuda_kernel(inputs)` and `get_most_recent_scheduled_ir()`
  give the generated CUDA and the scheduled IR.
- `nvfuser` (the older frontend): `nvfuser.FusionDefinition` (a `_C._FusionDefinition`)
  with `fd.last_cuda_code()` and `fd.last_scheduled_fusion_ir()`.

Both export `FusionDefinition` and `DataType` at the top level and share the calls used
here: `fd.define_tensor(shape=, contiguity=, dtype=, is_cpu=, stride_order=)`,
`fd.define_scalar(value, dtype=)`, `fd.ops.<op>(...)`, `fd.add_output(t)`. Reductions,
var_mean and the keepdim flag are passed positionally because the keywords changed between
versions (`axes`/`dims`; `keep_dim` in early nvfuser_direct, `keepdim` elsewhere).

Where nvFuser is really there, `generate` compiles the region once on contiguous example
inputs, so the report gets the CUDA and the scheduler, and a definition nvFuser rejects is
declined (Decline) rather than failing later. An input signature nvFuser fails on at run
time runs the group's prims through torch, and `Generated` records it.

The scheduler name comes from the generated kernels' names (`nvfuser_<scheduler>_f0_c1_r0_g0`,
as nvFuser's own tests show); the kernel count is the number of `__global__` functions.

Files read to write this mapping (NVIDIA/Fuser and Lightning-AI/lightning-thunder, read
through a code index; nothing copied):

- NVIDIA/Fuser python/nvfuser_direct/__init__.py (FusionDefinition, execute, fec)
- NVIDIA/Fuser python/python_direct/ops.cpp (op names and argument orders: unary/binary
  ops, where, cast(arg, dtype), broadcast_in_dim(arg, shape, broadcast_dims) with strictly
  increasing broadcast_dims, sum/max/min/prod(arg, dims, keepdim, dtype),
  var_mean(arg, dims, correction=1, keepdim=False) -> (var, mean))
- NVIDIA/Fuser python/python_direct/runtime.cpp (FusionExecutorCache.get_cuda_kernel,
  get_most_recent_scheduled_ir) and bindDefineTensor in python/python_direct
  (define_tensor(shape, contiguity, dtype=Float, is_cpu=False, stride_order=[]); a None
  contiguity on a non-size-1 dim makes an expanded broadcast)
- NVIDIA/Fuser python/nvfuser/__init__.py and python/python_frontend/python_bindings.cpp
  (the older frontend: last_cuda_code, last_scheduled_fusion_ir, define_tensor, define_scalar,
  computeTensorDescriptor: the contiguity / stride_order convention re-implemented below)
- NVIDIA/Fuser tests/python/direct/test_python_frontend.py, test_repro.py (the written form
  of definitions: define_tensor(shape=[-1, 1, -1], contiguity=[True, None, True], ...),
  define_scalar(1e-05, dtype=DataType.Double), var_mean(T, dims=[2], correction=0, ...))
- NVIDIA/Fuser runtime/helpers.cu (remainder takes the sign of the divisor, like torch) and
  csrc/type.cpp (round is nearbyint: halves to even, like torch)
- Lightning-AI/lightning-thunder thunder/executors/nvfuserex_impl.py (prim -> fd.ops mapping,
  size-1 dims defined as broadcast (1) and others symbolic (-1), contiguity None for
  broadcast dims, no low-precision sums, no 0-dim var_mean)
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import keyword
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from compiler.fusion import Decline, FusionGroup
from compiler.ir import Value, display_path, dtype_name, ops_callable

NOT_INSTALLED = "nvFuser is not installed (no module nvfuser_direct or nvfuser)"
REFERENCE_LABEL = "tests/nvfuser_reference.py (a torch re-implementation for tests; not nvFuser)"

# torch dtype -> nvFuser DataType member
DTYPES = {
    torch.float64: "Double", torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Int", torch.int32: "Int32", torch.bool: "Bool",
}
_SHORT = {torch.float64: "f64", torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
          torch.int64: "i64", torch.int32: "i32", torch.bool: "b8"}
_LOW_PRECISION = (torch.float16, torch.bfloat16)

# prim name -> fd.ops name
UNARY = {n: n for n in ("abs", "neg", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt",
                         "sin", "cos", "tan", "tanh", "sigmoid", "erf", "floor", "ceil", "round", "trunc",
                         "sign", "reciprocal", "logical_not", "bitwise_not", "isnan")}
# unary ops that compute in floating point (torch gives float32 for integer inputs)
FLOAT_UNARY = {"exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
               "sigmoid", "erf", "reciprocal"}
ROUNDING = {"floor", "ceil", "round", "trunc"}
BINARY = {n: n for n in ("add", "sub", "mul", "div", "pow", "remainder", "maximum", "minimum", "eq", "ne",
                         "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor")}
COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}
BITWISE = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"}
REDUCTIONS = {"sum": "sum", "amax": "max", "amin": "min", "prod": "prod"}
OTHERS = {"where", "convert_element_type", "broadcast_in_dim", "var_mean"}


# --- which nvFuser is here ------------------------------------------------------------------

@dataclass
class Backend:
    module: Any
    api: str  # "nvfuser_direct" or "nvfuser": which import line and runtime calls to use
    version: str = ""
    reference: bool = False  # the test reference implementation, not nvFuser

    @property
    def label(self) -> str:
        if self.reference:
            return REFERENCE_LABEL
        return f"{self.api} {self.version}".strip()


_loaded: Optional[tuple] = None  # (Backend or None, reason)
_override: Optional[Backend] = None  # test-only: see use_backend


def _version(module) -> str:
    for attr in ("__version__",):
        v = getattr(module, attr, None)
        if v:
            return str(v)
    fn = getattr(module, "version", None)
    try:
        return str(fn()) if callable(fn) else ""
    except Exception:  # noqa: BLE001 - a version is only informative
        return ""


def load_backend() -> tuple:
    """(Backend, "") when an nvFuser Python package imports; else (None, exactly why not)."""
    global _loaded
    if _loaded is not None:
        return _loaded
    errors = []
    for api in ("nvfuser_direct", "nvfuser"):
        try:
            module = importlib.import_module(api)
        except ModuleNotFoundError as e:
            if e.name == api:
                errors.append(None)  # not installed
            else:
                errors.append(f"importing {api} failed: ModuleNotFoundError: {e}")
            continue
        except Exception as e:  # noqa: BLE001 - ImportError, OSError (a missing libnvrtc), ...
            errors.append(f"importing {api} failed: {type(e).__name__}: {e}")
            continue
        if not hasattr(module, "FusionDefinition") or not hasattr(module, "DataType"):
            errors.append(f"{api} imported but has no FusionDefinition/DataType")
            continue
        _loaded = (Backend(module, api, _version(module)), "")
        return _loaded
    real = [e for e in errors if e]
    _loaded = (None, "; ".join(real) if real else NOT_INSTALLED)
    return _loaded


@contextlib.contextmanager
def use_backend(module, api: str = "nvfuser_direct", reference: bool = True):
    """Test-only hook: make the executor treat `module` as the nvFuser package.

    With the reference implementation (tests/nvfuser_reference.py) the executor is available
    on any device and runs definitions through it; every Generated says so (`backend`,
    `note`), and `nvfuser_ran` stays False.
    """
    global _override
    previous = _override
    _override = Backend(module, api, _version(module), reference=reference)
    try:
        yield _override
    finally:
        _override = previous


def _find_spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def installed_api() -> Optional[str]:
    """The nvFuser API that is installed (found without importing it), preferred first."""
    return next((api for api in ("nvfuser_direct", "nvfuser") if _find_spec(api) is not None), None)


def current_backend(device=None) -> tuple:
    """(Backend, "") usable for `device`; else (None, exactly why not).

    nvFuser is imported only for a CUDA device: a CPU compile does not pay for (or risk)
    importing a CUDA extension it cannot use.
    """
    dev = torch.device(device) if device is not None else None
    if _override is not None:
        if _override.reference or dev is None or dev.type == "cuda":
            return _override, ""
        return None, f"nvFuser needs a CUDA device; this tensor is on {dev.type}"
    if installed_api() is None:
        return None, NOT_INSTALLED
    if dev is not None and dev.type != "cuda":
        return None, f"nvFuser needs a CUDA device; this tensor is on {dev.type}"
    return load_backend()


# --- tensor descriptors (nvFuser's convention) -----------------------------------------------

def tensor_descriptor(shape, strides) -> tuple:
    """(symbolic shape, contiguity, stride_order) of a tensor, as nvFuser defines its inputs.

    Symbolic shape: 1 for a size-1 dim (nvFuser specialises on broadcast dims), -1 otherwise.
    stride_order[d] is the rank of dim d from the innermost (0) outwards, dims sorted by
    stride, larger first, ties kept in their logical order. contiguity lists the dims in that
    physical order: None for a broadcast dim (size 1 or stride 0); otherwise whether the
    stride equals size * stride of the next inner non-broadcast dim (1 for the innermost).
    """
    shape, strides = [int(s) for s in shape], [int(s) for s in strides]
    n = len(shape)
    symbolic = [1 if s == 1 else -1 for s in shape]
    physical = sorted(range(n), key=lambda d: -strides[d])  # stable: ties keep logical order
    stride_order = [0] * n
    for pos, d in enumerate(physical):
        stride_order[d] = n - 1 - pos
    broadcast = [shape[d] == 1 or strides[d] == 0 for d in physical]
    contiguity: list = []
    for pos, d in enumerate(physical):
        if broadcast[pos]:
            contiguity.append(None)
            continue
        expected = 1
        for inner in range(pos + 1, n):
            if not broadcast[inner]:
                e = physical[inner]
                expected = strides[e] * shape[e]
                break
        contiguity.append(strides[d] == expected)
    return tuple(symbolic), tuple(contiguity), tuple(stride_order)


def _contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class InputSpec:
    dtype: torch.dtype
    shape: tuple  # symbolic: -1 or 1
    contiguity: tuple
    stride_order: tuple
    is_cpu: bool

    @staticmethod
    def of_tensor(t: torch.Tensor, device_type: str) -> "InputSpec":
        shape, contiguity, order = tensor_descriptor(t.shape, t.stride())
        return InputSpec(t.dtype, shape, contiguity, order,
                         t.ndim == 0 and t.device.type == "cpu" and device_type != "cpu")

    @staticmethod
    def of_value(v: Value, device_type: str) -> "InputSpec":
        shape, contiguity, order = tensor_descriptor(v.shape, _contiguous_strides(v.shape))
        return InputSpec(v.dtype, shape, contiguity, order,
                         v.ndim == 0 and v.device.type == "cpu" and device_type != "cpu")


# --- what the executor takes -------------------------------------------------------------------

def _prim_name(bsym) -> Optional[str]:
    name = bsym.sym.name
    if bsym.sym.kind != "prim" or not name.startswith("prims."):
        return None
    return name.removeprefix("prims.")


def _dtype_ok(dtype) -> bool:
    return dtype in DTYPES


def _category(x) -> int:
    """0 bool, 1 integer, 2 floating: of a dtype or a python number."""
    if isinstance(x, torch.dtype):
        return 0 if x == torch.bool else (2 if x.is_floating_point or x.is_complex else 1)
    return 0 if isinstance(x, bool) else (1 if isinstance(x, int) else 2)


def can_take(bsym) -> Optional[str]:
    """None when this op maps to fd.ops; otherwise why it does not."""
    name = _prim_name(bsym)
    if name is None:
        return f"{bsym.sym.name} is not a prim; nvFuser takes prims only"
    if name not in UNARY and name not in BINARY and name not in REDUCTIONS and name not in OTHERS:
        return (f"prims.{name} is not in the fusion vocabulary (compiler/fusion.py: elementwise, "
                "broadcast_in_dim, sum/amax/amin/prod/var_mean)")
    for v in list(bsym.inputs()) + list(bsym.outputs):
        if not _dtype_ok(v.dtype):
            return f"dtype {dtype_name(v.dtype)} has no nvFuser DataType here"
    for x in list(bsym.args) + list(bsym.kwargs.values()):
        if isinstance(x, complex):
            return "complex scalars are not supported"
    if name == "convert_element_type":
        target = bsym.args[1] if len(bsym.args) > 1 else bsym.kwargs.get("dtype")
        if not _dtype_ok(target):
            return f"cast to {target} has no nvFuser DataType here"
    if name in UNARY:
        a = bsym.args[0]
        if not isinstance(a, Value):
            return "a unary op of a python number is not a tensor op"
        if name in FLOAT_UNARY and not a.dtype.is_floating_point:
            return (f"{name} of a {dtype_name(a.dtype)} tensor: the prim keeps the dtype, torch gives a float "
                    "(decompositions cast first)")
        if name in ROUNDING and not a.dtype.is_floating_point:
            return f"{name} of an integer tensor is a copy in torch; not sent to nvFuser"
        if a.dtype == torch.bool and name not in ("logical_not", "bitwise_not", "isnan"):
            return f"{name} of a bool tensor is not supported"
        if name == "bitwise_not" and a.dtype.is_floating_point:
            return "bitwise_not of a floating tensor"
    if name in BINARY:
        if name in BITWISE and any(isinstance(x, Value) and x.dtype.is_floating_point for x in bsym.args[:2]):
            return f"{name} of a floating tensor"
        tensors = [x for x in bsym.args[:2] if isinstance(x, Value)]
        if not tensors:
            return "no tensor operand"
        if name == "div" and not tensors[0].dtype.is_floating_point:
            return "div of integer tensors: the prim keeps the dtype, torch divides truly (decompositions cast first)"
        for x in bsym.args[:2]:
            if not isinstance(x, Value) and _category(x) > _category(tensors[0].dtype):
                return (f"a {type(x).__name__} scalar with a {dtype_name(tensors[0].dtype)} tensor: prim operands "
                        "share one dtype")
    if name == "where":
        pred = bsym.args[0]
        if not isinstance(pred, Value) or pred.dtype != torch.bool:
            return "where needs a bool tensor condition"
        values = [x for x in bsym.args[1:3] if isinstance(x, Value)]
        if not values:
            return "where of two scalars"
        for x in bsym.args[1:3]:
            if not isinstance(x, Value) and _category(x) > _category(values[0].dtype):
                return (f"a {type(x).__name__} scalar with a {dtype_name(values[0].dtype)} tensor: prim operands "
                        "share one dtype")
    if name == "broadcast_in_dim":
        a, shape, dims = bsym.args[0], bsym.args[1], tuple(bsym.args[2])
        if any(d2 <= d1 for d1, d2 in zip(dims, dims[1:])):
            return "nvFuser's broadcast_in_dim needs strictly increasing broadcast_dims"
        for src, dst in enumerate(dims):
            if a.shape[src] != 1 and a.shape[src] != shape[dst]:
                return "broadcast_in_dim changes a non-size-1 dim"
    if name in REDUCTIONS or name == "var_mean":
        a, dims = bsym.args[0], tuple(bsym.args[1])
        if not dims:
            return "a reduction over no dims"
        if a.ndim == 0:
            return "a reduction of a 0-dim tensor"
        if name in ("sum", "prod", "var_mean") and a.dtype in _LOW_PRECISION:
            return (f"a {dtype_name(a.dtype)} {name} (torch accumulates low-precision floats in float32; "
                    "FusionLens decompositions cast first, as Thunder's nvFuser executor requires)")
        if name in ("sum", "prod") and not a.dtype.is_floating_point and a.dtype != torch.int64:
            return (f"a {dtype_name(a.dtype)} {name}: the prim keeps the dtype, torch gives int64 "
                    "(decompositions cast first)")
        if name == "var_mean" and not a.dtype.is_floating_point:
            return "var_mean of a non-floating tensor"
    return None


# --- the definition as Python source -------------------------------------------------------------

_RESERVED = {"fd", "FusionDefinition", "DataType", "torch", "float", "int", "bool"}


def _scalar_source(x) -> tuple:
    """(literal, DataType member) of a python number as nvFuser defines constant scalars."""
    if isinstance(x, bool):
        return repr(x), "Bool"
    if isinstance(x, int):
        return repr(x), "Int"
    x = float(x)
    if math.isnan(x):
        return 'float("nan")', "Double"
    if math.isinf(x):
        return ('float("inf")' if x > 0 else 'float("-inf")'), "Double"
    return repr(x), "Double"


class _Writer:
    def __init__(self, group: FusionGroup, specs: list, api: str):
        self.group, self.specs, self.api = group, specs, api
        self.lines: list = []
        self.names: dict = {}  # trace value name -> python name in the definition
        self.dtypes: dict = {}  # python name -> torch dtype of that nvFuser value
        self.used: set = set()
        self.scalars = 0
        self.last_loc = None

    def fresh(self, base: str) -> str:
        base = re.sub(r"\W", "_", base) or "v"
        if base[0].isdigit() or keyword.iskeyword(base) or base in _RESERVED:
            base = f"{base}_"
        name, k = base, 1
        while name in self.used:
            name = f"{base}_{k}"
            k += 1
        self.used.add(name)
        return name

    def emit(self, text: str):
        self.lines.append(f"    {text}")

    def value(self, v: Value) -> str:
        return self.names[v.name]

    def scalar(self, x, as_dtype: Optional[torch.dtype] = None) -> str:
        if as_dtype is not None and as_dtype.is_floating_point and not isinstance(x, bool):
            x = float(x)
        literal, dt = _scalar_source(x)
        name = self.fresh(f"S{self.scalars}")
        self.scalars += 1
        self.emit(f"{name} = fd.define_scalar({literal}, dtype=DataType.{dt})")
        return name

    def cast(self, name: str, dtype: torch.dtype) -> str:
        if self.dtypes[name] == dtype:
            return name
        out = self.fresh(f"{name}_{_SHORT[dtype]}")
        self.emit(f"{out} = fd.ops.cast({name}, dtype=DataType.{DTYPES[dtype]})")
        self.dtypes[out] = dtype
        return out

    def operand(self, x, dtype: torch.dtype) -> str:
        """A tensor operand cast to `dtype`, or a python number defined as a scalar."""
        if isinstance(x, Value):
            return self.cast(self.value(x), dtype)
        return self.scalar(x, dtype)

    def bind(self, v: Value, name: str, dtype: torch.dtype, comment: str):
        """Name the op just emitted as trace value v, cast to v's dtype if nvFuser's differs."""
        self.lines[-1] += comment
        self.names[v.name] = self.cast(name, v.dtype) if dtype != v.dtype else name

    def provenance(self, b):
        p = b.provenance
        if p is not None and (p.file, p.line) != self.last_loc:
            self.last_loc = (p.file, p.line)
            self.emit(f"# {display_path(p.file)}:{p.line}  {p.source()}")

    def header(self) -> list:
        g = self.group
        head = [f"# nvFuser FusionDefinition for fusion region {g.id} ({g.kind}); "
                f"iteration domain {list(g.domain)}"
                + (f", reduced dims {list(g.reduction_dims)}" if g.reduction_dims else "")]
        if g.source_lines:
            head.append("# from:")
            head += [f"#   {line}" for line in g.source_lines]
        head.append("# inputs: " + ", ".join(f"{v.name} {v.type_str()}" for v in g.inputs))
        head.append("# outputs: " + ", ".join(f"{v.name} {v.type_str()}" for v in g.outputs))
        head.append(f"from {self.api} import FusionDefinition, DataType")
        return head

    def write(self) -> tuple:
        g = self.group
        fname = "nvfuser_fusion_" + re.sub(r"\W", "_", g.id)
        self.lines.append(f"def {fname}(fd: FusionDefinition) -> None:")
        for v, spec in zip(g.inputs, self.specs):
            name = self.fresh(v.name)
            self.names[v.name] = name
            self.dtypes[name] = v.dtype
            self.emit(f"{name} = fd.define_tensor(shape={list(spec.shape)}, contiguity={list(spec.contiguity)}, "
                      f"dtype=DataType.{DTYPES[v.dtype]}, is_cpu={spec.is_cpu}, "
                      f"stride_order={list(spec.stride_order)})")
        for b in g.bsyms:
            why = can_take(b)
            if why is not None:
                raise Decline(f"{b.sym.name}: {why}")
            self.provenance(b)
            self.op(b)
        produced_inputs = {v.name for v in g.inputs}
        for v in g.outputs:
            name = self.value(v)
            if v.name in produced_inputs:  # an input passed through: nvFuser returns a copy via set
                copy = self.fresh(f"{name}_copy")
                self.emit(f"{copy} = fd.ops.set({name})")
                name = copy
            self.emit(f"fd.add_output({name})")
        body = "\n".join(self.lines)
        tail = f"\n\n\nwith FusionDefinition() as fd:\n    {fname}(fd)\n"
        return body + tail, fname

    def op(self, b):
        name = _prim_name(b)
        out = b.outputs[0]
        types = "; ".join(f"{o.name}: {o.type_str()}" for o in b.outputs)
        comment = f"  # {b.sym.name} -> {types}"
        if name == "convert_element_type":
            src = self.value(b.args[0])
            target = b.args[1] if len(b.args) > 1 else b.kwargs["dtype"]
            res = self.fresh(out.name)
            self.emit(f"{res} = fd.ops.cast({src}, dtype=DataType.{DTYPES[target]})")
            self.dtypes[res] = target
            self.bind(out, res, target, comment)
        elif name in UNARY:
            a = b.args[0]
            compute = a.dtype
            if name in FLOAT_UNARY and not a.dtype.is_floating_point:
                compute = torch.get_default_dtype()
            src = self.cast(self.value(a), compute)
            nv = name
            if name == "bitwise_not" and a.dtype == torch.bool:
                nv = "logical_not"
            result_dtype = torch.bool if name in ("logical_not", "isnan") else compute
            res = self.fresh(out.name)
            self.emit(f"{res} = fd.ops.{nv}({src})")
            self.dtypes[res] = result_dtype
            self.bind(out, res, result_dtype, comment)
        elif name in BINARY:
            x, y = b.args[0], b.args[1]
            if name in COMPARISONS:
                compute = torch.result_type(*(a.meta() if isinstance(a, Value) else a for a in (x, y)))
                result_dtype = torch.bool
            else:
                compute = out.dtype
                result_dtype = out.dtype
            xs, ys = self.operand(x, compute), self.operand(y, compute)
            res = self.fresh(out.name)
            self.emit(f"{res} = fd.ops.{BINARY[name]}({xs}, {ys})")
            self.dtypes[res] = result_dtype
            self.bind(out, res, result_dtype, comment)
        elif name == "where":
            pred, x, y = b.args[0], b.args[1], b.args[2]
            compute = out.dtype
            ps = self.value(pred)
            xs, ys = self.operand(x, compute), self.operand(y, compute)
            if isinstance(x, Value) or isinstance(y, Value):
                result_dtype = compute
            else:  # nvFuser's where of two scalars has the scalars' type (Double, Int or Bool)
                literal_types = {_scalar_source(self._as(x, compute))[1], _scalar_source(self._as(y, compute))[1]}
                result_dtype = (torch.float64 if "Double" in literal_types else
                                torch.int64 if "Int" in literal_types else torch.bool)
            res = self.fresh(out.name)
            self.emit(f"{res} = fd.ops.where({ps}, {xs}, {ys})")
            self.dtypes[res] = result_dtype
            self.bind(out, res, result_dtype, comment)
        elif name == "broadcast_in_dim":
            a, shape, dims = b.args[0], list(b.args[1]), list(b.args[2])
            src = self.value(a)
            res = self.fresh(out.name)
            self.emit(f"{res} = fd.ops.broadcast_in_dim({src}, shape={shape}, broadcast_dims={dims})")
            self.dtypes[res] = a.dtype
            self.bind(out, res, a.dtype, comment)
        elif name in REDUCTIONS:
            a, dims = b.args[0], sorted(int(d) for d in b.args[1])
            src = self.value(a)
            res = self.fresh(out.name)
            self.emit(f"{res} = fd.ops.{REDUCTIONS[name]}({src}, {dims})")
            result_dtype = a.dtype
            if name in ("sum", "prod") and not a.dtype.is_floating_point:
                result_dtype = torch.int64  # nvFuser sums and multiplies integers and bools in Int
            self.dtypes[res] = result_dtype
            self.bind(out, res, result_dtype, comment)
        elif name == "var_mean":
            a, dims = b.args[0], sorted(int(d) for d in b.args[1])
            correction = b.args[2] if len(b.args) > 2 else b.kwargs.get("correction", 1)
            src = self.value(a)
            var, mean = b.outputs
            vs, ms = self.fresh(var.name), self.fresh(mean.name)
            self.emit(f"{vs}, {ms} = fd.ops.var_mean({src}, {dims}, {int(correction)})")
            self.dtypes[vs] = self.dtypes[ms] = a.dtype
            self.lines[-1] += comment
            self.names[var.name] = self.cast(vs, var.dtype)
            self.names[mean.name] = self.cast(ms, mean.dtype)
        else:  # can_take said yes to something op() does not know: a bug here
            raise Decline(f"{b.sym.name} has no nvFuser translation")

    @staticmethod
    def _as(x, dtype):
        return float(x) if dtype.is_floating_point and not isinstance(x, bool) else x


def _specs_for_group(group: FusionGroup, device_type: str) -> list:
    return [InputSpec.of_value(v, device_type) for v in group.inputs]


def _source(group: FusionGroup, specs: list, api: str) -> tuple:
    w = _Writer(group, specs, api)
    body, fname = w.write()
    return "\n".join(w.header()) + "\n\n\n" + body, body, fname


def definition_source(group: FusionGroup, api: str = "nvfuser_direct", device_type: str = "cuda") -> str:
    """The FusionDefinition of `group` for contiguous inputs, as a Python script; needs no nvFuser."""
    for b in group.bsyms:
        why = can_take(b)
        if why is not None:
            raise Decline(f"{b.sym.name}: {why}")
    return _source(group, _specs_for_group(group, device_type), api)[0]


def build_definition(body: str, backend: Backend):
    """Run a definition's source (without its import line) against `backend`; returns fd."""
    namespace = {"FusionDefinition": backend.module.FusionDefinition, "DataType": backend.module.DataType}
    exec(compile(body, "<nvfuser definition>", "exec"), namespace)
    return namespace["fd"]


# --- what generate returns -----------------------------------------------------------------------

@dataclass
class Generated:
    source: str  # the FusionDefinition (contiguous inputs) as a runnable Python script
    fn: Callable  # input tensors -> tuple of output tensors, through fd.execute
    kernels: int  # kernels nvFuser launched (1, an estimate, until nvFuser has run)
    eager_fn: Callable  # the same prims one at a time through torch
    executor: str = "nvfuser"
    api: str = "nvfuser_direct"  # the API the source is written for
    backend: str = ""  # what fn runs on: "nvfuser_direct 0.2.34", the test reference, or "" (nothing)
    runnable: bool = False  # fn can run here
    nvfuser_ran: bool = False  # True only once the real nvFuser's fd.execute has returned
    executions: int = 0  # fd.execute calls that returned, on whatever backend ran them
    torch_fallbacks: int = 0  # calls whose inputs nvFuser failed on: the prims ran through torch
    cuda_source: Optional[str] = None  # the generated CUDA, when nvFuser ran and offers it
    scheduler: Optional[str] = None  # e.g. "pointwise", "inner_persistent" (from kernel names)
    scheduled_ir: Optional[str] = None
    note: str = ""  # in words: did nvFuser run, and if not, why
    definitions: dict = field(default_factory=dict)  # InputSpec tuple -> definition source built
    errors: list = field(default_factory=list)  # what failed collecting kernels or IR

    def status(self) -> str:
        """One line for a report: did nvFuser run this region, on what, with which kernels."""
        if not self.nvfuser_ran:
            return self.note
        kernels = f"{self.kernels} kernel{'s' if self.kernels != 1 else ''}"
        text = f"{self.note}: {kernels}" + (f" ({self.scheduler} scheduler)" if self.scheduler else "")
        if self.torch_fallbacks:
            text += f"; {self.torch_fallbacks} calls ran through torch instead ({self.errors[-1]})"
        return text

    def report_code(self) -> str:
        """The definition, its status, and the CUDA nvFuser generated for it when it ran."""
        body = self.source.split("\n", 1)[1] if self.source.startswith("# status:") else self.source
        text = f"# status: {self.status()}\n{body}"
        if self.cuda_source:
            text += ("\n\n# --- CUDA nvFuser generated (for the latest new input signature) ---\n"
                     + self.cuda_source)
        return text


def _eager_fn(group: FusionGroup) -> Callable:
    return ops_callable(group.bsyms, group.inputs, group.outputs)


_KERNEL = re.compile(r"__global__\s+void\s+(\w+)\s*\(")
_SCHEDULER = re.compile(r"nvfuser_([a-z_]+?)_f\d+")


def _kernel_info(cuda: str) -> tuple:
    """(kernel count, scheduler names) from generated CUDA source."""
    names = _KERNEL.findall(cuda or "")
    schedulers = []
    for n in names:
        m = _SCHEDULER.match(n)
        if m and m.group(1) not in schedulers:
            schedulers.append(m.group(1))
    return len(names), ", ".join(schedulers) or None


def _collect(gen: Generated, fd, backend: Backend, inputs: list):
    """Generated CUDA and scheduled IR after the first real execution of a definition."""
    if backend.reference:
        return
    try:
        if backend.api == "nvfuser_direct":
            gen.cuda_source = fd.fec.get_cuda_kernel(inputs)
            gen.scheduled_ir = fd.fec.get_most_recent_scheduled_ir()
        else:
            gen.cuda_source = fd.last_cuda_code()
            gen.scheduled_ir = fd.last_scheduled_fusion_ir()
    except Exception as e:  # noqa: BLE001 - report it, keep the result
        gen.errors.append(f"collecting the generated CUDA failed: {type(e).__name__}: {e}")
    if gen.cuda_source:
        count, scheduler = _kernel_info(gen.cuda_source)
        gen.kernels = count or gen.kernels
        gen.scheduler = scheduler


_FAILED = object()


def _make_fn(group: FusionGroup, gen: Generated, backend: Optional[Backend], why_not: str,
             device_type: str) -> tuple:
    """(fn, run): fn(*tensors) for the program; run(tensors, fallback) underneath.

    With fallback (the program's calls on the real package), an input signature nvFuser
    fails on (building or executing its definition) runs the group's prims through torch
    from then on, and the Generated records it: `torch_fallbacks`, `errors`, `status()`.
    Without it (compiling in generate, or the test reference), failures raise.
    """
    cache: dict = {}  # InputSpec tuple -> fd, or _FAILED
    n_inputs = len(group.inputs)

    def run(tensors, fallback: bool):
        if backend is None:
            raise RuntimeError(f"nvFuser region {group.id} cannot run here: {why_not}")
        if len(tensors) != n_inputs:
            raise TypeError(f"region {group.id} takes {n_inputs} tensors, got {len(tensors)}")
        key = tuple(InputSpec.of_tensor(t, device_type) for t in tensors)
        fd = cache.get(key)
        if fd is _FAILED:
            gen.torch_fallbacks += 1
            return gen.eager_fn(*tensors)
        first = fd is None
        try:
            if first:
                source, body, _ = _source(group, list(key), backend.api)
                gen.definitions[key] = source
                fd = build_definition(body, backend)
            outs = fd.execute(list(tensors))
        except Exception as e:  # noqa: BLE001 - nvFuser raises RuntimeErrors of many kinds
            if not fallback or backend.reference:
                raise
            cache[key] = _FAILED
            first_line = (str(e).strip().splitlines() or [""])[0]
            gen.errors.append(f"nvFuser failed on inputs {list(key)}: {type(e).__name__}: {first_line}; "
                              "these inputs run the region's prims through torch")
            gen.torch_fallbacks += 1
            return gen.eager_fn(*tensors)
        cache[key] = fd
        gen.executions += 1
        if not backend.reference and not gen.nvfuser_ran:
            gen.nvfuser_ran = True
            gen.note = f"ran on {backend.label}"
        if first:
            _collect(gen, fd, backend, list(tensors))
        return tuple(o if o.is_contiguous() else o.contiguous() for o in outs)

    def fn(*tensors):
        return run(tensors, True)
    return fn, run


def _example_inputs(group: FusionGroup, device) -> list:
    out = []
    for v in group.inputs:
        dev = "cpu" if (v.device.type == "cpu" and v.ndim == 0) else device
        if v.dtype.is_floating_point:
            out.append(torch.randn(v.shape, dtype=v.dtype, device=dev))
        else:
            out.append(torch.ones(v.shape, dtype=v.dtype, device=dev))
    return out


# --- the executor ----------------------------------------------------------------------------------

class NvFuserExecutor:
    name = "nvfuser"
    fuses = True

    def available(self, device) -> tuple:
        """(True, "") when an nvFuser package imports and the device is CUDA; else (False, why)."""
        backend, why = current_backend(device if device is not None else "cpu")
        if backend is None:
            return False, why
        return True, ""

    def can_take(self, bsym) -> Optional[str]:
        return can_take(bsym)

    def definition_source(self, group: FusionGroup) -> str:
        """The definition that would run on a CUDA device, for reports where nvFuser cannot."""
        return definition_source(group, installed_api() or "nvfuser_direct", "cuda")

    def generate(self, group: FusionGroup, device) -> Generated:
        dev = torch.device(device) if device is not None else torch.device("cpu")
        for v in group.inputs:
            if v.device.type == "cpu" and v.ndim > 0 and dev.type == "cuda":
                raise Decline(f"input {v.name} is a CPU tensor with {v.ndim} dims; nvFuser takes only "
                              "0-dim CPU tensors")
        backend, why = current_backend(dev)
        usable = backend is not None and (backend.reference or dev.type == "cuda")
        if backend is not None and not usable:
            why = f"nvFuser needs a CUDA device; this tensor is on {dev.type}"
        api = backend.api if backend is not None else (installed_api() or "nvfuser_direct")
        source = definition_source(group, api, dev.type)
        gen = Generated(source=source, fn=None, kernels=1, eager_fn=_eager_fn(group), api=api,
                        backend=backend.label if usable else "", runnable=usable)
        if not usable:
            gen.note = f"nvFuser did not run: {why}. This is the definition that would run."
        elif backend.reference:
            gen.note = ("nvFuser did not run: this region runs through " + REFERENCE_LABEL +
                        ", which checks the definition's API use and torch semantics")
        else:
            gen.note = f"{backend.label} ready; not run yet"
        gen.source = f"# status: {gen.note}\n{source}"
        gen.fn, run = _make_fn(group, gen, backend if usable else None, why, dev.type)
        if usable and not backend.reference:
            # Compile now on contiguous example inputs: the report gets the CUDA and the
            # scheduler, and a definition nvFuser rejects is declined rather than failing later.
            try:
                run(_example_inputs(group, dev), False)
            except Exception as e:  # noqa: BLE001 - nvFuser errors are RuntimeErrors of many kinds
                first = str(e).strip().splitlines()
                raise Decline(f"nvFuser could not compile this region: {type(e).__name__}: "
                              f"{first[0] if first else ''}") from e
            gen.source = f"# status: {gen.status()}\n{source}"
        return gen


EXECUTOR = NvFuserExecutor()


def available(device) -> tuple:
    return EXECUTOR.available(device)


def generate(group: FusionGroup, device) -> Generated:
    return EXECUTOR.generate(group, device)
