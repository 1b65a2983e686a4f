"""The overview's small charts: a queue's last hours from CloudWatch, drawn as inline SVG (no JavaScript).

Each one is readable on its own: a scale from 0 to a round number above the peak (so a flat series at its peak is
a line inside the frame, not on its edge), lines at 0 and at the top, the latest value marked and written out, and
the time range under it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqs_jobs.cli.status import OLDEST_AGE_METRIC, SQS_NAMESPACE, VISIBLE_METRIC, job_metric
from sqs_jobs.specs import QueueSpec
from sqs_jobs.worker.names import FAILED, SUCCEEDED

CHART_HOURS = 3
PERIOD_S = 60
# The plot area, inside a frame with room for the scale on the left and the time range below.
WIDTH, HEIGHT = 200, 48
LEFT, BOTTOM = 34, 14
FRAME_WIDTH, FRAME_HEIGHT = LEFT + WIDTH + 4, HEIGHT + BOTTOM + 4
TOP = 4


def scale_top(peak: float) -> float:
    """The scale's top: a round number (1, 2 or 5 times a power of ten) at least a quarter above the peak, so a
    line at the peak is drawn inside the frame, never on its edge; 1 for an empty or all-zero series."""
    wanted = max(peak * 1.25, 1.0)
    magnitude = 10 ** math.floor(math.log10(wanted))
    # 10 x the magnitude is always above `wanted`, so one of these is.
    return float(next(step * magnitude for step in (1, 2, 5, 10) if step * magnitude >= wanted))


@dataclass(frozen=True)
class Chart:
    """A series drawn: the line's points, the latest point, the scale's top and where 0 and the top are."""

    points: str
    latest_x: float
    latest_y: float
    top: float
    zero_y: float = TOP + HEIGHT
    top_y: float = TOP
    left: float = LEFT
    right: float = LEFT + WIDTH


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

    def chart(self, start: datetime, end: datetime) -> Chart | None:
        """The series on a 0..scale_top(peak) scale over start..end; None without data (the page says so)."""
        if not self.points:
            return None
        span = (end - start).total_seconds() or 1.0
        top = scale_top(self.peak)

        def x(stamp: datetime) -> float:
            return LEFT + min(max((stamp - start).total_seconds() / span, 0.0), 1.0) * WIDTH

        def y(value: float) -> float:
            return TOP + HEIGHT - max(value, 0.0) / top * HEIGHT

        coordinates = [(x(stamp), y(value)) for stamp, value in self.points]
        if len(coordinates) == 1:  # a lone minute: a short stroke, since a one-point polyline draws nothing
            lone_x, lone_y = coordinates[0]
            coordinates.insert(0, (max(lone_x - 3, LEFT), lone_y))
        latest_x, latest_y = coordinates[-1]
        return Chart(
            points=" ".join(f"{px:.1f},{py:.1f}" for px, py in coordinates),
            latest_x=round(latest_x, 1),
            latest_y=round(latest_y, 1),
            top=top,
        )


def _sqs_metric(name: str, queue_name: str) -> dict[str, Any]:
    return {"Namespace": SQS_NAMESPACE, "MetricName": name, "Dimensions": [{"Name": "QueueName", "Value": queue_name}]}


def queue_charts(
    cloudwatch: Any, spec: QueueSpec, queue_name: str, dlq_name: str, now: datetime
) -> tuple[datetime, list[Series]]:
    """Backlog, oldest age, DLQ depth, and runs processed and failed per minute over the last CHART_HOURS."""
    start = now - timedelta(hours=CHART_HOURS)

    def query(query_id: str, metric: dict[str, Any], stat: str) -> dict[str, Any]:
        return {"Id": query_id, "MetricStat": {"Metric": metric, "Period": PERIOD_S, "Stat": stat}}

    queries = [
        query("backlog", _sqs_metric(VISIBLE_METRIC, queue_name), "Maximum"),
        query("age", _sqs_metric(OLDEST_AGE_METRIC, queue_name), "Maximum"),
        query("dlq", _sqs_metric(VISIBLE_METRIC, dlq_name), "Maximum"),
    ]
    queries += [query(f"failed{i}", job_metric(spec.name, job, FAILED), "Sum") for i, job in enumerate(spec.job_names)]
    queries += [
        query(f"processed{i}", job_metric(spec.name, job, SUCCEEDED), "Sum") for i, job in enumerate(spec.job_names)
    ]
    response = cloudwatch.get_metric_data(MetricDataQueries=queries, StartTime=start, EndTime=now)
    by_id: dict[str, list[tuple[datetime, float]]] = {}
    for result in response.get("MetricDataResults", []):
        key = result["Id"].rstrip("0123456789")
        by_id.setdefault(key, []).extend(zip(result.get("Timestamps", []), result.get("Values", []), strict=False))

    def series(label: str, key: str, *, counts: bool = False) -> Series:
        merged: dict[datetime, float] = {}
        for stamp, value in by_id.get(key, []):
            merged[stamp] = merged.get(stamp, 0.0) + value
        if counts and merged:
            # CloudWatch returns no datapoint for a minute nothing was counted in: that minute counted 0 (else
            # the line runs straight across quiet minutes and "now" is the last busy minute's count).
            minute = start.replace(second=0, microsecond=0)
            while minute <= now:
                merged.setdefault(minute, 0.0)
                minute += timedelta(seconds=PERIOD_S)
        return Series(label=label, points=sorted(merged.items()))

    return start, [
        series("backlog", "backlog"),
        series("oldest age (s)", "age"),
        series("DLQ depth", "dlq"),
        series("processed / min", "processed", counts=True),
        series("failed runs / min", "failed", counts=True),
    ]
