"""DynamoDB calls per job, counted on the real worker: benchmark (c) of issue 6, extended by issue 19.

`python -m bench.writes --help`. Under moto's `mock_aws` (no AWS, no network), the real `Worker` drains the `orders`
queue through the local engine's event source emulator, as tests/functional's Harness does, in four phases of
`--jobs` order confirmations each:

- new: jobs that succeed on their first run;
- duplicate: the same orders sent again, after the first ones completed;
- retry: jobs whose first run fails (SES answers a 5xx once per order), retried after their backoff and then done;
- hand-back: jobs delivered to an invocation with too little time left for their limit, handed back unrun (only
  that delivery is counted);
- batch: jobs published as one batch (`JobPublisher.batch`, issue 23) that succeed on their first run: the
  publisher's definition of the batch and each member's count in it are counted with the worker's writes.

A botocore hook on every DynamoDB client the worker makes counts every call by table and operation, and every
write that DynamoDB refused on its condition (`ConditionalCheckFailedException`).

The goals: two writes to the idempotency table per new job (the run's start, counting it, and its completion), as
plain Powertools makes (issue 6); none per duplicate beyond the conditional check (the start that finds the
COMPLETED record); two per failed run (its start and its failure, where Powertools would start and delete), so
four for a job retried once; none for a hand-back (issue 19: runs are counted in the key's record at no extra
write); one per batch member beyond a new job's two (its count in the batch), plus a few per batch (the two
items that define it, the one that marks its callbacks published). A failed conditional write still costs a
write request unit on DynamoDB, so it is counted and reported on its own.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from unittest import mock

from functions.catalog import CATALOG
from functions.catalog import RESOURCES as APP_RESOURCES
from sqs_jobs.specs import CircuitBreakerSpec

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
# A job retried once: two runs, each its start and its end.
GOAL_WRITES_PER_RETRIED_JOB = 4
GOAL_WRITES_PER_HAND_BACK = 0
# A batch member: a new job's two, and its count in its batch (issue 23). Per batch besides: its two definition
# items (publisher) and the mark of its callbacks published (two when a redrive completes `on_success` later).
GOAL_WRITES_PER_BATCH_MEMBER = GOAL_WRITES_PER_NEW_JOB + 1
GOAL_WRITES_PER_BATCH = 3
GOALS = {
    "new": GOAL_WRITES_PER_NEW_JOB,
    "duplicate": GOAL_WRITES_PER_DUPLICATE,
    "retry": GOAL_WRITES_PER_RETRIED_JOB,
    "hand-back": GOAL_WRITES_PER_HAND_BACK,
    "batch": GOAL_WRITES_PER_BATCH_MEMBER,
}


def goal_of(phase: str, jobs: int) -> float:
    """A phase's goal in effective writes per job; a batch's fixed writes spread over its members."""
    return GOALS[phase] + (GOAL_WRITES_PER_BATCH / jobs if phase == "batch" else 0)


_TABLE_KEY = "bench_writes_table"


@dataclass
class CallCounter:
    """Counts a DynamoDB client's calls by (table, operation) and the conditional writes that failed."""

    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    conditional_failures: Counter[tuple[str, str]] = field(default_factory=Counter)

    def attach(self, clients: Any) -> None:
        """Count the calls of every DynamoDB client a ClientFactory makes (the jobs' and the runtime's)."""
        clients.register("provide-client-params.dynamodb.*", self._before)
        clients.register("after-call.dynamodb.*", self._after)

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
    # The batch phase: the size of its members' item (DynamoDB's item size), which each member's consistent read
    # of it is billed by; None in the other phases.
    members_item_bytes: int | None = None

    @property
    def member_read_units(self) -> int | None:
        """Read units of one member's consistent GetItem of the members' item: one per 4 KB."""
        return None if self.members_item_bytes is None else max(1, math.ceil(self.members_item_bytes / 4096))

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
            "members_item_bytes": self.members_item_bytes,
            "member_read_units": self.member_read_units,
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
    """Run `jobs` new order confirmations, as many duplicates, retried jobs and hand-backs, on the real worker."""
    from moto import mock_aws

    from functions.catalog import CATALOG
    from sqs_jobs.local.provision import provision
    from sqs_jobs.specs import Catalog
    from sqs_jobs.worker.clients import ClientFactory, new_session

    # The orders queue with its breakers off (the retry phase's failures would open SES's) and short backoffs.
    spec = replace(
        CATALOG.queue(QUEUE), circuit_breaker=CircuitBreakerSpec(enabled=False), backoff_base_s=1, backoff_cap_s=1
    )
    catalog = Catalog(
        resources=APP_RESOURCES, queues=tuple(spec if queue.name == QUEUE else queue for queue in CATALOG)
    )
    with _fake_credentials(), mock_aws():
        clients = ClientFactory(session=new_session(region_name=REGION))
        bench = _Bench(clients, provision(clients, catalog=catalog), jobs)
        return [
            bench.phase("new", "bench"),
            bench.phase("duplicate", "bench", again=True),
            bench.phase("retry", "retry"),
            bench.phase("batch", "batch"),
            # Last: what it hands back stays on the queue.
            bench.phase("hand-back", "back"),
        ]


