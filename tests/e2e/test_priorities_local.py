"""Priority lanes on the local engine: a high-priority job published behind a backlog of normal ones runs before
most of them, through the real worker and the lanes' own event source mappings (docs/priorities.md). The figures,
for a backlog of 5,000: bench.priorities (docs/benchmarks.md)."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator

import pytest

from bench import priority_job
from bench.priority_catalog import CATALOG, JOB
from sqs_jobs.local.engine import LocalEngine
from sqs_jobs.publisher import JobPublisher

pytestmark = pytest.mark.e2e

BACKLOG = 300
WAIT_S = 60.0


@pytest.fixture
def engine() -> Iterator[LocalEngine]:
    priority_job.clear()
    with LocalEngine(CATALOG, port=0, worker_output=io.StringIO(), heartbeat_interval_s=3600) as running:
        yield running


def _wait_for(entity_id: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while priority_job.ended_at(entity_id) is None:
        assert time.monotonic() < deadline, f"{entity_id} did not run within {WAIT_S:g} s"
        time.sleep(0.005)


def test_a_high_job_overtakes_a_backlog_of_normal_ones(engine: LocalEngine) -> None:
    clients = engine.clients()
    publisher = JobPublisher.from_stack(clients("ssm"), clients("sqs"))
    engine.stop_workers()
    publisher.publish_many([(JOB, f"normal-{index}") for index in range(BACKLOG)])
    engine.start_workers()
    while len(priority_job.order()) < 10:  # the backlog is draining
        time.sleep(0.005)

    publisher.publish(JOB, "urgent", priority="high")
    _wait_for("urgent")

    before = priority_job.order().index("urgent")
    assert before < BACKLOG // 2, f"{before} of {BACKLOG} normal jobs ran before the high one"
    # The backlog still runs, every job of it once.
    assert engine.wait_until_idle(timeout_s=WAIT_S)
    ran = priority_job.order()
    assert sorted(ran) == sorted([*(f"normal-{index}" for index in range(BACKLOG)), "urgent"])


def test_without_a_priority_the_same_job_waits_its_turn(engine: LocalEngine) -> None:
    """The control: on the default lane it is behind the backlog, as on a queue without lanes."""
    clients = engine.clients()
    publisher = JobPublisher.from_stack(clients("ssm"), clients("sqs"))
    engine.stop_workers()
    publisher.publish_many([(JOB, f"normal-{index}") for index in range(BACKLOG)])
    publisher.publish(JOB, "routine")
    engine.start_workers()

    _wait_for("routine")

    assert priority_job.order().index("routine") > BACKLOG // 2
