"""bench.parallel's arithmetic and argument checks (its timings are make bench's, never a test's)."""

from __future__ import annotations

import pytest

from bench.parallel import GOAL_RATIO, cases, check_arguments, main, render, summarize


def test_the_cases_are_one_job_then_the_batch_one_at_a_time_then_side_by_side() -> None:
    one, serial, side_by_side = cases(10)
    assert (one.jobs, serial.jobs, side_by_side.jobs) == (1, 10, 10)
    assert (serial.parallel_records, side_by_side.parallel_records) == (1, 10)


@pytest.mark.parametrize(
    ("delay_s", "batch", "rounds", "problem"),
    [
        (0, 10, 3, "--delay-s"),
        (31, 10, 3, "--delay-s"),
        (1, 1, 3, "--batch"),
        (1, 11, 3, "--batch"),
        (1, 10, 0, "--rounds"),
    ],
)
def test_bad_arguments_are_named(delay_s: float, batch: int, rounds: int, problem: str) -> None:
    [found] = check_arguments(delay_s, batch, rounds)
    assert found.startswith(problem)
    with pytest.raises(SystemExit) as exited:
        main(["--delay-s", str(delay_s), "--batch", str(batch), "--rounds", str(rounds)])
    assert exited.value.code == 2


def test_ratios_are_against_one_job_and_the_goal_is_checked() -> None:
    labels = [case.label for case in cases(4)]
    timings = {labels[0]: [1.0, 1.2, 1.1], labels[1]: [4.0, 4.4, 4.2], labels[2]: [1.5, 1.3, 2.9]}
    summary = summarize(timings, batch=4, delay_s=1.0)
    assert summary["ratio_serial"] == pytest.approx(4.2 / 1.1)
    assert summary["ratio_side_by_side"] == pytest.approx(1.5 / 1.1)
    assert summary["met"] is True
    text = render(summary)
    assert "1.36x, met" in text and f"at most {GOAL_RATIO:g}x" in text

    slow = summarize({**timings, labels[2]: [2.5, 2.5, 2.5]}, batch=4, delay_s=1.0)
    assert slow["met"] is False and "NOT met" in render(slow)
