"""Physical names the stack gives its resources, as pure functions (no CDK import).

The stack, the local engine and `jobctl` all derive names from here, so a queue is called the same
everywhere: `<stack_name>-<queue>` and `<stack_name>-<queue>-dlq`.
"""

from __future__ import annotations

import re

# What publishers and operators read (SSM parameter keys and names, the scheduler's names) lives with the
# publisher, in sqs_jobs; re-exported here for the stack.
from sqs_jobs.specs import QueueSpec
from sqs_jobs.stack_names import (
    DLQ_URL,
    LANE_ENDPOINT_KEYS,
    QUEUE_ARN,
    QUEUE_ENDPOINT_KEYS,
    QUEUE_URL,
    SCHEDULE_GROUP,
    SCHEDULE_KEYS,
    SCHEDULER_ROLE_ARN,
    SCHEDULES_DLQ_ARN,
    SCHEDULES_DLQ_URL,
    WORKER_ROLE_ID,
    lane_parameter_name,
    parameter_name,
    recurring_schedule_name,
    schedule_group_name,
    schedules_parameter_name,
)

__all__ = [
    "ALARM_TOPIC_ARN_OUTPUT",
    "BACKLOG",
    "CIRCUIT_OPEN",
    "DASHBOARD_OUTPUT",
    "DLQ_ARRIVALS",
    "DLQ_DEPTH",
    "DLQ_URL",
    "FAILURE_RATE",
    "HEARTBEAT_MISSING",
    "HELD_NEAR_BOUND",
    "IDEMPOTENCY_TABLE_OUTPUT",
    "LANE_ENDPOINT_KEYS",
    "LANE_SIGNALS",
    "OLDEST_MESSAGE_AGE",
    "QUEUE_ARN",
    "QUEUE_ENDPOINT_KEYS",
    "QUEUE_SIGNALS",
    "QUEUE_URL",
    "RETRYING",
    "RUNTIME_FAULTS",
    "SCHEDULER_ROLE_ARN",
    "SCHEDULES_DLQ_ARN",
    "SCHEDULES_DLQ_URL",
    "SCHEDULE_DELIVERIES_FAILED",
    "SCHEDULE_GROUP",
    "SCHEDULE_KEYS",
    "SQS_MAX_NAME_LENGTH",
    "STALLED",
    "WORKER_ERRORS",
    "WORKER_ROLE_ID",
    "WORKER_THROTTLES",
    "alarm_name",
    "alarm_name_prefix",
    "duration_signal",
    "lane_output_key",
    "lane_parameter_name",
    "lane_queue_name",
    "lane_signal",
    "output_key",
    "parameter_name",
    "pascal_case",
    "physical_queue_name",
    "queue_signals",
    "recurring_schedule_name",
    "schedule_group_name",
    "schedules_parameter_name",
]

SQS_MAX_NAME_LENGTH = 80
_SQS_NAME = re.compile(r"[A-Za-z0-9_-]+(\.fifo)?")

_OUTPUT_SUFFIX = {
    QUEUE_URL: "QueueUrl",
    DLQ_URL: "DlqUrl",
    QUEUE_ARN: "QueueArn",
    WORKER_ROLE_ID: "WorkerRoleId",
    SCHEDULER_ROLE_ARN: "SchedulerRoleArn",
}

# Stack outputs that are not per queue.
ALARM_TOPIC_ARN_OUTPUT = "AlarmTopicArn"
IDEMPOTENCY_TABLE_OUTPUT = "IdempotencyTableName"
DASHBOARD_OUTPUT = "DashboardName"

# A queue's alarm signals; its alarm names end with these (`<stack_name>-<queue>-<signal>`).
OLDEST_MESSAGE_AGE = "oldest-message-age"
BACKLOG = "backlog"
DLQ_DEPTH = "dlq-depth"
DLQ_ARRIVALS = "dlq-arrivals"
FAILURE_RATE = "failure-rate"
STALLED = "stalled"
WORKER_ERRORS = "worker-errors"
WORKER_THROTTLES = "worker-throttles"
HEARTBEAT_MISSING = "heartbeat-missing"
RUNTIME_FAULTS = "runtime-faults"
CIRCUIT_OPEN = "circuit-open"
# One job's key failing run after run, before it is dead-lettered (none for a queue that never retries).
RETRYING = "retrying"
# A key held back (rate limit, busy key, open breaker) nearing its max_hold_s, after which refusals spend attempts.
HELD_NEAR_BOUND = "held-near-bound"
# Stack-wide (not per queue): `<stack_name>-schedules-failed-deliveries`.
SCHEDULE_DELIVERIES_FAILED = "schedules-failed-deliveries"
# One signal per queue, in this order, then one duration signal per job (`duration_signal`).
QUEUE_SIGNALS = (
    OLDEST_MESSAGE_AGE,
    BACKLOG,
    DLQ_DEPTH,
    DLQ_ARRIVALS,
    FAILURE_RATE,
    STALLED,
    WORKER_ERRORS,
    WORKER_THROTTLES,
    HEARTBEAT_MISSING,
    RUNTIME_FAULTS,
    CIRCUIT_OPEN,
    RETRYING,
    HELD_NEAR_BOUND,
)


