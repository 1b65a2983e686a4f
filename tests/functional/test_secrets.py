"""Secrets through the job's context: read from Secrets Manager or Parameter Store (moto) on first use, kept
SECRET_CACHE_S, read again after; a missing one names AWS's code and never a value; a resource that is not a
Secret, or a parameter that is not a SecureString, is refused."""

from __future__ import annotations

from typing import Any, cast

import pytest

from sqs_jobs.envelope import Envelope
from sqs_jobs.local.resource_providers import LocalResources
from sqs_jobs.resources import SECRET_CACHE_S, Secret, SecretStore
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.errors import SecretUnavailableError, WorkerConfigError
from sqs_jobs.worker.jobs import JobContext
from sqs_jobs.worker.secrets import SecretCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_secret_is_cached_for_its_time_and_a_rotated_value_is_read_after(clients: ClientFactory) -> None:
    manager = clients("secretsmanager")
    arn = manager.create_secret(Name="api-key", SecretString="first")["ARN"]
    clock = Clock()
    cache = SecretCache(clients, clock=clock)

    assert cache.get("api_key", arn) == "first"
    manager.put_secret_value(SecretId=arn, SecretString="rotated")
    clock.now += SECRET_CACHE_S - 1
    assert cache.get("api_key", arn) == "first"
    clock.now += 1
    assert cache.get("api_key", arn) == "rotated"


def test_a_secret_that_cant_be_read_names_the_code_never_a_value(clients: ClientFactory) -> None:
    cache = SecretCache(clients)

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
        secrets=SecretCache(clients),
    )

    with pytest.raises(WorkerConfigError, match="resource 'orders_table' is not a Secret"):
        context.secret("orders_table")


def test_a_secure_string_parameter_is_read_decrypted_and_cached_like_a_secret(clients: ClientFactory) -> None:
    ssm = clients("ssm")
    ssm.put_parameter(Name="/images/api-key", Type="SecureString", Value="first")
    arn = ssm.get_parameter(Name="/images/api-key")["Parameter"]["ARN"]
    clock = Clock()
    cache = SecretCache(clients, clock=clock)

    assert cache.get("api_key", arn) == "first"
    ssm.put_parameter(Name="/images/api-key", Type="SecureString", Value="rotated", Overwrite=True)
    clock.now += SECRET_CACHE_S - 1
    assert cache.get("api_key", arn) == "first"
    clock.now += 1
    assert cache.get("api_key", arn) == "rotated"


def test_a_plain_string_parameter_is_not_a_secret_and_a_missing_one_names_the_code(clients: ClientFactory) -> None:
    ssm = clients("ssm")
    ssm.put_parameter(Name="/images/not-secret", Type="String", Value="shown")
    plain = ssm.get_parameter(Name="/images/not-secret")["Parameter"]["ARN"]
    cache = SecretCache(clients)

    with pytest.raises(SecretUnavailableError) as raised:
        cache.get("api_key", plain)
    assert str(raised.value) == "secret 'api_key' is a String parameter; a secret must be a SecureString"
    assert "shown" not in str(raised.value)
    with pytest.raises(SecretUnavailableError) as raised:
        cache.get("api_key", plain.replace("not-secret", "gone"))
    assert str(raised.value) == "secret 'api_key' can't be read: ParameterNotFound"


def test_the_local_engine_keeps_a_parameter_store_secret_as_a_secure_string_the_worker_reads(
    clients: ClientFactory,
) -> None:
    spec = Secret(name="api_key", description="its key", store=SecretStore.PARAMETER_STORE, local_value="local")
    made = LocalResources(clients, stack_name="Test", account="123456789012", settings={}, dead_letter_queues={})

    arn = made.provide(spec)

    parameter = clients("ssm").get_parameter(Name=arn)["Parameter"]
    assert (parameter["Name"], parameter["Type"]) == ("/Test/secrets/api_key", "SecureString")
    assert SecretCache(clients).get("api_key", arn) == "local"
    # Provisioned again without a local value, it keeps what an operator put.
    clients("ssm").put_parameter(Name="/Test/secrets/api_key", Type="SecureString", Value="put", Overwrite=True)
    assert (
        LocalResources(clients, stack_name="Test", account="123456789012", settings={}, dead_letter_queues={}).provide(
            Secret(name="api_key", description="its key", store=SecretStore.PARAMETER_STORE)
        )
        == arn
    )
    assert SecretCache(clients).get("api_key", arn) == "put"


def test_a_durable_jobs_context_reads_its_secret_as_an_ordinary_jobs_does(clients: ClientFactory) -> None:
    from sqs_jobs.durable.context import DurableJobContext

    arn = clients("secretsmanager").create_secret(Name="api-key", SecretString="durable")["ARN"]

    def context(secrets: SecretCache | None) -> DurableJobContext:
        return DurableJobContext(
            cast(Any, None),  # the SDK's context: steps only
            envelope=Envelope(job="j", id="1"),
            key="j:1",
            generation=0,
            job=cast(Any, None),
            queue=cast(Any, None),
            records=cast(Any, None),
            resources={"api_key": arn, "orders_table": "SqsJobs-orders-table"},
            clients=clients,
            logger=cast(Any, None),
            secrets=secrets,
        )

    assert context(SecretCache(clients)).secret("api_key") == "durable"
    with pytest.raises(WorkerConfigError, match="resource 'orders_table' is not a Secret"):
        context(SecretCache(clients)).secret("orders_table")
    with pytest.raises(WorkerConfigError, match=r"needs resource 'other', which its JobSpec\.resources does not list"):
        context(SecretCache(clients)).secret("other")
    with pytest.raises(WorkerConfigError, match="no secret store to read 'api_key'"):
        context(None).secret("api_key")
