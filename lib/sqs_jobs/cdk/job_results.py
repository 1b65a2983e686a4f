"""Job results in the stack: where a service reads how its jobs stand and what they returned (docs/results.md).

Results live in the idempotency table's key records (sqs_jobs.results), so the table's name is an SSM parameter a
service reads (JobPublisher.from_stack with a results_client), and `grant_read` lets it read exactly what a result
is made of: GetItem of key records and durable jobs' records only (`dynamodb:LeadingKeys`), of the attributes
`RESULT_ATTRIBUTES` names only (`dynamodb:Attributes`, with `dynamodb:Select` so no request may ask for more):
never a run's traceback, a dead letter's body or which worker ran it. The conditions are AWS's own, as the IAM
User Guide's example writes them
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_examples_dynamodb_attributes.html).

`grant_send_events` lets a sender complete durable jobs' waits for events (sqs_jobs.events): the same parameter;
GetItem of durable jobs' records only, of what says whether and for what they wait (`EVENT_ATTRIBUTES`; a record's
ID is a hash of its key, so the read can't be narrowed to the named jobs); and
lambda:SendDurableExecutionCallbackSuccess on the named jobs' durable functions' executions (`<function ARN>:*`).
The Lambda API Reference names no resource for the callback actions (a request names only its callback ID); the
grant scopes them as Lambda scopes a durable function's own checkpoint actions, to its executions' ARNs
(https://docs.aws.amazon.com/lambda/latest/dg/durable-security.html).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from sqs_jobs.cdk.parameter_reads import grant_parameter_reads
from sqs_jobs.events import EVENT_ATTRIBUTES, EVENT_KEYS
from sqs_jobs.results import RESULT_ATTRIBUTES, RESULT_KEYS
from sqs_jobs.stack_names import results_parameter_name


class NotDurableJobsError(ValueError):
    """grant_send_events named a job that waits for no event: not the stack's, or not durable."""


class JobResultsReading(Construct):
    """The parameter naming the table results are read from, and the grant to read them."""

    def __init__(self, scope: Construct, construct_id: str, *, stack_name: str, table: dynamodb.ITable) -> None:
        super().__init__(scope, construct_id)
        self._table = table
        self._parameter_name = results_parameter_name(stack_name)
        self.parameter = ssm.StringParameter(
            self,
            "TableParameter",
            parameter_name=self._parameter_name,
            string_value=table.table_name,
            description="The table job results are read from (sqs_jobs.results; its key records)",
        )

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let `grantee` read job results (JobPublisher.result, JobResults): GetItem of key records, of the result's
        attributes only, and the parameter naming the table. The table is encrypted with the AWS-managed key, which
        needs no grant. Reading the contract (which jobs exist) is `JobQueue.grant_publish`'s, or the catalog's."""
        reading = grant_parameter_reads(self, grantee, [self._parameter_name])
        results = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["dynamodb:GetItem"],
            resource_arns=[self._table.table_arn],
            conditions={
                "ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(RESULT_KEYS)},
                "ForAllValues:StringEquals": {"dynamodb:Attributes": list(RESULT_ATTRIBUTES)},
                "StringEqualsIfExists": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
            },
        )
        return results.combine(reading)

    def grant_send_events(self, grantee: iam.IGrantable, functions: Mapping[str, lambda_.IFunction]) -> iam.Grant:
        """Let `grantee` send events to the durable jobs `functions` names (job -> its durable function;
        JobPublisher.send_event, `jobctl job event`): read whether each waits, and complete its wait."""
        reading = grant_parameter_reads(self, grantee, [self._parameter_name])
        # Durable records only. Their IDs are a hash of the job's key (durable_record_id), so no condition can tell one
        # job's from another's: what is per job is the Lambda grant below, which completes only these jobs' waits.
        keys = list(EVENT_KEYS)
        waits = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["dynamodb:GetItem"],
            resource_arns=[self._table.table_arn],
            conditions={
                "ForAllValues:StringLike": {"dynamodb:LeadingKeys": keys},
                "ForAllValues:StringEquals": {"dynamodb:Attributes": list(EVENT_ATTRIBUTES)},
                "StringEqualsIfExists": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
            },
        )
        sends = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["lambda:SendDurableExecutionCallbackSuccess"],
            resource_arns=[f"{functions[job].function_arn}:*" for job in sorted(functions)],
        )
        return waits.combine(sends).combine(reading)
