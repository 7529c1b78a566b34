"""FSDP2 (`fully_shard`) modules compiled natively: each rank's program takes its local shards
and gathers each FSDP unit's parameters itself, at the line that calls the unit.

FSDP2 keeps each parameter as a DTensor sharded on dim 0; its forward hooks all-gather a
unit's parameters before the unit runs and free them after, and its backward hooks
reduce-scatter the gradients. A program traced through those hooks would keep storage they
free, so fusionlens.jit compiles a `Sharded` in place of the module: a callable taking the
call's arguments and, as keyword arguments, each FSDP parameter's local shard
(`p.to_local()`, taken at every call under the caller's grad mode: autograd carries the
shard's gradient into `p.grad` as a DTensor, as FSDP2 leaves it). While it runs, FSDP's
hooks are off and ours gather each unit from the shards: the shards padded on dim 0 to a
multiple of the world, copied into one flat buffer (FSDP2's copy-in), all-gathered
(distributed/symbols.py's `all_gather_into_tensor`, then `wait`), and copied out into the unit's
full parameters. Traced, the all-gather is a symbol at the unit's call line whose `grad`
(Grad.REDUCE_SCATTER) makes its backward rule (distributed/autograd_rules.py) reduce-scatter
the gradient with FSDP2's default reduction, the mean over the ranks. Each unit's all-gather is issued one unit ahead
(right after the previous unit's wait) and waited for right before its first use, so it
overlaps the previous unit's compute; each reduce-scatter is issued where its unit's last
gradient is made and waited for at the end of the backward. A unit FSDP2 reshards after
forward (its default, but at the root) is gathered again in the backward, one unit ahead,
instead of having its gathered parameters saved (distributed/autograd_rules.py
`fsdp_regather`). A MixedPrecisionPolicy is compiled as FSDP2 runs it: the shards cast to
param_dtype before the copy-in (`.to` ops at the unit's line: the all-gather moves param_dtype's
bytes), the gradient cast to reduce_dtype before the reduce-scatter and the result to the
parameters' own dtype after its wait (the all-gather's `reduce_dtype`, the copy-in's
`grad_dtype`), a unit's floating inputs cast to param_dtype and its outputs to output_dtype
(module hooks, as FSDP2's). What FusionLens cannot reproduce (`unsupported`) runs eagerly
under FSDP's own hooks, with the reason.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree

from fusionlens.distributed import symbols as S, vocabulary as V
from fusionlens.distributed.staging import CompileTransform, ReportInputs
from fusionlens.frontend import recorder
from fusionlens.frontend.arguments import sanitize
from fusionlens.ir.trace import BoundSymbol, OpTag, Symbol, dtype_name
from fusionlens.ops.torch_ops import conversions

REDUCE_OP = V.ReduceOp.AVG  # FSDP2's default gradient reduction for float32 and bfloat16 (ReduceOp.AVG)
DTYPES = (torch.float32, torch.bfloat16)  # FSDP2 pre- and post-divides the others: not reproduced
TO = conversions.to  # a MixedPrecisionPolicy's casts, recorded as the user's `.to` is


def mixed_precision(dtype: torch.dtype, mp: Any) -> tuple[torch.dtype | None, torch.dtype | None]:
    """(param_dtype, reduce_dtype) of a `dtype` parameter under MixedPrecisionPolicy `mp`, as
    FSDP2 clamps them: None where no cast is needed (a param_dtype that is the parameter's own
    or a non-float parameter; a reduce_dtype that is the param_dtype)."""
    param = None if mp.param_dtype == dtype or not dtype.is_floating_point else mp.param_dtype
    reduce = None if mp.reduce_dtype == mp.param_dtype else mp.reduce_dtype
    return param, reduce


def _reduced_in(dtype: torch.dtype, mp: Any) -> torch.dtype:
    """The dtype a `dtype` parameter's gradient is reduce-scattered in: reduce_dtype, else the
    dtype the module computed it in (param_dtype, else its own)."""
    param, reduce = mixed_precision(dtype, mp)
    return reduce or param or dtype


def copy_in(shards: list[torch.Tensor], padded: list[int], grad_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The shards padded on dim 0 to their padded rows, flattened into one buffer (FSDP2's
    all-gather input: uneven shards are padded, so every rank sends as many elements).
    `grad_dtype`: the dtype the reduce-scattered gradient lands in (the parameters' own, where
    a MixedPrecisionPolicy gathers and reduces in others); its backward rule reads it."""
    flats = []
    for t, rows in zip(shards, padded):
        if t.shape[0] != rows:
            t = F.pad(t, [0, 0] * (t.ndim - 1) + [0, rows - t.shape[0]])
        flats.append(t.reshape(-1))
    return torch.cat(flats) if len(flats) > 1 else flats[0]


