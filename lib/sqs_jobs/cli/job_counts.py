"""`jobctl stats`: how many runs each queue processed and how many failed, per period, from the workers' own
metrics in CloudWatch (the EMF counts of sqs_jobs.worker.names): one GetMetricData call for every queue and
job asked for, whatever the time range (CloudWatch keeps one-minute data for 15 days)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqs_jobs.cli.errors import OperatorUsageError
from sqs_jobs.cli.status import job_metric
from sqs_jobs.specs import QueueSpec
from sqs_jobs.worker.names import CANCELLED_COPY, DEAD_LETTERED, FAILED, RETRIED, SUCCEEDED

# What each column counts (a run is counted once in processed or failed; a failed run also in retried or
# dead-lettered when the worker decided so; cancelled copies were acknowledged without running).
COUNTS = {
    "processed": SUCCEEDED,
    "failed": FAILED,
    "retried": RETRIED,
    "dead_lettered": DEAD_LETTERED,
    "cancelled": CANCELLED_COPY,
}
# GetMetricData takes at most 500 queries per call.
MAX_QUERIES = 500


@dataclass
class QueueCounts:
    queue: str
    buckets: dict[datetime, dict[str, int]] = field(default_factory=dict)
    by_job: dict[str, dict[str, int]] = field(default_factory=dict)

    def totals(self) -> dict[str, int]:
        return {name: sum(counts[name] for counts in self.by_job.values()) for name in COUNTS}

    def to_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "totals": self.totals(),
            "by_job": self.by_job,
            "buckets": [{"start": start, **counts} for start, counts in sorted(self.buckets.items())],
        }


class TooManyMetricsError(OperatorUsageError):
    """More queue and job metrics than one GetMetricData call takes: ask for fewer queues."""


def job_counts(
    cloudwatch: Any, specs: Iterable[QueueSpec], start: datetime, end: datetime, period_s: int
) -> list[QueueCounts]:
    """Each queue's counts per `period_s` bucket from `start` to `end`, and per job over the whole range."""
    specs = list(specs)
    queries: list[dict[str, Any]] = []
    keys: dict[str, tuple[str, str, str]] = {}
    for spec in specs:
        for job in spec.job_names:
            for column, metric in COUNTS.items():
                query_id = f"q{len(queries)}"
                keys[query_id] = (spec.name, job, column)
                queries.append(
                    {
                        "Id": query_id,
                        "MetricStat": {"Metric": job_metric(spec.name, job, metric), "Period": period_s, "Stat": "Sum"},
                    }
                )
    if len(queries) > MAX_QUERIES:
        raise TooManyMetricsError(
            f"{len(queries)} metrics asked for; one call takes {MAX_QUERIES}: name a queue (`jobctl stats QUEUE`)"
        )
    found = {spec.name: QueueCounts(spec.name) for spec in specs}
    for spec in specs:
        found[spec.name].by_job = {job: dict.fromkeys(COUNTS, 0) for job in spec.job_names}
        bucket = start
        while bucket < end:
            found[spec.name].buckets[bucket] = dict.fromkeys(COUNTS, 0)
            bucket += timedelta(seconds=period_s)
    paginator = cloudwatch.get_paginator("get_metric_data")
    for page in paginator.paginate(MetricDataQueries=queries, StartTime=start, EndTime=end):
        for result in page.get("MetricDataResults", []):
            queue, job, column = keys[result["Id"]]
            counts = found[queue]
            for stamp, value in zip(result.get("Timestamps", []), result.get("Values", []), strict=False):
                counts.by_job[job][column] += int(value)
                slot = _bucket_of(stamp, start, period_s)
                counts.buckets.setdefault(slot, dict.fromkeys(COUNTS, 0))[column] += int(value)
    return list(found.values())


def _bucket_of(stamp: datetime, start: datetime, period_s: int) -> datetime:
    steps = int((stamp - start).total_seconds() // period_s)
    return start + timedelta(seconds=steps * period_s)
