"""Compile targets: load a user's file, run one `@fusionlens.example` and compile what it returns.

`compile_target` imports the user's file and runs it: call it only where user code may run
(the CLI, the language server's worker). Finding targets without running anything is
`fusionlens.report.discovery`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import itertools
import linecache
import os
import sys
from dataclasses import dataclass
from typing import Any

from fusionlens.report.discovery import TargetInfo, find_targets
from fusionlens.ir import provenance
from fusionlens.ir.provenance import user_location


class TargetError(Exception):
    """A problem with a target that points at a place in the user's source."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None,
                 col: int | None = None):
        super().__init__(message)
        self.message, self.file, self.line, self.col = message, file, line, col


_module_counter = itertools.count()


def syntax_error_col(e: SyntaxError) -> int:
    """The error's column as the report counts columns: 0-based UTF-8 bytes, like ast and
    code positions (SyntaxError.offset counts characters from 1)."""
    chars = max((e.offset or 1) - 1, 0)
    return len((e.text or "")[:chars].encode("utf-8")) if e.text else chars


def _use_source(path: str, source: str | None) -> None:
    """Make `source` what tracebacks, inspect and provenance read for `path` (an editor's
    unsaved buffer), or forget an earlier one so the file on disk is read again."""
    entry = linecache.cache.get(path)
    if entry is not None and len(entry) == 4 and entry[1] is None:  # one of ours (no mtime)
        del linecache.cache[path]
    if source is not None:
        # lines as Python (and linecache, reading a file) count them: not str.splitlines, which
        # also splits at a form feed or U+2028 and would shift every line below one
        linecache.cache[path] = (len(source), None, io.StringIO(source, newline=None).readlines(), path)


