"""Inputs that share memory with one another: `f(x, x[0])`, `f(a, a.view(-1))`, `f(base, base[:, 1:])`,
or an argument that is a view of a module's buffer.

Eager's rule is the memory's: a write into one of them shows in every other that covers the
location written, and a read before the write sees the old value. Traced as independent
tensors, the program would miss that (a silent wrong result). So:

- the call is traced on copies that share memory as the caller's tensors do (one copy of the
  memory they span, each tensor a view of it: `Aliased`), so the traced run is eager's;
- a write into one of them is functionalised over that memory, as torch.compile's
  aot_autograd does over a synthetic base: at the first write the program reads the span once
  (`alias_span`, from the written input itself: nothing is written back before the program
  ends), puts the written tensor's new elements into it (`span_put`), and every other tensor of
  the group is from then on a view of the new span (`span_view`); each is then written back to
  the caller, so a result that is one of them is the caller's own tensor, as in eager;
- jit keys such a program by how the call's tensors share memory (`Relation`: which of them
  share a storage, at which offsets and strides), so that a call without aliasing never reuses
  a program built with it, nor the reverse; a program that writes into no input serves any.

Where that cannot be done right the signature runs eagerly and the report says why at the
line of the write: a group with a parameter, tensors that view the memory as different dtypes,
a tensor whose own elements overlap, an update inside a torch call (`out=`), a write in a call
autograd differentiates (in grad mode, a tensor of the call or a parameter requires grad: its
backward would read values the program saved before writing the memory back). Where the
traced run is not eager's (`rerun`: the copies could not share memory, or carry no autograd
history of the write), the first call itself runs eagerly rather than returning it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fusionlens.frontend import overlap
from fusionlens.frontend.arguments import parameter_names, user_tensors
from fusionlens.ir.torch_compat import same_values
from fusionlens.ir.trace import BoundSymbol, Symbol, SymbolKind, Value
from fusionlens.ir.vocabulary import ValueRole
from fusionlens.ops import torch_ops


def _storage(t: Any) -> int | None:
    """The identity of a strided tensor's storage (None: another layout, or no storage)."""
    if not isinstance(t, torch.Tensor) or t.layout is not torch.strided:
        return None
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, TypeError):  # a subclass without one storage
        return None


def _bytes(t: torch.Tensor) -> tuple[int, int] | None:
    """The bytes [first, end) of its storage that `t` spans; None where it is empty."""
    if t.numel() == 0:
        return None
    size = t.element_size()
    first = int(t.storage_offset()) * size
    return first, first + (1 + sum((int(n) - 1) * int(st) for n, st in zip(t.shape, t.stride()))) * size


def groups(tensors: Sequence[Any]) -> list[list[int]]:
    """Indices of the tensors whose memory may meet: same storage and overlapping byte ranges,
    joined transitively (two chunks of one buffer, side by side, do not meet), sorted."""
    by_storage: dict[int, list[int]] = {}
    for i, t in enumerate(tensors):
        key = _storage(t)
        if key is not None:
            by_storage.setdefault(key, []).append(i)
    out = []
    for shared in by_storage.values():
        # sizes read only where a storage is shared: a symbolic size (a fake tensor's) read
        # as an int would become a guard
        shared = [i for i in shared if len(shared) > 1 and _bytes(tensors[i]) is not None]
        if len(shared) < 2:
            continue
        ranges = sorted((_bytes(tensors[i]), i) for i in shared)  # (first, end) of each, in order
        run, end = [ranges[0][1]], ranges[0][0][1]  # type: ignore[index]
        for (first, last), i in ranges[1:]:  # type: ignore[misc]
            if first < end:
                run.append(i)
                end = max(end, last)
            else:
                out += [sorted(run)] if len(run) > 1 else []
                run, end = [i], last
        out += [sorted(run)] if len(run) > 1 else []
    return out


def describe(tensors: Sequence[torch.Tensor], found: list[list[int]], users: int) -> tuple:
    """The groups as jit keys them: per group, each tensor's (index, first byte from the
    group's, strides); only groups with one of the first `users` tensors (the call's: the
    others are a module's, the same at every call)."""
    out = []
    for g in found:
        if all(i >= users for i in g):
            continue
        first = min(_bytes(tensors[i])[0] for i in g)  # type: ignore[index]
        out.append(tuple((i, _bytes(tensors[i])[0] - first, tuple(tensors[i].stride())) for i in g))  # type: ignore[index]
    return tuple(out)


