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
    ["fusionlens.cli", "fusionlens.__main__", "fusionlens", "compiler"],  # entry points; compiler: the alias
]
# Imports that point up today, each to be removed by the transform refactor (issue 27, part 2).
KNOWN_UPWARD = {
    ("fusionlens.frontend.tracer", "fusionlens.distributed.collectives"),
    ("fusionlens.frontend.tracer", "fusionlens.distributed.tensor_parallel"),
    ("fusionlens.distributed.ddp_overlap", "fusionlens.driver.pipeline"),
    ("fusionlens.distributed.ddp_overlap", "fusionlens.driver.reporting"),
}
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
