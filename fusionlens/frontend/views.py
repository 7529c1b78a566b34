"""In-place updates through views, functionalised (issue 18 part 4).

The frontend runs the user's code on real tensors, so an in-place update of a view changes
its base, and every other view of that base, for real; the trace is SSA and must say so.
`Views` keeps, for each traced tensor that shares its storage with the tensor an op was
called on, a `Link`: the recorded op that made it (replayed on a new parent Value to make it
again) and the inverse that writes an update of it back into the parent (setitem of the
view's box, a diagonal_scatter, a reshape, a permute, ...: each a scatter prim or a view once
decomposed, which fusion takes, so no write-back is a fallback and an update runs in the kernel
that computed it). After an in-place op on a view the update is written back link by link up to
the base, each parent rebound to its new Value; a view whose parent
changed since it was made is made again from the parent's new Value when it is next read, as
torch's functionalization regenerates views from their updated base. The base, if it is an
input, is then written back to the caller by the frontend's write-back.

An input whose elements share memory (an expanded input: fusionlens/frontend/overlap.py) is
updated element by element in the trace, where eager's write shows in every element aliasing
the location written: `merge_dims` follows the update with the first element that changed
along each stride-0 dim, broadcast back. A write into another overlapping layout, or several
values into one location, runs the signature eagerly (`give_up`).

Autograd: an update eager's autograd does not record (under no_grad, through `.data` or
`.detach()`) of a tensor that requires grad gives it new values and keeps its gradient path:
`untracked_update(old, new)`. A parameter the call updates is put back after tracing, its
final values kept for the check, so the program's write-back is the only update.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fusionlens.frontend import aliasing, overlap
from fusionlens.ir.trace import BoundSymbol, Symbol, SymbolKind, Value
from fusionlens.ir.vocabulary import ValueRole
from fusionlens.ops import torch_ops
from fusionlens.ir.provenance import Provenance

SETITEM = torch_ops.registered("setitem")
RESHAPE = torch_ops.registered("torch.reshape")
PERMUTE = torch_ops.registered("torch.permute")
GETITEM = torch_ops.registered("operator.getitem")
INDEX_COPY = torch_ops.registered("torch.index_copy")
ARANGE = torch_ops.registered("torch.arange")
DIAGONAL_SCATTER = torch_ops.registered("torch.diagonal_scatter")
NE, ISNAN, AND, NOT, ANY = (torch_ops.registered(f"torch.{n}") for n in ("ne", "isnan", "logical_and", "logical_not",
                                                                         "any"))
ARGMAX, GATHER, TO, EXPAND = (torch_ops.registered(n) for n in ("torch.argmax", "torch.gather", "torch.Tensor.to",
                                                                "torch.Tensor.expand"))

# how each view op's update goes back into its parent (by the recorded symbol's name)
_RESHAPES = {"torch.reshape", "torch.Tensor.view_as", "torch.flatten", "torch.unflatten", "torch.squeeze",
             "torch.unsqueeze", "torch.ravel", "torch.Tensor.reshape_as"}
_PERMUTES = {"torch.permute", "torch.transpose", "torch.t", "torch.movedim"}
_EXPANDS = {"torch.Tensor.expand", "torch.broadcast_to", "torch.Tensor.expand_as"}
_SPLITS = {"torch.split", "torch.chunk", "torch.tensor_split", "torch.split_with_sizes", "torch.unsafe_split",
           "torch.unsafe_chunk"}  # consecutive slices along `dim`
# a view (or the tensor itself) or a copy as the strides have it, which the jit keys on only for its inputs
_BY_STRIDES = {torch.reshape, torch.Tensor.reshape, torch.flatten, torch.Tensor.flatten, torch.ravel,
               torch.Tensor.ravel, torch.Tensor.reshape_as, torch.Tensor.contiguous}
_UNREPLAYABLE = {"torch.as_strided"}  # reads the storage, not the parent's elements
# in-place methods that change what a tensor is, not its elements
_METADATA = {"t_", "transpose_", "squeeze_", "unsqueeze_", "swapdims_", "swapaxes_", "as_strided_", "resize_",
             "resize_as_", "set_", "detach_"}
_NOT_DATA = {"requires_grad_", "retain_grad", "share_memory_", "rename_"}


class _NewValues(torch.autograd.Function):
    """`new`'s values with `old`'s gradient path: what eager leaves of a tensor updated where
    autograd does not record it."""

    @staticmethod
    def forward(ctx, old, new):
        return new.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def untracked_update(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """`old` updated to `new`'s values where eager's autograd does not record the update."""
    return _NewValues.apply(old, new) if torch.is_grad_enabled() and old.requires_grad else new


@dataclass
class Link:
    """How a traced view was made from its parent, and how an update of it goes back."""

    parent: torch.Tensor
    view: torch.Tensor
    made: BoundSymbol  # the recorded op that made it
    index: int  # which of made's outputs it is
    source: Value  # the parent's Value `made` read
    generation: int  # the parent's generation the view's current Value was made from
    why: str = ""  # why an update of it cannot be written back (no inverse)
    # ("box", key) | ("reshape",) | ("permute", dims) | ("expand", key) | ("alias",) | ("diagonal", offset,
    # dim1, dim2) | ("index",);
    # () where there is none; None until an update asks (most views are never updated)
    _inverse: tuple[Any, ...] | None = None

    @property
    def inverse(self) -> tuple[Any, ...]:
        if self._inverse is None:
            try:
                self._inverse = _inverse(self.made, self.index, self.parent, self.view)
            except (TypeError, ValueError, IndexError, KeyError, RuntimeError) as e:  # arguments it does not follow
                self._inverse, self.why = (), f"{self.made.sym.name} with these arguments: {e}"
            if not self._inverse and not self.why:
                self.why = f"FusionLens cannot write an update of a view made by {self.made.sym.name} back"
        return self._inverse


@dataclass
class Views:
    links: dict[int, Link] = field(default_factory=dict)  # id(view) -> how it was made
    generation: dict[int, int] = field(default_factory=dict)  # id(tensor) -> how often its elements changed
    updated: set[int] = field(default_factory=set)  # ids of the bases the trace updated in place
    by_strides: set[int] = field(default_factory=set)  # ids of results of reshapes that view or copy by strides
    reshaped: set[int] = field(default_factory=set)  # the storages such a reshape read (an update of one shows in
    # its result or not, as the strides have it: fuzz default 27597, t1.flatten() then t1.addcmul_)
    stride_dependent: tuple[str, Provenance | None] | None = None  # (why, where) of the first update through one
    snapshots: dict[int, torch.Tensor] = field(default_factory=dict)  # id(parameter) -> its values before the call
    # the in-place op being recorded: (its tensor, the tensor's Value before, its name, where)
    pending: tuple[torch.Tensor, Value, str, Provenance | None] | None = None
    why: tuple[str, Provenance | None] | None = None  # why calls of this signature must run eagerly
    untracked: Symbol | None = None  # this trace's untracked_update symbol
    written: tuple[Any, ...] = ()  # the pending in-place op's arguments
    aliased: aliasing.Aliased = field(default_factory=aliasing.Aliased)  # inputs sharing memory with another

    # --- reading ------------------------------------------------------------------------------

    def current(self, tracer, t: torch.Tensor) -> Value | None:
        """t's Value, made again from its parent's where the parent changed since."""
        link = self.links.get(id(t))
        if link is None:
            return tracer.values.get(id(t))
        parent = self.current(tracer, link.parent)
        if link.generation == self.generation.get(id(link.parent), 0) or parent is None:
            return tracer.values.get(id(t))
        if link.made.sym.name in _UNREPLAYABLE:
            self.give_up(f"a view made by {link.made.sym.name} is read after its base was updated in place",
                         link.made.provenance)
            return tracer.values.get(id(t))
        swap = lambda x: parent if isinstance(x, Value) and x.name == link.source.name else x  # noqa: E731
        args, kwargs = pytree.tree_map(swap, (link.made.args, link.made.kwargs))
        outs = [Value(tracer.names.next(), o.shape, o.dtype, o.device) for o in link.made.outputs]
        tracer.bound_symbols.append(BoundSymbol(link.made.sym, args, kwargs, outs, link.made.out_spec,
                                                link.made.provenance))  # made again from its updated base
        tracer.values[id(t)] = outs[link.index]
        _freeze(tracer, outs[link.index], t)
        link.generation = self.generation.get(id(link.parent), 0)
        self._bump(t)
        return outs[link.index]

    def give_up(self, why: str, where: Provenance | None) -> None:
        if self.why is None:
            self.why = (f"{why}: FusionLens cannot follow it, so calls with this signature run eagerly", where)

    def _bump(self, t: torch.Tensor) -> None:
        self.generation[id(t)] = self.generation.get(id(t), 0) + 1

    # --- recording ----------------------------------------------------------------------------

    def before(self, tracer, func, args, kwargs) -> None:
        """Before a torch call runs: where it updates a tensor in place, raise eager's error where
        eager refuses the update (tracing runs on clones of the inputs, which autograd allows),
        and copy a parameter it updates (tracing must leave parameters as they were)."""
        if not args or not isinstance(args[0], torch.Tensor):
            return
        name = getattr(func, "__name__", "")
        if not (functional_name(name) or name == "__setitem__" or kwargs.get("inplace") is True) or \
                name in _NOT_DATA or name in _METADATA:
            return
        t = args[0]
        if torch.is_grad_enabled() and t.requires_grad and (  # not nn.init.*: those update under no_grad
                hasattr(torch.Tensor, name) or kwargs.get("inplace") is True):
            _refuse_leaf_copies(tracer, t)
        root = self.root(t)
        if tracer.known.get(id(root), (None,))[0] is ValueRole.PARAM and id(root) not in self.snapshots and \
                torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is None:
            self.snapshots[id(root)] = root.detach().clone()

    def root(self, t: torch.Tensor) -> torch.Tensor:
        while (link := self.links.get(id(t))) is not None:
            t = link.parent
        return t if t._base is None else t._base

    def mutating(self, tracer, t: torch.Tensor, name: str, where: Provenance | None,
                 args: tuple[Any, ...] = ()) -> None:
        """The torch call being recorded updates `t` in place (it ran already): functionalise it
        once it is recorded."""
        if name in _NOT_DATA:
            return
        if name in _METADATA:
            if id(t) in self.links or any(link.parent is t for link in self.links.values()):
                self.give_up(f"{name} changes the shape of a tensor that shares its memory with another", where)
            return
        self.pending = (t, tracer.to_value(t), name, where)
        self.written = args
        if name == "__setitem__" and self._puts_itself_back(t, args):
            self.pending = (t, self.pending[1], "", where)  # `x[k] += y` ends with x[k] = (x[k] updated)

    def _puts_itself_back(self, t: torch.Tensor, args: tuple[Any, ...]) -> bool:
        """Whether `t[key] = value` copies t's own box `t[key]` onto itself (a no-op in eager)."""
        link = self.links.get(id(args[2])) if len(args) == 3 and isinstance(args[2], torch.Tensor) else None
        if link is None or link.inverse[:1] != ("box",):
            return False
        key = args[1] if isinstance(args[1], tuple) else (args[1],)
        box = link.inverse[1] if isinstance(link.inverse[1], tuple) else (link.inverse[1],)
        plain = all(isinstance(k, (int, slice, type(None), type(Ellipsis))) for k in key + box)
        return link.parent is t and plain and key == box

    def recorded(self, tracer, func, args, kwargs, flat: list[Any]) -> None:
        """After a torch call is recorded: write an in-place update back through the views it
        went through; note each output that is a view of the tensor the call was made on."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            if not pending[2]:  # it changed nothing: not recorded at all
                tracer.bound_symbols.pop()
                tracer.values[id(pending[0])] = pending[1]
                return
            self._functionalise(tracer, *pending)
        tensors = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
        if not tensors or tensors[0].layout != torch.strided:
            return
        first, made, storage = tensors[0], tracer.bound_symbols[-1], None
        outs = [x for x in flat if isinstance(x, torch.Tensor)]
        known = tracer.inputs_by_id.get(id(first))
        # (a parameter's strides stay; an input's contiguous() is itself or a copy as the jit's key says)
        if func in _BY_STRIDES and (known is None or known.role is ValueRole.INPUT and
                                    func is not torch.Tensor.contiguous):
            self.by_strides.update(id(o) for o in outs)
            self.reshaped.add(first.untyped_storage()._cdata)
        for i, o in enumerate(outs):
            if o.layout != torch.strided or any(o is x for x in tensors):
                continue
            storage = storage or first.untyped_storage()._cdata
            if o.untyped_storage()._cdata == storage and len(made.outputs) == len(outs) and \
                    (link := _link(first, made, i, o, self.generation.get(id(first), 0))) is not None:
                self.links[id(o)] = link

    def _functionalise(self, tracer, t: torch.Tensor, old: Value | None, name: str, where) -> None:
        new = tracer.values.get(id(t))
        if new is None or old is None or new is old:
            return
        if tracer.grad and not torch.is_grad_enabled() and t.requires_grad and _differentiable(t):
            tracer.frozen.add(new.name)  # the update itself is not recorded by eager's autograd
            new = tracer.values[id(t)] = self._untracked_update(tracer, old, new, where)
        self._bump(t)
        if self.by_strides and self.stride_dependent is None and self._by_strides(t):
            self.stride_dependent = (f"in-place {name} of the result of a reshape, which is a view of its input or "
                                     "a copy as the strides of a non-contiguous input have it", where)
        elif self.stride_dependent is None and t.untyped_storage()._cdata in self.reshaped:
            self.stride_dependent = (f"in-place {name} of a tensor reshaped before, whose reshape is a view of it or "
                                     "a copy as the strides of a non-contiguous input have it", where)
        child, value, before = t, new, old
        while (link := self.links.get(id(child))) is not None:
            if not link.inverse or (link.inverse[0] == "expand" and (child is not t or name == "__setitem__")):
                self.give_up(f"in-place {name} of a view of another tensor ({link.why or 'part of an expanded view'})",
                             where)
                return
            parent = link.parent
            before = tracer.values[id(parent)]
            value = self._write_back(tracer, link, before, value, where)
            tracer.values[id(parent)] = value
            tracer.updated_at.setdefault(id(parent), where)
            self._bump(parent)
            link.generation = self.generation[id(parent)]
            child = parent
        self.updated.add(id(child))
        if id(child) in self.aliased.member:  # an input that shares memory with another (aliasing.py)
            self.aliased.write(tracer, self, child, before, value, name, where)
        elif id(child) in tracer.inputs_by_id and overlap.overlaps(child):
            self._shared(tracer, t, child, before, value, name, where)

    def _shared(self, tracer, t: torch.Tensor, x: torch.Tensor, before: Value, after: Value, name: str,
                where) -> None:
        """The input `x`, whose elements share memory, was updated (through `t`) from `before`
        to `after`, each element on its own: as eager, every element that aliases a written one
        shows the write. Followed where x is expanded (stride 0) and each location got one
        value: `t` does not overlap itself (torch refused the op otherwise), or the op wrote
        one value everywhere it wrote (a fill)."""
        why = None
        if x.requires_grad:  # (a non-leaf: eager's autograd replays the write on x's base)
            why = "it requires grad and its elements share memory, so autograd's record of the write is eager's"
        elif not overlap.only_expanded(x):
            why = "its elements overlap in memory (strides that make windows meet, as as_strided does)"
        elif not _once(t, name, self.written):
            why = "its elements share memory (stride 0: expanded), and the update writes several values into one " \
                  "location, which lands as eager's loop order has it"
        if why is not None:
            self.give_up(f"in-place {name or 'update'} of the input {tracer.inputs_by_id[id(x)].name}: {why}", where)
            return
        tracer.values[id(x)] = merge_dims(tracer, before, after, x, overlap.shared_dims(x), where)
        self._bump(x)

    def _by_strides(self, t: torch.Tensor) -> bool:
        """Whether an update of `t` goes through the result of a reshape (flatten, ...)."""
        chain = [t]
        while (link := self.links.get(id(chain[-1]))) is not None:
            chain.append(link.parent)
        return any(id(x) in self.by_strides for x in chain)

    def eager_because(self, originals: dict) -> tuple[str, Provenance | None] | None:
        """Why calls of this signature must run eagerly, if they must; `originals`: the caller's
        tensors by id(copy). An update through a reshape's result is followed only where every
        input is contiguous: the jit keys on contiguity alone, and other strides of a
        non-contiguous input may make eager's reshape a copy where it was a view here, or a view
        where it was a copy."""
        if self.stride_dependent is not None and any(
                x.layout == torch.strided and not x.is_contiguous() for x in originals.values()):
            self.give_up(*self.stride_dependent)
        self.aliased.eager_because(self, originals)
        return self.why

    def _write_back(self, tracer, link: Link, base: Value, view: Value, where) -> Value:
        """The parent's Value after its view `link` became `view`."""
        p, kind = link.parent, link.inverse[0]
        if kind == "box":
            tracer.extra_globals[SETITEM.name] = SETITEM.impl
            return _emit(tracer, SETITEM, (base, link.inverse[1], view), p, where)
        if kind == "reshape":
            return view if tuple(view.shape) == tuple(p.shape) else _emit(tracer, RESHAPE, (view, tuple(p.shape)), p,
                                                                          where)
        if kind == "permute":
            return _emit(tracer, PERMUTE, (view, link.inverse[1]), p, where)
        if kind == "diagonal":
            return _emit(tracer, DIAGONAL_SCATTER, (base, view, *link.inverse[1:]), p, where)
        if kind == "expand":
            return _emit(tracer, GETITEM, (view, link.inverse[1]), p, where)
        if kind == "alias":  # .detach(), .data: the update is not autograd's
            if tracer.grad and p.requires_grad and _differentiable(p):
                return self._untracked_update(tracer, base, view, where)
            return view
        return _scatter_by_index(tracer, link, base, view, where)

    def _untracked_update(self, tracer, old: Value, new: Value, where) -> Value:
        if self.untracked is None:
            printed = tracer._unique("untracked_update")
            tracer.extra_globals[printed] = untracked_update
            self.untracked = Symbol(printed, untracked_update, kind=SymbolKind.OPAQUE,
                                    tags=torch_ops.fallback_tags(untracked_update))
        out = Value(tracer.names.next(), old.shape, old.dtype, old.device)
        tracer.bound_symbols.append(BoundSymbol(self.untracked, (old, new), {}, [out], None, where,
                                                note="an update eager's autograd does not record"))
        return out

    # --- after tracing ------------------------------------------------------------------------

    def restore(self, tracer, params: list[torch.Tensor], originals: dict) -> bool:
        """Put back the parameters the traced call updated in place (tracing runs on them as they
        are), so that the program's write-back is their only update; their final values stand in
        as copies, which the call's own run writes back where the signature runs eagerly. All or
        none: False where one cannot be put back (updated inside a library call, or a write-back
        autograd would refuse) or the signature runs eagerly anyway."""
        if tracer.eager_only is not None or any(
                id(t) not in self.snapshots or id(t) not in self.updated for t in params):
            return False
        for t in params:
            final = t.detach().clone()
            with torch.no_grad():  # a version bump: a graph the traced run saved it in fails loudly
                t.copy_(self.snapshots[id(t)])
            originals[id(final)] = t
            tracer.alive.append(final)
        return True


