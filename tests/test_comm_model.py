"""fusionlens/report/comm_model.py: collectives' costs on a named cluster, against hand counts.

The hand arithmetic is written out beside each number; the figures it uses are the table's:
H100 nodes, NVLink 4 450 GB/s each way and 1 us a step, InfiniBand NDR 50 GB/s and 5 us.
"""

import random

import pytest

from fusionlens.report import comm_model as cm
from fusionlens.report.comm_model import Compute, Issue, Wait, candidates, estimate, parse_cluster

A_NV, B_NV = 1e-6, 450e9  # NVLink: latency a step, bytes a second each way
A_IB, B_IB = 5e-6, 50e9  # InfiniBand NDR


def by_algorithm(op, n, p, cluster):
    return {e.algorithm: e for e in candidates(op, n, p, cluster)}


# --- clusters -------------------------------------------------------------------------------------

def test_one_node_and_many_nodes():
    one = parse_cluster("8xH100")
    assert (one.nodes, one.gpus_per_node, one.gpu, one.world, one.inter) == (1, 8, "H100", 8, None)
    assert (one.intra.gbs, one.intra.latency_s) == (450, A_NV)
    many = parse_cluster(" 64x8xh100 ")
    assert (many.nodes, many.gpus_per_node, many.world, many.name) == (64, 8, 512, "64x8xH100")
    assert many.inter is not None and (many.inter.gbs, many.inter.latency_s) == (50, A_IB)
    assert parse_cluster("8xB200").intra.gbs == 900  # NVLink 5: 1.8 TB/s both ways
    assert parse_cluster("2x8xA100").intra.gbs == 300 and parse_cluster("2x8xA100").inter.gbs == 25
    assert parse_cluster("4xH200").name == "4xH200"


@pytest.mark.parametrize("text", ["H100", "8x", "x8xH100", "1x2x3xH100", "8 x H100", "8xV100", "9xH100",
                                  "0x8xH100", "8x0xH100", ""])
def test_a_cluster_it_cannot_read_names_the_accepted_forms(text):
    with pytest.raises(ValueError) as e:
        parse_cluster(text)
    msg = str(e.value)
    assert "8xH100" in msg and "64x8xH100" in msg and "A100, H100, H200, B200" in msg, msg


def test_a_group_must_fit_the_cluster_in_whole_nodes():
    c = parse_cluster("2x8xH100")
    for bad in (0, 12, 32):
        with pytest.raises(ValueError):
            estimate("all_reduce", 1000, bad, c)
    with pytest.raises(ValueError, match="no cost model"):
        estimate("gather", 1000, 8, c)
    assert estimate("all_reduce", 1000, 1, c) == cm.Estimate("local", 0.0, 0, 0, "none")


# --- one node: every formula -------------------------------------------------------------------------

def test_ring_all_reduce_on_one_node():
    # p = 8, n = 8 MB: 2(p-1) = 14 steps; each rank sends 2(p-1)/p n = 14/8 * 8e6 = 14e6 bytes
    e = estimate("all_reduce", 8_000_000, 8, parse_cluster("8xH100"))
    assert (e.algorithm, e.bytes_sent, e.bytes_received, e.link) == ("ring", 14_000_000, 14_000_000, "NVLink 4")
    assert e.seconds == pytest.approx(14 * A_NV + 14e6 / B_NV)  # 14 us + 31.1 us = 45.1 us


def test_tree_all_reduce_on_one_node_is_a_chain_and_never_wins():
    # NCCL's tree within a node is a chain: 2(g-1) = 14 steps, like the ring, but 2n bytes, not 1.75 n
    t = by_algorithm("all_reduce", 8_000_000, 8, parse_cluster("8xH100"))["tree"]
    assert (t.bytes_sent, t.bytes_received) == (16_000_000, 16_000_000)
    assert t.seconds == pytest.approx(14 * A_NV + 16e6 / B_NV)  # 14 us + 35.6 us = 49.6 us
    for n in (8, 1 << 20, 1 << 30):
        assert estimate("all_reduce", n, 8, parse_cluster("8xH100")).algorithm == "ring"


