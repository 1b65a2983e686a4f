"""The FIFO example job: an order's updates mailed once each, in the order they were published, on moto's FIFO SQS."""

from __future__ import annotations

import json

import pytest
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ses.models import ses_backends

from functions.catalog import CATALOG
from functions.jobs.order_update_mail import subject
from sqs_jobs.publisher import JobPublisher
from sqs_jobs.worker import deadletter
from sqs_jobs.worker.clients import ClientFactory
from tests.functional.conftest import REGION, Harness, attributes_of, narrowed

QUEUE = "order_updates"
BUYER = "buyer@example.com"


# Only what these tests use: a fraction of the whole catalog's provisioning, per test.
@pytest.fixture
def harness(clients: ClientFactory) -> Harness:
    return Harness.provisioned(clients, narrowed(CATALOG, QUEUE))


def publisher(harness: Harness) -> JobPublisher:
    return JobPublisher(harness.clients("sqs"), {QUEUE: harness.deployment.queues[QUEUE].url}, catalog=CATALOG)


def drain(harness: Harness) -> None:
    while harness.deliver(QUEUE) is not None:
        pass


def subjects_to(address: str) -> list[str]:
    sent = ses_backends[DEFAULT_ACCOUNT_ID][REGION].sent_messages
    return [mail.subject for mail in sent if address in mail.destinations.get("ToAddresses", [])]


def test_an_orders_updates_are_mailed_once_each_in_the_order_published(harness: Harness) -> None:
    # Given an order and three of its updates published in order, the second one twice (a publisher's retry)
    harness.put_order("701", email=BUYER, customer_name="Aiko", status="shipped")
    jobs = publisher(harness)
    for update in ("701-u1", "701-u2", "701-u2", "701-u3"):
        jobs.publish("order_update_mail", "701", key=update)
    # When the FIFO queue's worker drains it
    drain(harness)
    # Then each update was mailed once, in order, naming the update, and nothing is left or dead-lettered
    assert subjects_to(BUYER) == [subject("701", f"701-u{n}") for n in (1, 2, 3)]
    assert harness.queue_counts(QUEUE) == (0, 0)
    assert harness.dead_letters(QUEUE) == []


def test_the_group_is_the_order_so_another_orders_updates_are_not_held_back(harness: Harness) -> None:
    harness.put_order("702", email="a@example.com")
    harness.put_order("703", email="b@example.com")
    jobs = publisher(harness)
    jobs.publish("order_update_mail", "702", key="702-u1")
    jobs.publish("order_update_mail", "703", key="703-u1")
    message = harness.peek(QUEUE)
    assert message["Attributes"]["MessageGroupId"] == "702"
    drain(harness)
    assert subjects_to("a@example.com") == [subject("702", "702-u1")]
    assert subjects_to("b@example.com") == [subject("703", "703-u1")]


def test_an_update_without_a_key_is_dead_lettered_unrun_naming_the_fix(harness: Harness) -> None:
    # A key-less update would share the order's key with every later update: refused before anything runs
    harness.put_order("704", email=BUYER)
    publisher(harness).publish("order_update_mail", "704")
    drain(harness)
    [letter] = harness.dead_letters(QUEUE)
    evidence = attributes_of(letter)
    assert evidence[deadletter.ERROR_TYPE] == "IdempotencyKeyError"
    assert "key='704-u<n>'" in evidence[deadletter.ERROR_MESSAGE]
    assert evidence[deadletter.FAILURE] == "permanent"
    assert subjects_to(BUYER) == []


def test_a_key_that_names_another_orders_update_is_a_permanent_failure(harness: Harness) -> None:
    harness.put_order("705", email=BUYER)
    publisher(harness).publish("order_update_mail", "705", key="706-u1")
    drain(harness)
    [letter] = harness.dead_letters(QUEUE)
    assert json.loads(letter["Body"])["key"] == "706-u1"
    assert attributes_of(letter)[deadletter.ERROR_TYPE] == "UpdateKeyError"
    assert subjects_to(BUYER) == []


def test_a_missing_order_dead_letters_each_of_its_updates_and_the_group_goes_on(harness: Harness) -> None:
    jobs = publisher(harness)
    jobs.publish("order_update_mail", "707", key="707-u1")
    jobs.publish("order_update_mail", "707", key="707-u2")
    drain(harness)
    letters = harness.dead_letters(QUEUE)
    assert sorted(json.loads(letter["Body"])["key"] for letter in letters) == ["707-u1", "707-u2"]
    assert {attributes_of(letter)[deadletter.ERROR_TYPE] for letter in letters} == {"OrderNotFoundError"}
    assert harness.queue_counts(QUEUE) == (0, 0)