def _copy_in_meta(shards: list[torch.Tensor], padded: list[int], grad_dtype: torch.dtype | None = None) -> torch.Tensor:
    return shards[0].new_empty((sum(rows * math.prod(t.shape[1:]) for t, rows in zip(shards, padded)),))


# The copy-in is a symbol of its own, first in the program (it reads only the shards): its
# backward, last in the backward program, waits for the reduce-scatter the all-gather's
# backward issued, so the reduce-scatter overlaps the rest of the backward.
COPY_IN = Symbol("fsdp_copy_in", copy_in, tags=(OpTag.LIBRARY_CALL, OpTag.PROGRAM_GLOBAL), meta=_copy_in_meta)


class _Gathered(torch.autograd.Function):
    """The all-gather as eager runs it (FSDP's meaning): `flat` sent in `param_dtype` (None: its
    own); the backward reduce-scatters the gradient in `reduce_dtype` (None: the gradient's),
    the mean over the ranks, and hands it back in `flat`'s dtype (FSDP2's float32 master shards)."""

    @staticmethod
    def forward(ctx: Any, flat: torch.Tensor, group: V.Group, param_dtype: torch.dtype | None = None,
                reduce_dtype: torch.dtype | None = None) -> torch.Tensor:
        ctx.group, ctx.dtype, ctx.reduce_dtype = group, flat.dtype, reduce_dtype
        return S.wait(S.all_gather_into_tensor(flat if param_dtype is None else flat.to(param_dtype), group))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        sent = grad if ctx.reduce_dtype is None else grad.to(ctx.reduce_dtype)
        return S.wait(S.reduce_scatter_tensor(sent, ctx.group, REDUCE_OP)).to(ctx.dtype), None, None, None


# --- what the module's FSDP units are --------------------------------------------------------

@dataclass
class Unit:
    """One FSDP unit (a `fully_shard`ed module's parameter group) and how its parameters are
    laid out in its all-gather: each one's local shard padded to `padded[i]` rows."""

    module: torch.nn.Module
    params: list[Any]  # FSDPParam
    names: list[str]  # the keyword each parameter's local shard is passed by
    padded: list[int]  # rows of each padded shard (dim 0 of the unpadded parameter over the world, rounded up)
    group_size: int
    group_name: str
    reshard: bool = False  # FSDP2's reshard_after_forward: the backward gathers the parameters again
    # MixedPrecisionPolicy, as FSDP2 clamps it per parameter (FSDPParam.init_dtype_attrs): the
    # dtype the shards are cast to and gathered in (None: their own), the dtype gradients are
    # reduce-scattered in (None: the gathered dtype's)
    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None
    saved: list[tuple[torch.nn.Module, str, Any]] = field(default_factory=list)  # what the module held


def _fsdp_module_type() -> type | None:
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return getattr(fsdp, "FSDPModule", None) if fsdp is not None else None


def _states(module: torch.nn.Module) -> list[tuple[str, Any]]:
    """(qualified name, FSDPState) of each fully_shard'ed module under `module`, in pre-order."""
    kind = _fsdp_module_type()
    if kind is None:
        return []
    found, seen = [], set()
    for name, m in module.named_modules():
        if isinstance(m, kind):
            state = m._get_fsdp_state()  # type: ignore[attr-defined]
            if id(state) not in seen:
                seen.add(id(state))
                found.append((name, state))
    return found


def is_sharded(fn) -> bool:
    """Whether `fn` (a module, or a module's bound method) holds a fully_shard'ed module."""
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    return isinstance(module, torch.nn.Module) and bool(_states(module))


