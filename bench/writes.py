"""DynamoDB calls per job, counted on the real worker: benchmark (c) of issue 6.

`python -m bench.writes --help`. Under moto's `mock_aws` (no AWS, no network), the real `Worker` drains the `orders`
queue through the local engine's event source emulator, as tests/functional's Harness does: first `--jobs` new
order confirmations, then the same number of duplicates (the same orders sent again, after the first ones
completed). A botocore hook on the worker's DynamoDB client counts every call by table and operation, and every
write that DynamoDB refused on its condition (`ConditionalCheckFailedException`).

The goal (issue 6): two writes to the idempotency table per new job (the IN_PROGRESS put, the COMPLETED update)
and none per duplicate beyond the conditional check (the put that finds the COMPLETED record and fails). A failed
conditional write still costs a write request unit on DynamoDB, so it is counted and reported on its own.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

WRITE_OPERATIONS = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems", "ExecuteStatement"}
)
READ_OPERATIONS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})
CONDITIONAL_FAILED = "ConditionalCheckFailedException"
QUEUE = "orders"
JOB = "order_confirmation"
REGION = "us-east-1"
GOAL_WRITES_PER_NEW_JOB = 2
GOAL_WRITES_PER_DUPLICATE = 0
_TABLE_KEY = "bench_writes_table"


@dataclass
class CallCounter:
    """Counts a DynamoDB client's calls by (table, operation) and the conditional writes that failed."""

    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    conditional_failures: Counter[tuple[str, str]] = field(default_factory=Counter)

    def attach(self, client: Any) -> None:
        events = client.meta.events
        events.register("provide-client-params.dynamodb.*", self._before)
        events.register("after-call.dynamodb.*", self._after)

    def reset(self) -> None:
        self.calls.clear()
        self.conditional_failures.clear()

    def _before(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        table = str(params.get("TableName", "(none)"))
        context[_TABLE_KEY] = table
        self.calls[(table, model.name)] += 1

    def _after(self, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if parsed.get("Error", {}).get("Code") == CONDITIONAL_FAILED:
            self.conditional_failures[(str(context.get(_TABLE_KEY, "(none)")), model.name)] += 1

    def writes(self, table: str | None = None) -> int:
        """Write calls, succeeded or refused on their condition."""
        return sum(n for (t, op), n in self.calls.items() if op in WRITE_OPERATIONS and table in (None, t))

    def reads(self, table: str | None = None) -> int:
        return sum(n for (t, op), n in self.calls.items() if op in READ_OPERATIONS and table in (None, t))

    def conditional_checks(self, table: str | None = None) -> int:
        return sum(n for (t, _), n in self.conditional_failures.items() if table in (None, t))


@dataclass(frozen=True)
class PhaseResult:
    """One phase (new jobs or duplicates): totals and per-job figures."""

    phase: str
    jobs: int
    side_effects: int  # confirmation mails SES accepted during the phase
    log_bytes: int  # what the worker wrote to its log (JSON lines, EMF metrics) during the phase
    idempotency_writes: int  # every write call to the idempotency table, including refused ones
    idempotency_conditional_checks: int  # of those, the writes refused on their condition
    idempotency_reads: int
    other_writes: int
    other_reads: int
    calls: dict[str, int]  # "table operation" -> calls

    @property
    def effective_writes(self) -> int:
        """Idempotency writes that changed a record: all writes minus those refused on their condition."""
        return self.idempotency_writes - self.idempotency_conditional_checks

    def per_job(self, value: int) -> float:
        return value / self.jobs if self.jobs else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "jobs": self.jobs,
            "side_effects": self.side_effects,
            "log_bytes": self.log_bytes,
            "idempotency_writes": self.idempotency_writes,
            "idempotency_conditional_checks": self.idempotency_conditional_checks,
            "idempotency_effective_writes": self.effective_writes,
            "idempotency_reads": self.idempotency_reads,
            "other_writes": self.other_writes,
            "other_reads": self.other_reads,
            "per_job": {
                "idempotency_writes": self.per_job(self.idempotency_writes),
                "idempotency_conditional_checks": self.per_job(self.idempotency_conditional_checks),
                "idempotency_effective_writes": self.per_job(self.effective_writes),
                "idempotency_reads": self.per_job(self.idempotency_reads),
                "other_writes": self.per_job(self.other_writes),
                "other_reads": self.per_job(self.other_reads),
                "log_bytes": self.per_job(self.log_bytes),
            },
            "calls": self.calls,
        }


def _fake_credentials() -> Any:
    """moto's fake credentials for the run, the environment restored after (`unittest.mock.patch.dict`)."""
    environ = {key: value for key, value in os.environ.items() if key not in ("AWS_ENDPOINT_URL", "AWS_PROFILE")}
    environ.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": REGION,
        }
    )
    return mock.patch.dict(os.environ, environ, clear=True)


