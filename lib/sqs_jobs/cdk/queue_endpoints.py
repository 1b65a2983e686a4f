"""Where publishers and operators find a queue: stack outputs and SSM parameters."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import CfnOutput
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from sqs_jobs.cdk.naming import (
    DLQ_URL,
    QUEUE_ARN,
    QUEUE_URL,
    SCHEDULER_ROLE_ARN,
    WORKER_ROLE_ID,
    lane_output_key,
    lane_parameter_name,
    output_key,
    parameter_name,
    pascal_case,
)

_MEANING = {
    QUEUE_URL: "URL of",
    DLQ_URL: "dead-letter queue URL of",
    QUEUE_ARN: "ARN of",
    WORKER_ROLE_ID: "unique ID of the worker role (the SenderId of the runtime's own messages) of",
    SCHEDULER_ROLE_ARN: "role EventBridge Scheduler sends scheduled and delayed jobs with, to",
}


class QueueEndpoints(Construct):
    """For each of URL, DLQ URL, ARN, worker role ID and scheduler role ARN: an SSM parameter
    `/<stack>/queues/<queue>/<key>` and an output.

    SSM serves other stacks and services (no CloudFormation export to lock the queue in place); the
    outputs serve people and `jobctl`. Both names come from `sqs_jobs.cdk.naming`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stack_name: str,
        queue_name: str,
        queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        worker_role: iam.Role,
        scheduler_role: iam.IRole,
        lanes: Mapping[str, sqs.IQueue] | None = None,
    ) -> None:
        """`lanes`: the queue's priority lanes other than the default one (whose queue is `queue`), each with an
        SSM parameter `/<stack>/queues/<queue>/lanes/<lane>/url` (and `/arn`) and an output."""
        super().__init__(scope, construct_id)
        values = {
            QUEUE_URL: queue.queue_url,
            DLQ_URL: dead_letter_queue.queue_url,
            QUEUE_ARN: queue.queue_arn,
            WORKER_ROLE_ID: worker_role.role_id,
            SCHEDULER_ROLE_ARN: scheduler_role.role_arn,
        }
        self.parameters: dict[str, ssm.StringParameter] = {}
        for key, value in values.items():
            description = f"{_MEANING[key]} the {queue_name} job queue"
            self.parameters[key] = ssm.StringParameter(
                self,
                f"{pascal_case(key)}Parameter",
                parameter_name=parameter_name(stack_name, queue_name, key),
                string_value=value,
                description=description,
            )
            output = CfnOutput(self, f"{pascal_case(key)}Output", value=value, description=description)
            # A fixed key (e.g. OrdersQueueUrl), not one derived from the construct path.
            output.override_logical_id(output_key(queue_name, key))
        for lane, lane_queue in (lanes or {}).items():
            for key, value in ((QUEUE_URL, lane_queue.queue_url), (QUEUE_ARN, lane_queue.queue_arn)):
                description = f"{_MEANING[key]} the {lane} priority lane of the {queue_name} job queue"
                construct = f"Lane{pascal_case(lane)}{pascal_case(key)}"
                self.parameters[f"{lane}/{key}"] = ssm.StringParameter(
                    self,
                    f"{construct}Parameter",
                    parameter_name=lane_parameter_name(stack_name, queue_name, lane, key),
                    string_value=value,
                    description=description,
                )
                output = CfnOutput(self, f"{construct}Output", value=value, description=description)
                output.override_logical_id(lane_output_key(queue_name, lane, key))
