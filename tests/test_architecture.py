"""The layering of docs/architecture.md, checked: imports point only down the pipeline.

Every import in fusionlens/ and lsp_server/ is read from the source (module-level and inside
functions, plus `importlib.import_module("...")` with a literal name), nothing is run.
"""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Bottom to top, one package a layer (docs/architecture.md's code map follows the folders). A
# module may import its own package's modules and any package below; within a package, the
# module graph must be acyclic.
LAYERS = [
    ["fusionlens.report", "fusionlens.options"],  # what consumers read, and the settings: no torch
    ["fusionlens.ir"],  # the SSA trace, its printer, provenance, sizes, the interpreter
    ["fusionlens.ops"],  # prims and the torch-level symbols with their decompositions
    ["fusionlens.frontend"],  # a Python call to the acquired trace
    ["fusionlens.middle"],  # trace -> trace: passes, autograd, fusion, the verifier
    ["fusionlens.executors"],  # fusion groups to kernels; lowering to a plan
    ["fusionlens.distributed"],  # collectives and the parallel wrappings as transforms
    ["fusionlens.driver"],  # the pipeline run, checked, timed, reported; targets; ranks
    ["fusionlens.plan"],  # a training step planned at scale: meta traces, parallel transforms, costs, search
    ["fusionlens.cli", "fusionlens.__main__", "fusionlens", "compiler"],  # entry points; compiler: the alias
]
# Imports that point up (none since issue 27 part 2: the driver passes the wrappings' trace hooks
# and transforms down to the frontend and the pipeline).
KNOWN_UPWARD: set[tuple[str, str]] = set()
# The language server reads reports and finds targets; only its worker process compiles.
SERVER_MAY_IMPORT = {"fusionlens", "fusionlens.report"}
WORKER = "lsp_server.worker"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict:
    files = [p for d in ("fusionlens", "compiler", "lsp_server") for p in sorted((REPO / d).rglob("*.py"))]
    return {module_name(p): p for p in files}


def imports_of(name: str, path: Path) -> list:
    """(imported module, line) for every import in the file, absolute names."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            # `from pkg import module` imports pkg.module; `from module import name` the module
            out += [(f"{base}.{a.name}", node.lineno) for a in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            out.append((node.args[0].value, node.lineno))
    return out


def resolve(imported: str, known: dict):
    """The project module an import names (a `from pkg import name` may name an attribute)."""
    while imported and imported not in known:
        imported = imported.rpartition(".")[0]
    return imported or None


def layer_of(name: str):
    best = None
    for i, layer in enumerate(LAYERS):
        for prefix in layer:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > len(best[1]):
                    best = (i, prefix)
    return best[0] if best else None


def graph() -> dict:
    known = modules()
    edges = {}
    for name, path in known.items():
        edges[name] = {}
        for imported, line in imports_of(name, path):
            target = resolve(imported, known)
            if target is not None and target != name:
                edges[name].setdefault(target, line)
    return edges


def test_every_compiler_module_has_a_layer():
    missing = [m for m in modules() if m.startswith(("fusionlens", "compiler")) and layer_of(m) is None]
    assert not missing, f"add these to LAYERS (and docs/architecture.md): {missing}"


def test_compiler_imports_point_down_the_pipeline():
    up = []
    for name, targets in graph().items():
        if not name.startswith(("fusionlens", "compiler")):
            continue
        for target, line in targets.items():
            if (target.startswith("fusionlens") and layer_of(target) > layer_of(name)
                    and (name, target) not in KNOWN_UPWARD):
                up.append(f"{name}:{line} imports {target}, a later stage")
    assert not up, "\n".join(up)


def test_no_import_cycles():
    edges = graph()
    state, cycles = {}, []

    def visit(node, path):
        state[node] = "open"
        for nxt in edges.get(node, {}):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(cycles)


@pytest.mark.parametrize("name", sorted(m for m in modules() if m.startswith("lsp_server") and m != WORKER))
def test_server_reads_reports_and_discovery_only(name):
    path = modules()[name]
    bad = [(m, line) for m, line in imports_of(name, path)
           if (m.split(".")[0] in ("fusionlens", "compiler")
               and not any(m == ok or m.startswith(ok + ".") for ok in SERVER_MAY_IMPORT if ok != "fusionlens")
               and m not in SERVER_MAY_IMPORT) or m.split(".")[0] == "torch"]
    assert not bad, f"{name} imports {bad}: the server never imports torch or compiles (its worker does)"


def _sources(*patterns: str) -> list:
    return [p for pattern in patterns for p in sorted(REPO.glob(pattern)) if "node_modules" not in p.parts]


def test_no_source_file_is_too_long():
    long = [f"{p.relative_to(REPO)}: {n} lines"
            for p in _sources("fusionlens/**/*.py", "lsp_server/**/*.py", "benchmarks/*.py", "vscode-extension/src/**/*.ts")
            if (n := len(p.read_text().splitlines())) > 600]
    assert not long, long


def test_no_function_is_too_long():
    """Functions are split at their seams: none in fusionlens/ or lsp_server/ over 80 lines."""
    long = []
    for p in _sources("fusionlens/**/*.py", "lsp_server/**/*.py"):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80:
                long.append(f"{p.relative_to(REPO)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not long, long


_CONTAINERS = ("list", "dict", "tuple", "set", "frozenset")


def test_data_types_name_their_element_types():
    """A class field says what it holds (`list[Region]`), not `list  # [Region]`: the type
    checker reads the first."""
    bare = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bare += [f"{name}:{st.lineno} {node.name}.{ast.unparse(st.target)}: {st.annotation.id}"
                         for st in node.body if isinstance(st, ast.AnnAssign)
                         and isinstance(st.annotation, ast.Name) and st.annotation.id in _CONTAINERS]
    assert not bare, bare


def test_the_linter_and_the_type_checker_are_clean():
    """ruff and mypy as pyproject.toml configures them (.ci/run runs them too, with their output)."""
    import shutil
    import subprocess

    for tool, args in (("ruff", ["check", "fusionlens", "compiler", "lsp_server", "benchmarks"]), ("mypy", [])):
        assert shutil.which(tool), f"{tool} is not installed: pip install -e '.[test]' installs it"
        done = subprocess.run([tool, *args], cwd=REPO, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{tool}:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"


def test_only_the_executors_import_a_backend():
    """Triton and nvFuser are the executors' business: everything else asks their contract."""
    bad = []
    for name, path in modules().items():
        if name.startswith("fusionlens.executors"):
            continue
        for imported, line in imports_of(name, path):
            root = imported.split(".")[0]
            backend = (resolve(imported, modules()) or "").startswith(("fusionlens.executors.triton",
                                                                       "fusionlens.executors.nvfuser"))
            if root in ("triton", "nvfuser", "nvfuser_direct") or backend:
                bad.append(f"{name}:{line} imports {imported}")
    assert not bad, bad


def test_no_module_writes_the_environment():
    """Settings are CompileOptions, read from the environment only at the entry points."""
    writes = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            target = None
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                target = next((t for t in targets if isinstance(t, ast.Subscript)
                               and ast.unparse(t.value) == "os.environ"), None)
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in (
                    "os.environ.setdefault", "os.environ.update", "os.environ.pop", "os.putenv", "os.unsetenv"):
                target = node
            if target is not None:
                writes.append(f"{name}:{node.lineno}")
    assert not writes, writes


def test_docs_link_only_inside_the_repository():
    import re

    outside = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)", doc.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            resolved = (doc.parent / target).resolve()
            if REPO not in resolved.parents and resolved != REPO or not resolved.exists():
                outside.append(f"{doc.relative_to(REPO)} -> {target}")
    assert not outside, outside


