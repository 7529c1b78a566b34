"""A reference implementation of the part of nvFuser's Python API FusionLens generates. Tests only.

The product never imports this. The nvFuser executor's tests run it with a Backend over
this module, posing as `nvfuser_direct` or `nvfuser` (tests/nvfuser_testing.py), so that on
a machine without nvFuser every definition is still built and run: op names,
argument orders, keyword names and defaults follow nvFuser's published bindings; the values
are computed with torch, following nvFuser's semantics where they differ from torch's.

What it checks, so that a definition that works here is likely to work on nvFuser:

- the names exist: only the ops below, `FusionDefinition`, `DataType`; unary, binary and
  ternary ops take positional arguments only (the bindings give them no names);
- define_tensor: shape entries are -1 (symbolic), 1 (broadcast) or static sizes; contiguity
  has one entry per dim, in stride order (outermost first), None exactly at broadcast dims;
  stride_order is a permutation. At execute, every input must have the dtype and rank
  defined, size 1 where the shape says 1, and a layout for which the claimed contiguity
  holds (nvFuser indexes by it);
- broadcast_in_dim: one strictly increasing broadcast dim per input dim, and only
  broadcast (size-1) dims may change size; a target extent is an int or an Int scalar of the
  definition (`fd.ops.size(T, dim=d)`, or a symbolic scalar input), read at execute;
  elementwise ops need equal ranks, and sizes that differ only where one side is a broadcast dim;
- squeeze: only broadcast dims (extent 1; an expanded one only with squeeze_expanded=True),
  size 1 at execute;
- scalar inputs (`define_scalar(None, dtype=...)`) follow the definition order of inputs, and
  each is given at execute as a python number of its type;
- dtypes: python scalars are DataType.Double / Int / Bool values; a tensor's dtype wins over
  a scalar of the same category (as in torch); `div` of two integers truncates (C++ `/`);
  float ops (exp, sqrt, ...) of integers give Float; sum and prod of integers or bools give
  Int (DataType::Null rule); `where` of two scalars has the scalars' type; cast is explicit.

It does not check devices: CPU tensors stand in for CUDA tensors.

Followed: NVIDIA/Fuser python/nvfuser_direct/__init__.py (FusionDefinition: context manager,
define_tensor / define_scalar (a value of None is a symbolic input) / add_output / execute(inputs,
*, device=None, auto_schedule=True)), python/python_direct/ops.cpp (op names; sum/max/min/prod
(arg, dims, keepdim=False, dtype=DataType.Null); var_mean(arg, dims, correction=1,
keepdim=False) -> (var, mean); cast(arg, dtype); broadcast_in_dim(arg, shape, broadcast_dims);
where(condition, x, y); set; size(arg, dim) -> the extent as a scalar Val; a shape is a list of
ints and scalar Vals), python/python_frontend/python_bindings.cpp (define_tensor(shape,
contiguity, dtype=DataType.Float, is_cpu=False, stride_order), computeTensorDescriptor's
contiguity convention), python/python_frontend/fusion_record.h (SizeOpRecord: `ops.size(T, dim=d)`),
ops.cpp again for reshape(arg, new_shape), squeeze(arg, dims, squeeze_expanded=False) (and
csrc/ops/alias.cpp squeeze: only broadcast dims, an expanded one only with squeeze_expanded,
negative dims from the end; the older frontend's python_bindings.cpp binds the same arguments),
iota(length, start=None, step=None,
dtype=DataType.Int) and scatter(arg, index, src, dim), csrc/ops/indexing.cpp (scatter: self,
index and src of one rank, not 0-d; the output has self's shape; index may be smaller than self
in the other dims), tests/python/direct/test_repro.py (how definitions are written, scalar inputs
`define_scalar(None, dtype=DataType.Int)` among them), tests/python/direct/test_python_frontend.py
(test_broadcast_in_dim_with_dynamic_shapes: a broadcast to a tensor's own extents).
"""

from __future__ import annotations

import enum
import math

import torch

