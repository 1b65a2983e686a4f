"""The emulator and the worker's logging survive what a long-lived local engine process meets."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from functions.catalog import CATALOG
from sqs_jobs.local.emulator import EventSourceMapping, Handler
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.observability import Observability
from tests.e2e.processes import ROOT
from tests.functional.conftest import Harness, envelope, narrowed


# Only what these tests use: a fraction of the whole catalog's provisioning, per test.
@pytest.fixture
def harness(clients: ClientFactory) -> Harness:
    return Harness.provisioned(clients, narrowed(CATALOG, "orders"))


def test_a_worker_init_that_fails_is_retried_and_the_queue_still_drains(harness: Harness) -> None:
    harness.put_order("601", email="init@example.com")
    harness.send(envelope("order_confirmation", "601"))
    attempts: list[int] = []

    def flaky_init() -> Handler:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("cold start failed")
        return harness.worker().handle

    mapping = EventSourceMapping(
        queue=harness.deployment.queues["orders"],
        sqs_client=harness.clients("sqs"),
        handler_factory=flaky_init,
        function_name="test-orders-worker",
        concurrency=1,
        wait_time_s=0,
    )
    mapping.start()
    try:
        deadline = time.monotonic() + 20
        while harness.mails_to("init@example.com") == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        mapping.request_stop()
        mapping.join(10)
    assert len(attempts) >= 2
    assert harness.mails_to("init@example.com") == 1


def test_logging_moves_to_a_new_output_after_the_old_one_was_closed(tmp_path: Path) -> None:
    with (tmp_path / "first.log").open("w", encoding="utf-8") as first:  # an earlier engine's log file
        Observability.create(output=first).logger.info("to the first")
    second = io.StringIO()

    Observability.create(output=second).logger.info("to the second")

    lines: list[Mapping[str, Any]] = [json.loads(line) for line in second.getvalue().splitlines()]
    assert [line["message"] for line in lines] == ["to the second"]
    assert "to the first" in (tmp_path / "first.log").read_text(encoding="utf-8")


# Run in a fresh interpreter: Powertools registers its handler on the first Logger of a process, the racy moment.
_SET_UP_AT_ONCE = """
import io, json, sys, threading
sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race shows
from sqs_jobs.worker.observability import Observability
start, errors, built, output = threading.Barrier(8), [], [], io.StringIO()
def build():
    start.wait()
    try:
        built.append(Observability.create(output=output))
    except Exception as error:
        errors.append(repr(error))
threads = [threading.Thread(target=build) for _ in range(8)]
[thread.start() for thread in threads]
[thread.join() for thread in threads]
built[0].logger.info("once")
print(json.dumps({"errors": errors, "lines": output.getvalue().splitlines()}))
"""


def test_workers_set_up_logging_at_once_without_errors_or_doubled_lines() -> None:
    # The engine's pollers each build a worker at start-up, at the same moment.
    for _ in range(3):
        run = subprocess.run(
            [sys.executable, "-c", _SET_UP_AT_ONCE], cwd=ROOT, capture_output=True, text=True, check=True
        )
        result = json.loads(run.stdout.strip().splitlines()[-1])
        assert result["errors"] == []
        assert [json.loads(line)["message"] for line in result["lines"]] == ["once"]
