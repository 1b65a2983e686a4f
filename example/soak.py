"""`make soak`: thousands of jobs through the local engine with faults injected, then a check of every promise.

Jobs: the example jobs (order confirmations, invoices, and order updates on the FIFO queue, published in groups
of one order's updates) and, beside them, jobs written the way a new team writes them (example/soak_jobs/: a mail
job whose result is a datetime, a plain string, an object with no JSON form, too big to keep, ...), on the standard
and the FIFO queue. Some messages carry big non-ASCII producer attributes (emoji, CJK, a binary value).

Faults (sqs_jobs.local.chaos): transient failures and hangs of every call a job makes (any AWS service through
`context.client`, any HTTP call through `context.http`), the invoicing API's own 503s, late and dripping answers,
crashes after the side effects before the ack, duplicate deliveries, slow cold starts, a slow idempotency store;
and permanent failures from the data (an order or invoice that doesn't exist, or lacks what the job needs).
Afterwards it checks that:

- every job ended once: done, or dead-lettered - never both, never neither;
- every done job's side effect (mail sent, invoice created and stored) happened exactly once;
- every permanent failure is in the DLQ with its evidence and its producer's attributes (read back as jobctl
  reads them), and nothing else is;
- each order's updates were mailed in the order they were published (its FIFO message group's order);
- nothing is left in flight: the source queues are empty, no idempotency record is still IN_PROGRESS before its
  deadline (one past it is a run's start that landed after its call timed out: reported, not in flight);
- the first order confirmations (BATCH_MEMBERS of them, broken ones among them) are published as one batch
  (docs/workflows.md) whose complete callback, a receipt mail job, ran exactly once (its mail is checked as every
  job's) after every member ended; its success callback only if no member was broken.

Time is compressed so that it runs in minutes: 8 s function timeouts, 3 s time limits, 1-2 s backoff, circuit
breakers open 0.5-2 s, the jobs' HTTP calls bounded at 2.5 s (the catalog's other settings are kept, records in
parallel included). moto's SQS slows as its backlog grows, so jobs are published in waves that keep at most
`window` messages waiting and `backlog` messages unsettled (waiting, running, in backoff, or invisible after a
crash).

    python -m example.soak --jobs 10000           # `make soak` runs 10,000; `make test` runs 2,000

Progress (jobs published and settled) goes to stderr when it is a terminal, or with --progress.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import logging
import random
import re
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from example.soak_jobs import durable_receipt, limited, odd_results
from functions.catalog import CATALOG
from functions.catalog import RESOURCES as APP_RESOURCES
from sqs_jobs.cli.dlq import DeadLetter, DeadLetterQueue
from sqs_jobs.cli.errors import OperatorError
from sqs_jobs.cli.job_cancel import CancelTarget, cancel_job, withdraw
from sqs_jobs.durable import Durable
from sqs_jobs.durable.record import DurableRecords, DurableState
from sqs_jobs.envelope import Envelope
from sqs_jobs.flow_control import KeyConcurrency, RateLimit
from sqs_jobs.local.chaos import ChaosSettings
from sqs_jobs.local.engine import WAITING, LocalEngine
from sqs_jobs.publisher import BatchTable, JobPublisher
from sqs_jobs.specs import Catalog, JobSpec
from sqs_jobs.worker.attribute_store import StoredAttributesError
from sqs_jobs.worker.deadletter import ATTEMPTS, ERROR_MESSAGE, ERROR_TYPE, FAILURE
from sqs_jobs.worker.errors import JobCancelledError
from sqs_jobs.worker.execution import CUT_RUN_CALL_ENDED_MESSAGE
from sqs_jobs.worker.key_life import KeyRecord, KeyState
from sqs_jobs.worker.names import HELD, HOLD_SHARE, DeadLetterFailure
from sqs_jobs.worker.provenance import Attributes, Provenance, value_bytes
from sqs_jobs.worker.settings import IDEMPOTENCY_KEY_PREFIX, idempotency_record_id
from sqs_jobs.worker.settlement import COMPLETION_UNWRITTEN_MESSAGE

ORDER_JOB = "order_confirmation"
INVOICE_JOB = "generate_invoice"
INVOICING_ENDPOINT = "invoicing_api_url"
UPDATE_JOB = "order_update_mail"
# A new team's mail job (example/soak_jobs/odd_results.py), on the standard queue and on the FIFO queue.
ODD_RESULT_JOB = "odd_result_receipt"
ODD_RESULT_FIFO_JOB = "odd_result_update_receipt"
# The new team's jobs' own rate limit in the soak (each job its own bucket); the invoicing endpoint keeps the
# catalog's (10/s, burst 20), below the fake API's own limit, which answers 429 past it.
ODD_RESULT_RATE_LIMIT = RateLimit(per_second=2, burst=4)
# A receipt job limited to one run at a time per customer (example/soak_jobs/limited.py): some of its runs are cut at
# their time limit with a call in flight, and the soak checks no two runs of a customer overlapped.
LIMITED_JOB = "limited_receipt"
LIMITED_CONCURRENCY = KeyConcurrency(limit=1, per="customer")
# Consecutive limited entities share a customer, so their runs meet at the key's slot.
LIMITED_PER_CUSTOMER = 3
# A durable receipt job (example/soak_jobs/durable_receipt.py): half its IDs run code outside steps that reads the
# clock, so a replay no longer matches its checkpoints; each such execution must end in exactly one dead letter.
DURABLE_JOB = "durable_receipt"
DRIFTING = "drifting"
# The soak's own jobs, added to the catalog's queues only for the soak: the runtime never names them.
SOAK_JOBS: Mapping[str, tuple[JobSpec, ...]] = {
    "orders": (
        JobSpec(
            name=ODD_RESULT_JOB,
            handler="example.soak_jobs.odd_results",
            description="Soak only: a new team's mail job with odd results.",
            resources=("orders_table", "mail_sender"),
            # Low enough that its bursts are held (flow control under chaos): the soak checks no hold passed its
            # bound and nothing was lost or repeated for it.
            rate_limit=ODD_RESULT_RATE_LIMIT,
        ),
        JobSpec(
            name=LIMITED_JOB,
            handler="example.soak_jobs.limited",
            description="Soak only: a receipt mail job limited to one run at a time per customer.",
            resources=("orders_table", "mail_sender", "invoicing_api_url"),
            concurrency=LIMITED_CONCURRENCY,
        ),
    ),
    "imports": (
        JobSpec(
            name=DURABLE_JOB,
            handler="example.soak_jobs.durable_receipt",
            description="Soak only: a durable receipt mail job, half of whose executions are not deterministic.",
            resources=("orders_table", "mail_sender"),
            durable=Durable(execution_timeout_s=15 * 60, retention_days=1),
        ),
    ),
    "order_updates": (
        JobSpec(
            name=ODD_RESULT_FIFO_JOB,
            handler="example.soak_jobs.odd_results",
            description="Soak only: the same, on the FIFO queue.",
            resources=("orders_table", "mail_sender"),
            rate_limit=ODD_RESULT_RATE_LIMIT,
        ),
    ),
}
# The soak's batch: its first order confirmations, with a receipt mail job as each callback (docs/workflows.md).
BATCH_MEMBERS = 50
BATCH_COMPLETE_ID = "batch-complete"
BATCH_SUCCESS_ID = "batch-success"
# Jobs that read an order (the others: an invoice).
ORDER_JOBS = (ORDER_JOB, UPDATE_JOB, ODD_RESULT_JOB, ODD_RESULT_FIFO_JOB, LIMITED_JOB, DURABLE_JOB)
# The jobs the soak's operator cancels a share of (standard queues, outside the batch), and how it does: a cancel
# 0-1.5 s after the job's publish (queued, running, or done by then), and for half of them an undo 0.5-3 s after the
# cancel, then the job published again (as an operator does once the cause is fixed: the key's next copy runs).
CANCELLED_JOBS = (ORDER_JOB, INVOICE_JOB)
CANCEL_AFTER_S = (0.0, 1.5)
# A share of the limited job's slow runs (about 4 s of calls) is cancelled 1-2 s after its publish: mid-run, so the
# run stops at its next call, dead-lettered as cancelled.
SLOW_CANCEL_SHARE = 0.25
SLOW_CANCEL_AFTER_S = (1.0, 2.0)
UNDO_AFTER_S = (0.5, 3.0)
OPERATOR = "arn:aws:sts::123456789012:assumed-role/operator/soak"
# The mix: 10 % of a job's calls fail transiently (a job makes 2-3 calls, so about a fifth of its runs fail, as the
# issue's 20 %), 1 % crash after the side effect, 5 % duplicate delivery; a few hangs, each cut by the time limit or
# the HTTP call's deadline; a third of new environments start slowly (past what their first batch can serve), 2 %
# of the idempotency table's writes answer late (past the runtime's bounded call, often), 2 % of the invoicing API's
# answers drip (past the HTTP call's deadline); 0.5 % of the runtime's own AWS calls are throttled (its record writes,
# key slots, batch counts, follow-ups, visibility changes, dead letters: before a run and after its success).
DEFAULT_CHAOS = ChaosSettings(
    transient=0.1,
    hang=0.003,
    crash=0.01,
    duplicate=0.05,
    slow_start=0.3,
    slow_store=0.02,
    drip=0.02,
    runtime=0.005,
    hang_s=4.0,
    slow_start_s=4.0,
    slow_store_s=3.0,
    drip_s=4.0,
)
DEFAULT_PERMANENT = 0.02
# What a permanent job's evidence may name: its record is missing, or lacks a field the job needs.
ORDER_ERRORS = frozenset({"OrderNotFoundError", "OrderDataError"})
PERMANENT_ERRORS: Mapping[str, frozenset[str]] = {
    **dict.fromkeys(ORDER_JOBS, ORDER_ERRORS),
    INVOICE_JOB: frozenset({"InvoiceNotFoundError", "InvoiceDataError"}),
    DURABLE_JOB: ORDER_ERRORS | {durable_receipt.DRIFT_ERROR},
}
SOAK_FUNCTION_TIMEOUT_S = 8
# How long the command line gives each job to settle, when that is more than the plan's timeout: a shared 2-core
# machine runs 11-14 jobs a second, so 10,000 jobs need more than 900 s (one run stopped at 900 s with 5 left).
SOAK_S_PER_JOB = 0.15
# Above what a healthy job takes with every record of every queue in flight against one moto process (p99 about
# 1 s), below a hang: a limit under healthy latency cuts runs whose last call then completes (docs/chaos.md).
SOAK_TIME_LIMIT_S = 3
# A third of the time limit: the limited job's slow runs, hangs and drips are listed as running by the waiting
# thread before they end or are cut (the listing meets the faults, cuts and cancels).
SOAK_LIST_RUNNING_AFTER_S = 1.0
# The jobs' HTTP calls on the same clock (deployed: connect 10 s + read 30 s under a 60 s limit): a whole call
# (2.5 s) ends before the time limit, so a dripping answer meets the call's own deadline.
SOAK_HTTP_TIMEOUTS_S = (1.0, 1.5)
SOAK_BACKOFF_BASE_S = 1
SOAK_BACKOFF_CAP_S = 2
# Circuit breakers on the same compressed clock: open for 0.5 s, at most 2 s.
SOAK_BREAKER_OPEN_S = 0.5
SOAK_BREAKER_MAX_OPEN_S = 2.0
_BATCH_WRITE_MAX = 25
# A mail's subject names its job and key: what each job's module writes.
_CONFIRMED = re.compile(r"^Your order (.+) is confirmed$")
_UPDATE = re.compile(r"^Your order (.+): update (.+)$")
_RECEIPT = re.compile(r"^Receipt (\S+) (.+)$")
UNKNOWN_MAIL = "(unknown)"
# Big producer attributes: about 140 KB as SQS counts them (4-byte emoji, 3-byte CJK, raw binary), so the message
# takes half its queue's 256 KiB and its dead letter must carry them packed beside the evidence.
_EMOJI = "😀🎉🚀🌏🍣🧾"
_CJK = "注文更新送信確認領収書"
_EMOJI_CHARACTERS = 12_000
_CJK_CHARACTERS = 10_000
_BINARY_BYTES = 64 * 1024
# Told (published, settled) as the soak goes: settled jobs are done or dead-lettered.
SoakProgress = Callable[[int, int], None]
# A job as its effects and dead letters name it: (job, key), the key being the publisher's or else the ID.
JobRef = tuple[str, str]


def soak_catalog(catalog: Catalog = CATALOG) -> Catalog:
    """The catalog with its clock compressed and the soak's own jobs added; attempts, batch sizes, records in
    parallel and concurrency stay as they are."""
    return Catalog(
        resources=APP_RESOURCES,
        queues=tuple(
            replace(
                queue,
                function_timeout_s=SOAK_FUNCTION_TIMEOUT_S,
                list_running_after_s=SOAK_LIST_RUNNING_AFTER_S,
                # Every delivery a span (docs/tracing.md), through every fault: no promise may change for it.
                tracing=True,
                backoff_base_s=SOAK_BACKOFF_BASE_S,
                backoff_cap_s=SOAK_BACKOFF_CAP_S,
                circuit_breaker=replace(
                    queue.circuit_breaker, open_s=SOAK_BREAKER_OPEN_S, max_open_s=SOAK_BREAKER_MAX_OPEN_S
                ),
                jobs=tuple(
                    replace(
                        job,
                        time_limit_s=SOAK_TIME_LIMIT_S,
                        # The batch's members publish its callbacks.
                        publishes=(ODD_RESULT_JOB,) if job.name == ORDER_JOB else job.publishes,
                        # A durable job's run is one attempt of a step (QueueSpec.time_limit_s).
                        durable=replace(job.durable, step_time_limit_s=SOAK_TIME_LIMIT_S) if job.durable else None,
                    )
                    for job in (*queue.jobs, *SOAK_JOBS.get(queue.name, ()))
                ),
            )
            for queue in catalog
        ),
    )


def big_attributes(seed: str) -> Attributes:
    """A producer's big non-ASCII attributes, different for each `seed` (a job's name)."""
    rng = random.Random(seed)
    return {
        "note": {"DataType": "String", "StringValue": seed + "".join(rng.choices(_EMOJI, k=_EMOJI_CHARACTERS))},
        "title": {"DataType": "String", "StringValue": "".join(rng.choices(_CJK, k=_CJK_CHARACTERS)) + seed},
        "thumbnail": {"DataType": "Binary", "BinaryValue": rng.randbytes(_BINARY_BYTES)},
        "locale": {"DataType": "String.locale", "StringValue": "ja-JP"},
    }


def attributes_fingerprint(attributes: Attributes) -> str:
    """The attributes' names, data types and value bytes, hashed: equal exactly when they are byte for byte."""
    digest = hashlib.sha256()
    for name in sorted(attributes):
        for part in (name, str(attributes[name].get("DataType", ""))):
            digest.update(len(part.encode()).to_bytes(4, "big") + part.encode())
        value = value_bytes(attributes[name])
        digest.update(len(value).to_bytes(4, "big") + value)
    return digest.hexdigest()