def of(tensors: Sequence[Any], constants: Sequence[torch.Tensor] = (), fixed: frozenset[int] = frozenset()) -> tuple:
    """How the call's `tensors` share memory, with each other and with `constants` (whose
    storages are `fixed`): () where none shares a storage, found in one pass over their
    storages; the groups (`describe`) only where two do."""
    try:  # (per call, for a program that writes into an input: kept to one set of storages)
        keys = {t.untyped_storage()._cdata for t in tensors}
    except (AttributeError, RuntimeError, NotImplementedError, TypeError):  # another layout: the long way
        keys = set()
    if len(keys) == len(tensors) and fixed.isdisjoint(keys):
        return ()
    everything = [*tensors, *constants]
    return describe(everything, groups(everything), len(tensors))


class Relation:
    """What a jit program that writes into an input is keyed by besides its signature: how its
    call's user tensors shared memory (`value`). `holds(tensors)` at each call: one pass over
    their storages where none is shared, as for almost every call."""

    def __init__(self, tensors: Sequence[Any], constants: Sequence[torch.Tensor], fn=None):
        mine = {id(c) for c in constants}  # (a module's parameters and buffers the program does not read too)
        more = [t for t in module_state(fn) if id(t) not in mine]
        self.constants = [c for c in [*constants, *more] if isinstance(c, torch.Tensor)]
        self.fixed = frozenset(k for k in map(_storage, self.constants) if k is not None)
        self.value = self.now(tensors)

    def now(self, tensors: Sequence[Any]) -> tuple:
        return of(tensors, self.constants, self.fixed)

    def holds(self, tensors: Sequence[Any]) -> bool:
        return self.now(tensors) == self.value


def module_state(fn) -> list[torch.Tensor]:
    """The parameters and buffers of the module `fn` is or is a method of."""
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    return list(module.parameters()) + list(module.buffers()) if isinstance(module, torch.nn.Module) else []


# --- what a program calls ------------------------------------------------------------------

def alias_span(t: torch.Tensor, n: int, offset: int) -> torch.Tensor:
    """The `n` elements of memory the group of `t` spans, `t`'s first `offset` elements in."""
    return t.as_strided((n,), (1,), t.storage_offset() - offset)


def span_view(span: torch.Tensor, shape: tuple[int, ...], stride: tuple[int, ...], offset: int) -> torch.Tensor:
    """A tensor of the group as a view of its span (a copy of the memory, contiguous)."""
    span = span.contiguous()
    return span.as_strided(shape, stride, span.storage_offset() + offset)


def span_put(span: torch.Tensor, value: torch.Tensor, stride: tuple[int, ...], offset: int) -> torch.Tensor:
    """The span with one tensor of the group (`value`'s shape, `stride`, at `offset`) written."""
    out = span.clone(memory_format=torch.contiguous_format)
    out.as_strided(value.shape, stride, offset).copy_(value)
    return out


_NOTE = "the memory of inputs that share it, read and updated as one (aliased inputs)"


@dataclass
class Group:
    """Tensors of the call that share memory, as traced."""

    originals: list[torch.Tensor]  # the caller's tensors (and module buffers)
    copies: list[torch.Tensor]  # what the call runs on: views of one copy of their memory (unless rerun)
    offsets: list[int]  # each one's first element from the span's (elements)
    span: int  # the elements the group spans
    why: str = ""  # why a write into it runs the signature eagerly ("": followed)
    rerun: bool = False  # the copies do not share memory: where one is written, the call runs for real
    value: Value | None = None  # the span's Value, from the first write on
    versions: list[int] = field(default_factory=list)


