"""Every cdk-nag finding the stack acknowledges instead of fixing, each on the one construct it is about, with why.

cdk-nag 3 reads acknowledgements from CDK's `Validations.of(construct).acknowledge(...)`; they are construct
metadata only and change nothing in the template. The table in docs/infrastructure.md ("Security checks") lists
the same rules; `tests/infra/test_security.py` fails on any finding not acknowledged here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Acknowledgment, Stack, Validations
from constructs import IConstruct

if TYPE_CHECKING:
    from sqs_jobs.cdk.job_queue import JobQueue
    from sqs_jobs.cdk.jobs import JobsComposition

XRAY_STAR = (
    "Active tracing: X-Ray's PutTraceSegments and PutTelemetryRecords take no resource ARN, so '*' is the only "
    "resource they accept (added by tracing=ACTIVE). Every other grant of the role names one ARN."
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
    "for that version. Move both together: sqs_jobs.cdk.worker_code RUNTIME and the Makefile's LAMBDA_PYTHON."
)
SQS_ESM_DESTINATION = (
    "Lambda supports an on-failure destination only for stream and Kafka event sources, not for SQS; for SQS "
    "the source queue's redrive policy to its DLQ is the failure destination (and the worker dead-letters with "
    "evidence itself)."
)

DURABLE_EXECUTIONS = (
    "Lambda authorizes CheckpointDurableExecution and GetDurableExecutionState (and the sweep's GetDurableExecution, "
    "GetDurableExecutionHistory) against the durable execution's ARN "
    "(<function ARN>:<version>/durable-execution/<name>/<id>), which an unqualified ARN never matches: AWS's policy "
    "for them is '<function ARN>:*', this one function's executions of any version (docs.aws.amazon.com/lambda/"
    "latest/dg/durable-security.html)."
)
DURABLE_FAILURES = (
    "A durable job's function is started by its queue's worker, whose record is already acknowledged; a failed "
    "execution dead-letters its record with evidence itself (sqs_jobs.durable.runtime), one that timed out or "
    "was stopped is dead-lettered by its worker's heartbeat sweep (sqs_jobs.durable.sweep), and the "
    "DurableExecutionFailed and DurableExecutionTimedOut alarms page. A function DLQ would hold an event without "
    "the evidence jobctl reads."
)


def acknowledge(stack: JobsComposition) -> None:
    """Acknowledge the findings listed in docs/infrastructure.md, each on its own construct."""
    for job_queue in stack.queues.values():
        _acknowledge_queue(job_queue)
        # What a resource's grant brings to a worker's policy, acknowledged by its kind's provider
        # (sqs_jobs.cdk.resource_providers), once per kind.
        policy = _worker_policy(job_queue)
        for name in job_queue.spec.resources:
            for rule, reason in stack.resources.provided[name].findings:
                _ack(policy, rule, reason)
    for durable in stack.durable_functions.values():
        function = durable.function.node.default_child
        _ack(function, "AwsSolutions-L1", TESTED_RUNTIME)
        _ack(function, "Serverless-LambdaLatestVersion", TESTED_RUNTIME)
        _ack(function, "Serverless-LambdaDLQ", DURABLE_FAILURES)
        # cdk-nag names the finding by the function's logical ID: `<function.Arn>:*` in docs/infrastructure.md.
        logical_id = Stack.of(durable.function).get_logical_id(function)  # type: ignore[arg-type]
        rule = f"AwsSolutions-IAM5[Resource::<{logical_id}.Arn>:*]"
        _ack(durable.policy.node.default_child, rule, DURABLE_EXECUTIONS)
    schedules_dlq = stack.schedules.dead_letter_queue.node.default_child
    _ack(schedules_dlq, "AwsSolutions-SQS3", SCHEDULES_DLQ)
    _ack(schedules_dlq, "Serverless-SQSRedrivePolicy", SCHEDULES_DLQ)


def _worker_policy(job_queue: JobQueue) -> IConstruct | None:
    role = job_queue.function.role
    assert role is not None
    return role.node.find_child("DefaultPolicy").node.default_child


def _acknowledge_queue(job_queue: JobQueue) -> None:
    _ack(_worker_policy(job_queue), "AwsSolutions-IAM5[Resource::*]", XRAY_STAR)
    _ack(job_queue.dead_letter_queue.node.default_child, "Serverless-SQSRedrivePolicy", DLQ_WITHOUT_DLQ)
    _ack(job_queue.function.node.default_child, "Serverless-LambdaDLQ", SYNCHRONOUS_WORKER)
    _ack(job_queue.function.node.default_child, "AwsSolutions-L1", TESTED_RUNTIME)
    _ack(job_queue.function.node.default_child, "Serverless-LambdaLatestVersion", TESTED_RUNTIME)
    # One mapping per priority lane (docs/priorities.md), each with the queue's DLQ as its destination.
    for mapping in (child for child in job_queue.function.node.children if child.node.id.startswith("SqsEventSource")):
        _ack(mapping.node.default_child, "Serverless-LambdaEventSourceMappingDestination", SQS_ESM_DESTINATION)


def _ack(construct: IConstruct | None, rule: str, reason: str) -> None:
    assert construct is not None
    Validations.of(construct).acknowledge(Acknowledgment(id=rule, reason=reason))