def test_all_gather_reduce_scatter_broadcast_reduce_on_one_node():
    c = parse_cluster("8xH100")
    # all_gather_into_tensor, a 1 MB shard a rank: p-1 = 7 steps, (p-1) * 1e6 = 7e6 bytes each way
    ag = estimate("all_gather_into_tensor", 1_000_000, 8, c)
    assert (ag.algorithm, ag.bytes_sent, ag.bytes_received) == ("ring", 7_000_000, 7_000_000)
    assert ag.seconds == pytest.approx(7 * A_NV + 7e6 / B_NV)  # 7 us + 15.6 us
    assert estimate("all_gather", 1_000_000, 8, c) == ag
    assert estimate("all_reduce_", 8_000_000, 8, c) == estimate("all_reduce", 8_000_000, 8, c)  # in place: the same
    # reduce_scatter_tensor of an 8 MB input: 7 steps, (p-1)/p * 8e6 = 7e6 bytes
    rs = estimate("reduce_scatter_tensor", 8_000_000, 8, c)
    assert (rs.bytes_sent, rs.seconds) == (7_000_000, pytest.approx(7 * A_NV + 7e6 / B_NV))
    # broadcast and reduce of 8 MB, pipelined down a chain: 7 steps, each rank forwards n = 8e6 once
    for op in ("broadcast", "reduce"):
        e = estimate(op, 8_000_000, 8, c)
        assert (e.algorithm, e.bytes_sent, e.bytes_received) == ("ring", 8_000_000, 8_000_000)
        assert e.seconds == pytest.approx(7 * A_NV + 8e6 / B_NV)  # 7 us + 17.8 us
        tree = by_algorithm(op, 8_000_000, 8, c)["tree"]  # a chain too: the same here
        assert tree.seconds == pytest.approx(e.seconds)


def test_all_to_all_on_one_node_and_across_nodes():
    # 8 ranks, 8 MB each: 1 MB to each of 7 peers, all at once: one latency, 7e6 bytes
    e = estimate("all_to_all_single", 8_000_000, 8, parse_cluster("8xH100"))
    assert (e.algorithm, e.bytes_sent, e.bytes_received) == ("pairwise", 7_000_000, 7_000_000)
    assert e.seconds == pytest.approx(A_NV + 7e6 / B_NV)
    # 16 ranks on 2 nodes, 16 MB each: 1 MB to 7 peers on the node, to 8 off it (over InfiniBand)
    e = estimate("all_to_all", 16_000_000, 16, parse_cluster("2x8xH100"))
    assert e.bytes_sent == 15_000_000 and e.link == "NVLink 4 + InfiniBand NDR"
    assert e.seconds == pytest.approx(max(A_NV + 7e6 / B_NV, A_IB + 8e6 / B_IB))  # 5 + 160 us


# --- across nodes: hierarchical, flat, tree -------------------------------------------------------------

def test_hierarchical_all_reduce_beats_the_flat_ring_across_nodes():
    c = parse_cluster("2x8xH100")  # p = 16, g = 8 GPUs on k = 2 nodes, n = 16 MB
    algos = by_algorithm("all_reduce", 16_000_000, 16, c)
    flat, hier, tree = algos["ring"], algos["hierarchical ring"], algos["tree"]
    # flat: 2(p-1) = 30 steps, 2(k-1) = 2 of them across nodes; 2 * 15/16 * 16e6 = 30e6 bytes over the NIC
    assert flat.bytes_sent == 30_000_000
    assert flat.seconds == pytest.approx(28 * A_NV + 2 * A_IB + 30e6 / B_IB)  # 38 us + 600 us
    # hierarchical: reduce-scatter in the node (7 steps, 7/8 * 16e6 = 14e6 bytes), all-reduce of the
    # 2e6 shard over 2 nodes (2 steps, 2 * 1/2 * 2e6 = 2e6 bytes), all-gather in the node (as the first)
    within = 7 * A_NV + 14e6 / B_NV
    across = 2 * A_IB + 2e6 / B_IB
    assert hier.seconds == pytest.approx(2 * within + across)  # 76.2 us + 50 us = 126 us
    assert hier.bytes_sent == 14_000_000 * 2 + 2_000_000
    # tree: chain in the node (2 * 7 steps), 2 * ceil(log2 2) = 2 between nodes, 2n bytes over the NIC
    assert tree.seconds == pytest.approx(14 * A_NV + 2 * A_IB + 32e6 / B_IB)  # 24 us + 640 us
    assert estimate("all_reduce", 16_000_000, 16, c) == hier


