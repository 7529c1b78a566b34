"""fusionlens.plan (docs/plan.md): full-size programs on the meta device, the plan's transforms,
memory against torch's own accounting, the search, the CLI and the JSON (issue 28).

The published measurements are tests/test_plan_published.py."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch

from fusionlens import cli
from fusionlens.plan import api, memory, parallel, trace
from fusionlens.report import hardware
from fusionlens.report.plan import PlanReport
from fusionlens.report.plan_text import hint, hover, line_cost, render

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "examples", "plan"))
sys.path.insert(0, os.path.join(REPO, "tests"))

from plan_gpt import gpt  # noqa: E402

GPT_FILE = os.path.join(REPO, "examples", "plan", "plan_gpt.py")


def tiny(layers: int = 4, micro_batch: int = 2, blocks: int | None = 1) -> trace.Traced:
    with torch.device("meta"):
        m, args = gpt(64, 4, layers, micro_batch=micro_batch, seq=32, vocab=128)
    return trace.trace(m, args, blocks=blocks)


def test_meta_trace_allocates_nothing_and_places_ops():
    t = tiny()
    assert t.layers == 4 and t.traced_blocks == 1 and t.block_path == "blocks"
    assert all(v.device.type == "meta" for v in t.saved)
    assert t.total_params == sum(p.numel() for p in gpt(64, 4, 4, 2, 32, 128)[0].parameters())
    fwd = t.parts["forward"]
    assert fwd[0] == "pre" and fwd[-1] == "post" and "block" in fwd
    # the tied output layer uses the word embedding on both sides of the blocks
    assert next(p for p in t.params if p.name == "p_words_weight").where == "both"


def test_one_block_stands_for_all():
    """Tracing one block and scaling by the layer count gives what tracing every block gives:
    the same FLOPs and memory; the time within a few percent (a fused region may span two
    blocks' edge in the whole trace: docs/plan.md)."""
    with torch.device("meta"):
        m, args = gpt(4096, 32, 4, micro_batch=1, seq=2048, vocab=8192)
    one, every = trace.trace(m, args, blocks=1), trace.trace(m, args, blocks=None)
    assert every.traced_blocks == 4 and one.traced_blocks == 1
    for options in (dict(tp=2, pp=2, sp=True, recompute="selective"), dict(tp=4, recompute="full", zero=3, dp=2)):
        a = api.plan_traced(one, "gpt", cluster="1x8xH100", global_batch=16, **options)
        b = api.plan_traced(every, "gpt", cluster="1x8xH100", global_batch=16, **options)
        assert a.step_s == pytest.approx(b.step_s, rel=0.02)
        assert a.memory_gib.total == pytest.approx(b.memory_gib.total, rel=5e-3)  # a causal mask saved once
        assert a.model_flops == pytest.approx(b.model_flops, rel=1e-4)


def test_tensor_parallel_chooses_megatron_pairs_and_their_collectives():
    t = tiny()
    lay = api.layout_of(t, cluster="1x2xA100", tp=2)
    sh = parallel.shard(t, lay)
    names = lambda kind: [n.split(" ")[0] for n in sh.linears[kind]]  # noqa: E731
    assert names("column") == ["p_blocks_0_qkv_weight", "p_blocks_0_fc1_weight", "torch.matmul"]
    assert names("row") == ["p_blocks_0_proj_weight", "p_blocks_0_fc2_weight"]
    block = [c for c in sh.collectives if c.part == "block"]
    # a block: two all-reduces forward (after each row Linear), two backward (each column input's gradient)
    assert [(c.kind, c.program) for c in block] == [("all_reduce", "forward")] * 2 + [("all_reduce", "backward")] * 2
    hidden_bytes = 2 * 32 * 64 * 2  # micro-batch x sequence x hidden, bf16
    assert {c.nbytes for c in block} == {hidden_bytes}
    lines = {c.line[1] for c in block}
    assert lines == {33, 39, 42, 43}  # the Linears' lines in examples/plan/plan_gpt.py
    sp = parallel.shard(t, api.layout_of(t, cluster="1x2xA100", tp=2, sp=True))
    kinds = sorted(c.kind for c in sp.collectives if c.part == "block")
    assert kinds == ["all_gather_into_tensor"] * 4 + ["reduce_scatter_tensor"] * 4


def test_data_parallel_zero_and_pipeline_collectives():
    t = tiny()
    ddp = api.plan_traced(t, "gpt", cluster="1x4xH100", dp=4, global_batch=8)
    [ar] = [c for c in ddp.collectives if c.group == "dp"]
    assert ar.kind == "all_reduce" and ar.bytes_per_rank == t.total_params * 4  # fp32 gradients
    z3 = api.plan_traced(t, "gpt", cluster="1x4xH100", dp=4, zero=3, global_batch=8)
    kinds = {(c.kind, c.line): c for c in z3.collectives if c.group == "dp"}
    # per FSDP2 unit at the line that calls it (issue 27's FSDP2 transform): each block at `x = block(x)`, the root
    block = [c for (kind, line), c in kinds.items() if line == 61]
    assert {c.kind for c in block} == {"all_gather_into_tensor", "reduce_scatter_tensor"}
    gather = next(c for c in block if c.kind == "all_gather_into_tensor")
    assert gather.count == 2 * z3.options["micro_batches"] * t.layers  # forward and backward regather, every block
    assert gather.bytes_per_rank == t.block_params * 2 // 4  # bf16, a quarter of the block a rank
    total = sum(c.bytes_per_rank * c.count for c in z3.collectives if c.kind == "reduce_scatter_tensor")
    assert total == pytest.approx(t.total_params * 4 * z3.options["micro_batches"], rel=1e-6)  # fp32 gradients
    pp = api.plan_traced(t, "gpt", cluster="1x2xH100", pp=2, global_batch=8)
    [send] = [c for c in pp.collectives if c.group == "pp"]
    assert send.bytes_per_rank == 2 * 32 * 64 * 2 and send.count == 2 * pp.options["micro_batches"]
    assert pp.breakdown.bubble_s > 0 and any(s.kind == "bubble" for s in pp.schedule)
    assert z3.memory_gib.optimizer == pytest.approx(ddp.memory_gib.optimizer / 4, rel=1e-2)


def test_memory_by_kind_against_torch():
    """Parameters, gradients and optimizer states as torch holds them for bf16 training with
    fp32 master weights and AdamW; saved activations as the compiled program saves them."""
    import fusionlens

    torch.manual_seed(0)
    m, (tokens, labels) = gpt(64, 4, 3, micro_batch=2, seq=32, vocab=128)
    for b in m.blocks:
        b.dropout = 0.0
    master = [p.detach().float().clone().requires_grad_() for p in m.parameters()]
    opt = torch.optim.AdamW(master)
    for p in master:
        p.grad = torch.randn_like(p)
    opt.step()
    params = sum(p.numel() * p.element_size() for p in m.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in master)
    states = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if t.ndim)
    states += sum(p.numel() * p.element_size() for p in master)
    with torch.device("meta"):
        meta, meta_args = gpt(64, 4, 3, micro_batch=2, seq=32, vocab=128)
        for b in meta.blocks:
            b.dropout = 0.0
    t = trace.trace(meta, meta_args)
    rep = api.plan_traced(t, "gpt", cluster="1x1xH100")
    gib = memory.GIB
    assert rep.memory_gib.params * gib == pytest.approx(params, rel=1e-3)
    assert rep.memory_gib.grads * gib == pytest.approx(grads, rel=1e-3)
    assert rep.memory_gib.optimizer * gib == pytest.approx(states, rel=1e-3)
    # saved activations: what the compiled training program keeps for its backward, compiled
    # here on the CPU at the same sizes and checked against eager (CompileReport.training)
    report = fusionlens.compile(m, tokens, labels)
    assert report.status == "ok" and report.training is not None
    assert rep.memory_gib.activations * gib == pytest.approx(report.training.saved_bytes, rel=1e-9)


