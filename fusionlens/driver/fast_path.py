"""The cached call of `compiler.jit` as generated code: key, guards and write-back per program.

The generic path of jit_cache.py keys a call by walking its arguments (pytree, the objects
passed in: a KV cache's layers), looks the key up, checks a dynamic program's guards and
writes what the call left in a cache back through `objects.apply` and `objects.resolve`.
Here, once a program has served a call, that call's form (the arguments' structure, each
tensor's dtype, device, requires_grad and layout, the grad and train modes, the objects'
layout) is written as one straight-line Python function, the ShapeEnv's guard expression
inlined, and exec'd, as dynamo's guards are. The next call of that form runs the function:
its checks, the program, the cache's updates set slot by slot. A size the program serves
symbolically (a DynamicCache grown by a token) is checked by the guard expression, never
keyed. A program that branched on a tensor's value (frontend/value_guards.py) re-reads it:
the ops the value depends on run again on the call's inputs (a value of sizes only, once per
size); a value that differs is a MISS, and the generic path finds or compiles that branch.
A call the function rejects (`MISS`) takes the generic path, which serves or compiles it and
arms its program here in turn.

A call the generated code serves counts as a hit in `cache_info()` (`FastPaths.served`) (a new size a dynamic
program serves too: the generic path counted it a miss that compiled nothing).

The invariant: a call the function accepts is one the generic path would serve with the
same program. Anything whose check could not be written exactly (an argument keyed by
identity, a pytree node other than tuple, list and dict, a tensor held twice) is not armed:
those calls keep the generic path.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fusionlens.frontend import objects, tracer as frontend
from fusionlens.ir import program_calls
from fusionlens.ops.torch_ops.fallbacks import ShapeChanged

try:  # dynamo's C++ check of tensors' dispatch keys, dtype, device, requires_grad, sizes, strides
    from torch._C._dynamo import guards as _dynamo_guards
    TensorGuards: Any = _dynamo_guards.TensorGuards
except (ImportError, AttributeError):  # pragma: no cover - a torch without dynamo: no fast path
    TensorGuards = None

MISS = object()  # what a generated function returns for a call it does not serve
MAX_ARMED = 8  # programs with a generated function at once, the latest first
MAX_REBUILDS = 4  # a program whose function keeps rejecting calls its key accepts is left to the generic path
_SIMPLE = (bool, type(None))  # compared by identity
_BY_VALUE = (str, bytes, int, float, complex, torch.dtype, torch.device)
_NO_GRAD_CODE = program_calls.no_grad(lambda: None).__code__  # how a program's no_grad wrapper is recognised


class NotArmed(Exception):
    """A call whose form the fast path does not write as code (the reason)."""


class FastPaths:
    """A JitFunction's generated calls: `serve(args, kwargs)` is the result, or MISS."""

    def __init__(self, owner):
        self.owner = owner  # the JitFunction: `last` is set on it
        self.armed: list[tuple[Any, Callable, str]] = []  # (entry, its function, its source)
        self.rebuilds: dict[int, int] = {}  # id(entry) -> how often its function was rebuilt
        self.serve: Callable = _miss
        self.served = 0  # calls a generated function served

    def arm(self, entry, args, kwargs, generation: list[int]) -> None:
        """After the generic path chose `entry` for this call (before it ran): make its
        generated function the first tried. An entry armed already and first in line has just
        rejected a call its key accepts (a layout the function checks more strictly): rebuilt
        from this call, a few times at most."""
        found = next((i for i, (e, _, _) in enumerate(self.armed) if e is entry), None)
        if found is not None and found > 0:
            self.armed.insert(0, self.armed.pop(found))
        elif found is None or self.rebuilds.get(id(entry), 0) < MAX_REBUILDS:
            if found == 0:
                if len(self.rebuilds) > 4 * MAX_ARMED:  # entries long evicted: their counts go too
                    self.rebuilds.clear()
                self.rebuilds[id(entry)] = self.rebuilds.get(id(entry), 0) + 1
                self.armed.pop(0)
            try:
                fn, source = generate(self.owner, entry, args, kwargs, generation)
            except NotArmed:
                return
            self.armed.insert(0, (entry, fn, source))
            del self.armed[MAX_ARMED:]
        self._rebind()

    def drop(self, entry) -> None:
        self.armed = [a for a in self.armed if a[0] is not entry]
        self._rebind()

    def clear(self) -> None:
        self.armed.clear()
        self.rebuilds.clear()
        self._rebind()

    def source(self, entry) -> str | None:
        """The generated function of `entry` as Python source (None: not armed)."""
        return next((s for e, _, s in self.armed if e is entry), None)

    def _rebind(self) -> None:
        fns = tuple(f for _, f, _ in self.armed)
        if not fns:
            self.serve = _miss
        elif len(fns) == 1:
            self.serve = fns[0]
        else:
            def serve(args, kwargs):
                for f in fns:
                    out = f(args, kwargs)
                    if out is not MISS:
                        return out
                return MISS
            self.serve = serve