__version__ = "reference"
# What runs a definition, as the executor's notes say it (Backend.label and Backend.about)
LABEL = "tests/nvfuser_reference.py (a torch re-implementation for tests; not nvFuser)"
ABOUT = "which checks the definition's API use and torch semantics"


class DataType(enum.Enum):
    Double = "Double"
    Float = "Float"
    Half = "Half"
    BFloat16 = "BFloat16"
    Int = "Int"
    Int32 = "Int32"
    Bool = "Bool"
    ComplexFloat = "ComplexFloat"
    ComplexDouble = "ComplexDouble"
    Null = "Null"


TORCH_DTYPE = {
    DataType.Double: torch.float64, DataType.Float: torch.float32, DataType.Half: torch.float16,
    DataType.BFloat16: torch.bfloat16, DataType.Int: torch.int64, DataType.Int32: torch.int32,
    DataType.Bool: torch.bool, DataType.ComplexFloat: torch.complex64, DataType.ComplexDouble: torch.complex128,
}


class ReferenceError_(RuntimeError):
    """What real nvFuser would reject (or silently mis-compute) in a definition or its inputs."""


def _check(cond, message):
    if not cond:
        raise ReferenceError_(message)


class Tensor:
    """A TensorView in a definition: its rank, dtype and which dims are broadcast dims."""

    def __init__(self, fd, ndim: int, dtype: torch.dtype, broadcast: tuple):
        self.fd, self.ndim, self.dtype, self.broadcast = fd, ndim, dtype, tuple(broadcast)
        self.expanded = (False,) * ndim  # broadcast dims of an extent other than 1 (define_tensor, broadcast_in_dim)
        self.index = len(fd._values)
        fd._values.append(self)

    def __repr__(self):
        return f"Tensor(index={self.index}, ndim={self.ndim})"


class Scalar:
    def __init__(self, fd, value, dtype: DataType):
        self.fd, self.value, self.dtype = fd, value, dtype
        self.index = len(fd._values)
        fd._values.append(self)

    def __repr__(self):
        return f"Scalar(index={self.index})"


_active: list = []


def _fd():
    _check(_active, "an op was called outside a FusionDefinition context")
    return _active[-1]


def _scalar_python(dtype: DataType, value):
    if dtype == DataType.Bool:
        return bool(value)
    if dtype in (DataType.Int, DataType.Int32):
        return int(value)
    return float(value)


