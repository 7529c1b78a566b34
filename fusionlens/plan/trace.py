"""A training target traced at full size on the meta device: one micro-batch's forward and
backward programs (the same `pipeline.Program`s, regions and lines as every compile), with
each op placed in the model: before the repeated blocks (`pre`: embeddings), in a block, or
after them (`post`: final norm, output layer, loss).

A transformer is a stack of identical blocks (an `nn.ModuleList`: HF's `model.layers`,
GPT's `blocks`). By default the program is traced with the stack cut to its first block, so
a 126-layer 405B model costs one layer's trace; every block's ops are that block's at the
same shapes, so the plan scales them by the layer count. `blocks=None` traces every block
(docs/plan.md: both measured in benchmarks/RESULTS.md). Nothing is allocated: the example
runs with the meta device as default, so parameters and activations have shapes only.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch

from fusionlens.driver import pipeline
from fusionlens.frontend.arguments import sanitize
from fusionlens.ir.trace import BoundSymbol, Trace, Value
from fusionlens.ir.vocabulary import Stage
from fusionlens.options import CompileOptions


@dataclass
class Param:
    name: str  # the trace's input name (p_blocks_0_fc1_weight)
    numel: int
    ndim: int
    where: str  # "pre", "block" or "post"; a tied weight used on both sides: "both"


@dataclass
class Traced:
    """One micro-batch's programs and where each op sits."""

    programs: list[pipeline.Program]  # forward, backward
    parts: dict[str, list[str]]  # program kind -> per source-trace op: "pre", "block", "post"
    layers: int  # blocks in the model
    traced_blocks: int  # blocks in the trace (1 when scaled by repetition)
    block_path: str | None  # "model.layers"; None: no repeated blocks found
    params: list[Param]  # every parameter of the whole model (block 0 standing for every block)
    block_params: int  # elements in one block
    saved: list[Value]  # what the backward reads from the forward
    micro_batch: int
    seq: int
    compile_ms: float
    notes: list[str] = field(default_factory=list)
    own: Any = None  # own.Own: the target's own parallelize_module / fully_shard plan, resolved
    call: Any = None  # (module, args, kwargs): what issue 27's transforms apply to (plan/units.py)
    units: dict[Any, Any] = field(default_factory=dict)  # plan/units.py's cache
    call_line: tuple[str, int] | None = None  # where the model is called (a target's return line)
    grads: list[str] = field(default_factory=list)  # per backward output: the forward input it is the gradient of

    def ops(self, kind: str) -> list[BoundSymbol]:
        return self.source(kind).bound_symbols

    def source(self, kind: str) -> Trace:
        return next(p for p in self.programs if p.kind == kind).source

    @property
    def total_params(self) -> int:
        blocks = sum(p.numel for p in self.params if p.where == "block")
        rest = sum(p.numel for p in self.params if p.where != "block")
        return rest + blocks * self.layers // max(self.traced_blocks, 1)


def find_blocks(model: torch.nn.Module) -> tuple[str, torch.nn.ModuleList] | None:
    """The model's largest stack of identical blocks: (its path, the ModuleList)."""
    best = None
    for path, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) >= 2:
            kinds = {(type(b), tuple((n, tuple(p.shape)) for n, p in b.named_parameters())) for b in m}
            if len(kinds) == 1 and (best is None or len(m) > len(best[1])):
                best = (path, m)
    return best


@contextlib.contextmanager
def _cut(model: torch.nn.Module, path: str, keep: int):
    parent_path, _, attr = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    whole = getattr(parent, attr)
    setattr(parent, attr, torch.nn.ModuleList(list(whole)[:keep]))
    try:
        yield
    finally:
        setattr(parent, attr, whole)


