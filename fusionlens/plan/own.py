"""A target's own parallelism: what its example asks of torch's `parallelize_module` and
`fully_shard` on a DeviceMesh (as torchtitan's `parallelize_llama` does), read so that the
user's plan, not the planner's inference, is what is costed.

The example runs under torch's fake process group of the planned world size (this process
rank 0; torch.testing._internal.distributed.fake_pg, as fusionlens/distributed/transform.py
makes its meshes), so `init_device_mesh` and `dist.get_world_size()` answer as on the cluster.
While it runs, `parallelize_module`, `fully_shard` and `DistributedDataParallel` record what
they are asked (which Linears are colwise or rowwise, on a mesh of how many ranks; which
modules are FSDP units, resharded after the forward or not; DDP's group) and leave the module
as it is: the plan traces the whole model on the meta device and applies the recorded plan as
its own transforms (parallel.py shards exactly those Linears; ZeRO-3 on the units' mesh size).
"""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from fusionlens.frontend.arguments import sanitize


@dataclass
class Own:
    """What the example's own parallelism asked for, by module identity while it runs and by
    parameter name once resolved against the model (`resolve`)."""

    styles: dict[int, tuple[torch.nn.Module, str]] = field(default_factory=dict)  # id -> (module, style)
    tp: int | None = None  # ranks of the mesh parallelize_module was given
    sp: bool = False  # a SequenceParallel style, or a rowwise output left sharded on the sequence
    units: list[torch.nn.Module] = field(default_factory=list)  # fully_shard's modules
    dp: int | None = None
    reshard_after_forward: bool | None = None
    ddp: int | None = None  # ranks DistributedDataParallel was given
    bucket_cap_mb: float | None = None  # DDP's bucket_cap_mb, where the target gave one (plan/buckets.py)
    linears: dict[str, str] = field(default_factory=dict)  # parameter name (p_...) -> "colwise" / "rowwise"

    def resolve(self, model: torch.nn.Module) -> Own:
        """The recorded styles as the trace's parameter names (p_blocks_0_fc1_weight)."""
        for path, m in model.named_modules():
            found = self.styles.get(id(m))
            if found is not None and found[1] in ("colwise", "rowwise"):
                self.linears["p_" + sanitize(f"{path}.weight" if path else "weight")] = found[1]
        return self

    def options(self) -> dict[str, Any]:
        """The plan options the target's parallelism fixes."""
        out: dict[str, Any] = {}
        if self.tp is not None:
            out.update(tp=self.tp, sp=self.sp)
        if self.units:
            out.update(zero=3, dp=self.dp, reshard_after_forward=self.reshard_after_forward is not False)
        elif self.ddp is not None:
            out.update(zero=0, dp=self.ddp)
        return out

    @property
    def found(self) -> bool:
        return self.tp is not None or bool(self.units) or self.ddp is not None

    def describe(self) -> str:
        parts = []
        if self.tp is not None:
            parts.append(f"tensor parallel {self.tp} on {len(self.linears)} Linears" + (" with SP" if self.sp else ""))
        if self.units:
            parts.append(f"FSDP2 over {self.dp} ranks on {len(self.units)} units")
        elif self.ddp is not None:
            mb = self.bucket_cap_mb
            caps = "" if mb is None else f", buckets of {mb * 1024:g} KiB" if mb < 1 else f", buckets of {mb:g} MiB"
            parts.append(f"DDP over {self.ddp} ranks{caps}")
        return "the target's own parallelism: " + ", ".join(parts)


def _style(style: Any) -> tuple[str, bool]:
    """(colwise, rowwise, sequence or the style's class name; whether it leaves the sequence sharded)."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    outputs = getattr(style, "output_layouts", None)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    sequence = any(isinstance(p, Shard) and p.dim == 1 for p in outputs)
    if isinstance(style, SequenceParallel):
        return "sequence", True
    if isinstance(style, RowwiseParallel):  # its output left on Shard(1): sequence parallel after it
        return "rowwise", sequence
    if isinstance(style, ColwiseParallel):
        return "colwise", False
    return type(style).__name__, False


def _matching(module: torch.nn.Module, pattern: str) -> list[torch.nn.Module]:
    """The submodules a parallelize_module key names, its atoms matched as fnmatch patterns."""
    atoms = pattern.split(".")
    return [m for path, m in module.named_modules() if path and len(path.split(".")) == len(atoms)
            and all(fnmatch.fnmatch(a, p) for a, p in zip(path.split("."), atoms))]


@contextlib.contextmanager
def recording(world: int) -> Iterator[Own]:
    """Run a target's example under a fake process group of `world` ranks (unless one is up),
    recording its parallelize_module and fully_shard calls (see the module doc)."""
    import torch.distributed as dist
    import torch.distributed.fsdp as fsdp_api
    import torch.distributed.tensor.parallel as tp_api

    own = Own()

    def parallelize_module(module, device_mesh=None, parallelize_plan=None, **_):
        own.tp = device_mesh.size() if device_mesh is not None else world
        plans = parallelize_plan if isinstance(parallelize_plan, dict) else {"": parallelize_plan}
        for key, style in plans.items():
            name, sequence = _style(style)
            own.sp = own.sp or sequence
            for m in _matching(module, key) if key else [module]:
                own.styles[id(m)] = (m, name)
        return module

    def fully_shard(module, *, mesh=None, reshard_after_forward=None, **_):
        for m in module if isinstance(module, list) else [module]:
            own.units.append(m)
        own.dp = mesh.size() if mesh is not None else world
        if reshard_after_forward is not None and own.reshard_after_forward is None:
            own.reshard_after_forward = bool(reshard_after_forward)  # the first unit's: the root's is moot
        return module

    import torch.nn.parallel as ddp_api

    class distributed_data_parallel(ddp_api.DistributedDataParallel):  # a type still (isinstance checks)
        def __new__(cls, module, *_, process_group=None, bucket_cap_mb=None, **__):
            own.ddp = process_group.size() if process_group is not None else world
            own.bucket_cap_mb = bucket_cap_mb
            return module  # not an instance: __init__ does not run

    made = not dist.is_initialized()
    if made:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    saved = tp_api.parallelize_module, fsdp_api.fully_shard, ddp_api.DistributedDataParallel
    tp_api.parallelize_module, fsdp_api.fully_shard = parallelize_module, fully_shard
    ddp_api.DistributedDataParallel = distributed_data_parallel  # type: ignore[misc]
    try:
        yield own
    finally:
        tp_api.parallelize_module, fsdp_api.fully_shard, ddp_api.DistributedDataParallel = saved  # type: ignore
        if made:
            dist.destroy_process_group()
