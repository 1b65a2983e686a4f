"""What every alarm of a catalog queue must be, as checks on a synthesized template.

Used on the shared synth (the real catalog, defaults) and on a stack built from a catalog with other thresholds
(test_monitoring_overrides.py), so the same checks prove the defaults and that overrides are followed. The
expected signals, runbook anchors and commands are written out here, not imported from lib/sqs_jobs/cdk/.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqs_jobs.cdk.naming import alarm_name
from sqs_jobs.limits import MINUTE
from sqs_jobs.specs import HEARTBEAT_JOB, QueueSpec
from sqs_jobs.worker.names import METRICS_NAMESPACE, SERVICE_NAME
from tests.infra.cfn import Resources, find_one, props, queue_id, render, worker_id
from tests.infra.metric_math import Alarm, evaluate

UNPARSEABLE = "(unparseable)"
FIVE_MINUTES = 5 * MINUTE
RUNBOOK = "docs/runbook.md"

# signal -> (runbook anchor, what to run first; {q} is the queue's name)
SIGNALS: dict[str, tuple[str, tuple[str, ...]]] = {
    "oldest-message-age": ("oldest-message-too-old", ("jobctl status {q}",)),
    "backlog": ("backlog-too-large", ("jobctl status {q}",)),
    "dlq-depth": ("dlq-has-messages", ("jobctl status {q}", "jobctl dlq list {q}")),
    "dlq-arrivals": ("jobs-dead-lettered", ("jobctl dlq list {q}",)),
    "failure-rate": ("failure-rate-high", ("jobctl status {q}",)),
    "stalled": ("consumer-stalled", ("jobctl status {q}",)),
    "worker-errors": ("worker-errors-or-throttles", ("jobctl status {q}",)),
    "worker-throttles": ("worker-errors-or-throttles", ("jobctl status {q}",)),
    "heartbeat-missing": ("heartbeat-missing", ("jobctl status {q}",)),
    "runtime-faults": ("runtime-faults", ("jobctl status {q}",)),
    "circuit-open": ("circuit-open", ("jobctl status {q}",)),
    "retrying": ("a-job-failing-again-and-again", ("jobctl status {q}",)),
    "held-near-bound": ("hold-near-its-bound", ("jobctl status {q}",)),
}
DURATION_ANCHOR = "jobs-near-their-time-limit"
# SQS's and the runtime's metrics may show up to this many minutes late (the catalog's METRIC_LAG_S).
LAG_MINUTES = 2


def signals(spec: QueueSpec) -> list[str]:
    """Every alarm signal the queue must have: the queue-wide ones (no retrying alarm where nothing is retried; no
    circuit-open or held-near-bound alarm where every job is durable: its worker runs none), and one duration alarm
    per job."""
    all_durable = all(job.durable is not None for job in spec.jobs)
    queue_wide = [
        signal
        for signal in SIGNALS
        if (signal != "retrying" or spec.max_attempts > 1)
        and not (all_durable and signal in ("circuit-open", "held-near-bound"))
    ]
    return [*queue_wide, *(f"duration-{job}" for job in spec.job_names)]


@dataclass(frozen=True)
class Metric:
    """One metric an alarm reads, rendered: namespace, name, dimensions, statistic, period."""

    namespace: str
    name: str
    dimensions: dict[str, str]
    statistic: str
    period: int


@dataclass(frozen=True)
class QueueUnderTest:
    """One catalog queue in a synthesized template, and the value its alarms' actions must hold."""

    resources: Resources
    stack_name: str
    spec: QueueSpec
    action: object

    def alarm(self, signal: str) -> dict[str, Any]:
        name = alarm_name(self.stack_name, self.spec.name, signal)
        key = find_one(self.resources, "AWS::CloudWatch::Alarm", lambda p: p["AlarmName"] == name)
        return dict(props(self.resources, key))

    def queue_name(self, *, dlq: bool = False) -> str:
        return f"{queue_id(self.resources, self.stack_name, self.spec, dlq=dlq)}.QueueName"

    def function_name(self) -> str:
        return f"Ref:{worker_id(self.resources, self.spec)}"

    def job_dimensions(self, job: str) -> dict[str, str]:
        return {"queue": self.spec.name, "job": job, "service": SERVICE_NAME}

    def model(self, signal: str) -> tuple[Alarm, dict[str, tuple[str, str]]]:
        """The alarm as CloudWatch evaluates it, and what each of its metric IDs reads, as (metric name, subject):
        subject `queue` or `dlq` for SQS, `function` for Lambda, else the job of the runtime's metric."""
        properties = self.alarm(signal)
        if "Metrics" in properties:
            metrics = {q["Id"]: _metric(q["MetricStat"]) for q in properties["Metrics"] if "MetricStat" in q}
        else:
            metrics = {"m": single_metric(properties)}
        return Alarm.from_properties(properties), {key: (m.name, self._subject(m)) for key, m in metrics.items()}

    def _subject(self, metric: Metric) -> str:
        if metric.namespace == "AWS/SQS":
            queue = metric.dimensions["QueueName"]
            assert queue in (self.queue_name(), self.queue_name(dlq=True)), queue
            return "dlq" if queue == self.queue_name(dlq=True) else "queue"
        if metric.namespace == "AWS/Lambda":
            assert metric.dimensions == {"FunctionName": self.function_name()}
            return "function"
        assert metric.namespace == METRICS_NAMESPACE, metric
        assert metric.dimensions == self.job_dimensions(metric.dimensions["job"]), metric
        return metric.dimensions["job"]