class FusionDefinition:
    """`with FusionDefinition() as fd: ...` then `fd.execute(inputs)`."""

    def __init__(self, *args, **kwargs):  # the older frontend takes (id, max_length, ...)
        self.ops = ops
        self._values: list = []
        self._inputs: list = []
        self._outputs: list = []
        self._records: list = []  # (fn, operands, outputs)
        self.recorded_ops: list = []  # fd.ops names used, in order
        self.log: list = []  # (name, operands, outputs, attributes such as a reduction's dims), in order
        self._done = False
        self.executions = 0

    def __enter__(self):
        _check(not self._done, "a FusionDefinition is defined once")
        _active.append(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        _active.pop()
        self._done = exc_type is None
        return False

    # -- inputs and outputs --
    def define_tensor(self, shape, contiguity=None, dtype=DataType.Float, is_cpu=False, stride_order=None,
                      **kwargs):
        _check(not kwargs, f"define_tensor got unexpected arguments {sorted(kwargs)}")
        _check(_active and _active[-1] is self, "define_tensor outside this definition's context")
        shape = list(shape)
        n = len(shape)
        for i, s in enumerate(shape):
            _check(isinstance(s, int) and s >= -1,
                   f"shape[{i}]={s!r} was neither symbolic(-1), zero_element(0), broadcast(1), or static(>1)")
        _check(isinstance(dtype, DataType) and dtype in TORCH_DTYPE, f"dtype {dtype!r} is not a DataType")
        if contiguity is None:
            contiguity = [None if s == 1 else True for s in shape]
        elif isinstance(contiguity, bool):
            contiguity = [None if s == 1 else contiguity for s in shape]
        contiguity = list(contiguity)
        _check(len(contiguity) == n, f"contiguity has {len(contiguity)} entries for {n} dims")
        order = list(stride_order) if stride_order else list(range(n - 1, -1, -1))
        _check(sorted(order) == list(range(n)), f"stride_order {order} is not a permutation of {n} dims")
        physical = sorted(range(n), key=lambda d: -order[d])  # outermost first
        for pos, d in enumerate(physical):
            c = contiguity[pos]
            _check(c in (True, False, None), f"contiguity entries are True, False or None, got {c!r}")
            if shape[d] == 1:
                _check(c is None, f"dim {d} is a broadcast dim (size 1): its contiguity must be None")
        _check(not is_cpu or n == 0, "only 0-dim tensors may be CPU tensors")
        t = Tensor(self, n, TORCH_DTYPE[dtype], tuple(s == 1 for s in shape))
        t._spec = (shape, contiguity, order, physical, bool(is_cpu))
        t.expanded = tuple(shape[d] != 1 and contiguity[physical.index(d)] is None for d in range(n))
        self._inputs.append(t)
        return t

    def define_scalar(self, value=None, dtype=DataType.Double):
        _check(isinstance(dtype, DataType) and dtype in TORCH_DTYPE, f"dtype {dtype!r} is not a DataType")
        s = Scalar(self, None if value is None else _scalar_python(dtype, value), dtype)
        if value is None:
            self._inputs.append(s)  # a symbolic scalar is a fusion input
        return s

    def add_output(self, output, *args, **kwargs):
        _check(not args and not kwargs, "add_output: aliasing and stride orders are not used by FusionLens")
        _check(isinstance(output, Tensor) and output.fd is self, "add_output takes a tensor of this definition")
        self._outputs.append(output)

    # -- running --
    def execute(self, inputs, *, device=None, auto_schedule=True, **kwargs) -> list:
        _check(self._done, "execute before the definition was completed")
        inputs = list(inputs)
        _check(len(inputs) == len(self._inputs),
               f"the definition has {len(self._inputs)} inputs, execute got {len(inputs)}")
        env = {}
        for k, (v, x) in enumerate(zip(self._inputs, inputs)):
            if isinstance(v, Scalar):
                _check(not isinstance(x, torch.Tensor), f"input {k} is a scalar input, got a tensor")
                _check(isinstance(x, (int, float, bool)) and (v.dtype not in (DataType.Int, DataType.Int32)
                                                              or isinstance(x, int)),
                       f"input {k} is a {v.dtype.value} scalar input, got {x!r}")
                env[v.index] = _scalar_python(v.dtype, x)
                continue
            _check(isinstance(x, torch.Tensor), f"input {k} must be a tensor")
            _validate_input(k, v, x)
            env[v.index] = x
        with torch.no_grad():
            for fn, operands, outputs in self._records:
                args = [env[o.index] if isinstance(o, (Tensor, Scalar)) and o.index in env
                        else (o.value if isinstance(o, Scalar) else o) for o in operands]
                result = fn(*args)
                results = result if isinstance(result, tuple) else (result,)
                for out, r in zip(outputs, results):
                    if isinstance(out, Scalar):  # fd.ops.size: a python number at execute
                        env[out.index] = _scalar_python(out.dtype, r)
                        continue
                    _check(r.dtype == out.dtype, f"internal: {out} computed as {r.dtype}, defined {out.dtype}")
                    _check(r.ndim == out.ndim, f"internal: {out} has rank {r.ndim}, defined {out.ndim}")
                    env[out.index] = r
        self.executions += 1
        return [env[o.index].clone() for o in self._outputs]

    def _record(self, name, fn, operands, outputs, **attributes):
        self._records.append((fn, operands, outputs))
        self.recorded_ops.append(name)
        self.log.append((name, list(operands), list(outputs), attributes))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _validate_input(k: int, v: Tensor, x: torch.Tensor):
    shape, contiguity, order, physical, is_cpu = v._spec
    _check(x.dtype == v.dtype, f"input {k}: dtype {x.dtype}, the definition says {v.dtype}")
    _check(x.ndim == v.ndim, f"input {k}: rank {x.ndim}, the definition says {v.ndim}")
    for d, s in enumerate(shape):
        if s == 1:
            _check(x.shape[d] == 1, f"input {k}: dim {d} is defined as broadcast (1) but has size {x.shape[d]}")
        elif s >= 0:
            _check(x.shape[d] == s, f"input {k}: dim {d} is defined with static size {s}, got {x.shape[d]}")
    sizes, strides = list(x.shape), list(x.stride())
    bcast = [sizes[d] == 1 or strides[d] == 0 for d in physical]
    for pos, d in enumerate(physical):
        c = contiguity[pos]
        if c is None:
            _check(bcast[pos], f"input {k}: dim {d} has contiguity None but size {sizes[d]} and stride {strides[d]}")
        elif c is True:
            expected = 1
            for inner in range(pos + 1, len(physical)):
                if not bcast[inner]:
                    e = physical[inner]
                    expected = strides[e] * sizes[e]
                    break
            _check(bcast[pos] or strides[d] == expected,
                   f"input {k}: dim {d} is defined contiguous (stride_order {order}) but has stride "
                   f"{strides[d]}, not {expected}")


# --- ops --------------------------------------------------------------------------------------

def _dtype_of(x):
    return x.dtype if isinstance(x, Tensor) else TORCH_DTYPE[x.dtype]


def _category(dtype):
    if dtype == torch.bool:
        return 0
    if dtype.is_floating_point:
        return 2
    if dtype.is_complex:
        return 3
    return 1


def _promote(*operands) -> torch.dtype:
    """nvFuser's (and torch's) promotion: tensors decide within a category, scalars lift it."""
    tensors = [o.dtype for o in operands if isinstance(o, Tensor)]
    scalars = [TORCH_DTYPE[o.dtype] for o in operands if isinstance(o, Scalar)]
    if not tensors:
        out = scalars[0]
        for s in scalars[1:]:
            out = torch.promote_types(out, s)
        return out
    out = tensors[0]
    for t in tensors[1:]:
        out = torch.promote_types(out, t)
    for s in scalars:
        if _category(s) > _category(out):
            out = torch.get_default_dtype() if _category(s) == 2 else torch.promote_types(out, s)
    return out


def _broadcast_flags(*operands) -> tuple:
    tensors = [o for o in operands if isinstance(o, Tensor)]
    ranks = {t.ndim for t in tensors}
    _check(len(ranks) == 1, f"elementwise operands of different ranks {sorted(ranks)}; broadcast_in_dim first")
    return tuple(all(t.broadcast[d] for t in tensors) for d in range(tensors[0].ndim))


def _check_sizes(tensors_and_defs):
    """At run time: sizes equal, or 1 on a side whose dim is a broadcast dim."""
    shapes = [(x.shape, t.broadcast) for x, t in tensors_and_defs]
    ndim = len(shapes[0][0])
    for d in range(ndim):
        full = {s[d] for s, b in shapes if not (b[d] and s[d] == 1)}
        _check(len(full) <= 1, f"elementwise operands disagree in dim {d}: {[s[d] for s, _ in shapes]} "
                               "(only broadcast dims may differ)")


def _operand(x):
    _check(isinstance(x, (Tensor, Scalar)), f"an op operand must be a Tensor or Scalar of the definition, "
                                            f"got {type(x).__name__} (python numbers go through define_scalar)")
    return x


_FLOAT_UNARY = {"exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan",
                "tanh", "sigmoid", "erf", "reciprocal"}
_UNARY_TORCH = {
    "abs": torch.abs, "neg": torch.neg, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log,
    "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p, "expm1": torch.expm1, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh,
    "sigmoid": torch.sigmoid, "erf": torch.erf, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
    "trunc": torch.trunc, "sign": torch.sign, "reciprocal": torch.reciprocal, "logical_not": torch.logical_not,
    "bitwise_not": torch.bitwise_not, "isnan": torch.isnan, "relu": torch.relu, "set": torch.clone,
}


def _unary(name):
    fn = _UNARY_TORCH[name]

    def op(x, /):
        fd = _fd()
        x = _operand(x)
        _check(isinstance(x, Tensor), f"ops.{name}: FusionLens defines tensor ops only")
        in_dtype = x.dtype
        compute = torch.get_default_dtype() if (name in _FLOAT_UNARY and _category(in_dtype) < 2) else in_dtype
        if name in ("logical_not", "isnan"):
            out_dtype = torch.bool
        else:
            out_dtype = compute

        def run(a):
            return fn(a.to(compute))
        return fd._record(name, run, [x], [Tensor(fd, x.ndim, out_dtype, x.broadcast)])
    op.__name__ = name
    return op


def _as_tensor_arg(v, dtype):
    return v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=dtype)


