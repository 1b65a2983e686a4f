"""moto's SQS, as the local engine uses it: many threads sending, receiving and deleting at once.

Without jobctl/local/moto_sqs_lock.py, this run loses messages (a send racing a delete), delivers some twice
and fails deletes (measured: 4 lost, 19 duplicates, 2 failed deletes of 3,000 at a 1 ms switch interval).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from jobctl.local.engine import GIL_SWITCH_INTERVAL_S
from jobctl.local.moto_sqs_lock import serialize_sqs

MESSAGES = 1500
CONSUMERS = 5


@pytest.fixture
def engine_switch_interval() -> Iterator[None]:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)  # as the engine runs
    yield
    sys.setswitchinterval(previous)


def test_concurrent_send_receive_delete_lose_and_repeat_nothing(engine_switch_interval: None) -> None:
    serialize_sqs()
    serialize_sqs()  # idempotent
    with mock_aws():
        sqs: Any = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
        url = sqs.create_queue(QueueName="race", Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
        received: list[str] = []
        failed_deletes: list[Any] = []
        lock = threading.Lock()
        sent_all = threading.Event()

        def publish() -> None:
            for start in range(0, MESSAGES, 10):
                entries = [{"Id": str(i), "MessageBody": str(start + i)} for i in range(10)]
                sqs.send_message_batch(QueueUrl=url, Entries=entries)
            sent_all.set()

        def consume() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
                if not messages:
                    if sent_all.is_set() and _settled(sqs, url):
                        return
                    time.sleep(0.01)
                    continue
                entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
                failed = sqs.delete_message_batch(QueueUrl=url, Entries=entries).get("Failed", [])
                with lock:
                    received.extend(message["Body"] for message in messages)
                    failed_deletes.extend(failed)

        threads = [threading.Thread(target=publish)] + [threading.Thread(target=consume) for _ in range(CONSUMERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(150)

        assert not any(thread.is_alive() for thread in threads)
        assert sorted(received, key=int) == [str(number) for number in range(MESSAGES)]  # each once, none lost
        assert failed_deletes == []
        assert _settled(sqs, url)


def _settled(sqs: Any, url: str) -> bool:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return all(attributes[name] == "0" for name in names)