def _metric(stat: Mapping[str, Any]) -> Metric:
    metric = stat["Metric"]
    return Metric(
        namespace=metric["Namespace"],
        name=metric["MetricName"],
        dimensions={item["Name"]: render(item["Value"]) for item in metric.get("Dimensions", [])},
        statistic=stat["Stat"],
        period=stat["Period"],
    )


def single_metric(alarm: Mapping[str, Any]) -> Metric:
    """The one metric of a plain alarm, whichever form CloudFormation holds it in."""
    if "Metrics" in alarm:
        (query,) = alarm["Metrics"]
        assert query.get("ReturnData", True), query
        return _metric(query["MetricStat"])
    return Metric(
        namespace=alarm["Namespace"],
        name=alarm["MetricName"],
        dimensions={item["Name"]: render(item["Value"]) for item in alarm.get("Dimensions", [])},
        statistic=alarm.get("Statistic") or alarm["ExtendedStatistic"],
        period=alarm["Period"],
    )


def math(alarm: Mapping[str, Any]) -> tuple[str, dict[str, Metric]]:
    """A metric-math alarm: the expression it alarms on, and its metrics by ID."""
    queries = alarm["Metrics"]
    (returned,) = [query for query in queries if query.get("ReturnData", True)]
    metrics = {query["Id"]: _metric(query["MetricStat"]) for query in queries if "MetricStat" in query}
    assert len(metrics) <= 10, "CloudWatch allows at most 10 metrics in an alarm's metric math"
    assert len(queries) == len(metrics) + 1, "one expression, the rest metrics"
    return str(returned["Expression"]), metrics


def ids_of(metrics: Mapping[str, Metric], name: str) -> dict[str, str]:
    """metric ID -> job, for the runtime metric `name`."""
    return {key: metric.dimensions["job"] for key, metric in metrics.items() if metric.name == name}