_NOT_INPLACE_DUNDERS = ("__init__", "__index__", "__int__", "__invert__", "__iter__")


def functional_name(name: str) -> str | None:
    """The functional method name for an in-place one (add_ -> add, __iadd__ -> __add__)."""
    if name.startswith("__i") and name.endswith("__") and name not in _NOT_INPLACE_DUNDERS:
        return "__" + name[3:]
    if name.endswith("_") and not name.endswith("__") and not name.startswith("_"):
        return name[:-1]
    return None


def inplace_function_wrapper(func):
    """The functional form of an in-place torch function (torch.nn.init.constant_(tensor, v)):
    it updates a clone of its tensor argument."""
    def functional(*args, **kwargs):
        if args:
            y = args[0].clone()
            func(y, *args[1:], **kwargs)
            return y
        key = next(k for k, v in kwargs.items() if isinstance(v, torch.Tensor))
        y = kwargs[key].clone()
        func(**{**kwargs, key: y})
        return y
    functional.__name__ = f"functional_{getattr(func, '__name__', 'inplace')}"
    return functional


def inplace_wrapper(method_name: str):
    """The functional form of an in-place Tensor method: it updates a clone."""
    def functional(x, *args, **kwargs):
        y = x.clone()
        getattr(y, method_name)(*args, **kwargs)
        return y
    functional.__name__ = f"functional_{method_name}"
    return functional


