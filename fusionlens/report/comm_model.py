"""A cost model of collectives on a cluster the user names, from its links' datasheet figures.

    time = steps x latency (alpha) + bytes through the rank's busiest link / its bandwidth (1/beta)

Plain arithmetic and a table, no torch, like roofline.py: the compiler fills the report's
estimates with it and the language server may import it. Four parts:

- the clusters: `parse_cluster("8xH100")`, `parse_cluster("64x8xH100")`: DGX nodes of the
  datasheets (NVLink and NVSwitch within a node, one InfiniBand NIC per GPU between nodes);
- `estimate(op, nbytes, group_size, cluster)`: a collective's time and the bytes each rank
  sends and receives, by the algorithm NCCL would pick (`candidates` gives every one);
- `exposed(events)`: the communication a step waits for, from the order of its events;
- `fit` and `calibrate`: the same model's alpha and beta measured on the machine it runs on.

Every figure, formula and choice is in docs/comm_model.md, with a worked example each.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Link:
    name: str  # what an estimate says it went over ("NVLink 4", "InfiniBand NDR")
    gbs: float  # GB/s (10**9 bytes a second) per GPU, EACH WAY (datasheets print NVLink both ways summed)
    latency_s: float  # alpha: one step's latency, seconds (no datasheet gives it: docs/comm_model.md)

    @property
    def bytes_per_s(self) -> float:
        return self.gbs * 1e9


@dataclass(frozen=True)
class Node:
    """A row of the table: one DGX system as its datasheet describes it."""
    gpu: str  # the key a cluster names ("H100")
    system: str  # the datasheet's system ("DGX H100")
    gpus: int  # GPUs in one node
    nvlink: Link  # GPU to GPU within the node, through NVSwitch
    network: Link  # one NIC per GPU between nodes


# Per direction: NVLink 4 is 900 GB/s both ways summed per H100, so 450 each way; a 400 Gb/s
# ConnectX-7 port is 50 GB/s each way. Latencies are the model's choice (no datasheet has one).
_NVLINK_S = 1e-6
_IB_S = 5e-6
NODES = (
    Node("A100", "DGX A100", 8, Link("NVLink 3", 300, _NVLINK_S), Link("InfiniBand HDR", 25, _IB_S)),
    Node("H100", "DGX H100", 8, Link("NVLink 4", 450, _NVLINK_S), Link("InfiniBand NDR", 50, _IB_S)),
    Node("H200", "DGX H200", 8, Link("NVLink 4", 450, _NVLINK_S), Link("InfiniBand NDR", 50, _IB_S)),
    Node("B200", "DGX B200", 8, Link("NVLink 5", 900, _NVLINK_S), Link("InfiniBand NDR", 50, _IB_S)),
)


@dataclass(frozen=True)
class Cluster:
    nodes: int
    gpus_per_node: int
    gpu: str
    intra: Link  # within a node
    inter: Link | None  # between nodes; None for one node

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def name(self) -> str:
        """As a user names it: `8xH100`, `64x8xH100`."""
        one = f"{self.gpus_per_node}x{self.gpu}"
        return one if self.nodes == 1 else f"{self.nodes}x{one}"


_FORMS = ("GPUSxGPU (one node: 8xH100)", "NODESxGPUSxGPU (64 nodes of 8: 64x8xH100)")


def gpu_names() -> list[str]:
    return [n.gpu for n in NODES]


def parse_cluster(text: str) -> Cluster:
    """`8xH100` (one node of 8 GPUs) or `64x8xH100` (64 nodes of 8), case-insensitive."""
    accepted = f"accepted forms: {' or '.join(_FORMS)}, GPU one of {', '.join(gpu_names())}"
    m = re.fullmatch(r"(?:(\d+)x)?(\d+)x([a-z0-9]+)", text.strip().lower())
    if m is None:
        raise ValueError(f"cluster {text!r}: {accepted}")
    node = next((n for n in NODES if n.gpu.lower() == m.group(3)), None)
    if node is None:
        raise ValueError(f"cluster {text!r}: unknown GPU {m.group(3).upper()!r}; {accepted}")
    nodes, gpus = int(m.group(1) or 1), int(m.group(2))
    if nodes < 1 or gpus < 1:
        raise ValueError(f"cluster {text!r}: nodes and GPUs must be at least 1; {accepted}")
    if gpus > node.gpus:
        raise ValueError(f"cluster {text!r}: a {node.system} node has {node.gpus} GPUs, not {gpus}; {accepted}")
    return Cluster(nodes, gpus, node.gpu, node.nvlink, node.network if nodes > 1 else None)


# --- one collective ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Estimate:
    algorithm: str  # "ring", "tree", "hierarchical ring", "pairwise", "local" (a group of one)
    seconds: float
    bytes_sent: int  # by one rank (the busiest), over the whole collective
    bytes_received: int
    link: str  # the links it crosses: "NVLink 4", "InfiniBand NDR", "NVLink 4 + InfiniBand NDR"

    @property
    def ms(self) -> float:
        return self.seconds * 1e3


# The names torch.distributed (and fusionlens/distributed/collectives.py) give them, and short ones.
OPS = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast", "all_to_all_single", "reduce")
_ALIASES = {"all_gather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor",
            "all_to_all": "all_to_all_single"}


def op_key(op: str) -> str:
    """The model's name of `op`; an in-place functional collective (`all_reduce_`) costs what its
    out-of-place one does."""
    key = _ALIASES.get(op.removesuffix("_"), op.removesuffix("_"))
    if key not in OPS:
        raise ValueError(f"no cost model for collective {op!r}; known: {', '.join(OPS)}")
    return key


@dataclass(frozen=True)
class _Span:
    """How a group lies on the cluster: packed, `g` GPUs on each of `k` nodes."""
    g: int
    k: int
    c: Cluster

    @property
    def p(self) -> int:
        return self.g * self.k

    @property
    def slowest(self) -> Link:
        return self.c.inter if self.k > 1 and self.c.inter is not None else self.c.intra

    def links(self) -> str:
        return self.c.intra.name if self.k == 1 else f"{self.c.intra.name} + {self.slowest.name}"


def _span(group_size: int, c: Cluster) -> _Span:
    if group_size < 1 or group_size > c.world:
        raise ValueError(f"a group of {group_size} ranks does not fit {c.name} ({c.world} GPUs)")
    if group_size <= c.gpus_per_node:
        return _Span(group_size, 1, c)
    if group_size % c.gpus_per_node:
        raise ValueError(f"a group of {group_size} ranks on {c.name}: a group larger than a node must take whole "
                         f"nodes ({c.gpus_per_node} GPUs each)")
    return _Span(c.gpus_per_node, group_size // c.gpus_per_node, c)


def _est(algorithm: str, seconds: float, sent: float, received: float, link: str) -> Estimate:
    return Estimate(algorithm, seconds, round(sent), round(received), link)


# Ring: (steps, bytes one rank sends (= receives) as a multiple of the input's n) for p ranks.
# Every step moves one chunk a hop round the ring; a step ends when its slowest hop does.
_RING: dict[str, Callable[[int], tuple[int, float]]] = {
    "all_reduce": lambda p: (2 * (p - 1), 2 * (p - 1) / p),  # reduce-scatter, then all-gather
    "all_gather_into_tensor": lambda p: (p - 1, p - 1),  # n is the shard each rank brings
    "reduce_scatter_tensor": lambda p: (p - 1, (p - 1) / p),  # n is the whole input
    "broadcast": lambda p: (p - 1, 1.0),  # pipelined down a chain: each rank forwards n once
    "reduce": lambda p: (p - 1, 1.0),
}


def _ring(op: str, n: int, s: _Span) -> Estimate:
    """A chunk's trip round a ring of k nodes crosses nodes as often as a ring of k ranks has
    steps: those at InfiniBand's latency, the rest at NVLink's. Across nodes every step's
    bytes wait for the NIC, the slowest hop."""
    steps, share = _RING[op](s.p)
    across = _RING[op](s.k)[0] if s.k > 1 else 0
    latency = (steps - across) * s.c.intra.latency_s + across * s.slowest.latency_s
    return _est("ring", latency + share * n / s.slowest.bytes_per_s, share * n, share * n, s.links())


def _tree(op: str, n: int, s: _Span) -> Estimate:
    """NCCL's tree: a chain through a node's GPUs, a double binary tree between nodes
    (2 ceil(log2 k) steps up and down for all_reduce: the textbook 2 log2 p with one GPU a
    node). Pipelined in chunks, so the slowest link bounds the bytes."""
    passes = 2 if op == "all_reduce" else 1  # up and down, or one of them (broadcast, reduce)
    steps_latency = passes * ((s.g - 1) * s.c.intra.latency_s + math.ceil(math.log2(s.k)) * s.slowest.latency_s)
    sent = passes * n  # each rank passes the whole message on, each way
    return _est("tree", steps_latency + sent / s.slowest.bytes_per_s, sent, sent, s.links())


def _hierarchical(n: int, s: _Span) -> Estimate:
    """all_reduce in two levels: reduce-scatter within each node (NVLink), all-reduce of each
    rank's 1/g shard with its peers on the other nodes (a ring over InfiniBand), all-gather
    within the node. The phases run one after the other."""
    intra, inter = s.c.intra, s.slowest
    g, k = s.g, s.k
    within = (g - 1) * intra.latency_s + (g - 1) / g * n / intra.bytes_per_s  # each of RS and AG
    across = 2 * (k - 1) * inter.latency_s + 2 * (k - 1) / k * (n / g) / inter.bytes_per_s
    moved = 2 * (g - 1) / g * n + 2 * (k - 1) / k * n / g
    return _est("hierarchical ring", 2 * within + across, moved, moved, s.links())


def _pairwise(n: int, s: _Span) -> Estimate:
    """all_to_all_single: each rank sends n/p to each peer, all posted at once: one latency a
    link, the on-node part over NVLink and the rest over InfiniBand at the same time."""
    chunk = n / s.p
    on_node = s.c.intra.latency_s + (s.g - 1) * chunk / s.c.intra.bytes_per_s
    off_node = s.slowest.latency_s + (s.p - s.g) * chunk / s.slowest.bytes_per_s if s.k > 1 else 0.0
    moved = (s.p - 1) * chunk
    return _est("pairwise", max(on_node, off_node), moved, moved, s.links())


def candidates(op: str, nbytes: int, group_size: int, cluster: Cluster) -> list[Estimate]:
    """Every algorithm the model has for the collective. `nbytes`: the tensor each rank passes
    in (all_gather_into_tensor: its shard; reduce_scatter_tensor: the whole input), as the
    report counts a collective's bytes."""
    key = op_key(op)
    s = _span(group_size, cluster)
    if s.p == 1:
        return [Estimate("local", 0.0, 0, 0, "none")]
    if key == "all_to_all_single":
        return [_pairwise(nbytes, s)]
    out = [_ring(key, nbytes, s)]
    if key == "all_reduce" and s.k > 1 and s.g > 1:
        out.append(_hierarchical(nbytes, s))
    if key in ("all_reduce", "broadcast", "reduce"):
        out.append(_tree(key, nbytes, s))
    return out