def test_search_ranks_plans_that_fit_quickly():
    with torch.device("meta"):
        m, args = gpt(6144, 64, 48, micro_batch=1)
    t = trace.trace(m, args)
    lay = api.layout_of(t, cluster="4x8xA100", global_batch=64)
    from fusionlens.plan import search

    points = search.search(t, lay)
    fitting = [p for p in points if p.fits]
    assert fitting and fitting == sorted(fitting, key=lambda p: p.step_s)
    assert all(p.memory_gib <= 78 for p in fitting)
    best = fitting[0].options
    again = api.plan_traced(t, "gpt", cluster="4x8xA100", **{k: best[k] for k in ("tp", "pp", "vpp", "cp", "dp", "sp",
                                                                                     "zero", "global_batch",
                                                                                     "recompute")})
    assert again.step_s == pytest.approx(fitting[0].step_s)


def test_cli_json_and_tables(capsys):
    assert cli.main(["plan", GPT_FILE, "--target", "gpt_tiny", "--cluster", "2x8xA100", "--tp", "2", "--pp", "2",
                     "--sp", "--global-batch", "64", "--recompute", "selective", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("step_s", "tokens_per_s", "tflops_per_gpu", "mfu", "memory_gib", "fits", "breakdown", "lines"):
        assert key in data
    assert set(data["memory_gib"]) >= {"params", "grads", "optimizer", "activations", "total"}
    rep = PlanReport.from_json(json.dumps(data))
    assert rep.options["dp"] == 4 and rep.options["micro_batches"] == 8 and rep.cluster == "2x8xA100"
    parts = rep.breakdown
    total = parts.compute_s + sum(parts.exposed_comm_s.values()) + parts.bubble_s + parts.optimizer_s
    assert total == pytest.approx(rep.step_s, rel=1e-6)
    assert cli.main(["plan", GPT_FILE, "--target", "gpt_tiny", "--cluster", "8xH100", "--tp", "2"]) == 0
    text = capsys.readouterr().out
    assert "step breakdown" in text and "TP all-reduce" in text and "plan_gpt.py:43" in text
    assert cli.main(["plan", GPT_FILE, "--target", "gpt_tiny", "--cluster", "8xH100", "--tp", "3"]) == 1
    assert "GPUs" in capsys.readouterr().err


def test_hardware_file(tmp_path, capsys):
    spec = {"gpu": "MI300X", "bf16_tflops": 1307, "hbm_gbs": 5300, "hbm_gib": 192, "nvlink_gbs": 64, "nic_gbs": 50}
    path = tmp_path / "hw.json"
    path.write_text(json.dumps(spec))
    assert cli.main(["plan", GPT_FILE, "--target", "gpt_tiny", "--cluster", "2x8xMI300X", "--hardware", str(path),
                     "--tp", "8", "--json"]) == 0
    rep = PlanReport.from_json(capsys.readouterr().out)
    assert rep.gpu == "MI300X" and rep.memory_gib.capacity == 192
    with pytest.raises(ValueError, match="missing"):
        hardware.parse({"gpu": "X"})


def test_hint_and_hover_text():
    t = tiny()
    rep = api.plan_traced(t, "gpt", cluster="128x8xH100", tp=8, pp=2, global_batch=1024)
    lc = line_cost(rep, GPT_FILE, 43)
    assert lc is not None
    text = hint(rep, lc)
    assert text.startswith("128x8xH100: ") and "a step" in text and "TP all-reduce" in text and "exposed" in text
    assert "| activations |" in hover(rep, lc)
    assert "memory (GiB)" in render(rep)


def test_llama_405b_plans_on_the_meta_device(capsys):
    """HF transformers' LlamaForCausalLM at 405B from its config: no memory, seconds (CI)."""
    from zoo_imports import transformers

    if transformers is None:  # pragma: no cover - the test extra installs it
        pytest.skip("transformers is not installed")
    path = os.path.join(REPO, "examples", "plan", "plan_llama.py")
    assert cli.main(["plan", path, "--target", "llama_405b", "--json"]) == 0
    rep = PlanReport.from_json(capsys.readouterr().out)
    hidden, inter, layers, vocab = 16384, 53248, 126, 128256
    per_layer = 2 * hidden * hidden + 2 * hidden * 1024 + 3 * hidden * inter + 2 * hidden
    assert rep.params == 2 * vocab * hidden + hidden + layers * per_layer
    assert rep.cluster == "128x8xH100" and rep.options["dp"] == 16 and rep.options["micro_batches"] == 96
    assert not rep.fits  # ZeRO 0 keeps 16 bytes a parameter whole on each of DP's 16 replicas
    assert 0.2 < rep.mfu < 0.75
    column = " ".join(rep.linears["column"])
    assert "q_proj" in column and "gate_proj" in column and "o_proj" in " ".join(rep.linears["row"])


def test_search_and_pictures_from_the_cli(tmp_path, capsys):
    out = tmp_path / "plan.html"
    assert cli.main(["plan", GPT_FILE, "--target", "gpt_tiny", "--cluster", "1x8xA100", "--pp", "2", "--dp", "4",
                     "--global-batch", "32", "--search", "--json", "--html", str(out)]) == 0
    rep = PlanReport.from_json(capsys.readouterr().out)
    fitting = [p for p in rep.frontier if p.fits]
    assert fitting == sorted(fitting, key=lambda p: p.step_s) and len(fitting) >= 4
    assert {p.options["micro_batch"] for p in rep.frontier} > {2}  # micro-batches doubled, traced again
    from fusionlens.report.html import plan as pictures

    kinds = {t.meta for t in pictures.schedule_figure(rep).data}
    assert kinds == {"forward", "backward", "bubble"}
    assert [t.name for t in pictures.memory_figure(rep).data][:4] == ["params", "grads", "optimizer", "activations"]
    assert len(pictures.frontier_figure(rep).data) >= 1
    page = out.read_text()
    assert page.count("Plotly.newPlot") == 3 and "gpt_tiny on 1x8xA100" in page
    assert len(page.encode()) < 2_000_000  # plotly's basic bundle, as the report page (issue 31)


class _MLP(torch.nn.Module):
    def __init__(self, h: int = 16):
        super().__init__()
        self.fc1 = torch.nn.Linear(h, 4 * h)
        self.fc2 = torch.nn.Linear(4 * h, h)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x))).pow(2).mean()


