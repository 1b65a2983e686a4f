"""The one DLQ reader (lib/sqs_jobs/worker/dlq_reader.py) on moto's SQS: reads without consuming, ends on an empty
queue, keeps to a limit, drops repeats when asked, and releases everything it received."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.dlq_reader import DlqReader


def _queue(clients: ClientFactory, messages: int) -> tuple[Any, str]:
    sqs = clients("sqs")
    url = sqs.create_queue(QueueName="reader-dlq")["QueueUrl"]
    for number in range(messages):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{number}")
    return sqs, url


def test_a_scan_reads_every_message_once_and_a_release_leaves_them_all_there(clients: ClientFactory) -> None:
    sqs, url = _queue(clients, 23)
    reader = DlqReader(sqs, url, visibility_s=60, wait_s=0)

    bodies = [message["Body"] for batch in reader.scan(fresh_only=True) for message in batch]

    assert sorted(bodies) == sorted(f"m{number}" for number in range(23)) and reader.exhausted
    assert reader.release(reader.received) == []
    assert reader.depth() == 23


def test_a_limited_scan_stops_at_its_limit_and_is_not_exhausted(clients: ClientFactory) -> None:
    sqs, url = _queue(clients, 23)
    reader = DlqReader(sqs, url, visibility_s=60, wait_s=0)

    read = sum(len(batch) for batch in reader.scan(limit=10))

    assert read == 10 and not reader.exhausted
    reader.release(reader.received)


def test_a_release_that_sqs_refuses_raises_or_is_reported(clients: ClientFactory) -> None:
    sqs, url = _queue(clients, 1)
    reader = DlqReader(sqs, "https://sqs.us-east-1.amazonaws.com/123456789012/no-such-queue", visibility_s=60)

    with pytest.raises(ClientError):
        reader.release(["bogus"])
    assert reader.release(["bogus"], keep_going=True) != []
    assert DlqReader(sqs, url, visibility_s=60).depth() == 1
