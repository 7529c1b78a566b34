"""What a FusionGroup computes, independent of the strides it is called with: its domain and
rows, which values sit below a reduction, the passes over each row (and the online softmax
pairs among them); plus the Python identifiers and literals the generated code spells."""

from __future__ import annotations

import keyword
import math
import re

from torch.utils import _pytree as pytree

from fusionlens.middle.contract import Decline, FusionGroup
from fusionlens.executors import symbolic
from fusionlens.ir.trace import BoundSymbol, Value
from fusionlens.ops import prims
from fusionlens.middle.reinplace import IN_PLACE_SCATTERS

from . import tuning
from .support import FLOATS, REDUCTIONS, _dtype_problem, can_take


def _literal(x) -> str:
    if isinstance(x, bool):
        return "True" if x else "False"
    if isinstance(x, float):
        if math.isnan(x):
            return 'float("nan")'
        if math.isinf(x):
            return 'float("inf")' if x > 0 else 'float("-inf")'
        return repr(x)
    if isinstance(x, int):
        return repr(x)
    raise Decline(f"a constant of type {type(x).__name__} ({x!r}) is not generated for Triton")


_RESERVED = set(keyword.kwlist) | {
    "tl", "triton", "torch", "pid", "offs", "mask", "rows", "cols", "row_mask", "col_mask", "start",
    "float", "int", "range", "min", "max", "abs", "sum", "len", "print", "BLOCK", "BLOCK_M", "BLOCK_N",
    "grid", "math", "True", "False", "None", "INDEX_64", "index_64", "SPLIT", "split_id", "splits", "part_mask",
    "num_warps",
}


def _ident(name: str) -> str:
    clean = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    if not clean or clean[0].isdigit():
        clean = "v_" + clean
    if (clean in _RESERVED or clean.startswith(("_fl_", "acc_", "on_", "wf_", "r_", "c_", "i_", "fl_", "sz_", "st_"))
            or re.fullmatch(r"(out|s|part)\d+(_ptr)?", clean) or clean.endswith("_ptr")):  # s0: a size symbol
        clean = "v_" + clean
    return clean


def _scatters(group: FusionGroup) -> dict[str, BoundSymbol]:
    """Output name -> the scatter making it: a store of its window into a copy of its base (into
    the base itself for an in-place one: module.py's launcher)."""
    out = {b.outputs[0].name: b for b in group.bsyms if b.sym in prims.SCATTERS or b.sym in IN_PLACE_SCATTERS}
    if out and group.reduction_dims:
        raise Decline("a scatter in a reduction region is not generated for Triton")
    return out


def _value_args(b: BoundSymbol) -> list[Value]:
    return [a for a in pytree.tree_leaves((b.args, b.kwargs)) if isinstance(a, Value)]