_FILLS = {"fill_", "zero_"}  # write one value everywhere
_FILLS_WITH = {"__setitem__", "masked_fill_", "index_fill_"}  # write their last argument where they write


def _once(t: torch.Tensor, name: str, args: tuple[Any, ...]) -> bool:
    """Whether each memory location the in-place op `name` on `t` wrote got one value: what
    it wrote into does not overlap itself (`x[0] = v`: a row of x), or it writes one value
    wherever it writes (a fill)."""
    if name in _FILLS:
        return True
    value = args[-1] if name in _FILLS_WITH and len(args) >= 2 else None
    if name in _FILLS_WITH and (not isinstance(value, torch.Tensor) or value.numel() == 1):
        return True
    key = args[1] if name == "__setitem__" and len(args) == 3 else ...
    basic = (int, slice, type(None), type(Ellipsis))
    if isinstance(key, tuple) and all(isinstance(k, basic) for k in key) or isinstance(key, basic):
        with torch._C.DisableTorchFunction():  # not recorded: the box the op wrote
            return not overlap.overlaps(t[key])
    return False  # advanced indices may name one location twice


def merge_dims(tracer, before: Value, after: Value, like: torch.Tensor, dims: tuple[int, ...], where) -> Value:
    """`after` (`before` updated element by element) with every element that aliases a location
    along `dims` (stride 0) showing the value written there: along each dim the first element
    that changed, else (nothing written there) the one all of them hold."""
    changed = _emit(tracer, NE, (after, before), like, where, dtype=torch.bool)
    if like.dtype.is_floating_point or like.dtype.is_complex:  # a NaN left as it was is no change
        nans = [_emit(tracer, ISNAN, (v,), like, where, dtype=torch.bool) for v in (after, before)]
        both = _emit(tracer, AND, tuple(nans), like, where, dtype=torch.bool)
        kept = _emit(tracer, NOT, (both,), like, where, dtype=torch.bool)
        changed = _emit(tracer, AND, (changed, kept), like, where, dtype=torch.bool)
    value, shape = after, list(like.shape)
    for d in dims:
        shape[d] = 1
        flags = _emit(tracer, TO, (changed, torch.int32), like, where, shape=tuple(changed.shape), dtype=torch.int32)
        first = _emit(tracer, ARGMAX, (flags, d, True), like, where, shape=tuple(shape), dtype=torch.int64)
        value = _emit(tracer, GATHER, (value, d, first), like, where, shape=tuple(shape))
        if d != dims[-1]:
            changed = _emit(tracer, ANY, (changed, d, True), like, where, shape=tuple(shape), dtype=torch.bool)
    return _emit(tracer, EXPAND, (value, tuple(like.shape)), like, where)


