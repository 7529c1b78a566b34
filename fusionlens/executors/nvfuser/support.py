"""What the nvFuser executor takes: the prims it maps to fd.ops, the dtypes nvFuser has, the
two-axis regions it writes as one definition (`takes_columns`), and how nvFuser describes a
tensor input (symbolic shape, contiguity, stride order).

The tables are keyed by the prim Symbols of fusionlens/ops/prims.py and give the fd.ops name.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fusionlens.middle.contract import Layout
from fusionlens.executors import symbolic
from fusionlens.executors.nvfuser import squeeze
from fusionlens.ir.sizes import contiguous_strides
from fusionlens.ir.trace import SymbolKind, Value, dtype_name
from fusionlens.ops import prims

# torch dtype -> nvFuser DataType member
DTYPES = {
    torch.float64: "Double", torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Int", torch.int32: "Int32", torch.bool: "Bool",
}
LOW_PRECISION = (torch.float16, torch.bfloat16)  # a sum of these is written in Float (definition.py)

# prim -> fd.ops name
UNARY = {
    prims.abs: "abs", prims.neg: "neg", prims.exp: "exp", prims.exp2: "exp2", prims.log: "log",
    prims.log2: "log2", prims.log1p: "log1p", prims.expm1: "expm1", prims.sqrt: "sqrt", prims.rsqrt: "rsqrt",
    prims.sin: "sin", prims.cos: "cos", prims.tan: "tan", prims.tanh: "tanh", prims.sigmoid: "sigmoid",
    prims.erf: "erf", prims.floor: "floor", prims.ceil: "ceil", prims.round: "round", prims.trunc: "trunc",
    prims.sign: "sign", prims.reciprocal: "reciprocal", prims.logical_not: "logical_not",
    prims.bitwise_not: "bitwise_not", prims.isnan: "isnan",
}
# unary ops that compute in floating point (torch gives float32 for integer inputs)
FLOAT_UNARY = {prims.exp, prims.exp2, prims.log, prims.log2, prims.log1p, prims.expm1, prims.sqrt, prims.rsqrt,
               prims.sin, prims.cos, prims.tan, prims.tanh, prims.sigmoid, prims.erf, prims.reciprocal}
ROUNDING = {prims.floor, prims.ceil, prims.round, prims.trunc}
BOOL_UNARY = {prims.logical_not, prims.bitwise_not, prims.isnan}  # the unary ops of a bool tensor
BINARY = {
    prims.add: "add", prims.sub: "sub", prims.mul: "mul", prims.div: "div", prims.pow: "pow",
    prims.remainder: "remainder", prims.fmod: "fmod", prims.maximum: "maximum", prims.minimum: "minimum",
    prims.eq: "eq", prims.ne: "ne", prims.lt: "lt", prims.le: "le", prims.gt: "gt", prims.ge: "ge",
    prims.bitwise_and: "bitwise_and", prims.bitwise_or: "bitwise_or", prims.bitwise_xor: "bitwise_xor",
}
COMPARISONS = set(prims.COMPARISONS)
BITWISE = {prims.bitwise_and, prims.bitwise_or, prims.bitwise_xor, prims.bitwise_not}
REDUCTIONS = {prims.sum: "sum", prims.amax: "max", prims.amin: "min", prims.prod: "prod"}
OTHERS = {prims.where, prims.convert_element_type, prims.broadcast_in_dim, prims.var_mean}
SCATTERS = {prims.strided_scatter, prims.scatter}  # fd.ops.scatter (a window: into the base flattened)
INTEGER_ACCUMULATING = {prims.sum, prims.prod}  # nvFuser gives Int for integer and bool inputs


# --- tensor descriptors (nvFuser's convention) -----------------------------------------------

def tensor_descriptor(shape, strides) -> tuple[tuple[int, ...], tuple[bool | None, ...], tuple[int, ...]]:
    """(symbolic shape, contiguity, stride_order) of a tensor, as nvFuser defines its inputs.

    Symbolic shape: 1 for a size-1 dim (nvFuser specialises on broadcast dims), -1 otherwise.
    stride_order[d] is the rank of dim d from the innermost (0) outwards, dims sorted by
    stride, larger first, ties kept in their logical order. contiguity lists the dims in that
    physical order: None for a broadcast dim (size 1 or stride 0); otherwise whether the
    stride equals size * stride of the next inner non-broadcast dim (1 for the innermost).
    """
    shape, strides = [int(s) for s in shape], [int(s) for s in strides]
    n = len(shape)
    extents = [1 if s == 1 else -1 for s in shape]
    physical = sorted(range(n), key=lambda d: -strides[d])  # stable: ties keep logical order
    stride_order = [0] * n
    for pos, d in enumerate(physical):
        stride_order[d] = n - 1 - pos
    broadcast = [shape[d] == 1 or strides[d] == 0 for d in physical]
    contiguity: list[bool | None] = []
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
    return tuple(extents), tuple(contiguity), tuple(stride_order)


@dataclass(frozen=True)
class InputSpec:
    dtype: torch.dtype
    shape: tuple[int, ...]  # symbolic: -1 or 1
    contiguity: tuple[bool | None, ...]  # in physical order; None for a broadcast dim
    stride_order: tuple[int, ...]
    is_cpu: bool

    @staticmethod
    def of_tensor(t: torch.Tensor, device_type: str) -> InputSpec:
        shape, contiguity, order = tensor_descriptor(t.shape, t.stride())
        return InputSpec(t.dtype, shape, contiguity, order,
                         t.ndim == 0 and t.device.type == "cpu" and device_type != "cpu")

    @staticmethod
    def of_layout(layout: Layout, device_type: str) -> InputSpec:
        """As `of_tensor` of a tensor of this layout (fusionlens/middle/contract.py)."""
        shape, contiguity, order = tensor_descriptor(layout.shape, layout.stride)
        return InputSpec(layout.dtype, shape, contiguity, order,
                         len(layout.shape) == 0 and layout.device == "cpu" and device_type != "cpu")

    @staticmethod
    def of_value(v: Value, device_type: str) -> InputSpec:
        example = symbolic.example_shape(v.shape)  # a symbol's dim is -1 at any size: its example's will do
        shape, contiguity, order = tensor_descriptor(example, contiguous_strides(example))
        return InputSpec(v.dtype, shape, contiguity, order,
                         v.ndim == 0 and v.device.type == "cpu" and device_type != "cpu")


# --- what the executor takes -------------------------------------------------------------------

def _dtype_ok(dtype) -> bool:
    return dtype in DTYPES


def _category(x) -> int:
    """0 bool, 1 integer, 2 floating: of a dtype or a python number."""
    if isinstance(x, torch.dtype):
        return 0 if x == torch.bool else (2 if x.is_floating_point or x.is_complex else 1)
    if isinstance(x, (bool, torch.SymBool)):
        return 0
    return 1 if isinstance(x, (int, torch.SymInt)) else 2


def _scalar_operands_share_dtype(scalars_and_tensors, tensor: Value) -> str | None:
    for x in scalars_and_tensors:
        if not isinstance(x, Value) and _category(x) > _category(tensor.dtype):
            return (f"a {type(x).__name__} scalar with a {dtype_name(tensor.dtype)} tensor: prim operands "
                    "share one dtype")
    return None


def _scatter_problem(bsym) -> str | None:
    """A scatter's base, window and index as nvFuser takes them: static sizes and offsets (a
    dynamic program's symbolic windows are not written yet), dtypes it has, a base of rank >= 1."""
    base = bsym.args[0]
    values = list(bsym.inputs()) + list(bsym.outputs)
    if any(not _dtype_ok(v.dtype) for v in values):
        return "a scatter of a dtype with no nvFuser DataType here"
    if symbolic.is_symbolic(base.shape) or any(symbolic.is_symbolic(v.shape) for v in values):
        return "a scatter of symbolic sizes is not written for nvFuser"
    if base.ndim == 0:
        return "a scatter into a 0-dim tensor"
    if bsym.sym is prims.strided_scatter and not all(
            type(x) is int for x in (bsym.args[2], *bsym.args[3])):
        return "a window at symbolic offsets is not written for nvFuser"
    return None