def _miss(args, kwargs):
    return MISS


class _Writer:
    """The generated function's lines and the constants it refers to (by name, in its globals)."""

    def __init__(self):
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.count = 0
        self.tensors: list[tuple[str, torch.Tensor, list, list]] = []  # (local, tensor, sizes, strides)

    def const(self, value, prefix: str = "K") -> str:
        for name, v in self.consts.items():
            if v is value:
                return name
        name = f"{prefix}{len(self.consts)}"
        self.consts[name] = value
        return name

    def local(self, prefix: str = "v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def check(self, condition: str) -> None:
        self.lines.append(f"if not ({condition}): return MISS")


def generate(owner, entry, args, kwargs, generation: list[int]) -> tuple[Callable, str]:
    """`entry`'s program as a function of (args, kwargs) for calls of this call's form."""
    c = entry.compiled
    if TensorGuards is None or entry.eager_fallback or owner.wrapper is not None or owner.sharded is not None \
            or owner.transforms:
        raise NotArmed("the call runs eagerly or under a parallel wrapping")
    w = _Writer()
    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    w.check(f"len(args) == {len(args)} and len(kwargs) == {len(kwargs)}")
    args_spec, kwargs_spec = spec.children() if hasattr(spec, "children") else spec.children_specs
    exprs = _structure(w, args_spec, "args", root=True) + _structure(w, kwargs_spec, "kwargs", root=True)
    leaf_vars: list[str] = []
    by_id: dict[int, str] = {}  # id(tensor) -> the local that holds it
    states: list[tuple[Any, str]] = []  # (object passed in, its local)
    symbolic_ints = set(c.guards.ints) if c.guards is not None else set()
    for position, (leaf, expr) in enumerate(zip(flat, exprs)):
        var = w.local()
        w.lines.append(f"{var} = {expr}")
        leaf_vars.append(var)
        if isinstance(leaf, torch.Tensor):
            _tensor(w, var, leaf)
            by_id.setdefault(id(leaf), var)
        elif objects.is_state(leaf):
            w.check(f"type({var}) is {w.const(type(leaf))}")
            if id(leaf) not in {id(s) for s, _ in states}:
                states.append((leaf, var))
                _state(w, leaf, var, by_id)
        elif position in symbolic_ints:
            w.check(f"type({var}) is int")
        else:
            _plain(w, var, leaf)
    _modes(w, owner, entry, generation)
    user = frontend.user_tensors(owner.fn, args, kwargs)
    if len({id(t) for t in user}) != len(user) or any(id(t) not in by_id for t in user):
        raise NotArmed("a tensor held twice, or one the walk did not reach")
    inputs = [by_id[id(t)] for t in user]
    _tensor_guards(w, c.guards, user, by_id)
    if entry.captured is not None:  # the tensors it reached by name (globals): still those, laid out alike
        w.check(f"{w.const(entry.captured, 'CG')}.holds()")
    if entry.aliases is not None:  # a program that writes into an input: its call's tensors shared memory alike
        w.check(f"{w.const(entry.aliases, 'AL')}.holds([{', '.join(inputs)}])")
    if c.guards is not None:
        _symbolic(w, c.guards, inputs, [leaf_vars[p] for p in c.guards.ints])
    if entry.values is not None:  # the branch's values read again (a read of sizes only: once per size)
        w.check(f"{w.const(entry.values, 'VG')}.failing([{', '.join(inputs)}, *C]) is None")
    return _finish(w, owner, entry, inputs, leaf_vars, states)


def _structure(w: _Writer, spec, expr: str, root: bool = False) -> list[str]:
    """Checks that a pytree node is the spec's (tuple, list or dict of that length and keys);
    the expressions of its leaves, in flatten order. The call's own args and kwargs (`root`)
    are a tuple and a dict whose lengths are checked first."""
    if spec.is_leaf():
        return [expr]
    if spec.type not in (tuple, list, dict):
        raise NotArmed(f"an argument of pytree type {spec.type.__name__}")
    node = expr
    if not root:
        node = w.local("n")
        w.lines.append(f"{node} = {expr}")
        w.check(f"type({node}) is {spec.type.__name__} and len({node}) == {spec.num_children}")
    if spec.type is dict:
        keys = list(spec.context)
        children = [f"{node}[{w.const(k)}]" for k in keys]
    else:
        children = [f"{node}[{i}]" for i in range(spec.num_children)]
    specs = spec.children() if hasattr(spec, "children") else spec.children_specs  # (torch < 2.13: a field)
    return [e for child, ce in zip(specs, children) for e in _structure(w, child, ce)]


def _tensor(w: _Writer, var: str, t: torch.Tensor) -> None:
    """What the generic key holds of a tensor: its type, dispatch keys, dtype, device,
    requires_grad, sizes and strides in one C++ check of all the call's tensors at once
    (dynamo's TensorGuards, which compares each one's exact Python type too), a dynamic
    program's symbolic sizes and strides left to its guard expression (`fake`: the tensor it
    was traced as). Where a torch's TensorGuards would not compare the type, a check here does."""
    if t.layout is not torch.strided:
        raise NotArmed(f"a {t.layout} tensor")
    if not _checks_type():
        w.check(f"type({var}) is {w.const(type(t))}")
    w.tensors.append((var, t, list(t.shape), list(t.stride())))


def _checks_type() -> bool:
    """Whether this torch's TensorGuards rejects a tensor of another Python type with the same
    dispatch keys (an nn.Parameter for a Tensor) and anything not a tensor: then the generated
    code checks no type of its own (a tenth of a microsecond a tensor, each call)."""
    return _TYPE_CHECKED


def _ask_checks_type() -> bool:
    if TensorGuards is None:
        return False
    t = torch.zeros(1)
    checker = TensorGuards(t, dynamic_dims_sizes=[[1]], dynamic_dims_strides=[[1]])
    return bool(checker.check(t)) and not checker.check(torch.nn.Parameter(t)) and not checker.check(1)


_TYPE_CHECKED = _ask_checks_type()  # asked once, on import (0.2 ms: not a part of the first compile)


def _tensor_guards(w: _Writer, guards, user: list, by_id: dict) -> None:
    """The one check of every tensor the call holds; a dynamic program's symbolic sizes and
    strides (where its fake input has a symbol) are left to its guard expression."""
    if not w.tensors:
        return
    fakes = {by_id[id(t)]: f for t, f in zip(user, guards.fakes)} if guards is not None else {}
    sizes, strides = [], []
    for var, _, size, stride in w.tensors:
        fake = fakes.get(var)
        sizes.append([None if _symbolic_size(n) else n for n in fake.shape] if fake is not None else size)
        strides.append([None if _symbolic_size(n) else n for n in fake.stride()] if fake is not None else stride)
    checker = TensorGuards(*[t for _, t, _, _ in w.tensors], dynamic_dims_sizes=sizes, dynamic_dims_strides=strides)
    w.check(f"{w.const(checker, 'TG')}.check({', '.join(var for var, _, _, _ in w.tensors)})")


def _symbolic_size(n) -> bool:
    return isinstance(n, torch.SymInt) and not n.node.expr.is_number


def _plain(w: _Writer, var: str, value) -> None:
    if isinstance(value, _SIMPLE):
        w.check(f"{var} is {value!r}")
    elif type(value) in _BY_VALUE:
        w.check(f"type({var}) is {type(value).__name__ if type(value) in (int, float, str) else w.const(type(value))}"
                f" and {var} == {w.const(value)}")
    else:
        try:
            hash(value)
        except TypeError:
            raise NotArmed(f"an argument keyed by identity ({type(value).__name__})") from None
        w.check(f"type({var}) is {w.const(type(value))} and {var} == {w.const(value)}")


def _state(w: _Writer, obj, var: str, by_id: dict, depth: int = objects.MAX_DEPTH) -> None:
    """An object passed in (a cache), checked as its key reads it (objects.state_key): each
    container's type and size, each tensor slot as a tensor, each plain slot's value (or type),
    slot by slot: the layers are read by name, never walked."""
    if type(obj) in (list, tuple, dict):
        w.check(f"type({var}) is {type(obj).__name__} and len({var}) == {len(obj)}")
    elif not isinstance(getattr(obj, "__dict__", None), dict):  # no slots the key reads: its type only
        w.check(f"type({var}) is {w.const(type(obj))}")
        return
    else:
        w.check(f"type({var}) is {w.const(type(obj))} and len({var}.__dict__) == {len(obj.__dict__)}")
    for step, value in objects.slots(obj):
        here = w.local()
        w.lines.append(f"{here} = {_access(w, obj, var, step)}")
        if isinstance(value, torch.Tensor):
            _tensor(w, here, value)
            if id(value) in by_id:
                raise NotArmed("a tensor held twice by the objects passed in")
            by_id[id(value)] = here
        elif isinstance(value, objects.PLAIN):
            if isinstance(value, (str, int, float, bool, type(None))):
                _plain(w, here, value)
            else:
                w.check(f"type({here}) is {w.const(type(value))}")
        elif depth > 1 and objects.descends(value):
            _state(w, value, here, by_id, depth - 1)


def _access(w: _Writer, obj, var: str, step) -> str:
    if isinstance(step, tuple):  # a dict key
        return f"{var}[{w.const(step[1])}]"
    if type(obj) in (list, tuple):
        return f"{var}[{step}]"
    if step.isidentifier() and not hasattr(type(obj), step):
        return f"{var}.{step}"
    return f"{var}.__dict__[{w.const(step)}]"


def _modes(w: _Writer, owner, entry, generation: list[int]) -> None:
    """Grad mode; a module's train/eval mode and its parameters (none replaced since the key
    was read: the registration count, then the ids it was read with); parameters frozen or
    unfrozen since compiling (under grad mode)."""
    grad = torch.is_grad_enabled()
    w.check(f"GRAD() is {grad}")
    if owner._module:
        w.consts["GEN"], w.consts["STATE"] = generation, owner._state
        w.check(f"FN.training is {owner.fn.training} and GEN[0] == OWNER._state_generation and "
                "OWNER._state is STATE")
    if grad and entry.grad_mask:
        w.check(" and ".join(f"C[{i}].requires_grad is {m}" for i, m in enumerate(entry.grad_mask)))


def _symbolic(w: _Writer, guards, inputs: list[str], ints: list[str]) -> None:
    """The ShapeEnv's guard expression over this call's tensors and int arguments, inlined:
    `L['t3'].size()[2]` reads the local of the program's fourth input."""
    names = inputs + ints
    if len(guards.fakes) != len(inputs):
        raise NotArmed("the dynamic program's inputs are not the call's tensors")
    kept = [piece for piece in _conjuncts(guards.source) if not _static_piece(piece, guards.fakes)]
    if kept:
        w.check(re.sub(r"L\['t(\d+)'\]", lambda m: names[int(m.group(1))], " and ".join(kept)))


def _conjuncts(source: str) -> list[str]:
    """The guard expression's top-level `and` terms (a term split inside parentheses is joined back)."""
    out: list[str] = []
    for piece in source.split(" and "):
        if out and out[-1].count("(") != out[-1].count(")"):
            out[-1] += " and " + piece
        else:
            out.append(piece)
    return out


_READ = re.compile(r"L\['t(\d+)'\]\.(size|stride)\(\)\[(\d+)\]")


def _static_piece(piece: str, fakes: list) -> bool:
    """A term that compares one static size or stride with a number: TensorGuards checks it."""
    reads = _READ.findall(piece)
    if len(reads) != 1 or "L[" in _READ.sub("", piece) or not re.fullmatch(r"\s*L\[.*\] == -?\d+\s*", piece):
        return False
    t, kind, d = reads[0]
    i = int(t)
    if i >= len(fakes):
        return False
    n = (fakes[i].shape if kind == "size" else fakes[i].stride())[int(d)]
    return not _symbolic_size(n)


def _finish(w: _Writer, owner, entry, inputs: list[str], leaf_vars: list[str], states) -> tuple[Callable, str]:
    """The program's call after the checks: int symbols bound, the result with the cache's
    updates set slot by slot and the objects passed in put where the result holds them."""
    c = entry.compiled
    run = c.fn
    # the program's no_grad wrapper, where it has one, written inline: grad mode is checked already
    # (off: nothing to do; on: switched off around the program and back on however it ends)
    inline_no_grad = getattr(run, "__code__", None) is _NO_GRAD_CODE
    if inline_no_grad:
        run = run.__wrapped__
    switch = inline_no_grad and torch.is_grad_enabled()
    body = ["PATHS.served += 1", "OWNER.last = ENTRY"]  # (the owner's hits count the served calls)
    if c.guards is not None and c.guards.ints:
        w.consts["SIZES"] = c.guards.values
        body += [f"SIZES[{str(sym.node.expr)!r}] = {leaf_vars[p]}" for p, sym in c.guards.ints.items()]
    call = f"PROGRAM({', '.join([*inputs, '*C'] if c.constants else inputs)})"
    before, after = (["SET_GRAD(False)"], ["SET_GRAD(True)"]) if switch else ([], [])
    if c.one_thread:  # a small program: on one intra-op thread (frontend/intra_op.py), the caller's count after
        before += ["threads = THREADS()", "if threads > 1: SET_THREADS(1)"]
        after += ["if threads > 1: SET_THREADS(threads)"]
    body += before + ["try:", f"    out = {call}", "except ShapeChanged:",
                      "    PATHS.served -= 1", "    DROP(ENTRY)", "    return MISS"]
    body += ["finally:", *(f"    {line}" for line in after)] if after else []
    if c.traced.objects_passed:
        body += _write_back(w, c, [var for _, var in states])
    body.append("return out")
    source = "def fast(args, kwargs):\n    try:\n" + "".join(f"        {line}\n" for line in w.lines) + \
        "    except (KeyError, IndexError, AttributeError, TypeError):\n        return MISS\n" + \
        "".join(f"    {line}\n" for line in body)
    scope = {"MISS": MISS, "STRIDED": torch.strided, "GRAD": torch.is_grad_enabled,
             "SET_GRAD": torch._C._set_grad_enabled, "THREADS": torch.get_num_threads,
             "SET_THREADS": torch.set_num_threads, "OWNER": owner, "ENTRY": entry,
             "FN": owner.fn, "PROGRAM": run, "C": tuple(c.constants), "ShapeChanged": ShapeChanged,
             "DROP": owner.fast.drop, "PATHS": owner.fast, **w.consts}
    exec(compile(source, f"<fusionlens fast path {frontend.target_name(owner.fn)}>", "exec"), scope)  # noqa: S102
    return scope["fast"], source


def _write_back(w: _Writer, c, state_vars: list[str]) -> list[str]:
    """What the call left in the objects passed in (the program returns each slot it changed),
    set in this call's objects, and the result's references to them resolved."""
    output = c.traced.trace.output
    lines = []
    if c.traced.states:
        output, changes = output
        lines.append("out, changes = out")
        for i, slots in enumerate(changes):
            for j, (path, _) in enumerate(slots):
                lines.append(_setter(w, state_vars[i], path, f"changes[{i}][{j}][1]"))
    refs = [x for x in pytree.tree_leaves(output) if isinstance(x, objects.PassedRef)]
    if refs:
        lines += _resolve(w, output, state_vars)
    return lines


def _resolve(w: _Writer, output, state_vars: list[str]) -> list[str]:
    """Each place the program's result holds an object passed in (a model output's cache)
    set to this call's object, where the place is an item of a dict (a ModelOutput), of a
    list, or an attribute; anywhere else (a tuple) the generic `objects.resolve`."""
    try:
        pairs = pytree.tree_flatten_with_path(output)[0]
    except Exception:  # noqa: BLE001 - a node without key paths: the generic way
        pairs = None
    lines = []
    for path, leaf in pairs or []:
        if not isinstance(leaf, objects.PassedRef):
            continue
        parent, expr = output, "out"
        for key in path[:-1]:
            parent, expr = key.get(parent), expr + _key(w, key)
        last = path[-1]
        if isinstance(last, pytree.MappingKey) and isinstance(parent, dict) or \
                isinstance(last, pytree.SequenceKey) and type(parent) is list:
            lines.append(f"{expr}{_key(w, last)} = {state_vars[leaf.index]}")
        elif isinstance(last, pytree.GetAttrKey):
            lines.append(f"setattr({expr}, {last.name!r}, {state_vars[leaf.index]})")
        else:
            pairs = None
            break
    if pairs is None:
        w.consts["RESOLVE"] = objects.resolve
        return [f"out = RESOLVE(out, [{', '.join(state_vars)}])"]
    return lines


def _key(w: _Writer, key) -> str:
    if isinstance(key, pytree.MappingKey):
        return f"[{w.const(key.key)}]"
    if isinstance(key, pytree.SequenceKey):
        return f"[{key.idx}]"
    return f".{key.name}"


def _setter(w: _Writer, var: str, path: tuple, value: str) -> str:
    """One slot of an object set as `objects.apply` sets it (an attribute without its
    property, a list item or one appended, a dict entry)."""
    container = var
    for step in path[:-1]:
        container = f"{container}[{w.const(step[1])}]" if isinstance(step, tuple) else \
            f"{container}[{step}]" if isinstance(step, int) else f"getattr({container}, {step!r})"
    last = path[-1]
    if isinstance(last, tuple):
        return f"{container}[{w.const(last[1])}] = {value}"
    if isinstance(last, int):
        w.consts["APPLY"] = objects.apply
        return f"APPLY({var}, [({w.const(path)}, {value})])"
    w.consts["SET"] = object.__setattr__
    return f"SET({container}, {last!r}, {value})"