def _binary(name):
    def op(x, y, /):
        fd = _fd()
        x, y = _operand(x), _operand(y)
        _check(isinstance(x, Tensor) or isinstance(y, Tensor), f"ops.{name}: FusionLens defines tensor ops only")
        flags = _broadcast_flags(x, y)
        ndim = next(t.ndim for t in (x, y) if isinstance(t, Tensor))
        compute = _promote(x, y)
        comparison = name in ("eq", "ne", "lt", "le", "gt", "ge")
        out_dtype = torch.bool if comparison else compute
        defs = [t for t in (x, y) if isinstance(t, Tensor)]

        def run(a, b):
            tensors = [v for v in (a, b) if isinstance(v, torch.Tensor)]
            _check_sizes(list(zip(tensors, defs)))
            a = a.to(compute) if isinstance(a, torch.Tensor) else _as_tensor_arg(a, compute)
            b = b.to(compute) if isinstance(b, torch.Tensor) else _as_tensor_arg(b, compute)
            if name == "div" and _category(compute) < 2:
                return torch.div(a, b, rounding_mode="trunc")  # C++ integer division
            return _BINARY_TORCH[name](a, b).to(out_dtype)
        return fd._record(name, run, [x, y], [Tensor(fd, ndim, out_dtype, flags)])
    op.__name__ = name
    return op