def estimate(op: str, nbytes: int, group_size: int, cluster: Cluster) -> Estimate:
    """The collective by the algorithm NCCL would run: for all_reduce the faster of the tree and
    the ring (the hierarchical ring across nodes; the ring on a tie), for the others their one
    algorithm (ring; all_to_all pairwise)."""
    options = candidates(op, nbytes, group_size, cluster)
    if op_key(op) != "all_reduce" or len(options) == 1:
        return options[0]
    rings = [e for e in options if e.algorithm != "tree"]
    ring = rings[-1]  # the hierarchical one where there is one: NCCL's across nodes
    tree = next(e for e in options if e.algorithm == "tree")
    return tree if tree.seconds < ring.seconds else ring


def describe(e: Estimate, cluster: Cluster, exposed_s: float | None = None) -> str:
    """`est 1.2 ms on 64x8xH100 (ring), 0.3 ms exposed`: what the report and the hover print
    (`exposed_s`: of the estimate, what the step waits for; None leaves it out)."""
    text = f"est {_short_ms(e.ms)} ms on {cluster.name} ({e.algorithm})"
    return text if exposed_s is None else f"{text}, {_short_ms(exposed_s * 1e3)} ms exposed"


def _short_ms(ms: float) -> str:
    return f"{ms:.2g}" if ms < 1 else f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