def check_common(under_test: QueueUnderTest, signal: str) -> None:
    """Every alarm: its name, the topic on ALARM and on OK, and a description with meaning, runbook and command."""
    alarm = under_test.alarm(signal)
    spec = under_test.spec
    anchor, first = SIGNALS.get(signal, (DURATION_ANCHOR, ("jobctl status {q}",)))
    assert alarm["AlarmActions"] == alarm["OKActions"] == [under_test.action]
    assert alarm.get("ActionsEnabled", True) is True
    description = alarm["AlarmDescription"]
    assert len(description) <= 1024, "CloudWatch's limit for an alarm description"
    meaning, _, rest = description.partition(f" Runbook: {RUNBOOK}#{anchor}. First: ")
    assert rest, f"no runbook anchor #{anchor} in {description!r}"
    assert spec.name in meaning or signal.startswith("duration-"), meaning
    for command in first:
        assert command.format(q=spec.name) in rest.split("; "), rest
    # Every period must breach, except where SQS's lag needs room (M of N).
    if signal not in ("stalled", "backlog", "oldest-message-age", "dlq-depth"):
        assert alarm["DatapointsToAlarm"] == alarm["EvaluationPeriods"]


def check_oldest_message_age(under_test: QueueUnderTest) -> None:
    alarm = under_test.alarm("oldest-message-age")
    metric = single_metric(alarm)
    assert metric == Metric(
        "AWS/SQS", "ApproximateAgeOfOldestMessage", {"QueueName": under_test.queue_name()}, "Maximum", MINUTE
    )
    assert alarm["Threshold"] == under_test.spec.alarms.oldest_message_age_s
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    # One breaching minute among the newest 1 + LAG_MINUTES: seen however late it is.
    assert (alarm["DatapointsToAlarm"], alarm["EvaluationPeriods"]) == (1, 1 + LAG_MINUTES)
    assert alarm["TreatMissingData"] == "notBreaching"
    assert "received 3+ times" in alarm["AlarmDescription"]
    assert f"{under_test.spec.alarms.oldest_message_age_s // MINUTE} min" in alarm["AlarmDescription"]


def check_backlog(under_test: QueueUnderTest) -> None:
    alarm = under_test.alarm("backlog")
    metric = single_metric(alarm)
    # Above the threshold in 5 one-minute datapoints, among the newest 5 + LAG_MINUTES.
    assert metric == Metric(
        "AWS/SQS", "ApproximateNumberOfMessagesVisible", {"QueueName": under_test.queue_name()}, "Minimum", MINUTE
    )
    assert alarm["Threshold"] == under_test.spec.alarms.backlog
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert (alarm["DatapointsToAlarm"], alarm["EvaluationPeriods"]) == (5, 5 + LAG_MINUTES)
    assert alarm["TreatMissingData"] == "notBreaching"


def check_dlq_depth(under_test: QueueUnderTest) -> None:
    alarm = under_test.alarm("dlq-depth")
    metric = single_metric(alarm)
    assert metric == Metric(
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        {"QueueName": under_test.queue_name(dlq=True)},
        "Maximum",
        MINUTE,
    )
    assert alarm["Threshold"] == under_test.spec.alarms.dlq_depth
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert (alarm["DatapointsToAlarm"], alarm["EvaluationPeriods"]) == (1, 1 + LAG_MINUTES)
    assert alarm["TreatMissingData"] == "notBreaching"
    assert "redrive" in alarm["AlarmDescription"]


def check_dlq_arrivals(under_test: QueueUnderTest) -> None:
    alarm = under_test.alarm("dlq-arrivals")
    expression, metrics = math(alarm)
    dead = ids_of(metrics, "JobDeadLettered")
    assert dead.keys() == metrics.keys()
    assert sorted(dead.values()) == sorted([*under_test.spec.job_names, UNPARSEABLE])
    for key, job in dead.items():
        assert metrics[key] == Metric(
            METRICS_NAMESPACE, "JobDeadLettered", under_test.job_dimensions(job), "Sum", FIVE_MINUTES
        )
    # Every job's dead letters count, a job without a datapoint adds nothing, no data is no data.
    for key in dead:
        assert evaluate(expression, {other: 2.0 if other == key else None for other in dead}) == 2.0
    assert evaluate(expression, dict.fromkeys(dead, 1.0)) == len(dead)
    assert evaluate(expression, dict.fromkeys(dead)) is None
    assert alarm["Threshold"] == under_test.spec.alarms.dlq_arrivals
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    # The runtime emits nothing when nothing is dead-lettered.
    assert (alarm["EvaluationPeriods"], alarm["TreatMissingData"]) == (1, "notBreaching")


