"""Functional tests: the real worker against moto's `mock_aws` SQS, DynamoDB and SES.

Resources come from the same `provision()` the local engine uses, so tests, the engine and the stack agree.
Deliveries go through the local engine's event source emulator, step by step: real ReceiveMessage, the real
Lambda SQS event shape, deletes of what succeeded.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, cast

import pytest
from aws_lambda_powertools.utilities.typing import LambdaContext
from moto import mock_aws

from functions.worker.clients import ClientFactory, new_session
from functions.worker.observability import Observability
from functions.worker.runtime import Worker
from jobctl.local.chaos import Chaos
from jobctl.local.emulator import EventSourceMapping, Invocation
from jobctl.local.lambda_events import LocalLambdaContext
from jobctl.local.moto_limits import enforce_message_limits
from jobctl.local.moto_locks import serialize_moto
from jobctl.local.moto_senders import record_senders
from jobctl.local.provision import LocalDeployment, provision
from sqs_jobs.catalog import CATALOG
from sqs_jobs.publisher import JobPublisher
from sqs_jobs.specs import Catalog

REGION = "us-east-1"


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def clients(aws_credentials: None) -> Iterator[ClientFactory]:
    record_senders()  # SenderId names who sent a message, as on AWS: the worker's role, or the test (a producer)
    # Records of a batch run side by side: conditional writes must be atomic, as on AWS (moto's aren't).
    serialize_moto()
    enforce_message_limits()  # a message SQS refuses (too big, attributes counted; a bad attribute name) is, as on AWS
    with mock_aws():
        yield ClientFactory(session=new_session(region_name=REGION))


@functools.cache
def provisioning_clients() -> ClientFactory:
    """The clients provision() makes each test's account with, one set per pytest process: every test's account
    is new (mock_aws starts empty), but a client is only the way in, and making up to eight (IAM, SSM, Lambda, ...)
    afresh cost about 70 ms CPU a test, a third of a whole catalog's provisioning and half of one queue's. Nothing
    else uses them: tests hook their own `clients`."""
    return ClientFactory(session=new_session(region_name=REGION))


def narrowed(catalog: Catalog, *queues: str) -> Catalog:
    """`catalog` with only the named queues and the resources their jobs use: what the tests of a module touch.
    A worker receives only its queue's resources (LocalDeployment.worker_settings), so the rest would cost
    provisioning time (a whole catalog is about 70 calls, one queue about 20) and change nothing."""
    kept = tuple(catalog.queue(name) for name in queues)
    used = {name for queue in kept for name in queue.resources}
    return replace(catalog, queues=kept, resources=tuple(spec for spec in catalog.resources if spec.name in used))


@dataclass
class Harness:
    """A provisioned account plus helpers to publish, deliver and inspect, for one catalog."""

    clients: ClientFactory
    deployment: LocalDeployment
    catalog: Catalog
    output: io.StringIO = field(default_factory=io.StringIO)
    _worker_clients: dict[str, ClientFactory] = field(default_factory=dict)

    @classmethod
    def provisioned(
        cls, clients: ClientFactory, catalog: Catalog = CATALOG, settings: Mapping[str, str] | None = None
    ) -> Harness:
        """The catalog's resources made in the test's account by the local engine's provision(); `clients` are the
        test's own (a producer's)."""
        deployment = provision(provisioning_clients(), catalog=catalog, settings=settings)
        return cls(clients=clients, deployment=deployment, catalog=catalog)

    def stack_publisher(self) -> JobPublisher:
        """A publisher as a service builds it from the stack's parameters, with the batch table (batches, chains)."""
        return JobPublisher.from_stack(
            self.clients("ssm"),
            self.clients("sqs"),
            stack_name=self.deployment.stack_name,
            catalog=self.catalog,
            dynamodb_client=self.clients("dynamodb"),
        )

    def worker_clients(self, queue: str = "orders") -> ClientFactory:
        """The queue's worker's clients: on its role's credentials, as Lambda runs it (the harness's own
        `clients` are a producer's)."""
        if queue not in self._worker_clients:
            session = self.deployment.worker_session(self.clients("sts"), queue, f"test-{queue}-worker")
            self._worker_clients[queue] = ClientFactory(session=session)
        return self._worker_clients[queue]

    def worker(self, queue: str = "orders", clock: Callable[[], float] | None = None) -> Worker:
        """The queue's worker; `clock` is the time unique and debounced jobs' windows are judged by."""
        return Worker(
            settings=self.deployment.worker_settings(queue),
            clients=self.worker_clients(queue),
            observability=Observability.create(output=self.output),
            clock=clock,
        )

    def mapping(self, queue: str = "orders", chaos: Chaos | None = None) -> EventSourceMapping:
        return EventSourceMapping(
            queue=self.deployment.queues[queue],
            sqs_client=self.clients("sqs"),
            handler_factory=lambda: self.worker(queue).handle,
            function_name=f"test-{queue}-worker",
            concurrency=1,
            wait_time_s=0,
            chaos=chaos,
        )

    def send(self, body: str, queue: str = "orders", **extra: Any) -> str:
        url = self.deployment.queues[queue].url
        return str(self.clients("sqs").send_message(QueueUrl=url, MessageBody=body, **extra)["MessageId"])

    def deliver(
        self, queue: str = "orders", worker: Worker | None = None, timeout_s: float | None = None
    ) -> Invocation | None:
        """One poll of the event source: receive a batch, invoke the worker, delete what succeeded.
        `timeout_s` replaces the function timeout the Lambda context counts down from."""
        mapping = self.mapping(queue)
        return mapping.poll_once((worker or self.worker(queue)).handle, timeout_s=timeout_s)

    def expire_visibility(self, invocation: Invocation, queue: str = "orders") -> None:
        """Make the records an invocation left on the queue visible again (what waiting out the timeout does)."""
        sqs = self.clients("sqs")
        url = self.deployment.queues[queue].url
        for record in invocation.event["Records"]:
            if record["messageId"] not in invocation.deleted:
                sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0)

    def queue_counts(self, queue: str = "orders", dead_letter: bool = False) -> tuple[int, int]:
        local = self.deployment.queues[queue]
        attributes = self.clients("sqs").get_queue_attributes(
            QueueUrl=local.dlq_url if dead_letter else local.url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])

    def peek(self, queue: str = "orders") -> dict[str, Any]:
        """The one message waiting on a source queue, with its attributes, left there (visible again at once)."""
        sqs = self.clients("sqs")
        url = self.deployment.queues[queue].url
        [message] = sqs.receive_message(
            QueueUrl=url, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"]
        )["Messages"]
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
        return dict(message)

    def dead_letters(self, queue: str = "orders") -> list[dict[str, Any]]:
        sqs = self.clients("sqs")
        url = self.deployment.queues[queue].dlq_url
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
                return found
            found.extend(batch)

    def put_order(self, order_id: str, email: str = "buyer@example.com", **fields: str) -> None:
        item = {"order_id": {"S": order_id}, "email": {"S": email}}
        item.update({name: {"S": value} for name, value in fields.items()})
        self.clients("dynamodb").put_item(TableName=self.deployment.resources["orders_table"], Item=item)

    def mails_to(self, address: str) -> int:
        from moto.core.models import DEFAULT_ACCOUNT_ID
        from moto.ses.models import ses_backends

        sent = ses_backends[DEFAULT_ACCOUNT_ID][REGION].sent_messages
        return sum(1 for mail in sent if address in mail.destinations.get("ToAddresses", []))

    def log_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.output.getvalue().splitlines() if line.strip()]

    def metrics(self) -> list[dict[str, Any]]:
        return [line for line in self.log_lines() if "_aws" in line]


def key_record(harness: Harness, key: str) -> dict[str, Any]:
    """A job key's idempotency record as the worker left it (numbers as numbers), or {} if it has none."""
    from boto3.dynamodb.types import TypeDeserializer

    from functions.worker.settings import idempotency_record_id

    item = harness.clients("dynamodb").get_item(
        TableName=harness.deployment.idempotency_table, Key={"id": {"S": idempotency_record_id(key)}}
    )
    deserialize = TypeDeserializer().deserialize
    return {
        name: (float(value) if isinstance(value := deserialize(raw), Decimal) else value)
        for name, raw in item.get("Item", {}).items()
    }


def metric_values(document: dict[str, Any], name: str) -> list[float]:
    """One metric's values in an EMF document: a number, or a list of them when a batch sent several."""
    value = document[name]
    return [float(item) for item in value] if isinstance(value, list) else [float(value)]


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


@pytest.fixture
def harness(clients: ClientFactory) -> Harness:
    return Harness.provisioned(clients)


def lambda_context(timeout_s: float = 60) -> LambdaContext:
    # LocalLambdaContext has every attribute of Lambda's context object; typed as the Powertools protocol.
    return cast(LambdaContext, LocalLambdaContext(function_name="test-worker", timeout_s=timeout_s))
