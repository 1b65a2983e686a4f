"""What the alarms and the dashboard watch, as metrics; and the CloudWatch and Scheduler limits a queue must fit.

Pure helpers that return `cloudwatch.Metric` / `MathExpression` values (no constructs): `QueueAlarms` and
`JobsDashboard` build from the same definitions, so a graph always shows what its alarm watches.

The runtime's metrics (sqs_jobs.worker.observability) are EMF, namespace `SqsJobs`, one series per
(queue, job, service), and for counts with a reason also one per (queue, job, reason, service). A queue-wide figure
is metric math over one metric per job of the catalog, e.g. `SUM([d0, d1])`; failures of messages the runtime
could not read count under the job `(unparseable)`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sqs as sqs

from sqs_jobs.flow_control import DeclaredLimit, KeyConcurrency, RateLimit
from sqs_jobs.limits import METRIC_LAG_S, MINUTE
from sqs_jobs.specs import HEARTBEAT_JOB, QueueSpec
from sqs_jobs.worker.names import (
    CIRCUIT_OPENED,
    DEAD_LETTERED,
    DEFERRED,
    DURATION,
    FAILED,
    HEARTBEAT,
    HELD,
    HOLD_SHARE,
    LIMIT_WAIT,
    METRICS_NAMESPACE,
    RETRIED,
    RETRY_ATTEMPT,
    RUNTIME_FAULT,
    RUNTIME_JOB,
    SERVICE_NAME,
    SUCCEEDED,
    UNPARSEABLE_JOB,
    DeferReason,
)

ONE_MINUTE = Duration.minutes(1)
# The window of the runtime's counts and durations: enough runs to say something, short enough to page soon.
FIVE_MINUTES = Duration.minutes(5)
# How long a backlog must last before it pages: a bulk publish that drains sooner doesn't.
BACKLOG_MINUTES = 5
# A one-minute alarm on SQS's metrics: 1 breaching datapoint among the newest 1 + METRIC_LAG_S minutes. With 1 of 1,
# an evaluation range of fewer periods than the lag (AWS doesn't say how many it fetches) would hold no datapoint.
LATE_TOLERANT_PERIODS = 1 + METRIC_LAG_S // MINUTE
# CloudWatch: an alarm's metric math may reference at most 10 metrics (a hard limit).
ALARM_MAX_METRICS = 10
# CloudWatch: an alarm's period x evaluation periods may cover at most one day.
ALARM_MAX_RANGE_S = 24 * 60 * MINUTE
# The drain rate (messages/s) below which the time to drain is shown as backlog / this: "practically never".
MIN_DRAIN_RATE = 0.001
DURATION_STATISTIC = "p99"
# Metrics that failures of unreadable messages also feed (job dimension `(unparseable)`).
_WITH_UNPARSEABLE = (FAILED, DEAD_LETTERED)


class MonitoringError(ValueError):
    """A queue's alarm settings don't fit what CloudWatch or EventBridge Scheduler accept; lists every problem."""


def problems(spec: QueueSpec) -> list[str]:
    """Every limit the queue's monitoring would break, as sentences (the catalog checks the rest)."""
    where = f"queue {spec.name!r}"
    alarms = spec.alarms
    found: list[str] = []
    # Scheduler rates and alarm periods are whole minutes; an alarm looks back at most a day (the stalled alarm
    # METRIC_LAG_S more than stalled_after_s).
    for label, value, looks_back_s in (
        ("heartbeat_interval_s", alarms.heartbeat_interval_s, 0),
        ("heartbeat_missing_after_s", alarms.heartbeat_missing_after_s, alarms.heartbeat_missing_after_s),
        ("stalled_after_s", alarms.stalled_after_s, alarms.stalled_after_s + METRIC_LAG_S),
    ):
        if value % MINUTE:
            found.append(f"{where}: alarms.{label} {value} must be a whole number of minutes")
        if looks_back_s > ALARM_MAX_RANGE_S:
            found.append(f"{where}: alarms.{label} {value} is over CloudWatch's one-day alarm range")
    metrics = len(counted_jobs(spec, SUCCEEDED)) + len(counted_jobs(spec, FAILED))
    if metrics > ALARM_MAX_METRICS:
        found.append(
            f"{where}: its {len(spec.jobs)} jobs need {metrics} metrics in the failure-rate alarm, over "
            f"CloudWatch's {ALARM_MAX_METRICS} per alarm; split the queue"
        )
    return found