# --- a step's exposed communication --------------------------------------------------------------

@dataclass(frozen=True)
class Compute:
    name: str  # a region's id ("B3")
    seconds: float


@dataclass(frozen=True)
class Issue:
    """A collective issued here (async): it starts when its stream is free and takes `seconds`."""
    id: str
    seconds: float
    stream: str = "comm"


@dataclass(frozen=True)
class Wait:
    id: str  # the issued collective this point waits for


Event = Compute | Issue | Wait


@dataclass
class Scheduled:
    id: str
    issued_s: float  # on the compute timeline
    start_s: float  # when its stream took it
    end_s: float
    exposed_s: float = 0.0  # how long compute stood waiting for it
    overlapped_by: list[str] = field(default_factory=list)  # compute run between its issue and its wait


@dataclass
class Schedule:
    step_s: float  # the compute timeline's end: compute plus exposed communication
    exposed_s: float
    collectives: list[Scheduled]


def schedule(events: Sequence[Event]) -> Schedule:
    """Run the step's events in order: compute advances the clock; an issue starts its
    collective on its stream once the stream's previous one ends (one stream runs in order);
    a wait blocks until it ends. A collective never waited for is waited for at the end (a
    step ends when its communication does). A second wait for one collective costs nothing."""
    now = 0.0
    free: dict[str, float] = {}
    pending: dict[str, Scheduled] = {}
    done: list[Scheduled] = []

    def wait(c: Scheduled) -> None:
        nonlocal now
        c.exposed_s = max(c.end_s - now, 0.0)
        now = max(now, c.end_s)
        done.append(c)

    for ev in events:
        if isinstance(ev, Compute):
            for c in pending.values():
                c.overlapped_by.append(ev.name)
            now += ev.seconds
        elif isinstance(ev, Issue):
            if ev.id in pending:
                raise ValueError(f"collective {ev.id!r} issued again before it was waited for")
            start = max(now, free.get(ev.stream, 0.0))
            free[ev.stream] = start + ev.seconds
            pending[ev.id] = Scheduled(ev.id, now, start, start + ev.seconds)
        elif ev.id in pending:
            wait(pending.pop(ev.id))
        elif not any(c.id == ev.id for c in done):
            raise ValueError(f"wait for {ev.id!r}, which was never issued")
    for c in list(pending.values()):
        wait(c)
    return Schedule(now, sum(c.exposed_s for c in done), done)