# What each priority lane other than the default (whose queue is the queue's own) has an alarm of its own for: what
# SQS measures of its queue (docs/priorities.md). The worker's own signals are the queue's, whichever lane a record
# came from.
LANE_SIGNALS = (OLDEST_MESSAGE_AGE, BACKLOG, STALLED)


def lane_signal(lane: str, signal: str) -> str:
    """A lane's alarm signal: `<lane>-<signal>`, so its alarm is `<stack_name>-<queue>-<lane>-<signal>`."""
    return f"{lane}-{signal}"


def queue_signals(spec: QueueSpec) -> tuple[str, ...]:
    """The queue-wide signals `spec` has an alarm for: every one, less RETRYING if its jobs are never retried
    (max_attempts 1: a failure is a dead letter at once, which the DLQ alarms see), and less CIRCUIT_OPEN and
    HELD_NEAR_BOUND if its jobs are all durable (its worker runs none of them: no breaker opens, nothing is held;
    their steps' failures are JobFailed and RetryAttempt like any run's)."""
    all_durable = all(job.durable is not None for job in spec.jobs)
    return tuple(
        signal
        for signal in QUEUE_SIGNALS
        if (signal != RETRYING or spec.max_attempts > 1)
        and not (all_durable and signal in (CIRCUIT_OPEN, HELD_NEAR_BOUND))
    )


def physical_queue_name(stack_name: str, queue_name: str, dlq: bool = False, fifo: bool = False) -> str:
    """The SQS queue name of a catalog queue (or of its DLQ) in the stack `stack_name`; FIFO ends in `.fifo`."""
    name = f"{stack_name}-{queue_name}" + ("-dlq" if dlq else "") + (".fifo" if fifo else "")
    if len(name) > SQS_MAX_NAME_LENGTH or not _SQS_NAME.fullmatch(name):
        raise ValueError(
            f"queue name {name!r} is not a valid SQS name (at most {SQS_MAX_NAME_LENGTH} characters of "
            "letters, digits, '-' and '_'); choose a shorter stack_name"
        )
    return name


def lane_queue_name(stack_name: str, spec: QueueSpec, lane: str | None) -> str:
    """The SQS queue name of one of `spec`'s priority lanes: the queue's own for its default lane (so adding lanes
    never replaces the queue), else `<stack_name>-<queue>-<lane>`."""
    if lane is None or lane == spec.default_lane:
        return physical_queue_name(stack_name, spec.name, fifo=spec.fifo)
    return physical_queue_name(stack_name, f"{spec.name}-{lane}")


def lane_output_key(queue_name: str, lane: str, key: str) -> str:
    """The stack output holding a lane's URL or ARN, e.g. `OrdersLaneHighQueueUrl`."""
    if key not in LANE_ENDPOINT_KEYS:
        raise ValueError(f"unknown lane output {key!r}; known: {', '.join(LANE_ENDPOINT_KEYS)}")
    return f"{pascal_case(queue_name)}Lane{pascal_case(lane)}{_OUTPUT_SUFFIX[key]}"


def output_key(queue_name: str, key: str) -> str:
    """The stack output holding a queue's URL, DLQ URL, ARN or worker role ID, e.g. `OrdersQueueUrl`."""
    if key not in QUEUE_ENDPOINT_KEYS:
        raise ValueError(f"unknown queue output {key!r}; known: {', '.join(QUEUE_ENDPOINT_KEYS)}")
    return pascal_case(queue_name) + _OUTPUT_SUFFIX[key]


def alarm_name_prefix(stack_name: str) -> str:
    """Every alarm of the stack starts with this; the alarm topic lets only these alarms publish."""
    return f"{stack_name}-"


def alarm_name(stack_name: str, queue_name: str, signal: str) -> str:
    return f"{alarm_name_prefix(stack_name)}{queue_name}-{signal}"


def duration_signal(job: str) -> str:
    """The signal of a job's near-its-time-limit alarm: `duration-<job>`."""
    return f"duration-{job}"


def pascal_case(name: str) -> str:
    """`order_events` -> `OrderEvents`: construct ids and output keys from catalog names."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[_\-]", name) if part)