def test_collectives_match_the_mesh_transforms():
    """The plan's collectives against issue 27's transforms of the same model on a 2-rank mesh
    (torch's own parallelize_module, DistributedDataParallel and fully_shard on a fake process
    group): kind, bytes a rank and line. FSDP2's all-gather is compared at the plan's bf16."""
    from fusionlens.distributed.transform import DDP, FSDP2, Mesh, Program, Style, TensorParallel

    model, x = _MLP(), torch.randn(2, 8, 16)
    tp = TensorParallel("tp", plan={"fc1": Style.COLWISE, "fc2": Style.ROWWISE})(Program(model, (x,)),
                                                                                Mesh((2,), ("tp",)))
    ddp = DDP("dp")(Program(model, (x,)), Mesh((2,), ("dp",)))
    fsdp = FSDP2("dp")(Program(model, (x,)), Mesh((2,), ("dp",)))
    with torch.device("meta"):
        meta_model, meta_x = _MLP(), torch.randn(2, 8, 16)
    t = trace.trace(meta_model, (meta_x,))
    planned = parallel.shard(t, api.layout_of(t, cluster="1x2xH100", tp=2))
    assert [(c.kind, c.program, c.nbytes, c.line[1]) for c in planned.collectives] == \
        [(str(c.kind), c.program, c.bytes, c.line) for c in tp.collectives]
    dp = api.plan_traced(t, "mlp", cluster="1x2xH100", dp=2)
    [ar] = [c for c in dp.collectives if c.group == "dp"]
    [theirs] = ddp.collectives
    assert (ar.kind, ar.bytes_per_rank) == (str(theirs.kind), theirs.bytes)
    z3 = api.plan_traced(t, "mlp", cluster="1x2xH100", dp=2, zero=3, reshard_after_forward=False)
    mine = {c.kind: c.bytes_per_rank for c in z3.collectives if c.group == "dp"}
    theirs_k = {str(c.kind): c.bytes for c in fsdp.collectives}
    assert mine["reduce_scatter_tensor"] == theirs_k["reduce_scatter_tensor"]  # fp32 gradients
    assert mine["all_gather_into_tensor"] * 2 == theirs_k["all_gather_into_tensor"]  # bf16 against fp32 weights