def test_all_reduce_takes_the_tree_for_small_messages_at_scale():
    c = parse_cluster("64x8xH100")  # 512 ranks
    small = estimate("all_reduce", 1000, 512, c)
    # tree: 2 * (7 NVLink steps + ceil(log2 64) = 6 InfiniBand steps) = 14 us + 60 us, + 2000 B / 50 GB/s
    assert small.algorithm == "tree" and small.seconds == pytest.approx(14 * A_NV + 12 * A_IB + 2000 / B_IB)
    # the hierarchical ring's latency alone: 2 * 7 us + 2 * 63 * 5 us = 644 us
    assert by_algorithm("all_reduce", 1000, 512, c)["hierarchical ring"].seconds > 644e-6
    assert estimate("all_reduce", 256 << 20, 512, c).algorithm == "hierarchical ring"
    # a group within one node of the big cluster is NVLink only
    assert estimate("all_reduce", 8_000_000, 8, c).link == "NVLink 4"


def test_ring_across_nodes_waits_for_the_nic():
    # all_gather of a 1 MB shard on 2x8: 15 steps, 1 of them across (a ring of 2 nodes has 1 step)
    e = estimate("all_gather_into_tensor", 1_000_000, 16, parse_cluster("2x8xH100"))
    assert e.bytes_sent == 15_000_000
    assert e.seconds == pytest.approx(14 * A_NV + 1 * A_IB + 15e6 / B_IB)


def test_describe():
    c = parse_cluster("8xH100")
    assert cm.describe(estimate("all_reduce", 8_000_000, 8, c), c) == "est 0.045 ms on 8xH100 (ring)"
    big = parse_cluster("64x8xH100")
    assert cm.describe(estimate("all_reduce", 256 << 20, 512, big), big).endswith("ms on 64x8xH100 (hierarchical ring)")


# --- exposed communication -----------------------------------------------------------------------

def test_hidden_behind_compute():
    s = cm.schedule([Issue("a", 3.0), Compute("B0", 5.0), Wait("a")])
    assert (s.exposed_s, s.step_s) == (0.0, 5.0)
    assert s.collectives[0].overlapped_by == ["B0"]


def test_partly_exposed():
    # issued at 1, ends at 5; compute reaches 3 at the wait: 2 exposed, the step ends at 5
    s = cm.schedule([Compute("B0", 1.0), Issue("a", 4.0), Compute("B1", 2.0), Wait("a"), Compute("opt", 1.0)])
    assert (s.exposed_s, s.step_s) == (2.0, 6.0)
    c = s.collectives[0]
    assert (c.issued_s, c.start_s, c.end_s, c.overlapped_by) == (1.0, 1.0, 5.0, ["B1"])


def test_one_stream_runs_in_order_two_streams_at_once():
    # one stream: a 0..3, b 3..6; the waits at 4: a is done, b stands 2
    events = [Issue("a", 3.0), Issue("b", 3.0), Compute("B0", 4.0), Wait("a"), Wait("b")]
    assert cm.exposed(events) == 2.0
    assert [c.start_s for c in cm.schedule(events).collectives] == [0.0, 3.0]
    # b on a stream of its own: both 0..3, nothing exposed
    assert cm.exposed([Issue("a", 3.0), Issue("b", 3.0, stream="s2"), Compute("B0", 4.0), Wait("a"), Wait("b")]) == 0.0


def test_synchronous_and_never_waited():
    # waited at once: all of it exposed (1 + 2 + 1)
    s = cm.schedule([Compute("R0", 1.0), Issue("a", 2.0), Wait("a"), Compute("R1", 1.0)])
    assert (s.exposed_s, s.step_s) == (2.0, 4.0)
    # never waited: the step ends with it (1 of its 2 s hidden)
    assert cm.exposed([Issue("a", 2.0), Compute("R0", 1.0)]) == 1.0
    # a second wait costs nothing; a collective can be issued again once waited for
    assert cm.exposed([Issue("a", 2.0), Wait("a"), Wait("a"), Issue("a", 1.0), Wait("a")]) == 3.0


