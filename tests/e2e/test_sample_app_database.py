"""A team's job on relational data: tests/sample_app's close_account re-reads a row from a real PostgreSQL server
(Debian's, started for the test) with the credentials of its Secret, on the local engine, and closes the account
once, however often it runs. What the local engine can't show (the worker in the VPC, RDS Proxy) is the stack's
part: tests/infra/test_sample_app.py checks its placement and grants; docs/catalog.md says what is tested where."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator

import pg8000.native
import pytest

from sqs_jobs.local.engine import LocalEngine
from sqs_jobs.worker.deadletter import ERROR_TYPE
from tests.postgres_server import PostgresServer, running_postgres
from tests.sample_app.catalog import CATALOG

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def database() -> Iterator[PostgresServer]:
    with running_postgres() as server:
        connection = _connect(server)
        connection.run(
            "CREATE TABLE accounts (account_id text PRIMARY KEY, status text NOT NULL, closed_at timestamptz)"
        )
        connection.close()
        yield server


@pytest.fixture
def worker_log() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def engine(database: PostgresServer, worker_log: io.StringIO) -> Iterator[LocalEngine]:
    with LocalEngine(port=0, catalog=CATALOG, worker_output=worker_log, heartbeat_interval_s=3600) as running:
        assert running.deployment is not None
        # What the team does once per environment: put the database's credentials in the secret (RDS's shape).
        credentials = {
            "username": database.user,
            "password": database.password,
            "host": database.host,
            "port": database.port,
            "dbname": database.database,
            "engine": "postgres",
        }
        running.clients()("secretsmanager").put_secret_value(
            SecretId=running.deployment.resources["accounts_db"], SecretString=json.dumps(credentials)
        )
        yield running


def _connect(server: PostgresServer) -> pg8000.native.Connection:
    return pg8000.native.Connection(
        server.user, host=server.host, port=server.port, password=server.password, database=server.database
    )


def _status(server: PostgresServer, account_id: str) -> tuple[str, object]:
    connection = _connect(server)
    try:
        ((status, closed_at),) = connection.run(
            "SELECT status, closed_at FROM accounts WHERE account_id = :id", id=account_id
        )
    finally:
        connection.close()
    return status, closed_at


def _publish(engine: LocalEngine, account_id: str) -> None:
    assert engine.deployment is not None
    engine.clients()("sqs").send_message(
        QueueUrl=engine.deployment.queues["accounts"].url,
        MessageBody=json.dumps({"job": "close_account", "id": account_id}),
    )


def test_the_job_reads_its_row_with_the_secrets_credentials_and_closes_it_once(
    engine: LocalEngine, database: PostgresServer, worker_log: io.StringIO
) -> None:
    connection = _connect(database)
    connection.run("INSERT INTO accounts (account_id, status) VALUES ('acct-1', 'open'), ('acct-2', 'open')")
    connection.close()

    _publish(engine, "acct-1")
    deadline = time.monotonic() + 60
    while _status(database, "acct-1")[0] != "closed" and time.monotonic() < deadline:
        time.sleep(0.2)
    status, closed_at = _status(database, "acct-1")
    assert status == "closed" and closed_at is not None
    assert engine.wait_until_idle(timeout_s=30)

    # Published again (a producer's retry): the idempotency record answers; the row is not written again.
    _publish(engine, "acct-1")
    assert engine.wait_until_idle(timeout_s=30)
    assert _status(database, "acct-1") == (status, closed_at)
    assert _status(database, "acct-2") == ("open", None)
    # The password is read, never written to a log.
    assert database.password not in worker_log.getvalue()


def test_a_missing_row_is_dead_lettered_once_with_its_error(engine: LocalEngine) -> None:
    assert engine.deployment is not None
    _publish(engine, "acct-missing")
    assert engine.wait_until_idle(timeout_s=60)

    sqs = engine.clients()("sqs")
    received = sqs.receive_message(
        QueueUrl=engine.deployment.queues["accounts"].dlq_url,
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        WaitTimeSeconds=1,
    )["Messages"]
    assert [json.loads(message["Body"])["id"] for message in received] == ["acct-missing"]
    assert received[0]["MessageAttributes"][ERROR_TYPE]["StringValue"] == "AccountNotFoundError"
