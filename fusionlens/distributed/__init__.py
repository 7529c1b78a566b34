"""Parallelism: torch.distributed's collectives in the trace and the wrappings (DDP, FSDP2,
tensor parallel) that shard a program.

Invariant: a collective's kind, reduce op and group are read from its symbol, never parsed
from a name.
"""

from fusionlens.distributed import autograd_rules  # noqa: F401  (the collectives' backward rules, registered)
