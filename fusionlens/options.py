"""CompileOptions: everything that changes how a program is compiled, in one object.

It is passed down explicitly; no stage reads the environment. The entry points (fusionlens.driver.api,
fusionlens.cli, lsp_server/worker.py) build it with `from_env`, which reads the variables listed
in docs/architecture.md ("Settings") once. No torch, nothing of ours: every layer may import it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# variable -> (option, how its text becomes the option's value)
_TRUE = ("1", "true", "yes", "on")


def _flag(text: str) -> bool:
    return text.strip().lower() in _TRUE


def _level(text: str) -> int:
    try:
        return max(0, int(text.strip() or 0))
    except ValueError:
        return 0


ENVIRONMENT: dict[str, tuple[str, Callable[[str], Any]]] = {
    "FUSIONLENS_DEBUG": ("debug", _level),
    "FUSIONLENS_PROFILE": ("profile", _flag),
    "FUSIONLENS_GPU": ("gpu", str.strip),
    "FUSIONLENS_VERIFY": ("verify", _flag),
    "FUSIONLENS_CLUSTER": ("cluster", str.strip),
    "FUSIONLENS_STATIC": ("static_kernels", _flag),
}


@dataclass(frozen=True)
class CompileOptions:
    executors: tuple[str, ...] | None = None  # in priority order; None: the defaults for the device
    previews: bool = False  # also write the code of fusion executors that cannot run here
    debug: int = 0  # 1: a line per stage; 2: each trace; 3: decompositions nested, each region's code
    profile: bool = False  # each region runs in a record_function / NVTX range named after its line
    gpu: str | None = None  # the target GPU of the rooflines where the program does not run on one
    check: bool = True  # compare the compiled program with eager on the example inputs
    verify: bool = False  # run fusionlens.middle.verify after every stage (debug >= 1 implies it)
    cluster: str | None = None  # the cluster collectives are estimated on (comm_model: 8xH100, 64x8xH100)
    # compile every Triton kernel for the target GPU (`gpu`) and read its PTX and cubin into the
    # report (Region.static, docs/kernels.md): about a second a kernel the first time, then cached
    static_kernels: bool = False
    # capture a static-shape forward program in a CUDA graph and replay it (docs/kernels.md);
    # None: where the program is launch-bound (its regions' rooflines are below the launches' cost)
    cuda_graphs: bool | None = None

    @property
    def verifying(self) -> bool:
        return self.verify or self.debug >= 1

    def __post_init__(self) -> None:
        if self.executors is not None:  # a list given is kept as a tuple: the options are a value
            object.__setattr__(self, "executors", tuple(self.executors))

    def replace(self, **changes) -> CompileOptions:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **given) -> CompileOptions:
        """The options the environment sets (ENVIRONMENT), then those `given` (not None) over them."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for variable, (option, parse) in ENVIRONMENT.items():
            text = environ.get(variable)
            if text is not None and text.strip():
                values[option] = parse(text)
        values.update({k: v for k, v in given.items() if v is not None})
        return cls(**values)
