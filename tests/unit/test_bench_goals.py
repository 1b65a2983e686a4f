"""bench.goals: each goal judged from its benchmark's figure (the arithmetic ones here; the timed ones are
benchmarks, run by make bench)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench import cost, goals


def test_the_cost_goal_compares_the_dynamodb_line_with_powertools_two_writes() -> None:
    goal = goals._cost_goal()
    # 2 WRU + the job's 1 RRU: 1.375 USD per million against Powertools' 2 x 0.625.
    assert goal.met and goal.figure.startswith("1.10x (1.375 vs 1.250 USD")


def test_a_run_listed_from_its_start_would_miss_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every run listed late: its listing write and two index writes on every job (3.25 USD, 2.6x).
    original = cost.Assumptions
    monkeypatch.setattr(cost, "Assumptions", lambda: replace(original(), listed_share=1.0))
    goal = goals._cost_goal()
    assert not goal.met and goal.figure.startswith("2.60x")