def trace(fn, args: tuple, kwargs: dict | None = None, blocks: int | None = 1, own: Any = None) -> Traced:
    """Trace one training micro-batch of `fn(*args, **kwargs)` (its tensors on the meta device).
    `blocks`: how many of the repeated blocks to keep (None: all); `own`: the target's own
    parallelism recorded while its example ran (fusionlens/plan/own.py)."""
    kwargs = kwargs or {}
    model = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    if not isinstance(model, torch.nn.Module):
        raise ValueError("a plan's target returns a module (or a bound method of one) that returns the loss")
    found = find_blocks(model)
    layers = len(found[1]) if found else 1
    keep = layers if blocks is None or found is None else min(blocks, layers)
    options = CompileOptions(previews=False, executors=("torch",))
    with torch.device("meta"), _cut(model, found[0], keep) if found else contextlib.nullcontext():
        compiled = pipeline.compile_program(fn, args, kwargs, options)
    if compiled.eager_only or compiled.differentiated is None:
        why = compiled.eager_only or "no parameter or input requires grad: a plan is of a training step"
        raise ValueError(f"cannot plan this target: {why}")
    prefix = "p_" + sanitize(found[0]) + "_" if found else None
    parts = {str(p.kind): _parts(p.source, prefix) for p in compiled.programs}
    parts["backward"] = _by_line(compiled.programs[1].source, parts["backward"], compiled.forward.source,
                                 parts["forward"])
    params = _params(model, compiled.forward.source, parts["forward"], found, keep)
    shape = _tokens_shape(args, kwargs)
    block_params = sum(p.numel for p in params if p.where == "block") // max(keep, 1)
    notes = [] if found is None or keep == layers else [
        f"traced {keep} of {layers} blocks of {found[0]}; the others repeat it"]
    if own is not None:
        own.resolve(model)
        notes.append(own.describe())
    inputs = compiled.forward.source.inputs
    return Traced(compiled.programs, parts, layers, keep, found[0] if found else None, params, block_params,
                  list(compiled.differentiated.saved), shape[0], shape[1], compiled.compile_ms, notes, own,
                  (model, tuple(args), kwargs),
                  grads=[inputs[i].name for i in compiled.differentiated.grad_inputs])


def _tokens_shape(args, kwargs) -> tuple[int, int]:
    """(micro-batch, sequence): the first tensor argument's first two dims."""
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor) and a.ndim >= 2:
            return int(a.shape[0]), int(a.shape[1])
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor) and a.ndim == 1:
            return 1, int(a.shape[0])
    raise ValueError("a plan's target takes a micro-batch: a tensor argument of shape (batch, sequence, ...)")


def _uses(b: BoundSymbol) -> list[str]:
    return [v.name for v in b.inputs() if isinstance(v, Value)]


def _parts(source: Trace, prefix: str | None) -> list[str]:
    """Per op: before the blocks, in them, or after. The blocks span from the first op that
    reads a block parameter to the first later op that reads another parameter (a final norm,
    an output layer); in a backward the order is reversed, so what comes first is `post`."""
    ops = source.bound_symbols
    if prefix is None:
        return ["block"] * len(ops)
    block = [any(n.startswith(prefix) for n in _uses(b)) for b in ops]
    other = [any(n.startswith("p_") and not n.startswith(prefix) for n in _uses(b)) for b in ops]
    if not any(block):
        return ["pre"] * len(ops)
    first = block.index(True)
    last = max(i for i, x in enumerate(block) if x)
    end = next((i for i in range(last + 1, len(ops)) if other[i]), len(ops))
    backward = source.stage is Stage.BACKWARD
    before, after = ("post", "pre") if backward else ("pre", "post")
    if backward:  # the backward of the blocks runs from the first block op to the last one
        end = last + 1
        first = next((i for i in range(first - 1, -1, -1) if other[i]), -1) + 1
    return [before if i < first else "block" if i < end else after for i in range(len(ops))]


def _line(b: BoundSymbol):
    p = b.provenance
    return (p.file, p.line) if p is not None else None


def _by_line(backward: Trace, parts: list[str], forward: Trace, forward_parts: list[str]) -> list[str]:
    """A backward op takes the part of the forward ops of its line where they all have one
    (a dropout mask the backward regenerates belongs to its block, wherever it runs)."""
    seen: dict = {}
    for b, part in zip(forward.bound_symbols, forward_parts):
        seen.setdefault(_line(b), set()).add(part)
    out = []
    for b, part in zip(backward.bound_symbols, parts):
        known = seen.get(_line(b), set())
        out.append(next(iter(known)) if len(known) == 1 and _line(b) is not None else part)
    return out


def _params(model, forward: Trace, parts: list[str], found, keep: int) -> list[Param]:
    """Every parameter of the model; the block stack counted as its first `keep` blocks."""
    where: dict[str, set] = {}
    for b, part in zip(forward.bound_symbols, parts):
        for n in _uses(b):
            if n.startswith("p_"):
                where.setdefault(n, set()).add(part)
    out = []
    prefix = found[0] + "." if found else None
    for name, p in model.named_parameters():
        if prefix and name.startswith(prefix):
            index = int(name[len(prefix):].split(".")[0])
            if index >= keep:
                continue
            side = "block"
        else:
            seen = where.get("p_" + sanitize(name), {"pre"})
            side = "both" if {"pre", "post"} <= seen else ("post" if "post" in seen else "pre")
        out.append(Param("p_" + sanitize(name), p.numel(), p.ndim, side))
    return out