def _settings_unsupported(group: Any) -> str | None:
    """What of a parameter group's settings, those FSDP2's setters change between calls, the
    compiled program does not reproduce."""
    if not group.reduce_grads:
        return "set_requires_gradient_sync(False) (gradients accumulated unsharded, not reduced)"
    after, mesh = group.post_forward_mesh_info, group.mesh_info
    if after is not None and after.shard_mesh_size != mesh.shard_mesh_size:
        return "reshard_after_forward=int (resharding to a smaller world after forward)"
    if group.gradient_divide_factor is not None or group.force_sum_reduction_for_comms:
        return "a custom gradient reduction (set_gradient_divide_factor, set_force_sum_reduction_for_comms)"
    if group._all_reduce_hook is not None:
        return "an all-reduce hook (set_all_reduce_hook)"
    if type(group._reduce_scatter_comm).__name__ not in ("DefaultReduceScatter", "ProcessGroupAllocReduceScatter"):
        return "a custom reduce-scatter (set_custom_reduce_scatter)"
    return None


def _group_unsupported(group: Any) -> str | None:
    """What of a parameter group's FSDP2 configuration the compiled program does not reproduce."""
    mp = group.mp_policy
    if type(group.offload_policy).__name__ == "CPUOffloadPolicy":
        return "CPU offload (CPUOffloadPolicy)"
    if group.mesh_info.mesh.ndim != 1 or getattr(group.mesh_info, "replicate_mesh_dim", None) is not None:
        return "HSDP (a 2-D device mesh)"
    for p in group.fsdp_params:
        if p.is_dtensor:
            return "parameters that were DTensors before fully_shard (FSDP with tensor parallel)"
        if p.fsdp_placement.dim != 0:
            return "a shard placement other than Shard(0) (shard_placement_fn)"
        if p.sharded_param.dtype not in DTYPES:
            return f"a {dtype_name(p.sharded_param.dtype)} parameter (FSDP2 pre-divides its gradient)"
        if (reduced := _reduced_in(p.sharded_param.dtype, mp)) not in DTYPES:
            return (f"a MixedPrecisionPolicy reducing gradients in {dtype_name(reduced)} (FSDP2 "
                    "pre- and post-divides them; reduce_dtype=torch.float32 is compiled)")
        computed = mixed_precision(p.sharded_param.dtype, mp)[0] or p.sharded_param.dtype
        if reduced.itemsize < computed.itemsize:
            return (f"a MixedPrecisionPolicy reducing gradients computed in {dtype_name(computed)} "
                    f"in the narrower {dtype_name(reduced)}")
        if hasattr(p.sharded_param._local_tensor, "fsdp_pre_all_gather"):
            return "a tensor subclass with FSDP all-gather extensions (fsdp_pre_all_gather)"
    if len({p.sharded_param.dtype for p in group.fsdp_params}) > 1:
        return "parameters of different dtypes in one unit (FSDP2 gathers them as bytes)"
    return _settings_unsupported(group)


def unsupported(fn) -> str | None:
    """Why calls of `fn`'s FSDP2 module cannot run compiled (the FSDP2 feature it uses), or None."""
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    if not isinstance(module, torch.nn.Module):
        return None
    for name, state in _states(module):
        if len(state._modules) != 1:
            return f"fully_shard of several modules at once ({name or 'the root'})"
        if len(state._fsdp_param_groups) > 1:
            return f"several parameter groups in one unit ({name or 'the root'}: per-parameter meshes)"
        for group in state._fsdp_param_groups:
            if (why := _group_unsupported(group)) is not None:
                return why
    return None


def _reshards(group: Any, state: Any, root: bool) -> bool:
    """Whether FSDP2 frees the group's unsharded parameters after its forward: its
    reshard_after_forward, which left at its default (None) holds for all but a root unit (FSDP2's
    lazy init keeps a root's: the backward would gather them again right away)."""
    if group.post_forward_mesh_info is None:
        return False
    return not (root and getattr(state, "_auto_reshard_after_forward", True))


