"""moto's SQS and DynamoDB as the local engine uses them: many threads at once.

Without lib/sqs_jobs/local/moto_locks.py these fail: SQS loses messages (a send racing a delete), delivers some twice
and fails deletes (measured: 4 lost, 19 duplicates, 2 failed deletes of 3,000); DynamoDB lets two conditional
puts of one new key both succeed (11 of 300 keys) - the idempotency record's guarantee - and an update's ALL_OLD
can be an item read before another write, not the one it updated; a FIFO long poll hands
out a group's next messages while its first is in flight with another poller, or while its first, made visible by
a duplicate delivery, waits out the backoff its first receiver gave it.
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
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.sqs.models import sqs_backends

from sqs_jobs.local.engine import GIL_SWITCH_INTERVAL_S
from sqs_jobs.local.moto_locks import serialize_moto

MESSAGES = 1500
CONSUMERS = 5


@pytest.fixture
def engine_switch_interval() -> Iterator[None]:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)  # as the engine runs
    yield
    sys.setswitchinterval(previous)


@pytest.mark.slow
def test_concurrent_send_receive_delete_lose_and_repeat_nothing(engine_switch_interval: None) -> None:
    serialize_moto()
    serialize_moto()  # idempotent
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


KEYS = 200
WRITERS = 4


@pytest.mark.slow
def test_a_conditional_put_of_a_new_key_has_exactly_one_winner(engine_switch_interval: None) -> None:
    serialize_moto()
    with mock_aws():
        dynamodb: Any = boto3.client(
            "dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
        )
        dynamodb.create_table(
            TableName="records",
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        winners: dict[int, list[int]] = {}

        def claim(key: int, writer: int, start: threading.Barrier) -> None:
            start.wait()
            try:
                dynamodb.put_item(
                    TableName="records",
                    Item={"id": {"S": str(key)}, "writer": {"N": str(writer)}},
                    ConditionExpression="attribute_not_exists(id)",  # as Powertools' idempotency record
                )
            except dynamodb.exceptions.ConditionalCheckFailedException:
                return
            winners.setdefault(key, []).append(writer)

        for key in range(KEYS):
            start = threading.Barrier(WRITERS)
            threads = [threading.Thread(target=claim, args=(key, writer, start)) for writer in range(WRITERS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)

        assert {key: len(found) for key, found in winners.items() if len(found) != 1} == {}
        assert len(winners) == KEYS


COUNTS = 300


def test_an_update_returns_the_item_as_it_was_just_before_it(engine_switch_interval: None) -> None:
    # DynamoDB's ALL_OLD is the item as it was before this very update: each of many increments sees the one
    # before it, so the old counts returned are 0..N-1, each once.
    serialize_moto()
    with mock_aws():
        dynamodb: Any = boto3.client(
            "dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
        )
        dynamodb.create_table(
            TableName="counts",
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        seen: list[int] = []
        lock = threading.Lock()

        def count(times: int) -> None:
            for _ in range(times):
                old = dynamodb.update_item(
                    TableName="counts",
                    Key={"id": {"S": "one"}},
                    UpdateExpression="SET n = if_not_exists(n, :zero) + :one",
                    ExpressionAttributeValues={":zero": {"N": "0"}, ":one": {"N": "1"}},
                    ReturnValues="ALL_OLD",
                ).get("Attributes", {})
                with lock:
                    seen.append(int(old.get("n", {}).get("N", "0")) if old else 0)

        threads = [threading.Thread(target=count, args=(COUNTS // WRITERS,)) for _ in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)

        assert sorted(seen) == list(range(COUNTS))


def test_a_fifo_long_poll_never_takes_a_groups_next_message_while_an_earlier_one_is_in_flight() -> None:
    serialize_moto()
    with mock_aws():
        sqs: Any = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
        attributes = {"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "60"}
        url = sqs.create_queue(QueueName="updates.fifo", Attributes=attributes)["QueueUrl"]
        queue = sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_queue("updates.fifo")
        waited: list[list[str]] = []

        def long_poll() -> None:
            messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
            waited.append([message["Body"] for message in messages.get("Messages", [])])

        # Given a poller waiting on the empty queue
        poller = threading.Thread(target=long_poll)
        poller.start()
        time.sleep(0.2)
        # When, before it wakes, a group's three messages arrive and another poller receives the first
        with queue._messages_lock:  # what wakes the waiting poll: held, so it wakes only after the receive below
            entries = [{"Id": str(n), "MessageBody": f"u{n}", "MessageGroupId": "order-1"} for n in (1, 2, 3)]
            sqs.send_message_batch(QueueUrl=url, Entries=entries)
            [first] = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"]
        poller.join(10)

        # Then the waiting poll gets nothing of that group while u1 is in flight, as SQS does...
        assert first["Body"] == "u1"
        assert waited == [[]]
        # ...and once u1 is deleted the group goes on, in order
        sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
        rest = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert [message["Body"] for message in rest] == ["u2", "u3"]


def test_a_fifo_message_hidden_again_after_a_duplicate_delivery_holds_its_group() -> None:
    serialize_moto()
    with mock_aws():
        sqs: Any = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
        attributes = {"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "60"}
        url = sqs.create_queue(QueueName="updates.fifo", Attributes=attributes)["QueueUrl"]
        entries = [{"Id": str(n), "MessageBody": f"u{n}", "MessageGroupId": "order-1"} for n in (1, 2)]
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
        first, second = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        # Given u1 delivered again (SQS's at-least-once, as the engine's chaos does it) while its receiver runs it
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
        # When that receiver fails u1 with a backoff and makes u2, skipped behind it, visible at once
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=60)
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=0)
        # Then u2 is not handed out before u1: the group waits for its head
        assert sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []) == []
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
        again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert [message["Body"] for message in again] == ["u1", "u2"]


def test_a_fifo_groups_head_comes_first_when_a_later_message_held_its_group_until_now() -> None:
    serialize_moto()
    with mock_aws():
        sqs: Any = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
        attributes = {"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "60"}
        url = sqs.create_queue(QueueName="updates.fifo", Attributes=attributes)["QueueUrl"]
        entries = [{"Id": str(n), "MessageBody": f"u{n}", "MessageGroupId": "order-1"} for n in (1, 2, 3)]
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
        received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert [message["Body"] for message in received] == ["u1", "u2", "u3"]
        # Given a receiver that hands the group back: u1 and u2 visible at once, u3 later (its change throttled, it
        # waits out its visibility timeout: here, a second)
        for message in received[:2]:
            sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=received[2]["ReceiptHandle"], VisibilityTimeout=1)
        # u3 in flight holds the group
        assert sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []) == []
        time.sleep(1.2)
        # When u3 is visible again, the group goes on from its head, in order (moto handed out u3 alone: the
        # group's note, taken before u3 was seen visible, held u1 and u2 back)
        again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert [message["Body"] for message in again] == ["u1", "u2", "u3"]