def mail_ref(subject: str) -> JobRef:
    """The job a mail was sent for, from its subject (UNKNOWN_MAIL and the subject when no job writes it)."""
    if match := _CONFIRMED.match(subject):
        return ORDER_JOB, match.group(1)
    if match := _UPDATE.match(subject):
        return UPDATE_JOB, match.group(2)
    if match := _RECEIPT.match(subject):
        return match.group(1), match.group(2)
    return UNKNOWN_MAIL, subject


@dataclass(frozen=True)
class SoakJob:
    job: str
    id: str
    # None: the job can succeed; else how its data is broken ("missing" record or "bad" record).
    broken: str | None = None
    # The publisher's key: an order update's name (`<order>-u<n>`); None for the others.
    key: str | None = None
    # Published with big non-ASCII producer attributes (big_attributes(name)).
    big_attributes: bool = False
    # The envelope's `customer` field: a limited job's key for its KeyConcurrency.
    customer: str | None = None
    # What the soak's operator does to its key while it is queued or running: "cancel", or "undo" (cancel, then
    # withdraw the cancel and publish the job again); None: nothing.
    cancel: str | None = None

    @property
    def permanent(self) -> bool:
        return self.broken is not None

    @property
    def ref(self) -> JobRef:
        return self.job, self.key or self.id

    @property
    def name(self) -> str:
        """Its idempotency key: `<job>:<key or id>`."""
        return f"{self.job}:{self.key or self.id}"