def check(*specs: QueueSpec) -> None:
    """Raise one MonitoringError listing every problem of every queue given."""
    found = [problem for spec in specs for problem in problems(spec)]
    if found:
        raise MonitoringError("cannot monitor the catalog: " + "; ".join(found))


def counted_jobs(spec: QueueSpec, metric: str) -> tuple[str, ...]:
    """The job dimensions a queue-wide sum of `metric` adds up."""
    return (*spec.job_names, UNPARSEABLE_JOB) if metric in _WITH_UNPARSEABLE else spec.job_names


def job_metric(
    queue: str,
    job: str,
    metric: str,
    *,
    statistic: str = "Sum",
    period: Duration = FIVE_MINUTES,
    label: str | None = None,
    reason: str = "",
) -> cloudwatch.Metric:
    """One of the runtime's EMF metrics for one job of one queue; with `reason`, only the counts of that reason
    (the runtime's second series of a count that has one)."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=metric,
        dimensions_map={"queue": queue, "job": job, "service": SERVICE_NAME, **({"reason": reason} if reason else {})},
        statistic=statistic,
        period=period,
        label=label,
    )


def per_job(
    spec: QueueSpec, metric: str, id_prefix: str, reason: str = "", jobs: Sequence[str] | None = None
) -> dict[str, cloudwatch.IMetric]:
    """`{"<prefix>0": <metric of job 0>, ...}`: one Sum per counted job (or `jobs`; of `reason` only, if given),
    for metric math."""
    return {
        f"{id_prefix}{index}": job_metric(spec.name, job, metric, reason=reason)
        for index, job in enumerate(counted_jobs(spec, metric) if jobs is None else jobs)
    }


def worker_run_jobs(spec: QueueSpec) -> list[str]:
    """The queue's jobs its worker runs: not the durable ones (it only starts their executions), which no breaker
    or limit in the worker can ever hold."""
    return [job.name for job in spec.jobs if job.durable is None]


def sum_of(ids: Sequence[str]) -> str:
    """Metric math adding up series at each timestamp; a series without a datapoint there adds nothing."""
    return f"SUM([{', '.join(ids)}])"


def queue_total(
    spec: QueueSpec, metric: str, id_prefix: str, label: str, reason: str = "", jobs: Sequence[str] | None = None
) -> cloudwatch.MathExpression:
    """`metric` summed over the queue's jobs (or `jobs`; of `reason` only, if given), per 5 minutes."""
    using = per_job(spec, metric, id_prefix, reason, jobs)
    return cloudwatch.MathExpression(
        expression=sum_of(list(using)), using_metrics=using, period=FIVE_MINUTES, label=label
    )


def dead_lettered(spec: QueueSpec) -> cloudwatch.MathExpression:
    return queue_total(spec, DEAD_LETTERED, "dead", "dead-lettered")


def outcomes(spec: QueueSpec) -> list[cloudwatch.IMetric]:
    """Succeeded, failed, retried and dead-lettered runs of the queue's jobs, per 5 minutes."""
    return [
        queue_total(spec, SUCCEEDED, "ok", "succeeded"),
        queue_total(spec, FAILED, "failed", "failed"),
        queue_total(spec, RETRIED, "retried", "retried"),
        dead_lettered(spec),
    ]


