"""The framework's own housekeeping jobs, added to a project's catalog in one line each:

    Catalog(resources=(..., *MAINTENANCE_RESOURCES), queues=(..., maintenance_queue()))

The weekly DLQ review (dlq_review) summarizes every queue's DLQ to the alarm topic, even when all are empty:
silence means the review didn't run. Specs only here (the standard library and the job contract): a catalog that
imports this stays importable by publishers, jobctl and the CDK app; the job's code is `dlq_review`, which the
worker loads by its handler's name.
"""

from __future__ import annotations

from sqs_jobs.limits import MINUTE
from sqs_jobs.resources import AlarmTopic, DeadLetterQueues
from sqs_jobs.specs import JobSpec, QueueSpec, Schedule

# The resources the review reads, by the names its code uses.
ALARM_TOPIC = "alarm_topic"
DEAD_LETTER_QUEUES = "dead_letter_queues"
MAINTENANCE_RESOURCES = (
    AlarmTopic(name=ALARM_TOPIC, description="the stack's alarm SNS topic, which dlq_review publishes its summary to"),
    DeadLetterQueues(name=DEAD_LETTER_QUEUES, description="every queue's DLQ, read without consuming by dlq_review"),
)
# The article: review the DLQ regularly, e.g. weekly, so an incident isn't buried in old noise.
WEEKLY_REVIEW = Schedule(name="weekly", expression="cron(0 9 ? * MON *)", timezone="UTC")


def dlq_review_job(schedule: Schedule = WEEKLY_REVIEW) -> JobSpec:
    """The DLQ review as a job of any queue, on `schedule`."""
    return JobSpec(
        name="dlq_review",
        handler="sqs_jobs.maintenance.dlq_review",
        description="Summarize every DLQ (counts by error type, oldest age, the jobctl commands) to the alarm topic, "
        "even when all are empty: silence means the review didn't run.",
        resources=(DEAD_LETTER_QUEUES, ALARM_TOPIC),
        schedules=(schedule,),
    )


def maintenance_queue(name: str = "maintenance", schedule: Schedule = WEEKLY_REVIEW) -> QueueSpec:
    """A queue of the framework's housekeeping jobs: the weekly DLQ review."""
    return QueueSpec(
        name=name,
        description="Housekeeping on a clock: the weekly DLQ review.",
        function_timeout_s=2 * MINUTE,
        max_concurrency=2,
        # One review a week: nothing to run beside it.
        parallel_records=1,
        jobs=(dlq_review_job(schedule),),
    )