class _Bench:
    """The worker of the orders queue on moto, its DynamoDB calls counted, run phase by phase."""

    def __init__(self, clients: Any, deployment: Any, jobs: int) -> None:
        from sqs_jobs.limits import SETTLE_MARGIN_S
        from sqs_jobs.local.emulator import EventSourceMapping
        from sqs_jobs.worker.observability import Observability
        from sqs_jobs.worker.runtime import Worker

        self.jobs = jobs
        self.deployment = deployment
        settings = deployment.worker_settings(QUEUE)
        self.idempotency_table = settings.idempotency_table
        self.dynamodb = clients("dynamodb")
        self.sqs = clients("sqs")
        self.url = deployment.queues[QUEUE].url
        self.counter = CallCounter()
        self.counter.attach(clients)  # every client the worker's ClientFactory makes
        self.failing = _FailFirstSend()
        self.failing.register(clients)
        self.log = io.StringIO()
        self.worker = Worker(settings=settings, clients=clients, observability=Observability.create(output=self.log))
        self.mapping = EventSourceMapping(
            queue=deployment.queues[QUEUE],
            sqs_client=self.sqs,
            handler_factory=lambda: self.worker.handle,
            function_name=f"bench-{QUEUE}-worker",
            concurrency=1,
            wait_time_s=0,
        )
        # An invocation with a second less than a run of the job needs: every record is handed back unrun.
        self.too_short_s = settings.queue.time_limit_s(JOB) + SETTLE_MARGIN_S - 1

    def phase(self, phase: str, prefix: str, again: bool = False) -> PhaseResult:
        for n in range(self.jobs):
            order_id = f"{prefix}-{n}"
            if not again:
                self.dynamodb.put_item(
                    TableName=self.deployment.resources["orders_table"],
                    Item={"order_id": {"S": order_id}, "email": {"S": f"buyer-{order_id}@example.com"}},
                )
            if phase != "batch":
                self.sqs.send_message(QueueUrl=self.url, MessageBody=json.dumps({"job": JOB, "id": order_id}))
        self.counter.reset()
        batch_id = self._publish_batch(prefix) if phase == "batch" else None
        self.failing.active = phase == "retry"
        mails_before = _mails_sent()
        log_before = len(self.log.getvalue().encode())
        if phase == "hand-back":
            self._hand_back_all()
        else:
            self._drain()
        counter, table = self.counter, self.idempotency_table
        result = PhaseResult(
            phase=phase,
            jobs=self.jobs,
            side_effects=_mails_sent() - mails_before,
            log_bytes=len(self.log.getvalue().encode()) - log_before,
            idempotency_writes=counter.writes(table),
            idempotency_conditional_checks=counter.conditional_checks(table),
            idempotency_reads=counter.reads(table),
            other_writes=counter.writes() - counter.writes(table),
            other_reads=counter.reads() - counter.reads(table),
            calls={
                f"{'idempotency' if name == table else name} {op}": n for (name, op), n in sorted(counter.calls.items())
            },
        )
        # Read after the phase's calls were counted: moto reports no consumed capacity by size, so it is computed.
        return result if batch_id is None else replace(result, members_item_bytes=self._members_item_bytes(batch_id))

    def _publish_batch(self, prefix: str) -> str:
        from sqs_jobs.publisher import BatchTable, JobPublisher

        publisher = JobPublisher(
            self.sqs, {QUEUE: self.url}, batches=BatchTable(self.dynamodb, self.idempotency_table), catalog=CATALOG
        )
        return publisher.batch([(JOB, f"{prefix}-{n}") for n in range(self.jobs)], description="bench (c)")

    def _members_item_bytes(self, batch_id: str) -> int:
        from sqs_jobs.batches import members_item_id

        listed = self.dynamodb.get_item(
            TableName=self.idempotency_table, Key={"id": {"S": members_item_id(batch_id)}}, ConsistentRead=True
        )["Item"]
        return item_bytes(listed)

    def _drain(self) -> None:
        while True:
            invocation = self.mapping.poll_once(self.worker.handle)
            if invocation is None:
                return
            for record in invocation.event["Records"]:  # wait out each backoff at once
                if record["messageId"] not in invocation.deleted:
                    self.sqs.change_message_visibility(
                        QueueUrl=self.url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0
                    )

    def _hand_back_all(self) -> None:
        handed_back = 0
        while handed_back < self.jobs:
            invocation = self.mapping.poll_once(self.worker.handle, timeout_s=self.too_short_s)
            if invocation is None:
                raise RuntimeError("a record handed back for lack of time must be visible again at once")
            handed_back += len(invocation.event["Records"])