def test_the_api_is_fusionlens_plan():
    """`fusionlens.plan(model, *args, **plan)` (and `compiler.plan`), also once the package is imported."""
    import compiler
    import fusionlens

    with torch.device("meta"):
        m, args = gpt(64, 4, 2, micro_batch=2, seq=32, vocab=128)
    for entry in (fusionlens.plan, compiler.plan):
        rep = entry(m, *args, cluster="8xH100", tp=2, global_batch=8)
        assert isinstance(rep, PlanReport) and rep.options["dp"] == 4 and rep.options["micro_batches"] == 1
    with pytest.raises(ValueError, match="unknown plan option"):
        fusionlens.plan(m, *args, cluster="8xH100", tensor_parallel=2)


def test_peak_memory_against_memtracker():
    """The plan's total against torch.distributed._tools.MemTracker's peak of a real training
    step on the CPU, Megatron-style (bf16 model, fp32 main gradients, fp32 master weights and
    AdamW), its optimizer states made by a first step."""
    from torch.distributed._tools.mem_tracker import MemTracker

    shape = dict(micro_batch=4, seq=128, vocab=512)
    m, (tokens, labels) = gpt(256, 4, 4, **shape)
    master = [p.detach().float().clone() for p in m.parameters()]
    for q in master:
        q.main_grad = torch.zeros_like(q)
    opt = torch.optim.AdamW(master)

    def step():
        m(tokens, labels).backward()
        for p, q in zip(m.parameters(), master):
            q.main_grad += p.grad.float()
            p.grad = None
            q.grad = q.main_grad
        opt.step()
        for p, q in zip(m.parameters(), master):
            p.data.copy_(q.data)

    step()
    tracker = MemTracker()
    tracker.track_external(m, opt, *master, *[q.main_grad for q in master])
    with tracker:
        step()
    peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]
    with torch.device("meta"):
        meta, args = gpt(256, 4, 4, **shape)
    planned = api.plan(meta, *args, cluster="1x1xH100").memory_gib.total * memory.GIB
    assert planned == pytest.approx(peak, rel=0.10)


