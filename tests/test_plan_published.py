"""The planner against published measurements (issue 28 part 7; docs/plan.md): Korthikanti et
al. 2022 Table 5 and Figure 1, Narayanan et al. 2021 Table 1, planned from GPT models written
as the papers describe them (examples/plan/plan_gpt.py) at full size on the meta device. The rows
and the predictor live in benchmarks/plan_published.py, which prints RESULTS.md's table."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import plan_published  # noqa: E402


@pytest.fixture(scope="module")
def results():
    return plan_published.table()


def test_step_times(results):
    steps, _ = results
    assert len(steps) == 18
    errors = {f"{row.source} {row.model}": abs(predicted - row.published_s) / row.published_s
              for row, predicted, _ in steps}
    mean = sum(errors.values()) / len(errors)
    assert mean <= 0.10, errors
    assert max(errors.values()) <= 0.20, errors


def test_memory_figure_1(results):
    _, memory = results
    assert len(memory) == 4
    for name, predicted, published in memory:
        for p, q in zip(predicted, published):
            assert abs(p - q) / q <= 0.10, (name, predicted, published)


def test_formula_of_narayanan():
    """The stated FLOPs formula: 96 B s l h^2 (1 + s/6h + V/16lh), e.g. 1T at 3072 sequences."""
    flops = plan_published.narayanan_flops(3072, 128, 25600)
    b, s, layers, h, v = 3072, 2048, 128, 25600, 51200
    assert flops == pytest.approx(96 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h)))
