"""What the two kernel writers (pointwise.py, reduction.py) share: the kernel's signature,
the coalescing of domain dims into index runs, 64-bit indexing, the dry run that collects
every access before the real emission."""

from __future__ import annotations

import math

import torch

from fusionlens.executors import symbolic

from . import tuning
from .analysis import _Analysis, _ident
from .emitter import _Emitter, _Run
from .sizes import KernelSizes, is_stride_symbol
from .support import TL_DTYPE

_INT32_LIMIT = 2**31 - 1
INDEX_LIMIT = _INT32_LIMIT - tuning.POINTWISE_BLOCK * 4  # an offset from here on needs 64-bit indexing


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _store_cast(v: str, o) -> str:
    if o.dtype == torch.float32:
        return v
    return f"({v}).to({TL_DTYPE[o.dtype]})"


class _Writer:
    """Writes one kernel's body; subclasses give `_body` (and set constexprs, grid, warps)."""

    constexprs: dict[str, int]  # the kernel's tl.constexpr arguments (block sizes) -> value
    grid: str  # the launch grid, as the launcher writes it
    grid_size: list[int]  # the grid at the example's sizes
    warps: int
    stages: int = 1  # num_stages (tuning.stages_for)
    split: int = 1  # a split reduction's programs a row (reduction.py); 1: one kernel

    def __init__(self, an: _Analysis, strides: list[tuple], rid: str):
        self.an = an
        self.strides = [symbolic.dims(s) for s in strides]
        self.rid = rid
        self.kname = f"{rid}_kernel"
        # a symbolic group's kernel: sizes are arguments, 64-bit indexing is the launcher's call
        self.symbolic = an.env is not None
        self.sizes = self._new_sizes()

    def _new_sizes(self) -> KernelSizes:
        return KernelSizes(self.an.env, self.an.inputs, self.strides, [_ident(v.name) for v in self.an.inputs])

    def sz(self, x, role: str | None = None) -> str:
        """A size as the kernel spells it (a literal, or its argument's name)."""
        return self.sizes.text(x, role)

    def grid_for(self, count, block: int) -> str:
        """The grid of `count` work items in programs of `block` (a literal for static sizes)."""
        self.grid_size = [math.ceil(int(self.an.hint(count)) / block)]
        if isinstance(count, int):
            return repr((math.ceil(count / block),))
        return f"(triton.cdiv({self.sz(count)}, {block}),)"

    def pid_lines(self, int64: bool | None) -> list[str]:
        """The program id, 64-bit where offsets may pass 2**31 (None: the launcher says, per call)."""
        if int64 is not None:
            return [f"pid = tl.program_id(0){'.to(tl.int64)' if int64 else ''}"]
        return ["pid = tl.program_id(0)",
                "if INDEX_64:  # the launcher found an offset past 2**31 at this call's sizes",
                "    pid = pid.to(tl.int64)"]

    def kind_comment(self) -> str:
        """The `# kind: ...` header line of the module."""
        raise NotImplementedError

    def _body(self, em: _Emitter) -> list[str]:
        """The kernel's lines, written through `em`."""
        raise NotImplementedError

    def out_ds(self, o) -> tuple[int, ...]:
        # full outputs are contiguous in the domain
        ds, acc = [0] * self.an.n, 1
        for d in reversed(range(self.an.n)):
            ds[d] = acc if self.an.domain[d] != 1 else 0
            acc *= self.an.domain[d]
        return tuple(ds)

    def make_runs(self, accesses: list[tuple[int, ...]]) -> dict[str, list[_Run]]:
        an = self.an
        groups = {"rows": list(an.kept), "cols": list(an.rdims)} if an.is_reduction else {"offs": list(range(an.n))}
        prefix = {"rows": "r_", "cols": "c_", "offs": "i_"}
        runs: dict[str, list[_Run]] = {}
        for g, dims in groups.items():
            dims = [d for d in dims if an.domain[d] != 1]
            merged: list[list[int]] = []
            for d in dims:
                if merged and all(ds[merged[-1][-1]] == ds[d] * an.domain[d] for ds in accesses):
                    merged[-1].append(d)
                else:
                    merged.append([d])
            runs[g] = [_Run(m, math.prod(an.domain[d] for d in m), f"{prefix[g]}{k}") for k, m in enumerate(merged)]
        return runs

    def index_lines(self, group: str, runs: list[_Run]) -> list[str]:
        out = []
        for k, r in enumerate(runs):
            inner = math.prod(x.size for x in runs[k + 1:])
            if len(runs) == 1:
                expr = group
            elif k == 0:
                expr = f"{group} // {self.sz(inner)}"
            elif inner == 1:
                expr = f"{group} % {self.sz(r.size)}"
            else:
                expr = f"({group} // {self.sz(inner)}) % {self.sz(r.size)}"
            out.append(f"{r.var} = {expr}  # domain dims {r.dims}")
        return out

    def needs_int64(self) -> bool | None:
        """Whether some offset passes 2**31; None for a symbolic group (the launcher decides)."""
        if self.symbolic:
            return None
        an = self.an
        worst = math.prod(an.domain)
        for v, st in zip(an.inputs, self.strides):
            worst = max(worst, sum((s - 1) * abs(x) for s, x in zip(v.shape, st)) + 1)
        return worst >= INDEX_LIMIT

    def worst_offsets(self) -> list:
        """What the launcher of a symbolic group compares with INDEX_LIMIT: the domain's size and
        the extent of each input read through strides passed as arguments."""
        an = self.an
        out = [math.prod(an.domain)]
        for v, st in zip(an.inputs, self.strides):
            if any(is_stride_symbol(x) for x in st):
                out.append(1 + sum((s - 1) * x for s, x in zip(an.shape(v), st)))
        return out

    def write(self) -> tuple[list[str], set[str], dict[str, list[_Run]]]:
        """(kernel body lines, helper functions it uses, index runs)."""
        # dry run to learn every access, then coalesce dims against all of them
        dry = _Emitter(self.an, self.strides, None, self.rid, self.sizes)
        self._body(dry)
        accesses = dry.accesses + [self.out_ds(o) for o in self.an.outputs if self.an.level_shape(o) == "full"]
        runs = self.make_runs(accesses)
        self.sizes = self._new_sizes()  # only what the kernel really spells becomes an argument
        em = _Emitter(self.an, self.strides, runs, self.rid, self.sizes)
        lines = self._body(em)
        self.em = em
        return lines, em.helpers, runs

    def partials(self) -> list[tuple[str, torch.dtype]]:
        """(argument, dtype) of the buffers a split reduction's kernels pass partial results in."""
        return []

    def has_combine(self) -> bool:
        """Whether a second kernel combines the first one's partial results (`combine_kernel`)."""
        return False

    def _signature(self) -> list[str]:
        an = self.an
        args = [f"{_ident(v.name)}_ptr" for v in an.inputs]
        args += [f"out{k}_ptr" for k in range(len(an.outputs))]
        return args + [p for p, _ in self.partials()] + self.sizes.args