def _units(module: torch.nn.Module, taken: set[str]) -> list[Unit]:
    units = []
    names = {id(p): n for n, p in module.named_parameters(remove_duplicate=False)}
    states = _states(module)
    for qualified, state in states:
        # a root: no other unit's module holds it (FSDP2's lazy init makes such units roots)
        root = not any(other != qualified and (other == "" or qualified.startswith(other + "."))
                       for other, _ in states)
        for group in state._fsdp_param_groups:
            world = group.mesh_info.shard_mesh_size
            kw = []
            for p in group.fsdp_params:
                label = "p_" + sanitize(names.get(id(p.sharded_param), p._module_info.param_name))
                while label in taken:
                    label += "_"
                taken.add(label)
                kw.append(label)
            padded = [-(-p._orig_size[0] // world) for p in group.fsdp_params]
            # a group's parameters are all float32 or all bfloat16 (_group_unsupported): one clamp
            dtypes = mixed_precision(group.fsdp_params[0].sharded_param.dtype, group.mp_policy)
            units.append(Unit(state._modules[0], list(group.fsdp_params), kw, padded, world,
                              group.mesh_info.shard_process_group.group_name, _reshards(group, state, root),
                              *dtypes))
    return units


# --- the callable jit compiles ---------------------------------------------------------------

class Sharded:
    """A fully_shard'ed module as fusionlens.jit compiles it: `sharded(*args, **kwargs, **shards)`
    runs the module with its units gathered from `shards` (`Sharded.shards()`), FSDP's hooks
    off. To the frontend it is the module's method (`__self__`): parameters and buffers named
    as the module's; its signature is the module's forward's with a keyword per shard."""

    def __init__(self, module: torch.nn.Module):
        self.__self__ = module
        self.module = module
        kind = _fsdp_module_type()
        self.__name__ = next(c.__name__ for c in type(module).__mro__ if kind is None or not issubclass(c, kind))
        self.__wrapped__ = module.forward  # where it is defined (reporting.target_of reads the source)
        forward = inspect.signature(module.forward)
        self.states = [state for _, state in _states(module)]
        self.groups = [group for state in self.states for group in state._fsdp_param_groups]
        self.units = _units(module, set(forward.parameters))
        shards = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for u in self.units for n in u.names]
        params = list(forward.parameters.values())
        at = next((i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD), len(params))
        self.__signature__ = forward.replace(parameters=params[:at] + shards + params[at:])
        self.names = [n for u in self.units for n in u.names]
        self.eager_because: str | None = None  # once set, calls run under FSDP's own hooks
        self._prefetch_at: int | None = None  # where the next unit's all-gather is issued in the trace
        self._copy_in_at = 0  # where the next unit's copy-in is recorded in the trace

    @staticmethod
    def of(fn) -> Sharded | None:
        """A Sharded for a module holding fully_shard'ed modules that can be compiled, else None."""
        if not isinstance(fn, torch.nn.Module) or not is_sharded(fn) or unsupported(fn) is not None:
            return None
        return Sharded(fn)

    @property
    def training(self) -> bool:
        return self.module.training

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        return self.module.parameters()

    def buffers(self) -> Iterator[torch.Tensor]:
        return self.module.buffers()

    def shards(self) -> dict[str, torch.Tensor]:
        """Each FSDP parameter's local shard, as this call's grad mode makes it."""
        return {n: p.sharded_param.to_local() for u in self.units for n, p in zip(u.names, u.params)}

    def __call__(self, *args, **kwargs):
        shards = {n: kwargs.pop(n) for n in self.names}
        self._prefetch_at, self._copy_in_at = None, 0
        with _fsdp_hooks_off(self.states), _gathering(self, shards):
            return self.module(*args, **kwargs)

    def gather(self, unit: Unit, shards: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """The unit's full parameters from its shards: recorded into the trace while one is
        traced (at the unit's call line), run as eager runs them otherwise."""
        local = [shards[n] for n in unit.names]
        tracer = recorder.current()
        if tracer is None or not tracer.records():
            group = V.Group.named(unit.group_name)
            return _copy_out(unit, _Gathered.apply(copy_in(local, unit.padded), group, unit.param_dtype,
                                                   unit.reduce_dtype))
        return _copy_out(unit, self._traced_gather(tracer, unit, local))

    def _traced_gather(self, tracer: recorder.Recorder, unit: Unit, local: list[torch.Tensor]) -> torch.Tensor:
        """The shards' casts to param_dtype (a MixedPrecisionPolicy's) and the copy-in recorded
        after the previous units' (first in the program), the all-gather just after the
        previous unit's wait (all read only the shards, inputs of the program), and the wait
        here, before the unit's first use."""
        group = V.Group.named(unit.group_name)
        with tracer.unrecorded():  # run as eager runs them, recorded below as symbols
            cast = local if unit.param_dtype is None else [t.to(unit.param_dtype) for t in local]
            flat = copy_in(cast, unit.padded)
            gathered = _Gathered.apply(flat, group)
        where = tracer.where()
        tracer.program_global(COPY_IN.name, COPY_IN.impl)
        S.declare(tracer)
        shards = [tracer.value(t) for t in local]
        if unit.param_dtype is not None:  # FSDP2's all-gather input: the shard in param_dtype
            shards = [self._cast(tracer, v, t, where) for v, t in zip(shards, cast)]
        mixed = unit.param_dtype is not None or unit.reduce_dtype is not None
        # where the gradient lands: the parameters' own dtype (float32 master shards)
        landing = {"grad_dtype": local[0].dtype} if mixed else {}
        tracer.emit(BoundSymbol(COPY_IN, (shards, list(unit.padded)), landing, [tracer.output(flat)], None, where),
                    self._copy_in_at)
        self._copy_in_at += 1
        issued = tracer.pending(gathered)
        # its backward reduce-scatters the gradient (Grad.REDUCE_SCATTER, in reduce_dtype where a
        # MixedPrecisionPolicy sets one); `regather`: FSDP2 frees the gathered parameters after
        # the unit's forward, the backward gathers them again
        kw: dict[str, Any] = {"grad": S.Grad.REDUCE_SCATTER, **({"regather": True} if unit.reshard else {}),
                              **({"reduce_dtype": unit.reduce_dtype} if unit.reduce_dtype is not None else {})}
        issue = BoundSymbol(S.ALL_GATHER, (tracer.value(flat), group), kw, [issued], None, where)
        tracer.emit(issue, None if self._prefetch_at is None else self._prefetch_at + 1)
        tracer.emit(BoundSymbol(S.WAIT, (issued,), {}, [tracer.output(gathered)], None, where))
        self._prefetch_at = len(tracer.ops())
        return gathered

    def _cast(self, tracer: recorder.Recorder, shard: Any, cast: torch.Tensor, where: Any) -> Any:
        """`shard.to(param_dtype)` recorded before the copy-in (as a user's `.to` is)."""
        out = tracer.output(cast)
        tracer.emit(BoundSymbol(TO, (shard, cast.dtype), {}, [out], None, where), self._copy_in_at)
        self._copy_in_at += 1
        return out


def _copy_out(unit: Unit, gathered: torch.Tensor) -> list[torch.Tensor]:
    """Each full parameter from the gathered buffer ([rank, the ranks' padded shards]): its
    padded shards stacked along dim 0, the padding cut off."""
    ranks = gathered.view(unit.group_size, -1)
    out, offset = [], 0
    for p, rows in zip(unit.params, unit.padded):
        size = p._orig_size
        numel = rows * (size.numel() // size[0] if size[0] else 0)
        full = ranks[:, offset:offset + numel].reshape(unit.group_size * rows, *size[1:])
        out.append(full[:size[0]] if full.shape[0] != size[0] else full)
        offset += numel
    return out


def _places(p: Any) -> list[tuple[torch.nn.Module, str]]:
    info = p._module_info
    return [(info.module, info.param_name), *zip(info.shared_modules, info.shared_param_names)]


@contextlib.contextmanager
def _gathering(sharded: Sharded, shards: dict[str, torch.Tensor]):
    """Each unit's module runs with its full parameters (gathered at its call) and holds
    what it held before once it returns."""
    def before(unit: Unit) -> Callable:
        def hook(module, args):
            unit.saved = [(m, name, m._parameters[name]) for p in unit.params for m, name in _places(p)]
            for p, full in zip(unit.params, sharded.gather(unit, shards)):
                for m, name in _places(p):
                    m._parameters[name] = full  # type: ignore[assignment]  # a tensor, not a Parameter: autograd's
        return hook

    def after(unit: Unit) -> Callable:
        def hook(module, args, output):
            for m, name, held in unit.saved:
                m._parameters[name] = held
            unit.saved = []
        return hook

    handles = []
    policies = [(state._modules[0], state._mp_policy) for state in sharded.states]
    try:
        for module, mp in policies:  # before the unit's gather, as FSDP2's pre-forward casts first
            if mp.cast_forward_inputs and mp.param_dtype is not None:
                handles.append(module.register_forward_pre_hook(_casting_inputs(mp.param_dtype), with_kwargs=True))
        for unit in sharded.units:
            handles.append(unit.module.register_forward_pre_hook(before(unit)))
            handles.append(unit.module.register_forward_hook(after(unit), always_call=True))
        for module, mp in policies:  # after the unit's parameters are put back, as FSDP2's post-forward
            if mp.output_dtype is not None:
                handles.append(module.register_forward_hook(_casting_output(mp.output_dtype)))
        yield
    finally:
        for h in handles:
            h.remove()
        for unit in sharded.units:  # a call that raised inside a unit
            for m, name, held in unit.saved:
                m._parameters[name] = held
            unit.saved = []


def _cast_floats(tree: Any, dtype: torch.dtype) -> Any:
    """Each floating tensor in `tree` not of `dtype` cast to it (FSDP2's _cast_fp_tensor); traced,
    each cast is a `.to` at the unit's call line."""
    def cast(x: Any) -> Any:
        return x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != dtype else x
    return pytree.tree_map(cast, tree)


def _casting_inputs(dtype: torch.dtype) -> Callable:
    """A MixedPrecisionPolicy's cast_forward_inputs: the unit's floating inputs in param_dtype."""
    def hook(module, args, kwargs):
        return _cast_floats((args, kwargs), dtype)
    return hook


def _casting_output(dtype: torch.dtype) -> Callable:
    """A MixedPrecisionPolicy's output_dtype: the unit's floating outputs cast to it."""
    def hook(module, args, output):
        return _cast_floats(output, dtype)
    return hook


_HOOK_DICTS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
               "_forward_hooks_with_kwargs", "_forward_hooks_always_called")


@contextlib.contextmanager
def _fsdp_hooks_off(states: list[Any]):
    """FSDP's forward hooks removed from its modules (they would all-gather again and free the
    storage the program reads), put back as they were, in their order."""
    modules = {id(m): m for state in states for m in state._modules}
    saved = [(m, attr, dict(getattr(m, attr))) for m in modules.values() for attr in _HOOK_DICTS]
    ids = set()
    for state in states:
        ids |= {h.id for h in (state._pre_forward_hook_handle, state._post_forward_hook_handle) if hasattr(h, "id")}
    try:
        for m, attr, hooks in saved:
            for i in ids & set(hooks):
                del getattr(m, attr)[i]
        yield
    finally:
        for m, attr, hooks in saved:
            d = getattr(m, attr)
            d.clear()
            d.update(hooks)


@dataclass
class Gathering(CompileTransform):
    """FSDP2 as a transform of the compile (transform.CompileTransform): the Sharded module is
    what is traced (its units gathered at their calls, recorded through the frontend's recorder);
    nothing is rewritten after tracing: the all-gathers' backward rules reduce-scatter."""

    sharded: Sharded
    name: str = "fsdp2"

    def groups(self) -> list[str]:
        return list(dict.fromkeys(u.group_name for u in self.sharded.units))

    def unwrap(self, fn: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The Sharded module, taking this rank's local shards by keyword."""
        return self.sharded, {**kwargs, **self.sharded.shards()}

    def tracing(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def rewrite_backward(self, d, inputs, constants, backward):
        return None

    def finish(self, call: Callable, constants: list[torch.Tensor]) -> Callable:
        return call

    def report(self, rewritten, failed: bool, training: bool) -> ReportInputs:
        return ReportInputs()


# --- at each call ----------------------------------------------------------------------------

def call(sharded: Sharded, compiled: Callable, args: tuple, kwargs: dict):
    """One call of a jit'ed FSDP2 module: the compiled call with this call's local shards,
    or, once a setter made the module use what the program cannot reproduce
    (set_requires_gradient_sync(False), ...), FSDP's own eager call from then on, said once."""
    if sharded.eager_because is None and (why := next(filter(None, map(_settings_unsupported, sharded.groups)),
                                                      None)) is not None:
        sharded.eager_because = why
        warnings.warn(f"FusionLens: the FSDP2 module uses {why}: its calls run eagerly from now on, FSDP "
                      "communicating as it does without FusionLens", stacklevel=3)
    if sharded.eager_because is not None:
        return sharded.module(*args, **kwargs)
    return compiled(*args, **kwargs, **sharded.shards())