def test_bad_orders():
    with pytest.raises(ValueError, match="never issued"):
        cm.exposed([Wait("a")])
    with pytest.raises(ValueError, match="issued again"):
        cm.exposed([Issue("a", 1.0), Issue("a", 1.0)])


# --- calibration -----------------------------------------------------------------------------------

def test_fit_exact():
    alpha, beta = 5e-6, 1 / 40e9
    a, b = cm.fit([(n, alpha + beta * n) for n in (1e3, 1e5, 1e6, 1e8)])
    assert a == pytest.approx(alpha, rel=1e-9) and b == pytest.approx(beta, rel=1e-9)
    with pytest.raises(ValueError, match="two different sizes"):
        cm.fit([(1000, 1.0), (1000, 2.0)])


def test_fit_noisy():
    rng = random.Random(0)
    alpha, beta = 20e-6, 1 / 10e9  # 64 MB: 6.7 ms; noise 1 us
    sizes = [i * (1 << 20) for i in range(0, 65, 2)] * 2
    a, b = cm.fit([(n, alpha + beta * n + rng.gauss(0, 1e-6)) for n in sizes])
    assert abs(a - alpha) < 2e-6 and b == pytest.approx(beta, rel=1e-2)


def test_calibrate_times_the_callable_and_ignores_its_first_call_and_a_spike():
    alpha, beta = 30e-6, 1 / 2e9
    now = [0.0]
    calls: dict[int, int] = {}

    def all_reduce(n: int) -> None:
        calls[n] = calls.get(n, 0) + 1
        first, spike = calls[n] == 1, calls[n] == 3
        now[0] += alpha + beta * n + (1.0 if first else 0.0) + (0.5 if spike else 0.0)

    a, b = cm.calibrate(all_reduce, [1 << 10, 1 << 16, 1 << 22], repeats=5, clock=lambda: now[0])
    assert a == pytest.approx(alpha, rel=1e-6) and b == pytest.approx(beta, rel=1e-6)
    assert calls == {1 << 10: 6, 1 << 16: 6, 1 << 22: 6}


def test_the_measured_cluster_gives_back_what_was_fitted():
    alpha, beta = 10e-6, 1e-9  # a ring all_reduce of n bytes took 10 us + n ns
    for p in (2, 4):
        c = cm.measured_cluster(alpha, beta, p)
        # p = 2: 2 steps of 5 us, 1 * n bytes at 1 GB/s; p = 4: 6 steps, 1.5 n at 1.5 GB/s
        assert c.intra.latency_s == pytest.approx(alpha / (2 * (p - 1)))
        e = estimate("all_reduce", 1_000_000, p, c)
        assert e.algorithm == "ring" and e.seconds == pytest.approx(alpha + beta * 1_000_000)
    with pytest.raises(ValueError):
        cm.measured_cluster(alpha, 0.0, 2)


def test_sample_keeps_the_medians_calibrate_fits():
    now = [0.0]

    def all_reduce(n: int) -> None:
        now[0] += 1e-5 + n * 1e-9

    samples = cm.sample(all_reduce, [1000, 3000], repeats=3, clock=lambda: now[0])
    assert samples == [(1000.0, pytest.approx(1.1e-5)), (3000.0, pytest.approx(1.3e-5))]


# --- in the report: the estimate, its exposed part from the program's order ---------------------------

def test_describe_with_the_exposed_part():
    c = parse_cluster("8xH100")
    e = estimate("all_reduce", 8_000_000, 8, c)
    assert cm.describe(e, c, 0.3e-3) == "est 0.045 ms on 8xH100 (ring), 0.3 ms exposed"
    assert cm.describe(e, c, 0.0) == "est 0.045 ms on 8xH100 (ring), 0 ms exposed"


def _region(rid: str, ms: float | None = None, nbytes: int | None = None, ops: tuple[str, ...] = ("torch.sin",)):
    """A region that ran on an H100 for `ms` (a measured time), or whose roofline only is known
    (`nbytes` read and written, no FLOPs: bytes / H100's 3350 GB/s)."""
    from fusionlens.report import schema as R

    timing = R.RegionTiming(ms) if ms is not None else None
    line = R.Roofline("H100", 3350, 67, "memory", 0.0, None, False) if ms is not None else None
    cost = R.Cost(nbytes, 0) if nbytes is not None else None
    return R.Region(rid, "torch", list(ops), [], "", [], [], timing=timing, cost=cost, roofline=line)


