"""Pipeline schedules: a step's time from one micro-batch's stage times, and the schedule as
spans for the picture.

1F1B (PipeDream-Flush, Narayanan et al. 2021): with m micro-batches on p stages, the step is
(m + p - 1) slots of the slowest stage's forward+backward; the p - 1 are the bubble. The
interleaved schedule with v virtual stages a GPU shrinks the bubble to (p - 1) / v slots (at
v times the point-to-point sends). `spans` lays out plain 1F1B slot by slot (dependencies:
a forward after the previous stage's, a backward after the next stage's).
"""

from __future__ import annotations

from fusionlens.report.plan import StageSpan


def step_seconds(slot_s: float, micro_batches: int, pp: int, vpp: int) -> tuple[float, float]:
    """(the pipeline's part of the step, its bubble) for a slot of `slot_s` seconds."""
    bubble = (pp - 1) / vpp * slot_s if pp > 1 else 0.0
    return micro_batches * slot_s + bubble, bubble


def spans(forward_s: list[float], backward_s: list[float], micro_batches: int, limit: int = 16) -> list[StageSpan]:
    """1F1B on len(forward_s) stages, at most `limit` micro-batches drawn; gaps are bubbles."""
    p, m = len(forward_s), min(micro_batches, limit)
    order = []
    for s in range(p):
        warm = min(p - s - 1, m)
        ops = [("F", j) for j in range(warm)]
        f, b = warm, 0
        while b < m:
            if f < m:
                ops.append(("F", f))
                f += 1
            ops.append(("B", b))
            b += 1
        order.append(ops)
    done: dict = {}
    free = [0.0] * p
    pos = [0] * p
    out: list[StageSpan] = []
    progress = True
    while progress:
        progress = False
        for s in range(p):
            while pos[s] < len(order[s]):
                kind, j = order[s][pos[s]]
                if kind == "F":
                    dep = (s - 1, "F", j) if s > 0 else None
                else:  # after the next stage's backward; the last stage after its own forward
                    dep = (s + 1, "B", j) if s < p - 1 else (s, "F", j)
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done.get(dep, 0.0))
                if start > free[s] + 1e-12:
                    out.append(StageSpan(s, "bubble", free[s], start))
                end = start + (forward_s[s] if kind == "F" else backward_s[s])
                out.append(StageSpan(s, "forward" if kind == "F" else "backward", start, end, j))
                done[(s, kind, j)] = end
                free[s] = end
                pos[s] += 1
                progress = True
    last = max(free)
    out += [StageSpan(s, "bubble", free[s], last) for s in range(p) if free[s] < last - 1e-12]
    return out
