"""Every cdk-nag finding the stack acknowledges instead of fixing, each on the one construct it is about, with why.

cdk-nag 3 reads acknowledgements from CDK's `Validations.of(construct).acknowledge(...)`; they are construct
metadata only and change nothing in the template. The table in docs/infrastructure.md ("Security checks") lists
the same rules; `tests/infra/test_security.py` fails on any finding not acknowledged here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Acknowledgment, CfnElement, Validations
from constructs import IConstruct

if TYPE_CHECKING:
    from infra.job_queue import JobQueue
    from infra.stack import JobsStack

# The catalog's name for the bucket resource (sqs_jobs.catalog.RESOURCES).
INVOICES_BUCKET = "invoices_bucket"

XRAY_STAR = (
    "Active tracing: X-Ray's PutTraceSegments and PutTelemetryRecords take no resource ARN, so '*' is the only "
    "resource they accept (added by tracing=ACTIVE). Every other grant of the role names one ARN."
)
INVOICE_OBJECTS = (
    "s3:PutObject on <invoices bucket>/invoices/*: the job writes invoices/<invoice_id>.pdf and the IDs are not "
    "known at deploy time. The wildcard is only the object key under one prefix of one bucket, for one action."
)
BUCKET_ACCESS_LOGS = (
    "No server access logs: an access-log bucket would be a second retained bucket (itself without logs) for an "
    "object store that only this stack's invoice worker writes; the bucket is private, TLS 1.2-only, versioned "
    "and kept. Turn on CloudTrail S3 data events for the bucket if an audit trail of object access is required."
)
DLQ_WITHOUT_DLQ = (
    "This is a dead-letter queue: its messages are kept for inspection and redrive (jobctl), nothing consumes it, "
    "so nothing can fail to process them; a DLQ of the DLQ would only hide them further."
)
SCHEDULES_DLQ = (
    "This is the job schedules' dead-letter queue: EventBridge Scheduler puts the jobs it could not deliver here "
    "(the schedules' DeadLetterConfig makes it a DLQ, which cdk-nag can't see). People read it (the runbook's "
    "aws sqs receive-message) and nothing consumes it, so nothing can fail to process its messages."
)
SYNCHRONOUS_WORKER = (
    "The worker is invoked only by its SQS event source mapping, which invokes synchronously; a function's "
    "dead-letter target applies to asynchronous invocations only. Failed records go to the queue's own DLQ "
    "(redrive policy after max_attempts), or the worker dead-letters them itself with evidence."
)
TESTED_RUNTIME = (
    "python3.13, not the newest runtime: the worker runs on the Python version its tests run on (make test runs "
    "everything on 3.13; no 3.14 interpreter can be installed where the tests run), and its bytecode is compiled "
    "for that version. Move both together: infra/worker_code.py RUNTIME and the Makefile's LAMBDA_PYTHON."
)
SQS_ESM_DESTINATION = (
    "Lambda supports an on-failure destination only for stream and Kafka event sources, not for SQS; for SQS "
    "the source queue's redrive policy to its DLQ is the failure destination (and the worker dead-letters with "
    "evidence itself)."
)


def acknowledge(stack: JobsStack) -> None:
    """Acknowledge the findings listed in docs/infrastructure.md, each on its own construct."""
    bucket = stack.resources.invoices_bucket.bucket
    _ack(bucket.node.default_child, "AwsSolutions-S1", BUCKET_ACCESS_LOGS)
    # cdk-nag names a GetAtt in a finding's ID as <LogicalId.Attr>.
    bucket_arn_token = f"<{stack.resolve(stack.get_logical_id(_cfn(bucket)))}.Arn>"
    for job_queue in stack.queues.values():
        _acknowledge_queue(job_queue, bucket_arn_token)
    schedules_dlq = stack.schedules.dead_letter_queue.node.default_child
    _ack(schedules_dlq, "AwsSolutions-SQS3", SCHEDULES_DLQ)
    _ack(schedules_dlq, "Serverless-SQSRedrivePolicy", SCHEDULES_DLQ)


def _acknowledge_queue(job_queue: JobQueue, bucket_arn_token: str) -> None:
    role = job_queue.function.role
    assert role is not None
    policy = role.node.find_child("DefaultPolicy").node.default_child
    _ack(policy, "AwsSolutions-IAM5[Resource::*]", XRAY_STAR)
    if INVOICES_BUCKET in job_queue.spec.resources:
        _ack(policy, f"AwsSolutions-IAM5[Resource::{bucket_arn_token}/invoices/*]", INVOICE_OBJECTS)
    _ack(job_queue.dead_letter_queue.node.default_child, "Serverless-SQSRedrivePolicy", DLQ_WITHOUT_DLQ)
    _ack(job_queue.function.node.default_child, "Serverless-LambdaDLQ", SYNCHRONOUS_WORKER)
    _ack(job_queue.function.node.default_child, "AwsSolutions-L1", TESTED_RUNTIME)
    _ack(job_queue.function.node.default_child, "Serverless-LambdaLatestVersion", TESTED_RUNTIME)
    mapping = next(child for child in job_queue.function.node.children if child.node.id.startswith("SqsEventSource"))
    _ack(mapping.node.default_child, "Serverless-LambdaEventSourceMappingDestination", SQS_ESM_DESTINATION)


def _cfn(construct: IConstruct) -> CfnElement:
    child = construct.node.default_child
    assert isinstance(child, CfnElement), construct.node.path
    return child


def _ack(construct: IConstruct | None, rule: str, reason: str) -> None:
    assert construct is not None
    Validations.of(construct).acknowledge(Acknowledgment(id=rule, reason=reason))