def test_the_report_says_what_of_each_estimate_is_exposed():
    from fusionlens.report import schema as R
    from fusionlens.driver import reporting

    # the backward: B0 compute, B1 issues an async all_reduce, B2 and B3 run (0.2 + 0.3 ms on the
    # H100 it ran on), B4 waits (no compute), B5 issues a synchronous one; B6 only has a roofline:
    # 335 MB at 3350 GB/s = 0.1 ms
    regions = [_region("B0", 1.0), _region("B1", 9.0, ops=("all_reduce",)), _region("B2", 0.2), _region("B3", 0.3),
               _region("B4", 7.0, ops=("torch.ops._c10d_functional.wait_tensor",)),
               _region("B5", 9.0, ops=("dist_all_reduce",)), _region("B6", nbytes=335_000_000)]
    backward = R.ProgramReport("backward", {}, regions)
    cluster = parse_cluster("64x8xH100")
    n = 64 << 20  # 64 MiB over 512 ranks: the hierarchical ring, 1.24 ms, so 0.5 ms of it hides
    found = [R.Collective("all_reduce", "traced", n, 512, "backward", "B1", overlapped_by=["B2", "B3"]),
             R.Collective("all_reduce", "traced", n, 512, "backward", "B5"),
             R.Collective("all_reduce", "ddp-bucket", n, 512, "backward")]  # DDP's hooks: no region
    # B4 waits for a collective: the assembly says so from its symbols (vocabulary.is_wait), here by hand
    async_, sync, bucket = reporting.with_estimates(found, "64x8xH100", [backward], frozenset({("backward", "B4")}))
    assert found[0].estimate_ms is None  # new collectives: those given are not changed
    est = estimate("all_reduce", n, 512, cluster)
    assert async_.estimate_ms == sync.estimate_ms == pytest.approx(est.ms)
    # the async one: issued at 1 ms, hidden by B2 + B3 = 0.5 ms, waited for after B3
    assert async_.exposed_ms == pytest.approx(est.ms - 0.5, abs=1e-6)
    # the synchronous one waits for itself at once; the one-stream order puts it after the first
    assert sync.exposed_ms == pytest.approx(est.ms, abs=1e-6) and bucket.exposed_ms == pytest.approx(est.ms)
    assert async_.estimate == cm.describe(est, cluster, async_.exposed_ms / 1e3)
    assert async_.estimate.endswith(f", {cm._short_ms(est.ms - 0.5)} ms exposed"), async_.estimate
    # the same program on a 1-node cluster: the all_reduce (NVLink, 0.27 ms) hides wholly in 0.5 ms
    small = [R.Collective("all_reduce", "traced", n, 8, "backward", "B1", overlapped_by=["B2", "B3"])]
    small = reporting.with_estimates(small, "8xH100", [backward], frozenset({("backward", "B4")}))
    assert small[0].exposed_ms == 0.0 and small[0].estimate.endswith(", 0 ms exposed")


def test_roofline_times_hide_communication_where_the_program_ran_on_no_gpu_of_the_cluster():
    from fusionlens.report import schema as R
    from fusionlens.driver import reporting

    # B1 has only its roofline on H100: 3.35 GB at 3350 GB/s = 1 ms of compute between issue and wait
    regions = [_region("B0", ops=("all_reduce",)), _region("B1", nbytes=3_350_000_000)]
    backward = R.ProgramReport("backward", {}, regions)
    found = [R.Collective("all_reduce", "traced", 64 << 20, 512, "backward", "B0", overlapped_by=["B1"]),
             R.Collective("wait_tensor", "traced", 0, 512, "backward", "B0")]
    found = reporting.with_estimates(found, "64x8xH100", [backward])
    est = estimate("all_reduce", 64 << 20, 512, parse_cluster("64x8xH100"))
    assert found[0].exposed_ms == pytest.approx(est.ms - 1.0, abs=1e-6)
    assert found[1].estimate == "" and found[1].exposed_ms is None  # no cost model for a wait
