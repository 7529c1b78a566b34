"""The op families a fuzz program draws its lines from.

Each family picks operands among the values defined so far and returns a line of Python
(an expression, or an in-place statement) or None. Lines are written in terms of the
operands' shapes where they can (`x.shape[-1] // 2`, not a number), so that the shrinker's
smaller shapes keep them valid. Nothing here checks that a line is valid: the generator
runs each one eagerly and keeps only the lines eager runs (so every dtype, every rank and
every empty dim may be offered to every op).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tests.fuzz.generate import Builder

Family = Callable[["Builder"], "tuple[str, bool] | None"]  # (code, whether it is an in-place statement)

UNARY = ["torch.sin({x})", "torch.cos({x})", "torch.tanh({x})", "torch.sigmoid({x})", "torch.exp({x})",
         "torch.relu({x})", "F.gelu({x})", "F.silu({x})", "torch.abs({x})", "-{x}", "torch.sqrt(torch.abs({x}))",
         "torch.log1p(torch.abs({x}))", "torch.rsqrt(torch.abs({x}) + 1)", "torch.square({x})", "torch.floor({x})",
         "torch.erf({x})", "{x}.float()", "{x}.half()", "{x}.bfloat16()", "{x}.long()", "{x}.bool()",
         "torch.clamp({x}, -1, 1)", "F.softplus({x})", "torch.sign({x})", "F.leaky_relu({x}, 0.1)",
         "torch.round({x})", "{x} * 0.5", "{x} + 1", "2 - {x}", "{x} ** 2", "torch.logical_not({x})", "~{x}",
         "{x} // 2", "{x} % 3", "torch.where({x} > 0, {x}, 0.1 * {x})", "(torch.sin({x}) * 3).float() + 1",
         "{x}.to(torch.float32) * 2", "torch.reciprocal(torch.abs({x}) + 1)"]

BINARY = ["{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / (torch.abs({b}) + 1)", "torch.maximum({a}, {b})",
          "torch.minimum({a}, {b})", "{a} > {b}", "{a} <= {b}", "{a} == {b}", "torch.where({b} > 0, {a}, {b})",
          "torch.add({a}, {b}, alpha=2)", "torch.atan2({a}, {b})", "{a} & {b}", "{a} | {b}",
          "torch.logical_and({a}, {b})", "torch.lerp({a}, {b}, 0.3)", "{a} * {b} + {a}", "torch.hypot({a}, {b})",
          "torch.copysign({a}, {b})", "torch.fmod({a}, torch.abs({b}) + 1)", "{a} + {b} * 0.5",
          "torch.where({a} > {b}, {a}, {b})"]

REDUCTIONS = ["{x}.sum()", "{x}.sum({d})", "{x}.sum({d}, keepdim=True)", "{x}.mean({d})", "{x}.mean()",
              "torch.amax({x}, {d})", "torch.amin({x}, {d}, keepdim=True)", "{x}.max({d}).values", "{x}.min()",
              "{x}.argmax({d})", "{x}.argmin()", "{x}.prod({d})", "torch.std({x}, {d}, correction={c})",
              "torch.var({x}, {d}, correction={c})", "torch.logsumexp({x}, {d})", "torch.softmax({x}, {d})",
              "torch.log_softmax({x}, {d})", "{x}.any({d})", "{x}.all()", "torch.cumsum({x}, {d})",
              "{x}.sum(dtype=torch.float32)", "torch.count_nonzero({x}, {d})", "{x}.amax(dim=({d}, {d2}))",
              "{x}.sum(({d}, {d2}))", "torch.mean({x}.float(), {d})", "torch.std({x}, correction={c})",
              "torch.var_mean({x}, {d})[0]", "torch.softmax({x}.float(), {d})"]

NORMS = ["F.layer_norm({x}, {x}.shape[-1:])", "F.layer_norm({x}, {x}.shape[-1:], {w})",
         "F.rms_norm({x}, {x}.shape[-1:])", "F.rms_norm({x}, {x}.shape[-1:], {w})", "F.normalize({x}, dim={d})",
         "torch.linalg.vector_norm({x}, {o}, dim={d})",
         "F.batch_norm({x}, None, None, training=True)", "F.group_norm({x}, 1)", "{x}.norm(dim={d})",
         "F.layer_norm({x}, {x}.shape[-2:])", "torch.linalg.vector_norm({x})"]

VIEWS = ["{x}.t()", "{x}.transpose({d}, {d2})", "{x}.permute({perm})", "{x}.reshape(-1)", "{x}.view(-1)",
         "{x}.flatten()", "{x}.unsqueeze({u})", "{x}.squeeze()", "{x}.squeeze({d})", "{x}[None]",
         "{x}.narrow({d}, 0, {x}.shape[{d}] // 2)", "{x}[..., 1:]", "{x}[::2]", "{x}.chunk(2, {d})[0]",
         "{x}.unbind({d})[-1]", "{x}.expand(2, *{x}.shape)", "{x}.mT", "{x}.movedim(0, -1)", "{x}.diagonal()",
         "{x}.split(2, {d})[-1]", "{x}.flip({d})", "{x}.roll(1, {d})", "{x}.contiguous()",
         "{x}.view({x}.shape[0], -1)", "{x}.unflatten({d}, (1, -1))", "{x}[:, None]", "{x}[0]", "{x}[-1, ...]",
         "{x}.select({d}, 0)", "{x}[:, :3]", "{x}.view(*{x}.shape[:-1], -1, 1)"]

CATS = ["torch.cat([{a}, {b}], {d})", "torch.stack([{a}, {s}], {u})", "{a}.split(2, {d})[0]",
        "torch.cat([{a}, {b}, {a}], {d})", "torch.chunk({a}, 3, {d})[-1]", "torch.tensor_split({a}, 2, {d})[1]",
        "torch.split({a}, [1, {a}.shape[{d}] - 1], {d})[1]", "torch.cat([torch.sin({a}), {a}], {d})",
        "torch.cat([{a}, {a}[:1]])"]

MATMULS = ["{a} @ {b}", "torch.matmul({a}, {b})", "{a} @ {a}.mT", "{a}.mT @ {a}", "F.linear({a}, {w})",
           "torch.mm({a}, {b})", "torch.bmm({a}, {b})", "torch.einsum('...ij,...kj->...ik', {a}, {a})",
           "{a} @ torch.sin({a}.mT)", "F.linear({a}, {w}, {v})"]

INDEXING = ["{x}[{i} % {x}.shape[0]]", "{x}.index_select({d}, {i}.flatten() % {x}.shape[{d}])",
            "torch.gather({x}, {d}, {x}.argmax({d}, keepdim=True))", "{x}[{x} > 0]", "{x}[{m}]",
            "{x}.masked_fill({m}, 0)", "torch.where({m}, {x}, 0)", "{x}[:, 0]", "{x}[1:3]", "{x}[[0, -1]]",
            "torch.topk({x}, 1, {d}).values", "torch.sort({x}, {d}).values", "{x}[..., torch.tensor([0, 0])]",
            "{x}.flatten()[{x}.flatten().argmax()]", "{x}.masked_select({m})", "torch.where({x} > 0.5)[0]",
            "{x}[{x} > 0.5].sum()"]

INPLACE = ["{t}.add_({u})", "{t}.mul_(0.5)", "{t}.sub_(1)", "{t}.clamp_(min=0)", "{t}.relu_()", "{t}.copy_({u})",
           "{t}.zero_()", "{t}.fill_(1)", "{t}.masked_fill_({t} > 0, 0)", "{t}[0] = 1", "{t} += {u}",
           "{t}.mul_({u})", "{t}.div_(2)", "{t}.tanh_()", "{t}.sigmoid_()", "{t}.neg_()", "{t}[{t} > 0] = 0",
           "{t}.addcmul_({u}, {u}, value=0.5)", "{t}.lerp_({u}, 0.5)", "{t}.abs_()", "{t}[..., :1] = 2",
           "{t}.mul_(0.1)"]

# written into a value (an input, mostly: a KV cache) at a window of dim {d}: {u} is the window's
# values, {t}'s shape but for dim {d}, where it is no longer (StaticCache's index_copy_, `cache[:, :n] = k`)
CACHE = ["{t}.index_copy_({d}, torch.arange({u}.shape[{d}]), {u})",
         "{t}.index_copy_({d}, torch.arange({u}.shape[{d}]) + ({t}.shape[{d}] - {u}.shape[{d}]), {u})",
         "{t}.index_copy_({d}, torch.tensor([{t}.shape[{d}] - 1]), {u}.narrow({d}, 0, 1))",
         "{t}.narrow({d}, 0, {u}.shape[{d}]).copy_({u})",
         "{t}.narrow({d}, {t}.shape[{d}] - {u}.shape[{d}], {u}.shape[{d}]).add_({u})",
         "{t}.select({d}, -1).copy_({u}.select({d}, 0))"]

# q, k, v: one rank, k and v of one shape but the last dim, q and k of one last dim; [None] makes
# the 4-d operands torch's CPU flash kernel takes (attention_rules.py: its training backward)
ATTENTION = ["F.scaled_dot_product_attention({q}, {k}, {v})",
             "F.scaled_dot_product_attention({q}, {k}, {v}, is_causal=True)",
             "F.scaled_dot_product_attention({q}[None], {k}[None], {v}[None])",
             "F.scaled_dot_product_attention({q}[None], {k}[None], {v}[None], is_causal=True, scale=0.5)",
             "F.scaled_dot_product_attention({q}, {k}, {v}, attn_mask={m})",
             "F.scaled_dot_product_attention({q}[None], {k}[None], {v}[None], attn_mask=torch.ones({q}.shape[-2], "
             "{k}.shape[-2], dtype=torch.bool).tril())",
             "F.scaled_dot_product_attention({q}.unsqueeze(1), {k}.unsqueeze(1), {v}.unsqueeze(1)).squeeze(1)"]

# nn.BatchNorm1d(momentum=None) (program.PRELUDE's BN, BNA), its buffers the program's values: a
# cumulative moving average whose factor 1 / num_batches_tracked is read as the program runs
_STATS = '{{"running_mean": {m}, "running_var": {v}, "num_batches_tracked": {n}}}'
MODULES = ["torch.func.functional_call(BN, " + _STATS + ", ({x},))",
           "torch.func.functional_call(BNA, {{**" + _STATS + ', "weight": {w}, "bias": {w2}}}, ({x},))']


def _dim(b: Builder, t: torch.Tensor, extra: int = 0) -> int:
    n = t.ndim + extra
    return b.rng.randrange(-n, n) if n else b.rng.choice([0, -1])


def _broadcasts(shape: torch.Size, into: torch.Size) -> bool:
    try:
        return torch.broadcast_shapes(shape, into) == into
    except RuntimeError:
        return False


def _together(shape: torch.Size, other: torch.Size) -> bool:
    try:
        torch.broadcast_shapes(shape, other)
        return True
    except RuntimeError:
        return False


def _apart(a: torch.Tensor, b: torch.Tensor) -> bool:
    return not a.numel() or not b.numel() or a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()


def _order_dependent(u: torch.Tensor, t: torch.Tensor) -> bool:
    """Whether `t.op_(u)` reads elements of `u` that it has already written: `u` shares memory
    with `t` without being elementwise the same tensor. Eager's answer then depends on its
    loop order, so such lines are not generated."""
    if u.untyped_storage().data_ptr() != t.untyped_storage().data_ptr() or not u.numel():
        return False
    try:
        e = u.expand_as(t)
    except RuntimeError:
        return True
    same = e.data_ptr() == t.data_ptr() and all(a == b for a, b, n in zip(e.stride(), t.stride(), t.shape) if n > 1)
    return not same


def pointwise(b: Builder) -> tuple[str, bool] | None:
    x = b.any()
    return b.rng.choice(UNARY).format(x=x), False


def binary(b: Builder) -> tuple[str, bool] | None:
    a = b.any()
    ta = b.t(a)
    other = b.pick(lambda t: _together(t.shape, ta.shape), avoid=a) or a
    if b.rng.random() < 0.5:
        a, other = other, a
    return b.rng.choice(BINARY).format(a=a, b=other), False


def reduction(b: Builder) -> tuple[str, bool] | None:
    x = b.any()
    t = b.t(x)
    d, d2 = _dim(b, t), _dim(b, t)
    return b.rng.choice(REDUCTIONS).format(x=x, d=d, d2=d2, c=b.rng.choice([0, 1])), False


def norm(b: Builder) -> tuple[str, bool] | None:
    x = b.pick(lambda t: t.is_floating_point() and t.ndim >= 1)
    if x is None:
        return None
    t = b.t(x)
    w = b.pick(lambda u: u.shape == t.shape[-1:] and u.is_floating_point(), avoid=x)
    code = b.rng.choice([n for n in NORMS if w is not None or "{w}" not in n])
    return code.format(x=x, w=w, d=_dim(b, t), o=b.rng.choice([1, 2, "float('inf')"])), False


def view(b: Builder) -> tuple[str, bool] | None:
    x = b.any()
    t = b.t(x)
    perm = tuple(b.rng.sample(range(t.ndim), t.ndim))
    return b.rng.choice(VIEWS).format(x=x, d=_dim(b, t), d2=_dim(b, t), u=_dim(b, t, 1), perm=perm), False


def cat(b: Builder) -> tuple[str, bool] | None:
    a = b.pick(lambda t: t.ndim >= 1)
    if a is None:
        return None
    ta = b.t(a)
    d = _dim(b, ta)
    fits = lambda t: t.ndim == ta.ndim and all(s == o for i, (s, o) in enumerate(zip(t.shape, ta.shape))
                                               if i != d % ta.ndim)
    other = b.pick(fits, avoid=a) or a
    same = b.pick(lambda t: t.shape == ta.shape, avoid=a) or a
    return b.rng.choice(CATS).format(a=a, b=other, s=same, d=d, u=_dim(b, ta, 1)), False


def matmul(b: Builder) -> tuple[str, bool] | None:
    a = b.pick(lambda t: t.ndim >= 1)
    if a is None:
        return None
    ta = b.t(a)
    k = ta.shape[-1]
    other = b.pick(lambda t: (t.ndim >= 2 and t.shape[-2] == k) or (t.ndim == 1 and t.shape[0] == k)) or a
    w = b.pick(lambda t: t.ndim == 2 and t.shape[-1] == k) or a
    v = b.pick(lambda t: t.ndim == 1 and t.shape[0] == b.t(w).shape[0]) or "None"
    return b.rng.choice(MATMULS).format(a=a, b=other, w=w, v=v), False


def indexing(b: Builder) -> tuple[str, bool] | None:
    x = b.pick(lambda t: t.ndim >= 1)
    if x is None:
        return None
    t = b.t(x)
    i = b.pick(lambda u: u.dtype == torch.int64) or f"torch.arange({t.shape[0]})"
    m = b.pick(lambda u: u.dtype == torch.bool and _broadcasts(u.shape, t.shape)) or f"({x} > 0)"
    code = b.rng.choice(INDEXING)
    return code.format(x=x, i=i, m=m, d=_dim(b, t)), False


def inplace(b: Builder) -> tuple[str, bool] | None:
    # mostly values the program made; sometimes an input (the program then updates its caller's tensor)
    defined = b.rng.random() < 0.8
    t = b.pick(names=lambda n: (n not in b.inputs) == defined) or b.any()
    tt = b.t(t)
    u = b.pick(lambda v: _broadcasts(v.shape, tt.shape) and not _order_dependent(v, tt), avoid=t) or t
    return b.rng.choice(INPLACE).format(t=t, u=u), True


def cache(b: Builder) -> tuple[str, bool] | None:
    # mostly an input (the caller's cache, updated in place), from values that may require grad
    defined = b.rng.random() < 0.25
    t = b.pick(lambda v: v.ndim >= 1, names=lambda n: (n not in b.inputs) == defined) or \
        b.pick(lambda v: v.ndim >= 1)
    if t is None:
        return None
    tt = b.t(t)
    d = _dim(b, tt)
    fits = lambda v: v.ndim == tt.ndim and v.dtype == tt.dtype and 0 < v.shape[d] <= tt.shape[d] and all(  # noqa: E731
        s == o for i, (s, o) in enumerate(zip(v.shape, tt.shape)) if i != d % tt.ndim)
    u = b.pick(lambda v: fits(v) and v.untyped_storage().data_ptr() != tt.untyped_storage().data_ptr(), avoid=t)
    u = u or f"torch.sin({t}.narrow({d}, 0, 1) * 2)"
    return b.rng.choice(CACHE).format(t=t, u=u, d=d), True


def attention(b: Builder) -> tuple[str, bool] | None:
    q = b.pick(lambda t: t.is_floating_point() and t.ndim >= 2)
    if q is None:
        return None
    tq = b.t(q)
    k = b.pick(lambda t: t.dtype == tq.dtype and t.ndim == tq.ndim and t.shape[-1] == tq.shape[-1], avoid=q) or q
    tk = b.t(k)
    v = b.pick(lambda t: t.dtype == tq.dtype and t.shape[:-1] == tk.shape[:-1], avoid=k) or k
    scores = (*tq.shape[:-1], tk.shape[-2])
    m = b.pick(lambda t: (t.dtype == torch.bool or t.dtype == tq.dtype) and _broadcasts(t.shape, torch.Size(scores)))
    m = m or f"({q} @ {k}.mT > 0)"
    return b.rng.choice(ATTENTION).format(q=q, k=k, v=v, m=m), False


def module(b: Builder) -> tuple[str, bool] | None:
    x = b.pick(lambda t: t.is_floating_point() and t.ndim in (2, 3))
    if x is None:
        return None
    c = b.t(x).shape[1]
    # the running statistics and the counter are buffers: no line has read them (the call updates
    # them without bumping their version, so a gradient saved from one would see the update), and
    # none shares memory with another operand (which eager's kernel would read as it writes)
    read = {n for line in b.lines for n in line.reads()}
    taken: list[torch.Tensor] = [b.t(x)]

    def buffer(ok) -> str | None:
        name = b.pick(lambda t: ok(t) and not t.requires_grad and all(_apart(t, u) for u in taken),
                      names=lambda n: n not in read)
        if name is not None:
            taken.append(b.t(name))
        return name

    channel = lambda t: t.shape == (c,) and t.is_floating_point()  # noqa: E731
    m = buffer(channel) or f"torch.zeros({x}.shape[1])"
    v = buffer(channel) or f"torch.ones({x}.shape[1])"
    n = buffer(lambda t: t.dtype == torch.int64 and t.ndim == 0) or "torch.tensor(0)"
    # (not an expanded weight: torch's CPU batch_norm backward reads one as if it were contiguous,
    # eager's own input gradient then garbage: fuzz backward 30030)
    free = lambda t: channel(t) and 0 not in t.stride() and all(_apart(t, u) for u in taken[1:])  # noqa: E731
    w = b.pick(free) or f"torch.ones({x}.shape[1])"
    w2 = b.pick(free, avoid=w) or f"torch.zeros({x}.shape[1])"
    return b.rng.choice(MODULES).format(x=x, m=m, v=v, n=n, w=w, w2=w2), False


FAMILIES: dict[str, tuple[Family, float]] = {
    "pointwise": (pointwise, 3.0), "binary": (binary, 3.0), "reduction": (reduction, 2.0), "norm": (norm, 1.0),
    "view": (view, 2.0), "cat": (cat, 1.0), "matmul": (matmul, 1.0), "indexing": (indexing, 1.0),
    "inplace": (inplace, 1.5), "cache": (cache, 0.6), "attention": (attention, 0.5), "module": (module, 0.4),
}
