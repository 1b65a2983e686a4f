"""Re-read an account's row in the accounts database (PostgreSQL) and close it, once.

The pattern for relational data (docs/catalog.md, "Relational data and VPCs"): credentials from the secret, one
connection per run (RDS Proxy pools them; a worker runs several records at once, and a driver's connection is not
shared between threads), a socket timeout within the run's time, and a write that says what it changes, so a
second run (a redelivery, a late answer after a cut) changes nothing.
"""

from __future__ import annotations

import json

import pg8000.native

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.errors import RecordNotFoundError
from sqs_jobs.worker.jobs import JobContext

# Connecting and each statement wait at most this long, and never past the run's own time.
DATABASE_TIMEOUT_S = 10.0


class AccountNotFoundError(RecordNotFoundError):
    """The account the job names does not exist."""


def run(envelope: Envelope, context: JobContext) -> dict[str, str]:
    credentials = json.loads(context.secret("accounts_db"))
    timeout_s = max(1.0, min(DATABASE_TIMEOUT_S, context.remaining_time_ms() / 1000 - 1))
    connection = pg8000.native.Connection(
        credentials["username"],
        host=credentials["host"],
        port=int(credentials.get("port", 5432)),
        database=credentials.get("dbname"),
        password=credentials["password"],
        timeout=timeout_s,
    )
    try:
        rows = connection.run("SELECT status FROM accounts WHERE account_id = :id", id=envelope.id)
        if not rows:
            raise AccountNotFoundError(f"account {envelope.id!r} does not exist")
        if rows[0][0] != "closed":
            connection.run(
                "UPDATE accounts SET status = 'closed', closed_at = now() "
                "WHERE account_id = :id AND status <> 'closed'",
                id=envelope.id,
            )
        return {"status": "closed"}
    finally:
        connection.close()