@dataclass(frozen=True)
class SoakPlan:
    jobs: int = 2000
    # Shares of the entities: invoices, orders with updates (FIFO, 1..max_updates each), a new team's jobs (odd
    # results; half on each queue); the rest are order confirmations.
    invoice_share: float = 0.25
    update_share: float = 0.15
    max_updates: int = 4
    odd_result_share: float = 0.05
    permanent: float = DEFAULT_PERMANENT
    # Messages published with big non-ASCII attributes: a share of the jobs that can succeed, and of those that
    # can't (so that enough dead letters show the attributes kept).
    big_attributes: float = 0.01
    big_attributes_broken: float = 0.5
    # Entities whose job is the limited receipt (LIMITED_JOB; taken from the order confirmations' share).
    limited_share: float = 0.02
    # Entities whose job is the durable receipt (DURABLE_JOB; half of them drifting).
    durable_share: float = 0.01
    # Order confirmations and invoices the operator cancels mid-flight, and the share of those it undoes.
    cancel_share: float = 0.03
    undo_share: float = 0.5
    chaos: ChaosSettings = DEFAULT_CHAOS
    # Messages waiting for a poller at most, and unsettled at most: moto's receive cost grows with its backlog.
    window: int = 60
    backlog: int = 300
    seed: int = 7
    timeout_s: float = 900.0

    def __post_init__(self) -> None:
        if self.jobs < 1 or self.window < 1 or self.backlog < self.window or self.timeout_s <= 0:
            raise ValueError("jobs, window and timeout_s must be positive, and backlog at least window")
        shares = (self.invoice_share, self.update_share, self.odd_result_share, self.limited_share, self.durable_share)
        rates = [*shares, self.permanent, self.big_attributes, self.big_attributes_broken]
        rates += [self.cancel_share, self.undo_share]
        if not all(0 <= rate <= 1 for rate in rates) or sum(shares) > 1:
            raise ValueError(
                "invoice_share, update_share, odd_result_share, limited_share, durable_share, permanent, the "
                "big_attributes, cancel and undo shares must be between 0 and 1, and the job shares at most 1 together"
            )
        if self.max_updates < 1:
            raise ValueError(f"max_updates {self.max_updates} must be at least 1")

    def build_jobs(self) -> list[SoakJob]:
        """The same jobs for the same seed: what each entity is, which are broken and how, and in what order they
        are published (an order's updates one after another, in their order)."""
        rng = random.Random(self.seed)
        jobs: list[SoakJob] = []
        number = 0
        limited_jobs = 0
        shares = (self.invoice_share, self.update_share, self.odd_result_share, self.limited_share, self.durable_share)
        while len(jobs) < self.jobs:
            number += 1
            entity = f"{number:07d}"
            roll = rng.random()
            broken = rng.choice(("missing", "bad")) if rng.random() < self.permanent else None
            share = self.big_attributes_broken if broken else self.big_attributes
            if roll < self.invoice_share:
                jobs.append(SoakJob(INVOICE_JOB, entity, broken, big_attributes=rng.random() < share))
            elif roll < self.invoice_share + self.update_share:
                for update in range(1, rng.randint(1, self.max_updates) + 1):
                    big = rng.random() < share
                    jobs.append(SoakJob(UPDATE_JOB, entity, broken, key=f"{entity}-u{update}", big_attributes=big))
            elif roll < self.invoice_share + self.update_share + self.odd_result_share:
                job = rng.choice((ODD_RESULT_JOB, ODD_RESULT_FIFO_JOB))
                jobs.append(SoakJob(job, entity, broken, big_attributes=rng.random() < share))
            elif roll < sum(shares[:4]):
                customer = f"customer-{limited_jobs // LIMITED_PER_CUSTOMER}"
                limited_jobs += 1
                big = rng.random() < share
                jobs.append(SoakJob(LIMITED_JOB, entity, broken, big_attributes=big, customer=customer))
            elif roll < sum(shares):
                drifting = broken or (DRIFTING if durable_receipt.drifting(entity) else None)
                jobs.append(SoakJob(DURABLE_JOB, entity, drifting, big_attributes=rng.random() < share))
            else:
                jobs.append(SoakJob(ORDER_JOB, entity, broken, big_attributes=rng.random() < share))
        return self._with_cancels(jobs[: self.jobs])

    def _with_cancels(self, jobs: list[SoakJob]) -> list[SoakJob]:
        """The jobs the operator cancels (and undoes), drawn apart from the rest so the plan is otherwise the same;
        never the batch's members (their batch counts each as it ends, checked on its own)."""
        rng = random.Random(f"cancels-{self.seed}")
        members = set(_batch_members(jobs))
        drawn = []
        for planned in jobs:
            job = planned
            if planned.job in CANCELLED_JOBS and planned not in members and rng.random() < self.cancel_share:
                job = replace(planned, cancel="undo" if rng.random() < self.undo_share else "cancel")
            elif _slow_limited(planned) and rng.random() < SLOW_CANCEL_SHARE * bool(self.cancel_share):
                job = replace(planned, cancel="cancel")
            drawn.append(job)
        return drawn


def _slow_limited(job: SoakJob) -> bool:
    """A limited job whose first run makes the slow calls (about 4 s: cut at its limit with one in flight)."""
    return job.job == LIMITED_JOB and limited.slow(job.id)


def planned_faults(jobs: Sequence[SoakJob]) -> dict[str, int]:
    """What the plan itself puts in: big attributes, the odd results by kind, the FIFO updates and their groups."""
    counts: Counter[str] = Counter()
    for job in jobs:
        counts["big_attributes"] += job.big_attributes
        if job.job in (ODD_RESULT_JOB, ODD_RESULT_FIFO_JOB):
            counts[f"result.{odd_results.result_kind(job.id)}"] += 1
        if job.job == UPDATE_JOB:
            counts["fifo.updates"] += 1
        if job.job == LIMITED_JOB:
            counts["limited"] += 1
            counts["limited.slow"] += limited.slow(job.id)
        if job.cancel is not None:
            counts[job.cancel] += 1
        if job.job == DURABLE_JOB:
            counts["durable"] += 1
            counts["durable.drifting"] += job.broken == DRIFTING
            counts["durable.awaiting"] += _awaits(job)
    counts["fifo.groups"] = len({job.id for job in jobs if job.job == UPDATE_JOB})
    return {name: count for name, count in counts.items() if count}


@dataclass
class Observed:
    """What the soak found after the queues drained: the side effects, the DLQ, what is left."""

    mails: Counter[JobRef] = field(default_factory=Counter)  # by the job each mail's subject names
    # Per order, its updates in the order SES accepted their mails (moto keeps sent mail in send order).
    update_mails: dict[str, list[str]] = field(default_factory=dict)
    invoices_created: Counter[str] = field(default_factory=Counter)  # by invoice ID (one per Idempotency-Key)
    stored_pdfs: set[str] = field(default_factory=set)  # invoice IDs with a PDF in the bucket
    # JobRef -> the evidence of each DLQ copy (the runtime's own attributes: none on a message it didn't send)
    dead_letters: dict[JobRef, list[dict[str, str]]] = field(default_factory=dict)
    # JobRef -> the producer's attributes of each DLQ copy, restored as jobctl restores them (attributes_fingerprint)
    dead_letter_attributes: dict[JobRef, list[str]] = field(default_factory=dict)
    # DLQ messages whose producer's attributes could not be read back (their store), each said why
    unreadable_attributes: list[str] = field(default_factory=list)
    unparseable_dead_letters: list[str] = field(default_factory=list)
    left_in_queues: dict[str, int] = field(default_factory=dict)  # queue -> messages not settled
    idempotency_records: Counter[str] = field(default_factory=Counter)  # by status
    # In progress past their deadline: a run's start written after its call had timed out (the write landed late,
    # and its message was handed back and settled since). Not in flight: the next delivery of the key takes it over.
    stale_in_progress: int = 0
    # JobRef -> side-effect calls of runs cut at their time limit that were in flight at the cut and answered
    # success after it, as the runtime reported each (CutRunWitness): a timeout can't take those back.
    cut_in_flight: Counter[JobRef] = field(default_factory=Counter)
    drained: bool = True
    # Flow control: records held by each limit (JobHeld), the largest share of a hold's bound reached (HoldShare),
    # the invoicing API's calls in its busiest second, and those it refused for its own rate limit.
    held: Counter[str] = field(default_factory=Counter)
    most_hold_share: float = 0.0
    api_calls_in_busiest_second: int = 0
    api_refused_over_rate: int = 0
    # Each job key's record at the end (KeyRecord), by its record's ID (idempotency_record_id of `<job>:<key>`).
    records: dict[str, KeyRecord] = field(default_factory=dict)
    # JobRef -> runs whose completion write failed twice, as the runtime reported each: such a key may run again.
    completions_unwritten: Counter[JobRef] = field(default_factory=Counter)
    # The operator's cancels and undos: JobRef -> what each answered (CancelOutcome values), and the runs the key had
    # finished when its cancel was withdrawn (None when its life had ended: the DLQ had it, or it had completed).
    cancel_outcomes: dict[JobRef, list[str]] = field(default_factory=dict)
    runs_at_undo: dict[JobRef, int | None] = field(default_factory=dict)
    operator_trace: dict[JobRef, list[str]] = field(default_factory=dict)
    # The limited job's runs: when each started and left its code, by customer (limited.Run).
    limited_runs: list[limited.Run] = field(default_factory=list)
    # Calls in flight at a run's cut that ended after it, by job (CutRunWitness).
    cut_calls: Counter[str] = field(default_factory=Counter)
    # The durable jobs' records at the end, by idempotency key; and whether every execution had ended.
    durable_records: dict[str, DurableState] = field(default_factory=dict)
    durable_ended: bool = True
    # How many durable receipts' confirmations the soak's sender saw taken (each awaiting one's exactly once).
    confirmations: int = 0