def _differentiable(t) -> bool:
    return t.dtype.is_floating_point or t.dtype.is_complex


def _freeze(tracer, v: Value, t: torch.Tensor) -> None:
    """As the frontend's record does: a value eager's autograd does not track, in a call that
    is differentiated, is frozen."""
    if tracer.grad and not t.requires_grad and _differentiable(t):
        tracer.frozen.add(v.name)


def _emit(tracer, sym: Symbol, args: tuple[Any, ...], like: torch.Tensor, where, kwargs: dict[str, Any] | None = None,
          shape: tuple[int, ...] | None = None, dtype: torch.dtype | None = None) -> Value:
    """Record a write-back op at the update's line, with no note: each decomposes into what fusion
    takes (a scatter prim, a view), where a note would list it as a fallback and end a region."""
    out = Value(tracer.names.next(), like.shape if shape is None else shape, dtype or like.dtype, like.device)
    tracer.bound_symbols.append(BoundSymbol(sym, args, kwargs or {}, [out], None, where))
    _freeze(tracer, out, like)
    return out


def _refuse_leaf_copies(tracer, t: torch.Tensor) -> None:
    """Inputs are traced on clones, which autograd lets be updated in place; where the caller's
    tensor is a leaf that requires grad, eager refuses the update (of it, or of a view of it):
    so does the trace, with eager's error."""
    base = t if t._base is None else t._base
    if base.requires_grad and id(base) in tracer.inputs_by_id and _clone_of_leaf(base):
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation."
                           if base is not t else
                           "a leaf Variable that requires grad is being used in an in-place operation.")