def check_failure_rate(under_test: QueueUnderTest) -> None:
    alarm = under_test.alarm("failure-rate")
    expression, metrics = math(alarm)
    succeeded = ids_of(metrics, "JobSucceeded")
    failed = ids_of(metrics, "JobFailed")
    assert succeeded.keys() | failed.keys() == metrics.keys()
    assert sorted(succeeded.values()) == sorted(under_test.spec.job_names)
    assert sorted(failed.values()) == sorted([*under_test.spec.job_names, UNPARSEABLE])
    for metric in metrics.values():
        assert metric == Metric(
            METRICS_NAMESPACE, metric.name, under_test.job_dimensions(metric.dimensions["job"]), "Sum", FIVE_MINUTES
        )

    def rate(ok: float | None, bad: float | None, unparseable: float | None = None) -> float | None:
        values: dict[str, float | None] = dict.fromkeys(metrics)
        first_ok, first_failed = next(iter(succeeded)), next(k for k, job in failed.items() if job != UNPARSEABLE)
        (unparseable_id,) = [k for k, job in failed.items() if job == UNPARSEABLE]
        values.update({first_ok: ok, first_failed: bad, unparseable_id: unparseable})
        return evaluate(expression, values)

    least = under_test.spec.alarms.failure_rate_min_runs
    assert least > 2
    assert rate(9 * least, least) == 0.1
    assert rate(None, least) == 1.0, "every run failing must still compute (no successes emit no data)"
    assert rate(0, 0) == 0.0, "no division by zero"
    assert rate(least, None, least) == 0.5, "unparseable messages' failures count"
    assert rate(1, 1) == 0.0, "a quiet queue: one failure in two runs is no rate to page on"
    assert rate(None, least - 1) == 0.0, "below the minimum volume, even all failing says nothing"
    assert rate(least - 1, None) == 0.0, "too few runs: 0, whatever failed"
    assert rate(5 * least, None) == 0.0, "enough runs and no failure reported: a missing failure count is 0"
    assert rate(None, None) is None
    assert alarm["Threshold"] == under_test.spec.alarms.failure_rate
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert (alarm["EvaluationPeriods"], alarm["TreatMissingData"]) == (1, "notBreaching")


def check_stalled(under_test: QueueUnderTest) -> None:
    alarm = under_test.alarm("stalled")
    expression, metrics = math(alarm)
    queue = {"QueueName": under_test.queue_name()}
    by_name = {metric.name: key for key, metric in metrics.items()}
    assert set(by_name) == {"ApproximateNumberOfMessagesVisible", "NumberOfMessagesDeleted"}
    visible, deleted = by_name["ApproximateNumberOfMessagesVisible"], by_name["NumberOfMessagesDeleted"]
    assert metrics[visible] == Metric("AWS/SQS", "ApproximateNumberOfMessagesVisible", queue, "Minimum", MINUTE)
    assert metrics[deleted] == Metric("AWS/SQS", "NumberOfMessagesDeleted", queue, "Sum", MINUTE)
    assert evaluate(expression, {visible: 5, deleted: 0}) == 1
    assert evaluate(expression, {visible: 5, deleted: None}) == 1, "no delete datapoint is no delete"
    assert evaluate(expression, {visible: 5, deleted: 2}) == 0
    assert evaluate(expression, {visible: 0, deleted: 0}) == 0
    # A minute whose datapoints SQS has not shown yet is a real 0 (FILL), not a missing point.
    assert evaluate(expression, {visible: None, deleted: None}) == 0
    assert alarm["Threshold"] == 1
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    # Stalled in every minute of stalled_after_s, among as many minutes more as SQS's metrics may be late.
    minutes = under_test.spec.alarms.stalled_after_s // MINUTE
    assert (alarm["DatapointsToAlarm"], alarm["EvaluationPeriods"]) == (minutes, minutes + LAG_MINUTES)
    assert alarm["TreatMissingData"] == "notBreaching"
    assert f"in {minutes} of the last {minutes + LAG_MINUTES} minutes" in alarm["AlarmDescription"]