def test_the_architecture_page_names_every_module():
    page = (REPO / "docs" / "architecture.md").read_text()
    missing = [m for m, p in modules().items()
               if p.name != "__init__.py" and p.name != "__main__.py" and str(p.relative_to(REPO)) not in page
               and not any(str(parent.relative_to(REPO)) + "/" in page for parent in p.parents
                           if parent != REPO and REPO in parent.parents and parent.name not in ("fusionlens", "lsp_server"))]
    assert not missing, f"docs/architecture.md's code map does not mention: {missing}"


# Where collectives are read (issue 27): the distributed package, the report's assembly, the
# launcher and the cost model's callers read a collective's kind from its symbol's typed
# attributes (fusionlens/distributed/vocabulary.py), never from a name.
COLLECTIVE_READERS = ["fusionlens/distributed", "fusionlens/driver/reporting.py", "fusionlens/driver/launch.py"]
_STR_PARSE = {"startswith", "endswith", "removeprefix", "removesuffix", "partition", "rpartition", "split", "rsplit"}
_COLLECTIVE_WORDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "wait_tensor")


def _is_sym_name(node: ast.AST) -> bool:
    """`<x>.sym.name` (or `sym.name`): a symbol's name."""
    return (isinstance(node, ast.Attribute) and node.attr == "name"
            and (isinstance(node.value, ast.Attribute) and node.value.attr == "sym"
                 or isinstance(node.value, ast.Name) and node.value.id == "sym"))