def _mails_sent() -> int:
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ses.models import ses_backends

    return len(ses_backends[DEFAULT_ACCOUNT_ID][REGION].sent_messages)


def run(jobs: int = 100) -> list[PhaseResult]:
    """Run `jobs` new order confirmations, then `jobs` duplicates, on the real worker under moto."""
    import boto3
    from moto import mock_aws

    from functions.worker.clients import ClientFactory
    from functions.worker.observability import Observability
    from functions.worker.runtime import Worker
    from jobctl.local.emulator import EventSourceMapping
    from jobctl.local.provision import provision
    from sqs_jobs.catalog import CATALOG

    with _fake_credentials(), mock_aws():
        clients = ClientFactory(session=boto3.session.Session(region_name=REGION))
        deployment = provision(clients, catalog=CATALOG)
        settings = deployment.worker_settings(QUEUE)
        idempotency_table = settings.idempotency_table
        dynamodb = clients("dynamodb")
        sqs = clients("sqs")
        orders_table = deployment.resources["orders_table"]
        for n in range(jobs):
            dynamodb.put_item(
                TableName=orders_table,
                Item={"order_id": {"S": f"bench-{n}"}, "email": {"S": f"buyer{n}@example.com"}},
            )
        counter = CallCounter()
        counter.attach(dynamodb)  # the worker uses this same client (ClientFactory hands out one per service)
        log = io.StringIO()
        worker = Worker(settings=settings, clients=clients, observability=Observability.create(output=log))
        mapping = EventSourceMapping(
            queue=deployment.queues[QUEUE],
            sqs_client=sqs,
            handler_factory=lambda: worker.handle,
            function_name=f"bench-{QUEUE}-worker",
            concurrency=1,
            wait_time_s=0,
        )
        url = deployment.queues[QUEUE].url
        results: list[PhaseResult] = []
        for phase in ("new", "duplicate"):
            counter.reset()
            mails_before = _mails_sent()
            log_before = len(log.getvalue().encode())
            for n in range(jobs):
                sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"job": JOB, "id": f"bench-{n}"}))
            while mapping.poll_once(worker.handle) is not None:
                pass
            writes = counter.writes()
            reads = counter.reads()
            results.append(
                PhaseResult(
                    phase=phase,
                    jobs=jobs,
                    side_effects=_mails_sent() - mails_before,
                    log_bytes=len(log.getvalue().encode()) - log_before,
                    idempotency_writes=counter.writes(idempotency_table),
                    idempotency_conditional_checks=counter.conditional_checks(idempotency_table),
                    idempotency_reads=counter.reads(idempotency_table),
                    other_writes=writes - counter.writes(idempotency_table),
                    other_reads=reads - counter.reads(idempotency_table),
                    calls={
                        f"{'idempotency' if table == idempotency_table else table} {op}": n
                        for (table, op), n in sorted(counter.calls.items())
                    },
                )
            )
        return results


def render(results: Sequence[PhaseResult]) -> str:
    header = (
        "phase",
        "jobs",
        "side effects",
        "idem. writes/job",
        "of which cond. check/job",
        "effective writes/job",
        "idem. reads/job",
        "other writes/job",
        "other reads/job",
        "log bytes/job",
        "goal (effective writes/job)",
    )
    goals = {"new": GOAL_WRITES_PER_NEW_JOB, "duplicate": GOAL_WRITES_PER_DUPLICATE}
    rows = [
        (
            r.phase,
            f"{r.jobs:,}",
            f"{r.side_effects:,}",
            f"{r.per_job(r.idempotency_writes):.2f}",
            f"{r.per_job(r.idempotency_conditional_checks):.2f}",
            f"{r.per_job(r.effective_writes):.2f}",
            f"{r.per_job(r.idempotency_reads):.2f}",
            f"{r.per_job(r.other_writes):.2f}",
            f"{r.per_job(r.other_reads):.2f}",
            f"{r.per_job(r.log_bytes):,.0f}",
            f"{goals.get(r.phase, '-')} "
            + ("(met)" if r.per_job(r.effective_writes) <= goals[r.phase] else "(NOT met)"),
        )
        for r in results
    ]
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    lines = [" | ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in (header, *rows)]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    lines.append("")
    for r in results:
        lines.append(
            f"{r.phase}: DynamoDB calls by table and operation: " + ", ".join(f"{k} {v:,}" for k, v in r.calls.items())
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.writes",
        description="Count DynamoDB writes per new job and per duplicate on the real worker (moto, no AWS).",
    )
    parser.add_argument("--jobs", type=int, default=100, help="new jobs, then as many duplicates (default 100)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    results = run(args.jobs)
    if args.json:
        json.dump([r.as_dict() for r in results], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print("(c) DynamoDB calls per job on the real worker (orders queue, order_confirmation, moto)")
        print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