class _Analysis:
    """What a group computes, independent of the strides it is called with."""

    def __init__(self, group: FusionGroup):
        self.group = group
        # sizes as ints, or sympy expressions of a dynamic program's symbols (never SymInts:
        # comparing those records guards)
        self.env = symbolic.env_of_group(group)
        self._shapes: dict[str, tuple] = {}
        self.domain = symbolic.dims(group.domain)
        self.n = len(self.domain)
        self.rdims = tuple(sorted(int(d) % max(self.n, 1) for d in group.reduction_dims))
        self.kept = tuple(d for d in range(self.n) if d not in self.rdims)
        self.reduced_shape = tuple(self.domain[d] for d in self.kept)
        self.keepdim_shape = tuple(1 if d in self.rdims else s for d, s in enumerate(self.domain))
        self.is_reduction = bool(self.rdims)
        self._columns(group)
        self.inputs = list(group.inputs)
        self.outputs = list(group.outputs)
        self.input_index = {v.name: i for i, v in enumerate(self.inputs)}
        self.producer: dict[str, BoundSymbol] = {}  # value name -> the op computing it
        self.values = {v.name: v for v in self.inputs}
        for b in group.bsyms:
            for o in b.outputs:
                self.producer[o.name] = b
                self.values[o.name] = o
        self.host_scalars = self._host_scalars()
        if any(isinstance(s, int) and s == 0 for s in self.domain):
            raise Decline("the region is empty (a zero-size dimension); torch runs it")
        for b in group.bsyms:
            reason = can_take(b)
            if reason:
                raise Decline(reason)
        for v in self.inputs + self.outputs:
            problem = _dtype_problem(v.dtype)
            if problem:
                raise Decline(problem)
        for o in self.outputs:
            if o.name not in self.producer and o.name not in self.input_index:
                raise Decline(f"output {o.name} is not computed in the region")
        self.scatters = _scatters(group)
        # A value is "pure" when no reduction is upstream: it can be computed anywhere.
        self.pure = {v.name: True for v in self.inputs}
        self.reductions: list[BoundSymbol] = []
        for b in group.bsyms:
            ins = _value_args(b)
            for a in ins:
                if a.name not in self.values:
                    raise Decline(f"{b.sym.name} reads {a.name}, which is neither an input nor computed here")
            is_red = b.sym in REDUCTIONS
            if self._column_op(b, ins):
                continue
            if is_red:
                self.reductions.append(b)
                src = b.args[0]
                dims = tuple(sorted(int(d) for d in b.args[1]))
                if self.shape(src) != self.domain or dims != self.rdims:
                    raise Decline(f"{b.sym.name} over dims {dims} of {list(src.shape)} does not match the "
                                  f"region's reduction over {self.rdims} of {list(self.domain)}")
            p = not is_red and all(self.pure.get(a.name, True) for a in ins)
            for o in b.outputs:
                self.pure[o.name] = p
        if self.reductions and not self.is_reduction:
            raise Decline("the region has reductions but no reduction dims")
        # rows and their elements
        self.nrows = math.prod(self.reduced_shape) if self.is_reduction else 1
        self.ncols = math.prod(self.domain[d] for d in self.rdims) if self.is_reduction else 1
        for o in self.outputs:
            if o.name not in self.scatters and self.level_shape(o) is None:
                raise Decline(f"output {o.name} has shape {list(o.shape)}, neither the region's domain "
                              f"{list(self.domain)} nor its reduced shape")
        self._passes()
        self.sms = tuning.SM_COUNT  # the SMs a split reduction fills (runtime.generate: the device's)
        if self.is_reduction and self.nrows == 1 and self.hint(self.ncols) > tuning.ONE_PROGRAM_LIMIT \
                and not self.splittable():
            raise Decline(f"a reduction of all {self.ncols} elements to one value would run on one program "
                          "(only a one-pass sum, prod, amax or amin of a static size is split); torch runs it")

    def _columns(self, group: FusionGroup):
        """A two-axis group's column sums (over the kept dims): what they make and the ops on it
        are "col"-level values, computed by the combine kernel (two_axis.py)."""
        self.cdims = tuple(sorted(int(d) % max(self.n, 1) for d in group.column_dims))
        self.col_reductions: list[BoundSymbol] = []
        self.col_level: set[str] = set()
        if self.cdims and self.cdims != self.kept:
            raise Decline(f"column dims {list(self.cdims)} are not the dims {list(self.kept)} the rows keep")

    def _host_scalars(self) -> set[str]:
        """The 0-dim CPU tensors beside GPU tensors: scalars, as in eager (the launcher moves them
        over); Decline for any other mix of devices."""
        scalars = {v.name for v in self.inputs if v.ndim == 0 and str(v.device) == "cpu"}
        elsewhere = {str(v.device) for v in self.inputs + self.outputs if v.name not in scalars} - {"cpu"}
        host = scalars if elsewhere else set()
        devices = sorted({str(v.device) for v in self.inputs + self.outputs if v.name not in host})
        if len(devices) > 1:
            raise Decline(f"the region's tensors are on different devices ({', '.join(devices)}); "
                          "one kernel reads one device")
        return host

    def _column_op(self, b: BoundSymbol, ins: list[Value]) -> bool:
        """Whether `b` is a column sum or an op on one (a "col"-level value); Decline where it
        mixes a column value with the rows' (the contract: column values are outputs only)."""
        if not self.cdims:
            return False
        if b.sym in REDUCTIONS and tuple(sorted(int(d) for d in b.args[1])) == self.cdims:
            if b.sym is not prims.sum or b.outputs[0].dtype not in FLOATS:
                raise Decline(f"a column {b.sym.name} to {b.outputs[0].dtype} is not generated for Triton")
            if self.shape(b.args[0]) != self.domain or b.args[0].name in self.col_level:
                raise Decline(f"the column sum {b.outputs[0].name} does not reduce a value of the domain")
            self.col_reductions.append(b)
        elif not any(a.name in self.col_level for a in ins):
            return False
        elif any(a.name not in self.col_level and a.name not in self.input_index for a in ins):
            raise Decline(f"{b.sym.name} mixes a column sum with the rows' values")
        col_keep = tuple(1 if d in self.cdims else s for d, s in enumerate(self.domain))
        if any(self.shape(o) not in (tuple(self.domain[d] for d in self.rdims), col_keep) for o in b.outputs):
            raise Decline(f"{b.sym.name} brings a column sum back to the rows")
        for o in b.outputs:
            self.col_level.add(o.name)
            self.pure[o.name] = False
        return True

    def splittable(self) -> bool:
        """Can a row be split across programs (reduction.py `_pick_split`)? A static row length,
        one pass of sum/prod/amax/amin, no full-shape output (it would need the row's result).
        A two-axis group never is: its programs share out the rows (two_axis.py)."""
        return (not self.cdims and self.env is None and self.npasses == 1 and not self.online
                and not any(b.sym is prims.var_mean for b in self.reductions)
                and not any(self.level_shape(o) == "full" for o in self.outputs))

    def shape(self, v: Value) -> tuple:
        """v's shape as ints and expressions (symbolic.dims)."""
        s = self._shapes.get(v.name)
        if s is None:
            s = self._shapes[v.name] = symbolic.dims(v.shape)
        return s

    def hint(self, x) -> int | float:
        """The example's value of a size: for block sizes and limits, never for correctness."""
        return symbolic.hint(x, self.env) if self.env is not None else x

    def level_shape(self, v) -> str | None:
        if v.name in self.col_level:
            return "col"
        s = self.shape(v)
        if s == self.domain:
            if self.is_reduction and not self.pure.get(v.name, True) and s == self.keepdim_shape:
                return "row"
            return "full"
        if self.is_reduction and s in (self.reduced_shape, self.keepdim_shape):
            return "row"
        return None

    def canonical(self, v) -> tuple[int | None, ...]:
        """The mapping (value dim -> domain dim or None) of a full or row-level value."""
        s = self.shape(v)
        kind = self.level_shape(v)
        if kind is None:
            raise Decline(f"{v.name} has shape {list(s)}, neither the region's domain {list(self.domain)} "
                          "nor its reduced shape")
        m: tuple[int | None, ...]
        if kind == "col":  # the domain without the column dims, or with them kept as size 1
            m = self.rdims if len(s) == len(self.rdims) else tuple(
                None if d in self.cdims else d for d in range(self.n))
        elif kind == "full" and s == self.domain:
            m = tuple(range(self.n))
        elif s == self.keepdim_shape:
            m = tuple(None if d in self.rdims else d for d in range(self.n))
        else:
            m = self.kept
        return tuple(None if s[i] == 1 else d for i, d in enumerate(m))

    def _passes(self):
        """Assign each reduction to a pass over the rows; find online softmax pairs."""
        self.pass_of: dict[str, int] = {}  # reduction output name -> pass
        self.online: dict[int, BoundSymbol] = {}  # sum bsym id -> amax bsym (sum(exp(A - bcast(amax(A))))
        level = {v.name: 0 for v in self.inputs}
        for b in self.group.bsyms:
            if b.outputs and b.outputs[0].name in self.col_level:
                continue  # the combine kernel's (two_axis.py)
            base = max((level[a.name] for a in _value_args(b)), default=0)
            if b.sym in REDUCTIONS:
                p = base
                partner = self._online_partner(b) if b.sym is prims.sum else None
                if partner is not None and self.pass_of[partner.outputs[0].name] == base - 1:
                    p = base - 1
                    self.online[id(b)] = partner
                for o in b.outputs:
                    self.pass_of[o.name] = p
                    level[o.name] = p + 1
            else:
                for o in b.outputs:
                    level[o.name] = base
        self.npasses = 1 + max(self.pass_of.values(), default=-1)

    def _follow_broadcasts(self, v):
        while isinstance(v, Value):
            b = self.producer.get(v.name)
            if b is None or b.sym is not prims.broadcast_in_dim:
                return v
            v = b.args[0]
        return v

    def _online_partner(self, b: BoundSymbol) -> BoundSymbol | None:
        e = b.args[0]
        eb = self.producer.get(e.name)
        if eb is None or eb.sym is not prims.exp:
            return None
        s = eb.args[0]
        sb = self.producer.get(s.name) if isinstance(s, Value) else None
        if sb is None or sb.sym is not prims.sub or not all(isinstance(a, Value) for a in sb.args[:2]):
            return None
        a, mb = sb.args[0], sb.args[1]
        m = self._follow_broadcasts(mb)
        rb = self.producer.get(m.name)
        if rb is None or rb.sym is not prims.amax or rb.args[0].name != a.name:
            return None
        if a.dtype not in FLOATS:
            return None
        return rb