class Aliased:
    """The groups of a traced call's tensors that share memory, their copies, and how a write
    into one of them is functionalised (`write`, from views.py)."""

    def __init__(self, fn=None, args=(), kwargs=None, clone=None, tracer=None):
        self.tracer = tracer  # (its captured constants, read after tracing)
        self.groups: list[Group] = []
        self.copies: dict[int, torch.Tensor] = {}  # id(caller's tensor) -> the copy traced on
        self.member: dict[int, Group] = {}  # id(copy) -> its group
        self.rerun = False  # the traced run is not the call's: the first call runs eagerly
        self.symbols: dict[str, Symbol] = {}
        self.differentiated = False  # something the call takes requires grad, in grad mode
        if fn is not None and clone is not None:
            self._find(fn, args, kwargs or {}, clone)

    def _find(self, fn, args, kwargs, clone) -> None:
        state, users = module_state(fn), user_tensors(fn, args, kwargs)
        self.differentiated = torch.is_grad_enabled() and any(t.requires_grad for t in [*users, *state])
        called = {id(u) for u in users}
        for t in state:  # a buffer passed as an argument too: one copy, the buffer read as the input
            if id(t) in called:
                self.copies[id(t)] = clone(t)
        tensors = list({id(t): t for t in [*users, *state]}.values())
        params = {i for i, (role, _) in parameter_names(fn).items() if role is ValueRole.PARAM}
        for g in groups(tensors):
            if not any(id(tensors[i]) in called for i in g):  # a module's own tensors only (tied, packed): as before
                continue
            members = [tensors[i] for i in g]
            why = _why(members, params)
            made = _shared_copies(members) if not why[1] else [clone(t) for t in members]
            group = Group(members, made, [], 0, why[0], why[1], versions=[c._version for c in made])
            if not why[1]:
                first = min(t.storage_offset() for t in members)
                group.offsets = [t.storage_offset() - first for t in members]
                group.span = max(o + _bytes(t)[1] // t.element_size() - t.storage_offset()  # type: ignore[index]
                                 for o, t in zip(group.offsets, members))
            self.groups.append(group)
            for t, c in zip(members, made):
                self.copies[id(t)], self.member[id(c)] = c, group

    def clone(self, clone):
        """`clone` where a tensor is in no group; its group's copy where it is."""
        return lambda x: self.copies[id(x)] if id(x) in self.copies else clone(x)

    # --- tracing ------------------------------------------------------------------------------

    def write(self, tracer, views, t: torch.Tensor, before: Value, after: Value, name: str, where) -> None:
        """The copy `t` of a group was updated in place from `before` to `after`: the group's
        span takes its new elements, and every other tensor of the group is a view of it."""
        g = self.member[id(t)]
        why = g.why or ("autograd records the write" if tracer.grad and t.requires_grad else "") or (
            "the call is differentiated, and its backward could read an input after the program wrote it" if
            self.differentiated or tracer.grad and any(x.requires_grad for x in tracer.alive) else "")
        if why:
            self.rerun = self.rerun or g.rerun or bool(tracer.grad and t.requires_grad)
            label = tracer.inputs_by_id[id(t)].name if id(t) in tracer.inputs_by_id else "a tensor"
            views.give_up(f"in-place {name or 'update'} of {label}, which shares memory with another input: {why}",
                          where)
            return
        i = next(j for j, c in enumerate(g.copies) if c is t)
        if g.value is None:  # the memory as the call found it, read from the input being written
            for c in g.copies:  # each an input of the program (a buffer never read too): what it reads
                tracer.to_value(c)
            g.value = self._emit(tracer, alias_span, (before, g.span, g.offsets[i]), (g.span,), t, where)
        g.value = self._emit(tracer, span_put, (g.value, after, tuple(t.stride()), g.offsets[i]), (g.span,), t,
                             where)
        for c, offset in zip(g.copies, g.offsets):
            views.updated.add(id(c))  # written back to the caller, each (a result that is one is the caller's)
            tracer.updated_at.setdefault(id(c), where)
            if c is not t:
                tracer.values[id(c)] = self._emit(tracer, span_view, (g.value, tuple(c.shape), tuple(c.stride()),
                                                                      offset), tuple(c.shape), c, where)
                views._bump(c)

    def _emit(self, tracer, fn, args: tuple, shape: tuple, like: torch.Tensor, where) -> Value:
        sym = self.symbols.get(fn.__name__)
        if sym is None:
            printed = tracer._unique(fn.__name__)
            tracer.extra_globals[printed] = fn
            sym = self.symbols[fn.__name__] = Symbol(printed, fn, kind=SymbolKind.OPAQUE,
                                                     tags=torch_ops.fallback_tags(fn))
        out = Value(tracer.names.next(), shape, like.dtype, like.device)
        tracer.bound_symbols.append(BoundSymbol(sym, args, {}, [out], None, where, note=_NOTE))
        if tracer.grad and (like.dtype.is_floating_point or like.dtype.is_complex):
            tracer.frozen.add(out.name)  # no tensor of the group requires grad (else `write` gave up)
        return out

    def eager_because(self, views, originals: dict) -> None:
        """After tracing: a group whose memory changed where no recorded write said so (inside a
        torch call), or whose copies could not share memory, runs the signature eagerly; so does
        a write where an input shares memory with a tensor the call read as a global (`captured`)."""
        for g in self.groups:
            changed = [c for c, v, o in zip(g.copies, g.versions, g.originals)
                       if c._version != v or not same_values(c, o)]
            if changed and (g.rerun or g.value is None):
                self.rerun = self.rerun or g.rerun
                views.give_up(f"an input that shares memory with another is updated ({g.why or 'inside a torch call'})",
                              None)
        if self.tracer is not None and (found := self._captured(views.updated, originals)):
            self.rerun = True  # the traced run read the global's memory apart from the input's
            views.give_up(*found)

    def _captured(self, updated: set[int], originals: dict) -> tuple[str, Any] | None:
        """Why the signature runs eagerly where an input the call updates shares memory with a
        captured constant (a global the function reads: traced on the real tensor, the input on a
        copy), and where it is first updated; None where none does."""
        tracer = self.tracer
        names = [v.name for v in tracer.inputs if v.role is ValueRole.CONST]
        if not names or not updated:
            return None
        users = [(c, originals[id(c)]) for c in tracer.alive if id(c) in originals and id(c) in tracer.inputs_by_id]
        tensors = [tracer.constants[n] for n in names] + [o for _, o in users]
        written = {len(names) + j for j, (c, _) in enumerate(users) if id(c) in updated}
        written |= {i for i, n in enumerate(names) if id(tracer.constants[n]) in updated}  # a global it updated
        for g in groups(tensors):
            if g[0] < len(names) and g[-1] >= len(names) and written.intersection(g):
                first = min(written.intersection(g))
                t = tracer.constants[names[first]] if first < len(names) else users[first - len(names)][0]
                user = tracer.inputs_by_id[id(users[g[-1] - len(names)][0])].name
                return (f"{tracer.inputs_by_id[id(t)].name} is updated in place, and the input {user} shares memory "
                        f"with {names[g[0]]}, a tensor the function reads as a global", tracer.updated_at.get(id(t)))
        return None