def _clone_of_leaf(t: torch.Tensor) -> bool:
    fn = t.grad_fn
    return fn is not None and type(fn).__name__ in ("CloneBackward0", "_SharedCopyBackward") and \
        len(fn.next_functions) == 1 and \
        type(fn.next_functions[0][0]).__name__ == "AccumulateGrad"


def _link(parent: torch.Tensor, made: BoundSymbol, index: int, view: torch.Tensor, generation: int) -> Link | None:
    source = next((v for v in pytree.tree_leaves((made.args, made.kwargs)) if isinstance(v, Value)), None)
    if source is None:  # the parent's Value: made's first, as the parent is its first tensor
        return None
    return Link(parent, view, made, index, source, generation)


def _inverse(made: BoundSymbol, index: int, parent: torch.Tensor, view: torch.Tensor) -> tuple[Any, ...]:
    """How an update of `view` (made's output `index`) goes back into `parent`; () where it cannot."""
    name, nd = made.sym.name, parent.ndim
    if view.dtype != parent.dtype or name in _UNREPLAYABLE:
        return ()
    if name == "operator.getitem":
        return ("box", made.args[1])
    if name in _RESHAPES:
        return ("reshape",)
    if name == "torch.Tensor.detach":
        return ("alias",)
    if name in _PERMUTES:
        return ("permute", _inverse_permutation(made, parent))
    if name in ("torch.diagonal", "torch.linalg.diagonal"):
        return _diagonal(made)
    if name in _EXPANDS:
        if view.numel() == parent.numel():
            return ("reshape",)
        lead = view.ndim - nd
        return ("expand", (0,) * lead + tuple(slice(0, 1) if parent.shape[i] == 1 and view.shape[lead + i] != 1
                                             else slice(None) for i in range(nd)))
    bound = made.sym.decomposition_signature.bind(*made.args, **made.kwargs) if made.sym.decomposition else None
    if bound is not None:
        bound.apply_defaults()
        a = bound.arguments
        if name in ("torch.narrow", "torch.select", "torch.unbind") or name in _SPLITS:
            d = a["dim"] % nd
            if name == "torch.narrow":
                start = a["start"] % parent.shape[d] if a["start"] < 0 else a["start"]
                return ("box", (slice(None),) * d + (slice(start, start + a["length"]),))
            if name in ("torch.select", "torch.unbind"):
                return ("box", (slice(None),) * d + (a["index"] if name == "torch.select" else index,))
            start = sum(made.outputs[j].shape[d] for j in range(index))
            return ("box", (slice(None),) * d + (slice(start, start + view.shape[d]),))
    return ("index",) if made.sym.kind != SymbolKind.OPAQUE else ()


