"""The event source's injected faults, one at a time and step by step, against the real worker on moto:
a crash after the side effect but before the ack, and a duplicate delivery while the first copy still runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from functions.catalog import CATALOG
from sqs_jobs.local.chaos import Chaos, ChaosSettings
from sqs_jobs.local.emulator import Invocation
from sqs_jobs.worker.clients import ClientFactory
from tests.functional.conftest import Harness, envelope, narrowed

BUYER = "buyer@example.com"


# Only what these tests use: a fraction of the whole catalog's provisioning, per test.
@pytest.fixture
def harness(clients: ClientFactory) -> Harness:
    return Harness.provisioned(clients, narrowed(CATALOG, "orders"))


def test_a_crash_after_the_side_effect_deletes_nothing_and_the_redelivery_does_not_repeat_it(
    harness: Harness,
) -> None:
    harness.put_order("501", email=BUYER)
    message_id = harness.send(envelope("order_confirmation", "501"))
    chaos = Chaos(ChaosSettings(crash=1.0))

    crashed = harness.mapping(chaos=chaos).poll_once(harness.worker().handle)

    assert crashed is not None and crashed.crashed
    assert crashed.deleted == []  # never acked
    assert harness.mails_to(BUYER) == 1  # but the side effect happened
    assert harness.queue_counts() == (0, 1)  # in flight until its visibility timeout ends
    assert chaos.injected() == {"crash": 1}

    harness.expire_visibility(crashed)
    redelivered = harness.deliver()

    assert redelivered is not None and redelivered.deleted == [message_id]
    assert harness.mails_to(BUYER) == 1  # the idempotency record answered; no second mail
    assert harness.queue_counts() == (0, 0)
    assert harness.dead_letters() == []


def test_a_duplicate_delivery_is_the_same_message_again_and_runs_the_job_once(harness: Harness) -> None:
    harness.put_order("502", email=BUYER)
    message_id = harness.send(envelope("order_confirmation", "502"))
    chaos = Chaos(ChaosSettings(duplicate=1.0))
    twins: list[Invocation | None] = []
    worker = harness.worker()

    def first_copy(event: Mapping[str, Any], context: Any) -> Mapping[str, Any]:
        # While this copy is in hand, SQS hands the same message to another poller, which runs it first.
        twins.append(harness.deliver())
        return worker.handle(event, context)

    first = harness.mapping(chaos=chaos).poll_once(first_copy)

    assert first is not None and len(twins) == 1 and twins[0] is not None
    twin = twins[0]
    assert [record["messageId"] for record in twin.event["Records"]] == [message_id]  # the same message
    assert twin.event["Records"][0]["attributes"]["ApproximateReceiveCount"] == "2"
    assert twin.deleted == [message_id] and first.deleted == [message_id]  # both copies acked
    assert harness.mails_to(BUYER) == 1
    assert harness.queue_counts() == (0, 0)
    assert harness.dead_letters() == []
    assert chaos.injected() == {"duplicate": 1}


def test_without_chaos_the_mapping_injects_nothing(harness: Harness) -> None:
    harness.put_order("503", email=BUYER)
    harness.send(envelope("order_confirmation", "503"))
    chaos = Chaos(ChaosSettings())

    invocation = harness.mapping(chaos=chaos).poll_once(harness.worker().handle)

    assert invocation is not None and not invocation.crashed and len(invocation.deleted) == 1
    assert chaos.injected() == {}
