"""A FusionGroup's nvFuser FusionDefinition, written as readable Python source.

The source uses only nvFuser's public Python API (`fd.define_tensor`, `fd.define_scalar`,
`fd.ops.<op>`, `fd.ops.size`, `fd.add_output`) and runs as a script against either
`nvfuser_direct` or the older `nvfuser`; `build_definition` executes it against a Backend.
Writing needs no nvFuser.

A symbolic group's (a dynamic program's: fusionlens/ir/symbols.py) definition serves every size:
its inputs' extents are symbolic (-1) as always, a broadcast target's extent that depends on
a symbol is the extent of a tensor that has it (`fd.ops.size(T0, dim=1)`), and any other
number that does (a mean's 1/N, an extent no tensor has) is a scalar input of the definition
(`fd.define_scalar(None, dtype=...)`), given at each call after the tensors: `Definition.scalars`
says which, and the runtime computes them from the inputs' sizes.
"""

from __future__ import annotations

import keyword
import math
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from fusionlens.middle.contract import Decline, FusionGroup
from fusionlens.executors import symbolic
from fusionlens.executors.nvfuser import squeeze
from fusionlens.executors.nvfuser.backend import Backend
from fusionlens.executors.nvfuser.support import (
    BINARY, COMPARISONS, DTYPES, FLOAT_UNARY, INTEGER_ACCUMULATING, LOW_PRECISION, REDUCTIONS, UNARY, InputSpec,
    can_take)
from fusionlens.ir.trace import DTYPE_SHORT, Value
from fusionlens.ops import prims

_RESERVED = {"fd", "FusionDefinition", "DataType", "torch", "float", "int", "bool"}