def takes_columns(domain: tuple, rdims: tuple[int, ...], cdims: tuple[int, ...], bsyms: list) -> str | None:
    """None where one FusionDefinition of these ops (row reductions over `rdims`, column sums
    over `cdims`: a norm's backward) is what nvFuser's inner-outer persistent scheduler takes
    as one fusion; else why not. Its compile-time check (csrc/scheduler/normalization_inner_outer.cpp
    canScheduleCompileTime, normalization_utils.cpp checkIfReductionsAreInnerOuter) wants each
    inner reduction's dims [I, ..., R, R] and each outer one's [R, R, ..., I, I], the outer
    reducing exactly the inner's iteration dims, every dim an iteration or reduction dim. A
    size-1 dim (a batch of one) is a broadcast dim in a definition: the definition squeezes the
    domain's size-1 dims out (squeeze.py), where every row and every column reduction keeps a
    dim that is not one. Symbolic sizes are no obstacle: a
    definition's extents are symbolic (-1) anyway. Whether the rows fit its registers and
    shared memory is nvFuser's decision at run time (canScheduleRunTime): where they do not,
    nvFuser segments the same definition into more kernels, with the same results."""
    n = len(domain)
    if tuple(sorted(rdims)) != tuple(range(n - len(rdims), n)) or tuple(sorted(cdims)) != tuple(range(n - len(rdims))):
        return (f"rows reduced over dims {list(rdims)} and columns over {list(cdims)} of {n}: nvFuser's inner-outer "
                "scheduler takes row reductions over the innermost dims and column reductions over the others")
    ones = squeeze.size_one_dims(domain)
    for what, dims in (("row", rdims), ("column", cdims)):
        if set(dims) <= set(ones):
            return (f"every {what} dim of the domain {list(domain)} is size 1: squeezed out of the definition "
                    f"(nvFuser's inner-outer scheduler takes no broadcast dim), no {what} reduction would be left")
    if ones:
        plan = squeeze.plan(domain, bsyms)
        if isinstance(plan, str):
            return f"the domain's size-1 dims {list(ones)} cannot be squeezed out of the definition: {plan}"
    for b in bsyms:
        if b.sym in REDUCTIONS and tuple(sorted(b.args[1])) == tuple(sorted(cdims)):
            if b.sym is not prims.sum or not b.args[0].dtype.is_floating_point:
                return (f"a column {b.sym.name} of {dtype_name(b.args[0].dtype)} (a two-axis region's columns "
                        "are float sums)")
    return None


