"""A region's generated artefact: the contiguous variant's source and specs, and a launcher
that generates, execs and caches another variant the first time it sees other strides.

A static group's kernels take the domain sizes and the input strides as literals: the
generated source is specialised to one stride signature. A symbolic group's (a dynamic
program's, fusionlens/ir/symbols.py) take every size that depends on a symbol, and the strides
that do, as arguments its launcher computes from the inputs at each call (sizes.py): its
source is the same at every size and is specialised to a stride *pattern* only (which dims
are broadcast, contiguous, unit-stride or other). `Generated.source` is the variant for
contiguous inputs; the launcher (`Generated.fn`) makes the others (transposed or sliced
inputs), and Triton caches the compiled binaries. `Generated.specs` describes each kernel for an
ahead-of-time `triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))` check
(see aot.py and tests/test_triton_hopper.py).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

import torch

from fusionlens.middle.contract import Decline, FusionGroup, Layout, check_layouts
from fusionlens.executors import base, symbolic
from fusionlens.ir.sizes import contiguous_strides

from .analysis import _Analysis
from .launch import bind
from .module import KernelSpec, _region_ident, all_outputs_empty, build_empty_source, build_source, load_source
from .sizes import contiguous_pattern, pattern

# every input's strides (0 for a size-1 dim), or for a symbolic group every input's stride
# pattern (sizes.py): what one generated variant is specialised to
StrideSignature = tuple[tuple, ...]


@dataclass
class Generated(base.Generated):
    """`source` is the module (kernels + launcher) for contiguous inputs; `fn` the launcher."""

    specs: list[KernelSpec] = field(default_factory=list)  # the kernels of the contiguous variant
    variants: dict[StrideSignature, str] = field(default_factory=dict)  # stride signature -> source, as seen
    default_key: StrideSignature = ()  # the stride signature of contiguous inputs
    last_key: StrideSignature | None = None  # the stride signature of the latest call
    interpreted: bool = False  # generated under TRITON_INTERPRET=1
    symbols: list[str] = field(default_factory=list)  # a dynamic program's symbols the kernels take sizes of

    def report_code(self) -> str:
        """The source of the variant that ran last (the contiguous one before any call)."""
        key = self.default_key if self.last_key is None else self.last_key
        return self.variants.get(key, self.source)

    def status(self) -> str:
        """One line for a report; empty when there is nothing to say."""
        parts = []
        if self.interpreted:
            parts.append("ran by Triton's interpreter on the CPU (numpy): checks the kernel, not its speed")
        if self.last_key is not None and self.last_key != self.default_key:
            parts.append("generated for the strides of its non-contiguous inputs")
        if self.symbols:
            parts.append(f"sizes of {', '.join(self.symbols)} are kernel arguments: one kernel serves every size")
        return "; ".join(parts)


def _stride_key(shape, stride) -> tuple[int, ...]:
    return tuple(0 if s == 1 else int(x) for s, x in zip(shape, stride))


def _contiguous_key(an: _Analysis) -> list[tuple]:
    if an.env is not None:
        return [contiguous_pattern(an.shape(v)) for v in an.inputs]
    return [_stride_key(v.shape, contiguous_strides(v.shape)) for v in an.inputs]


def _layout_key(an: _Analysis, v, shape, stride) -> tuple:
    """The variant key of one input of this runtime shape and stride."""
    return pattern(an.shape(v), shape, stride) if an.env is not None else _stride_key(shape, stride)


def source_only(group: FusionGroup) -> str:
    """The contiguous variant's source, or a comment saying why there is none; runs nothing."""
    return preview(group)[0]


def preview(group: FusionGroup) -> tuple[str, int]:
    """(source_only's source, the kernels it launches: 2 for a split reduction or a two-axis
    region, 0 where every output is empty, 1 where Triton would decline and torch run it)."""
    try:
        if all_outputs_empty(group):
            return build_empty_source(group)[0], 0
        an = _Analysis(group)
        source, _, _, specs = build_source(group, an, _contiguous_key(an))
        return source, len(specs)
    except Decline as e:
        return f"# Triton would decline region {group.id}: {e}\n", 1
    except Exception as e:  # pragma: no cover - a generator gap
        return f"# Triton code generation failed for region {group.id}: {type(e).__name__}: {e}\n", 1


def source_for(group: FusionGroup, layouts: list[Layout]) -> str:
    """The module for inputs of these layouts, in the group's input order; runs nothing.
    Raises Decline as `generate` does (the executor contract's `source_for`)."""
    check_layouts(group, layouts)
    if all_outputs_empty(group):
        return build_empty_source(group)[0]
    an = _Analysis(group)
    return build_source(group, an, [_layout_key(an, v, lay.shape, lay.stride)
                                    for v, lay in zip(an.inputs, layouts)])[0]


