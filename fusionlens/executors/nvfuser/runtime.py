"""Running definitions: what `generate` returns (Generated) and the callable inside it.

Definitions are built once per input signature (InputSpec of every input) and cached; a
signature does not depend on sizes, so a symbolic group's definition serves every size, its
scalar inputs (definition.py) computed from the tensors' sizes at each call. On the real
package the first build and run collects the generated CUDA, the scheduler and the
scheduled IR; an input signature nvFuser fails on at run time runs the group's prims
through torch from then on, and Generated records it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from fusionlens.middle.contract import Decline, FusionGroup
from fusionlens.executors import base, symbolic
from fusionlens.executors.nvfuser.backend import Backend, installed_api
from fusionlens.executors.nvfuser.definition import build_definition, definition_source, write_definition
from fusionlens.executors.nvfuser.support import InputSpec


@dataclass
class Generated(base.Generated):
    """nvFuser's region. `source`: the FusionDefinition (contiguous inputs) as a runnable
    Python script, headed by its status line; `fn`: input tensors -> tuple of output tensors,
    through fd.execute; `kernels`: kernels nvFuser launched (1, an estimate, until nvFuser has
    run); `eager_fn`: the same prims one at a time through torch."""

    executor: str = "nvfuser"
    api: str = "nvfuser_direct"  # the API the source is written for
    backend: str = ""  # what fn runs on: "nvfuser_direct 0.2.34", a stand-in's label, or "" (nothing)
    runnable: bool = False  # fn can run here
    nvfuser_ran: bool = False  # True only once the real nvFuser's fd.execute has returned
    executions: int = 0  # fd.execute calls that returned, on whatever backend ran them
    torch_fallbacks: int = 0  # calls whose inputs nvFuser failed on: the prims ran through torch
    cuda_source: str | None = None  # the generated CUDA, when nvFuser ran and offers it
    scheduler: str | None = None  # e.g. "pointwise", "inner_persistent" (from kernel names)
    scheduled_ir: str | None = None
    note: str = ""  # in words: did nvFuser run, and if not, why
    definitions: dict[tuple[InputSpec, ...], str] = field(default_factory=dict)  # input signature -> source built
    errors: list[str] = field(default_factory=list)  # what failed collecting kernels or IR

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


_KERNEL = re.compile(r"__global__\s+void\s+(\w+)\s*\(")
_SCHEDULER = re.compile(r"nvfuser_([a-z_]+?)_f\d+")


def kernel_info(cuda: str) -> tuple[int, str | None]:
    """(kernel count, scheduler names) from generated CUDA source."""
    names = _KERNEL.findall(cuda or "")
    schedulers: list[str] = []
    for n in names:
        m = _SCHEDULER.match(n)
        if m and m.group(1) not in schedulers:
            schedulers.append(m.group(1))
    return len(names), ", ".join(schedulers) or None


def _collect(gen: Generated, fd, backend: Backend, inputs: list[torch.Tensor]) -> None:
    """Generated CUDA and scheduled IR after the first real execution of a definition."""
    if not backend.real:
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
        count, scheduler = kernel_info(gen.cuda_source)
        gen.kernels = count or gen.kernels
        gen.scheduler = scheduler


_FAILED = object()


def _make_fn(group: FusionGroup, gen: Generated, backend: Backend | None, why_not: str,
             device_type: str) -> tuple[Callable, Callable]:
    """(fn, run): fn(*tensors) for the program; run(tensors, fallback) underneath.

    With fallback (the program's calls on the real package), an input signature nvFuser
    fails on (building or executing its definition) runs the group's prims through torch
    from then on, and the Generated records it: `torch_fallbacks`, `errors`, `status()`.
    Without it (compiling in generate, or a stand-in backend), failures raise.
    """
    cache: dict[tuple[InputSpec, ...], Any] = {}  # input signature -> (fd, its scalar inputs), or _FAILED
    n_inputs = len(group.inputs)

    def through_torch(tensors):
        """The group's prims one by one through torch, for inputs nvFuser failed on."""
        assert gen.eager_fn is not None  # generate() always gives one
        gen.torch_fallbacks += 1
        return gen.eager_fn(*tensors)

    def run(tensors, fallback: bool):
        if backend is None:
            raise RuntimeError(f"nvFuser region {group.id} cannot run here: {why_not}")
        if len(tensors) != n_inputs:
            raise TypeError(f"region {group.id} takes {n_inputs} tensors, got {len(tensors)}")
        key = tuple(InputSpec.of_tensor(t, device_type) for t in tensors)
        entry = cache.get(key)
        if entry is _FAILED:
            return through_torch(tensors)
        first = entry is None
        inputs = list(tensors)
        try:
            if entry is None:
                d = write_definition(group, list(key), backend.api)
                gen.definitions[key] = d.source
                scalars = _scalar_inputs(group, d.scalars)
                entry = (build_definition(d.body, backend), scalars)
            fd, scalars = entry
            if scalars is not None:  # a symbolic group's numbers at these sizes, after the tensors
                inputs += scalars(tensors)
            outs = fd.execute(inputs)
        except Exception as e:  # noqa: BLE001 - nvFuser raises RuntimeErrors of many kinds
            if not fallback or not backend.real:
                raise
            cache[key] = _FAILED
            first_line = (str(e).strip().splitlines() or [""])[0]
            gen.errors.append(f"nvFuser failed on inputs {list(key)}: {type(e).__name__}: {first_line}; "
                              "these inputs run the region's prims through torch")
            return through_torch(tensors)
        cache[key] = entry
        gen.executions += 1
        if backend.real and not gen.nvfuser_ran:
            gen.nvfuser_ran = True
            gen.note = f"ran on {backend.label}"
        if first:
            _collect(gen, fd, backend, inputs)
        return tuple(o if o.is_contiguous() else o.contiguous() for o in outs)

    def fn(*tensors):
        return run(tensors, True)
    return fn, run


def _scalar_inputs(group: FusionGroup, scalars: list) -> Callable | None:
    """tensors -> the definition's scalar inputs at their sizes, each a python number of its
    DataType (Double or Int); None where the definition takes none."""
    if not scalars:
        return None
    values = symbolic.evaluator(group.inputs, [e for e, _ in scalars])
    kinds = [float if double else int for _, double in scalars]
    return lambda tensors: [kind(v) for kind, v in zip(kinds, values(tensors))]


def example_inputs(group: FusionGroup, device) -> list[torch.Tensor]:
    """Contiguous inputs of the group's shapes and dtypes, to compile a definition on."""
    out = []
    for v in group.inputs:
        dev = "cpu" if (v.device.type == "cpu" and v.ndim == 0) else device
        shape = symbolic.example_shape(v.shape)  # a symbolic group compiles at its example's sizes
        if v.dtype.is_floating_point:
            out.append(torch.randn(shape, dtype=v.dtype, device=dev))
        else:
            out.append(torch.ones(shape, dtype=v.dtype, device=dev))
    return out


def generate(group: FusionGroup, dev: torch.device, backend: Backend | None, why: str) -> Generated:
    """The region's Generated, running on `backend` (None: nothing here can run it, `why`)."""
    for v in group.inputs:
        if v.device.type == "cpu" and v.ndim > 0 and dev.type == "cuda":
            raise Decline(f"input {v.name} is a CPU tensor with {v.ndim} dims; nvFuser takes only "
                          "0-dim CPU tensors")
    api = backend.api if backend is not None else (installed_api() or "nvfuser_direct")
    source = definition_source(group, api, dev.type)
    gen = Generated(source=source, fn=None, kernels=1,
                    eager_fn=symbolic.eager_callable(group), api=api,
                    backend=backend.label if backend is not None else "", runnable=backend is not None)
    if backend is None:
        gen.note = f"nvFuser did not run: {why}. This is the definition that would run."
    elif not backend.real:
        gen.note = (f"nvFuser did not run: this region runs through {backend.label}"
                    + (f", {backend.about}" if backend.about else ""))
    else:
        gen.note = f"{backend.label} ready; not run yet"
    gen.source = f"# status: {gen.note}\n{source}"
    gen.fn, run = _make_fn(group, gen, backend, why, dev.type)
    if backend is not None and backend.real:
        # Compile now on contiguous example inputs: the report gets the CUDA and the
        # scheduler, and a definition nvFuser rejects is declined rather than failing later.
        try:
            run(example_inputs(group, dev), False)
        except Exception as e:  # noqa: BLE001 - nvFuser errors are RuntimeErrors of many kinds
            first = str(e).strip().splitlines()
            raise Decline(f"nvFuser could not compile this region: {type(e).__name__}: "
                          f"{first[0] if first else ''}") from e
        gen.source = f"# status: {gen.status()}\n{source}"
    return gen