def check(jobs: Sequence[SoakJob], observed: Observed) -> list[str]:
    """Every broken promise, one line each; empty when all held."""
    problems: list[str] = []
    if not observed.drained:
        problems.append("the queues did not drain before the timeout")
    if not observed.durable_ended:
        problems.append("the durable executions did not all end before the timeout")
    awaiting = sum(1 for job in jobs if job.job == DURABLE_JOB and _awaits(job))
    if observed.confirmations != awaiting:
        problems.append(f"{observed.confirmations} confirmations taken of {awaiting} durable receipts awaiting one")
    for job in jobs:
        problems += _job_problems(job, observed)
    problems += _order_problems(jobs, observed)
    known = {job.ref for job in jobs}
    problems += [
        f"unexpected job in the DLQ: {job}:{key}" for job, key in observed.dead_letters if (job, key) not in known
    ]
    problems += [f"a DLQ message is not a job: {body[:200]!r}" for body in observed.unparseable_dead_letters]
    problems += [f"a dead letter's attributes could not be read back: {why}" for why in observed.unreadable_attributes]
    problems += [f"mail nobody asked for: {job}:{key}" for job, key in observed.mails if (job, key) not in known]
    ids = {job.id for job in jobs if job.job == INVOICE_JOB}
    ids |= {limited.quote_id(job.id) for job in jobs if job.job == LIMITED_JOB}  # its slow calls' quotes
    problems += [f"invoice for unknown ID {invoice!r}" for invoice in observed.invoices_created if invoice not in ids]
    problems += [
        f"{count} message(s) left in queue {queue}" for queue, count in observed.left_in_queues.items() if count
    ]
    in_progress = observed.idempotency_records.get("INPROGRESS", 0) - observed.stale_in_progress
    if in_progress:
        problems.append(f"{in_progress} idempotency record(s) still IN_PROGRESS before their deadline")
    # A key cancelled (not undone) ends cancelled or, if its run came first, completed; a run whose completion was
    # never written (reported) may leave no completed record.
    completed = observed.idempotency_records.get("COMPLETED", 0)
    succeeded = sum(
        not job.permanent
        and job.job != DURABLE_JOB  # its record is the durable job's own (checked per job)
        and (job.cancel != "cancel" or _state(job, observed) is KeyState.COMPLETED)
        for job in jobs
    )
    unwritten = sum(observed.completions_unwritten.values())
    if not succeeded - unwritten <= completed <= succeeded:
        problems.append(f"{completed} completed idempotency records for {succeeded} jobs that can succeed")
    # A key that is done is out of the in-flight index: a run's late listing never brings it back.
    problems += [
        f"{record.job_key} is completed but still listed in flight ({record.life})"
        for record in observed.records.values()
        if record.life is not None and record.state(time.time()) is KeyState.COMPLETED
    ]
    problems += _flow_problems(observed)
    problems += _limited_problems(observed.limited_runs)
    return problems


def _state(job: SoakJob, observed: Observed) -> KeyState:
    record = observed.records.get(idempotency_record_id(job.name))
    return record.state(time.time()) if record is not None else KeyState.NEW


def _limited_problems(runs: Sequence[limited.Run]) -> list[str]:
    """No two runs of one customer's limited job overlapped: each started after the one before it had left its
    code (a cut run's included, once its call in flight ended), as its limit of one allows."""
    by_customer: dict[str, list[limited.Run]] = defaultdict(list)
    for run in runs:
        by_customer[run.customer].append(run)
    problems = []
    for customer, held in sorted(by_customer.items()):
        held.sort(key=lambda run: run.started)
        for before, after in itertools.pairwise(held):
            if after.started < before.ended:
                problems.append(
                    f"two runs of {LIMITED_JOB} for {customer} overlapped ({LIMITED_CONCURRENCY.limit} allowed): "
                    f"{before.key} run {before.attempt} until {before.ended:.3f}, {after.key} run {after.attempt} from "
                    f"{after.started:.3f}"
                )
    return problems


def _flow_problems(observed: Observed) -> list[str]:
    """The limits held: the API never saw more than the endpoint's limit allows in any second, refused nothing for
    its own limit, and no record was held past its bound (a refusal past it is a failed attempt: seen as a share
    of 1 or more)."""
    problems: list[str] = []
    limit = CATALOG.resource(INVOICING_ENDPOINT).rate_limit  # type: ignore[attr-defined]
    allowed = limit.per_second + limit.burst
    if observed.api_calls_in_busiest_second > allowed:
        problems.append(
            f"the invoicing API got {observed.api_calls_in_busiest_second} calls in one second; its limit allows "
            f"{allowed:g} (per_second + burst)"
        )
    if observed.api_refused_over_rate:
        problems.append(f"the invoicing API refused {observed.api_refused_over_rate} call(s) past its own rate limit")
    if observed.most_hold_share >= 1.0:
        problems.append(f"a record was held {observed.most_hold_share:.0%} of its bound (max_hold_s)")
    return problems


def _job_problems(job: SoakJob, observed: Observed) -> list[str]:
    name = job.name
    effects = observed.invoices_created[job.id] if job.job == INVOICE_JOB else observed.mails[job.ref]
    copies = observed.dead_letters.get(job.ref, [])
    problems: list[str] = []
    if job.cancel is not None:
        problems += _cancel_problems(job, observed)
        # A run stopped by the cancel is dead-lettered as cancelled: its evidence says so, and that is its end.
        cancelled = [evidence for evidence in copies if evidence.get(ERROR_TYPE) == JobCancelledError.__name__]
        if any(evidence.get(FAILURE) != DeadLetterFailure.CANCELLED for evidence in cancelled):
            problems.append(f"{name} is in the DLQ as cancelled without its evidence: {cancelled}")
        copies = [evidence for evidence in copies if evidence not in cancelled]
        if job.cancel == "cancel" and _state(job, observed) is not KeyState.COMPLETED:
            # Settled as cancelled: acknowledged unrun or stopped, never lost, and no side effect but what a cut or
            # an unwritten completion explains.
            if _state(job, observed) is not KeyState.CANCELLED and not (job.permanent and copies):
                problems.append(f"{name} was cancelled and ended {_state(job, observed)}, not cancelled")
            allowed = observed.cut_in_flight[job.ref] if job.job != INVOICE_JOB else 1
            if effects > allowed:
                problems.append(f"{name} was cancelled and had {effects} side effect(s)")
            return problems + [
                f"{name} is in the DLQ without its evidence: {evidence}"
                for evidence in copies
                if not job.permanent or evidence.get(ERROR_TYPE) not in PERMANENT_ERRORS[job.job]
            ]
    if job.big_attributes and copies:
        expected = attributes_fingerprint(big_attributes(job.name))
        kept = observed.dead_letter_attributes.get(job.ref, [])
        if len(kept) != len(copies) or any(fingerprint != expected for fingerprint in kept):
            problems.append(f"{name} is in the DLQ without its producer's attributes")
    if job.job == DURABLE_JOB:
        problems += _durable_problems(job, observed, len(copies))
    if job.permanent:
        if not copies:
            problems.append(f"{name} ({job.broken} data) is not in the DLQ")
        if effects:
            problems.append(f"{name} ({job.broken} data) had {effects} side effect(s)")
        for evidence in copies:
            if (
                evidence.get(ERROR_TYPE) not in PERMANENT_ERRORS[job.job]
                or evidence.get(FAILURE) != DeadLetterFailure.PERMANENT
            ):
                problems.append(f"{name} is in the DLQ without its evidence: {evidence}")
        return problems
    if copies:
        said = copies[0]
        problems.append(
            f"{name} can succeed but was dead-lettered ({said.get(FAILURE)} after {said.get(ATTEMPTS)} attempts): "
            f"{said.get(ERROR_MESSAGE)!r}"
        )
    # A repeat is explained only by a side-effect call the runtime reported answered after its run's cut, or by a
    # run whose completion it reported unwritten.
    reported = observed.cut_in_flight[job.ref] if job.job != INVOICE_JOB else 0
    reported += observed.completions_unwritten[job.ref]
    if effects < 1 or effects > 1 + reported:
        because = f" ({reported} sent by runs cut with the call in flight)" if reported else ""
        problems.append(f"{name} had {effects} side effects, not exactly 1{because}")
    if job.job == INVOICE_JOB and job.id not in observed.stored_pdfs:
        problems.append(f"{name} has no PDF in the bucket")
    return problems


