"""The worker's environment: read once, checked whole, every problem named in one error."""

from __future__ import annotations

import pytest

from functions.catalog import CATALOG
from functions.catalog import RESOURCES as APP_RESOURCES
from sqs_jobs.catalog_ref import ENV_CATALOG, CatalogRefError, load_catalog
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.errors import PermanentError, TransientError, WorkerConfigError
from sqs_jobs.worker.settings import (
    ENV_DLQ_URL,
    ENV_IDEMPOTENCY_TABLE,
    ENV_QUEUE_NAME,
    ENV_QUEUE_URL,
    ENV_RUNTIME_ROLE_ID,
    RESOURCE_ENV_PREFIX,
    WorkerSettings,
    resource_env_name,
)

EXAMPLE_CATALOG_REF = "functions.catalog:CATALOG"
QUEUE_URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"
DLQ_URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq"
REQUIRED = (ENV_QUEUE_NAME, ENV_QUEUE_URL, ENV_DLQ_URL, ENV_IDEMPOTENCY_TABLE, ENV_RUNTIME_ROLE_ID)


def orders_environ() -> dict[str, str]:
    """A complete environment for the shipped catalog's `orders` queue."""
    return {
        ENV_CATALOG: EXAMPLE_CATALOG_REF,
        ENV_QUEUE_NAME: "orders",
        ENV_QUEUE_URL: QUEUE_URL,
        ENV_DLQ_URL: DLQ_URL,
        ENV_IDEMPOTENCY_TABLE: "jobs-idempotency",
        ENV_RUNTIME_ROLE_ID: "AROAEXAMPLEWORKERROLE",
        "JOBS_RESOURCE_ORDERS_TABLE": "orders",
        "JOBS_RESOURCE_MAIL_SENDER": "shop@example.com",
    }


def config_error(environ: dict[str, str], catalog: Catalog | None = CATALOG) -> str:
    with pytest.raises(WorkerConfigError) as caught:
        WorkerSettings.from_environ(environ, catalog)
    return str(caught.value)


# Another project's catalog, importable by reference (`tests.unit.test_settings:TWO_QUEUES`).
TWO_QUEUES = Catalog(
    resources=APP_RESOURCES,
    queues=(
        QueueSpec(name="mail", jobs=(JobSpec(name="send_mail", handler="functions.jobs.send_mail"),)),
        QueueSpec(
            name="images",
            jobs=(JobSpec(name="resize", handler="functions.jobs.resize", resources=("orders_table",)),),
        ),
    ),
)
NOT_A_CATALOG = {"queues": ()}


@pytest.fixture
def two_queues() -> Catalog:
    return TWO_QUEUES


def test_the_worker_loads_the_catalog_its_function_names() -> None:
    environ = {
        ENV_CATALOG: "tests.unit.test_settings:TWO_QUEUES",
        ENV_QUEUE_NAME: "images",
        ENV_QUEUE_URL: QUEUE_URL,
        ENV_DLQ_URL: DLQ_URL,
        ENV_IDEMPOTENCY_TABLE: "idem",
        ENV_RUNTIME_ROLE_ID: "AROAEXAMPLE",
        "JOBS_RESOURCE_ORDERS_TABLE": "orders",
    }

    settings = WorkerSettings.from_environ(environ)

    assert settings.queue is TWO_QUEUES.queue("images")
    assert settings.catalog_ref == "tests.unit.test_settings:TWO_QUEUES"
    assert WorkerSettings.from_environ(settings.to_environ()) == settings


def test_a_function_whose_catalog_is_not_named_fails_its_start_in_one_line() -> None:
    environ = {name: value for name, value in orders_environ().items() if name != ENV_CATALOG}

    with pytest.raises(WorkerConfigError) as raised:
        WorkerSettings.from_environ(environ)

    assert str(raised.value).startswith(f"worker environment is incomplete: {ENV_CATALOG} is not set")
    assert "\n" not in str(raised.value)


def test_the_named_catalog_is_the_one_the_worker_runs() -> None:
    settings = WorkerSettings.from_environ(orders_environ())

    assert settings.queue is CATALOG.queue("orders") and settings.catalog_ref == EXAMPLE_CATALOG_REF


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("functions.catalog", "is malformed"),
        ("functions catalog:CATALOG", "is malformed"),
        ("no_such_package.catalog:CATALOG", "module 'no_such_package.catalog' can't be imported"),
        ("tests.unit.test_settings:MISSING", "is nothing of that name"),
        ("tests.unit.test_settings:NOT_A_CATALOG", "is a dict"),
    ],
)
def test_a_catalog_reference_that_cant_be_loaded_is_one_line_naming_what_is_accepted(ref: str, says: str) -> None:
    with pytest.raises(CatalogRefError) as caught:
        load_catalog(ref)
    message = str(caught.value)
    assert says in message and "accepted: 'package.module:NAME'" in message and "\n" not in message

    error = config_error({**orders_environ(), ENV_CATALOG: ref}, catalog=None)
    assert error.startswith("worker environment is incomplete: JOBS_CATALOG: catalog reference")
    assert says in error


def test_resource_env_name() -> None:
    assert resource_env_name("orders_table") == "JOBS_RESOURCE_ORDERS_TABLE"
    assert resource_env_name("mail_sender").startswith(RESOURCE_ENV_PREFIX)