def failure_rate(spec: QueueSpec) -> cloudwatch.MathExpression:
    """failed / (succeeded + failed) over 5 minutes, counted only from `alarms.failure_rate_min_runs` runs on:
    below that (a quiet queue, and no runs at all: no division by zero) it is 0."""
    succeeded = per_job(spec, SUCCEEDED, "ok")
    failed = per_job(spec, FAILED, "failed")
    runs = sum_of([*succeeded, *failed])
    return cloudwatch.MathExpression(
        expression=f"IF({runs} >= {spec.alarms.failure_rate_min_runs}, {sum_of(list(failed))} / {runs}, 0)",
        using_metrics={**succeeded, **failed},
        period=FIVE_MINUTES,
        label="failure rate",
    )


def stalled(queue: sqs.IQueue) -> cloudwatch.MathExpression:
    """1 for each minute in which messages waited and none was deleted, else 0, on every minute of the alarm's query:
    FILL gives a minute without a delete datapoint 0 deletes, and the minutes whose datapoints SQS has not shown yet
    (no `visible`, which counts as 0) a real 0 (not stalled)."""
    return cloudwatch.MathExpression(
        expression="IF(visible > 0 AND FILL(deleted, 0) == 0, 1, 0)",
        using_metrics={
            "visible": queue.metric_approximate_number_of_messages_visible(statistic="Minimum", period=ONE_MINUTE),
            "deleted": queue.metric_number_of_messages_deleted(statistic="Sum", period=ONE_MINUTE),
        },
        period=ONE_MINUTE,
        label="waiting and nothing deleted",
    )


def backlog_periods() -> tuple[int, int]:
    """(M, N) of the backlog alarm, on one-minute datapoints: above the threshold in 5 of the newest 5 + lag minutes.
    The newest minutes are missing while SQS's datapoints are late; N leaves room for them, so whatever the
    evaluation range, 5 real minutes decide."""
    return BACKLOG_MINUTES, BACKLOG_MINUTES + METRIC_LAG_S // MINUTE


def stalled_periods(spec: QueueSpec) -> tuple[int, int]:
    """(M, N) of the stalled alarm: stalled in M of the N newest minutes. M is stalled_after_s in minutes (`check`
    makes it whole); N adds METRIC_LAG_S, because the newest minutes whose SQS datapoints are late are 0 (see
    `stalled`): with M of M the alarm could never fire while SQS's metrics lag."""
    stalled_minutes = math.ceil(spec.alarms.stalled_after_s / MINUTE)
    return stalled_minutes, stalled_minutes + METRIC_LAG_S // MINUTE


def time_to_drain(queue: sqs.IQueue) -> cloudwatch.MathExpression:
    """Backlog / max(deletes per second, MIN_DRAIN_RATE): how long the backlog lasts at the current pace."""
    rate = cloudwatch.MathExpression(
        expression="FILL(deleted, 0) / PERIOD(deleted)",
        using_metrics={"deleted": queue.metric_number_of_messages_deleted(statistic="Sum", period=FIVE_MINUTES)},
        period=FIVE_MINUTES,
        label="deleted per second",
    )
    return cloudwatch.MathExpression(
        expression=f"visible / IF(rate > {MIN_DRAIN_RATE}, rate, {MIN_DRAIN_RATE})",
        using_metrics={
            "visible": queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=FIVE_MINUTES),
            "rate": rate,
        },
        period=FIVE_MINUTES,
        label="estimated time to drain (s)",
    )


def duration(spec: QueueSpec, job: str) -> cloudwatch.Metric:
    """p99 of the job's run time (milliseconds) over 5 minutes."""
    return job_metric(spec.name, job, DURATION, statistic=DURATION_STATISTIC)


def duration_threshold_ms(spec: QueueSpec, job: str) -> float:
    return spec.alarms.duration_ratio * spec.time_limit_s(job) * 1000


def time_limit_ms(spec: QueueSpec, job: str) -> int:
    return spec.time_limit_s(job) * 1000