_BINARY_TORCH = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "remainder": torch.remainder, "fmod": torch.fmod, "maximum": torch.maximum, "minimum": torch.minimum,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "atan2": torch.atan2,
}


def where(condition, x, y, /):
    fd = _fd()
    condition, x, y = _operand(condition), _operand(x), _operand(y)
    _check(isinstance(condition, Tensor), "ops.where: FusionLens defines a tensor condition")
    _check(_dtype_of(condition) == torch.bool, "ops.where: the condition must be Bool")
    flags = _broadcast_flags(condition, x, y)
    out_dtype = _promote(x, y)
    defs = [t for t in (condition, x, y) if isinstance(t, Tensor)]

    def run(c, a, b):
        tensors = [v for v in (c, a, b) if isinstance(v, torch.Tensor)]
        _check_sizes(list(zip(tensors, defs)))
        return torch.where(c, _as_tensor_arg(a, out_dtype).to(out_dtype), _as_tensor_arg(b, out_dtype).to(out_dtype))
    return fd._record("where", run, [condition, x, y], [Tensor(fd, condition.ndim, out_dtype, flags)])


def cast(arg, dtype):
    fd = _fd()
    _check(isinstance(arg, Tensor), "ops.cast: FusionLens casts tensors only")
    _check(isinstance(dtype, DataType) and dtype in TORCH_DTYPE, f"ops.cast: {dtype!r} is not a DataType")
    target = TORCH_DTYPE[dtype]
    return fd._record("cast", lambda a: a.to(target), [arg], [Tensor(fd, arg.ndim, target, arg.broadcast)])


