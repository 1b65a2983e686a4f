"""moto's SQS refuses, and stores nothing of, a message SQS refuses (lib/sqs_jobs/local/moto_limits.py), in its server
mode as the local engine runs it and under `mock_aws` as the tests do; a standard queue's message group (a
tenant, for SQS's fair queues) is delivered as SQS delivers it.

Without the patch's name check, moto 5.2.5 answers a SendMessage whose attribute name SQS doesn't accept with
SQS's error, but only after storing the message; every ReceiveMessage with `MessageAttributeNames=["All"]` on that
queue then fails, so the local engine's event source emulator never delivers from it again. Without the batch's
check before storing, a SendMessageBatch whose last entry is too big fails but leaves the entries before it stored.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.moto_server.threaded_moto_server import ThreadedMotoServer

from functions.catalog import CATALOG
from sqs_jobs.local.emulator import EventSourceMapping
from sqs_jobs.local.moto_limits import enforce_message_limits
from sqs_jobs.local.moto_locks import serialize_moto
from sqs_jobs.local.moto_senders import record_senders
from sqs_jobs.local.provision import LocalQueue, provision
from sqs_jobs.worker.clients import ClientFactory, new_session
from tests.functional.conftest import REGION, envelope

# Each breaks one part of SQS's documented rule for an attribute's name (the SQS Developer Guide, "Message
# attribute components"): its characters, its length, AWS's reserved prefixes, and where periods may stand.
NAMES_SQS_REFUSES = (
    "bad name!",
    "naïve",
    "tab\there",
    "x" * 257,
    "AWS.trace",
    "amazon.Reserved",
    ".leading",
    "trailing.",
    "two..periods",
)
ACCEPTED_NAMES = ("tenant", "x" * 256, "a.b-c_D.9", "AWSx.not_reserved")
# Each breaks SQS's rule for a MessageGroupId (the SQS API Reference, SendMessage): 1 to 128 alphanumeric or
# punctuation characters.
GROUPS_SQS_REFUSES = ("", "x" * 129, "acme eu", "café", "tab\there")
EVERY_GROUP_CHARACTER = "".join(chr(code) for code in range(0x21, 0x7F))


@pytest.fixture(params=["server", "mock_aws"])
def clients(request: pytest.FixtureRequest, aws_credentials: None) -> Iterator[ClientFactory]:
    # The patches the local engine applies when it starts (lib/sqs_jobs/local/engine.py), then moto as it runs there
    # (its server, on a socket) or as the functional tests run it.
    serialize_moto()
    record_senders()
    enforce_message_limits()
    if request.param == "mock_aws":
        with mock_aws():
            yield ClientFactory(session=new_session(region_name=REGION))
        return
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")).close()
        yield ClientFactory(session=new_session(region_name=REGION), endpoint_url=endpoint)
    finally:
        server.stop()


@pytest.fixture
def orders(clients: ClientFactory) -> LocalQueue:
    return provision(clients, catalog=CATALOG).queues["orders"]


def _counts(sqs: Any, url: str) -> tuple[str, str]:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return attributes[names[0]], attributes[names[1]]


def _delivered_by_the_emulator(clients: ClientFactory, queue: LocalQueue) -> list[dict[str, Any]]:
    """The records of one batch the event source emulator receives (as the engine's pollers do) and hands on."""
    handed: list[dict[str, Any]] = []

    def handler(event: Mapping[str, Any], context: Any) -> Mapping[str, Any]:
        handed.extend(event["Records"])
        return {"batchItemFailures": []}

    mapping = EventSourceMapping(
        queue=queue, sqs_client=clients("sqs"), handler_factory=lambda: handler, function_name="test", wait_time_s=0
    )
    mapping.poll_once(handler)
    return handed


def test_a_message_whose_attribute_name_sqs_refuses_is_refused_and_not_stored(
    clients: ClientFactory, orders: LocalQueue
) -> None:
    sqs = clients("sqs")
    for name in NAMES_SQS_REFUSES:
        with pytest.raises(ClientError) as refused:
            sqs.send_message(
                QueueUrl=orders.url,
                MessageBody=envelope("order_confirmation", "1"),
                MessageAttributes={name: {"DataType": "String", "StringValue": "x"}},
            )
        assert refused.value.response["Error"]["Code"] == "InvalidParameterValue", name
        assert "message attribute name" in refused.value.response["Error"]["Message"], name
        assert _counts(sqs, orders.url) == ("0", "0"), f"{name!r} was stored"

    # The queue still delivers: the next job reaches the worker through the emulator, attributes and all
    sqs.send_message(
        QueueUrl=orders.url,
        MessageBody=envelope("order_confirmation", "2"),
        MessageAttributes={name: {"DataType": "String", "StringValue": "ok"} for name in ACCEPTED_NAMES},
    )
    [record] = _delivered_by_the_emulator(clients, orders)
    assert json.loads(record["body"])["id"] == "2"
    assert set(record["messageAttributes"]) == set(ACCEPTED_NAMES)


def test_a_message_group_sqs_refuses_is_refused_and_not_stored(clients: ClientFactory, orders: LocalQueue) -> None:
    sqs = clients("sqs")
    body = envelope("order_confirmation", "1")
    for group in GROUPS_SQS_REFUSES:
        for send, request in (
            (sqs.send_message, {"MessageBody": body, "MessageGroupId": group}),
            (sqs.send_message_batch, {"Entries": [{"Id": "0", "MessageBody": body, "MessageGroupId": group}]}),
        ):
            with pytest.raises(ClientError) as refused:
                send(QueueUrl=orders.url, **request)
            assert refused.value.response["Error"]["Code"] == "InvalidParameterValue", group
            assert "MessageGroupId" in refused.value.response["Error"]["Message"], group
            assert _counts(sqs, orders.url) == ("0", "0"), f"{group!r} was stored"


def test_a_deduplication_id_on_a_standard_queue_is_refused_and_not_stored(
    clients: ClientFactory, orders: LocalQueue
) -> None:
    sqs = clients("sqs")
    with pytest.raises(ClientError) as refused:
        sqs.send_message(
            QueueUrl=orders.url,
            MessageBody=envelope("order_confirmation", "1"),
            MessageGroupId="acme",
            MessageDeduplicationId="m-1",
        )
    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "not valid for this queue type" in refused.value.response["Error"]["Message"]
    assert _counts(sqs, orders.url) == ("0", "0")


def test_a_standard_queues_message_group_is_delivered_as_any_message_and_shown_as_sqs_shows_it(
    clients: ClientFactory, orders: LocalQueue
) -> None:
    sqs = clients("sqs")
    for entity_id, group in (("1", "acme"), ("2", "acme"), ("3", EVERY_GROUP_CHARACTER), ("4", "g" * 128)):
        sqs.send_message(
            QueueUrl=orders.url, MessageBody=envelope("order_confirmation", entity_id), MessageGroupId=group
        )

    # Two messages of one group are both in flight at once: a standard queue keeps no group order (FIFO would
    # hold the second until the first is deleted).
    first = sqs.receive_message(QueueUrl=orders.url, MaxNumberOfMessages=1, MessageSystemAttributeNames=["All"])
    second = sqs.receive_message(QueueUrl=orders.url, MaxNumberOfMessages=1, MessageSystemAttributeNames=["All"])
    groups = [reply["Messages"][0]["Attributes"]["MessageGroupId"] for reply in (first, second)]
    assert groups == ["acme", "acme"]
    # The emulator hands the worker the group as Lambda's event does, as a system attribute
    records = _delivered_by_the_emulator(clients, orders)
    assert {json.loads(r["body"])["id"]: r["attributes"]["MessageGroupId"] for r in records} == {
        "3": EVERY_GROUP_CHARACTER,
        "4": "g" * 128,
    }


def test_a_batch_with_one_entry_sqs_refuses_stores_none_of_it(clients: ClientFactory, orders: LocalQueue) -> None:
    sqs = clients("sqs")
    good = [{"Id": str(i), "MessageBody": envelope("order_confirmation", str(i))} for i in range(3)]
    bad_name = {**good[0], "Id": "bad", "MessageAttributes": {"no way": {"DataType": "String", "StringValue": "x"}}}
    # Its body fits, its attribute makes it bigger than the queue takes (moto's own check counts the body alone)
    limit = orders.spec.max_message_bytes
    too_big = {
        "Id": "big",
        "MessageBody": "b" * (limit - 10),
        "MessageAttributes": {"pad": {"DataType": "String", "StringValue": "p" * 20}},
    }
    bad_group = {**good[0], "Id": "group", "MessageGroupId": "no spaces"}
    deduplicated = {**good[0], "Id": "dedup", "MessageDeduplicationId": "standard queues take none"}
    for last in (bad_name, too_big, bad_group, deduplicated):
        with pytest.raises(ClientError) as refused:
            sqs.send_message_batch(QueueUrl=orders.url, Entries=[*good, last])
        assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
        assert _counts(sqs, orders.url) == ("0", "0"), f"entries of a refused batch were stored ({last['Id']})"

    sqs.send_message_batch(QueueUrl=orders.url, Entries=good)
    assert _counts(sqs, orders.url) == ("3", "0")
