"""A durable job's function: the job's code as Lambda durable executions, started by its queue's worker.

- The function runs `sqs_jobs.durable.entry.handler` with the worker's code, layer, environment and role (so what
  it dead-letters carries the worker role's SenderId, which jobctl reads as the runtime's evidence, and it has the
  job's resources' grants), plus JOBS_DURABLE_JOB; its DurableConfig sets the execution timeout and retention from
  the catalog (`JobSpec.durable`).
- It is invoked through the alias `live` on the current version: "Invoke functions with version numbers or aliases
  to pin executions to specific code versions" (https://docs.aws.amazon.com/lambda/latest/dg/durable-best-practices.html);
  the worker gets the alias's ARN (JOBS_DURABLE_FUNCTION_<JOB>) and lambda:InvokeFunction on exactly that ARN.
- The role may checkpoint: lambda:CheckpointDurableExecution and lambda:GetDurableExecutionState, the actions
  AWS lists for a durable function's execution role, on `<function ARN>:*`: Lambda authorizes them against the
  durable execution's ARN, `<function ARN>:<version>/durable-execution/<name>/<id>`, which an unqualified ARN never
  matches (https://docs.aws.amazon.com/lambda/latest/dg/durable-security.html).
- The worker's heartbeat sweep (sqs_jobs.durable.sweep) reads the function's executions:
  lambda:GetDurableExecution and lambda:GetDurableExecutionHistory on `<function ARN>:*` (authorized against the
  execution's ARN, as above), lambda:ListDurableExecutionsByFunction on the function's ARN and `<function ARN>:*`
  (it names the function, unqualified, so executions of every version are listed: AWS documents no resource type
  for it beside the execution's, so both forms of this one function, never `*`).
- Alarms on Lambda's own durable metrics (AWS/Lambda DurableExecutionFailed, DurableExecutionTimedOut, by
  FunctionName: https://docs.aws.amazon.com/lambda/latest/dg/durable-monitoring.html): a failed execution is also
  a dead letter (the queue's alarms see it), a timed-out one becomes one at the worker's next heartbeat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from sqs_jobs.cdk.naming import alarm_name
from sqs_jobs.cdk.queue_alarms import describe
from sqs_jobs.cdk.worker_code import ARCHITECTURE, RUNTIME
from sqs_jobs.specs import JobSpec, QueueSpec
from sqs_jobs.stack_names import DURABLE_ALIAS, durable_function_name
from sqs_jobs.worker.settings import ENV_DURABLE_JOB, durable_function_env_name

DURABLE_HANDLER = "sqs_jobs.durable.entry.handler"
# The actions a durable function's execution role needs (AWS's minimum policy, durable-security.html).
CHECKPOINT_ACTIONS = ("lambda:CheckpointDurableExecution", "lambda:GetDurableExecutionState")
# What the worker's heartbeat sweep reads of an execution that ended (sqs_jobs.durable.sweep), and the list of
# the function's executions it finds them in.
SWEEP_READ_ACTIONS = ("lambda:GetDurableExecution", "lambda:GetDurableExecutionHistory")
SWEEP_LIST_ACTION = "lambda:ListDurableExecutionsByFunction"
LOG_RETENTION = logs.RetentionDays.ONE_MONTH
DURABLE_FAILED = "durable-failed"
DURABLE_TIMED_OUT = "durable-timed-out"


def durable_signal(signal: str, job: str) -> str:
    """A durable job's alarm's signal: `durable-failed-<job>`, `durable-timed-out-<job>`."""
    return f"{signal}-{job}"


class DurableJobFunction(Construct):
    """`function` with `alias` (what the worker invokes), and `alarms` on its executions failing or timing out."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: QueueSpec,
        job: JobSpec,
        stack_name: str,
        code: lambda_.Code,
        layers: Sequence[lambda_.ILayerVersion],
        role: iam.IRole,
        environment: Mapping[str, str],
        worker: lambda_.Function,
        topic: sns.ITopic,
        retain_logs: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        durable = job.durable
        assert durable is not None
        log_group = logs.LogGroup(
            self,
            "LogGroup",
            retention=LOG_RETENTION,
            removal_policy=RemovalPolicy.RETAIN if retain_logs else RemovalPolicy.DESTROY,
        )
        log_group.grant_write(role)
        self.function = lambda_.Function(
            self,
            "Function",
            function_name=durable_function_name(stack_name, job.name),
            description=f"Runs the durable job {job.name} of the {spec.name} queue, in checkpointed steps",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=DURABLE_HANDLER,
            code=code,
            layers=list(layers),
            role=role,
            timeout=Duration.seconds(durable.function_timeout_s),
            memory_size=durable.memory_mb,
            tracing=lambda_.Tracing.ACTIVE,
            log_group=log_group,
            environment={**environment, ENV_DURABLE_JOB: job.name},
            durable_config=lambda_.DurableConfig(
                execution_timeout=Duration.seconds(durable.execution_timeout_s),
                retention_period=Duration.days(durable.retention_days),
            ),
        )
        self.alias = lambda_.Alias(self, "Live", alias_name=DURABLE_ALIAS, version=self.function.current_version)
        # A policy of its own, not the role's default one: the function waits for the default policy, and these
        # statements name the function and its alias (in the default policy, a circular dependency).
        self.policy = iam.Policy(
            self,
            "StartAndCheckpoint",
            roles=[role],
            statements=[
                iam.PolicyStatement(actions=list(CHECKPOINT_ACTIONS), resources=[f"{self.function.function_arn}:*"]),
                # The heartbeat's sweep: this function's executions, read once they ended.
                iam.PolicyStatement(actions=list(SWEEP_READ_ACTIONS), resources=[f"{self.function.function_arn}:*"]),
                iam.PolicyStatement(
                    actions=[SWEEP_LIST_ACTION],
                    resources=[self.function.function_arn, f"{self.function.function_arn}:*"],
                ),
                # The dispatcher's start: on the alias only.
                iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[self.alias.function_arn]),
            ],
        )
        worker.add_environment(durable_function_env_name(job.name), self.alias.function_arn)

        action = actions.SnsAction(topic)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        show = f"jobctl job show {job.name} <id>"
        for signal, metric, meaning, anchor in (
            (
                DURABLE_FAILED,
                "DurableExecutionFailed",
                f"A durable execution of {job.name} ended FAILED: its record is in the {spec.name} DLQ with evidence.",
                "a-durable-job-failed",
            ),
            (
                DURABLE_TIMED_OUT,
                "DurableExecutionTimedOut",
                f"A durable execution of {job.name} ran past its {durable.execution_timeout_s}s execution timeout "
                f"and was stopped: the {spec.name} worker's next heartbeat dead-letters it (failure timed_out).",
                "a-durable-job-timed-out",
            ),
        ):
            name = durable_signal(signal, job.name)
            alarm = cloudwatch.Alarm(
                self,
                metric,
                alarm_name=alarm_name(stack_name, spec.name, name),
                alarm_description=describe(meaning, anchor, [show, f"jobctl dlq list {spec.name}"]),
                metric=self.function.metric(metric, statistic="Sum", period=Duration.minutes(5)),
                threshold=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
            self.alarms[name] = alarm
