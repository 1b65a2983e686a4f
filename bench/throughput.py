"""Benchmark (d): end-to-end jobs per second through the local engine, beside raw moto at the same backlog.

    python -m bench.throughput [--jobs 1000] [--backlogs 100] [--job-types order_confirmation,generate_invoice]
                               [--no-raw] [--stall-s 30] [--json]

moto's SQS cost grows with the number of messages in the queue (moto 5.2: every message sent and every message
received re-reads the queue's attributes, and each read scans every message with slow time conversions). A
benchmark that published all its jobs at once would measure that scan, not the runtime. So the publisher keeps
the backlog bounded: it sends a batch of 10 (SendMessageBatch, through `JobPublisher`) whenever at least 10 fewer
than `backlog` messages are outstanding (sent, not yet deleted).

Per job type and backlog, two runs, one after the other in this process:

engine   a fresh `LocalEngine(port=0)`: the embedded moto server, the event source emulator with the queue's
         `max_concurrency` pollers running the real worker, the fake invoicing API, the metrics agent and the
         heartbeat canary. Entities are seeded first (not timed). The clock runs from the first send until every
         job has been deleted by the emulator and its side effect is seen. Then every job must have completed
         exactly once, judged by its side effect: one SES mail per order (`order_confirmation`); one invoice
         created by the fake API, one POST to it and one S3 object version per invoice (`generate_invoice`). And:
         no failed record, no invocation error, nothing in the DLQ, nothing left in the queue. A message that
         SQS delivered twice is a note, not a failure: SQS delivers at least once, and absorbing that is the
         runtime's job.
raw moto a fresh engine's moto server with no worker running (`run_workers=False`), a queue of its own with the
         same settings, the same job bodies sent the same way, and as many poller threads as the engine has, each
         doing what the emulator does with SQS (ReceiveMessage of up to 10 with a 1 s long poll and all
         attributes, then DeleteMessageBatch) and nothing else: no worker. Those pollers would drain the queue
         faster than one publisher fills it, so that moto would run with a near-empty queue; they receive only
         while the queue holds at least `backlog - 10` messages (or once everything is sent), which keeps moto at
         the same backlog as the engine's run.

The ratio engine / raw moto is the share of moto's bare SQS throughput that survives the runtime and the rest of
the engine. Every request to the in-process moto server is counted by AWS service (from its SigV4 scope), which
gives the requests per job. The CPU column is the process's CPU time over the wall time: moto, the workers and the
publisher share one interpreter, so the GIL caps it near 1.0 whatever the number of cores.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from functions.catalog import CATALOG

if TYPE_CHECKING:
    from sqs_jobs.specs import Catalog

DEFAULT_JOBS = 1000
DEFAULT_BACKLOGS = (50,)
JOB_TYPES = ("order_confirmation", "generate_invoice")
SEND_BATCH = 10  # SendMessageBatch's maximum
RECEIVE_MAX = 10
LONG_POLL_S = 1  # what the emulator long-polls with
PUBLISH_POLL_S = 0.005
LOST_AFTER_S = 1.0  # everything sent, the queue empty this long, jobs incomplete: their messages are gone
HEARTBEAT_OFF_S = 24 * 3600.0  # the engine's first heartbeat goes out at start; no other one during a run
_SIGV4_SERVICE = re.compile(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/aws4_request")


# --- requests to the moto server, counted by service -------------------------------------------------------------


class RequestCounter:
    """Counts requests answered by any in-process werkzeug server (moto's), by AWS service, and the requests that
    failed inside moto (answered 500; werkzeug's traceback is counted instead of printed)."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._installed = False

    def install(self) -> None:
        """Wrap werkzeug's per-request log hook, which every answered request passes through once."""
        if self._installed:
            return
        from werkzeug.serving import WSGIRequestHandler

        original = WSGIRequestHandler.log_request
        counter = self

        def log_request(handler: WSGIRequestHandler, code: int | str = "-", size: int | str = "-") -> None:
            counter.count(handler.headers.get("Authorization", ""), handler.path)
            original(handler, code, size)

        WSGIRequestHandler.log_request = log_request  # type: ignore[method-assign,assignment]
        logging.getLogger("werkzeug").addFilter(self._server_error)
        self._installed = True

    def _server_error(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith("Error on request"):
            return True
        # werkzeug logs the rendered traceback as text; its last line names the exception.
        last = message.strip().splitlines()[-1]
        with self._lock:
            self._errors[last.split(":", 1)[0].rsplit(".", 1)[-1] or "error"] += 1
        return False

    def count(self, authorization: str, path: str) -> None:
        match = _SIGV4_SERVICE.search(authorization)
        service = match.group(1) if match else ("moto-api" if path.startswith("/moto-api") else "other")
        with self._lock:
            self._counts[service] += 1

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self._counts)

    def errors(self) -> Counter[str]:
        with self._lock:
            return Counter(self._errors)


REQUESTS = RequestCounter()


class _Discard(io.StringIO):
    """The workers' log and EMF output, dropped (Lambda would ship it to CloudWatch Logs)."""

    def write(self, text: str) -> int:
        return len(text)


DISCARD = _Discard()


# --- results --------------------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """One timed run: the engine end to end, or raw moto."""

    kind: str  # "engine" or "raw moto"
    job: str
    jobs: int
    backlog: int
    pollers: int
    elapsed_s: float = 0.0
    completed: int = 0  # jobs deleted from the queue within the run
    mean_outstanding: float = 0.0  # sent and not yet completed, time-weighted over the run
    max_outstanding: int = 0
    cpu_s: float = 0.0
    requests: dict[str, int] = field(default_factory=dict)  # by AWS service, during the timed window
    problems: list[str] = field(default_factory=list)  # empty: every job completed exactly once
    notes: list[str] = field(default_factory=list)  # worth knowing, not a failure (e.g. a message delivered twice)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def per_s(self) -> float:
        return self.completed / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def cpu_cores(self) -> float:
        return self.cpu_s / self.elapsed_s if self.elapsed_s else 0.0

    def requests_per_job(self, service: str | None = None) -> float:
        total = sum(n for s, n in self.requests.items() if service in (None, s))
        return total / self.jobs if self.jobs else 0.0

    @property
    def exactly_once(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "job": self.job,
            "jobs": self.jobs,
            "backlog": self.backlog,
            "pollers": self.pollers,
            "elapsed_s": round(self.elapsed_s, 3),
            "completed": self.completed,
            "per_s": round(self.per_s, 1),
            "mean_outstanding": round(self.mean_outstanding, 1),
            "max_outstanding": self.max_outstanding,
            "cpu_cores": round(self.cpu_cores, 2),
            "requests": self.requests,
            "requests_per_job": round(self.requests_per_job(), 2),
            "exactly_once": self.exactly_once,
            "problems": self.problems,
            "notes": self.notes,
            "details": self.details,
        }


# --- the bounded publisher ------------------------------------------------------------------------------------------


@dataclass
class PublishOutcome:
    finished: bool  # every job completed
    elapsed_s: float  # from the first send to the last completion
    completed: int
    mean_outstanding: float
    max_outstanding: int
    gave_up: str = ""  # why the run ended before every job completed


def publish_bounded(
    bodies: Sequence[str],
    send: Callable[[Sequence[str]], object],
    completed: Callable[[], int],
    backlog: int,
    *,
    stall_s: float,
    queued: Callable[[], int],
    on_sent: Callable[[int], None] | None = None,
) -> PublishOutcome:
    """Send `bodies` in batches of 10, keeping at most `backlog` outstanding (sent, not yet completed), and wait
    until all completed. The clock starts at the first send; the mean outstanding is weighted by time.

    `queued` is the number of messages moto holds in the queue (visible or not). Gives up when nothing completes
    for `stall_s` seconds, or when everything was sent and the queue has stayed empty for a second with jobs still
    incomplete: their messages are gone. `on_sent` is told the number sent after each batch."""
    total = len(bodies)
    sent = done = max_outstanding = 0
    area = 0.0
    started = last_seen = last_progress = time.perf_counter()
    empty_since: float | None = None
    gave_up = ""
    while True:
        now_done = completed()
        now = time.perf_counter()
        area += (sent - done) * (now - last_seen)  # what was outstanding since the last look
        last_seen = now
        if now_done != done:
            done, last_progress = now_done, now
        if done >= total:
            break
        if now - last_progress > stall_s:
            gave_up = f"stalled: {done} of {total} done, none for {stall_s:.0f} s"
            break
        if sent >= total:
            empty_since = (empty_since or now) if queued() == 0 else None
            if empty_since is not None and now - empty_since > LOST_AFTER_S:
                gave_up = f"{total - done} of {total} never completed and the queue is empty: their messages are gone"
                break
        max_outstanding = max(max_outstanding, sent - done)
        batch = min(SEND_BATCH, total - sent)
        if batch and backlog - (sent - done) >= batch:
            send(bodies[sent : sent + batch])
            sent += batch
            if on_sent is not None:
                on_sent(sent)
            continue
        time.sleep(PUBLISH_POLL_S)
    elapsed = last_progress - started
    mean = area / (last_seen - started) if last_seen > started else 0.0
    return PublishOutcome(not gave_up, elapsed, done, mean, max_outstanding, gave_up)


def moto_queue_length(region: str, url: str) -> Callable[[], int]:
    """Messages in a queue of the in-process moto server, visible or not (moto's own list: no request)."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.sqs.models import sqs_backends

    queue = sqs_backends[DEFAULT_ACCOUNT_ID][region].queues[url.rstrip("/").rsplit("/", 1)[-1]]
    return lambda: len(queue._messages)


def timed_run(
    result: RunResult,
    bodies: Sequence[str],
    send: Callable[[Sequence[str]], object],
    completed: Callable[[], int],
    *,
    stall_s: float,
    queued: Callable[[], int],
    on_sent: Callable[[int], None] | None = None,
) -> PublishOutcome:
    """Publish at the result's backlog until every job completed; record the time, CPU and moto requests."""
    requests_before, errors_before = REQUESTS.snapshot(), REQUESTS.errors()
    cpu_before = time.process_time()
    outcome = publish_bounded(bodies, send, completed, result.backlog, stall_s=stall_s, queued=queued, on_sent=on_sent)
    result.cpu_s = time.process_time() - cpu_before
    result.requests = dict(REQUESTS.snapshot() - requests_before)
    errors = REQUESTS.errors() - errors_before
    if errors:
        # moto's SQS is not thread-safe; botocore retries a 500, so the caller usually never sees it.
        result.details["moto_errors"] = dict(errors)
        listed = ", ".join(f"{n} {name}" for name, n in errors.most_common())
        result.notes.append(f"moto failed {sum(errors.values())} request(s) with a 500 ({listed})")
    result.elapsed_s = outcome.elapsed_s
    result.completed = outcome.completed
    result.mean_outstanding = outcome.mean_outstanding
    result.max_outstanding = outcome.max_outstanding
    return outcome


# --- the engine, end to end ---------------------------------------------------------------------------------------


def _entity_ids(job: str, jobs: int) -> list[str]:
    return [f"bench-{job[:3]}-{n:06d}" for n in range(jobs)]


def _seed(engine: Any, job: str, ids: Sequence[str]) -> None:
    """Write the entities the jobs re-read (not timed): orders with a distinct mail address, or invoices."""
    assert engine.deployment is not None
    dynamodb = engine.clients()("dynamodb")
    if job == "order_confirmation":
        table = engine.deployment.resources["orders_table"]
        items = [
            {
                "order_id": {"S": i},
                "email": {"S": f"{i}@example.com"},
                "customer_name": {"S": "Bench"},
                "total": {"N": "10.00"},
                "currency": {"S": "EUR"},
            }
            for i in ids
        ]
    else:
        table = engine.deployment.resources["invoices_table"]
        items = [
            {"invoice_id": {"S": i}, "customer": {"S": "Bench Ltd"}, "amount": {"N": "99.50"}, "currency": {"S": "EUR"}}
            for i in ids
        ]
    for start in range(0, len(items), 25):
        requests = [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]
        pending: dict[str, Any] = {table: requests}
        while pending:
            pending = dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}


def _check_engine(engine: Any, job: str, ids: Sequence[str], result: RunResult, received: int, stats: Any) -> None:
    """Every job completed exactly once, judged by its side effects and by what the emulator saw."""
    assert engine.deployment is not None
    wanted = set(ids)
    problems = result.problems
    if job == "order_confirmation":
        mails = Counter(
            address.split("@", 1)[0] for mail in engine.sent_mail() for address in mail["destinations"]["ToAddresses"]
        )
        effects = {i: mails[i] for i in ids}
        strays = sum(n for i, n in mails.items() if i not in wanted)
        result.details["mails"] = sum(mails.values())
        label = "mail"
    else:
        api = engine.standins["invoicing_api_url"].stats()
        created = Counter(api["invoices"].values())
        per_invoice_requests: Counter[str] = Counter()
        for key, n in api["requests"].items():
            per_invoice_requests[api["invoices"].get(key, key)] += n
        s3 = engine.clients()("s3")
        versions: Counter[str] = Counter()
        for page in s3.get_paginator("list_object_versions").paginate(
            Bucket=engine.deployment.resources["invoices_bucket"], Prefix="invoices/"
        ):
            for version in page.get("Versions", []):
                versions[version["Key"].removeprefix("invoices/").removesuffix(".pdf")] += 1
        effects = {i: created[i] for i in ids}
        strays = sum(n for i, n in created.items() if i not in wanted)
        repeated_calls = sum(1 for i in ids if per_invoice_requests[i] != 1)
        extra_versions = sum(1 for i in ids if versions[i] != 1)
        if repeated_calls:
            problems.append(f"{repeated_calls} invoice(s) with other than one POST to the invoicing API")
        if extra_versions:
            problems.append(f"{extra_versions} invoice(s) with other than one S3 object version")
        result.details.update(
            invoices_created=sum(created.values()),
            api_requests=sum(per_invoice_requests.values()),
            s3_versions=sum(versions.values()),
        )
        label = "invoice"
    missing = sum(1 for n in effects.values() if n == 0)
    repeated = sum(1 for n in effects.values() if n > 1)
    if missing:
        problems.append(f"{missing} job(s) without a {label} (lost)")
    if repeated:
        problems.append(f"{repeated} job(s) with more than one {label} (duplicated side effect)")
    if strays:
        problems.append(f"{strays} {label}(s) for no job of this run")
    if received != len(ids):
        # SQS delivers at least once (moto too, under concurrent receives); the runtime's idempotency must absorb it.
        result.notes.append(f"the emulator received {received} messages for {len(ids)} jobs")
    if stats["invocation_errors"] or stats["timeouts"]:
        problems.append(f"emulator: {stats['invocation_errors']} invocation error(s), {stats['timeouts']} timeout(s)")
    if stats["failed_records"]:
        # Handed back for a retry (a twin delivery still in progress, a transient error): a job that then never
        # completed shows above as lost.
        result.notes.append(f"the worker handed {stats['failed_records']} record(s) back for a retry")
    left = _left_behind(engine, job)
    result.details.update(left_in_queue=left["queue"], left_in_dlq=left["DLQ"])
    if left["DLQ"]:
        problems.append(f"{left['DLQ']} message(s) in the DLQ")
    if left["queue"]:
        # Every job is accounted for above; moto kept a message it was told to delete (or one delivered
        # twice): SQS redelivers it after the visibility timeout and the runtime answers it as a duplicate.
        result.notes.append(f"{left['queue']} message(s) left in the queue")


def _left_behind(engine: Any, job: str) -> dict[str, int]:
    """Messages still in the job's queue and in its DLQ (visible, in flight or delayed)."""
    queue = engine.deployment.queues[_queue_of(job)]
    sqs = engine.clients()("sqs")
    left = {}
    for url, what in ((queue.url, "queue"), (queue.dlq_url, "DLQ")):
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        left[what] = sum(
            int(attributes.get(name, "0"))
            for name in (
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            )
        )
    return left


def _side_effects(engine: Any, job: str) -> Callable[[], int]:
    """A cheap count of the run's side effects so far: mails SES accepted, or invoices the fake API created."""
    if job == "generate_invoice":
        return lambda: int(engine.standins["invoicing_api_url"].created_count())
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ses.models import ses_backends

    mails = ses_backends[DEFAULT_ACCOUNT_ID][engine.region].sent_messages
    before = len(mails)
    return lambda: len(mails) - before


def _queue_of(job: str) -> str:

    return CATALOG.queue_for_job(job).name


def without_rate_limits(catalog: Catalog) -> Catalog:
    """`catalog` with no downstream's rate limit: what the runtime alone can do."""
    from dataclasses import replace

    from sqs_jobs.resources import Endpoint, MailSender

    return replace(
        catalog,
        resources=tuple(
            replace(spec, rate_limit=None) if isinstance(spec, Endpoint | MailSender) else spec
            for spec in catalog.resources
        ),
    )


def run_engine(
    job: str,
    jobs: int,
    backlog: int,
    stall_s: float,
    *,
    catalog: Catalog | None = None,
    setup: Callable[[Any], None] | None = None,
    standin_options: dict[str, dict[str, str]] | None = None,
) -> RunResult:
    """One engine run. `catalog` replaces the shipped one (same queue names); `setup` is called with the started
    engine after the entities are seeded and the first heartbeats consumed, before the clock starts (e.g. to slow
    the fake invoicing API). Without a catalog, the shipped one runs without its rate limits, against an invoicing
    API without its own: this benchmark measures the runtime, not the API's limit (bench.rate_limit does)."""
    from sqs_jobs.local.engine import LocalEngine
    from sqs_jobs.publisher import JobPublisher

    if catalog is None:
        catalog = without_rate_limits(CATALOG)
        standin_options = {"invoicing_api_url": {"rate": "off"}, **(standin_options or {})}

    queue_name = _queue_of(job)
    ids = _entity_ids(job, jobs)
    # A sink that is never closed: Powertools shares one log handler per service across the process, and the
    # next engine's workers flush the previous stream when they point the handler at theirs.
    with LocalEngine(
        port=0,
        catalog=catalog,
        worker_output=DISCARD,
        heartbeat_interval_s=HEARTBEAT_OFF_S,
        standin_options=standin_options,
    ) as engine:
        assert engine.deployment is not None
        mapping = engine.mappings[queue_name]
        # The engine runs the queue's maximum concurrency of pollers (one Lambda environment each).
        result = RunResult("engine", job, jobs, backlog, pollers=engine.catalog.queue(queue_name).max_concurrency)
        _seed(engine, job, ids)
        if not engine.wait_until_idle(timeout_s=30):  # the first heartbeats
            result.problems.append("the engine was not idle before the run")
        if setup is not None:
            setup(engine)
        publisher = JobPublisher(
            engine.clients()("sqs"), {queue_name: engine.deployment.queues[queue_name].url}, catalog=CATALOG
        )
        envelopes = {envelope.to_json(): envelope for envelope in (publisher.envelope(job, i) for i in ids)}
        before = mapping.stats.snapshot()

        done = _side_effects(engine, job)

        def completed() -> int:
            # Deleted from the queue (what keeps moto's backlog bounded), and its side effect seen. A message that
            # SQS delivered twice is deleted twice, so the side effects keep the count honest.
            with mapping.stats.lock:
                deleted = int(mapping.stats.deleted) - int(before["deleted"])
            return min(deleted, done())

        outcome = timed_run(
            result,
            list(envelopes),
            lambda chunk: publisher.publish_many([envelopes[body] for body in chunk]),
            completed,
            stall_s=stall_s,
            queued=moto_queue_length(engine.region, engine.deployment.queues[queue_name].url),
        )
        if outcome.gave_up:
            result.problems.append(outcome.gave_up)
        engine.wait_until_idle(timeout_s=5)
        after = mapping.stats.snapshot()
        delta = {name: int(after[name]) - int(before[name]) for name in ("records", "deleted", "invocations")}
        delta.update({name: int(after[name]) for name in ("failed_records", "invocation_errors", "timeouts")})
        result.details["emulator"] = delta
        _check_engine(engine, job, ids, result, delta["records"], delta)
    return result


# --- raw moto -----------------------------------------------------------------------------------------------------


class RawConsumer:
    """`pollers` threads doing with SQS what the emulator's pollers do, and nothing else: receive, delete.

    Without a worker they drain the queue faster than one publisher fills it, and moto would then run at a backlog
    near zero. So a poller receives only while the queue holds at least `backlog - 10` messages (sent, not yet
    deleted), or once everything is sent: moto works at the backlog the engine's slower workers leave it at."""

    def __init__(self, sqs: Any, url: str, pollers: int, backlog: int, total: int) -> None:
        self._sqs = sqs
        self._url = url
        self._backlog = backlog
        self._total = total
        self._sent = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._done: set[str] = set()  # entity IDs whose message was deleted
        self.received: Counter[str] = Counter()  # by the job's entity ID
        self.errors: list[str] = []
        self._threads = [threading.Thread(target=self._poll, name=f"raw-{n}", daemon=True) for n in range(pollers)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        with self._ready:
            self._stop.set()
            self._ready.notify_all()
        for thread in self._threads:
            thread.join(LONG_POLL_S + 30)

    def deleted(self) -> int:
        """Distinct jobs deleted (a message delivered twice counts once)."""
        with self._lock:
            return len(self._done)

    def sent(self, sent: int) -> None:
        """The publisher's count of messages sent so far."""
        with self._ready:
            self._sent = sent
            self._ready.notify_all()

    def _may_receive(self) -> bool:  # under the lock
        held = self._sent - len(self._done)
        return self._stop.is_set() or self._sent >= self._total or held >= self._backlog - SEND_BATCH

    def _poll(self) -> None:
        while not self._stop.is_set():
            with self._ready:
                self._ready.wait_for(self._may_receive)
            try:
                messages = self._sqs.receive_message(
                    QueueUrl=self._url,
                    MaxNumberOfMessages=RECEIVE_MAX,
                    WaitTimeSeconds=LONG_POLL_S,
                    MessageSystemAttributeNames=["All"],
                    MessageAttributeNames=["All"],
                ).get("Messages", [])
                if not messages:
                    continue
                response = self._sqs.delete_message_batch(
                    QueueUrl=self._url,
                    Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)],
                )
            except Exception as error:  # reported as a problem of the run
                with self._lock:
                    self.errors.append(f"{type(error).__name__}: {error}")
                continue
            ids = [json.loads(m["Body"])["id"] for m in messages]
            with self._ready:
                self.received.update(ids)
                self._done.update(ids[int(entry["Id"])] for entry in response.get("Successful", []))
                self._ready.notify_all()