def _why(members: list[torch.Tensor], params: set[int]) -> tuple[str, bool]:
    """(why a write into these tensors runs eagerly, whether their copies cannot share memory)."""
    if any(id(t) in params for t in members):
        return "one of them is a parameter", True
    if len({t.dtype for t in members}) > 1:
        return "they view it as different dtypes", True
    if torch.is_grad_enabled() and any(t.requires_grad for t in members):
        return "one of them requires grad, and autograd's record of the write through the other is eager's", True
    if type(members[0]) is not torch.Tensor or any(type(t) is not type(members[0]) for t in members):
        return "a tensor subclass", True
    if any(overlap.overlaps(t) for t in members):
        return "the elements of one of them share memory too", False
    return "", False


def _shared_copies(members: list[torch.Tensor]) -> list[torch.Tensor]:
    """Copies of `members` that share one copy of the memory they span, as the members do."""
    first = min(_bytes(t)[0] for t in members)  # type: ignore[index]
    end = max(_bytes(t)[1] for t in members)  # type: ignore[index]
    raw = torch.empty(0, dtype=torch.uint8, device=members[0].device)
    memory = raw.set_(members[0].untyped_storage(), first, (end - first,), (1,)).clone()
    out = []
    for t in members:
        at = (t.storage_offset() * t.element_size() - first) // t.element_size()
        out.append(torch.empty(0, dtype=t.dtype, device=t.device).set_(memory.untyped_storage(), at, t.shape,
                                                                       t.stride()))
    return out


def copies(tensors: Sequence[Any], which: Sequence[bool]) -> list[Any]:
    """`tensors` with those `which` says cloned (a check must not update the caller's), those
    that share memory cloned together, sharing it as they did."""
    out = [t.clone() if w and isinstance(t, torch.Tensor) else t for t, w in zip(tensors, which)]
    for g in groups(tensors):
        members = [tensors[i] for i in g]
        if any(which[i] for i in g) and len({t.dtype for t in members}) == 1 and \
                all(type(t) is torch.Tensor for t in members):
            for i, c in zip(g, _shared_copies(members)):
                out[i] = c
    return out
