"""Import lightning-thunder 0.2.x on torch 2.13, for the benchmarks only (never the product).

torch 2.13 removed the named-tensor methods; thunder 0.2.x still names them at import (its
table of default torch ops lists `torch.Tensor.align_as`, `align_to`, `has_names`,
`refine_names`, `rename`), so `import thunder` fails with an AttributeError. Before
importing thunder, this defines each missing one as a placeholder that raises when called:
thunder then registers it as an op nobody calls. Nothing else of torch is touched.

    from thunder_shim import import_thunder
    thunder, why = import_thunder()   # (module, "") or (None, the reason it did not import)

Install (no CUDA torch pulled in; these are thunder 0.2.6's pure-Python requirements):
    pip install --no-deps "lightning-thunder==0.2.*"
    pip install looseversion==1.3.0 "lightning-utilities>0.7.0" "networkx>=3.3" "optree>=0.12.1" \
        "opt_einsum>=3.3.0" "mpmath<1.4.0" "dill>=0.3.8" numpy
"""

from __future__ import annotations

import warnings

import torch

REMOVED_TENSOR_METHODS = ("align_as", "align_to", "has_names", "refine_names", "rename")


def _placeholder(name: str):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"torch.Tensor.{name} was removed from torch {torch.__version__} "
                                  "(named tensors); defined by benchmarks/thunder_shim.py for thunder's import only")
    method.__name__ = method.__qualname__ = name  # thunder checks the name it registers under
    return method


def import_thunder():
    """(thunder, "") or (None, why not). Defines the placeholders only where torch lacks them."""
    added = [n for n in REMOVED_TENSOR_METHODS if not hasattr(torch.Tensor, n)]
    for name in added:
        setattr(torch.Tensor, name, _placeholder(name))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "transformer_engine module not found!" and the like
            import thunder
    except Exception as e:  # noqa: BLE001 - any failure is a reason to print, not to stop the benchmark
        return None, f"import thunder failed: {type(e).__name__}: {e}"
    return thunder, ""


def describe() -> str:
    added = [n for n in REMOVED_TENSOR_METHODS if getattr(getattr(torch.Tensor, n, None), "__module__", "") == __name__]
    return f"placeholders for torch.Tensor.{', .'.join(added)}" if added else "no placeholders needed"
