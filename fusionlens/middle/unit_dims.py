"""Size-1 dims as index arithmetic in the fusion stage (fusion.py `prepare`): a reshape that
only adds size-1 dims is a broadcast_in_dim, and a sum over size-1 dims read only by a
broadcast is that broadcast of its input, so a norm's row statistics reshaped to [rows, 1]
stay in the region that reduces the rows rather than ending it at a view."""

from __future__ import annotations

from fusionlens.ir.trace import BoundSymbol, Value
from fusionlens.ops import prims as P

__all__ = ["unit_reshapes"]


def _unit_dims(shape, target) -> tuple[int, ...] | None:
    """Where `shape`'s dims sit in `target` when `target` is `shape` with size-1 dims inserted
    (a reshape that only adds unit dims: a broadcast_in_dim); None otherwise."""
    dims, j = [], 0
    for s in shape:
        while j < len(target) and target[j] != s:
            if target[j] != 1:
                return None
            j += 1
        if j == len(target):
            return None
        dims.append(j)
        j += 1
    return tuple(dims) if all(t == 1 for t in target[j:]) else None


def _spread_unit_dims(ndim: int, unit: tuple, bdims: tuple, out_ndim: int) -> tuple[int, ...] | None:
    """broadcast_in_dim's dims for z (`ndim` dims, those in `unit` of size 1) in place of a sum of
    z over `unit` broadcast with `bdims`: each unit dim takes a free output dim in order."""
    out: list[int] = []
    k = 0
    for d in range(ndim):
        if d not in unit:
            if out and bdims[k] <= out[-1]:
                return None
            out.append(bdims[k])
            k += 1
            continue
        limit = bdims[k] if k < len(bdims) else out_ndim
        free = [t for t in range((out[-1] + 1) if out else 0, limit) if t not in bdims]
        if not free:
            return None
        out.append(free[0])
    return tuple(out)


def unit_reshapes(bsyms: list) -> list:
    """Index arithmetic, not layout, in the fusion stage: a reshape that only adds size-1 dims
    becomes a broadcast_in_dim, and a broadcast of a sum over size-1 dims of z a broadcast of z
    (a sum of one element is that element) when nothing else reads the sum. A norm's row
    statistics reshaped to [rows, 1] (Llama's RMSNorm backward) then stay in the row region."""
    uses: dict[str, int] = {}
    for b in bsyms:
        for v in b.inputs():
            uses[v.name] = uses.get(v.name, 0) + 1
    producer = {o.name: b for b in bsyms for o in b.outputs}
    static = lambda *shapes: all(isinstance(d, int) for s in shapes for d in s)  # noqa: E731
    out = []
    for b in bsyms:
        x = b.args[0] if b.args else None
        if b.sym is P.reshape and isinstance(x, Value) and static(x.shape, b.outputs[0].shape):
            dims = _unit_dims(tuple(x.shape), tuple(b.outputs[0].shape))
            if dims is not None and x.ndim < len(b.outputs[0].shape):  # an identity reshape stays one
                b = BoundSymbol(P.broadcast_in_dim, (x, tuple(b.outputs[0].shape), dims), {}, list(b.outputs),
                                None, b.provenance)
        elif b.sym is P.broadcast_in_dim and isinstance(x, Value) and x.name in producer and uses.get(x.name) == 1:
            s, shape = producer[x.name], tuple(b.args[1])
            z = s.args[0]
            if s.sym is P.sum and isinstance(z, Value) and z.dtype.is_floating_point and static(z.shape, shape) \
                    and all(z.shape[d] == 1 for d in s.args[1]):
                dims = _spread_unit_dims(z.ndim, tuple(s.args[1]), tuple(b.args[2]), len(shape))
                if dims is not None:
                    b = BoundSymbol(P.broadcast_in_dim, (z, shape, dims), {}, list(b.outputs), None, b.provenance)
        out.append(b)
    return out