def _extents(shape) -> tuple[list, list]:
    """(the shape's entries: ints, or Int scalars of the definition; those scalars, in order)."""
    entries = []
    for i, s in enumerate(shape):
        if isinstance(s, Scalar):
            _check(s.dtype in (DataType.Int, DataType.Int32), f"shape[{i}] is a {s.dtype.value} scalar, not an Int")
            entries.append(s)
        else:
            _check(isinstance(s, int) and not isinstance(s, bool),
                   f"shape[{i}]={s!r}: a shape entry is an int or an Int scalar of the definition")
            entries.append(int(s))
    return entries, [s for s in entries if isinstance(s, Scalar)]


def _resolved(entries, values) -> list[int]:
    it = iter(values)
    return [int(next(it)) if isinstance(s, Scalar) else s for s in entries]


def size(arg, dim):
    """The extent of a tensor's dim, as an Int scalar read at execute."""
    fd = _fd()
    _check(isinstance(arg, Tensor), "ops.size takes a tensor")
    _check(isinstance(dim, int) and -arg.ndim <= dim < max(arg.ndim, 1),
           f"ops.size: dim {dim} of a {arg.ndim}-dim tensor")
    d = dim % arg.ndim
    return fd._record("size", lambda a: a.shape[d], [arg], [Scalar(fd, None, DataType.Int)])


def broadcast_in_dim(arg, shape, broadcast_dims):
    fd = _fd()
    _check(isinstance(arg, Tensor), "ops.broadcast_in_dim takes a tensor")
    entries, scalars = _extents(shape)
    dims = [int(d) for d in broadcast_dims]
    shape = entries
    _check(len(dims) == arg.ndim, f"broadcast_dims has {len(dims)} entries for a {arg.ndim}-dim input")
    _check(len(shape) >= len(dims), "broadcast_dims vector size is too big for output shape")
    for i in range(1, len(dims)):
        _check(dims[i - 1] < dims[i], "Broadcast dimension is not greater than the previous value.")
    _check(all(0 <= d < len(shape) for d in dims), "Invalid broadcast_dims value.")
    flags = [True] * len(shape)
    for src, dst in enumerate(dims):
        flags[dst] = arg.broadcast[src]

    def run(a, *extents):
        target = _resolved(entries, extents)
        for src, dst in enumerate(dims):
            if a.shape[src] != target[dst]:
                _check(arg.broadcast[src] and a.shape[src] == 1,
                       f"broadcast_in_dim: input dim {src} (size {a.shape[src]}, not a broadcast dim) "
                       f"cannot become size {target[dst]}")
        view = [1] * len(target)
        for src, dst in enumerate(dims):
            view[dst] = a.shape[src]
        return a.reshape(view).expand(target)
    out = Tensor(fd, len(shape), arg.dtype, flags)
    src_of = {dst: src for src, dst in enumerate(dims)}
    out.expanded = tuple(arg.expanded[src_of[j]] if j in src_of else not (isinstance(e, int) and e == 1)
                         for j, e in enumerate(entries))
    return fd._record("broadcast_in_dim", run, [arg, *scalars], [out])


def squeeze(arg, dims, squeeze_expanded=False):
    """ops.squeeze(arg, dims, squeeze_expanded=False): arg without the given dims, each a broadcast
    dim of the definition: of extent 1, or an expanded one where squeeze_expanded says so (its
    first element kept). Negative dims count from the end."""
    fd = _fd()
    _check(isinstance(arg, Tensor), "ops.squeeze takes a tensor")
    dims = [int(d) for d in dims]
    _check(len(dims) <= arg.ndim, f"The dims to squeeze must be <= the number of dims of the input tensor. "
                                  f"Squeeze dims: {len(dims)} Input Tensor dims: {arg.ndim}")
    to_squeeze = [False] * arg.ndim
    for d in dims:
        d = d + arg.ndim if d < 0 else d
        _check(0 <= d < arg.ndim, f"Squeeze dim is outside of Tensor size! Tensor Size: {arg.ndim} Dim: {d}")
        to_squeeze[d] = True
    for d in (d for d in range(arg.ndim) if to_squeeze[d]):
        _check(arg.broadcast[d] or arg.expanded[d], "Can not squeeze non-broadcasting dimension(s).")
        _check(squeeze_expanded or not arg.expanded[d],
               f"Refusing to squeeze expanded IterDomain (dim {d}). To force removal of this axis, use "
               "squeeze_expanded=true.")
    gone = [d for d in range(arg.ndim) if to_squeeze[d]]

    def run(a):
        for d in reversed(gone):
            _check(arg.expanded[d] or a.shape[d] == 1, "Can not squeeze dimension(s) with size != 1.")
            a = a.select(d, 0)
        return a
    out = Tensor(fd, arg.ndim - len(gone), arg.dtype, [f for d, f in enumerate(arg.broadcast) if not to_squeeze[d]])
    out.expanded = tuple(f for d, f in enumerate(arg.expanded) if not to_squeeze[d])
    return fd._record("squeeze", run, [arg], [out], dims=tuple(gone))