def _name_parses(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_sym_name(s) for s in sides):
                found.append((node.lineno, "compares a symbol's name"))
            if any(isinstance(s, ast.Constant) and isinstance(s.value, str) and any(w in s.value for w in
                                                                                    _COLLECTIVE_WORDS) for s in sides):
                found.append((node.lineno, "compares with a collective's name"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _STR_PARSE and _is_sym_name(node.func.value):
                found.append((node.lineno, f"parses a symbol's name ({node.func.attr})"))
            elif node.func.attr == "op_name":
                found.append((node.lineno, "calls op_name"))
        elif isinstance(node, ast.FunctionDef) and node.name == "op_name":
            found.append((node.lineno, "defines op_name"))
    return found


def test_no_collective_kind_is_parsed_from_a_symbol_name():
    files = [p for entry in COLLECTIVE_READERS for p in (sorted((REPO / entry).glob("*.py")) if (REPO / entry).is_dir()
                                                            else [REPO / entry])]
    parsed = [f"{p.relative_to(REPO)}:{line}: {what}" for p in files
              for line, what in _name_parses(ast.parse(p.read_text()))]
    assert not parsed, "\n".join(parsed)


def _collective_symbols(*traces) -> dict[str, set[int]]:
    """The ids of the collective symbols `traces` record, by kind ("wait" for a wait)."""
    from fusionlens.distributed.vocabulary import describe

    found: dict[str, set[int]] = {}
    for trace in traces:
        for b in trace.bound_symbols if trace is not None else []:
            described = describe(b.sym)
            if described is not None:
                found.setdefault(str(described.kind or "wait"), set()).add(id(b.sym))
    return found


def test_every_family_records_the_same_collective_symbols():
    """dist.* calls, functional collectives, DDP's buckets, FSDP2's gathers and reduce-scatters and
    tensor parallel's f and g, traced on a fake 2-rank group: one symbol object a kind, one wait."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    from fusionlens.distributed import collectives, symbols
    from fusionlens.distributed.transform import DDP, FSDP2, Mesh, Program, Style, TensorParallel, world
    from fusionlens.frontend import tracer as frontend

    mesh = Mesh((2,), ("dp",))
    with world(mesh) as device_mesh:
        group = device_mesh.get_group("dp")

        def user(x):
            y = x * 2
            dist.all_reduce(y, group=group)
            return y + funcol.all_reduce(x + 1, "sum", group)
        user_trace = frontend.trace(user, (torch.randn(4),), {}, hooks=collectives.HOOKS).trace
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8, requires_grad=True)
    families = {"dist and funcol": (user_trace,)}
    for name, transform in (("ddp", DDP("dp")), ("fsdp2", FSDP2("dp", units=("0",))),
                            ("tensor parallel", TensorParallel("dp", {"0": Style.COLWISE, "2": Style.ROWWISE}))):
        sharded = transform(Program(model, (x,)), mesh)
        families[name] = (sharded.forward, sharded.backward)
    want = {str(kind): {id(sym)} for kind, sym in symbols.ISSUE.items()} | {"wait": {id(symbols.WAIT)}}
    for name, traces in families.items():
        found = _collective_symbols(*traces)
        assert "wait" in found and len(found) > 1, (name, found)
        assert all(ids == want[kind] for kind, ids in found.items()), (name, found)
    kinds = {kind for traces in families.values() for kind in _collective_symbols(*traces)}
    assert kinds == {"all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "wait"}, kinds


def test_the_name_parse_check_finds_what_it_forbids():
    bad = ("if b.sym.name.startswith('fsdp_'): pass\n"
           "k = collectives.op_name(b.sym.name) == 'wait_tensor'\n"
           "def op_name(s): return s\n")
    assert len(_name_parses(ast.parse(bad))) == 4


# --- the compiler's vocabulary: enums inside, the report's strings at the boundary (issue 27 part 3) ---

# The attributes (and names) that hold an internal state: a trace's stage, a program's or a
# symbol's kind, a value's role, a note's severity. The compiler compares enum members
# (fusionlens/ir/vocabulary.py, middle/programs.py, frontend/notes.py); only the boundary and the
# report's consumers read strings.
_STATE_ATTRIBUTES = {"stage", "role", "severity"}
_STATE_NAMES = {"stage", "role", "severity"}
# `.kind` names many vocabularies (a view's, a collective algorithm's): it is checked against the
# values of the compiler's own kinds only, ProgramKind's and SymbolKind's
_KIND_VALUES = {"forward", "backward", "prim", "torch", "opaque", "region"}
_STRING_BOUNDARY = {
    "fusionlens.driver.wire",  # the one module that turns them into the report's strings
    "fusionlens.cli",  # a consumer: it reads a CompileReport's strings, as the language server does
}


def _is_string_literal(node) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_is_string_literal(e) for e in node.elts)
    return False


def _holds_state(node) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr in _STATE_ATTRIBUTES
    return isinstance(node, ast.Name) and node.id in _STATE_NAMES


def _compares_a_state_with_a_string(node: ast.Compare) -> bool:
    sides = [node.left, *node.comparators]
    if any(_holds_state(s) for s in sides) and any(_is_string_literal(s) for s in sides):
        return True
    kinds = [s for s in sides if isinstance(s, ast.Attribute) and s.attr == "kind"]
    strings = {e.value for s in sides if _is_string_literal(s)
               for e in (s.elts if isinstance(s, (ast.Tuple, ast.List, ast.Set)) else [s])}
    return bool(kinds) and bool(strings & _KIND_VALUES)


def test_internal_states_are_compared_as_enums():
    """No module of fusionlens/ (outside the report package and the boundary) compares a stage,
    kind, role or severity with a string literal, or looks a trace up by a stage's string."""
    found = []
    for name, path in modules().items():
        if not name.startswith("fusionlens") or name.startswith("fusionlens.report") or name in _STRING_BOUNDARY:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare) and _compares_a_state_with_a_string(node):
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
            elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
                  and node.value.attr == "traces" and _is_string_literal(node.slice)):
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    assert not found, "compare enum members (ir.vocabulary.Stage, ValueRole, middle.programs.ProgramKind, " \
                      "frontend.notes.Severity, ir.trace.SymbolKind), not strings:\n" + "\n".join(found)


