"""The worker protocol: every message between the server (worker_client.py, jobs.py,
commands.py) and the compile worker (worker.py), typed, in one place; both sides import it.

One JSON object a line: `{"type": <the message's TYPE>, ...its fields}`. The server writes
requests to the worker's stdin; the worker answers on its original stdout (worker.py says how
user prints are kept off it).

  server -> worker: CompileRequest, ReproRequest, PingRequest, ExitRequest
  worker -> server: Ready once, at start; then for each request any number of Started (its
    user code starts running) and WhereEvent (where the user's code is), and one answer:
    CompileAnswer, ReproAnswer, PingAnswer, or Failure (the request raised).

Standard library only: the server imports it, and so does the worker before it imports torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fusionlens.report.schema import from_plain

logger = logging.getLogger(__name__)


# --- where the user's code is ---------------------------------------------------------------

@dataclass
class UserFrame:
    file: str
    line: int  # 1-based
    function: str


@dataclass
class Where:
    """Where the user's code was (the worker samples it; the server reads crash dumps): its
    innermost user frame, and the chain of user frames."""

    file: str
    line: int  # 1-based
    function: str
    stack: list[UserFrame] = field(default_factory=list)  # innermost first
    exit: int | None = None  # os._exit's code, when user code is about to exit the worker
    note: str = ""  # the server's words for what happened there: "timed out after 4 s here"


@dataclass
class Stacks:
    """What the server needs to read the worker's faulthandler dumps: the main thread's id and
    the folders that are no user code (fusionlens.report.discovery.CodeRoots' fields)."""

    thread: int | None = None
    roots: dict[str, list[str]] = field(default_factory=dict)


# --- server -> worker -------------------------------------------------------------------------

@dataclass
class _RunsUserCode:
    """A request that loads the user's file and runs one of its targets."""

    path: str
    target: str
    executors: list[str] | None = None  # fusionlens.executors; None: the compiler's default
    device: str = "auto"
    source: str | None = None  # the buffer's text where it differs from the saved file
    sys_path: list[str] = field(default_factory=list)  # after the file's own folder, first on sys.path
    cwd: str | None = None
    id: int = 0  # set by Worker.request
    timeout: float | None = None  # seconds; the worker dumps its stacks shortly before
    # other open buffers whose text differs from their file: path -> text (imported from that text)
    overlays: dict[str, str] = field(default_factory=dict)


@dataclass
class CompileRequest(_RunsUserCode):
    TYPE: ClassVar[str] = "compile"
    repeats: int = 20
    gpu: str | None = None  # the target GPU of estimated rooflines (fusionlens.targetGpu)
    benchmark: bool = True


@dataclass
class ReproRequest(_RunsUserCode):
    TYPE: ClassVar[str] = "repro"
    region: str = ""  # a region id as users spell it: "R3", "B1", "triton:P1" (fusionlens.report.schema.RegionRef)


@dataclass
class PingRequest:
    TYPE: ClassVar[str] = "ping"
    id: int = 0


@dataclass
class ExitRequest:
    TYPE: ClassVar[str] = "exit"
    id: int = 0


# --- worker -> server -------------------------------------------------------------------------

@dataclass
class Ready:
    TYPE: ClassVar[str] = "ready"
    pid: int
    device: str  # "cuda" | "cpu"
    device_name: str
    error: str | None = None  # the compiler or torch failed to import: compiles will say so
    stacks: Stacks | None = None  # None: no crash dumps


@dataclass
class Started:
    TYPE: ClassVar[str] = "started"
    id: int


@dataclass
class WhereEvent:
    TYPE: ClassVar[str] = "where"
    id: int
    where: Where


@dataclass
class CompileAnswer:
    TYPE: ClassVar[str] = "compiled"
    id: int
    report: dict[str, Any]  # CompileReport.to_dict(); the server reads it with from_dict
    # the workspace files the compile imported (not the compiled file): path -> text_digest of
    # the text each was loaded from; a result is stale once one of them changes
    imports: dict[str, str] = field(default_factory=dict)
    # a target with `plan=dict(...)`: its PlanReport.to_dict() (fusionlens/plan), or why none
    plan: dict[str, Any] | None = None
    plan_error: str = ""


@dataclass
class ReproScript:
    text: str
    region: str
    executor: str
    file_name: str
    summary: str


@dataclass
class ReproAnswer:
    TYPE: ClassVar[str] = "repro-script"
    id: int
    script: ReproScript | None = None
    problem: str = ""  # why there is no script, when `script` is None


@dataclass
class PingAnswer:
    TYPE: ClassVar[str] = "pong"
    id: int
    pid: int
    modules: list[str] = field(default_factory=list)  # of "torch", "fusionlens": those imported


@dataclass
class Failure:
    """A request that raised in the worker (not in the user's code: compile_target reports those)."""

    TYPE: ClassVar[str] = "failure"
    id: int
    error: str
    traceback: str = ""


Request = CompileRequest | ReproRequest | PingRequest | ExitRequest
Answer = CompileAnswer | ReproAnswer | PingAnswer | Failure
Event = Ready | Started | WhereEvent
Message = Request | Answer | Event

_TYPES: dict[str, type] = {cls.TYPE: cls for cls in (
    CompileRequest, ReproRequest, PingRequest, ExitRequest, Ready, Started, WhereEvent,
    CompileAnswer, ReproAnswer, PingAnswer, Failure)}
def text_digest(text: str) -> str:
    """The digest both sides compare module texts by (a file read as text, or a buffer)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def encode(message: Message) -> str:
    """One line of the protocol, without its newline."""
    return json.dumps({"type": message.TYPE, **_plain(message)}, default=str)


def decode(line: str | bytes) -> Message | None:
    """The message on a line; None (logged) for a line that is no message of this protocol."""
    try:
        data = json.loads(line)
        cls = _TYPES[data.pop("type")]
        return from_plain(cls, data)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        logger.warning("not a worker protocol message (%s): %r", e, line[:200])
        return None


def _plain(obj: Any) -> Any:
    """A dataclass as a dict of its fields, recursively (dicts and lists are not copied: a
    report's dict goes out as it is)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list):
        return [_plain(x) for x in obj]
    return obj