def _norm_dims(dims, ndim):
    dims = [dims] if isinstance(dims, int) else list(dims)
    out = sorted({d % ndim for d in dims})
    _check(len(out) == len(dims), f"repeated reduction dims {dims}")
    return out


def _reduction(name):
    def op(arg, dims=None, keepdim=False, dtype=DataType.Null):
        fd = _fd()
        _check(isinstance(arg, Tensor), f"ops.{name} takes a tensor")
        _check(arg.ndim > 0, f"ops.{name} of a 0-dim tensor")
        rdims = list(range(arg.ndim)) if dims is None else _norm_dims(dims, arg.ndim)
        in_dtype = arg.dtype
        if dtype != DataType.Null:
            compute = TORCH_DTYPE[dtype]
        elif name in ("sum", "prod") and _category(in_dtype) < 2:
            compute = torch.int64  # "DataType::Int for boolean or integral input"
        else:
            compute = in_dtype
        kept = tuple(True if d in rdims else arg.broadcast[d] for d in range(arg.ndim)) if keepdim else \
            tuple(arg.broadcast[d] for d in range(arg.ndim) if d not in rdims)

        def run(a):
            a = a.to(compute)
            if name == "sum":
                return torch.sum(a, rdims, keepdim=keepdim)
            if name == "max":
                return torch.amax(a, rdims, keepdim=keepdim)
            if name == "min":
                return torch.amin(a, rdims, keepdim=keepdim)
            for d in sorted(rdims, reverse=True):
                a = torch.prod(a, d, keepdim=keepdim)
            return a
        return fd._record(name, run, [arg], [Tensor(fd, len(kept), compute, kept)], dims=tuple(rdims))
    op.__name__ = name
    return op


def var_mean(arg, dims, correction=1, keepdim=False):
    fd = _fd()
    _check(isinstance(arg, Tensor), "ops.var_mean takes a tensor")
    _check(arg.ndim > 0, "ops.var_mean of a 0-dim tensor")
    rdims = _norm_dims(dims, arg.ndim)
    kept = tuple(True if d in rdims else arg.broadcast[d] for d in range(arg.ndim)) if keepdim else \
        tuple(arg.broadcast[d] for d in range(arg.ndim) if d not in rdims)

    def run(a):
        return tuple(torch.var_mean(a, rdims, correction=correction, keepdim=keepdim))
    outs = [Tensor(fd, len(kept), arg.dtype, kept), Tensor(fd, len(kept), arg.dtype, kept)]
    return fd._record("var_mean", run, [arg], outs, dims=tuple(rdims))


def reshape(arg, new_shape):
    """ops.reshape(arg, new_shape): row-major, as torch's; the element count must not change."""
    fd = _fd()
    _check(isinstance(arg, Tensor), "ops.reshape takes a tensor")
    entries, scalars = _extents(new_shape)
    _check(sum(1 for e in entries if isinstance(e, int) and e == -1) <= 1, "ops.reshape: at most one -1")

    def run(a, *extents):
        target = _resolved(entries, extents)
        _check(-1 in target or math.prod(target) == a.numel(),
               f"ops.reshape: {list(a.shape)} ({a.numel()} elements) cannot become {target}")
        return a.reshape(target)
    flags = tuple(isinstance(e, int) and e == 1 for e in entries)
    return fd._record("reshape", run, [arg, *scalars], [Tensor(fd, len(entries), arg.dtype, flags)])