def test_the_architecture_test_sees_a_string_comparison():
    """The rule above on a sample: it must catch each form, or it checks nothing."""
    caught = {source: _compares_a_state_with_a_string(ast.parse(source, mode="eval").body)
              for source in ('t.stage == "fusion"', '"backward" != p.kind', 'v.role in ("param", "buffer")',
                             'severity == "error"', 'b.sym.kind is not "prim"', 'p.kind in ("forward",)',
                             't.stage is Stage.FUSION', 'c.kind == "ring"', 'view.kind == "box"')}
    assert [s for s, hit in caught.items() if hit] == list(caught)[:6], caught


# --- no hidden global state (issue 27 part 5) ------------------------------------------------

# Module-level containers that functions add to without a bound, each meant to grow only by
# registration (at import, or an explicit register call), never per compile or per call.
_GROWS_BY_REGISTRATION = {
    ("fusionlens.ops.torch_ops.registry", "REGISTRY"),  # the torch-level symbols, registered at import
    ("fusionlens.ops.torch_ops.registry", "SYMBOLS"),  # the same, by name
    ("fusionlens.ops.torch_ops.registry", "INPLACE"),  # in-place forms of the registered ops
    ("fusionlens.ops.prims", "ALL"),  # the prims, defined at import
    ("fusionlens.middle.autograd.prim_rules", "RULES"),  # backward rules, registered by decorators at import
    ("fusionlens.middle.autograd.torch_rules", "RULES"),
    ("fusionlens.middle.autograd.composite_rules", "RULES"),
    ("fusionlens.distributed.vocabulary", "_C10D"),  # filled once, on first use, from torch's fixed op table
    ("fusionlens.executors", "_PLUGINS"),  # executors a user registers by name
    ("fusionlens.middle.autograd.rules", "_EXTENSIONS"),  # backward rules a package adds at its import
    ("fusionlens.middle.autograd.remat", "_REWRITES"),  # forward rewrites a package adds at its import
    ("fusionlens.driver.jit_cache", "_STATE_GENERATION"),  # one counter, not a cache
    ("fusionlens.driver.jit_cache", "_WATCHING"),  # the two hook handles, installed once
}
_MUTATORS = {"append", "extend", "add", "update", "setdefault", "insert", "__setitem__"}
_EVICTS = {"popitem", "clear", "pop", "popleft"}
_CONTAINER_CALLS = {"dict", "list", "set", "OrderedDict", "defaultdict", "deque", "Counter"}


