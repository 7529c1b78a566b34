"""Parallelism as transforms of a program, applied on a device mesh with or without ranks.

    mesh = Mesh((2, 4), ("dp", "tp"))
    sharded = FSDP2("dp")(Program(model, (x,)), mesh)
    for c in sharded.collectives:         # kind, bytes a rank, group (ranks, mesh dim), line
        ...

A `Transform` is named and spans one dimension of a `Mesh`. Called on a `Program` (a module,
its example arguments, whether a training step is differentiated) and a mesh, it returns the
`ShardedProgram`: the program each rank runs (its forward trace and, in training, its backward
trace, before fusion) and the collectives it issues, read from their symbols
(fusionlens/distributed/vocabulary.py). Where no process group is up, the mesh is torch's fake
process group (torch.testing._internal.distributed.fake_pg) of the mesh's size, this process
rank 0: a mesh of thousands of ranks is built in one process, its collectives recorded and never
run (with the module on the meta device, no memory is taken either). Where a process group is
up, the mesh is made of its ranks, and the collectives run.

The transforms are the wrappings FusionLens compiles natively, applied as torch applies them
(to a copy of the module: the caller's is not changed): `DDP` (DistributedDataParallel on the
dimension's group: the backward all-reduces the gradients as its buckets fill,
fusionlens/distributed/ddp_overlap.py), `FSDP2` (fully_shard of the given submodules and the
root: each unit's parameters all-gathered at its call line, the gradients reduce-scattered,
fusionlens/distributed/fsdp.py), `TensorParallel` (parallelize_module with Colwise/Rowwise on
the given Linears: Megatron's f and g, fusionlens/distributed/tensor_parallel.py). The same
code traces, shards and records the collectives that fusionlens.jit, fusionlens.compile and a
compile target run on real ranks: the collectives of a mesh-applied transform are those a real
run records (tests/test_distributed_transform.py).
"""

from __future__ import annotations

import contextlib
import copy
import enum
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

from fusionlens.distributed import collectives, ddp as ddp_module, ddp_overlap, fsdp, tensor_parallel
from fusionlens.distributed.staging import CompileTransform, ReportInputs, Rewritten  # noqa: F401 (the API's)
from fusionlens.distributed.vocabulary import CollectiveKind, Group, ReduceOp, describe
from fusionlens.frontend import tracer as frontend
from fusionlens.ir.trace import Trace
from fusionlens.ir.vocabulary import ValueRole
from fusionlens.middle import passes
from fusionlens.middle.autograd import transform as autograd


@dataclass(frozen=True)
class Mesh:
    """A device mesh's shape: ranks along each named dimension (row-major, as torch's
    init_device_mesh lays them out)."""

    shape: tuple[int, ...]
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.shape) != len(self.names) or len(set(self.names)) != len(self.names):
            raise ValueError(f"a mesh needs one distinct name a dimension: {self.shape} {self.names}")
        if any(n < 1 for n in self.shape):
            raise ValueError(f"a mesh's dimensions hold at least one rank: {self.shape}")

    @property
    def world(self) -> int:
        return math.prod(self.shape)

    def size(self, dim: str) -> int:
        return self.shape[self.names.index(dim)]


@dataclass
class Program:
    """What a transform applies to: `module(*args, **kwargs)`, differentiated when `train`
    (the training step's backward, as the call with grad enabled would record it)."""

    module: torch.nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    train: bool = True


@dataclass(frozen=True)
class CollectiveRecord:
    """One collective a sharded program issues (each rank issues the same)."""

    kind: CollectiveKind
    program: str  # "forward" or "backward"
    bytes: int  # what each rank sends in
    group: Group
    reduce_op: ReduceOp | None
    file: str | None
    line: int | None


@dataclass
class ShardedProgram:
    """A program as each rank of `mesh` runs it after `transform`: its traces before fusion and
    its collectives, in program order (the forward's, then the backward's)."""

    transform: str
    mesh: Mesh
    forward: Trace
    backward: Trace | None
    collectives: list[CollectiveRecord]


class Transform(Protocol):
    """A parallelism applied to a program on one dimension (`dim`) of a mesh."""

    name: str
    dim: str

    def wrap(self, module: torch.nn.Module, mesh: Any) -> torch.nn.Module:
        """`module` wrapped as torch's own API does on `mesh` (a torch DeviceMesh), in place."""
        ...

    def __call__(self, program: Program, mesh: Mesh) -> ShardedProgram:
        """The program each rank of `mesh` runs, and its collectives."""
        ...


# --- the same transforms at the pipeline's declared points (compile, jit, targets) -------------