def _check_worker(under_test: QueueUnderTest, signal: str, metric_name: str) -> None:
    alarm = under_test.alarm(signal)
    metric = single_metric(alarm)
    assert metric == Metric("AWS/Lambda", metric_name, {"FunctionName": under_test.function_name()}, "Sum", 300)
    assert alarm["Threshold"] == 0
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert (alarm["EvaluationPeriods"], alarm["TreatMissingData"]) == (1, "notBreaching")


def check_worker_errors(under_test: QueueUnderTest) -> None:
    _check_worker(under_test, "worker-errors", "Errors")


def check_worker_throttles(under_test: QueueUnderTest) -> None:
    _check_worker(under_test, "worker-throttles", "Throttles")


def check_duration(under_test: QueueUnderTest, job: str) -> None:
    spec = under_test.spec
    alarm = under_test.alarm(f"duration-{job}")
    metric = single_metric(alarm)
    assert metric == Metric(METRICS_NAMESPACE, "JobDuration", under_test.job_dimensions(job), "p99", 300)
    # JobDuration is in milliseconds; the time limit in seconds.
    assert alarm["Threshold"] == spec.alarms.duration_ratio * spec.time_limit_s(job) * 1000
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert (alarm["EvaluationPeriods"], alarm["TreatMissingData"]) == (1, "notBreaching")
    assert job in alarm["AlarmDescription"]


def check_heartbeat_missing(under_test: QueueUnderTest) -> None:
    spec = under_test.spec
    alarm = under_test.alarm("heartbeat-missing")
    expression, metrics = math(alarm)
    (beats,) = metrics
    assert metrics[beats] == Metric(
        METRICS_NAMESPACE, "Heartbeat", under_test.job_dimensions(HEARTBEAT_JOB), "Sum", MINUTE
    )
    # Every minute of the query has a value: a heartbeat count, or 0 (breaching) for a minute without one.
    assert evaluate(expression, {beats: None}) == 0
    assert evaluate(expression, {beats: 1}) == 1
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "LessThanThreshold")
    minutes = spec.alarms.heartbeat_missing_after_s // MINUTE
    assert alarm["EvaluationPeriods"] == alarm["DatapointsToAlarm"] == minutes
    # Silence is the alarm.
    assert alarm["TreatMissingData"] == "breaching"
    assert f"for {minutes} min" in alarm["AlarmDescription"]


def check_runtime_faults(under_test: QueueUnderTest) -> None:
    alarm = under_test.alarm("runtime-faults")
    metric = single_metric(alarm)
    assert metric == Metric(METRICS_NAMESPACE, "RuntimeFault", under_test.job_dimensions("(runtime)"), "Sum", 300)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    # The runtime emits nothing while its resources answer.
    assert (alarm["EvaluationPeriods"], alarm["TreatMissingData"]) == (1, "notBreaching")


def check_circuit_open(under_test: QueueUnderTest) -> None:
    spec = under_test.spec
    alarm = under_test.alarm("circuit-open")
    metric = single_metric(alarm)
    # Every opening, whichever downstream: the series without the reason dimension.
    assert metric == Metric(METRICS_NAMESPACE, "CircuitOpened", under_test.job_dimensions("(runtime)"), "Sum", 300)
    assert alarm["Threshold"] == spec.alarms.circuit_opened
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    # The runtime emits nothing while the breakers stay closed.
    assert (alarm["EvaluationPeriods"], alarm["TreatMissingData"]) == (1, "notBreaching")
    description = alarm["AlarmDescription"]
    breaker = spec.circuit_breaker
    assert f"failed {breaker.failure_threshold} times in a row" in description, description
    assert f"up to {breaker.max_hold_s / MINUTE:g} min (max_hold_s)" in description, description
    assert "'circuit opened'" in description and "(field downstream)" in description, description


