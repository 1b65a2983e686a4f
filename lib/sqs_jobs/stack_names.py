"""Where a deployed stack publishes what its publishers and operators need: SSM parameter names and the
scheduler's names, as pure functions. The CDK app writes them (sqs_jobs.cdk.naming re-exports this module), the
publisher and jobctl read them.
"""

from __future__ import annotations

import json

DEFAULT_STACK_NAME = "SqsJobs"

# The keys of each queue's SSM parameters and stack outputs: what a publisher or operator needs.
QUEUE_URL = "url"
DLQ_URL = "dlq-url"
QUEUE_ARN = "arn"
# The unique ID of the queue's worker role: SQS names it as the SenderId of what the runtime sends, so jobctl
# can tell the runtime's evidence from attributes a producer set (sqs_jobs.worker.provenance).
WORKER_ROLE_ID = "worker-role-id"
# The role EventBridge Scheduler sends the queue's scheduled jobs with (it may send to that one queue only):
# recurring schedules use it, and publishers pass it when they create a one-time schedule for a delayed job.
SCHEDULER_ROLE_ARN = "scheduler-role-arn"
QUEUE_ENDPOINT_KEYS = (QUEUE_URL, DLQ_URL, QUEUE_ARN, WORKER_ROLE_ID, SCHEDULER_ROLE_ARN)


def parameter_name(stack_name: str, queue_name: str, key: str) -> str:
    """The SSM parameter holding a queue's URL, DLQ URL, ARN or worker role ID: `/<stack_name>/queues/<queue>/<key>`."""
    if key not in QUEUE_ENDPOINT_KEYS:
        raise ValueError(f"unknown queue parameter {key!r}; known: {', '.join(QUEUE_ENDPOINT_KEYS)}")
    return f"/{stack_name}/queues/{queue_name}/{key}"


# A priority lane's own parameters (its queue's URL and ARN; the lanes share the queue's DLQ, worker and scheduler
# role): `/<stack_name>/queues/<queue>/lanes/<lane>/<key>`. The default lane is the queue's own.
LANE_ENDPOINT_KEYS = (QUEUE_URL, QUEUE_ARN)


def lane_parameter_name(stack_name: str, queue_name: str, lane: str, key: str) -> str:
    """The SSM parameter holding a priority lane's URL or ARN (docs/priorities.md)."""
    if key not in LANE_ENDPOINT_KEYS:
        raise ValueError(f"unknown lane parameter {key!r}; known: {', '.join(LANE_ENDPOINT_KEYS)}")
    return f"/{stack_name}/queues/{queue_name}/lanes/{lane}/{key}"


def schedule_group_name(stack_name: str) -> str:
    """The stack's EventBridge Scheduler group: its recurring schedules and the one-time ones of delayed jobs."""
    return f"{stack_name}-jobs"


def recurring_schedule_name(job: str, schedule: str) -> str:
    """A catalog schedule's name in the group: `<job>-<schedule>` (at most 40 + 1 + 40 characters of [a-z0-9_-])."""
    return f"{job}-{schedule}"


# One-time schedules of delayed jobs are named `once-...` in the stack's group; recurring ones never are.
ONE_TIME_PREFIX = "once-"


def one_time_schedule_prefix(queue: str) -> str:
    """What a delayed job's one-time schedule name starts with: `once-<queue>.` (a queue name has no `.`, so one
    queue's prefix never matches another's, and a publisher's grant covers its own queue's schedules only). The
    name is the prefix and 16 random hex digits: at most 5 + 40 + 1 + 16 = 62 of the scheduler's 64 characters."""
    return f"{ONE_TIME_PREFIX}{queue}."


def legacy_one_time_schedule_prefix(job: str) -> str:
    """How wheels of job contract 1 named a delayed job's schedule: `once-<job[:30]>-<time>-<hex>`. Stacks still
    grant it per job of the queue, so those publishers keep working (a job name has no `-`)."""
    return f"{ONE_TIME_PREFIX}{job[:30]}-"


# Stack-wide parameters of the scheduler: `/<stack_name>/schedules/<key>`.
SCHEDULE_GROUP = "group"
# Where the scheduler puts what it could not deliver (a queue of the stack, encrypted, kept 14 days).
SCHEDULES_DLQ_ARN = "dlq-arn"
SCHEDULES_DLQ_URL = "dlq-url"
SCHEDULE_KEYS = (SCHEDULE_GROUP, SCHEDULES_DLQ_ARN, SCHEDULES_DLQ_URL)


def schedules_parameter_name(stack_name: str, key: str) -> str:
    if key not in SCHEDULE_KEYS:
        raise ValueError(f"unknown schedules parameter {key!r}; known: {', '.join(SCHEDULE_KEYS)}")
    return f"/{stack_name}/schedules/{key}"


# EventBridge Scheduler replaces this keyword with the firing's scheduled time (e.g. 2026-12-07T09:00:00Z).
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"


def recurring_input(job: str) -> str:
    """What a catalog schedule sends: the job's envelope with the scheduled time as its ID, so a firing the
    scheduler delivers twice is one job (idempotency), and each firing is its own."""
    return json.dumps({"job": job, "id": SCHEDULED_TIME}, separators=(",", ":"))


def resource_parameter_name(stack_name: str, resource: str) -> str:
    """The SSM parameter holding a catalog resource's value (a table's or bucket's name, a secret's ARN, a URL,
    an address), for services that use the same resource: `/<stack_name>/resources/<resource>`."""
    return f"/{stack_name}/resources/{resource}"


def contract_parameter_name(stack_name: str) -> str:
    """The SSM parameter holding the stack's job contract (sqs_jobs.contract): `/<stack_name>/contract`."""
    return f"/{stack_name}/contract"


def batches_parameter_name(stack_name: str) -> str:
    """The SSM parameter holding the table batches are defined in (the idempotency table, whose `batch#` items a
    publisher may write): `/<stack_name>/batches/table`."""
    return f"/{stack_name}/batches/table"


def results_parameter_name(stack_name: str) -> str:
    """The SSM parameter holding the table job results are read from (the idempotency table, whose key records a
    service granted `grant_read_results` may read): `/<stack_name>/results/table`."""
    return f"/{stack_name}/results/table"


def local_callbacks_parameter_name(stack_name: str) -> str:
    """The local engine's own SSM parameter (never a deployed stack's): the URL where its durable functions take
    Lambda's callback API (sqs_jobs.local.durable), which `jobctl job event` calls on the local engine."""
    return f"/{stack_name}/local/durable-callbacks"


# The alias a durable job's function is invoked through: durable functions are invoked by a qualified ARN, and an
# alias pins each execution to the version it started on (https://docs.aws.amazon.com/lambda/latest/dg/durable-invoking.html).
DURABLE_ALIAS = "live"


def durable_function_name(stack_name: str, job: str) -> str:
    """A durable job's function: `<stack>-<job>-durable` (the job's name is at most 40 characters)."""
    return f"{stack_name}-{job}-durable"