def _scalar_source(x) -> tuple[str, str]:
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
    def __init__(self, group: FusionGroup, specs: list[InputSpec], api: str):
        self.group, self.specs, self.api = group, specs, api
        self.lines: list[str] = []
        self.names: dict[str, str] = {}  # trace value name -> python name in the definition
        self.defined: dict[str, str] = {}  # input name -> its define_tensor (before any squeeze)
        self.squeeze = _squeeze_plan(group)  # a two-axis group's size-1 dims squeezed out, or None
        self.dtypes: dict[str, torch.dtype] = {}  # python name -> torch dtype of that nvFuser value
        self.used: set[str] = set()
        self.scalars = 0
        self.last_loc: tuple[str, int] | None = None  # (file, line) of the latest source comment
        # a symbolic group's numbers: expression -> its name (a size or a scalar input), and
        # the scalar inputs' expressions in the order the definition takes them
        self.numbers: dict[Any, str] = {}  # keyed (expression, a Double?) or (tensor name, dim)
        self.scalar_inputs: list[tuple[Any, bool]] = []

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

    def scalar(self, x, as_dtype: torch.dtype | None = None) -> str:
        if symbolic.is_symbolic(x):
            return self.symbolic_number(x, as_dtype)
        if as_dtype is not None and as_dtype.is_floating_point and not isinstance(x, bool):
            x = float(x)
        literal, dt = _scalar_source(x)
        name = self.fresh(f"S{self.scalars}")
        self.scalars += 1
        self.emit(f"{name} = fd.define_scalar({literal}, dtype=DataType.{dt})")
        return name

    def symbolic_number(self, x, as_dtype: torch.dtype | None) -> str:
        """A number that depends on the sizes: an integer that is some input's extent is that
        extent (`fd.ops.size`); anything else a scalar input, computed at each call."""
        from fusionlens.ir import symbols  # sympy: only a dynamic program's regions

        e = symbolic.dim(x)
        floating = (as_dtype is not None and as_dtype.is_floating_point) or not e.is_integer
        if not floating:
            for v in self.group.inputs:
                for d, size in enumerate(symbolic.dims(v.shape)):
                    if size == e:
                        return self.size_of(self.defined[v.name], d)
        name = self.numbers.get((e, floating))
        if name is None:
            name = self.numbers[(e, floating)] = self.fresh(f"S{self.scalars}")
            self.scalars += 1
            self.emit(f"{name} = fd.define_scalar(None, dtype=DataType.{'Double' if floating else 'Int'})  "
                      f"# {symbols.source(e)}, given at each call")
            self.scalar_inputs.append((e, floating))
        return name

    def size_of(self, tensor: str, d: int) -> str:
        """The extent of dim `d` of a tensor of the definition, as a scalar (once per dim)."""
        name = self.numbers.get((tensor, d))
        if name is None:
            name = self.numbers[(tensor, d)] = self.fresh(f"{tensor}_size{d}")
            self.emit(f"{name} = fd.ops.size({tensor}, dim={d})")
        return name

    def target_shape(self, a: str, ashape, shape, bdims) -> str:
        """A broadcast's target shape: literals, and for a symbol's extent the extent of the
        input dim it comes from (of tensor `a`, of shape `ashape`), or of another tensor that has it."""
        if not symbolic.is_symbolic(shape):
            return repr([int(s) for s in shape])
        ashape = symbolic.dims(ashape)
        src_of = {dst: src for src, dst in enumerate(bdims)}
        out = []
        for dst, size in enumerate(symbolic.dims(shape)):
            src = src_of.get(dst)
            if isinstance(size, int):
                out.append(repr(size))
            elif src is not None and ashape[src] == size:
                out.append(self.size_of(a, src))
            else:
                out.append(self.symbolic_number(size, None))
        return "[" + ", ".join(out) + "]"

    def cast(self, name: str, dtype: torch.dtype) -> str:
        if self.dtypes[name] == dtype:
            return name
        out = self.fresh(f"{name}_{DTYPE_SHORT[dtype]}")
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
            self.emit(f"# {p.source_comment()}")

    def header(self) -> list[str]:
        g = self.group
        head = [f"# nvFuser FusionDefinition for fusion region {g.id} ({g.kind}); "
                f"iteration domain {list(g.domain)}"
                + (f", reduced dims {list(g.reduction_dims)}" if g.reduction_dims else "")
                + (f", column sums over dims {list(g.column_dims)} (one fusion: nvFuser's inner-outer "
                   "persistent scheduler)" if g.column_dims else "")]
        if self.squeeze is not None:
            head.append(f"# size-1 dims {list(self.squeeze.dropped)} squeezed out of the inputs and broadcast back at "
                        "the outputs: the inner-outer scheduler takes no broadcast dim")
        if g.source_lines:
            head.append("# from:")
            head += [f"#   {line}" for line in g.source_lines]
        head.append("# inputs: " + ", ".join(f"{v.name} {v.type_str()}" for v in g.inputs))
        head.append("# outputs: " + ", ".join(f"{v.name} {v.type_str()}" for v in g.outputs))
        head.append(f"from {self.api} import FusionDefinition, DataType")
        return head

    def write(self) -> tuple[str, str]:
        """(the definition function and the block that builds `fd`, the function's name)."""
        g = self.group
        fname = "nvfuser_fusion_" + re.sub(r"\W", "_", g.id)
        self.lines.append(f"def {fname}(fd: FusionDefinition) -> None:")
        for v, spec in zip(g.inputs, self.specs):
            name = self.fresh(v.name)
            self.names[v.name] = self.defined[v.name] = name
            self.dtypes[name] = v.dtype
            self.emit(f"{name} = fd.define_tensor(shape={list(spec.shape)}, contiguity={list(spec.contiguity)}, "
                      f"dtype=DataType.{DTYPES[v.dtype]}, is_cpu={spec.is_cpu}, "
                      f"stride_order={list(spec.stride_order)})")
            if self.squeeze is not None and self.squeeze.drops(v):
                self._squeeze_input(v, name)
        for b in g.bsyms:
            why = can_take(b)
            if why is not None:
                raise Decline(f"{b.sym.name}: {why}")
            self.provenance(b)
            self.op(b)
        produced_inputs = {v.name for v in g.inputs}
        for v in g.outputs:
            name = self.value(v)
            if self.squeeze is not None and self.squeeze.drops(v):
                name = self._unsqueeze_output(v, name)
            elif v.name in produced_inputs:  # an input passed through: nvFuser returns a copy via set
                copy = self.fresh(f"{name}_copy")
                self.emit(f"{copy} = fd.ops.set({name})")
                name = copy
            self.emit(f"fd.add_output({name})")
        body = "\n".join(self.lines)
        tail = f"\n\n\nwith FusionDefinition() as fd:\n    {fname}(fd)\n"
        return body + tail, fname

    def op(self, b):
        sym = b.sym
        types = "; ".join(f"{o.name}: {o.type_str()}" for o in b.outputs)
        comment = f"  # {sym.name} -> {types}"
        if sym is prims.convert_element_type:
            self._convert(b, comment)
        elif sym in UNARY:
            self._unary(b, comment)
        elif sym in BINARY:
            self._binary(b, comment)
        elif sym is prims.where:
            self._where(b, comment)
        elif sym is prims.broadcast_in_dim:
            self._broadcast(b, comment)
        elif sym in REDUCTIONS:
            a, dims = b.args[0], self.reduced_dims(b)
            result_dtype, src = a.dtype, self.value(a)
            if sym in INTEGER_ACCUMULATING and not a.dtype.is_floating_point:
                result_dtype = torch.int64  # nvFuser sums and multiplies integers and bools in Int
            if sym is prims.sum and a.dtype in LOW_PRECISION:  # torch accumulates in float32, rounds once
                result_dtype, src = torch.float32, self.cast(src, torch.float32)
            self._emit_op(b.outputs[0], f"fd.ops.{REDUCTIONS[sym]}({src}, {dims})", result_dtype, comment)
        elif sym is prims.var_mean:
            self._var_mean(b, comment)
        elif sym is prims.scatter:
            a, index, src, dim = b.args
            self._emit_op(b.outputs[0], f"fd.ops.scatter({self.value(a)}, {self.value(index)}, "
                                        f"{self.cast(self.value(src), a.dtype)}, {dim})", a.dtype, comment)
        elif sym is prims.strided_scatter:
            self._strided_scatter(b, comment)
        else:  # can_take said yes to something op() does not know: a bug here
            raise Decline(f"{sym.name} has no nvFuser translation")

    def reduced_dims(self, b) -> list[int]:
        """A reduction's dims, numbered in its squeezed input where the group is squeezed."""
        a, dims = b.args[0], b.args[1]
        return self.squeeze.dims(a, dims) if self.squeeze is not None else sorted(int(d) for d in dims)

    def _broadcast(self, b, comment: str):
        a, out, dims = b.args[0], b.outputs[0], [int(d) for d in b.args[2]]
        ashape, shape = list(a.shape), list(b.args[1])
        if self.squeeze is not None:  # without the size-1 dims: a's and the target's kept ones
            kept_a, kept_out = self.squeeze.kept(a), self.squeeze.kept(out)
            ashape, shape = [ashape[i] for i in kept_a], [shape[j] for j in kept_out]
            dims = [kept_out.index(dims[i]) for i in kept_a]
        target = self.target_shape(self.value(a), ashape, shape, dims)
        self._emit_op(out, f"fd.ops.broadcast_in_dim({self.value(a)}, shape={target}, broadcast_dims={dims})",
                      a.dtype, comment)

    def _squeeze_input(self, v: Value, name: str):
        """`fd.ops.squeeze` of the domain's size-1 dims out of input v, at the top."""
        assert self.squeeze is not None
        out = self.fresh(f"{name}_sq")
        self.emit(f"{out} = fd.ops.squeeze({name}, dims={self.squeeze.drops(v)})  # size-1 dims out")
        self.names[v.name], self.dtypes[out] = out, v.dtype

    def _unsqueeze_output(self, v: Value, name: str) -> str:
        """Output v brought back to its shape: its squeezed tensor broadcast to the size-1 dims."""
        assert self.squeeze is not None
        kept = self.squeeze.kept(v)
        shape = self.target_shape(name, [v.shape[i] for i in kept], list(v.shape), kept)
        out = self.fresh(f"{name}_out")
        self.emit(f"{out} = fd.ops.broadcast_in_dim({name}, shape={shape}, broadcast_dims={kept})  "
                  "# size-1 dims back")
        return out

    def _emit_op(self, out: Value, call: str, result_dtype: torch.dtype, comment: str):
        """`out = <call>`, a value of nvFuser dtype `result_dtype`, bound to trace value `out`."""
        res = self.fresh(out.name)
        self.emit(f"{res} = {call}")
        self.dtypes[res] = result_dtype
        self.bind(out, res, result_dtype, comment)

    def _convert(self, b, comment: str):
        src = self.value(b.args[0])
        target = b.args[1] if len(b.args) > 1 else b.kwargs["dtype"]
        self._emit_op(b.outputs[0], f"fd.ops.cast({src}, dtype=DataType.{DTYPES[target]})", target, comment)

    def _unary(self, b, comment: str):
        sym, a = b.sym, b.args[0]
        compute = a.dtype
        if sym in FLOAT_UNARY and not a.dtype.is_floating_point:
            compute = torch.get_default_dtype()
        src = self.cast(self.value(a), compute)
        nv = UNARY[sym]
        if sym is prims.bitwise_not and a.dtype == torch.bool:
            nv = "logical_not"
        result_dtype = torch.bool if sym in (prims.logical_not, prims.isnan) else compute
        self._emit_op(b.outputs[0], f"fd.ops.{nv}({src})", result_dtype, comment)

    def _binary(self, b, comment: str):
        sym, out = b.sym, b.outputs[0]
        x, y = b.args[0], b.args[1]
        if sym in COMPARISONS:
            compute = torch.result_type(*(a.meta() if isinstance(a, Value) else _typed(a) for a in (x, y)))
            result_dtype = torch.bool
        else:
            compute = out.dtype
            result_dtype = out.dtype
        xs, ys = self.operand(x, compute), self.operand(y, compute)
        self._emit_op(out, f"fd.ops.{BINARY[sym]}({xs}, {ys})", result_dtype, comment)

    def _where(self, b, comment: str):
        out = b.outputs[0]
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
        self._emit_op(out, f"fd.ops.where({ps}, {xs}, {ys})", result_dtype, comment)

    def _var_mean(self, b, comment: str):
        a, dims = b.args[0], self.reduced_dims(b)
        correction = b.args[2] if len(b.args) > 2 else b.kwargs.get("correction", 1)
        src = self.value(a)
        var, mean = b.outputs
        vs, ms = self.fresh(var.name), self.fresh(mean.name)
        self.emit(f"{vs}, {ms} = fd.ops.var_mean({src}, {dims}, {int(correction)})")
        self.dtypes[vs] = self.dtypes[ms] = a.dtype
        self.lines[-1] += comment
        self.names[var.name] = self.cast(vs, var.dtype)
        self.names[mean.name] = self.cast(ms, mean.dtype)

    def _strided_scatter(self, b, comment: str):
        """The window's row-major numbers in the base, offset + sum(iota(n_d) * stride_d), then one
        fd.ops.scatter into the base flattened, reshaped back."""
        a, src, offset, strides = b.args
        n, m = math.prod(a.shape), math.prod(src.shape)
        window = list(src.shape) or [1]
        flat = self.fresh(f"{self.value(a)}_flat")
        self.emit(f"{flat} = fd.ops.reshape({self.value(a)}, [{n}])")
        terms = []
        for d, (size, stride) in enumerate(zip(src.shape, strides)):
            if size == 1:
                continue
            it = self.fresh(f"{b.outputs[0].name}_at{d}")
            self.emit(f"{it} = fd.ops.iota({self.scalar(size)}, {self.scalar(0)}, {self.scalar(stride)}, "
                      "dtype=DataType.Int)")
            if len(window) == 1:
                terms.append(it)
                continue
            terms.append(self.fresh(f"{it}_b"))
            self.emit(f"{terms[-1]} = fd.ops.broadcast_in_dim({it}, shape={window}, broadcast_dims=[{d}])")
        at = self.fresh(f"{b.outputs[0].name}_at")
        if not terms:  # one element
            self.emit(f"{at} = fd.ops.iota({self.scalar(1)}, {self.scalar(offset)}, {self.scalar(1)}, "
                      "dtype=DataType.Int)")
        else:
            total = terms[0]
            for t in terms[1:]:
                nxt = self.fresh(f"{at}_sum")
                self.emit(f"{nxt} = fd.ops.add({total}, {t})")
                total = nxt
            if offset:
                nxt = self.fresh(f"{at}_off")
                self.emit(f"{nxt} = fd.ops.add({total}, {self.scalar(offset)})")
                total = nxt
            self.emit(f"{at} = fd.ops.reshape({total}, [{m}])" if len(window) > 1 else f"{at} = {total}")
        values = self.fresh(f"{self.value(src)}_flat")
        self.emit(f"{values} = fd.ops.reshape({self.cast(self.value(src), a.dtype)}, [{m}])")
        put = self.fresh(f"{b.outputs[0].name}_flat")
        self.emit(f"{put} = fd.ops.scatter({flat}, {at}, {values}, 0)")
        self._emit_op(b.outputs[0], f"fd.ops.reshape({put}, {list(a.shape)})", a.dtype, comment)

    @staticmethod
    def _as(x, dtype):
        x = _typed(x)  # a symbol's number by its kind (its type is all that is asked here)
        return float(x) if dtype.is_floating_point and not isinstance(x, bool) else x


