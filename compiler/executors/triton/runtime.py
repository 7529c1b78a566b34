"""A region's generated artefact: the contiguous variant's source and specs, and a launcher
that generates, execs and caches another variant the first time it sees other strides.

Kernels take the domain sizes and the input strides as literals: the generated source is
specialised to one stride signature. `Generated.source` is the variant for contiguous
inputs; the launcher (`Generated.fn`) makes the others (transposed or sliced inputs), and
Triton caches the compiled binaries. `Generated.specs` describes each kernel for an
ahead-of-time `triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))` check
(see aot.py and tests/test_triton_hopper.py).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from compiler.contract import Decline, FusionGroup, Layout, check_layouts
from compiler.executors import base
from compiler.ir import contiguous_strides, ops_callable

from .analysis import _Analysis
from .module import KernelSpec, _region_ident, all_outputs_empty, build_empty_source, build_source, load_source

# every input's strides (0 for a size-1 dim): what one generated variant is specialised to
StrideSignature = tuple[tuple[int, ...], ...]


@dataclass
class Generated(base.Generated):
    """`source` is the module (kernels + launcher) for contiguous inputs; `fn` the launcher."""

    specs: list[KernelSpec] = field(default_factory=list)  # the kernels of the contiguous variant
    variants: dict[StrideSignature, str] = field(default_factory=dict)  # stride signature -> source, as seen
    default_key: StrideSignature = ()  # the stride signature of contiguous inputs
    last_key: StrideSignature | None = None  # the stride signature of the latest call
    interpreted: bool = False  # generated under TRITON_INTERPRET=1

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
        return "; ".join(parts)


def _stride_key(shape, stride) -> tuple[int, ...]:
    return tuple(0 if s == 1 else int(x) for s, x in zip(shape, stride))


def _contiguous_key(an: _Analysis) -> list[tuple[int, ...]]:
    return [_stride_key(v.shape, contiguous_strides(v.shape)) for v in an.inputs]


def source_only(group: FusionGroup) -> str:
    """The contiguous variant's source, or a comment saying why there is none; runs nothing."""
    try:
        if all_outputs_empty(group):
            return build_empty_source(group)[0]
        an = _Analysis(group)
        return build_source(group, an, _contiguous_key(an))[0]
    except Decline as e:
        return f"# Triton would decline region {group.id}: {e}\n"
    except Exception as e:  # pragma: no cover - a generator gap
        return f"# Triton code generation failed for region {group.id}: {type(e).__name__}: {e}\n"


def source_for(group: FusionGroup, layouts: list[Layout]) -> str:
    """The module for inputs of these layouts, in the group's input order; runs nothing.
    Raises Decline as `generate` does (the executor contract's `source_for`)."""
    check_layouts(group, layouts)
    if all_outputs_empty(group):
        return build_empty_source(group)[0]
    an = _Analysis(group)
    return build_source(group, an, [_stride_key(lay.shape, lay.stride) for lay in layouts])[0]


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
        source, kname, lname, spec = build_source(group, an, default)
    except Decline:
        raise
    except Exception as e:  # a gap in the generator must not break the program: torch runs it
        raise Decline(f"internal error in the Triton generator ({type(e).__name__}: {e})") from e
    label = _region_ident(group.id)
    variants = {tuple(default): source}
    launchers = {tuple(default): load_source(source, lname, label)}
    lock = threading.Lock()
    shapes = [tuple(v.shape) for v in an.inputs]
    dtypes = [v.dtype for v in an.inputs]

    gen = Generated(source, None, 1, ops_callable(group.bsyms, group.inputs, group.outputs), [spec], variants,
                    tuple(default), interpreted=os.environ.get("TRITON_INTERPRET") == "1")

    def launch(*tensors):
        if len(tensors) != len(shapes):
            raise TypeError(f"region {group.id} takes {len(shapes)} tensors, got {len(tensors)}")
        key = tuple(_stride_key(s, t.stride()) for s, t in zip(shapes, tensors))
        gen.last_key = key
        fn = launchers.get(key)
        if fn is None:
            for t, s, d, v in zip(tensors, shapes, dtypes, an.inputs):
                if tuple(t.shape) != s or t.dtype != d:
                    raise TypeError(f"region {group.id}: {v.name} was compiled for {d}{list(s)}, got "
                                    f"{t.dtype}{list(t.shape)}")
            with lock:
                src, _, name, _ = build_source(group, an, list(key))
                fn = launchers[key] = load_source(src, name, label)
                variants[key] = src
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