def can_take(bsym) -> str | None:
    """None when this op maps to fd.ops; otherwise why it does not."""
    sym = bsym.sym
    if sym.kind is not SymbolKind.PRIM:
        return f"{sym.name} is not a prim; nvFuser takes prims only"
    if sym in SCATTERS:
        return _scatter_problem(bsym)
    if sym not in UNARY and sym not in BINARY and sym not in REDUCTIONS and sym not in OTHERS:
        return (f"{sym.name} is not in the fusion vocabulary (fusionlens/middle/contract.py: elementwise, "
                "broadcast_in_dim, sum/amax/amin/prod/var_mean)")
    name = sym.name.removeprefix("prims.")  # for the messages below
    for v in list(bsym.inputs()) + list(bsym.outputs):
        if not _dtype_ok(v.dtype):
            return f"dtype {dtype_name(v.dtype)} has no nvFuser DataType here"
    for x in list(bsym.args) + list(bsym.kwargs.values()):
        if isinstance(x, complex):
            return "complex scalars are not supported"
    if sym is prims.convert_element_type:
        target = bsym.args[1] if len(bsym.args) > 1 else bsym.kwargs.get("dtype")
        if not _dtype_ok(target):
            return f"cast to {target} has no nvFuser DataType here"
    if sym in UNARY:
        a = bsym.args[0]
        if not isinstance(a, Value):
            return "a unary op of a python number is not a tensor op"
        if sym in FLOAT_UNARY and not a.dtype.is_floating_point:
            return (f"{name} of a {dtype_name(a.dtype)} tensor: the prim keeps the dtype, torch gives a float "
                    "(decompositions cast first)")
        if sym in ROUNDING and not a.dtype.is_floating_point:
            return f"{name} of an integer tensor is a copy in torch; not sent to nvFuser"
        if a.dtype == torch.bool and sym not in BOOL_UNARY:
            return f"{name} of a bool tensor is not supported"
        if sym is prims.bitwise_not and a.dtype.is_floating_point:
            return "bitwise_not of a floating tensor"
    if sym in BINARY:
        if sym in BITWISE and any(isinstance(x, Value) and x.dtype.is_floating_point for x in bsym.args[:2]):
            return f"{name} of a floating tensor"
        tensors = [x for x in bsym.args[:2] if isinstance(x, Value)]
        if not tensors:
            return "no tensor operand"
        if sym is prims.div and not tensors[0].dtype.is_floating_point:
            return "div of integer tensors: the prim keeps the dtype, torch divides truly (decompositions cast first)"
        why = _scalar_operands_share_dtype(bsym.args[:2], tensors[0])
        if why is not None:
            return why
    if sym is prims.where:
        pred = bsym.args[0]
        if not isinstance(pred, Value) or pred.dtype != torch.bool:
            return "where needs a bool tensor condition"
        values = [x for x in bsym.args[1:3] if isinstance(x, Value)]
        if not values:
            return "where of two scalars"
        why = _scalar_operands_share_dtype(bsym.args[1:3], values[0])
        if why is not None:
            return why
    if sym is prims.broadcast_in_dim:
        a, shape, dims = bsym.args[0], symbolic.dims(bsym.args[1]), tuple(bsym.args[2])
        if any(d2 <= d1 for d1, d2 in zip(dims, dims[1:])):
            return "nvFuser's broadcast_in_dim needs strictly increasing broadcast_dims"
        ashape = symbolic.dims(a.shape)  # compared as expressions: comparing SymInts records guards
        for src, dst in enumerate(dims):
            if ashape[src] != 1 and ashape[src] != shape[dst]:
                return "broadcast_in_dim changes a non-size-1 dim"
    if sym in REDUCTIONS or sym is prims.var_mean:
        a, dims = bsym.args[0], tuple(bsym.args[1])
        if not dims:
            return "a reduction over no dims"
        if a.ndim == 0:
            return "a reduction of a 0-dim tensor"
        if sym in (prims.prod, prims.var_mean) and a.dtype in LOW_PRECISION:
            return (f"a {dtype_name(a.dtype)} {name} (torch accumulates low-precision floats in float32; "
                    "FusionLens decompositions cast first, as Thunder's nvFuser executor requires)")
        if sym in INTEGER_ACCUMULATING and not a.dtype.is_floating_point and a.dtype != torch.int64:
            return (f"a {dtype_name(a.dtype)} {name}: the prim keeps the dtype, torch gives int64 "
                    "(decompositions cast first)")
        if sym is prims.var_mean and not a.dtype.is_floating_point:
            return "var_mean of a non-floating tensor"
    return None