def iota(length, start=None, step=None, dtype=DataType.Int):
    """ops.iota: start, start + step, ... (length values); start 0 and step 1 when None (the C++
    iota's defaults); an Int tensor unless dtype says otherwise."""
    fd = _fd()
    _check(isinstance(dtype, DataType) and dtype in TORCH_DTYPE, f"ops.iota: {dtype!r} is not a DataType")
    operands = [x for x in (length, start, step) if isinstance(x, Scalar)]
    for name, x in (("length", length), ("start", start), ("step", step)):
        _check(x is None and name != "length" or isinstance(x, Scalar) or
               (isinstance(x, (int, float)) and not isinstance(x, bool)),
               f"ops.iota: {name}={x!r} is neither a number nor a scalar of the definition")
    target = TORCH_DTYPE[dtype]

    def run(*values):
        it = iter(values)
        n, a, b = (next(it) if isinstance(x, Scalar) else x for x in (length, start, step))
        a, b = 0 if a is None else a, 1 if b is None else b
        return (torch.arange(int(n), dtype=torch.float64 if target.is_floating_point else torch.int64) * b + a
                ).to(target)
    return fd._record("iota", run, operands, [Tensor(fd, 1, target, (False,))])


def scatter(arg, index, src, dim):
    """ops.scatter(arg, index, src, dim): arg with src's elements written where index says along
    dim (torch.scatter's rule; index may be smaller than arg in the other dims); one rank for
    all three, an integer index, src in arg's dtype (the definition casts first)."""
    fd = _fd()
    _check(isinstance(arg, Tensor) and isinstance(index, Tensor), "ops.scatter takes tensors arg and index")
    _check(isinstance(src, (Tensor, Scalar)), "ops.scatter: src is a tensor or a scalar of the definition")
    _check(arg.ndim > 0, "scatter can not be applied to 0d tensor.")
    _check(arg.ndim == index.ndim and (not isinstance(src, Tensor) or src.ndim == arg.ndim),
           "self, index and src tensor should all have the same number of dimensions in scatter like ops.")
    _check(isinstance(dim, int) and -arg.ndim <= dim < arg.ndim, f"ops.scatter: dim {dim} of {arg.ndim} dims")
    _check(_category(index.dtype) == 1, f"ops.scatter: the index is {index.dtype}, not an integer tensor")
    _check(_dtype_of(src) == arg.dtype, f"ops.scatter: src is {_dtype_of(src)}, arg {arg.dtype}: cast first")
    d = dim % arg.ndim

    def run(a, i, s):
        _check(bool(((i >= 0) & (i < a.shape[d])).all()), "ops.scatter: an index out of range")
        return a.scatter(d, i, s) if isinstance(s, torch.Tensor) else a.scatter(d, i, s)
    return fd._record("scatter", run, [arg, index, src], [Tensor(fd, arg.ndim, arg.dtype, arg.broadcast)])


class _Ops:
    """fd.ops: the operations, acting on the definition being written."""


ops = _Ops()
for _name in _UNARY_TORCH:
    setattr(ops, _name, _unary(_name))
for _name in _BINARY_TORCH:
    setattr(ops, _name, _binary(_name))
for _name in ("sum", "max", "min", "prod"):
    setattr(ops, _name, _reduction(_name))
ops.where = where
ops.cast = cast
ops.broadcast_in_dim = broadcast_in_dim
ops.size = size
ops.var_mean = var_mean
ops.reshape = reshape
ops.squeeze = squeeze
ops.iota = iota
ops.scatter = scatter

__all__ = ["FusionDefinition", "DataType", "ops"]
