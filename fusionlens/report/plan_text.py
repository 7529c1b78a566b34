"""A PlanReport for people: the CLI's tables, the editor's inlay hint and hover (no torch)."""

from __future__ import annotations

import os

from fusionlens.report.plan import LineCost, PlanReport

_GROUP = {"tp": "TP", "cp": "CP", "dp": "DP", "pp": "PP"}
_KIND = {"all_reduce": "all-reduce", "all_gather_into_tensor": "all-gather", "reduce_scatter_tensor": "reduce-scatter",
         "ring": "ring attention", "send_recv": "send/recv"}


def seconds(s: float) -> str:
    """`4.1 ms`, `1.23 s`, `250 µs`."""
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def _table(rows: list[list[str]], headers: list[str]) -> list[str]:
    widths = [max(len(str(r[i])) for r in rows + [headers]) for i in range(len(headers))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return [line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]


def options_text(o: dict) -> str:
    parts = [f"TP {o['tp']}" + (" + SP" if o.get("sp") else ""), f"PP {o['pp']}" + (f" (x{o['vpp']} virtual)"
             if o.get("vpp", 1) > 1 else ""), f"CP {o['cp']}", f"DP {o['dp']}", f"ZeRO {o['zero']}",
             f"batch {o['global_batch']} = {o['micro_batches']} x {o['micro_batch']} x DP",
             f"recompute {o['recompute']}"]
    return " · ".join(parts)


def render(r: PlanReport, lines: int = 15) -> str:
    m, b = r.memory_gib, r.breakdown
    out = [f"{r.name} on {r.cluster}: {options_text(r.options)}",
           f"  step {seconds(r.step_s)} · {r.tokens_per_s:,.0f} tokens/s ({r.tokens_per_s_per_gpu:,.0f} a GPU) · "
           f"{r.tflops_per_gpu:.0f} TFLOP/s a GPU (hardware {r.hardware_tflops_per_gpu:.0f}) · MFU {r.mfu:.1%}",
           f"  memory a GPU {m.total:.1f} of {m.capacity:.0f} GiB: " + ("fits" if r.fits else "DOES NOT FIT"),
           f"  {r.params / 1e9:.1f}B parameters; model FLOPs: {r.flops_formula}", ""]
    out += _table([[k, f"{getattr(m, k):.2f}"] for k in ("params", "grads", "optimizer", "activations", "buffers",
                                                           "transient", "total")], ["memory (GiB)", "a GPU"])
    out.append("")
    rows = [["compute", seconds(b.compute_s)], ["  of which recompute", seconds(b.recompute_s)]]
    rows += [[f"{_GROUP.get(g, g)} exposed", seconds(v)] for g, v in sorted(b.exposed_comm_s.items())]
    rows += [["pipeline bubble", seconds(b.bubble_s)], ["optimizer", seconds(b.optimizer_s)],
             ["step", seconds(r.step_s)]]
    out += _table(rows, ["step breakdown", "seconds"])
    if r.collectives:
        out.append("")
        crow = [[f"{_GROUP.get(c.group, c.group)} {_KIND.get(c.kind, c.kind)}", str(c.group_size),
                 f"{c.bytes_per_rank / 2**20:.1f} MiB", str(c.count), seconds(c.seconds), seconds(c.exposed_s),
                 _where(c.file, c.line)] for c in sorted(r.collectives, key=lambda c: -c.exposed_s)[:lines]]
        out += _table(crow, ["collective", "group", "bytes a rank", "a step", "time", "exposed", "line"])
    if r.lines:
        out.append("")
        top = sorted(r.lines, key=lambda lc: -(lc.compute_s + lc.exposed_comm_s))[:lines]
        out += _table([[_where(lc.file, lc.line), seconds(lc.compute_s), seconds(lc.exposed_comm_s),
                        f"{lc.activations_gib:.2f}"] for lc in top],
                      ["line", "compute", "exposed comm", "activations GiB"])
    if r.linears.get("column"):
        out += ["", f"tensor parallel: column {', '.join(r.linears['column'][:6])}; "
                    f"row {', '.join(r.linears.get('row', [])[:6])}"]
    out += [f"note: {n}" for n in r.notes]
    if r.frontier:
        out += ["", "search (fastest first):"]
        out += _table([[options_text(p.options), seconds(p.step_s), f"{p.memory_gib:.1f}", "yes" if p.fits else "no",
                        f"{p.mfu:.1%}"] for p in r.frontier[:lines]], ["plan", "step", "GiB", "fits", "MFU"])
    out.append(f"planned in {r.planning_s:.2f} s")
    return "\n".join(out)


def _where(file: str | None, line: int | None) -> str:
    return f"{os.path.basename(file)}:{line}" if file else "(whole model)"


def hint(r: PlanReport, lc: LineCost) -> str:
    """The inlay hint at a line: `128x8xH100: 4.1 ms a step · TP all-reduce 0.6 ms exposed`."""
    text = f"{r.cluster}: {seconds(lc.compute_s)} a step"
    worst = max(lc.comm_kinds.items(), key=lambda kv: kv[1], default=None)
    if worst is not None and worst[1] > 0:
        text += f" · {worst[0]} {seconds(worst[1])} exposed"
    return text


def hover(r: PlanReport, lc: LineCost) -> str:
    """Markdown: the line's breakdown at scale and the plan it belongs to."""
    rows = [f"**At scale** — {r.cluster}, {options_text(r.options)}", "",
            "| | a step on the busiest GPU |", "|---|---|",
            f"| compute | {seconds(lc.compute_s)} ({lc.flops / 1e12:.1f} TFLOP) |",
            f"| communication | {seconds(lc.comm_s)}, {seconds(lc.exposed_comm_s)} exposed |"]
    rows += [f"| {k} | {seconds(v)} exposed |" for k, v in sorted(lc.comm_kinds.items())]
    rows += [f"| activations | {lc.activations_gib:.2f} GiB |", "",
             f"Step {seconds(r.step_s)}, MFU {r.mfu:.1%}, {r.memory_gib.total:.1f} of {r.memory_gib.capacity:.0f} GiB "
             + ("(fits)" if r.fits else "(does not fit)")]
    return "\n".join(rows)


def line_cost(r: PlanReport, file: str, line: int) -> LineCost | None:
    path = os.path.abspath(file)
    return next((lc for lc in r.lines if lc.line == line and os.path.abspath(lc.file) == path), None)