def _module_containers(tree) -> set:
    """Names a module binds at its top level to a mutable container."""
    out = set()
    for st in tree.body:
        targets = st.targets if isinstance(st, ast.Assign) else [st.target] if isinstance(st, ast.AnnAssign) else []
        value = getattr(st, "value", None)
        fresh = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) or (
            isinstance(value, ast.Call) and (getattr(value.func, "id", None) or getattr(value.func, "attr", None))
            in _CONTAINER_CALLS)
        if fresh:
            out |= {t.id for t in targets if isinstance(t, ast.Name)}
    return out


def _unbounded_caches(name: str, tree) -> list:
    """Where a function of the module grows a module-level container it never trims (no
    len() of it, no popitem/clear/pop), and every unbounded functools cache."""
    containers, found = _module_containers(tree), []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = fn.args
        takes = a.posonlyargs or a.args or a.vararg or a.kwonlyargs or a.kwarg  # none: one entry, bounded
        for deco in fn.decorator_list:
            text = ast.unparse(deco)
            if takes and (text in ("functools.cache", "cache") or "maxsize=None" in text):
                found.append(f"{name}:{fn.lineno} {fn.name}: @{text} has no bound")
        grown, trimmed = set(), set()
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                        grown.add((t.value.id, node.lineno))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name):
                if node.func.attr in _MUTATORS:
                    grown.add((node.func.value.id, node.lineno))
                elif node.func.attr in _EVICTS:
                    trimmed.add(node.func.value.id)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "len" and node.args \
                    and isinstance(node.args[0], ast.Name):
                trimmed.add(node.args[0].id)
        found += [f"{name}:{line} {fn.name} grows {var} without a bound" for var, line in sorted(grown)
                  if var in containers and var not in trimmed and (name, var) not in _GROWS_BY_REGISTRATION]
    return found


def test_module_level_caches_are_bounded():
    """A cache held by a module outlives every compile: it must have a bound (an lru_cache's
    maxsize, an eviction), or be a registry listed above that grows only by registration."""
    found = []
    for name, path in modules().items():
        if name.startswith("fusionlens"):
            found += _unbounded_caches(name, ast.parse(path.read_text(), str(path)))
    assert not found, "\n".join(found)


