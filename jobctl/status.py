"""The article's four signals per queue - backlog, age of the oldest job, failure rate and DLQ count, worker
liveness - read the same way from AWS and from the local engine (which publishes the same metrics to its
CloudWatch stand-in), with a health verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from functions.catalog import QueueSpec
from functions.worker.observability import FAILED, SUCCEEDED
from functions.worker.settings import METRICS_NAMESPACE, SERVICE_NAME
from jobctl.discovery import QueueLocation

SQS_NAMESPACE = "AWS/SQS"
OLDEST_AGE_METRIC = "ApproximateAgeOfOldestMessage"
# How far back failure rate and liveness look.
DEFAULT_WINDOW_S = 15 * 60
# CloudWatch publishes SQS metrics once a minute and may lag: look a few minutes back for the latest age.
AGE_LOOKBACK_S = 5 * 60
# Above this share of failed runs in the window, a queue is unhealthy.
FAILURE_RATE_LIMIT = 0.2
# A backlog with no successful job for this long means nothing is consuming it.
STALLED_AFTER_S = 10 * 60


@dataclass
class QueueStatus:
    name: str
    url: str
    dlq_url: str
    backlog: int
    in_flight: int
    delayed: int
    dlq_depth: int
    oldest_age_s: float | None
    succeeded: int
    failed: int
    last_success_at: datetime | None
    window_s: int
    problems: list[str] = field(default_factory=list)

    @property
    def failure_rate(self) -> float | None:
        runs = self.succeeded + self.failed
        return self.failed / runs if runs else None

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "url": self.url,
            "dlq_url": self.dlq_url,
            "backlog": self.backlog,
            "in_flight": self.in_flight,
            "delayed": self.delayed,
            "oldest_age_s": self.oldest_age_s,
            "dlq_depth": self.dlq_depth,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "failure_rate": self.failure_rate,
            "window_s": self.window_s,
            "last_success_at": self.last_success_at.isoformat() if self.last_success_at else None,
            "healthy": self.healthy,
            "problems": list(self.problems),
        }


def _counts(sqs: Any, url: str) -> dict[str, int]:
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return {name: int(attributes.get(name, "0")) for name in names}


def _job_metric(queue: str, job: str, metric: str) -> dict[str, Any]:
    dimensions = [
        {"Name": "queue", "Value": queue},
        {"Name": "job", "Value": job},
        {"Name": "service", "Value": SERVICE_NAME},
    ]
    return {"Namespace": METRICS_NAMESPACE, "MetricName": metric, "Dimensions": dimensions}


def _metrics(
    cloudwatch: Any, spec: QueueSpec, queue_name: str, now: datetime, window_s: int
) -> tuple[float | None, int, int, datetime | None]:
    """Oldest age (latest datapoint), failed and succeeded sums over the window, last success time."""
    queries: list[dict[str, Any]] = [
        {
            "Id": "age",
            "MetricStat": {
                "Metric": {
                    "Namespace": SQS_NAMESPACE,
                    "MetricName": OLDEST_AGE_METRIC,
                    "Dimensions": [{"Name": "QueueName", "Value": queue_name}],
                },
                "Period": 60,
                "Stat": "Maximum",
            },
        }
    ]
    for index, job in enumerate(spec.job_names):
        for prefix, metric in (("ok", SUCCEEDED), ("failed", FAILED)):
            queries.append(
                {
                    "Id": f"{prefix}{index}",
                    "MetricStat": {"Metric": _job_metric(spec.name, job, metric), "Period": 60, "Stat": "Sum"},
                }
            )
    response = cloudwatch.get_metric_data(
        MetricDataQueries=queries, StartTime=now - timedelta(seconds=window_s), EndTime=now + timedelta(minutes=1)
    )
    results = {result["Id"]: result for result in response.get("MetricDataResults", [])}
    age_result = results.get("age", {})
    recent_ages = [
        (stamp, value)
        for stamp, value in zip(age_result.get("Timestamps", []), age_result.get("Values", []), strict=False)
        if stamp >= now - timedelta(seconds=AGE_LOOKBACK_S)
    ]
    oldest_age = max(recent_ages)[1] if recent_ages else None
    succeeded = failed = 0
    last_success: datetime | None = None
    for query_id, result in results.items():
        total = int(sum(result.get("Values", [])))
        if query_id.startswith("ok"):
            succeeded += total
            stamps = [s for s, v in zip(result.get("Timestamps", []), result.get("Values", []), strict=False) if v > 0]
            if stamps and (last_success is None or max(stamps) > last_success):
                last_success = max(stamps)
        elif query_id.startswith("failed"):
            failed += total
    return oldest_age, succeeded, failed, last_success


def queue_status(
    sqs: Any,
    cloudwatch: Any,
    spec: QueueSpec,
    location: QueueLocation,
    now: datetime | None = None,
    window_s: int = DEFAULT_WINDOW_S,
) -> QueueStatus:
    now = now or datetime.now(UTC)
    source = _counts(sqs, location.url)
    dead = _counts(sqs, location.dlq_url)
    queue_name = location.url.rstrip("/").rsplit("/", 1)[-1]
    oldest_age, succeeded, failed, last_success = _metrics(cloudwatch, spec, queue_name, now, window_s)
    backlog = source["ApproximateNumberOfMessages"]
    if oldest_age is None and backlog == 0 and source["ApproximateNumberOfMessagesNotVisible"] == 0:
        oldest_age = 0.0  # nothing waiting: nothing is old
    status = QueueStatus(
        name=spec.name,
        url=location.url,
        dlq_url=location.dlq_url,
        backlog=backlog,
        in_flight=source["ApproximateNumberOfMessagesNotVisible"],
        delayed=source["ApproximateNumberOfMessagesDelayed"],
        dlq_depth=dead["ApproximateNumberOfMessages"] + dead["ApproximateNumberOfMessagesNotVisible"],
        oldest_age_s=oldest_age,
        succeeded=succeeded,
        failed=failed,
        last_success_at=last_success,
        window_s=window_s,
    )
    status.problems = diagnose(status, spec, now)
    return status


def diagnose(status: QueueStatus, spec: QueueSpec, now: datetime) -> list[str]:
    """Why a queue is unhealthy, one short sentence per problem; empty when healthy."""
    problems = []
    limit = spec.alarms.oldest_message_age_s
    if status.oldest_age_s is not None and status.oldest_age_s > limit:
        problems.append(f"oldest message has waited {status.oldest_age_s:.0f}s (alarm above {limit}s)")
    if status.dlq_depth >= spec.alarms.dlq_depth:
        problems.append(f"DLQ holds {status.dlq_depth} message(s): run `jobctl dlq list {spec.name}`")
    rate = status.failure_rate
    if rate is not None and rate > FAILURE_RATE_LIMIT:
        problems.append(f"{rate:.0%} of runs failed in the last {status.window_s // 60} min")
    idle_since = status.last_success_at
    stalled = idle_since is None or (now - idle_since).total_seconds() > STALLED_AFTER_S
    if status.backlog > 0 and status.in_flight == 0 and stalled and (status.oldest_age_s or 0) > STALLED_AFTER_S:
        problems.append(f"stalled: {status.backlog} waiting and no job done for over {STALLED_AFTER_S // 60} min")
    return problems
