"""Batches in the stack: where publishers define them, and where each worker may send a batch's callbacks.

A batch is defined in the idempotency table (its `batch#` items, sqs_jobs.batches), so the table's name is an SSM
parameter publishers read (JobPublisher.from_stack with a dynamodb_client), and `grant_define` lets a publisher
write those items only (`dynamodb:LeadingKeys`). The worker already reads and writes the table; what it gains is
sending to the queues of the jobs its jobs may publish (`JobSpec.publishes`): their routes in its environment
(`JOBS_ROUTES`) and SendMessage on those queues (with their keys), nothing more; and each heartbeat's count of
stalled batches: a Query of the open batches' partitions of the index of things in flight, and the one alarm on
that count (the MAX over the queues' heartbeats: each counts the same batches).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from sqs_jobs.batches import BATCH_ITEM_PREFIX, OPEN_LIFE_PREFIX, STALLED_AFTER_S
from sqs_jobs.cdk.job_queue import JobQueue
from sqs_jobs.cdk.monitoring import job_metric
from sqs_jobs.cdk.naming import alarm_name_prefix
from sqs_jobs.cdk.parameter_reads import grant_parameter_reads
from sqs_jobs.cdk.queue_alarms import describe
from sqs_jobs.specs import Catalog
from sqs_jobs.stack_names import batches_parameter_name
from sqs_jobs.worker.names import LIFE_INDEX, RUNTIME_JOB, STALLED_BATCHES
from sqs_jobs.worker.settings import ENV_ROUTES


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
        topic: sns.ITopic,
        durable_functions: Mapping[str, lambda_.Function] | None = None,
    ) -> None:
        """`durable_functions`: each durable job's function (by job), which runs on its queue's worker role and
        counts the batch members it ends (sqs_jobs.durable.runtime): it is given the worker's routes too."""
        super().__init__(scope, construct_id)
        self._table = table
        self._parameter_name = batches_parameter_name(stack_name)
        self.parameter = ssm.StringParameter(
            self,
            "TableParameter",
            parameter_name=self._parameter_name,
            string_value=table.table_name,
            description="The table publishers define batches in (sqs_jobs.batches; its batch# items)",
        )
        index_arn = f"{table.table_arn}/index/{LIFE_INDEX}"
        for job_queue in queues.values():
            # The heartbeat's count of stalled batches: the open batches' partitions of the index, by their keys.
            job_queue.function.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["dynamodb:Query"],
                    resources=[index_arn],
                    conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{OPEN_LIFE_PREFIX}*"]}},
                )
            )
        self.stalled_alarm = self._stalled_alarm(stack_name, list(queues), topic)
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
            encoded = json.dumps(routes, separators=(",", ":"), sort_keys=True)
            worker.add_environment(ENV_ROUTES, encoded)
            for job in queues[spec.name].spec.jobs:
                if job.durable is not None and durable_functions and job.name in durable_functions:
                    durable_functions[job.name].add_environment(ENV_ROUTES, encoded)
            for target in targets:
                # SendMessage on that queue, and its key's use (GenerateDataKey, Decrypt), as a publisher's.
                queues[target].queue.grant_send_messages(worker)

    def _stalled_alarm(self, stack_name: str, queue_names: list[str], topic: sns.ITopic) -> cloudwatch.Alarm:
        using = {
            f"stalled{index}": job_metric(name, RUNTIME_JOB, STALLED_BATCHES, statistic="Maximum")
            for index, name in enumerate(queue_names)
        }
        alarm = cloudwatch.Alarm(
            self,
            "StalledAlarm",
            alarm_name=f"{alarm_name_prefix(stack_name)}batches-stalled",
            alarm_description=describe(
                f"A batch has had no member end for {STALLED_AFTER_S // 60} minutes while some are still open: a "
                "member stuck retrying, its queue paused or backed up, or moved to a DLQ without the runtime.",
                "a-batch-does-not-complete",
                ["jobctl status", "jobctl batch show ID"],
            ),
            # MAX per timestamp over the queues' heartbeats (each counts the same batches).
            metric=cloudwatch.MathExpression(
                expression=f"MAX([{', '.join(using)}])",
                using_metrics=using,
                period=Duration.minutes(5),
                label="stalled batches",
            ),
            threshold=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            datapoints_to_alarm=1,
            # No heartbeat, no count: the heartbeat's own alarm says so.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        action = actions.SnsAction(topic)
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        return alarm

    def grant_define(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let `grantee` define batches (JobPublisher.batch): PutItem of the table's `batch#` items only, and read
        the parameter naming the table. Sending the members is `JobQueue.grant_publish` of their queues."""
        reading = grant_parameter_reads(self, grantee, [self._parameter_name])
        writing = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["dynamodb:PutItem"],
            resource_arns=[self._table.table_arn],
            conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{BATCH_ITEM_PREFIX}*"]}},
        )
        return writing.combine(reading)