def run_raw(job: str, jobs: int, backlog: int, pollers: int, stall_s: float) -> RunResult:
    """The same messages through moto alone: send, receive, delete; no worker."""
    from sqs_jobs.local.engine import LocalEngine
    from sqs_jobs.local.provision import dlq_attributes, queue_attributes
    from sqs_jobs.publisher import JobPublisher

    spec = CATALOG.queue_for_job(job)
    ids = _entity_ids(job, jobs)
    result = RunResult("raw moto", job, jobs, backlog, pollers)
    # The engine's own moto server (the same request handling), with no worker running.
    with LocalEngine(
        port=0, run_workers=False, worker_output=DISCARD, heartbeat_interval_s=HEARTBEAT_OFF_S, catalog=CATALOG
    ) as engine:
        sqs = engine.clients()("sqs")
        # A queue of its own with the catalog queue's settings (visibility timeout, redrive policy to a DLQ, SSE).
        dlq_url = sqs.create_queue(QueueName="bench-raw-dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        url = sqs.create_queue(QueueName="bench-raw")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sqs.set_queue_attributes(QueueUrl=dlq_url, Attributes=dlq_attributes(spec, arn))
        sqs.set_queue_attributes(QueueUrl=url, Attributes=queue_attributes(spec, dlq_arn))
        publisher = JobPublisher(sqs, {spec.name: url}, catalog=CATALOG)
        envelopes = {envelope.to_json(): envelope for envelope in (publisher.envelope(job, i) for i in ids)}
        # One client for all pollers, as the emulator has.
        consumer = RawConsumer(engine.clients()("sqs"), url, pollers, backlog, jobs)
        consumer.start()
        try:
            outcome = timed_run(
                result,
                list(envelopes),
                lambda chunk: publisher.publish_many([envelopes[body] for body in chunk]),
                consumer.deleted,
                stall_s=stall_s,
                queued=moto_queue_length(engine.region, url),
                on_sent=consumer.sent,
            )
        finally:
            consumer.stop()
        left = moto_queue_length(engine.region, url)()
        # moto's SQS is not thread-safe: under concurrent requests it may deliver a message twice, lose one, keep
        # one it deleted, or fail a call. The baseline's figure stands (completed messages up to the last one);
        # what moto did is noted.
        missing = sum(1 for i in ids if consumer.received[i] == 0)
        repeated = sum(1 for i in ids if consumer.received[i] > 1)
        if outcome.gave_up:
            result.notes.append(f"moto: {outcome.gave_up}")
        if missing:
            result.notes.append(f"moto lost {missing} message(s): never received")
        if repeated:
            result.notes.append(f"moto delivered {repeated} message(s) more than once")
        if left:
            result.notes.append(f"moto still holds {left} message(s) after every job was deleted")
        if consumer.errors:
            result.notes.append(f"{len(consumer.errors)} SQS call(s) failed (first: {consumer.errors[0]})")
        result.details["received"] = sum(consumer.received.values())
    return result


# --- output ---------------------------------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A text table's lines: the header, a rule, the rows; columns padded to their widest cell."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in (header, *rows)]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return lines


def render(pairs: Sequence[tuple[RunResult, RunResult | None]]) -> str:
    header = (
        "job",
        "jobs",
        "backlog",
        "held: mean (engine, raw)",
        "pollers",
        "engine jobs/s",
        "raw moto msgs/s",
        "engine / raw",
        "moto requests/job (engine, raw)",
        "CPU cores (engine, raw)",
        "each job once",
    )
    rows = []
    for engine, raw in pairs:
        rows.append(
            (
                engine.job,
                f"{engine.jobs:,}",
                str(engine.backlog),
                f"{engine.mean_outstanding:.0f}, {raw.mean_outstanding:.0f}"
                if raw
                else f"{engine.mean_outstanding:.0f}",
                str(engine.pollers),
                f"{engine.per_s:,.1f}",
                f"{raw.per_s:,.1f}" if raw else "-",
                f"{engine.per_s / raw.per_s:.2f}x" if raw and raw.per_s else "-",
                f"{engine.requests_per_job():.2f}, {raw.requests_per_job():.2f}"
                if raw
                else f"{engine.requests_per_job():.2f}",
                f"{engine.cpu_cores:.2f}, {raw.cpu_cores:.2f}" if raw else f"{engine.cpu_cores:.2f}",
                "yes" if engine.exactly_once else "NO",
            )
        )
    lines = table(header, rows)
    lines.append("")
    for engine, raw in pairs:
        for run in (engine, raw):
            if run is None:
                continue
            ranked = sorted(run.requests.items(), key=lambda kv: -kv[1])
            # Background requests (the metrics agent's samples) round to nothing in a raw run: left out.
            services = ", ".join(f"{service} {n / run.jobs:.2f}" for service, n in ranked if n / run.jobs >= 0.005)
            lines.append(
                f"{run.job} backlog {run.backlog}, {run.kind}: {run.elapsed_s:.1f} s; moto requests/job: {services}"
            )
            lines.extend(f"    PROBLEM: {problem}" for problem in run.problems)
            lines.extend(f"    note: {note}" for note in run.notes)
    return "\n".join(lines)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, not {text!r}") from None
    if not values or min(values) < SEND_BATCH:
        raise argparse.ArgumentTypeError(f"backlogs must be at least {SEND_BATCH} (one SendMessageBatch)")
    return values


def _job_list(text: str) -> list[str]:
    values = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [value for value in values if value not in JOB_TYPES]
    if not values or unknown:
        raise argparse.ArgumentTypeError(f"job types are some of {', '.join(JOB_TYPES)}; got {text!r}")
    return values


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.throughput",
        description="(d) End-to-end jobs/s through the local engine, beside raw moto at the same backlog.",
    )
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help=f"jobs per run (default {DEFAULT_JOBS})")
    parser.add_argument(
        "--backlogs",
        type=_int_list,
        default=list(DEFAULT_BACKLOGS),
        help="messages kept outstanding, comma-separated (default " + ",".join(map(str, DEFAULT_BACKLOGS)) + ")",
    )
    parser.add_argument(
        "--job-types",
        type=_job_list,
        default=list(JOB_TYPES),
        help="comma-separated (default " + ",".join(JOB_TYPES) + ")",
    )
    parser.add_argument("--no-raw", action="store_true", help="skip the raw moto runs")
    parser.add_argument(
        "--stall-s", type=float, default=30.0, help="give up a run after this long without progress (default 30)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    REQUESTS.install()
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    pairs: list[tuple[RunResult, RunResult | None]] = []
    for job in args.job_types:
        for backlog in args.backlogs:
            engine = run_engine(job, args.jobs, backlog, args.stall_s)
            raw = None if args.no_raw else run_raw(job, args.jobs, backlog, engine.pollers, args.stall_s)
            pairs.append((engine, raw))
            if not args.json:
                print(
                    f"  ... {job} backlog {backlog}: engine {engine.per_s:.1f} jobs/s"
                    + (f", raw moto {raw.per_s:.1f} msgs/s" if raw else ""),
                    file=sys.stderr,
                )
    ok = all(engine.exactly_once for engine, _ in pairs)
    machine = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(os.getloadavg()[0], 2),
        "wall_s": round(time.monotonic() - started, 1),
    }
    if args.json:
        runs = [{"engine": e.as_dict(), "raw": r.as_dict() if r else None} for e, r in pairs]
        json.dump({"machine": machine, "runs": runs}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(
            "(d) end-to-end jobs/s through the local engine, beside raw moto (send+receive+delete) at the same backlog"
        )
        print(render(pairs))
        print(
            f"\n{machine['cores']} cores, Python {machine['python']}, {machine['wall_s']:.0f} s in all; 1-minute load "
            f"average {machine['load_1min_before']:.2f} before, {machine['load_1min_after']:.2f} after"
        )
        if not ok:
            print("\nAn engine run has a PROBLEM above (a job lost or repeated, a failure): its figures do not count.")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
