"""Batches in the stack: where publishers define them, and where each worker may send a batch's callbacks.

A batch is defined in the idempotency table (its `batch#` items, sqs_jobs.batches), so the table's name is an SSM
parameter publishers read (JobPublisher.from_stack with a dynamodb_client), and `grant_define` lets a publisher
write those items only (`dynamodb:LeadingKeys`). The worker already reads and writes the table; what it gains is
sending to the queues of the jobs its jobs may publish (`JobSpec.publishes`): their routes in its environment
(`JOBS_ROUTES`) and SendMessage on those queues (with their keys), nothing more.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from functions.worker.settings import ENV_ROUTES
from infra.job_queue import JobQueue
from sqs_jobs.batches import BATCH_ITEM_PREFIX
from sqs_jobs.specs import Catalog
from sqs_jobs.stack_names import batches_parameter_name


class BatchWorkflows(Construct):
    """The batch table's parameter, the publishers' grant to define batches, and the workers' routes."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stack_name: str,
        catalog: Catalog,
        table: dynamodb.ITable,
        queues: Mapping[str, JobQueue],
    ) -> None:
        super().__init__(scope, construct_id)
        self._table = table
        self.parameter = ssm.StringParameter(
            self,
            "TableParameter",
            parameter_name=batches_parameter_name(stack_name),
            string_value=table.table_name,
            description="The table publishers define batches in (sqs_jobs.batches; its batch# items)",
        )
        for spec in catalog:
            targets = catalog.publish_routes(spec.name)
            if not targets:
                continue
            worker = queues[spec.name].function
            routes = {
                job: [target, queues[target].queue.queue_url]
                for target in targets
                for job in queues[target].spec.job_names
            }
            worker.add_environment(ENV_ROUTES, json.dumps(routes, separators=(",", ":"), sort_keys=True))
            for target in targets:
                # SendMessage on that queue, and its key's use (GenerateDataKey, Decrypt), as a publisher's.
                queues[target].queue.grant_send_messages(worker)

    def grant_define(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let `grantee` define batches (JobPublisher.batch): PutItem of the table's `batch#` items only, and read
        the parameter naming the table. Sending the members is `JobQueue.grant_publish` of their queues."""
        reading = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["ssm:GetParameters"],
            resource_arns=[
                Stack.of(self).format_arn(
                    service="ssm",
                    resource="parameter",
                    resource_name=self.parameter.parameter_name.removeprefix("/"),
                    arn_format=ArnFormat.SLASH_RESOURCE_NAME,
                )
            ],
        )
        writing = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["dynamodb:PutItem"],
            resource_arns=[self._table.table_arn],
            conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{BATCH_ITEM_PREFIX}*"]}},
        )
        return writing.combine(reading)