def _durable_problems(job: SoakJob, observed: Observed, dead_letters: int) -> list[str]:
    """A durable execution ends with a final record: SUCCEEDED, or FAILED and moved to its next generation with
    exactly one dead letter per failed execution (a replay that no longer matches its checkpoints is ended by the
    runtime's own steps). A copy of the message delivered after an execution failed starts the key's next
    generation, as a redrive does: the record's generation counts the executions that failed."""
    record = observed.durable_records.get(job.name)
    status, generation = (record.status, record.generation) if record is not None else (None, 0)
    problems = []
    if job.permanent and (status != "FAILED" or generation < 1):
        problems.append(f"{job.name}'s durable record ended {status} at generation {generation}, not FAILED")
    if not job.permanent and (status, generation) != ("SUCCEEDED", 0):
        problems.append(f"{job.name}'s durable record ended {status} at generation {generation}, not SUCCEEDED")
    if job.permanent and dead_letters != generation:
        problems.append(
            f"{job.name} ({job.broken}) has {dead_letters} dead letters for {generation} failed execution(s), not "
            "exactly one each"
        )
    return problems


def _cancel_problems(job: SoakJob, observed: Observed) -> list[str]:
    """The operator's cancel (and undo) was answered, and an undo kept the key's runs: a key withdrawn with runs and
    no dead letter, not yet completed, completes at a run after those (an undo never gives a key its runs back)."""
    outcomes = observed.cancel_outcomes.get(job.ref, [])
    expected = 2 if job.cancel == "undo" else 1
    problems = []
    if len(outcomes) != expected:
        problems.append(f"{job.name}: the operator's {job.cancel} got {outcomes} (expected {expected} answers)")
    trace = "; ".join(observed.operator_trace.get(job.ref, [])) or outcomes
    if job.cancel == "undo" and _state(job, observed) is KeyState.CANCELLED:
        problems.append(f"{job.name} was undone (the operator was answered {outcomes}) and ended cancelled: {trace}")
    runs_then = observed.runs_at_undo.get(job.ref)
    record = observed.records.get(idempotency_record_id(job.name))
    # A completion keeps the run that completed (`runs` back to 0: docs/key-life.md).
    completed_run = record.completed_run or 0 if record is not None else 0
    if runs_then is not None and not job.permanent and completed_run <= runs_then:
        problems.append(
            f"{job.name} had {runs_then} runs when its cancel was withdrawn, and completed at run {completed_run}: "
            f"{trace}"
        )
    return problems


def _order_problems(jobs: Sequence[SoakJob], observed: Observed) -> list[str]:
    """Each order's updates must have been mailed in the order they were published: their message group's."""
    published: dict[str, list[str]] = defaultdict(list)
    for job in jobs:
        if job.job == UPDATE_JOB and job.key is not None and not job.permanent:
            published[job.id].append(job.key)
    problems = []
    for order, updates in published.items():
        mailed = list(dict.fromkeys(update for update in observed.update_mails.get(order, []) if update in updates))
        in_publish_order = [update for update in updates if update in mailed]
        if mailed != in_publish_order:
            problems.append(f"order {order}'s updates were mailed out of order: {mailed} (published {updates})")
    return problems


@dataclass
class SoakReport:
    plan: SoakPlan
    chaos: ChaosSettings  # as run: the plan's, with the plan's seed when it had none
    jobs: list[SoakJob]
    observed: Observed
    problems: list[str]
    elapsed_s: float
    # Faults by kind: chaos's, and the plan's own (planned_faults).
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

    @property
    def repeated_by_cuts(self) -> int:
        """Mails beyond one per job that a send in flight at its run's cut explains (check() names any other)."""
        return sum(
            min(max(0, self.observed.mails[job.ref] - 1), self.observed.cut_in_flight[job.ref])
            for job in self.jobs
            if job.job != INVOICE_JOB and not job.permanent
        )

    @property
    def dead_letters_with_big_attributes(self) -> int:
        """Dead-lettered jobs published with big attributes: each is checked to have kept them."""
        return sum(1 for job in self.jobs if job.big_attributes and job.ref in self.observed.dead_letters)

    def _intersection_lines(self) -> Iterator[str]:
        """The runtime's faults after a success, the operator's cancels and undos, the limited job's cut runs."""
        observed = self.observed
        runtime = sum(count for name, count in self.injected.items() if name.startswith("runtime."))
        unwritten = sum(observed.completions_unwritten.values())
        yield (
            f"  runtime's own calls throttled: {runtime}"
            + (f" ({unwritten} completion(s) unwritten after both tries, reported)" if unwritten else "")
        )
        said: Counter[str] = Counter()
        for outcomes in observed.cancel_outcomes.values():
            for step, outcome in zip(("cancel", "undo"), outcomes, strict=False):
                said[f"{step} {outcome}"] += 1
        ended: Counter[str] = Counter(str(_state(job, observed)) for job in self.jobs if job.cancel == "cancel")
        yield (
            f"  operator: {', '.join(f'{name} {count}' for name, count in sorted(said.items())) or 'nothing'}; "
            f"cancelled keys ended {', '.join(f'{name} {count}' for name, count in sorted(ended.items())) or '-'}"
        )
        durable = Counter(str(record.status) for record in observed.durable_records.values())
        drifting = sum(job.broken == DRIFTING for job in self.jobs)
        yield (
            f"  {DURABLE_JOB}: {len(observed.durable_records)} executions' records "
            f"{', '.join(f'{name} {count}' for name, count in sorted(durable.items())) or '-'} "
            f"({drifting} not deterministic, each ended in one dead letter)"
        )
        customers = {run.customer for run in observed.limited_runs}
        yield (
            f"  {LIMITED_JOB}: {len(observed.limited_runs)} runs of {len(customers)} customers (limit "
            f"{LIMITED_CONCURRENCY.limit} each), {observed.cut_calls[LIMITED_JOB]} cut with a call in flight"
        )

    def lines(self) -> Iterator[str]:
        mails, invoices = sum(self.observed.mails.values()), sum(self.observed.invoices_created.values())
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
        yield (
            f"  side effects: {mails + invoices} ({mails} mails, {invoices} invoices) for "
            f"{len(self.jobs) - expected_dead} jobs"
        )
        repeated = self.repeated_by_cuts
        if repeated:
            yield (
                f"  of which {repeated} mail(s) sent again after a run was cut at its time limit with the send in "
                "flight (answered after the cut, each reported by the runtime: the limit of any timeout)"
            )
        groups = {job.id for job in self.jobs if job.job == UPDATE_JOB and not job.permanent}
        yield f"  FIFO: the updates of {len(groups)} orders mailed, each order's in its published order"
        yield (
            f"  dead-lettered: {self.dead_lettered} jobs of {expected_dead} broken "
            f"({self.extra_dead_letter_copies} extra copies from duplicate deliveries; "
            f"{self.dead_letters_with_big_attributes} with big attributes, kept)"
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
        yield from self._intersection_lines()
        held = ", ".join(f"{name} {count}" for name, count in sorted(self.observed.held.items())) or "none"
        yield (
            f"  flow control: records held {held}; at most {self.observed.most_hold_share:.0%} of a hold's bound; "
            f"the invoicing API's busiest second {self.observed.api_calls_in_busiest_second} calls, "
            f"{self.observed.api_refused_over_rate} refused past its own limit"
        )
        if self.passed:
            yield "  PASSED: every job ended once, every side effect happened once, in order, nothing is in flight"
        else:
            yield f"  FAILED: {len(self.problems)} problem(s)"
            yield from (f"    - {problem}" for problem in self.problems[:50])


def _seed(engine: LocalEngine, jobs: Sequence[SoakJob]) -> None:
    """Each entity's record once (an order's updates share it), as broken as its jobs are."""
    assert engine.deployment is not None
    orders, invoices = engine.deployment.resources["orders_table"], engine.deployment.resources["invoices_table"]
    items: dict[str, dict[str, dict[str, Any]]] = {orders: {}, invoices: {}}
    for job in jobs:
        if job.broken == "missing":
            continue
        if job.job in ORDER_JOBS:
            item = {"order_id": {"S": job.id}, "customer_name": {"S": f"Customer {job.id}"}, "total": {"N": "10.5"}}
            item["status"] = {"S": "shipped"}
            if job.broken in (None, DRIFTING):
                item["email"] = {"S": f"order-{job.id}@example.com"}
            items[orders][job.id] = item
        else:
            item = {"invoice_id": {"S": job.id}, "customer": {"S": f"Customer {job.id}"}, "currency": {"S": "EUR"}}
            if job.broken is None:
                item["amount"] = {"N": "99.90"}
            items[invoices][job.id] = item
    dynamodb = engine.clients()("dynamodb")
    for table, by_id in items.items():
        puts = [{"PutRequest": {"Item": item}} for item in by_id.values()]
        for start in range(0, len(puts), _BATCH_WRITE_MAX):
            pending: Mapping[str, Any] = {table: puts[start : start + _BATCH_WRITE_MAX]}
            while pending:
                pending = dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}


