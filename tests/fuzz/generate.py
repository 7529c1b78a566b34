"""Random straight-line programs, one a seed: `generate(seed, mode)` always returns the same.

The generator keeps real tensors: it draws the inputs of the program's first call, runs
each candidate line eagerly on the values so far, and keeps it only where eager runs it and
its result is finite (so the program is valid by construction, whatever dtypes, ranks and
empty dims the ops meet). In-place lines update those tensors as the program would.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable

import torch

from tests.fuzz import ops
from tests.fuzz.modes import Mode
from tests.fuzz.program import CONTIGUOUS, EXPANDED, STEP, TRANSPOSED, InputSpec, Line, Program, program_scope

SIZES = [1, 2, 3, 4, 5, 8]
LARGEST = 1e4  # a float value this large is not kept: float16 overflows a few ops later


class Builder:
    """The program so far: its values (name -> the tensor it holds on the first call)."""

    def __init__(self, rng: random.Random, inputs: list[InputSpec], tensors: list[torch.Tensor]):
        self.rng = rng
        self.env: dict[str, torch.Tensor] = {s.name: t for s, t in zip(inputs, tensors)}
        self.order: list[str] = [s.name for s in inputs]
        self.inputs = {s.name for s in inputs}
        self.lines: list[Line] = []

    def t(self, name: str) -> torch.Tensor:
        return self.env[name]

    def pick(self, ok: Callable[[torch.Tensor], bool] | None = None, avoid: str | None = None,
             names: Callable[[str], bool] | None = None) -> str | None:
        """A value satisfying `ok`, recent ones likelier (programs chain rather than fan out)."""
        found = [n for n in self.order
                 if n != avoid and (ok is None or ok(self.env[n])) and (names is None or names(n))]
        if not found:
            return None
        return self.rng.choices(found, weights=[1 + 2 * i for i in range(len(found))])[0]

    def any(self) -> str:
        """Any value, recent ones likelier (there is always one: the inputs)."""
        found = self.pick()
        assert found is not None
        return found

    def add(self, code: str, family: str, statement: bool) -> bool:
        """Run `code` eagerly; keep it as the program's next line if it runs."""
        scope = {**program_scope(), **self.env}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if statement:
                    exec(code, scope)  # noqa: S102 - our own generated text
                    result = None
                else:
                    result = eval(code, scope)  # noqa: S307 - our own generated text
        except Exception:  # noqa: BLE001 - eager rejects the line: try another
            return False
        if statement:
            self.lines.append(Line(code, None, family))
            return True
        if not isinstance(result, torch.Tensor) or not _tame(result):
            return False
        name = f"t{len(self.order) - len(self.inputs)}"
        self.env[name] = result
        self.order.append(name)
        self.lines.append(Line(code, name, family))
        return True


def _tame(t: torch.Tensor) -> bool:
    if not t.is_floating_point() or not t.numel():
        return True
    d = t.detach()
    return bool(torch.isfinite(d).all()) and float(d.abs().max()) < LARGEST


def _shape(rng: random.Random, ndim: int, empty: bool) -> list[int]:
    shape = [rng.choice(SIZES) for _ in range(ndim)]
    if empty and shape:
        shape[rng.randrange(ndim)] = 0
    return shape