def load_module(path: str, source: str | None = None):
    """Import a user's file under a fresh module name, its folder first on sys.path
    (as `python path` would). With `source`, the module's code is that text instead of the
    file's (which need not exist); the modules it imports still come from disk. Errors
    become TargetError at the user's line."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    _use_source(path, source)
    name = f"_fusionlens_user_{next(_module_counter)}_{os.path.splitext(os.path.basename(path))[0]}"
    if source is None:
        spec = importlib.util.spec_from_file_location(name, path)
    else:
        spec = importlib.util.spec_from_loader(name, loader=None, origin=path)
    if spec is None or (source is None and spec.loader is None):
        raise TargetError(f"cannot import {path}", path)
    module = importlib.util.module_from_spec(spec)
    module.__file__ = path
    sys.modules[name] = module
    try:
        if source is None:
            assert spec.loader is not None  # a file's spec has one (checked above)
            spec.loader.exec_module(module)
        else:
            exec(compile(source, path, "exec"), module.__dict__)
    except SyntaxError as e:
        raise TargetError(f"SyntaxError: {e.msg}", e.filename or path, e.lineno, syntax_error_col(e)) from e
    except Exception as e:
        file, line = user_location(e, path)
        raise TargetError(f"importing {os.path.basename(path)} raised {type(e).__name__}: {e}",
                          file, line) from e
    return module


def _check_example(value, file: str, line: int | None, name: str):
    shape = "(callable, args) or (callable, args, kwargs)"
    if not isinstance(value, (tuple, list)) or len(value) not in (2, 3):
        got = f"a {type(value).__name__}" + (f" of length {len(value)}" if isinstance(value, (tuple, list)) else "")
        raise TargetError(f"example {name} must return {shape}; it returned {got}", file, line)
    fn, args = value[0], value[1]
    kwargs = value[2] if len(value) == 3 else {}
    if not callable(fn):
        raise TargetError(f"example {name}: the first item must be callable, not {type(fn).__name__}", file, line)
    if not isinstance(args, (tuple, list)):
        args = (args,)  # a single argument is accepted as is
    if not isinstance(kwargs, dict):
        raise TargetError(f"example {name}: the third item must be a dict of keyword arguments", file, line)
    return fn, tuple(args), kwargs


def _to_device(fn, args, kwargs, device):
    import torch
    from torch.utils import _pytree as pytree

    from fusionlens.distributed import ddp

    # a DDP wrapper stays where it was made: its reducer's buckets live on its parameters' device;
    # so do FSDP2's and tensor parallel's DTensor parameters (on their mesh's devices)
    if isinstance(fn, torch.nn.Module) and not ddp.is_ddp(fn) and not _distributed_parameters(fn):
        fn = fn.to(device)
    move = lambda x: x.to(device) if isinstance(x, torch.Tensor) else x  # noqa: E731
    return fn, pytree.tree_map(move, args), pytree.tree_map(move, kwargs)


def _distributed_parameters(module: Any) -> bool:
    dtensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)
    return dtensor is not None and any(isinstance(p, dtensor) for p in module.parameters())


def resolve_device(device: str):
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def find_example(path: str, name: str, source: str | None = None):
    """The `discovery.TargetInfo` of the example `name` in `path` (or in `source`, its
    editor buffer), without running anything. TargetError when the file cannot be read or
    parsed, or has no such target."""
    path = os.path.abspath(path)
    try:
        if source is None:
            with open(path, encoding="utf-8") as f:
                source = f.read()
        found = {t.name: t for t in find_targets(source, path)}
    except OSError as e:
        raise TargetError(f"cannot read {path}: {e}", path) from e
    except SyntaxError as e:
        raise TargetError(f"SyntaxError: {e.msg}", path, e.lineno, syntax_error_col(e)) from e
    if name not in found:
        raise TargetError(f"no @fusionlens.example target named {name!r} in {os.path.basename(path)}"
                          f" (found: {', '.join(found) or 'none'})", path)
    return found[name]


def run_example(path: str, name: str, info, source: str | None = None, device: str = "auto") -> tuple:
    """Import `path` (runs the user's code), call the example `name` (its TargetInfo `info`)
    and check what it returned: (fn, args, kwargs) on `device`. TargetError at the user's
    line for a problem in their code."""
    path = os.path.abspath(path)
    try:
        module = load_module(path, source)
        value = getattr(module, name)()
    except TargetError:
        raise
    except Exception as e:
        file, line = user_location(e, path)
        raise TargetError(f"example {name} raised {type(e).__name__}: {e}", file, line or info.line) from e
    fn, args, kwargs = _check_example(value, path, info.return_line, name)
    return _to_device(fn, args, kwargs, resolve_device(device))


def _trainable(fn, args, kwargs) -> tuple:
    """A training target's arguments: as they are when a parameter or an argument requires
    grad; else (a function of tensors only) with its floating-point arguments requiring grad,
    so that there is a gradient to compute."""
    import torch
    from torch.utils import _pytree as pytree

    params = list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []
    tensors = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    if any(t.requires_grad for t in params + tensors):
        return args, kwargs
    leaf = lambda x: x.detach().requires_grad_() if isinstance(x, torch.Tensor) and x.is_floating_point() else x  # noqa: E731
    return pytree.tree_map(leaf, (args, kwargs))


@dataclass
class Example:
    """A target's example, run and ready to compile: its callable and arguments on the device,
    whether it compiles for training, and where it was made (its return line)."""

    fn: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    info: TargetInfo
    path: str
    train: bool

    def context(self):
        """What a compile of it runs inside: the call site (the line that made the callable)
        for provenance, and grad enabled for training, disabled for inference."""
        import torch

        grad = torch.enable_grad() if self.train else torch.no_grad()
        stack = contextlib.ExitStack()
        stack.enter_context(provenance.call_site(self.path, self.info.return_line, self.info.name))
        stack.enter_context(grad)
        return stack


def load_example(path: str, name: str, *, source: str | None = None, device: str = "auto",
                 train: bool = False, info: TargetInfo | None = None) -> Example:
    """Run the example `name` of `path` (or of `source`, its editor buffer): for inference
    unless `train` or the target says train=True; then what it compiles requires grad
    (`_trainable`). `info`: its find_example, where the caller has it. TargetError at the
    user's line for a problem in their code."""
    path = os.path.abspath(path)
    info = info or find_example(path, name, source)
    fn, args, kwargs = run_example(path, name, info, source, device)
    train = train or info.train
    if train:
        args, kwargs = _trainable(fn, args, kwargs)
    return Example(fn, args, kwargs, info, path, train)


def compile_target(path: str, name: str, *, source: str | None = None, executors=None, options=None,
                   benchmark: bool = True, repeats: int = 20, device: str = "auto", torch_compile: bool = False,
                   train: bool = False):
    """Load `path`, run the example `name` and compile what it returns. With `source`, the
    file's text is that (an editor's unsaved or untitled buffer) and the report's lines are
    its lines. A target compiles for inference (under no_grad, as a model is served) unless
    it is declared `@fusionlens.example(train=True)` or `train` is set: then for training, its
    backward compiled too (what requires grad gets gradients, as in eager).

    `options` (a CompileOptions; its previews are always written) are the caller's: the CLI
    and the worker build them from the command line, the settings and the environment;
    `executors`, when given, replaces theirs.

    A DistributedDataParallel model (a distributed target's) compiles as fusionlens.jit compiles
    it: its module is the program each rank runs, checked and timed against that module eager;
    in training, the report's backward is the one that issues DDP's gradient all-reduces as its
    buckets fill (fusionlens/distributed/ddp_overlap.py), or, where DDP's reducer runs them (a configuration
    that backward does not mirror), lists the reducer's buckets. An FSDP2 (fully_shard) or
    tensor-parallel (parallelize_module) model compiles natively as fusionlens.jit compiles it
    (`api.compile_wrapped`): its report lists the all-gathers, reduce-scatters and all-reduces at
    their user lines. The ranks agree on the check: a target fails it on every rank or on none.

    Never raises for problems in the user's code or file: the report then has
    status "error" and `error` says what happened and where.
    """
    from fusionlens.driver import api
    from fusionlens.report import schema as R
    from fusionlens.options import CompileOptions

    options = (options or CompileOptions.from_env()).replace(previews=True)
    if executors is not None:
        options = options.replace(executors=executors)
    path = os.path.abspath(path)
    target = R.Target(name, path, None, None)
    fail = lambda msg, file=path, line=None, col=None: R.CompileReport(  # noqa: E731
        target=target, status="error", executors=list(options.executors or []),
        error=R.Diagnostic("error", msg, file, line, col))
    try:
        info = find_example(path, name, source)
        target = dataclasses.replace(target, line=info.line, end_line=info.end_line)  # `fail`'s too
        example = load_example(path, name, source=source, device=device, train=train, info=info)
        with example.context():
            return api.compile_wrapped(example.fn, example.args, example.kwargs, options, name, warmup=3,
                                       target=target, benchmark=benchmark, repeats=repeats,
                                       torch_compile=torch_compile)[1]
    except TargetError as e:
        return fail(e.message, e.file, e.line, e.col)
    except api.CompileError as e:
        return e.report
