"""Planning a training step at scale (docs/plan.md): the target traced at full size on the meta
device, transformed by a parallel layout, costed on a cluster, searched.

- `trace.py`: the forward and backward programs of one micro-batch, each op placed before, in
  or after the repeated blocks; the repetition that lets one block stand for all.
- `layout.py`: a plan's options (tp, pp, vpp, cp, dp, sp, ZeRO, batch, recompute) and where its
  groups lie on the cluster.
- `parallel.py`: tensor, sequence and context parallelism as a sharding of the programs' ops
  and the collectives inserted at their lines.
- `costs.py`: each op's and each collective's time on the target GPU, every coefficient named.
- `memory.py`: memory per GPU by kind at the busiest pipeline stage.
- `own.py`: a target's own parallelism, recorded; `units.py`: where FSDP2's and DDP's
  collectives are issued, from issue 27's transforms; `buckets.py`: DDP's buckets at scale.
- `schedule.py`: pipeline schedules (1F1B, interleaved), bubbles, the schedule's spans.
- `model.py`: one plan costed (`evaluate`); `report_lines.py` its lines and collectives.
- `search.py`: the plans that fit, ranked, pruned.
- `api.py`: `fusionlens.plan(fn_or_module, *args, **plan)` and planning a file's target.
- `command.py`: `fusionlens plan`'s options and run.
"""


import sys as _sys
import types as _types


class _CallablePackage(_types.ModuleType):
    """`fusionlens.plan` is both this package and the API function (`fusionlens.plan(model,
    *args, **plan)`): once the package is imported, Python binds the name to it, over
    fusionlens/__init__.py's lazy attribute, so calling the package calls `api.plan`."""

    def __call__(self, fn, *args, **options):
        from fusionlens.plan.api import plan

        return plan(fn, *args, **options)


_sys.modules[__name__].__class__ = _CallablePackage
