"""`jobctl status`'s verdict on the failure rate agrees with the alarm: a rate from too few runs is no problem."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from functions.catalog import CATALOG
from sqs_jobs.cli.status import QueueStatus, diagnose

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def _status(succeeded: int, failed: int) -> QueueStatus:
    return QueueStatus(
        name="orders",
        url="u",
        dlq_url="d",
        backlog=0,
        in_flight=0,
        delayed=0,
        dlq_depth=0,
        oldest_age_s=0.0,
        succeeded=succeeded,
        failed=failed,
        last_success_at=NOW,
        last_heartbeat_at=NOW,
        window_s=900,
    )


@pytest.mark.parametrize(
    ("succeeded", "failed", "reported"),
    [(1, 1, False), (0, 9, False), (0, 10, True), (90, 10, False), (80, 20, True)],
)
def test_the_failure_rate_counts_from_the_minimum_volume(succeeded: int, failed: int, reported: bool) -> None:
    spec = CATALOG.queue("orders")
    assert spec.alarms.failure_rate_min_runs == 10 and spec.alarms.failure_rate == 0.1
    problems = diagnose(_status(succeeded, failed), spec, NOW)
    assert any("of runs failed" in problem for problem in problems) is reported


@pytest.mark.parametrize(("opened", "reported"), [(0, False), (1, True), (4, True)])
def test_an_opened_circuit_breaker_is_a_problem_as_it_is_an_alarm(opened: int, reported: bool) -> None:
    spec = CATALOG.queue("invoices")
    status = _status(50, 0)
    status.circuit_opened = opened
    problems = [problem for problem in diagnose(status, spec, NOW) if "circuit breakers opened" in problem]
    assert bool(problems) is reported
    if reported:
        assert f"opened {opened} time(s)" in problems[0] and "15 min" in problems[0]
    assert status.to_dict()["circuit_opened"] == opened


@pytest.mark.parametrize(("most", "reported"), [(0, False), (2, False), (3, True), (9, True)])
def test_a_job_failing_again_and_again_is_a_problem_as_it_is_an_alarm(most: int, reported: bool) -> None:
    spec = CATALOG.queue("orders")
    assert spec.retry_alarm_attempts == 3 and spec.max_attempts == 10
    status = _status(50, 0)
    status.retry_attempt_max = most
    problems = [problem for problem in diagnose(status, spec, NOW) if "runs in a row" in problem]
    assert bool(problems) is reported
    if reported:
        assert f"failed {most} runs in a row" in problems[0] and "dead-lettered after 10" in problems[0]
    assert status.to_dict()["retry_attempt_max"] == most


@pytest.mark.parametrize(("share", "reported"), [(0.0, False), (0.79, False), (0.8, True), (1.0, True)])
def test_a_hold_near_its_bound_is_a_problem_as_it_is_an_alarm(share: float, reported: bool) -> None:
    spec = CATALOG.queue("orders")
    assert spec.alarms.hold_share == 0.8
    status = _status(50, 0)
    status.hold_share_max = share
    problems = [problem for problem in diagnose(status, spec, NOW) if "of its bound" in problem]
    assert bool(problems) is reported
    if reported:
        assert f"will have used {share:.0%} of its bound" in problems[0] and "alarm at 80%" in problems[0]
    assert status.to_dict()["hold_share_max"] == share