def check_retrying(under_test: QueueUnderTest) -> None:
    spec = under_test.spec
    alarm = under_test.alarm("retrying")
    expression, metrics = math(alarm)
    attempts = ids_of(metrics, "RetryAttempt")
    assert attempts.keys() == metrics.keys()
    # Every job of the queue; unreadable messages are never retried, so no (unparseable).
    assert sorted(attempts.values()) == sorted(spec.job_names)
    for key, job in attempts.items():
        assert metrics[key] == Metric(
            METRICS_NAMESPACE, "RetryAttempt", under_test.job_dimensions(job), "Maximum", FIVE_MINUTES
        )
    # The most-failing key of any job, whichever job it is.
    for key in attempts:
        assert evaluate(expression, {other: 4.0 if other == key else 1.0 for other in attempts}) == 4.0
        assert evaluate(expression, {other: 2.0 if other == key else None for other in attempts}) == 2.0
    assert evaluate(expression, dict.fromkeys(attempts)) is None
    assert alarm["Threshold"] == spec.retry_alarm_attempts < spec.max_attempts
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    # The runtime samples RetryAttempt only for a failed run that will be retried.
    assert (alarm["EvaluationPeriods"], alarm["TreatMissingData"]) == (1, "notBreaching")
    description = alarm["AlarmDescription"]
    assert f"failed {spec.retry_alarm_attempts} runs in a row" in description, description
    assert f"dead-lettered after {spec.max_attempts} failed runs" in description, description


def check_held_near_bound(under_test: QueueUnderTest) -> None:
    spec = under_test.spec
    alarm = under_test.alarm("held-near-bound")
    expression, metrics = math(alarm)
    shares = ids_of(metrics, "HoldShare")
    assert shares.keys() == metrics.keys()
    # Every job the queue's worker runs (whatever held it: a limit, a busy key, an open breaker); unreadable
    # messages and durable jobs (the worker only starts them) are never held.
    assert sorted(shares.values()) == sorted(job.name for job in spec.jobs if job.durable is None)
    for key, job in shares.items():
        assert metrics[key] == Metric(
            METRICS_NAMESPACE, "HoldShare", under_test.job_dimensions(job), "Maximum", FIVE_MINUTES
        )
    # The key nearest its bound, of whichever job.
    for key in shares:
        assert evaluate(expression, {other: 0.9 if other == key else 0.2 for other in shares}) == 0.9
        assert evaluate(expression, {other: 0.5 if other == key else None for other in shares}) == 0.5
    assert evaluate(expression, dict.fromkeys(shares)) is None
    assert alarm["Threshold"] == spec.alarms.hold_share
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    # The runtime samples HoldShare only when it holds a record.
    assert (alarm["EvaluationPeriods"], alarm["TreatMissingData"]) == (1, "notBreaching")
    description = alarm["AlarmDescription"]
    assert f"for {spec.alarms.hold_share:.0%}+ of its max_hold_s" in description, description
    assert "JobHeld's reason names the holder" in description, description


def check_signal(under_test: QueueUnderTest, signal: str) -> None:
    check_common(under_test, signal)
    if signal.startswith("duration-"):
        check_duration(under_test, signal.removeprefix("duration-"))
        return
    {
        "oldest-message-age": check_oldest_message_age,
        "backlog": check_backlog,
        "dlq-depth": check_dlq_depth,
        "dlq-arrivals": check_dlq_arrivals,
        "failure-rate": check_failure_rate,
        "stalled": check_stalled,
        "worker-errors": check_worker_errors,
        "worker-throttles": check_worker_throttles,
        "heartbeat-missing": check_heartbeat_missing,
        "runtime-faults": check_runtime_faults,
        "circuit-open": check_circuit_open,
        "retrying": check_retrying,
        "held-near-bound": check_held_near_bound,
    }[signal](under_test)
