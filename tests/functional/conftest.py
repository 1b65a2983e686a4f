"""Functional tests: the real worker against moto's `mock_aws` SQS, DynamoDB and SES.

Resources come from the same `provision()` the local engine uses, so tests, the engine and the stack agree.
Deliveries go through the local engine's event source emulator, step by step: real ReceiveMessage, the real
Lambda SQS event shape, deletes of what succeeded.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import pytest

from functions.catalog import CATALOG
from sqs_jobs.publisher import JobPublisher
from sqs_jobs.specs import Catalog
from sqs_jobs.testing import (
    REGION,
    SANDBOX_ENVIRONMENT,
    SANDBOX_UNSET,
    JobHarness,
    attributes_of,
    aws_sandbox,
    envelope,
    lambda_context,
    provisioning_clients,
)
from sqs_jobs.worker.clients import ClientFactory

__all__ = [
    "REGION",
    "Harness",
    "attributes_of",
    "envelope",
    "key_record",
    "lambda_context",
    "metric_values",
    "narrowed",
    "provisioning_clients",
]


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SANDBOX_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    for name in SANDBOX_UNSET:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def clients() -> Iterator[ClientFactory]:
    """A moto account of the test's own, as the testing API makes it (credentials, moto's patches, mock_aws)."""
    with aws_sandbox() as factory:
        yield factory


def narrowed(catalog: Catalog, *queues: str) -> Catalog:
    """`catalog` with only the named queues and the resources their jobs use: what the tests of a module touch.
    A worker receives only its queue's resources (LocalDeployment.worker_settings), so the rest would cost
    provisioning time (a whole catalog is about 70 calls, one queue about 20) and change nothing."""
    kept = tuple(catalog.queue(name) for name in queues)
    used = {name for queue in kept for name in queue.resources}
    return replace(catalog, queues=kept, resources=tuple(spec for spec in catalog.resources if spec.name in used))


class Harness(JobHarness):
    """The framework's JobHarness on the example's catalog: calls that name no queue mean `orders`."""

    @classmethod
    def provisioned(
        cls,
        clients: ClientFactory,
        catalog: Catalog = CATALOG,
        settings: Mapping[str, str] | None = None,
        **fields: Any,
    ) -> Harness:
        fields.setdefault("default_queue", "orders")
        harness = super().provisioned(clients, catalog, settings, **fields)
        assert isinstance(harness, Harness)
        return harness

    def stack_publisher(self) -> JobPublisher:
        return self.publisher()

    def put_order(self, order_id: str, email: str = "buyer@example.com", **fields: str) -> None:
        item = {"order_id": {"S": order_id}, "email": {"S": email}}
        item.update({name: {"S": value} for name, value in fields.items()})
        self.clients("dynamodb").put_item(TableName=self.deployment.resources["orders_table"], Item=item)


def key_record(harness: JobHarness, key: str) -> dict[str, Any]:
    """A job key's idempotency record as the worker left it (numbers as numbers), or {} if it has none."""
    return harness.record(key)


def metric_values(document: dict[str, Any], name: str) -> list[float]:
    """One metric's values in an EMF document: a number, or a list of them when a batch sent several."""
    value = document[name]
    return [float(item) for item in value] if isinstance(value, list) else [float(value)]


@pytest.fixture
def harness(clients: ClientFactory) -> Harness:
    return Harness.provisioned(clients)
