"""`make soak`: thousands of jobs through the local engine with faults injected, then a check of every promise.

Faults (jobctl/local/chaos.py): transient failures and hangs of the downstream calls (SES, the invoicing API),
crashes after the side effects before the ack, duplicate deliveries; and permanent failures from the data (an
order or invoice that doesn't exist, or lacks what the job needs). Afterwards it checks that:

- every job ended once: done, or dead-lettered - never both, never neither;
- every done job's side effect (mail sent, invoice created and stored) happened exactly once;
- every permanent failure is in the DLQ with its evidence, and nothing else is;
- nothing is left in flight: the source queues are empty, no idempotency record is still IN_PROGRESS before its
  deadline (one past it is a run's start that landed after its call timed out: reported, not in flight).

Time is compressed so that it runs in minutes: 8 s function timeouts, 3 s time limits, 1-2 s backoff, circuit
breakers open 0.5-2 s (the catalog's other settings are kept, records in parallel included). moto's SQS slows as
its backlog grows, so jobs are published in waves that keep at most `window` messages waiting and `backlog`
messages unsettled (waiting, running, in backoff, or invisible after a crash).

    python -m jobctl.soak --jobs 10000           # `make soak` runs 10,000; `make test` runs 2,000

Progress (jobs published and settled) goes to stderr when it is a terminal, or with --progress.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from functions.worker.deadletter import ERROR_MESSAGE, ERROR_TYPE, FAILURE, FAILURE_PERMANENT
from jobctl.local.chaos import ChaosSettings
from jobctl.local.engine import WAITING, LocalEngine
from sqs_jobs.catalog import CATALOG, Catalog
from sqs_jobs.publisher import JobPublisher

ORDER_JOB = "order_confirmation"
INVOICE_JOB = "generate_invoice"
# The mix: 20 % transient, 2 % permanent, 1 % crash after the side effect, 5 % duplicate delivery; and a
# few hangs, each cut by the time limit.
DEFAULT_CHAOS = ChaosSettings(transient=0.2, hang=0.005, crash=0.01, duplicate=0.05, hang_s=4.0)
DEFAULT_PERMANENT = 0.02
# What a permanent job's evidence may name: its record is missing, or lacks a field the job needs.
PERMANENT_ERRORS = {
    ORDER_JOB: {"OrderNotFoundError", "OrderDataError"},
    INVOICE_JOB: {"InvoiceNotFoundError", "InvoiceDataError"},
}
SOAK_FUNCTION_TIMEOUT_S = 8
# Above what a healthy job takes with every record of every queue in flight against one moto process (p99 about
# 1 s), below a hang: a limit under healthy latency cuts runs whose last call then completes (docs/chaos.md).
SOAK_TIME_LIMIT_S = 3
SOAK_BACKOFF_BASE_S = 1
SOAK_BACKOFF_CAP_S = 2
# Circuit breakers on the same compressed clock: open for 0.5 s, at most 2 s.
SOAK_BREAKER_OPEN_S = 0.5
SOAK_BREAKER_MAX_OPEN_S = 2.0
_SUBJECT_ID = re.compile(r"^Your order (.+) is confirmed$")
_BATCH_WRITE_MAX = 25
# Told (published, settled) as the soak goes: settled jobs are done or dead-lettered.
SoakProgress = Callable[[int, int], None]


def soak_catalog(catalog: Catalog = CATALOG) -> Catalog:
    """The catalog with its clock compressed; attempts, batch sizes, records in parallel and concurrency stay as
    they are."""
    return Catalog(
        queues=tuple(
            replace(
                queue,
                function_timeout_s=SOAK_FUNCTION_TIMEOUT_S,
                backoff_base_s=SOAK_BACKOFF_BASE_S,
                backoff_cap_s=SOAK_BACKOFF_CAP_S,
                circuit_breaker=replace(
                    queue.circuit_breaker, open_s=SOAK_BREAKER_OPEN_S, max_open_s=SOAK_BREAKER_MAX_OPEN_S
                ),
                jobs=tuple(replace(job, time_limit_s=SOAK_TIME_LIMIT_S) for job in queue.jobs),
            )
            for queue in catalog
        )
    )


@dataclass(frozen=True)
class SoakJob:
    job: str
    id: str
    # None: the job can succeed; else how its data is broken ("missing" record or "bad" record).
    broken: str | None = None

    @property
    def permanent(self) -> bool:
        return self.broken is not None


@dataclass(frozen=True)
class SoakPlan:
    jobs: int = 2000
    invoice_share: float = 0.3
    permanent: float = DEFAULT_PERMANENT
    chaos: ChaosSettings = DEFAULT_CHAOS
    # Messages waiting for a poller at most, and unsettled at most: moto's receive cost grows with its backlog.
    window: int = 60
    backlog: int = 300
    seed: int = 7
    timeout_s: float = 900.0

    def __post_init__(self) -> None:
        if self.jobs < 1 or self.window < 1 or self.backlog < self.window or self.timeout_s <= 0:
            raise ValueError("jobs, window and timeout_s must be positive, and backlog at least window")
        if not (0 <= self.invoice_share <= 1 and 0 <= self.permanent <= 1):
            raise ValueError("invoice_share and permanent must be between 0 and 1")

    def build_jobs(self) -> list[SoakJob]:
        """The same jobs for the same seed: which are invoices, which are broken and how."""
        rng = random.Random(self.seed)
        jobs = []
        for number in range(1, self.jobs + 1):
            invoice = rng.random() < self.invoice_share
            broken = rng.choice(("missing", "bad")) if rng.random() < self.permanent else None
            jobs.append(SoakJob(INVOICE_JOB if invoice else ORDER_JOB, f"{number:07d}", broken))
        return jobs


@dataclass
class Observed:
    """What the soak found after the queues drained: the side effects, the DLQ, what is left."""

    mails: Counter[str] = field(default_factory=Counter)  # by order ID
    invoices_created: Counter[str] = field(default_factory=Counter)  # by invoice ID (one per Idempotency-Key)
    stored_pdfs: set[str] = field(default_factory=set)  # invoice IDs with a PDF in the bucket
    # (job, id) -> the evidence attributes of each DLQ copy
    dead_letters: dict[tuple[str, str], list[dict[str, str]]] = field(default_factory=dict)
    unparseable_dead_letters: list[str] = field(default_factory=list)
    left_in_queues: dict[str, int] = field(default_factory=dict)  # queue -> messages not settled
    idempotency_records: Counter[str] = field(default_factory=Counter)  # by status
    # In progress past their deadline: a run's start written after its call had timed out (the write landed late,
    # and its message was handed back and settled since). Not in flight: the next delivery of the key takes it over.
    stale_in_progress: int = 0
    drained: bool = True


def check(jobs: Sequence[SoakJob], observed: Observed) -> list[str]:
    """Every broken promise, one line each; empty when all held."""
    problems: list[str] = []
    known = {(job.job, job.id) for job in jobs}
    if not observed.drained:
        problems.append("the queues did not drain before the timeout")
    for job in jobs:
        name = f"{job.job}:{job.id}"
        effects = observed.mails[job.id] if job.job == ORDER_JOB else observed.invoices_created[job.id]
        copies = observed.dead_letters.get((job.job, job.id), [])
        if job.permanent:
            if not copies:
                problems.append(f"{name} ({job.broken} data) is not in the DLQ")
            if effects:
                problems.append(f"{name} ({job.broken} data) had {effects} side effect(s)")
            for evidence in copies:
                if evidence.get(ERROR_TYPE) not in PERMANENT_ERRORS[job.job] or evidence.get(FAILURE) != (
                    FAILURE_PERMANENT
                ):
                    problems.append(f"{name} is in the DLQ without its evidence: {evidence}")
            continue
        if copies:
            problems.append(f"{name} can succeed but was dead-lettered: {copies[0].get(ERROR_MESSAGE)!r}")
        if effects != 1:
            problems.append(f"{name} had {effects} side effects, not exactly 1")
        if job.job == INVOICE_JOB and job.id not in observed.stored_pdfs:
            problems.append(f"{name} has no PDF in the bucket")
    unknown = [key for key in observed.dead_letters if key not in known]
    problems += [f"unexpected job in the DLQ: {job}:{entity}" for job, entity in unknown]
    problems += [f"a DLQ message is not a job: {body[:200]!r}" for body in observed.unparseable_dead_letters]
    ids = {job.id for job in jobs}
    problems += [f"mail for unknown order {order!r}" for order in observed.mails if order not in ids]
    problems += [f"invoice for unknown ID {invoice!r}" for invoice in observed.invoices_created if invoice not in ids]
    problems += [
        f"{count} message(s) left in queue {queue}" for queue, count in observed.left_in_queues.items() if count
    ]
    in_progress = observed.idempotency_records.get("INPROGRESS", 0) - observed.stale_in_progress
    if in_progress:
        problems.append(f"{in_progress} idempotency record(s) still IN_PROGRESS before their deadline")
    completed, succeeded = observed.idempotency_records.get("COMPLETED", 0), sum(not job.permanent for job in jobs)
    if completed != succeeded:
        problems.append(f"{completed} completed idempotency records for {succeeded} jobs that can succeed")
    return problems


@dataclass
class SoakReport:
    plan: SoakPlan
    chaos: ChaosSettings  # as run: the plan's, with the plan's seed when it had none
    jobs: list[SoakJob]
    observed: Observed
    problems: list[str]
    elapsed_s: float
    injected: dict[str, int]
    engine_stats: dict[str, dict[str, Any]]
    # Records of a batch each queue's worker ran at once.
    records_in_parallel: dict[str, int] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def dead_lettered(self) -> int:
        return len(self.observed.dead_letters)

    @property
    def extra_dead_letter_copies(self) -> int:
        """DLQ copies beyond one per job: SQS delivered the failing message twice and both deliveries failed."""
        return sum(len(copies) - 1 for copies in self.observed.dead_letters.values())

    def lines(self) -> Iterator[str]:
        done = sum(self.observed.mails.values()) + sum(self.observed.invoices_created.values())
        rate = len(self.jobs) / self.elapsed_s
        yield f"chaos soak: {len(self.jobs)} jobs in {self.elapsed_s:.1f}s ({rate:.1f} jobs/s)"
        yield f"  chaos: {self.chaos.describe()}; permanent (broken data) {self.plan.permanent:g}"
        yield f"  faults injected: {', '.join(f'{k} {v}' for k, v in sorted(self.injected.items())) or 'none'}"
        for queue, stats in sorted(self.engine_stats.items()):
            at_once = self.records_in_parallel.get(queue)
            yield (
                f"  queue {queue}{f' ({at_once} records at once)' if at_once else ''}: "
                f"{stats['invocations']} invocations, {stats['records']} records received, "
                f"{stats['deleted']} acked, {stats['failed_records']} failed, {stats['crashes']} crashes, "
                f"{stats['duplicates']} duplicate deliveries"
            )
        expected_dead = sum(job.permanent for job in self.jobs)
        mails, invoices = sum(self.observed.mails.values()), sum(self.observed.invoices_created.values())
        yield f"  side effects: {done} ({mails} mails, {invoices} invoices) for {len(self.jobs) - expected_dead} jobs"
        yield (
            f"  dead-lettered: {self.dead_lettered} jobs of {expected_dead} broken "
            f"({self.extra_dead_letter_copies} extra copies from duplicate deliveries)"
        )
        yield (
            f"  idempotency records: {dict(self.observed.idempotency_records)}"
            + (
                f" ({self.observed.stale_in_progress} in progress past their deadline: starts written after their "
                "call timed out)"
                if self.observed.stale_in_progress
                else ""
            )
        )
        if self.passed:
            yield "  PASSED: every job ended once, every side effect happened once, nothing is in flight"
        else:
            yield f"  FAILED: {len(self.problems)} problem(s)"
            yield from (f"    - {problem}" for problem in self.problems[:50])


def _seed(engine: LocalEngine, jobs: Sequence[SoakJob]) -> None:
    assert engine.deployment is not None
    tables = {ORDER_JOB: engine.deployment.resources["orders_table"]}
    tables[INVOICE_JOB] = engine.deployment.resources["invoices_table"]
    requests: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for job in jobs:
        if job.broken == "missing":
            continue
        if job.job == ORDER_JOB:
            item = {"order_id": {"S": job.id}, "customer_name": {"S": f"Customer {job.id}"}, "total": {"N": "10.5"}}
            if job.broken is None:
                item["email"] = {"S": f"order-{job.id}@example.com"}
        else:
            item = {"invoice_id": {"S": job.id}, "customer": {"S": f"Customer {job.id}"}, "currency": {"S": "EUR"}}
            if job.broken is None:
                item["amount"] = {"N": "99.90"}
        requests[tables[job.job]].append({"PutRequest": {"Item": item}})
    dynamodb = engine.clients()("dynamodb")
    for table, puts in requests.items():
        for start in range(0, len(puts), _BATCH_WRITE_MAX):
            pending: Mapping[str, Any] = {table: puts[start : start + _BATCH_WRITE_MAX]}
            while pending:
                pending = dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}


def _unsettled(counts: Mapping[str, Mapping[str, int]]) -> int:
    return sum(sum(queue.values()) for queue in counts.values())


def _publish_in_waves(
    engine: LocalEngine,
    jobs: Sequence[SoakJob],
    plan: SoakPlan,
    deadline: float,
    progress: SoakProgress | None = None,
) -> bool:
    assert engine.deployment is not None
    sqs = engine.clients()("sqs")
    publisher = JobPublisher(
        sqs,
        {name: queue.url for name, queue in engine.deployment.queues.items()},
        catalog=engine.catalog,
    )
    next_job = 0
    while time.monotonic() < deadline:
        counts = engine.queue_counts()
        unsettled, waiting = _unsettled(counts), sum(queue[WAITING] for queue in counts.values())
        if progress is not None:
            progress(next_job, max(0, next_job - unsettled))
        room = min(plan.window - waiting, plan.backlog - unsettled)
        if next_job < len(jobs) and room > 0:
            wave = jobs[next_job : next_job + room]
            publisher.publish_many([(job.job, job.id) for job in wave])
            next_job += len(wave)
            continue
        if next_job >= len(jobs) and unsettled == 0:
            return True
        time.sleep(0.3)
    return False


def _drain_dead_letters(engine: LocalEngine, observed: Observed) -> None:
    assert engine.deployment is not None
    sqs = engine.clients()("sqs")
    for queue in engine.deployment.queues.values():
        while True:
            messages = sqs.receive_message(
                QueueUrl=queue.dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], VisibilityTimeout=300
            ).get("Messages", [])
            if not messages:
                break
            for message in messages:
                evidence = {
                    name: value.get("StringValue", "") for name, value in message.get("MessageAttributes", {}).items()
                }
                try:
                    body = json.loads(message["Body"])
                    key = (str(body["job"]), str(body["id"]))
                except (ValueError, KeyError, TypeError):
                    observed.unparseable_dead_letters.append(message["Body"])
                    continue
                observed.dead_letters.setdefault(key, []).append(evidence)


def _observe(engine: LocalEngine, drained: bool) -> Observed:
    assert engine.deployment is not None
    observed = Observed(drained=drained)
    for mail in engine.sent_mail():
        match = _SUBJECT_ID.match(str(mail["subject"]))
        observed.mails[match.group(1) if match else f"<subject {mail['subject']!r}>"] += 1
    for invoice_id in engine.invoicing.stats()["invoices"].values():
        observed.invoices_created[invoice_id] += 1
    s3 = engine.clients()("s3")
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=engine.deployment.resources["invoices_bucket"], Prefix="invoices/"
    ):
        observed.stored_pdfs.update(
            item["Key"].removeprefix("invoices/").removesuffix(".pdf") for item in page.get("Contents", [])
        )
    _drain_dead_letters(engine, observed)
    observed.left_in_queues = {name: sum(queue.values()) for name, queue in engine.queue_counts().items()}
    dynamodb = engine.clients()("dynamodb")
    now_ms = time.time() * 1000
    for page in dynamodb.get_paginator("scan").paginate(TableName=engine.deployment.idempotency_table):
        observed.idempotency_records.update(item.get("status", {}).get("S", "?") for item in page["Items"])
        observed.stale_in_progress += sum(
            1
            for item in page["Items"]
            if item.get("status", {}).get("S") == "INPROGRESS"
            and float(item.get("in_progress_expiration", {}).get("N", "inf")) < now_ms
        )
    return observed


def run_soak(plan: SoakPlan, worker_output: TextIO | None = None, progress: SoakProgress | None = None) -> SoakReport:
    """Run the soak on a fresh local engine and check what happened; `progress` is told how far it got."""
    jobs = plan.build_jobs()
    chaos = replace(plan.chaos, seed=plan.chaos.seed if plan.chaos.seed is not None else plan.seed)
    started = time.monotonic()
    engine = LocalEngine(port=0, catalog=soak_catalog(), chaos=chaos, worker_output=worker_output)
    with engine:
        _seed(engine, jobs)
        drained = _publish_in_waves(engine, jobs, plan, deadline=started + plan.timeout_s, progress=progress)
        # Runs cut at their time limit may still be finishing (a hang ends after hang_s): let them, then stop.
        time.sleep(chaos.hang_s + 0.5)
        mappings = dict(engine.mappings)  # stop_workers() forgets them; their counts are the report's
        engine.stop_workers()
        elapsed_s = time.monotonic() - started
        observed = _observe(engine, drained)
        assert engine.chaos is not None
        injected = engine.chaos.injected()
        stats = {name: mapping.stats.snapshot() for name, mapping in mappings.items()}
    return SoakReport(
        plan=plan,
        chaos=chaos,
        jobs=jobs,
        observed=observed,
        problems=check(jobs, observed),
        elapsed_s=elapsed_s,
        injected=injected,
        engine_stats=stats,
        records_in_parallel={queue.name: queue.records_in_parallel for queue in engine.catalog},
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobctl.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=SoakPlan.jobs, help="jobs to run (default %(default)s)")
    parser.add_argument(
        "--seed", type=int, default=SoakPlan.seed, help="what is broken and what faults (default %(default)s)"
    )
    parser.add_argument("--window", type=int, default=SoakPlan.window, help="messages waiting at most")
    parser.add_argument("--backlog", type=int, default=SoakPlan.backlog, help="messages unsettled at most")
    parser.add_argument("--chaos", type=ChaosSettings.parse, default=DEFAULT_CHAOS, help="as jobctl local --chaos")
    parser.add_argument("--permanent", type=float, default=DEFAULT_PERMANENT, help="share of jobs with broken data")
    parser.add_argument("--log", type=Path, default=Path(".local-engine/soak-worker.log"), help="worker logs")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress on stderr (default: when stderr is a terminal)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    plan = SoakPlan(
        jobs=args.jobs,
        seed=args.seed,
        window=args.window,
        backlog=args.backlog,
        chaos=args.chaos,
        permanent=args.permanent,
    )
    args.log.parent.mkdir(parents=True, exist_ok=True)
    print(f"soak: {plan.jobs} jobs, seed {plan.seed}; worker logs in {args.log}", flush=True)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    with args.log.open("w", encoding="utf-8") as log, _progress(show, plan.jobs) as progress:
        report = run_soak(plan, worker_output=log, progress=progress)
    for line in report.lines():
        print(line)
    return 0 if report.passed else 1


@contextmanager
def _progress(show: bool, total: int) -> Iterator[SoakProgress | None]:
    """jobctl's progress display (stderr; stdout keeps the report), or None."""
    if not show:
        yield None
        return
    from jobctl.cli_output import live_progress

    with live_progress(force=True) as display:
        task = display.add_task("soak: jobs settled", total=total)

        def update(published: int, settled: int) -> None:
            display.update(task, completed=settled, description=f"soak: {published} published, jobs settled")

        yield update


if __name__ == "__main__":
    sys.exit(main())