@dataclass
class _FailFirstSend:
    """While active, the first SES send to each address fails with a 5xx (a transient failure); the second goes."""

    active: bool = False
    failed: set[str] = field(default_factory=set)

    def register(self, clients: Any) -> None:
        clients.register("provide-client-params.ses.SendEmail", self._address)
        clients.register("before-call.ses.SendEmail", self._answer)

    @staticmethod
    def _address(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["bench_address"] = params["Destination"]["ToAddresses"][0]

    def _answer(self, context: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]] | None:
        from botocore.awsrequest import AWSResponse, HTTPHeaders

        address = context.get("bench_address", "")
        if not self.active or address in self.failed:
            return None
        self.failed.add(address)
        parsed = {
            "Error": {"Code": "ServiceUnavailable", "Message": "try again"},
            "ResponseMetadata": {"HTTPStatusCode": 503, "HTTPHeaders": {}},
        }
        return AWSResponse(url="https://email.local/", status_code=503, headers=HTTPHeaders(), raw=None), parsed


def item_bytes(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB bills it ("DynamoDB item sizes and formats", CapacityUnitCalculations): each
    attribute's name and value; a string's UTF-8 bytes, a binary's raw bytes, a number 1 byte per two significant
    digits plus 1, a list or map 3 bytes plus 1 per element."""
    return sum(len(name.encode()) + _value_bytes(value) for name, value in item.items())


def _value_bytes(value: dict[str, Any]) -> int:
    [(kind, content)] = value.items()
    if kind == "S":
        return len(str(content).encode("utf-8", errors="surrogatepass"))
    if kind == "B":
        return len(content)
    if kind == "N":
        digits = str(content).lstrip("-").replace(".", "").strip("0") or "0"
        return math.ceil(len(digits) / 2) + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":
        return 3 + sum(1 + _value_bytes(element) for element in content)
    if kind == "M":
        return 3 + sum(1 + len(name.encode()) + _value_bytes(element) for name, element in content.items())
    if kind in ("SS", "BS", "NS"):
        return sum(_value_bytes({kind[0]: element}) for element in content)
    raise ValueError(f"attribute type {kind!r}; accepted: S, N, B, BOOL, NULL, L, M, SS, NS, BS")


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
            f"{goal_of(r.phase, r.jobs):g} "
            + ("(met)" if r.per_job(r.effective_writes) <= goal_of(r.phase, r.jobs) else "(NOT met)"),
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
    for r in results:
        if r.members_item_bytes is not None:
            lines.append(
                f"{r.phase}: the members' item is {r.members_item_bytes:,} bytes: each member's consistent read of it "
                f"costs {r.member_read_units} read unit(s) (4 KB each)"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.writes",
        description="Count DynamoDB writes per new job, duplicate, retried job and hand-back on the real worker "
        "(moto, no AWS).",
    )
    parser.add_argument("--jobs", type=int, default=100, help="jobs per phase (default 100)")
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
        print("    retry: each job's first run fails once; hand-back: only the delivery that handed it back")
        print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