@dataclass
class Unwrapped:
    """A callable as FusionLens compiles it: `fn` traced with `kwargs` (FSDP2's shards added),
    under `transforms`."""

    fn: Any
    kwargs: dict[str, Any]
    transforms: list[CompileTransform]
    ddp: Any = None  # the DistributedDataParallel wrapper, whose forward runs around each call
    sharded: fsdp.Sharded | None = None

    def groups(self) -> list[str]:
        return list(dict.fromkeys(g for t in self.transforms for g in t.groups()))


def unwrap(fn: Any, args: tuple = (), kwargs: dict | None = None) -> Unwrapped:
    """What `fn` is compiled as under its wrappings: DDP's module (DDP's backward all-reduces a
    transform), an FSDP2 module's fsdp.Sharded taking its shards by keyword, a tensor-parallel
    module's plan (no plan where the arguments hold DTensors: those calls run eagerly)."""
    kwargs = dict(kwargs or {})
    transforms: list[CompileTransform] = []
    wrapper = fn if ddp_module.is_ddp(fn) else None
    if wrapper is not None:
        transforms.append(ddp_overlap.Synchronising(wrapper))
        fn, kwargs = transforms[-1].unwrap(fn, kwargs)
    sharded = fsdp.Sharded.of(fn)
    if sharded is not None:
        transforms.append(fsdp.Gathering(sharded))
        fn, kwargs = transforms[-1].unwrap(fn, kwargs)
    plan = None if collectives.dtensor_arguments(args, kwargs) else tensor_parallel.find(fn)
    if plan is not None:
        transforms.append(tensor_parallel.Parallel(plan))
        fn, kwargs = transforms[-1].unwrap(fn, kwargs)
    return Unwrapped(fn, kwargs, transforms, wrapper, sharded)


# --- the mesh: real ranks, or torch's fake process group -------------------------------------

@contextlib.contextmanager
def world(mesh: Mesh, device: str = "cpu") -> Iterator[Any]:
    """A torch DeviceMesh of `mesh`'s shape: on the process group that is up (its world must be
    the mesh's), else on a fake process group of the mesh's size made for the while (this
    process rank 0; collectives return without communicating), destroyed after."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    made = not dist.is_initialized()
    if made:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=mesh.world)
    elif dist.get_world_size() != mesh.world:
        raise ValueError(f"the process group has {dist.get_world_size()} ranks, the mesh {mesh.world}")
    try:
        yield init_device_mesh(device, mesh.shape, mesh_dim_names=mesh.names)
    finally:
        if made:
            dist.destroy_process_group()


# --- the transforms ------------------------------------------------------------------------

@dataclass
class DDP:
    """DistributedDataParallel on `dim`: the backward all-reduces the mean gradient, bucket by
    bucket as DDP buckets them (`bucket_cap_mb`), each issued where its last gradient is made."""

    dim: str
    bucket_cap_mb: float | None = None
    name: str = "ddp"

    def wrap(self, module: torch.nn.Module, mesh: Any) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        group = mesh.get_group(self.dim)
        caps: dict[str, Any] = {} if self.bucket_cap_mb is None else {"bucket_cap_mb": self.bucket_cap_mb}
        if not any(p.is_meta for p in module.parameters()):
            return DistributedDataParallel(module, process_group=group, **caps)
        with _no_shape_check():  # on the meta device: nothing to read or broadcast
            return DistributedDataParallel(module, process_group=group, init_sync=False, **caps)

    def __call__(self, program: Program, mesh: Mesh) -> ShardedProgram:
        return _apply(self, program, mesh)


@contextlib.contextmanager
def _no_shape_check() -> Iterator[None]:
    """DDP's construction without its check that every rank's parameters have the same shapes
    (it reads their values: `.item()`, which a meta tensor has not). On the meta device every
    rank's module is this one (the transform applies it to a copy), so the check has nothing to
    find; `init_sync=False` skips the broadcast of the parameters, which have no values either."""
    import torch.nn.parallel.distributed as ddp_impl

    check = ddp_impl._verify_param_shape_across_processes
    ddp_impl._verify_param_shape_across_processes = lambda *args, **kwargs: None
    try:
        yield
    finally:
        ddp_impl._verify_param_shape_across_processes = check


@dataclass
class FSDP2:
    """fully_shard on `dim` of each submodule of `units` (module paths), then of the root: each
    unit's parameters sharded on dim 0, all-gathered at its call, its gradients reduce-scattered."""

    dim: str
    units: Sequence[str] = ()
    reshard_after_forward: bool | None = None  # None: FSDP2's default (True but at the root)
    name: str = "fsdp2"

    def wrap(self, module: torch.nn.Module, mesh: Any) -> torch.nn.Module:
        from torch.distributed.fsdp import fully_shard

        for unit in [*(module.get_submodule(path) for path in self.units), module]:
            fully_shard(unit, mesh=mesh[self.dim], reshard_after_forward=self.reshard_after_forward)
        return module

    def __call__(self, program: Program, mesh: Mesh) -> ShardedProgram:
        return _apply(self, program, mesh)


