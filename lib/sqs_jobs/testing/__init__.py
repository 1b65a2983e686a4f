"""Test a project's jobs through the real runtime, on moto: `pip install 'sqs-jobs[testing]'`.

    from functions.catalog import CATALOG
    from sqs_jobs.testing import JobHarness

    def test_resize_image_runs_once_and_dead_letters_nothing() -> None:
        with JobHarness.running(CATALOG) as jobs:
            jobs.publish("resize_image", "42")            # as a service publishes it (JobPublisher.from_stack)
            invocation = jobs.deliver("images")           # one Lambda invocation: a real SQS event, the real worker
            assert invocation is not None and invocation.failed_ids == []
            assert jobs.dead_letters("images") == []

Every resource of the catalog is made in a moto account by the local engine's own provisioning (so tests, the
local engine and the stack agree); deliveries go through the engine's event source emulator: a real
ReceiveMessage, the real Lambda SQS event, deletes of what succeeded, the worker on its own role's credentials.
A redelivery, a duplicate, a dead letter and its evidence are what they are on AWS. With pytest, the fixture
`job_harness` gives the same for the project's catalog (`[tool.sqs-jobs] catalog`), one per test.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from sqs_jobs.contract import JobContract
from sqs_jobs.local.chaos import Chaos
from sqs_jobs.local.emulator import EventSourceMapping, Invocation
from sqs_jobs.local.lambda_events import LocalLambdaContext
from sqs_jobs.local.provision import LocalDeployment, LocalLane, provision
from sqs_jobs.local.scheduler import Firing, LocalScheduler, LocalSchedules, provision_schedules, scheduler_role_session
from sqs_jobs.publisher import JobPublisher
from sqs_jobs.specs import Catalog
from sqs_jobs.worker.clients import ClientFactory, new_session
from sqs_jobs.worker.observability import Observability
from sqs_jobs.worker.runtime import Worker

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from sqs_jobs.local.durable import LocalDurableFunctions
    from sqs_jobs.worker.key_life import KeyRecord

__all__ = [
    "REGION",
    "SANDBOX_ENVIRONMENT",
    "SANDBOX_UNSET",
    "Invocation",
    "JobHarness",
    "NoQueueNamedError",
    "attributes_of",
    "aws_sandbox",
    "envelope",
    "lambda_context",
    "patch_moto",
    "provisioning_clients",
]

REGION = "us-east-1"
# What the sandbox sets: credentials moto accepts, the region, and nothing that would reach a real account.
SANDBOX_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
}
SANDBOX_UNSET = ("AWS_ENDPOINT_URL", "AWS_PROFILE")


class NoQueueNamedError(ValueError):
    """A harness call that needs a queue got none, and the catalog has more than one."""


def patch_moto() -> None:
    """What moto lacks and the runtime relies on, as the local engine has it (idempotent)."""
    from sqs_jobs.local.moto_limits import enforce_message_limits
    from sqs_jobs.local.moto_locks import serialize_moto
    from sqs_jobs.local.moto_senders import record_senders

    record_senders()  # SenderId names who sent a message, as on AWS: the worker's role, or the test (a producer)
    serialize_moto()  # records of a batch run side by side: conditional writes must be atomic, as on AWS
    enforce_message_limits()  # a message SQS refuses (too big, a bad attribute name) is refused, as on AWS


@contextlib.contextmanager
def aws_sandbox() -> Iterator[ClientFactory]:
    """A moto account, empty, with its credentials in the environment: clients as a producer (the test) has them."""
    from moto import mock_aws

    patch_moto()
    saved = {name: os.environ.get(name) for name in (*SANDBOX_ENVIRONMENT, *SANDBOX_UNSET)}
    os.environ.update(SANDBOX_ENVIRONMENT)
    for name in SANDBOX_UNSET:
        os.environ.pop(name, None)
    try:
        with mock_aws():
            yield ClientFactory(session=new_session(region_name=REGION))
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@functools.cache
def provisioning_clients() -> ClientFactory:
    """The clients provision() makes each account with, one set per process: every account is new (mock_aws starts
    empty), but making up to eight clients afresh cost about 70 ms a test."""
    return ClientFactory(session=new_session(region_name=REGION))


@dataclass
class JobHarness:
    """A provisioned moto account for one catalog, and what a test does with it: publish, deliver, inspect."""

    clients: ClientFactory
    deployment: LocalDeployment
    catalog: Catalog
    output: io.StringIO = field(default_factory=io.StringIO)
    # The queue a call names when it names none; None: the catalog's only queue, if it has one.
    default_queue: str | None = None
    _worker_clients: dict[str, ClientFactory] = field(default_factory=dict)
    # The receipts of the dead letters `dead_letters` read (hidden for a minute), by DLQ URL: `redrive` shows them.
    _read_dead_letters: dict[str, list[str]] = field(default_factory=dict)
    # The stack's scheduler (EventBridge Scheduler on moto), made on first use; what fires its schedules (it keeps
    # each one's next run) and the time it fires them at.
    _schedules: LocalSchedules | None = None
    _scheduler: LocalScheduler | None = None
    _schedule_clock: datetime = field(default_factory=lambda: datetime.now(UTC))
    # The catalog's durable jobs' functions (AWS's durable execution testing SDK), made on first use.
    _durables: LocalDurableFunctions | None = None

    @classmethod
    def provisioned(
        cls, clients: ClientFactory, catalog: Catalog, settings: Mapping[str, str] | None = None, **fields: Any
    ) -> JobHarness:
        """The catalog's resources made in the (already mocked) account by the local engine's provision();
        `clients` are the test's own (a producer's). `settings` sets a resource's local value by name."""
        deployment = provision(provisioning_clients(), catalog=catalog, settings=settings)
        return cls(clients=clients, deployment=deployment, catalog=catalog, **fields)

    @classmethod
    @contextlib.contextmanager
    def running(cls, catalog: Catalog, settings: Mapping[str, str] | None = None) -> Iterator[JobHarness]:
        """A harness in a fresh moto account of its own, for the length of the `with`."""
        with aws_sandbox() as clients:
            harness = cls.provisioned(clients, catalog, settings)
            try:
                yield harness
            finally:
                harness.close()

    def close(self) -> None:
        """Stop the durable jobs' functions, if any ran (`running` does this at its end)."""
        if self._durables is not None:
            self._durables.close()
            self._durables = None

    def durables(self) -> LocalDurableFunctions:
        """The catalog's durable jobs' functions, as the local engine runs them (AWS's durable execution testing
        SDK, in this process; their waits and retry delays pass at once), each on its queue's worker's
        credentials; also serving Lambda's callback API, where the publisher's `send_event` goes. Made on first
        use: a catalog without durable jobs makes none."""
        if self._durables is None:
            from sqs_jobs.durable.runtime import DurableRuntime, DurableSettings
            from sqs_jobs.local.durable import LocalDurableFunctions
            from sqs_jobs.stack_names import durable_function_name

            runtimes = {
                job.name: (
                    durable_function_name(self.deployment.stack_name, job.name),
                    DurableRuntime(
                        DurableSettings(worker=self.deployment.worker_settings(queue.name), job=job.name),
                        self.worker_clients(queue.name),
                        observability=Observability.create(output=self.output),
                    ),
                )
                for queue in self.catalog
                for job in queue.jobs
                if job.durable is not None
            }
            self._durables = LocalDurableFunctions(runtimes, skip_time=True)
        return self._durables

    def waiting_for(self, job: str, entity_id: str, timeout_s: float = 30) -> str:
        """The event the durable job published as `job` and `entity_id` waits for (context.wait_for_event), once
        it waits: its execution runs in the background after `deliver`. TimeoutError if it doesn't wait for one
        within `timeout_s`."""
        import time

        from sqs_jobs.durable.record import DurableRecords

        records = DurableRecords(lambda: self.clients("dynamodb"), self.deployment.idempotency_table, 3600)
        deadline = time.monotonic() + timeout_s
        while True:
            state = records.read(f"{job}:{entity_id}")
            if state.waiting_for is not None:
                return state.waiting_for
            if time.monotonic() > deadline:
                raise TimeoutError(f"{job}:{entity_id} waits for no event after {timeout_s} s: {state.status}")
            time.sleep(0.05)

    def durable_result(self, job: str, entity_id: str, timeout_s: float = 60) -> Any:
        """The end of the durable execution `deliver` started for `job` and `entity_id` (the newest, after a
        redrive): the SDK's result, with `status` (SUCCEEDED, FAILED, ...) and `result` (the job's return, as
        JSON). TimeoutError if it doesn't end within `timeout_s`."""
        from sqs_jobs.durable.record import DurableRecords

        key = f"{job}:{entity_id}"
        state = DurableRecords(lambda: self.clients("dynamodb"), self.deployment.idempotency_table, 3600).read(key)
        found = [
            execution
            for execution in self.durables().executions(job)
            if json.loads(execution.start_input.input or "{}").get("key") == key
        ]
        if not found:
            raise LookupError(f"no durable execution of {key} was started (deliver its queue first); record: {state}")
        newest = max(found, key=lambda execution: json.loads(execution.start_input.input or "{}")["generation"])
        return self.durables().wait(job, newest.durable_execution_arn, timeout_s)

    def queue_name(self, queue: str | None) -> str:
        if queue is not None:
            return queue
        if self.default_queue is not None:
            return self.default_queue
        names = self.catalog.queue_names
        if len(names) != 1:
            raise NoQueueNamedError(f"name the queue: the catalog has {len(names)} ({', '.join(names)})")
        return names[0]

    def publisher(self) -> JobPublisher:
        """A publisher as a service builds it from the stack's parameters, with the batch table (batches, chains),
        its jobs' results (`result`) and, for a catalog with durable jobs, events to them (`send_event`, through a
        boto3 Lambda client at the durable functions' callback API)."""
        lambda_client = None
        if any(job.durable is not None for queue in self.catalog for job in queue.jobs):
            lambda_client = self.durables().callbacks_client(REGION)
        self.schedules()  # the stack's scheduler: a delay past SQS's 15 minutes is a one-time schedule
        return JobPublisher.from_stack(
            self.clients("ssm"),
            self.clients("sqs"),
            self.clients("scheduler"),
            stack_name=self.deployment.stack_name,
            catalog=self.catalog,
            dynamodb_client=self.clients("dynamodb"),
            results_client=self.clients("dynamodb"),
            lambda_client=lambda_client,
        )

    def schedules(self) -> LocalSchedules:
        """The stack's EventBridge Scheduler part as the local engine makes it (its group, each queue's role, the
        catalog's recurring schedules), made on first use."""
        if self._schedules is None:
            self._schedules = provision_schedules(self.clients, self.deployment, self.catalog)
        return self._schedules

    def fire_schedules(self, at: datetime | None = None) -> list[Firing]:
        """Fire what is due by `at` (default: now), as EventBridge Scheduler would, and what fired: a job published
        with a delay past 15 minutes, or a recurring schedule's next run (its earliest due, once a call; the next
        call goes on from there), sent to its queue with its queue's scheduler role.
        `publisher().publish(..., delay=timedelta(hours=2))`, then `fire_schedules(at=datetime.now(UTC) +
        timedelta(hours=2))`, then `drain()`."""
        self._schedule_clock = at or datetime.now(UTC)
        if self._scheduler is None:
            self._scheduler = LocalScheduler(
                self.clients,
                lambda role_arn: ClientFactory(session=scheduler_role_session(self.clients("sts"), role_arn, REGION))(
                    "sqs"
                ),
                self.schedules(),
                clock=lambda: self._schedule_clock,
            )
        return self._scheduler.tick()

    def publish(self, job: str, entity_id: str, **options: Any) -> str | None:
        """Publish one job as a service would (JobPublisher.publish, its checks included); its message ID."""
        return self.publisher().publish(job, entity_id, **options)

    def worker_clients(self, queue: str | None = None) -> ClientFactory:
        """The queue's worker's clients: on its role's credentials, as Lambda runs it."""
        name = self.queue_name(queue)
        if name not in self._worker_clients:
            session = self.deployment.worker_session(self.clients("sts"), name, f"test-{name}-worker")
            self._worker_clients[name] = ClientFactory(session=session)
        return self._worker_clients[name]

    def worker(self, queue: str | None = None, clock: Callable[[], float] | None = None) -> Worker:
        """The queue's worker; `clock` is the time unique and debounced jobs' windows are judged by. A queue with
        durable jobs starts their executions in `durables()`, as its worker starts them in their functions."""
        name = self.queue_name(queue)
        durables = self.durables() if any(job.durable is not None for job in self.catalog.queue(name).jobs) else None
        return Worker(
            settings=self.deployment.worker_settings(name),
            clients=self.worker_clients(name),
            observability=Observability.create(output=self.output),
            clock=clock,
            durable_starter=durables,
            durable_executions=durables,
        )

    def mapping(self, queue: str | None = None, chaos: Chaos | None = None) -> EventSourceMapping:
        name = self.queue_name(queue)
        return EventSourceMapping(
            queue=self.deployment.queues[name],
            sqs_client=self.clients("sqs"),
            handler_factory=lambda: self.worker(name).handle,
            function_name=f"test-{name}-worker",
            concurrency=1,
            wait_time_s=0,
            chaos=chaos,
        )

    def send(self, body: str, queue: str | None = None, *, lane: str | None = None, **extra: Any) -> str:
        """Send a raw message body, as a producer in any language (or a hostile one) might; `lane`: to that
        priority lane's queue (default: the queue's own, its default lane)."""
        url = self._source(queue, lane).url
        return str(self.clients("sqs").send_message(QueueUrl=url, MessageBody=body, **extra)["MessageId"])

    def _source(self, queue: str | None, lane: str | None) -> LocalLane:
        local = self.deployment.queues[self.queue_name(queue)]
        # As a publish names it: UnknownPriorityError, in the publisher's words, for a lane the queue lacks.
        lane = JobContract.from_catalog(self.catalog).lane(local.spec.name, lane)
        return next(source for source in local.sources if source.name == lane)

    def deliver(
        self, queue: str | None = None, worker: Worker | None = None, timeout_s: float | None = None
    ) -> Invocation | None:
        """One poll of the event source: receive a batch, invoke the worker, delete what succeeded; None when the
        queue had nothing visible. `timeout_s` replaces the function timeout the Lambda context counts down from."""
        name = self.queue_name(queue)
        return self.mapping(name).poll_once((worker or self.worker(name)).handle, timeout_s=timeout_s)

    def drain(self, queue: str | None = None, max_invocations: int = 100) -> list[Invocation]:
        """Deliver until the queue has nothing visible (a retry waits out its backoff: see expire_visibility)."""
        done: list[Invocation] = []
        while len(done) < max_invocations and (invocation := self.deliver(queue)) is not None:
            done.append(invocation)
        return done

    def expire_visibility(self, invocation: Invocation, queue: str | None = None) -> None:
        """Make the records an invocation left on the queue visible again (what waiting out the timeout does)."""
        sqs = self.clients("sqs")
        # Each record on the queue it came from: a priority lane's, or the queue's own.
        urls = {source.arn: source.url for source in self.deployment.queues[self.queue_name(queue)].sources}
        for record in invocation.event["Records"]:
            if record["messageId"] not in invocation.deleted:
                url = urls[record["eventSourceARN"]]
                sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0)

    def queue_counts(self, queue: str | None = None, dead_letter: bool = False) -> tuple[int, int]:
        """(visible, in flight) on the queue (all its priority lanes) or its DLQ."""
        local = self.deployment.queues[self.queue_name(queue)]
        visible = in_flight = 0
        for url in [local.dlq_url] if dead_letter else [source.url for source in local.sources]:
            attributes = self.clients("sqs").get_queue_attributes(
                QueueUrl=url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            visible += int(attributes["ApproximateNumberOfMessages"])
            in_flight += int(attributes["ApproximateNumberOfMessagesNotVisible"])
        return visible, in_flight

    def peek(self, queue: str | None = None) -> dict[str, Any]:
        """The message a receive of the queue gives first (of its most urgent priority lane that has one), with its
        attributes, left there (visible again at once). AssertionError when nothing waits. It is a receive: each
        peek counts toward the message's receives, as SQS's redrive policy counts them (maxReceiveCount)."""
        sqs = self.clients("sqs")
        for source in self.deployment.queues[self.queue_name(queue)].sources:
            received = sqs.receive_message(
                QueueUrl=source.url, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"]
            ).get("Messages", [])
            for message in received:
                sqs.change_message_visibility(
                    QueueUrl=source.url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
                )
                return dict(message)
        raise AssertionError(f"peek: nothing waits on {self.queue_name(queue)!r}")

    def dead_letters(self, queue: str | None = None) -> list[dict[str, Any]]:
        """Every message on the queue's DLQ, with its evidence (attributes_of). Each is hidden for a minute once
        read (as a receive does), so that one call sees each once; `redrive` takes them all the same."""
        sqs = self.clients("sqs")
        url = self.deployment.queues[self.queue_name(queue)].dlq_url
        found: list[dict[str, Any]] = []
        while True:
            batch = sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["All"],
                VisibilityTimeout=60,
            ).get("Messages", [])
            if not batch:
                self._read_dead_letters.setdefault(url, []).extend(message["ReceiptHandle"] for message in found)
                return found
            found.extend(batch)

    def redrive(self, queue: str | None = None) -> int:
        """Move every dead letter of the queue back to it, each to the priority lane it came from, as `jobctl dlq
        redrive` does (those `dead_letters` read too); how many moved."""
        from sqs_jobs.cli.discovery import LaneLocation
        from sqs_jobs.cli.dlq import DeadLetterQueue, Filter
        from sqs_jobs.worker.provenance import Provenance

        local = self.deployment.queues[self.queue_name(queue)]
        sqs = self.clients("sqs")
        for receipt in self._read_dead_letters.pop(local.dlq_url, []):
            with contextlib.suppress(Exception):  # taken since (a redrive, a test's own receive)
                sqs.change_message_visibility(QueueUrl=local.dlq_url, ReceiptHandle=receipt, VisibilityTimeout=0)
        dlq = DeadLetterQueue(
            sqs,
            local.dlq_url,
            local.url,
            Provenance.of([local.worker_role_id]),
            receive_wait_s=0,
            lanes=[LaneLocation(lane.name, lane.url, lane.arn) for lane in local.lanes],
        )
        return dlq.move(Filter()).moved

    def resource(self, name: str) -> str:
        """A catalog resource's local value (a table's or bucket's name, a URL, a secret's ARN), as jobs get it."""
        return self.deployment.resources[name]

    def record(self, key: str) -> dict[str, Any]:
        """A job key's record as the runtime left it (`<job>:<business key>`; numbers as numbers), {} if none."""
        from boto3.dynamodb.types import TypeDeserializer

        from sqs_jobs.worker.settings import idempotency_record_id

        item = self.clients("dynamodb").get_item(
            TableName=self.deployment.idempotency_table, Key={"id": {"S": idempotency_record_id(key)}}
        )
        deserialize = TypeDeserializer().deserialize
        return {
            name: (float(value) if isinstance(value := deserialize(raw), Decimal) else value)
            for name, raw in item.get("Item", {}).items()
        }

    def key(self, job: str, business_key: str) -> KeyRecord:
        """How the job's key stands (status, runs, last error, ...), read by the codec the runtime writes with."""
        from sqs_jobs.worker.key_life import KeyRecord
        from sqs_jobs.worker.settings import idempotency_record_id

        record_id = idempotency_record_id(f"{job}:{business_key}")
        item = (
            self.clients("dynamodb")
            .get_item(TableName=self.deployment.idempotency_table, Key={"id": {"S": record_id}})
            .get("Item")
        )
        return KeyRecord.from_item(record_id, item)

    def runs_done(self, job: str) -> int:
        """How many runs of `job` completed, from the workers' logs (a duplicate skipped is not one)."""
        return sum(1 for line in self.log_lines() if line.get("message") == "job done" and line.get("job") == job)

    def mails_to(self, address: str) -> int:
        """How many mails the account's SES sent to `address`."""
        from moto.core.models import DEFAULT_ACCOUNT_ID
        from moto.ses.models import ses_backends

        sent = ses_backends[DEFAULT_ACCOUNT_ID][REGION].sent_messages
        return sum(1 for mail in sent if address in mail.destinations.get("ToAddresses", []))

    def log_lines(self) -> list[dict[str, Any]]:
        """The workers' structured log lines (Powertools' JSON), in order."""
        return [json.loads(line) for line in self.output.getvalue().splitlines() if line.strip()]

    def metrics(self) -> list[dict[str, Any]]:
        """The workers' EMF metric documents."""
        return [line for line in self.log_lines() if "_aws" in line]


def envelope(job: str, entity_id: str) -> str:
    """A job message body, as a publisher in any language would send it."""
    return json.dumps({"job": job, "id": entity_id})


def attributes_of(message: dict[str, Any]) -> dict[str, str]:
    """A received message's string and number attributes (the dead-letter evidence) by name."""
    return {
        name: value["StringValue"]
        for name, value in message.get("MessageAttributes", {}).items()
        if "StringValue" in value
    }


def lambda_context(timeout_s: float = 60) -> LambdaContext:
    """A Lambda context object with every attribute Lambda's has, counting down from `timeout_s`."""
    return cast("LambdaContext", LocalLambdaContext(function_name="test-worker", timeout_s=timeout_s))