def _diagonal(made: BoundSymbol) -> tuple[Any, ...]:
    """("diagonal", offset, dim1, dim2) of a diagonal view, from its recorded arguments."""
    a = dict(zip(("input", "offset", "dim1", "dim2"), made.args)) | dict(made.kwargs)
    return ("diagonal", a.get("offset", 0), a.get("dim1", 0), a.get("dim2", 1))


def _inverse_permutation(made: BoundSymbol, parent: torch.Tensor) -> tuple[int, ...]:
    """The dims that undo a permuting op: it is run on a meta tensor of distinct strides."""
    nd = parent.ndim
    probe = torch.empty_strided((2,) * nd, tuple(range(nd, 0, -1)), device="meta")
    source = next(v for v in pytree.tree_leaves((made.args, made.kwargs)) if isinstance(v, Value))
    swap = lambda x: probe if isinstance(x, Value) and x.name == source.name else x  # noqa: E731
    args, kwargs = pytree.tree_map(swap, (made.args, made.kwargs))
    out = made.sym.impl(*args, **kwargs)
    order = [probe.stride().index(s) for s in out.stride()]  # view dim i is parent dim order[i]
    inverse = [0] * nd
    for i, d in enumerate(order):
        inverse[d] = i
    return tuple(inverse)


def _scatter_by_index(tracer, link: Link, base: Value, view: Value, where) -> Value:
    """Any other view op (unfold, hsplit, ...): it is replayed on the parent's flat element
    numbers, and the view's new elements are put at the numbers it holds (an index_copy: one
    scatter prim, which the fusion executors take)."""
    p, made = link.parent, link.made
    n, device = p.numel(), p.device
    flat_numbers = _emit(tracer, ARANGE, (n,), p, where, {"dtype": torch.int64, "device": device}, (n,), torch.int64)
    numbers = _emit(tracer, RESHAPE, (flat_numbers, tuple(p.shape)), p, where, dtype=torch.int64)
    swap = lambda x: numbers if isinstance(x, Value) and x.name == link.source.name else x  # noqa: E731
    args, kwargs = pytree.tree_map(swap, (made.args, made.kwargs))
    outs = [Value(tracer.names.next(), o.shape, torch.int64, o.device) for o in made.outputs]
    tracer.bound_symbols.append(BoundSymbol(made.sym, args, kwargs, outs, made.out_spec, where))
    m = view.numel()
    at = _emit(tracer, RESHAPE, (outs[link.index], (m,)), p, where, shape=(m,), dtype=torch.int64)
    flat = _emit(tracer, RESHAPE, (base, (n,)), p, where, shape=(n,))
    values = _emit(tracer, RESHAPE, (view, (m,)), p, where, shape=(m,))
    put = _emit(tracer, INDEX_COPY, (flat, 0, at, values), p, where, shape=(n,))
    return _emit(tracer, RESHAPE, (put, tuple(p.shape)), p, where)
