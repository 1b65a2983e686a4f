"""Secrets through the job's context: read from Secrets Manager (moto) on first use, kept SECRET_CACHE_S, read
again after; a missing one names AWS's code and never a value; a resource that is not a Secret is refused."""

from __future__ import annotations

from typing import Any, cast

import pytest

from functions.worker.clients import ClientFactory
from functions.worker.errors import SecretUnavailableError, WorkerConfigError
from functions.worker.jobs import JobContext
from functions.worker.secrets import SecretCache
from sqs_jobs.envelope import Envelope
from sqs_jobs.resources import SECRET_CACHE_S


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_secret_is_cached_for_its_time_and_a_rotated_value_is_read_after(clients: ClientFactory) -> None:
    manager = clients("secretsmanager")
    arn = manager.create_secret(Name="api-key", SecretString="first")["ARN"]
    clock = Clock()
    cache = SecretCache(lambda: manager, clock=clock)

    assert cache.get("api_key", arn) == "first"
    manager.put_secret_value(SecretId=arn, SecretString="rotated")
    clock.now += SECRET_CACHE_S - 1
    assert cache.get("api_key", arn) == "first"
    clock.now += 1
    assert cache.get("api_key", arn) == "rotated"


def test_a_secret_that_cant_be_read_names_the_code_never_a_value(clients: ClientFactory) -> None:
    manager = clients("secretsmanager")
    cache = SecretCache(lambda: manager)

    with pytest.raises(SecretUnavailableError) as raised:
        cache.get("api_key", "arn:aws:secretsmanager:us-east-1:123456789012:secret:gone-AbCdEf")

    assert str(raised.value) == "secret 'api_key' can't be read: ResourceNotFoundException"


def test_asking_a_table_for_its_secret_is_refused_at_once(clients: ClientFactory) -> None:
    context = JobContext(
        envelope=Envelope(job="j", id="1"),
        key="j:1",
        attempt=1,
        message_id="m",
        resources={"orders_table": "SqsJobs-orders-table"},
        clients=clients,
        logger=cast(Any, None),
        lambda_context=cast(Any, None),
        http_client_provider=cast(Any, None),
        secrets=SecretCache(lambda: clients("secretsmanager")),
    )

    with pytest.raises(WorkerConfigError, match="resource 'orders_table' is not a Secret"):
        context.secret("orders_table")