def _squeeze_plan(group: FusionGroup) -> squeeze.Squeeze | None:
    """A two-axis group over a domain with size-1 dims: how its values lose them (support.takes_columns)."""
    if not group.column_dims or not squeeze.size_one_dims(group.domain):
        return None
    plan = squeeze.plan(group.domain, group.bsyms)
    if isinstance(plan, str):
        raise Decline(f"a two-axis region whose size-1 dims cannot be squeezed out: {plan}")
    return plan


@dataclass
class Definition:
    """A written definition: the script, its body without the import line, its function's
    name, and the scalar inputs it takes after the tensors (a symbolic group's: (expression of
    the sizes, whether a Double), in order)."""

    source: str
    body: str
    fname: str
    scalars: list[tuple[Any, bool]] = field(default_factory=list)  # (sympy expression, a Double?)


def write_definition(group: FusionGroup, specs: list[InputSpec], api: str) -> Definition:
    """The definition of `group` for inputs described by `specs`."""
    w = _Writer(group, specs, api)
    body, fname = w.write()
    return Definition("\n".join(w.header()) + "\n\n\n" + body, body, fname, list(w.scalar_inputs))


def write_source(group: FusionGroup, specs: list[InputSpec], api: str) -> tuple[str, str, str]:
    """(the definition as a script, its body without the import line, its function's name)
    for inputs described by `specs`."""
    d = write_definition(group, specs, api)
    return d.source, d.body, d.fname


def _typed(x):
    """A number as `torch.result_type` reads it: a symbol's SymFloat or SymInt by its kind only
    (its value would record a guard)."""
    if isinstance(x, torch.SymFloat):
        return 1.0
    if isinstance(x, torch.SymInt):
        return 1
    if isinstance(x, torch.SymBool):
        return True
    return x


def definition_source(group: FusionGroup, api: str = "nvfuser_direct", device_type: str = "cuda") -> str:
    """The FusionDefinition of `group` for contiguous inputs, as a Python script; needs no nvFuser."""
    for b in group.bsyms:
        why = can_take(b)
        if why is not None:
            raise Decline(f"{b.sym.name}: {why}")
    specs = [InputSpec.of_value(v, device_type) for v in group.inputs]
    return write_source(group, specs, api)[0]


def build_definition(body: str, backend: Backend):
    """Run a definition's source (without its import line) against `backend`; returns fd."""
    namespace = {"FusionDefinition": backend.module.FusionDefinition, "DataType": backend.module.DataType}
    exec(compile(body, "<nvfuser definition>", "exec"), namespace)
    return namespace["fd"]
