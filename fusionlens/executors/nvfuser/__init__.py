"""The nvFuser executor: a FusionGroup becomes an nvFuser FusionDefinition, run by fd.execute.

The package: backend.py (which nvFuser is here), support.py (what the executor takes; tensor
descriptors), definition.py (the FusionDefinition as Python source), runtime.py (Generated,
and running definitions); this module the executor itself.

For each fusion region this package writes the FusionDefinition as readable Python source
against nvFuser's public Python API, and, where nvFuser really imports and the device is
CUDA, executes that source to build the definition and runs it with `fd.execute(inputs)`.
Definitions are built once per input signature (dtypes, ranks, size-1 dims, contiguity and
stride order of every input) and cached.

A dynamic program's group (shapes of symbols, fusionlens/ir/symbols.py) gets one definition for
every size: its input extents are symbolic as always, a broadcast to an extent of a symbol
takes that extent from a tensor that has it (`fd.ops.size(T, dim=d)`), and any other number
of the sizes (a mean's 1/N) is a scalar input (`fd.define_scalar(None, dtype=...)`) the
runtime computes from the inputs at each call (definition.py).

Where nvFuser is missing, `available()` says exactly why (the fusion pass then gives the
work to the next executor), `generate()` still returns the definition source (so a report
can show what would run) and `definition_source(group)` works without nvFuser. The returned
`Generated` says in so many words whether nvFuser ran: `nvfuser_ran` is True only after the
real package's `fd.execute` has returned; `backend` names what `fn` runs on.

An executor can be given the Backend to run on (`NvFuserExecutor(backend=Backend(module,
api, version, label=..., real=False))`): a stand-in that is not nvFuser runs definitions on
any device, never sets `nvfuser_ran`, and its label says what ran them.

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
- NVIDIA/Fuser python/python_direct/ops.cpp (size(arg, dim) -> the extent as a Val; shapes
  are lists of ints and Vals), python/nvfuser_direct/__init__.py (a symbolic define_scalar is
  a fusion input, in definition order), csrc/python_frontend/fusion_record.h (the older
  frontend's SizeOpRecord, `ops.size(T, dim=d)`), tests/python/direct/test_python_frontend.py
  (test_broadcast_in_dim_with_dynamic_shapes) and test_repro.py (`define_scalar(None, dtype=...)`)
- NVIDIA/Fuser python/nvfuser/__init__.py and python/python_frontend/python_bindings.cpp
  (the older frontend: last_cuda_code, last_scheduled_fusion_ir, define_tensor, define_scalar,
  computeTensorDescriptor: the contiguity / stride_order convention re-implemented in
  support.py)
- NVIDIA/Fuser tests/python/direct/test_python_frontend.py, test_repro.py (the written form
  of definitions: define_tensor(shape=[-1, 1, -1], contiguity=[True, None, True], ...),
  define_scalar(1e-05, dtype=DataType.Double), var_mean(T, dims=[2], correction=0, ...))
- NVIDIA/Fuser runtime/helpers.cu (remainder takes the sign of the divisor, like torch) and
  csrc/type.cpp (round is nearbyint: halves to even, like torch)
- Lightning-AI/lightning-thunder thunder/executors/nvfuserex_impl.py (prim -> fd.ops mapping,
  size-1 dims defined as broadcast (1) and others symbolic (-1), contiguity None for
  broadcast dims, no low-precision reductions (FusionLens writes a bfloat16 or float16 sum as a
  cast to Float, the sum and a cast back, torch's accumulation), no 0-dim var_mean)
- NVIDIA/Fuser csrc/scheduler/normalization_inner_outer.cpp (canScheduleCompileTime,
  canScheduleRunTime), normalization_inner_outer_multi_wave.cpp (one kernel: partial column
  sums to global memory, a grid sync, their reduction), normalization_utils.cpp
  (checkIfReductionsAreInnerOuter, hasSharedInput, isConnectedOnlyThroughReductionProducer,
  isReductionIterationAxisMatched) and benchmarks/python/test_layernorm_bwd.py,
  test_rmsnorm_bwd.py (a norm's backward, dx and the weight and bias gradients, written as one
  definition): a two-axis region (row reductions and column sums of the same rows, a norm's
  backward) is one definition where that scheduler takes it (`takes_columns`, support.py)
- NVIDIA/Fuser python/python_direct/ops.cpp (squeeze(arg, dims, squeeze_expanded=False); the
  older frontend's python_bindings.cpp binds the same) and csrc/ops/alias.cpp (squeeze removes
  broadcast dims only): a two-axis region over a domain with size-1 dims (a batch of one) squeezes
  them out at the top of its definition and broadcasts its outputs back (squeeze.py), so that
  the inner-outer scheduler, which takes no broadcast dim, sees rows and columns only
"""

from __future__ import annotations


import torch

from fusionlens.middle.contract import FusionGroup, Layout, check_layouts
from fusionlens.executors.base import FusionExecutor
from fusionlens.executors.nvfuser import runtime
from fusionlens.executors.nvfuser.backend import Backend, current_backend, installed_api
from fusionlens.executors.nvfuser.definition import definition_source, write_source
from fusionlens.executors.nvfuser.support import InputSpec, can_take, takes_columns


class NvFuserExecutor(FusionExecutor):
    name = "nvfuser"

    def __init__(self, backend: Backend | None = None):
        self.backend = backend  # what definitions run on; None: the installed nvFuser, if any

    def available(self, device) -> tuple[bool, str]:
        """(True, "") when the backend can run on the device (nvFuser: it imports and the device
        is CUDA); else (False, why)."""
        backend, why = current_backend(device if device is not None else "cpu", self.backend)
        if backend is None:
            return False, why
        return True, ""

    def can_take(self, bsym) -> str | None:
        return can_take(bsym)

    def takes_columns(self, domain, reduction_dims, column_dims, bsyms) -> str | None:
        """A norm's backward (row reductions and column sums of the same rows) as one definition:
        support.takes_columns says where nvFuser's inner-outer persistent scheduler takes it."""
        return takes_columns(domain, reduction_dims, column_dims, bsyms)

    def definition_source(self, group: FusionGroup) -> str:
        """The definition that would run on a CUDA device, for reports where nvFuser cannot."""
        return definition_source(group, installed_api() or "nvfuser_direct", "cuda")

    def source_for(self, group: FusionGroup, layouts: list[Layout], device: str = "cuda") -> str:
        """The FusionDefinition script for inputs of these layouts on a `device` device (the
        definition that runs for them), in the API of this executor's backend."""
        check_layouts(group, layouts)
        api = self.backend.api if self.backend is not None else (installed_api() or "nvfuser_direct")
        return write_source(group, [InputSpec.of_layout(lay, device) for lay in layouts], api)[0]

    def generate(self, group: FusionGroup, device) -> runtime.Generated:
        dev = torch.device(device) if device is not None else torch.device("cpu")
        backend, why = current_backend(dev, self.backend)
        return runtime.generate(group, dev, backend, why)


EXECUTOR = NvFuserExecutor()