def exposed(events: Sequence[Event]) -> float:
    """Seconds of the step spent waiting for communication (not hidden behind compute)."""
    return schedule(events).exposed_s


# --- calibration --------------------------------------------------------------------------------

def fit(samples: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(alpha, beta) of `seconds = alpha + beta * bytes` by least squares over (bytes, seconds)."""
    if len({b for b, _ in samples}) < 2:
        raise ValueError("fit needs samples of at least two different sizes")
    xs, ys = [float(b) for b, _ in samples], [float(t) for _, t in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    beta = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - beta * mx, beta


def calibrate(all_reduce_fn: Callable[[int], object], sizes: Sequence[int], repeats: int = 5,
              clock: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """(alpha, beta) of the collective `all_reduce_fn(nbytes)` runs (and waits for), timed here:
    one untimed call a size (it allocates, connects), then the median of `repeats`."""
    return fit(sample(all_reduce_fn, sizes, repeats, clock))


def sample(all_reduce_fn: Callable[[int], object], sizes: Sequence[int], repeats: int = 5,
           clock: Callable[[], float] = time.perf_counter) -> list[tuple[float, float]]:
    """What `calibrate` fits: (bytes, median seconds) a size, so a caller can keep them."""
    samples = []
    for n in sizes:
        all_reduce_fn(n)
        times = []
        for _ in range(repeats):
            t0 = clock()
            all_reduce_fn(n)
            times.append(clock() - t0)
        samples.append((float(n), statistics.median(times)))
    return samples


def measured_cluster(alpha: float, beta: float, group_size: int, name: str = "measured") -> Cluster:
    """One node of `group_size` ranks whose link makes a ring all_reduce take `alpha + beta n`:
    the ring's 2(p-1) steps share alpha, its 2(p-1)/p n bytes set the bandwidth. Estimates on
    it are the model with this machine's backend, beside what was measured."""
    if group_size < 2 or beta <= 0:
        raise ValueError(f"a measured link needs 2 ranks or more and a positive beta (got {group_size}, {beta})")
    steps, share = _RING["all_reduce"](group_size)
    link = Link(name, share / beta / 1e9, max(alpha, 0.0) / steps)
    return Cluster(1, group_size, name, link, None)