def _related(rng: random.Random, first: list[int]) -> list[int]:
    """Another input's shape: the same, one that broadcasts with it, or one a matmul takes."""
    kind = rng.random()
    if kind < 0.35 or not first:
        return list(first) if kind < 0.35 else _shape(rng, rng.choice([0, 1, 2]), False)
    if kind < 0.65:  # broadcasting: leading dims dropped, some dims 1
        shape = first[rng.randrange(len(first)):] if rng.random() < 0.5 else list(first)
        return [1 if rng.random() < 0.4 else s for s in shape]
    if kind < 0.9 and len(first) >= 1:  # a matmul's other operand
        return [first[-1], rng.choice(SIZES)] if rng.random() < 0.6 else [rng.choice(SIZES), first[-1]]
    return _shape(rng, rng.choice([0, 1, 2, 3]), False)


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _inputs(rng: random.Random, mode: Mode) -> list[InputSpec]:
    empty = rng.random() < 0.06
    first = _shape(rng, rng.choice([0, 1, 1, 2, 2, 2, 3, 3] if mode.max_numel > 64 else [0, 1, 2, 2, 2]), empty)
    shapes = [first] + [_related(rng, first) for _ in range(rng.choice([0, 1, 1, 2]))]
    dtypes, weights = zip(*mode.dtypes)
    specs = []
    for k, shape in enumerate(shapes):
        while _numel(shape) > mode.max_numel:
            shape[shape.index(max(shape))] //= 2
        dtype = rng.choices(dtypes, weights)[0]
        layouts = [CONTIGUOUS] * 6 + ([TRANSPOSED] * 2 if len(shape) >= 2 else []) + ([STEP] * 2 if shape else []) \
            + ([EXPANDED] if shape and shape[0] > 1 else [])
        # (backward: after the first, some need no gradient: a buffer, a cache the program writes into)
        grad = mode.grad and dtype in ("float32", "float16", "bfloat16") and (k == 0 or rng.random() < 0.7)
        specs.append(InputSpec(f"x{k}", tuple(shape), dtype, rng.choice(layouts), grad))
    if rng.random() < 0.1:  # a step counter (a BatchNorm's num_batches_tracked)
        specs.append(InputSpec(f"x{len(specs)}", (), "count"))
    return specs


def _outputs(b: Builder, grad: bool) -> tuple[str, ...]:
    made = [n for n in b.order if n not in b.inputs]
    outs = [made[-1]]
    if len(made) > 1 and b.rng.random() < 0.35:
        outs.append(b.rng.choice(made[:-1]))
    if b.rng.random() < 0.15:  # an input itself (eager returns the caller's tensor, updated if written)
        outs.append(b.rng.choice([s for s in b.order if s in b.inputs]))
    if grad and not any(b.t(o).requires_grad for o in outs):
        differentiable = [n for n in made if b.t(n).requires_grad]
        if differentiable:
            outs.append(differentiable[-1])
    return tuple(outs)


def generate(seed: int, mode: Mode) -> Program:
    """The program of `seed` in `mode`: the same one on every machine, every run."""
    rng = random.Random(f"{mode.name}:{seed}")
    for _ in range(5):  # a backward that eager cannot run (an in-place update of a saved value): draw again
        program = _draw(rng, mode, seed)
        if not mode.grad or _backward_runs(program):
            return program
    return program


def _draw(rng: random.Random, mode: Mode, seed: int) -> Program:
    specs = _inputs(rng, mode)
    shell = Program(tuple(specs), (), (), value_seed=rng.randrange(2**31), origin=f"{mode.name} {seed}")
    b = Builder(rng, specs, shell.make_inputs(0, torch.device("cpu")))
    families = list(ops.FAMILIES)
    weights = [w for _, w in ops.FAMILIES.values()]
    wanted, attempts = rng.randint(*mode.ops), 0
    while len(b.lines) < wanted and attempts < 25 * wanted:
        attempts += 1
        family = rng.choices(families, weights)[0]
        line = ops.FAMILIES[family][0](b)
        if line is not None:
            b.add(line[0], family, line[1])
    if not any(line.target for line in b.lines):
        b.add("x0 * 2", "pointwise", False) or b.add("x0.clone()", "view", False)
    return shell.replace(lines=tuple(b.lines), outputs=_outputs(b, mode.grad))


def _backward_runs(program: Program) -> bool:
    args = program.make_inputs(0, torch.device("cpu"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = [o for o in program.function()(*args) if o.requires_grad]
            wrt = [a for a in args if a.requires_grad]
            if outs and wrt:
                torch.autograd.grad([o.sum() for o in outs], wrt, allow_unused=True)
        return True
    except Exception:  # noqa: BLE001 - eager's backward raises
        return False