def test_ddp_buckets_at_their_lines_as_the_transform_of_the_whole_model():
    """ZeRO 0: the plan traces one block, applies DDP's transform to it on the meta device and
    fills DDP's buckets (1 MiB first, then 25 MiB) for the whole model: each bucket's bytes and
    line are those of DDP's transform of the whole model (every block), whose collectives are a
    real run's (tests/test_distributed_transform.py). fp32, as the plan's gradients are."""
    from collections import Counter

    from fusionlens.distributed.transform import DDP, Mesh, Program

    with torch.device("meta"):
        m, args = gpt(512, 8, 6, micro_batch=2, seq=64, vocab=4096)
    m = m.float()
    whole = DDP("dp")(Program(m, args), Mesh((2,), ("dp",)))
    theirs = Counter((str(c.kind), c.bytes, c.line) for c in whole.collectives)
    assert len(theirs) >= 3  # several buckets, at different lines
    for blocks in (1, None):
        rep = api.plan_traced(trace.trace(m, args, blocks=blocks), "gpt", cluster="1x2xH100", dp=2, global_batch=4)
        dp = [c for c in rep.collectives if c.group == "dp"]
        assert Counter({(c.kind, c.bytes_per_rank, c.line): c.count for c in dp}) == theirs
        # the buckets' exposed time is the step's: what runs after the backward (at least the last bucket)
        assert sum(c.exposed_s for c in dp) == pytest.approx(rep.breakdown.exposed_comm_s["dp"])
        assert dp[-1].exposed_s > 0 and dp[-1].line == 59  # the embeddings' gradients come last
        assert any(lc.line == 59 and lc.comm_kinds.get("DP all-reduce") for lc in rep.lines)


def test_ddp_falls_back_to_one_all_reduce_where_its_transform_does_not_apply():
    class Unused(_MLP):
        def __init__(self):
            super().__init__()
            self.spare = torch.nn.Parameter(torch.zeros(4))  # never used: DDP's reducer would handle it

    with torch.device("meta"):
        model, x = Unused(), torch.randn(2, 8, 16)
    rep = api.plan_traced(trace.trace(model, (x,)), "mlp", cluster="1x2xH100", dp=2)
    [ar] = [c for c in rep.collectives if c.group == "dp"]
    assert ar.line is None and ar.bytes_per_rank == rep.params * 4
    assert any("DDP's buckets not placed" in n for n in rep.notes)


class _AttentionAndHead(torch.nn.Module):
    """One causal self-attention through F.scaled_dot_product_attention and an output layer
    with its cross entropy: the two largest temporaries a backward could hold."""

    def __init__(self, vocab: int, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.emb, self.qkv = torch.nn.Embedding(vocab, dim), torch.nn.Linear(dim, 3 * dim)
        self.o, self.head = torch.nn.Linear(dim, dim), torch.nn.Linear(dim, vocab)

    def forward(self, ids, labels):
        x = self.emb(ids)
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        logits = self.head(x + self.o(a.transpose(1, 2).reshape(b, n, d)))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def test_the_largest_temporary_is_neither_the_attention_scores_nor_a_whole_vocabulary():
    """The plan times an attention's backward as one flash kernel, so its [B, H, L, S] scores are
    no temporary; the cross entropy's gradient (zeros scattered into) is split over the vocabulary
    shards as its logits are: the largest temporary here is that gradient's shard."""
    vocab, dim, heads, seq, tp = 4096, 512, 16, 2048, 2
    with torch.device("meta"):
        m = _AttentionAndHead(vocab, dim, heads).to(torch.bfloat16)
        args = (torch.zeros(1, seq, dtype=torch.long), torch.zeros(1, seq, dtype=torch.long))
    rep = api.plan_traced(trace.trace(m, args), "attention", cluster="1x8xH100", global_batch=8, tp=tp, sp=True)
    scores = heads * seq * seq * 4 / tp  # float32 scores a GPU
    logits_grad = seq * vocab * 4 / tp
    assert rep.memory_gib.transient * 2**30 == pytest.approx(logits_grad) and logits_grad < scores / 4