def _unsettled(counts: Mapping[str, Mapping[str, int]]) -> int:
    return sum(sum(queue.values()) for queue in counts.values())


class _Publisher:
    """Publishes the soak's jobs in their order: through JobPublisher, and those with big attributes one by one
    (JobPublisher sends no attributes), in the message group JobPublisher would choose (the ID)."""

    def __init__(self, engine: LocalEngine) -> None:
        assert engine.deployment is not None
        self._sqs = engine.clients()("sqs")
        self._catalog = engine.catalog
        self._urls = {name: queue.url for name, queue in engine.deployment.queues.items()}
        self._jobs = JobPublisher(self._sqs, self._urls, catalog=engine.catalog)

    def publish(self, wave: Sequence[SoakJob]) -> None:
        plain: list[Envelope] = []
        for job in wave:
            extra = {"customer": job.customer} if job.customer is not None else None
            envelope = self._jobs.envelope(job.job, job.id, key=job.key, extra=extra)
            if not job.big_attributes:
                plain.append(envelope)
                continue
            if plain:
                self._jobs.publish_many(plain)
                plain = []
            queue = self._catalog.queue_for_job(job.job)
            request: dict[str, Any] = {
                "QueueUrl": self._urls[queue.name],
                "MessageBody": envelope.to_json(),
                "MessageAttributes": big_attributes(job.name),
            }
            if queue.fifo:
                request["MessageGroupId"] = envelope.id
            self._sqs.send_message(**request)
        if plain:
            self._jobs.publish_many(plain)


def _batch_members(jobs: Sequence[SoakJob]) -> list[SoakJob]:
    """The jobs published as the soak's batch: its first order confirmations without big attributes."""
    plain = [job for job in jobs if job.job == ORDER_JOB and not job.big_attributes]
    return plain[:BATCH_MEMBERS]


def _publish_batch(engine: LocalEngine, members: Sequence[SoakJob]) -> str:
    assert engine.deployment is not None
    publisher = JobPublisher(
        engine.clients()("sqs"),
        {name: queue.url for name, queue in engine.deployment.queues.items()},
        catalog=engine.catalog,
        batches=BatchTable(engine.clients()("dynamodb"), engine.deployment.idempotency_table),
    )
    return publisher.batch(
        [(member.job, member.id) for member in members],
        on_success=(ODD_RESULT_JOB, BATCH_SUCCESS_ID),
        on_complete=(ODD_RESULT_JOB, BATCH_COMPLETE_ID),
        description="the chaos soak's batch",
    )


def _batch_problems(engine: LocalEngine, batch_id: str, members: Sequence[SoakJob]) -> list[str]:
    """The batch counted every member as it ended (the broken ones dead), and marked its callbacks published: the
    complete one, and the success one exactly when no member was broken. (That each ran once is its mail's check.)"""
    from sqs_jobs.cli.batch_lookup import look_up_batch

    assert engine.deployment is not None
    view = look_up_batch(engine.clients()("dynamodb"), engine.deployment.idempotency_table, batch_id)
    broken = sum(member.permanent for member in members)
    problems = []
    if (view.count("succeeded"), view.count("dead"), view.count("open")) != (len(members) - broken, broken, 0):
        problems.append(
            f"the batch counted {view.count('succeeded')} succeeded, {view.count('dead')} dead, {view.count('open')} "
            f"open of {len(members)} members ({broken} broken)"
        )
    published = {callback.kind: callback.published_at is not None for callback in view.callbacks}
    if published != {"on_complete": True, "on_success": broken == 0}:
        problems.append(f"the batch's callbacks published: {published} ({broken} broken members)")
    return problems


class _Operator:
    """The soak's operator: cancels a job's key a moment after its publish (`jobctl job cancel`), and for an undo,
    withdraws the cancel a moment later (`--undo`) and publishes the job again. Each answer is kept by job."""

    def __init__(self, engine: LocalEngine, publisher: _Publisher, seed: int) -> None:
        assert engine.deployment is not None
        self._engine = engine
        self._dynamodb = engine.clients()("dynamodb")
        self._table = engine.deployment.idempotency_table
        self._publisher = publisher
        self._rng = random.Random(f"operator-{seed}")
        self._due: list[tuple[float, int, str, SoakJob]] = []
        self._order = 0
        self.outcomes: dict[JobRef, list[str]] = {}
        self.runs_at_undo: dict[JobRef, int | None] = {}
        # What the operator did to each key, when, what the key's record said just before, and the answer.
        self.trace: dict[JobRef, list[str]] = {}

    @property
    def idle(self) -> bool:
        return not self._due

    def published(self, wave: Sequence[SoakJob]) -> None:
        for job in wave:
            if job.cancel is not None and job.ref not in self.outcomes:
                after = SLOW_CANCEL_AFTER_S if _slow_limited(job) else CANCEL_AFTER_S
                self._later(self._rng.uniform(*after), "cancel", job)

    def act(self) -> None:
        """Whatever is due now."""
        self._due.sort()
        while self._due and self._due[0][0] <= time.monotonic():
            _, _, action, job = self._due.pop(0)
            try:
                if action == "cancel":
                    self._cancel(job)
                else:
                    self._undo(job)
            except OperatorError:  # the key kept changing state: nothing written; again in a moment
                self._later(0.2, action, job)

    def _later(self, delay_s: float, action: str, job: SoakJob) -> None:
        self._order += 1
        self._due.append((time.monotonic() + delay_s, self._order, action, job))

    def _target(self, job: SoakJob) -> CancelTarget:
        queue = self._engine.catalog.queue_for_job(job.job)
        return CancelTarget(queue.name, job.job, job.id, job.name, queue.idempotency_expiry_s)

    def _read(self, target: CancelTarget) -> KeyRecord:
        item = self._dynamodb.get_item(TableName=self._table, Key={"id": {"S": target.record_id}}, ConsistentRead=True)
        return KeyRecord.from_item(target.record_id, item.get("Item"))

    def _note(self, job: SoakJob, action: str, before: KeyRecord, answer: str) -> None:
        self.outcomes.setdefault(job.ref, []).append(answer)
        self.trace.setdefault(job.ref, []).append(
            f"{time.time():.3f} {action}: {before.state(time.time())}, {before.runs} runs -> {answer}"
        )

    def _cancel(self, job: SoakJob) -> None:
        target = self._target(job)
        before = self._read(target)
        result = cancel_job(self._dynamodb, self._table, target, OPERATOR)
        self._note(job, "cancel", before, result.outcome.value)
        if job.cancel == "undo":
            self._later(self._rng.uniform(*UNDO_AFTER_S), "undo", job)

    def _undo(self, job: SoakJob) -> None:
        target = self._target(job)
        before = self._read(target)
        result = withdraw(self._dynamodb, self._table, target)
        self._note(job, "undo", before, result.outcome.value)
        # The runs the key's completion must come after: those it had (but a run still in flight, which may be the
        # one to complete it); none when its life ended (the DLQ has it) or it completed.
        state = before.state(time.time())
        ended = before.dead_lettered_at is not None or state is KeyState.COMPLETED
        in_flight = state in (KeyState.RUNNING, KeyState.CANCEL_REQUESTED)
        self.runs_at_undo[job.ref] = None if ended else before.runs - in_flight
        # Published again whatever the undo found: a key that completed meanwhile answers it as a duplicate.
        self._publisher.publish([job])