def runtime_faults(spec: QueueSpec) -> cloudwatch.Metric:
    """Failures of the runtime's own AWS resources (idempotency table, DLQ, its queue), per 5 minutes."""
    return job_metric(spec.name, RUNTIME_JOB, RUNTIME_FAULT, label="runtime faults")


def circuit_openings(spec: QueueSpec) -> cloudwatch.Metric:
    """Times a circuit breaker of a downstream of the queue's jobs opened in a worker (any downstream: the reason
    dimension names it), per 5 minutes."""
    return job_metric(spec.name, RUNTIME_JOB, CIRCUIT_OPENED, label="circuit openings")


def circuit_held(spec: QueueSpec) -> cloudwatch.MathExpression:
    """Records handed back because an open breaker refused a call their job needed (JobDeferred, reason
    circuit_open), summed over the jobs its worker runs, per 5 minutes."""
    return queue_total(
        spec, DEFERRED, "held", "held by open breakers", reason=DeferReason.CIRCUIT_OPEN, jobs=worker_run_jobs(spec)
    )


def heartbeats(spec: QueueSpec, period: Duration = ONE_MINUTE) -> cloudwatch.Metric:
    """Heartbeats the worker recorded (job `heartbeat`), summed per `period`."""
    return job_metric(spec.name, HEARTBEAT_JOB, HEARTBEAT, period=period)


def heartbeat_minutes(spec: QueueSpec) -> cloudwatch.MathExpression:
    """Heartbeats per minute, 0 in every minute of the alarm's query without one. One period of
    heartbeat_missing_after_s would not do: a past period holding the last heartbeat is a real datapoint, and while
    it stays in the alarm's evaluation range CloudWatch ignores missing data and the alarm stays OK."""
    return cloudwatch.MathExpression(
        expression="FILL(beats, 0)",
        using_metrics={"beats": heartbeats(spec)},
        period=ONE_MINUTE,
        label="heartbeats per minute",
    )


def heartbeat_periods(spec: QueueSpec) -> int:
    """Minutes without a heartbeat before the alarm fires (`check` makes heartbeat_missing_after_s whole minutes)."""
    return math.ceil(spec.alarms.heartbeat_missing_after_s / MINUTE)


def _most_over_jobs(
    spec: QueueSpec, metric: str, prefix: str, label: str, jobs: Sequence[str] | None = None
) -> cloudwatch.MathExpression:
    """MAX over the queue's jobs (or `jobs`) of `metric`'s Maximum per 5 minutes. MAX of an array is per timestamp
    (not the whole-query number AWS advises against in alarms)."""
    using = {
        f"{prefix}{index}": job_metric(spec.name, job, metric, statistic="Maximum")
        for index, job in enumerate(spec.job_names if jobs is None else jobs)
    }
    return cloudwatch.MathExpression(
        expression=f"MAX([{', '.join(using)}])", using_metrics=using, period=FIVE_MINUTES, label=label
    )


def retry_attempts(spec: QueueSpec) -> cloudwatch.MathExpression:
    """The most runs in a row one key of the queue's jobs failed and will be retried after, per 5 minutes: MAX over
    the jobs of RetryAttempt's Maximum."""
    return _most_over_jobs(spec, RETRY_ATTEMPT, "attempt", "most failed runs in a row")


def hold_share(spec: QueueSpec) -> cloudwatch.MathExpression:
    """The most any held key of the queue's jobs had used of its max_hold_s by the time it is due again, per
    5 minutes: MAX over the jobs of HoldShare's Maximum. Every hold samples it: a rate limit's, a busy key's and an
    open breaker's. A durable job is never held (its worker only starts it), so it is left out."""
    return _most_over_jobs(spec, HOLD_SHARE, "share", "longest hold, share of its bound", worker_run_jobs(spec))


