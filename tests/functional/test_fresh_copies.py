"""A message handed back on its last allowed receive goes back as a fresh copy (lib/sqs_jobs/worker/settlement.py):
the copy has a new MessageId and SentTimestamp, and carries when its original was first sent (`jobs.sent_at`),
which the runtime believes only on a message its own role sent."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from sqs_jobs.local.emulator import Invocation
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.invocation import Delivery
from sqs_jobs.worker.provenance import SENT_AT, MessageAttributes
from tests.functional.conftest import Harness, envelope
from tests.functional.sample_jobs import flaky

# Every second receive is a message's last: one hand-back, and the next one sends a fresh copy.
LINEAGE = QueueSpec(
    name="lineage",
    function_timeout_s=10,
    max_attempts=1,
    max_receives=2,
    jobs=(JobSpec(name="flaky", handler="tests.functional.sample_jobs.flaky", time_limit_s=2),),
)
CATALOG = Catalog(queues=(LINEAGE,))
# An invocation with less time than the job's limit plus the settle margin: every record is handed back unrun.
NO_TIME_S = 3.0


@pytest.fixture
def harness(clients: ClientFactory) -> Iterator[Harness]:
    flaky.SIDE_EFFECTS.clear()
    yield Harness.provisioned(clients, CATALOG)


def _handed_back(harness: Harness) -> Invocation:
    worker = harness.worker("lineage")
    # Its invocations last 10 s (the job can be served), this one has 3 s left when its records start.
    worker.invocation_started(LINEAGE.function_timeout_s)
    invocation = harness.deliver("lineage", worker=worker, timeout_s=NO_TIME_S)
    assert invocation is not None
    return invocation


def test_a_fresh_copy_and_its_own_copy_carry_the_originals_first_send(harness: Harness) -> None:
    harness.send(envelope("flaky", "1"), queue="lineage")
    first = _handed_back(harness)
    [record] = first.event["Records"]
    original_sent = record["attributes"]["SentTimestamp"]
    time.sleep(0.01)  # the copy's own SentTimestamp is later

    last = _handed_back(harness)  # its last allowed receive: back as a fresh copy
    copy = harness.peek("lineage")

    assert record["messageId"] in last.deleted and copy["MessageId"] != record["messageId"]
    assert copy["Attributes"]["SentTimestamp"] != original_sent
    assert copy["MessageAttributes"][SENT_AT] == {"DataType": "Number", "StringValue": original_sent}
    # The copy's own last receive (the peek was its first) sends a copy of the copy: still the original's send.
    _handed_back(harness)
    second = harness.peek("lineage")
    assert second["MessageId"] != copy["MessageId"]
    assert second["MessageAttributes"][SENT_AT]["StringValue"] == original_sent
    # And it runs as ever once it gets the time.
    assert harness.deliver("lineage") is not None
    assert flaky.SIDE_EFFECTS["1"] == 1


@pytest.mark.parametrize(("sent_by_runtime", "first_sent"), [(True, 1_000), (False, 5_000)])
def test_only_the_runtimes_own_copy_says_when_its_original_was_sent(sent_by_runtime: bool, first_sent: int) -> None:
    # A producer's `jobs.sent_at` is its data: its message was first sent when SQS says.
    raw = {"messageId": "m", "body": "{}", "attributes": {"SentTimestamp": "5000"}}
    attributes = MessageAttributes.split({SENT_AT: {"DataType": "Number", "StringValue": "1000"}}, sent_by_runtime)

    delivery = Delivery(record=SQSRecord(raw), attributes=attributes, receives=1)

    assert delivery.first_sent_ms == first_sent
