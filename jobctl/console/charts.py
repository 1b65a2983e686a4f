"""The overview's small charts: a queue's last hours from CloudWatch, drawn as inline SVG (no JavaScript)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from functions.worker.names import FAILED
from jobctl.status import OLDEST_AGE_METRIC, SQS_NAMESPACE, VISIBLE_METRIC, job_metric
from sqs_jobs.specs import QueueSpec

CHART_HOURS = 3
PERIOD_S = 60
WIDTH, HEIGHT = 160, 32


@dataclass(frozen=True)
class Series:
    label: str
    points: list[tuple[datetime, float]]

    @property
    def latest(self) -> float | None:
        return self.points[-1][1] if self.points else None

    @property
    def peak(self) -> float:
        return max((value for _, value in self.points), default=0.0)

    def svg_points(self, start: datetime, end: datetime) -> str:
        """The polyline's points, time on x, 0..peak on y (an empty series draws nothing)."""
        span = (end - start).total_seconds() or 1.0
        peak = self.peak or 1.0
        coordinates = [
            ((stamp - start).total_seconds() / span * WIDTH, HEIGHT - value / peak * (HEIGHT - 2) - 1)
            for stamp, value in self.points
        ]
        if len(coordinates) == 1:  # a lone minute: a short stroke, since a one-point polyline draws nothing
            x, y = coordinates[0]
            coordinates.append((min(x + 2, WIDTH), y))
        return " ".join(f"{x:.1f},{y:.1f}" for x, y in coordinates)


def _sqs_metric(name: str, queue_name: str) -> dict[str, Any]:
    return {"Namespace": SQS_NAMESPACE, "MetricName": name, "Dimensions": [{"Name": "QueueName", "Value": queue_name}]}


def queue_charts(
    cloudwatch: Any, spec: QueueSpec, queue_name: str, dlq_name: str, now: datetime
) -> tuple[datetime, list[Series]]:
    """Backlog, oldest age, DLQ depth and failed runs per minute over the last CHART_HOURS."""
    start = now - timedelta(hours=CHART_HOURS)

    def query(query_id: str, metric: dict[str, Any], stat: str) -> dict[str, Any]:
        return {"Id": query_id, "MetricStat": {"Metric": metric, "Period": PERIOD_S, "Stat": stat}}

    queries = [
        query("backlog", _sqs_metric(VISIBLE_METRIC, queue_name), "Maximum"),
        query("age", _sqs_metric(OLDEST_AGE_METRIC, queue_name), "Maximum"),
        query("dlq", _sqs_metric(VISIBLE_METRIC, dlq_name), "Maximum"),
    ]
    queries += [query(f"failed{i}", job_metric(spec.name, job, FAILED), "Sum") for i, job in enumerate(spec.job_names)]
    response = cloudwatch.get_metric_data(MetricDataQueries=queries, StartTime=start, EndTime=now)
    by_id: dict[str, list[tuple[datetime, float]]] = {}
    for result in response.get("MetricDataResults", []):
        key = "failed" if result["Id"].startswith("failed") else result["Id"]
        by_id.setdefault(key, []).extend(zip(result.get("Timestamps", []), result.get("Values", []), strict=False))

    def series(label: str, key: str) -> Series:
        merged: dict[datetime, float] = {}
        for stamp, value in by_id.get(key, []):
            merged[stamp] = merged.get(stamp, 0.0) + value
        return Series(label=label, points=sorted(merged.items()))

    return start, [
        series("backlog", "backlog"),
        series("oldest age (s)", "age"),
        series("DLQ depth", "dlq"),
        series("failed runs / min", "failed"),
    ]