class _Confirmer:
    """A service confirming durable receipts: each that waits for its confirmation (its record says so) gets the
    event once, through the publisher's `send_event` and a boto3 Lambda client at the engine's callback API. An
    event refused (not waiting yet, or no longer) is sent again on a later look; `sent` is how many were taken."""

    def __init__(self, engine: LocalEngine, jobs: Sequence[SoakJob]) -> None:
        from sqs_jobs.events import JobEvents

        assert engine.deployment is not None and engine.durables is not None
        self._waiting = {job.name: job for job in jobs if job.job == DURABLE_JOB and _awaits(job)}
        dynamodb = engine.clients()("dynamodb")
        self._records = DurableRecords(lambda: dynamodb, engine.deployment.idempotency_table, 3600)
        callbacks = engine.durables.callbacks_client(engine.region)
        self._events = JobEvents(dynamodb, callbacks, engine.deployment.idempotency_table)
        self.sent = 0

    def act(self) -> None:
        from sqs_jobs.events import EventNotAwaitedError

        for name, job in list(self._waiting.items()):
            if self._records.read(name).waiting_for != durable_receipt.CONFIRMED:
                continue
            try:
                self._events.send(DURABLE_JOB, job.id, durable_receipt.CONFIRMED, {"by": "soak"})
            except EventNotAwaitedError:
                continue
            del self._waiting[name]
            self.sent += 1


def _awaits(job: SoakJob) -> bool:
    return job.broken is None and durable_receipt.awaits_confirmation(job.id)


def _publish_in_waves(
    engine: LocalEngine,
    jobs: Sequence[SoakJob],
    plan: SoakPlan,
    deadline: float,
    progress: SoakProgress | None = None,
    operator: _Operator | None = None,
    confirmer: _Confirmer | None = None,
) -> bool:
    publisher = _Publisher(engine)
    next_job = 0
    while time.monotonic() < deadline:
        if operator is not None:
            operator.act()
        if confirmer is not None:
            confirmer.act()
        counts = engine.queue_counts()
        unsettled, waiting = _unsettled(counts), sum(queue[WAITING] for queue in counts.values())
        if progress is not None:
            progress(next_job, max(0, next_job - unsettled))
        room = min(plan.window - waiting, plan.backlog - unsettled)
        if next_job < len(jobs) and room > 0:
            wave = jobs[next_job : next_job + room]
            publisher.publish(wave)
            if operator is not None:
                operator.published(wave)
            next_job += len(wave)
            continue
        if next_job >= len(jobs) and unsettled == 0 and (operator is None or operator.idle):
            return True
        time.sleep(0.3 if operator is None or operator.idle else 0.1)
    return False


def _durables_end(engine: LocalEngine, deadline: float, confirmer: _Confirmer | None = None) -> bool:
    """Wait until every durable execution has ended (the worker only starts them), confirming those that wait:
    True once they all have."""
    while engine.durables is not None:
        if confirmer is not None:
            confirmer.act()
        if all(execution.is_complete for execution in engine.durables.executions(DURABLE_JOB)):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)
    return True


def _drain_dead_letters(engine: LocalEngine, observed: Observed) -> None:
    """Every DLQ message, read as jobctl reads it (evidence only on what the worker's role sent, the producer's
    attributes unpacked, or read back from where the runtime stored them), and deleted: a FIFO DLQ hands out no
    more of a message group while one of its messages is in flight."""
    assert engine.deployment is not None
    sqs, dynamodb = engine.clients()("sqs"), engine.clients()("dynamodb")
    for queue in engine.deployment.queues.values():
        reader = DeadLetterQueue(
            sqs, queue.dlq_url, queue.url, Provenance.of([queue.worker_role_id]), dynamodb=lambda: dynamodb
        )
        while True:
            messages = sqs.receive_message(
                QueueUrl=queue.dlq_url,
                MaxNumberOfMessages=10,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["All"],
                VisibilityTimeout=300,
            ).get("Messages", [])
            if not messages:
                break
            for message in messages:
                _observe_dead_letter(reader, DeadLetter.from_message(message, reader.provenance), observed)
            sqs.delete_message_batch(
                QueueUrl=queue.dlq_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)],
            )


def _observe_dead_letter(reader: DeadLetterQueue, letter: DeadLetter, observed: Observed) -> None:
    try:
        body = json.loads(letter.body)
        ref = (str(body["job"]), str(body.get("key") or body["id"]))
    except (ValueError, KeyError, TypeError):
        observed.unparseable_dead_letters.append(letter.body)
        return
    try:
        letter = reader.restore(letter)
    except StoredAttributesError as error:
        observed.unreadable_attributes.append(f"{ref[0]}:{ref[1]}: {error}")
    observed.dead_letters.setdefault(ref, []).append(letter.evidence)
    attributes = letter.publisher_attributes
    observed.dead_letter_attributes.setdefault(ref, []).append(attributes_fingerprint(attributes) if attributes else "")


def _observe(engine: LocalEngine, drained: bool, jobs: Sequence[SoakJob] = ()) -> Observed:
    assert engine.deployment is not None
    observed = Observed(drained=drained)
    dynamodb = engine.clients()("dynamodb")
    durable = DurableRecords(
        lambda: dynamodb,
        engine.deployment.idempotency_table,
        engine.catalog.queue_for_job(DURABLE_JOB).idempotency_expiry_s,
    )
    observed.durable_records = {job.name: durable.read(job.name) for job in jobs if job.job == DURABLE_JOB}
    for mail in engine.sent_mail():
        subject = str(mail["subject"])
        observed.mails[mail_ref(subject)] += 1
        if update := _UPDATE.match(subject):
            observed.update_mails.setdefault(update.group(1), []).append(update.group(2))
    invoicing = engine.standins[INVOICING_ENDPOINT]
    invoicing_stats = invoicing.stats()  # type: ignore[attr-defined]
    observed.api_refused_over_rate = invoicing_stats["over_rate"]
    observed.api_calls_in_busiest_second = invoicing.most_calls_within(1.0)  # type: ignore[attr-defined]
    for invoice_id in invoicing_stats["invoices"].values():
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
    now_ms = time.time() * 1000
    for page in dynamodb.get_paginator("scan").paginate(TableName=engine.deployment.idempotency_table):
        observed.records.update(
            (item["id"]["S"], KeyRecord.from_item(item["id"]["S"], item))
            for item in page["Items"]
            if item["id"]["S"].startswith(f"{IDEMPOTENCY_KEY_PREFIX}#")
        )
        observed.idempotency_records.update(item.get("status", {}).get("S", "?") for item in page["Items"])
        observed.stale_in_progress += sum(
            1
            for item in page["Items"]
            if item.get("status", {}).get("S") == "INPROGRESS"
            and float(item.get("in_progress_expiration", {}).get("N", "inf")) < now_ms
        )
    return observed


def _values(value: Any) -> list[float]:
    """An EMF metric's values: one number, or a list of them."""
    return [float(item) for item in value] if isinstance(value, list) else [float(value)]


# The calls that are a mail job's side effect.
MAIL_CALLS = frozenset({"ses.SendEmail", "ses.SendRawEmail"})


