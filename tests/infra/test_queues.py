"""Each catalog queue: the SQS queue and its DLQ."""

from __future__ import annotations

import pytest

from functions.catalog import CATALOG
from sqs_jobs.cdk.naming import physical_queue_name
from sqs_jobs.limits import DAY, DEAD_LETTER_HEADROOM_BYTES, SQS_MAX_MESSAGE_BYTES
from sqs_jobs.specs import QueueSpec
from tests.infra.cfn import of_type, props, queue_id, render
from tests.infra.conftest import Synth

QUEUES = pytest.mark.parametrize("spec", CATALOG.queues, ids=lambda spec: spec.name)


def test_every_catalog_queue_has_a_queue_and_a_dlq(synth: Synth) -> None:
    queues_in_stack = [props(synth.resources, key) for key in of_type(synth.resources, "AWS::SQS::Queue")]
    names = {queue["QueueName"] for queue in queues_in_stack if "QueueName" in queue}
    stack_name = synth.context.stack_name
    queues = {physical_queue_name(stack_name, spec.name, fifo=spec.fifo) for spec in CATALOG}
    dlqs = {physical_queue_name(stack_name, spec.name, dlq=True, fifo=spec.fifo) for spec in CATALOG}
    assert names == queues | dlqs
    # And one more, with a generated name: the job schedules' DLQ (test_schedules.py).
    assert len(queues_in_stack) == len(names) + 1


@QUEUES
@pytest.mark.parametrize("dlq", [False, True], ids=["queue", "dlq"])
def test_queue_is_encrypted_and_tls_only(synth: Synth, spec: QueueSpec, dlq: bool) -> None:
    queue = queue_id(synth.resources, synth.context.stack_name, spec, dlq=dlq)
    assert props(synth.resources, queue)["SqsManagedSseEnabled"] is True

    policies = [
        props(synth.resources, key)["PolicyDocument"]["Statement"]
        for key in of_type(synth.resources, "AWS::SQS::QueuePolicy")
        if props(synth.resources, key)["Queues"] == [{"Ref": queue}]
    ]
    assert policies == [
        [
            {
                "Action": "sqs:*",
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                "Effect": "Deny",
                "Principal": {"AWS": "*"},
                "Resource": {"Fn::GetAtt": [queue, "Arn"]},
            }
        ]
    ]


@QUEUES
def test_dlq_keeps_messages_14_days_longer_than_the_source(synth: Synth, spec: QueueSpec) -> None:
    source = props(synth.resources, queue_id(synth.resources, synth.context.stack_name, spec))
    dlq = props(synth.resources, queue_id(synth.resources, synth.context.stack_name, spec, dlq=True))

    assert dlq["MessageRetentionPeriod"] == spec.dlq_retention_s == 14 * DAY
    assert source["MessageRetentionPeriod"] == spec.retention_s
    # A standard queue's DLQ counts retention from the original enqueue time.
    assert dlq["MessageRetentionPeriod"] > source["MessageRetentionPeriod"]


@QUEUES
def test_dlq_has_room_above_the_source_for_a_dead_letters_evidence(synth: Synth, spec: QueueSpec) -> None:
    source = props(synth.resources, queue_id(synth.resources, synth.context.stack_name, spec))
    dlq = props(synth.resources, queue_id(synth.resources, synth.context.stack_name, spec, dlq=True))

    # Both set explicitly: SQS's default (1 MiB for queues created since 2025) would leave the DLQ no room.
    assert source["MaximumMessageSize"] == spec.max_message_bytes
    assert dlq["MaximumMessageSize"] == SQS_MAX_MESSAGE_BYTES
    assert dlq["MaximumMessageSize"] - source["MaximumMessageSize"] >= DEAD_LETTER_HEADROOM_BYTES


@QUEUES
def test_source_dead_letters_to_its_dlq_only_after_the_runtimes_own_count(synth: Synth, spec: QueueSpec) -> None:
    dlq = queue_id(synth.resources, synth.context.stack_name, spec, dlq=True)
    source = props(synth.resources, queue_id(synth.resources, synth.context.stack_name, spec))

    assert source["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq, "Arn"]},
        "maxReceiveCount": spec.receive_limit,
    }
    # Every run, the receive after the last (a run that never reported back), and room for hand-backs...
    assert spec.receive_limit > spec.max_attempts + 1
    # ...and a message no worker can start still reaches the DLQ before the queue's retention deletes it.
    assert spec.receive_limit * spec.visibility_timeout_s <= spec.retention_s
    assert "RedrivePolicy" not in props(synth.resources, dlq)


@QUEUES
def test_dlq_accepts_only_its_own_source_queue(synth: Synth, spec: QueueSpec) -> None:
    stack_name = synth.context.stack_name
    dlq = props(synth.resources, queue_id(synth.resources, stack_name, spec, dlq=True))

    policy = dlq["RedriveAllowPolicy"]
    assert policy["redrivePermission"] == "byQueue"
    # Built from the source's name, not a reference to it: a reference would be a circular dependency.
    assert [render(arn) for arn in policy["sourceQueueArns"]] == [
        f"arn:aws:sqs:${{Region}}:${{Account}}:{physical_queue_name(stack_name, spec.name, fifo=spec.fifo)}"
    ]


@QUEUES
def test_visibility_timeout_is_six_function_timeouts_plus_window(synth: Synth, spec: QueueSpec) -> None:
    source = props(synth.resources, queue_id(synth.resources, synth.context.stack_name, spec))

    assert source["VisibilityTimeout"] == 6 * spec.function_timeout_s + spec.batching_window_s
    assert "VisibilityTimeout" not in props(
        synth.resources, queue_id(synth.resources, synth.context.stack_name, spec, dlq=True)
    )
