"""A queue's alarms: the oldest job waiting too long, and anything in its DLQ."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from functions.catalog import QueueSpec
from infra.naming import DLQ_DEPTH, OLDEST_MESSAGE_AGE, alarm_name, physical_queue_name

# SQS publishes its metrics every minute; a longer period would delay the page by as much.
PERIOD = Duration.minutes(1)


class QueueAlarms(Construct):
    """`oldest_message_age` and `dlq_depth`, thresholds from the catalog; both notify `topic`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: QueueSpec,
        stack_name: str,
        queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        minutes = spec.alarms.oldest_message_age_s / 60
        dlq_name = physical_queue_name(stack_name, spec.name, dlq=True, fifo=spec.fifo)
        # The article's incident: a hung job found the next morning. Age says "stuck" sooner and more
        # surely than backlog size.
        self.oldest_message_age = cloudwatch.Alarm(
            self,
            "OldestMessageAge",
            alarm_name=alarm_name(stack_name, spec.name, OLDEST_MESSAGE_AGE),
            alarm_description=(
                f"A job on the {spec.name} queue has waited more than {minutes:g} min: the workers are "
                "stuck, failing and retrying, throttled, or too few for the load. Check the worker's errors "
                "and duration, then `jobctl status`; raise max_concurrency in the catalog only if the "
                "downstream can take it."
            ),
            metric=queue.metric_approximate_age_of_oldest_message(
                period=PERIOD,
                statistic="Maximum",
            ),
            threshold=spec.alarms.oldest_message_age_s,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            # No data means an empty queue that SQS stopped reporting (idle for hours): nothing is waiting.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        # The article: alert on the first message in the DLQ.
        self.dlq_depth = cloudwatch.Alarm(
            self,
            "DlqDepth",
            alarm_name=alarm_name(stack_name, spec.name, DLQ_DEPTH),
            alarm_description=(
                f"{spec.alarms.dlq_depth}+ failed job(s) in {dlq_name}: a job failed permanently or ran out "
                "of attempts. `jobctl dlq list` / `jobctl dlq show` give the error; outage: redrive after "
                "recovery; bug: fix, deploy, then redrive; bad data: handle and `jobctl dlq discard`. "
                "Redrive only idempotent jobs in bulk. See docs/runbook.md."
            ),
            metric=dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=PERIOD,
                statistic="Maximum",
            ),
            threshold=spec.alarms.dlq_depth,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            # SQS reports a queue that holds messages; no data means an empty, idle DLQ: all clear.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        action = actions.SnsAction(topic)
        for alarm in (self.oldest_message_age, self.dlq_depth):
            alarm.add_alarm_action(action)
            # Say when it is over too, so nobody keeps digging into a resolved page.
            alarm.add_ok_action(action)
