"""`compiler`, FusionLens's former name: `import compiler` is `import fusionlens`, and
`compiler.X` is `fusionlens.X`, the same module objects (never a second copy).

A project with a `compiler` package of its own imports `fusionlens` instead (docs/lsp.md).
"""

import importlib
import importlib.abc
import importlib.util
import sys

import fusionlens


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`compiler.a.b` imports `fusionlens.a.b` and binds that module under both names."""

    def find_spec(self, name, path=None, target=None):
        # `python -m compiler` runs fusionlens/__main__.py, found on fusionlens's path as usual
        if name.startswith("compiler.") and name != "compiler.__main__" and sys.modules.get("compiler") is fusionlens:
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        # the import system returns what sys.modules holds under the name after this runs
        sys.modules[module.__name__] = importlib.import_module("fusionlens" + module.__name__[len("compiler"):])


if not any(isinstance(f, _Alias) for f in sys.meta_path):
    sys.meta_path.insert(0, _Alias())
sys.modules[__name__] = fusionlens


def __getattr__(name: str):
    # never called (the module is fusionlens once imported): it tells type checkers that
    # `compiler.jit` and the rest are fusionlens's attributes
    return getattr(fusionlens, name)