class CutRunWitness:
    """The worker's log stream, passed on unchanged, noting each mail send the runtime reports answered with success
    after its run's cut: which job and key it was for."""

    def __init__(self, output: TextIO) -> None:
        self._output = output
        self._partial = ""
        self._lock = threading.Lock()  # the workers' threads write logs and metrics at once
        self.mails: Counter[JobRef] = Counter()
        self.held: Counter[str] = Counter()
        self.most_hold_share = 0.0
        self.completions_unwritten: Counter[JobRef] = Counter()
        # Calls in flight at a run's cut and ended after it, by job.
        self.cut_calls: Counter[str] = Counter()

    def write(self, text: str) -> int:
        with self._lock:
            self._output.write(text)
            lines = (self._partial + text).split("\n")
            self._partial = lines.pop()
            for line in lines:
                # The runtime's report of a call in flight at its run's cut, answered after it (docs/chaos.md).
                if CUT_RUN_CALL_ENDED_MESSAGE in line:
                    self._note(line)
                elif COMPLETION_UNWRITTEN_MESSAGE in line:
                    self._note_unwritten(line)
                elif HELD in line or HOLD_SHARE in line:
                    self._note_flow(line)
        return len(text)

    def _note_flow(self, line: str) -> None:
        """An EMF document with flow control's counts: records held per limit, and how far into its bound."""
        try:
            document = json.loads(line)
        except ValueError:
            return
        if HELD in document and document.get("reason"):
            self.held[str(document["reason"])] += int(sum(_values(document[HELD])))
        if HOLD_SHARE in document:
            self.most_hold_share = max(self.most_hold_share, *_values(document[HOLD_SHARE]))

    def flush(self) -> None:
        self._output.flush()

    def _note_unwritten(self, line: str) -> None:
        """A run that returned and whose completion the runtime could not write (twice): it may run again."""
        try:
            record = json.loads(line)
        except ValueError:
            return
        job, key = record.get("job"), str(record.get("idempotency_key", ""))
        if record.get("message") == COMPLETION_UNWRITTEN_MESSAGE and job:
            self.completions_unwritten[(job, key.removeprefix(f"{job}:"))] += 1

    def _note(self, line: str) -> None:
        try:
            record = json.loads(line)
        except ValueError:
            return
        answered = str(record.get("outcome", "")).startswith("answered 2")
        job, key = record.get("job"), str(record.get("idempotency_key", ""))
        if record.get("message") == CUT_RUN_CALL_ENDED_MESSAGE and job:
            self.cut_calls[str(job)] += 1
        if (
            record.get("message") == CUT_RUN_CALL_ENDED_MESSAGE
            and answered
            and record.get("call") in MAIL_CALLS
            and job
        ):
            self.mails[(job, key.removeprefix(f"{job}:"))] += 1


def run_soak(plan: SoakPlan, worker_output: TextIO | None = None, progress: SoakProgress | None = None) -> SoakReport:
    """Run the soak on a fresh local engine and check what happened; `progress` is told how far it got."""
    planned = plan.build_jobs()
    members = _batch_members(planned)
    # The callbacks are jobs like the others: each must mail once (the success callback only if it can run).
    callbacks = [SoakJob(ODD_RESULT_JOB, BATCH_COMPLETE_ID)]
    if not any(member.permanent for member in members):
        callbacks.append(SoakJob(ODD_RESULT_JOB, BATCH_SUCCESS_ID))
    jobs = [*planned, *callbacks]
    chaos = replace(plan.chaos, seed=plan.chaos.seed if plan.chaos.seed is not None else plan.seed)
    started = time.monotonic()
    witness = CutRunWitness(worker_output or sys.stdout)
    engine = LocalEngine(
        port=0,
        catalog=soak_catalog(),
        chaos=chaos,
        worker_output=witness,  # type: ignore[arg-type]  # write() and flush() are all a log stream needs
        http_timeouts_s=SOAK_HTTP_TIMEOUTS_S,
    )
    limited.reset()
    with engine:
        _seed(engine, [*jobs, SoakJob(ODD_RESULT_JOB, BATCH_SUCCESS_ID)])
        # The limited job's slow calls: the invoicing API answers its quotes late, and every other call as before.
        quotes = [limited.quote_id(job.id) for job in jobs if job.job == LIMITED_JOB and limited.slow(job.id)]
        engine.standins[INVOICING_ENDPOINT].set_mode(  # type: ignore[attr-defined]
            "slow", delay_s=limited.PROBE_DELAY_S, only_ids=quotes
        )
        batch_id = _publish_batch(engine, members)
        batched = set(members)
        in_waves = [job for job in planned if job not in batched]
        operator = _Operator(engine, _Publisher(engine), plan.seed)
        confirmer = _Confirmer(engine, jobs) if engine.durables is not None else None
        drained = _publish_in_waves(
            engine,
            in_waves,
            plan,
            deadline=started + plan.timeout_s,
            progress=progress,
            operator=operator,
            confirmer=confirmer,
        )
        durables_ended = _durables_end(engine, deadline=started + plan.timeout_s, confirmer=confirmer)
        # Runs cut at their time limit may still be finishing (a hang ends after hang_s, a drip after drip_s, a
        # slow write's answer after slow_store_s): let them, then stop.
        time.sleep(max(chaos.hang_s, chaos.drip_s, chaos.slow_store_s) + 0.5)
        mappings = dict(engine.mappings)  # stop_workers() forgets them; their counts are the report's
        engine.stop_workers()
        elapsed_s = time.monotonic() - started
        observed = _observe(engine, drained, jobs)
        observed.durable_ended = durables_ended
        observed.confirmations = confirmer.sent if confirmer is not None else 0
        batch_problems = _batch_problems(engine, batch_id, members)
        observed.cut_in_flight = witness.mails
        observed.held, observed.most_hold_share = witness.held, witness.most_hold_share
        observed.completions_unwritten, observed.cut_calls = witness.completions_unwritten, witness.cut_calls
        observed.cancel_outcomes, observed.runs_at_undo = operator.outcomes, operator.runs_at_undo
        observed.operator_trace = operator.trace
        observed.limited_runs = limited.runs()
        assert engine.chaos is not None
        injected = {**engine.chaos.injected(), **planned_faults(jobs)}
        stats = {name: mapping.stats.snapshot() for name, mapping in mappings.items()}
    return SoakReport(
        plan=plan,
        chaos=chaos,
        jobs=jobs,
        observed=observed,
        problems=check(jobs, observed) + batch_problems,
        elapsed_s=elapsed_s,
        injected=injected,
        engine_stats=stats,
        records_in_parallel={queue.name: queue.records_in_parallel for queue in engine.catalog},
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m example.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=SoakPlan.jobs, help="jobs to run (default %(default)s)")
    parser.add_argument(
        "--seed", type=int, default=SoakPlan.seed, help="what is broken and what faults (default %(default)s)"
    )
    parser.add_argument("--window", type=int, default=SoakPlan.window, help="messages waiting at most")
    parser.add_argument("--backlog", type=int, default=SoakPlan.backlog, help="messages unsettled at most")
    parser.add_argument("--chaos", type=ChaosSettings.parse, default=DEFAULT_CHAOS, help="as jobctl local --chaos")
    parser.add_argument("--permanent", type=float, default=DEFAULT_PERMANENT, help="share of jobs with broken data")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"seconds for the jobs to settle (default {SoakPlan.timeout_s:g}, or {SOAK_S_PER_JOB:g} a job if more)",
    )
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
    # The durable testing SDK logs every execution that fails, tracebacks and all (the drifting ones by design):
    # the soak checks each ending itself, and the worker's log has the runtime's account of it.
    for sdk in ("aws_durable_execution_sdk_python", "aws_durable_execution_sdk_python_testing"):
        logging.getLogger(sdk).setLevel(logging.CRITICAL)
    plan = SoakPlan(
        jobs=args.jobs,
        seed=args.seed,
        window=args.window,
        backlog=args.backlog,
        chaos=args.chaos,
        permanent=args.permanent,
        timeout_s=args.timeout or max(SoakPlan.timeout_s, SOAK_S_PER_JOB * args.jobs),
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
    from sqs_jobs.cli.cli_output import live_progress

    with live_progress(force=True) as display:
        task = display.add_task("soak: jobs settled", total=total)

        def update(published: int, settled: int) -> None:
            display.update(task, completed=settled, description=f"soak: {published} published, jobs settled")

        yield update


if __name__ == "__main__":
    sys.exit(main())
