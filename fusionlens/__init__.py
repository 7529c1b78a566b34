"""FusionLens: a source-to-source tracing compiler for PyTorch.

    import compiler

    @fusionlens.example                      # a compile target, found by parsing the file
    def mlp_example():
        return MLP(1024), (torch.randn(64, 1024),)

    report = fusionlens.compile(fn, *args)   # -> CompileReport
    jfn = fusionlens.jit(fn)                 # a cached, compiled callable
    fusionlens.mark_dynamic(x, 1)            # x's dim 1 symbolic: one program for every size
"""

from fusionlens.report.schema import CompileReport  # noqa: F401


def example(fn=None, *, train: bool = False, nproc: int | None = None, plan: dict | None = None):
    """Mark `fn` as a compile target. `fn()` returns (callable, args) or (callable, args, kwargs).
    `@example(train=True)`: a training target (the callable usually returns a loss); its
    backward is compiled too, and the report has a `backward` section.
    `@example(nproc=2)`: a distributed target. `fusionlens compile` launches that many ranks
    (torch.distributed.run); `fn()` runs on every rank once the process group is initialised
    (gloo on a CPU, NCCL on GPUs) and may return a DistributedDataParallel model. A literal int:
    tools read it from the source.
    `@example(train=True, plan=dict(cluster="128x8xH100", tp=8, pp=8, global_batch=1536))`: the
    training step planned at scale (`fusionlens plan`, `fusionlens.plan`, the editor; docs/plan.md).

    The decorator changes nothing at run time; tools find it by parsing the source (ast).
    """
    if nproc is not None and (type(nproc) is not int or nproc < 1):
        raise ValueError(f"@fusionlens.example(nproc=...) takes a number of ranks >= 1, not {nproc!r}")
    if plan is not None and not isinstance(plan, dict):
        raise ValueError(f"@fusionlens.example(plan=...) takes a dict of plan options, not {plan!r}")

    def mark(f):
        f.__fusionlens_example__ = True
        f.__fusionlens_train__ = train
        f.__fusionlens_nproc__ = nproc
        f.__fusionlens_plan__ = dict(plan) if plan else None
        return f
    return mark if fn is None else mark(fn)


_API = {"compile": "fusionlens.driver.api", "CompileError": "fusionlens.driver.api",
        "jit": "fusionlens.driver.jit_cache", "last_report": "fusionlens.driver.jit_cache",
        "last_traces": "fusionlens.driver.jit_cache", "last_compiled": "fusionlens.driver.jit_cache",
        "CompileOptions": "fusionlens.options", "mark_dynamic": "fusionlens.frontend.dynamic",
        "plan": "fusionlens.plan.api"}


def __getattr__(name):
    # The compiler proper imports torch; keep `import compiler` cheap for tools that only
    # need `example` (and for the language server, which must not import torch).
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'fusionlens' has no attribute {name!r}")