class Style(enum.Enum):
    """How tensor parallel splits an nn.Linear (torch's ColwiseParallel, RowwiseParallel)."""

    COLWISE = "colwise"
    ROWWISE = "rowwise"


@dataclass
class TensorParallel:
    """parallelize_module on `dim` with `plan` (module path -> Style) of nn.Linear layers."""

    dim: str
    plan: dict[str, Style] = field(default_factory=dict)
    name: str = "tensor_parallel"

    def wrap(self, module: torch.nn.Module, mesh: Any) -> torch.nn.Module:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        styles = {Style.COLWISE: ColwiseParallel, Style.ROWWISE: RowwiseParallel}
        return parallelize_module(module, mesh[self.dim], {p: styles[s]() for p, s in self.plan.items()})

    def __call__(self, program: Program, mesh: Mesh) -> ShardedProgram:
        return _apply(self, program, mesh)


# --- applying one -------------------------------------------------------------------------------

def _apply(transform: DDP | FSDP2 | TensorParallel, program: Program, mesh: Mesh) -> ShardedProgram:
    if transform.dim not in mesh.names:
        raise ValueError(f"{transform.name} spans {transform.dim!r}, which the mesh {mesh.names} has not")
    device = _device(program)
    with world(mesh, "cpu" if device.type == "meta" else device.type) as device_mesh:
        wrapped = transform.wrap(copy.deepcopy(program.module), device_mesh)
        with torch.set_grad_enabled(program.train):
            forward, backward = _traces(wrapped, program)
        group = device_mesh.get_group(transform.dim).group_name
        found = [*_records(forward, "forward", group, transform.dim),
                 *(_records(backward, "backward", group, transform.dim) if backward is not None else [])]
    return ShardedProgram(transform.name, mesh, forward, backward, found)


def _device(program: Program) -> torch.device:
    return next((p.device for p in program.module.parameters()), torch.device("cpu"))


def _traces(wrapped: torch.nn.Module, program: Program) -> tuple[Trace, Trace | None]:
    """The forward (and in training the backward) trace of the wrapped module's call, as the
    pipeline makes them before fusion, through the same transforms (`unwrap`) and hooks as
    compile, jit and compile_target: traced under each's `tracing`, decomposed, optimised, each's
    `rewrite_forward`, differentiated, the first `rewrite_backward` that rewrites (DDP's
    gradient all-reduces issued in its backward)."""
    unwrapped = unwrap(wrapped, program.args, program.kwargs)
    fn, kwargs, transforms = unwrapped.fn, unwrapped.kwargs, unwrapped.transforms
    if not transforms or (unwrapped.ddp is not None and len(transforms) == 1):
        module = fn if isinstance(fn, torch.nn.Module) else wrapped
        why = fsdp.unsupported(module) if fsdp.is_sharded(module) else tensor_parallel.unsupported(module)
        if why is not None:
            raise ValueError(f"the transform makes a module FusionLens does not compile: {why}")
    with contextlib.ExitStack() as stack:
        for t in transforms:
            stack.enter_context(t.tracing())
        traced = frontend.trace(fn, program.args, kwargs, hooks=collectives.HOOKS)
    if traced.eager_only is not None:
        raise ValueError(f"the sharded program runs eagerly: {traced.eager_only}")
    optimised = passes.optimise(passes.decompose(traced.trace))
    for t in transforms:
        optimised = t.rewrite_forward(optimised)
    tensors = frontend.user_tensors(fn, program.args, kwargs)
    constants = [traced.constants[v.name] for v in optimised.inputs if v.role is not ValueRole.INPUT]
    inputs = tensors + constants
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in inputs)):
        return optimised, None
    d = autograd.differentiate(optimised, [t.requires_grad for t in inputs])
    rewritten = next((r for t in transforms
                      if (r := t.rewrite_backward(d, list(traced.trace.inputs), constants, d.backward)) is not None),
                     None)
    return d.forward, rewritten.trace if rewritten is not None else d.backward


def _records(trace: Trace, program: str, group_name: str, dim: str) -> list[CollectiveRecord]:
    """The collectives `trace` issues, read from their symbols; the group the transform's mesh
    dimension makes is named by that dimension."""
    out = []
    for b in trace.bound_symbols:
        c = describe(b.sym)
        if c is None or c.kind is None:
            continue
        sent = c.sent_of(b)
        nbytes = math.prod(int(d) for d in sent.shape) * sent.dtype.itemsize if hasattr(sent, "dtype") else 0
        group = c.group_of(b)
        group = replace(group, mesh_dim=dim) if group.name == group_name else group
        where = b.provenance
        out.append(CollectiveRecord(c.kind, program, nbytes, group, c.reduce_op_of(b),
                                    where.file if where else None, where.line if where else None))
    return out