def flow_held(spec: QueueSpec, limits: Sequence[DeclaredLimit]) -> list[cloudwatch.IMetric]:
    """Records handed back by flow control per 5 minutes, summed over the queue's jobs: by rate limits
    (JobDeferred, reason rate_limited) if it has any, and by busy keys (key_busy) if it has a concurrency limit: a
    line for a reason its limits can't give would stay empty."""
    lines: list[cloudwatch.IMetric] = []
    if any(isinstance(declared.limit, RateLimit) for declared in limits):
        lines.append(queue_total(spec, DEFERRED, "rated", "held by rate limits", reason=DeferReason.RATE_LIMITED))
    if any(isinstance(declared.limit, KeyConcurrency) for declared in limits):
        lines.append(queue_total(spec, DEFERRED, "busy", "held by busy keys", reason=DeferReason.KEY_BUSY))
    return lines


def held_by_holder(spec: QueueSpec) -> cloudwatch.SearchExpression:
    """Records held per 5 minutes, one line per holder (JobHeld of the pseudo-job `(runtime)`, its reason the
    limit's name or an open breaker's downstream). A SEARCH: the holders are data (an endpoint's limit, a breaker's
    host), not known at synth. Dashboards may use one; alarms may not (docs/monitoring.md cites AWS)."""
    schema = f"{{{METRICS_NAMESPACE},job,queue,reason,service}}"
    terms = f'MetricName="{HELD}" queue="{spec.name}" job="{RUNTIME_JOB}" service="{SERVICE_NAME}"'
    return cloudwatch.SearchExpression(
        expression=f"SEARCH('{schema} {terms}', 'Sum', {int(FIVE_MINUTES.to_seconds())})",
        label="held by",
        period=FIVE_MINUTES,
    )


def limit_waits(spec: QueueSpec) -> list[cloudwatch.Metric]:
    """p99 per 5 minutes of how long a run of each rate-limited job waited for its token in its invocation (ms)."""
    return [
        job_metric(spec.name, job.name, LIMIT_WAIT, statistic=DURATION_STATISTIC, label=f"{job.name} p99")
        for job in spec.jobs
        if job.rate_limit is not None
    ]


# EventBridge Scheduler's metrics of a schedule group (namespace AWS/Scheduler, dimension ScheduleGroup), each
# reported only when it is not zero: a failed send to the target (retried), and what became of one given up on.
SCHEDULER_NAMESPACE = "AWS/Scheduler"
SCHEDULER_FAILURE_METRICS = {
    "errors": "TargetErrorCount",
    "dead": "InvocationsSentToDeadLetterCount",
    "undeadlettered": "InvocationsFailedToBeSentToDeadLetterCount",
    "dropped": "InvocationDroppedCount",
}


def scheduler_metric(group_name: str, metric: str, label: str | None = None) -> cloudwatch.Metric:
    """One of EventBridge Scheduler's counts for the schedule group, summed per 5 minutes."""
    return cloudwatch.Metric(
        namespace=SCHEDULER_NAMESPACE,
        metric_name=metric,
        dimensions_map={"ScheduleGroup": group_name},
        statistic="Sum",
        period=FIVE_MINUTES,
        label=label,
    )


def scheduled_delivery_failures(dead_letter_queue: sqs.IQueue, group_name: str) -> cloudwatch.MathExpression:
    """Per 5 minutes: the schedules DLQ's depth plus every failure count of the group. At least 1 means a delivery
    failed: a send was refused (retried, but a refusal is mostly a broken role, key or policy that retries won't fix),
    or one was given up on (dead-lettered, dropped, or lost because even the DLQ refused it). The depth keeps the
    sum up until someone has looked at the dead-letter events."""
    using: dict[str, cloudwatch.IMetric] = {
        "depth": dead_letter_queue.metric_approximate_number_of_messages_visible(
            statistic="Maximum", period=FIVE_MINUTES
        ),
        **{key: scheduler_metric(group_name, metric) for key, metric in SCHEDULER_FAILURE_METRICS.items()},
    }
    return cloudwatch.MathExpression(
        expression=sum_of(list(using)), using_metrics=using, period=FIVE_MINUTES, label="failed deliveries"
    )