def _generate_empty(group: FusionGroup) -> Generated:
    """A region whose outputs are all empty: no kernel, its launcher makes the outputs."""
    source, lname = build_empty_source(group)
    fn = load_source(source, lname, _region_ident(group.id))
    return Generated(source, fn, 0, fn)  # eager's results are as empty: the launcher is the baseline too


def generate(group: FusionGroup, device=None) -> Generated:
    if all_outputs_empty(group):
        return _generate_empty(group)
    try:
        an = _Analysis(group)
        default = _contiguous_key(an)
        if device is not None and torch.device(device).type == "cuda" and torch.cuda.is_available():
            an.sms = torch.cuda.get_device_properties(torch.device(device)).multi_processor_count
        source, kname, lname, specs = build_source(group, an, default)
        eager = symbolic.eager_callable(group)
    except Decline:
        raise
    except Exception as e:  # a gap in the generator must not break the program: torch runs it
        raise Decline(f"internal error in the Triton generator ({type(e).__name__}: {e})") from e
    label = _region_ident(group.id)
    kernels = [kname, kname.removesuffix("_kernel") + "_combine"]  # a split reduction's two
    variants = {tuple(default): source}
    launchers = {tuple(default): bind(load_source(source, lname, label), kernels)}
    lock = threading.Lock()
    gen = Generated(source, None, len(specs), eager, specs, variants, tuple(default),
                    interpreted=os.environ.get("TRITON_INTERPRET") == "1", symbols=_symbol_names(an))
    key_of = _key_function(an, tuple(default))
    configs = specs[0].autotune
    tuned: dict[StrideSignature, int] = {}  # variant -> the num_warps its autotuning chose (a GPU's)

    def launch(*tensors):
        if len(tensors) != len(an.inputs):
            raise TypeError(f"region {group.id} takes {len(an.inputs)} tensors, got {len(tensors)}")
        key = key_of(tensors)
        gen.last_key = key
        fn = launchers.get(key)
        if fn is None:
            _check_inputs(group, an, tensors)
            with lock:
                src, _, name, _ = build_source(group, an, list(key))
                fn = launchers[key] = bind(load_source(src, name, label), kernels)
                variants[key] = src
        if len(configs) > 1 and tensors and tensors[0].is_cuda:
            warps = tuned.get(key)
            if warps is None:
                warps = tuned[key] = autotune(fn, tensors, configs, _cuda_timer)
            return fn(*tensors, num_warps=warps)
        return fn(*tensors)

    if gen.interpreted:
        import numpy

        def launch_quietly(*tensors):
            # the interpreter evaluates masked-off lanes and inf/nan on purpose (exp -> inf in
            # tanh, log(0) in masked lanes): numpy's floating-point warnings are noise here
            with numpy.errstate(all="ignore"):
                return launch(*tensors)

        gen.fn = launch_quietly
    else:
        gen.fn = launch
    return gen


def _symbol_names(an: _Analysis) -> list[str]:
    if an.env is None:
        return []
    return [s.name for s in symbolic.free_symbols([d for v in an.inputs for d in an.shape(v)])]


def _key_function(an: _Analysis, default: StrideSignature):
    """tensors -> their variant key; contiguous inputs of a symbolic group skip the pattern."""
    shapes = [an.shape(v) for v in an.inputs]
    if an.env is None:
        return lambda tensors: tuple(_stride_key(s, t.stride()) for s, t in zip(shapes, tensors))

    def key(tensors):
        if all(t.is_contiguous() for t in tensors):
            return default
        return tuple(pattern(s, t.shape, t.stride()) for s, t in zip(shapes, tensors))
    return key


def _check_inputs(group: FusionGroup, an: _Analysis, tensors) -> None:
    """TypeError unless each tensor has its input's dtype and static sizes (a symbol's size is
    the program's guards' to check)."""
    for t, v in zip(tensors, an.inputs):
        shape = an.shape(v)
        if t.dtype != v.dtype or t.ndim != len(shape) or any(
                isinstance(s, int) and s != n for s, n in zip(shape, t.shape)):
            raise TypeError(f"region {group.id}: {v.name} was compiled for {v.dtype}{list(shape)}, got "
                            f"{t.dtype}{list(t.shape)}")


def _cuda_timer(call) -> float:
    """Milliseconds of `call()` on the current GPU: CUDA events around 5 launches after one."""
    call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 5


def autotune(launcher, tensors, configs: list[int], timer) -> int:
    """The num_warps of `configs` (at most four: tuning.autotune_warps) whose launch `timer`
    finds fastest for these tensors; the first (the heuristic's) on a tie. Once per shape and
    stride variant: the launcher's caller keeps the answer."""
    times = [(timer(lambda w=w: launcher(*tensors, num_warps=w)), i, w) for i, w in enumerate(configs[:4])]
    return min(times)[2]