def test_from_environ() -> None:
    settings = WorkerSettings.from_environ(orders_environ())

    assert settings.queue is CATALOG.queue("orders")
    assert settings.queue_url == QUEUE_URL
    assert settings.dlq_url == DLQ_URL
    assert settings.idempotency_table == "jobs-idempotency"
    assert dict(settings.resources) == {"orders_table": "orders", "mail_sender": "shop@example.com"}


def test_from_environ_strips_surrounding_whitespace() -> None:
    environ = {name: f"  {value}\n" for name, value in orders_environ().items()}

    assert WorkerSettings.from_environ(environ) == WorkerSettings.from_environ(orders_environ())


def test_unrelated_variables_are_ignored(two_queues: Catalog) -> None:
    environ = {**orders_environ(), ENV_QUEUE_NAME: "mail", "PATH": "/usr/bin", "JOBS_RESOURCE_OTHER": "x"}

    settings = WorkerSettings.from_environ(environ, two_queues)

    assert settings.queue.name == "mail"
    assert dict(settings.resources) == {}  # the mail queue's jobs need none


def test_every_missing_variable_is_listed_in_one_error() -> None:
    message = config_error({})

    for name in REQUIRED:
        assert f"{name} is not set" in message


@pytest.mark.parametrize("missing", REQUIRED)
@pytest.mark.parametrize("blank", [None, "", "   "], ids=["absent", "empty", "blank"])
def test_each_missing_variable_is_named(missing: str, blank: str | None) -> None:
    environ = orders_environ()
    if blank is None:
        del environ[missing]
    else:
        environ[missing] = blank

    message = config_error(environ)

    assert f"{missing} is not set" in message
    for present in set(REQUIRED) - {missing}:
        assert present not in message


def test_unknown_queue_name_lists_the_known_queues(two_queues: Catalog) -> None:
    message = config_error({**orders_environ(), ENV_QUEUE_NAME: "pdf"}, two_queues)

    assert ENV_QUEUE_NAME in message
    assert "'pdf'" in message
    assert "mail" in message
    assert "images" in message


def test_unknown_queue_and_missing_variables_are_reported_together() -> None:
    message = config_error({ENV_QUEUE_NAME: "pdf", ENV_QUEUE_URL: QUEUE_URL})

    assert "unknown queue 'pdf'" in message
    assert f"{ENV_DLQ_URL} is not set" in message
    assert f"{ENV_IDEMPOTENCY_TABLE} is not set" in message
    assert f"{ENV_QUEUE_URL} is not set" not in message


@pytest.mark.parametrize("resource", ["orders_table", "mail_sender"])
def test_missing_resource_variable_is_named_with_what_it_is(resource: str) -> None:
    environ = orders_environ()
    del environ[resource_env_name(resource)]

    message = config_error(environ)

    assert f"{resource_env_name(resource)} is not set" in message
    assert resource in CATALOG.queue("orders").resources


def test_every_missing_resource_and_variable_is_reported_together() -> None:
    environ = {ENV_QUEUE_NAME: "orders", ENV_QUEUE_URL: QUEUE_URL, "JOBS_RESOURCE_ORDERS_TABLE": " "}

    message = config_error(environ)

    assert "JOBS_RESOURCE_ORDERS_TABLE is not set" in message
    assert "JOBS_RESOURCE_MAIL_SENDER is not set" in message
    assert f"{ENV_DLQ_URL} is not set" in message
    assert f"{ENV_IDEMPOTENCY_TABLE} is not set" in message


def test_a_queue_without_resources_needs_no_resource_variables(two_queues: Catalog) -> None:
    environ = {name: value for name, value in orders_environ().items() if not name.startswith(RESOURCE_ENV_PREFIX)}
    environ[ENV_QUEUE_NAME] = "mail"

    assert WorkerSettings.from_environ(environ, two_queues).queue.name == "mail"
    with pytest.raises(WorkerConfigError, match="JOBS_RESOURCE_ORDERS_TABLE"):
        WorkerSettings.from_environ({**environ, ENV_QUEUE_NAME: "images"}, two_queues)


def test_to_environ_round_trip() -> None:
    environ = orders_environ()
    settings = WorkerSettings.from_environ(environ)

    assert settings.to_environ() == environ
    assert WorkerSettings.from_environ(settings.to_environ()) == settings


def test_to_environ_round_trip_with_another_catalog(two_queues: Catalog) -> None:
    settings = WorkerSettings(
        queue=two_queues.queue("images"),
        queue_url="http://localhost:5000/images",
        dlq_url="http://localhost:5000/images-dlq",
        idempotency_table="idem",
        runtime_role_id="AROAEXAMPLEIMAGES",
        resources={"orders_table": "orders-local"},
    )

    environ = settings.to_environ()

    assert environ[ENV_QUEUE_NAME] == "images"
    assert environ["JOBS_RESOURCE_ORDERS_TABLE"] == "orders-local"
    assert WorkerSettings.from_environ(environ, two_queues) == settings


def test_misconfiguration_is_neither_permanent_nor_transient() -> None:
    # A deployment bug: the runtime must not dead-letter or retry jobs because of it.
    assert not issubclass(WorkerConfigError, PermanentError)
    assert not issubclass(WorkerConfigError, TransientError)
