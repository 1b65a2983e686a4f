"""The deploy rehearsal: the stack deployed to LocalStack by the CDK CLI, then the operator's procedure run with
`jobctl` against it, as a separate process, as an operator runs it: status, list, redrive (everything server
side, and by error type client side), discard with an archive. Every check is on outcomes: exit codes, what the
queues hold, what the archive holds.

LocalStack runs no Lambda code, so the test plays the worker where it matters: jobs a producer published are
received with the orders worker role's credentials and dead-lettered by the runtime's own DeadLetterQueue, as
`Worker._dead_letter` does. The worker's event source mapping is disabled first: LocalStack's poller would
otherwise receive what jobctl moves back, fail to invoke the worker, and hide it for the visibility timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from functions.catalog import CATALOG
from sqs_jobs.batches import STALLED_AFTER_S
from sqs_jobs.cdk.naming import (
    DLQ_URL,
    QUEUE_ARN,
    QUEUE_URL,
    SCHEDULER_ROLE_ARN,
    WORKER_ROLE_ID,
    output_key,
    recurring_schedule_name,
    schedule_group_name,
)
from sqs_jobs.cli.batch_lookup import batch_table
from sqs_jobs.cli.dlq import MoveTasks, queue_busy
from sqs_jobs.envelope import parse_envelope
from sqs_jobs.local.lambda_events import sqs_record
from sqs_jobs.publisher import JobPublisher
from sqs_jobs.worker.batch_members import BatchMembers, routed_publisher
from sqs_jobs.worker.deadletter import DeadLetterQueue, Evidence, iso_from_epoch_ms
from sqs_jobs.worker.names import LIFE_INDEX, NO_EVIDENCE, DeadLetterFailure
from sqs_jobs.worker.provenance import MessageAttributes, Provenance, from_event, portable
from tests.rehearsal.cdk_deploy import Deployment

QUEUE = "orders"
JOB = "order_confirmation"
JOBCTL_TIMEOUT_S = 120
# A producer's own attributes, which a dead letter must carry and a redrive give back byte for byte.
PRODUCER_ATTRIBUTES: dict[str, dict[str, Any]] = {
    "tenant": {"DataType": "String", "StringValue": "acme"},
    "checksum": {"DataType": "Binary", "BinaryValue": b"\x00\xffjobs"},
}


@dataclass(frozen=True)
class Failure:
    """A job to publish and then dead-letter as the worker would, failed with `error_type`."""

    entity_id: str
    error_type: str
    attributes: Mapping[str, dict[str, Any]] | None = None

    @property
    def body(self) -> str:
        return job_body(self.entity_id)


def job_body(entity_id: str) -> str:
    return json.dumps({"job": JOB, "id": entity_id})


@dataclass(frozen=True)
class Orders:
    """The deployed orders queue and its DLQ, with an SQS client for the operator and one for its worker role."""

    url: str
    arn: str
    dlq_url: str
    worker_role_arn: str
    worker_role_id: str
    operator: Any
    worker: Any
    # The worker role's DynamoDB client: a batch's members are counted with it.
    worker_dynamodb: Any


@pytest.fixture(scope="module")
def deployed_orders(deployment: Deployment) -> Orders:
    outputs = deployment.outputs
    arn = outputs[output_key(QUEUE, QUEUE_ARN)]
    functions = deployment.emulator.client("lambda")
    [mapping] = functions.list_event_source_mappings(EventSourceArn=arn)["EventSourceMappings"]
    # Paused, since no worker can run here: see the module's docstring.
    functions.update_event_source_mapping(UUID=mapping["UUID"], Enabled=False)
    function = functions.get_function_configuration(FunctionName=mapping["FunctionArn"])
    # The worker's own credentials: its role, assumed in a session named after the function, as Lambda does.
    assumed = deployment.emulator.client("sts").assume_role(
        RoleArn=function["Role"], RoleSessionName=function["FunctionName"]
    )
    return Orders(
        url=outputs[output_key(QUEUE, QUEUE_URL)],
        arn=arn,
        dlq_url=outputs[output_key(QUEUE, DLQ_URL)],
        worker_role_arn=function["Role"],
        worker_role_id=outputs[output_key(QUEUE, WORKER_ROLE_ID)],
        operator=deployment.emulator.client("sqs"),
        worker=deployment.emulator.client("sqs", assumed["Credentials"]),
        worker_dynamodb=deployment.emulator.client("dynamodb", assumed["Credentials"]),
    )


@pytest.fixture
def orders(deployed_orders: Orders) -> Orders:
    """The orders queue and DLQ, emptied: every test starts from nothing."""
    for url in (deployed_orders.url, deployed_orders.dlq_url):
        deployed_orders.operator.purge_queue(QueueUrl=url)
    return deployed_orders


def jobctl(deployment: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    """`jobctl --output json ARGS` against the emulator, in its own process, with throwaway credentials."""
    emulator = deployment.emulator
    command = [
        sys.executable,
        "-m",
        "sqs_jobs.cli",
        "--endpoint-url",
        emulator.endpoint_url,
        "--region",
        emulator.region,
    ]
    return subprocess.run(
        [*command, "--stack", deployment.stack_name, "--output", "json", *args],
        env=emulator.aws_environment(),
        capture_output=True,
        text=True,
        timeout=JOBCTL_TIMEOUT_S,
        check=False,
    )


def dead_letter(orders: Orders, failures: list[Failure]) -> None:
    """Publish each job as a producer would, then fail it as the worker does: received with the worker role's
    credentials, its attributes split by who sent it, dead-lettered with evidence by the runtime's
    DeadLetterQueue under that role, then acknowledged."""
    for failure in failures:
        extra = {"MessageAttributes": dict(failure.attributes)} if failure.attributes else {}
        orders.operator.send_message(QueueUrl=orders.url, MessageBody=failure.body, **extra)
    by_body = {failure.body: failure for failure in failures}
    provenance = Provenance.of([orders.worker_role_id])
    dead_letters = DeadLetterQueue(orders.worker, orders.dlq_url)
    for message in receive_all(orders.worker, orders.url):
        record = sqs_record(message, orders.arn)
        attributes = MessageAttributes.split(
            from_event(record["messageAttributes"]), provenance.sent_by_runtime(record["attributes"]["SenderId"])
        )
        failure = by_body[record["body"]]
        envelope = parse_envelope(record["body"], CATALOG.queue(QUEUE).job_names)
        now = iso_from_epoch_ms(time.time() * 1000)
        evidence = Evidence(
            error_type=failure.error_type,
            error_message=f"{JOB} {envelope.id} failed",
            traceback=f"Traceback (most recent call last):\n{failure.error_type}: {JOB} {envelope.id} failed",
            failure=DeadLetterFailure.PERMANENT,
            attempts=int(record["attributes"]["ApproximateReceiveCount"]),
            first_failed_at=now,
            last_failed_at=now,
            source_queue=orders.arn,
            envelope=envelope,
        )
        dead_letters.send(record["body"], evidence, record, attributes)
        orders.worker.delete_message(QueueUrl=orders.url, ReceiptHandle=record["receiptHandle"])
    assert queue_busy(orders.operator, orders.url) == 0
    assert queue_busy(orders.operator, orders.dlq_url) == len(failures)


def receive_all(sqs: Any, url: str) -> list[dict[str, Any]]:
    """Every message of the queue, each received once (hidden for a minute), with all its attributes."""
    messages: list[dict[str, Any]] = []
    empty_polls = 0
    while empty_polls < 2:  # SQS samples its servers: one empty answer is not an empty queue
        batch = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=60,
            WaitTimeSeconds=0,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
        ).get("Messages", [])
        empty_polls = 0 if batch else empty_polls + 1
        messages.extend(batch)
    return messages


def bodies(messages: list[dict[str, Any]]) -> list[str]:
    return sorted(message["Body"] for message in messages)


def test_every_resource_of_the_template_is_deployed(deployment: Deployment) -> None:
    cloudformation = deployment.emulator.client("cloudformation")
    resources = cloudformation.describe_stack_resources(StackName=deployment.stack_name)["StackResources"]
    assert {resource["LogicalResourceId"] for resource in resources} == set(deployment.template["Resources"])
    assert {resource["ResourceStatus"] for resource in resources} == {"CREATE_COMPLETE"}


def test_the_worker_role_id_published_by_the_stack_is_the_roles(deployment: Deployment, orders: Orders) -> None:
    """The ID jobctl trusts evidence by (stack output and SSM parameter, from CloudFormation's GetAtt RoleId) is
    the one IAM reports for the role the worker runs as."""
    role = deployment.emulator.client("iam").get_role(RoleName=orders.worker_role_arn.rpartition("/")[2])["Role"]
    assert orders.worker_role_id == role["RoleId"]


def test_status_reads_every_deployed_queue(deployment: Deployment, orders: Orders) -> None:
    result = jobctl(deployment, "status")
    payload = json.loads(result.stdout)
    queues = {queue["name"]: queue for queue in payload["queues"]}
    assert set(queues) == set(CATALOG.queue_names)
    for name, queue in queues.items():
        assert queue["url"] == deployment.outputs[output_key(name, QUEUE_URL)]
        assert queue["dlq_url"] == deployment.outputs[output_key(name, DLQ_URL)]
        assert (queue["backlog"], queue["in_flight"], queue["dlq_depth"]) == (0, 0, 0)
        # No worker runs here, so no heartbeat ever gets through: every queue is unhealthy, and status says so.
        assert queue["last_heartbeat_at"] is None
        assert queue["healthy"] is False
    assert result.returncode == 1


def test_dlq_list_groups_the_runtimes_dead_letters_by_error_and_trusts_no_one_else(
    deployment: Deployment, orders: Orders
) -> None:
    dead_letter(
        orders,
        [Failure("501", "OrderNotFoundError"), Failure("502", "OrderNotFoundError"), Failure("503", "HttpError")],
    )
    # Evidence forged by someone who may send to the DLQ but is not the worker: not believed.
    forged = {"jobs.error_type": {"DataType": "String", "StringValue": "OrderNotFoundError"}}
    orders.operator.send_message(QueueUrl=orders.dlq_url, MessageBody=job_body("504"), MessageAttributes=forged)

    result = jobctl(deployment, "dlq", "list", QUEUE)

    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["total"] == 4
    counts = {group["error_type"]: group["count"] for group in payload["groups"]}
    assert counts == {"OrderNotFoundError": 2, "HttpError": 1, NO_EVIDENCE: 1}
    assert queue_busy(orders.operator, orders.dlq_url) == 4  # listed, not consumed


def test_redrive_all_moves_every_dead_letter_back_server_side(deployment: Deployment, orders: Orders) -> None:
    failures = [Failure("601", "OrderNotFoundError"), Failure("602", "HttpError", PRODUCER_ATTRIBUTES)]
    dead_letter(orders, failures)

    result = jobctl(deployment, "dlq", "redrive", QUEUE, "--all", "--yes", "--no-verify")

    assert queue_busy(orders.operator, orders.dlq_url) == 0, "left in the DLQ"
    assert bodies(receive_all(orders.operator, orders.url)) == sorted(failure.body for failure in failures)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["method"] == "server"


def test_redrive_by_error_type_moves_only_those_with_their_producers_attributes(
    deployment: Deployment, orders: Orders
) -> None:
    moved = [Failure("701", "HttpError", PRODUCER_ATTRIBUTES), Failure("702", "HttpError")]
    kept = Failure("703", "OrderNotFoundError")
    dead_letter(orders, [*moved, kept])

    result = jobctl(deployment, "dlq", "redrive", QUEUE, "--error-type", "HttpError", "--yes", "--no-verify")

    assert result.returncode == 0, result.stderr
    assert bodies(receive_all(orders.operator, orders.dlq_url)) == [kept.body]
    back = {message["Body"]: message for message in receive_all(orders.operator, orders.url)}
    assert sorted(back) == sorted(failure.body for failure in moved)
    # As the producer sent them: its attributes restored exactly, none of the runtime's evidence.
    assert back[moved[0].body]["MessageAttributes"] == PRODUCER_ATTRIBUTES
    assert "MessageAttributes" not in back[moved[1].body]
    # Sent by the operator, not the worker role: the runtime will not take anything on them as its own.
    assert all(not message["Attributes"]["SenderId"].startswith(orders.worker_role_id) for message in back.values())


def test_discard_archives_each_message_before_deleting_it(
    deployment: Deployment, orders: Orders, tmp_path: Path
) -> None:
    discarded = [Failure("801", "EnvelopeNotJSONError", PRODUCER_ATTRIBUTES), Failure("802", "EnvelopeNotJSONError")]
    kept = Failure("803", "HttpError")
    dead_letter(orders, [*discarded, kept])
    archive = tmp_path / "discarded.jsonl"

    result = jobctl(
        deployment, "dlq", "discard", QUEUE, "--error-type", "EnvelopeNotJSONError", "--yes", f"--archive={archive}"
    )

    assert result.returncode == 0, result.stderr
    assert bodies(receive_all(orders.operator, orders.dlq_url)) == [kept.body]
    assert queue_busy(orders.operator, orders.url) == 0
    archived = [json.loads(line) for line in archive.read_text().splitlines()]
    assert sorted(entry["body"] for entry in archived) == sorted(failure.body for failure in discarded)
    assert {entry["error_type"] for entry in archived} == {"EnvelopeNotJSONError"}
    # The producer's attributes as jobctl archives them (binary values as base64 text).
    assert {entry["id"]: entry["attributes"] for entry in archived} == {
        "801": portable(PRODUCER_ATTRIBUTES),
        "802": {},
    }


def test_cancel_stops_a_running_move_task_and_what_it_did_not_move_stays(
    deployment: Deployment, orders: Orders
) -> None:
    failures = [Failure(str(900 + n), "HttpError") for n in range(6)]
    dead_letter(orders, failures)
    dlq_arn = orders.operator.get_queue_attributes(QueueUrl=orders.dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    tasks = MoveTasks(orders.operator, dlq_arn=dlq_arn, destination_arn=orders.arn)
    tasks.start(rate_per_s=1)  # slow on purpose: still running when the operator cancels it

    result = jobctl(deployment, "dlq", "redrive", QUEUE, "--cancel")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["cancelled"] is True
    # A cancel is asynchronous: the task is CANCELLING until the move in flight ends, then CANCELLED
    # (ListMessageMoveTasksResultEntry.Status, the SQS API Reference); nothing moves after it.
    latest = tasks.latest()
    deadline = time.monotonic() + 30
    while latest is not None and latest.status == "CANCELLING" and time.monotonic() < deadline:
        time.sleep(0.5)
        latest = tasks.latest()
    assert latest is not None and latest.status == "CANCELLED"
    left = queue_busy(orders.operator, orders.dlq_url)
    assert 0 < left < len(failures)
    assert left + queue_busy(orders.operator, orders.url) == len(failures)  # nothing lost
    # Nothing is running any more: a second cancel says so, with exit 1.
    again = jobctl(deployment, "dlq", "redrive", QUEUE, "--cancel")
    assert again.returncode == 1
    assert "no move task is running" in again.stderr


def test_the_catalogs_schedules_are_deployed_and_a_delayed_job_is_a_one_time_schedule(deployment: Deployment) -> None:
    """The scheduler as a second implementation sees it: the stack's recurring schedule exists in its group with
    its role, DLQ and retry policy; `jobctl enqueue --in` creates a one-time schedule its API accepts (at(),
    ActionAfterCompletion, the queue's role passed), `schedules list` shows both, and `schedules cancel` ends it."""
    scheduler = deployment.emulator.client("scheduler")
    group = schedule_group_name(deployment.stack_name)
    weekly = scheduler.get_schedule(Name=recurring_schedule_name("dlq_review", "weekly"), GroupName=group)
    assert weekly["ScheduleExpression"] == "cron(0 9 ? * MON *)" and weekly["State"] == "ENABLED"
    assert weekly["Target"]["RoleArn"] == deployment.outputs[output_key("maintenance", SCHEDULER_ROLE_ARN)]
    assert weekly["Target"]["Arn"] == deployment.outputs[output_key("maintenance", QUEUE_ARN)]

    enqueued = jobctl(deployment, "enqueue", "orders", "order_confirmation", "rehearsal-1", "--in", "2h")
    assert enqueued.returncode == 0, enqueued.stderr
    name = json.loads(enqueued.stdout)["schedule"]
    once = scheduler.get_schedule(Name=name, GroupName=group)
    assert once["ScheduleExpression"].startswith("at(") and once["ActionAfterCompletion"] == "DELETE"
    assert json.loads(once["Target"]["Input"]) == {"job": "order_confirmation", "id": "rehearsal-1"}
    assert once["Target"]["RoleArn"] == deployment.outputs[output_key("orders", SCHEDULER_ROLE_ARN)]

    listed = json.loads(jobctl(deployment, "schedules", "list").stdout)["schedules"]
    assert {recurring_schedule_name("dlq_review", "weekly"), name} <= {row["name"] for row in listed}
    cancelled = jobctl(deployment, "schedules", "cancel", name)
    assert cancelled.returncode == 0, cancelled.stderr
    assert name not in {item["Name"] for item in scheduler.list_schedules(GroupName=group)["Schedules"]}


def test_a_published_batch_is_counted_by_its_worker_and_shown_by_jobctl(deployment: Deployment, orders: Orders) -> None:
    """A batch defined in the deployed table (its SSM parameter, its index of open batches), its members counted
    with the worker role's credentials as the worker counts them (number sets added to and deleted from), the
    heartbeat's Query of the open batches, and `jobctl batch show`: LocalStack's DynamoDB, a second
    implementation beside moto."""
    emulator = deployment.emulator
    dynamodb = emulator.client("dynamodb")
    publisher = JobPublisher.from_stack(
        emulator.client("ssm"),
        orders.operator,
        stack_name=deployment.stack_name,
        queues=[QUEUE],
        dynamodb_client=dynamodb,
    )
    batch_id = publisher.batch([(JOB, "b-1"), (JOB, "b-2")], description="rehearsal")
    table = batch_table(emulator.client("ssm"), deployment.stack_name)
    # Open, and no member ended: a heartbeat an hour from now counts it as stalled.
    members = BatchMembers(
        table,
        lambda: orders.worker_dynamodb,
        lambda: routed_publisher({}, orders.worker),
        retention_s=3600,
        clock=lambda: time.time() + STALLED_AFTER_S + 60,
    )
    assert members.watch_open(LIFE_INDEX, publishable=()).stalled == 1
    envelopes = {}
    for message in receive_all(orders.worker, orders.url):
        envelope = parse_envelope(message["Body"], CATALOG.queue(QUEUE).job_names)
        envelopes[envelope.id] = envelope
    assert members.succeeded(envelopes["b-1"]) == []  # no callbacks were asked for
    assert members.dead_lettered(envelopes["b-2"]) == []
    assert members.succeeded(envelopes["b-1"]) == []  # a duplicate counts nothing twice

    result = jobctl(deployment, "batch", "show", batch_id)
    assert result.returncode == 0, result.stderr
    shown_batch = json.loads(result.stdout)
    assert shown_batch["counts"] == {"succeeded": 1, "dead": 1, "open": 0}
    assert shown_batch["members"]["dead"] == [{"index": 1, "member": f"{JOB}:b-2"}]
    assert shown_batch["description"] == "rehearsal"
    # Every member ended: the batch has left the index of open batches.
    assert members.watch_open(LIFE_INDEX, publishable=()).stalled == 0