def test_the_cache_rule_sees_an_unbounded_cache():
    sample = ast.parse("import functools\n_SEEN = {}\n_KEPT: dict = {}\n"
                       "def f(k):\n    _SEEN[k] = 1\n"
                       "def g(k):\n    if len(_KEPT) > 9:\n        _KEPT.clear()\n    _KEPT[k] = 1\n"
                       "@functools.lru_cache(maxsize=None)\ndef h(k):\n    return k\n"
                       "@functools.cache\ndef i(k):\n    return k\n"
                       "@functools.cache\ndef once():\n    return 1\n")
    found = _unbounded_caches("sample", sample)
    assert [f.split()[1] for f in found] == ["f", "h:", "i:"], found


# A report is assembled once, as a value (issue 27 part 3): the report's types are frozen
# dataclasses (CompileReport, ProgramReport, Training, Collective, Diagnostic, the ranks', ...),
# and no module outside the assembly (driver/reporting.py) changes one's lists in place.
REPORT_NAMES = {"report", "rep", "merged", "reports_", "result_report"}
_REPORT_LISTS = {"diagnostics", "collectives", "programs", "ops", "fallbacks", "ranks", "signature", "guards",
                 "executors", "regions", "previews"}
_LIST_CHANGES = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"}


def _is_report(node: ast.AST) -> bool:
    """`report`, `rep`, `merged` or `<x>.report`: an expression holding a CompileReport."""
    return (isinstance(node, ast.Name) and node.id in REPORT_NAMES
            or isinstance(node, ast.Attribute) and node.attr == "report")


def _holds_report(node: ast.AST) -> bool:
    """A report or a part of one: `report`, `report.target`, `rep.programs[0].regions[1].timing`."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if _is_report(node):
            return True
        node = node.value
    return _is_report(node)


def _report_changes(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            for each in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(each, ast.Attribute) and _holds_report(each.value):
                    found.append((node.lineno, f"sets a report's {each.attr}"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _LIST_CHANGES:
            held = node.func.value
            if isinstance(held, ast.Attribute) and held.attr in _REPORT_LISTS and _is_report(held.value):
                found.append((node.lineno, f"changes a report's {held.attr} in place ({node.func.attr})"))
    return found


def test_no_module_changes_a_report_after_its_assembly():
    assembly = {REPO / "fusionlens" / "driver" / "reporting.py", REPO / "fusionlens" / "report" / "schema.py"}
    plan = REPO / "fusionlens" / "plan"  # assembles a PlanReport of its own, not a CompileReport
    files = [p for folder in ("fusionlens", "lsp_server") for p in sorted((REPO / folder).rglob("*.py"))
             if p not in assembly and plan not in p.parents]
    changed = [f"{p.relative_to(REPO)}:{line}: {what}" for p in files
               for line, what in _report_changes(ast.parse(p.read_text()))]
    assert not changed, "\n".join(changed)


def test_the_report_change_check_finds_what_it_forbids_and_the_report_is_frozen():
    import dataclasses

    from fusionlens.report import schema as R

    bad = ("report.collectives += found\n"
           "entry.report.diagnostics.append(d)\n"
           "rep.status, x = 'ok', 1\n"
           "report.target.line = 3\n"
           "merged.programs[0].regions[1].note = 'x'\n")
    assert len(_report_changes(ast.parse(bad))) == 5
    report = R.CompileReport(R.Target("t", None, None, None))
    for obj, name in ((report, "status"), (R.Collective("all_reduce", "traced", 4, 2), "bytes"),
                      (R.Diagnostic("warning", "m"), "message"), (R.ProgramReport("forward"), "regions"),
                      (R.Region("R0", "torch", [], [], "", [], []), "note"), (R.RegionTiming(), "median_ms"),
                      (R.ProgramTimings("cpu"), "compiled"), (report.target, "line")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, None)
    # every type of the report, down to a region's timing and a kernel's analysis: built whole
    mutable = [n for n, t in vars(R).items() if isinstance(t, type) and dataclasses.is_dataclass(t)
               and t.__module__ == R.__name__ and not t.__dataclass_params__.frozen]  # type: ignore[attr-defined]
    assert not mutable, mutable
