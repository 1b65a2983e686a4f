"""The local engine's stand-in for what CloudWatch gets on AWS, so `jobctl status` reads both the same way.

On AWS, SQS publishes `ApproximateAgeOfOldestMessage`, `ApproximateNumberOfMessagesVisible` (and friends) every
minute, and Lambda turns the worker's EMF log lines into metrics. Locally, this agent does both into moto's
CloudWatch: it samples the queues held by the embedded moto server (same process) and forwards the workers' EMF
documents as PutMetricData.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.sqs.models import sqs_backends

from sqs_jobs.cli.status import OLDEST_AGE_METRIC, SQS_NAMESPACE, VISIBLE_METRIC
from sqs_jobs.local.provision import LocalQueue
from sqs_jobs.local.ticker import Ticker

log = logging.getLogger("sqs_jobs.local")

SAMPLE_INTERVAL_S = 5.0


def oldest_age_s(region: str, queue_url: str, now: float | None = None) -> float:
    """Age of the oldest message in a queue of the in-process moto server (0 when empty)."""
    name = queue_url.rstrip("/").rsplit("/", 1)[-1]
    queue = sqs_backends[DEFAULT_ACCOUNT_ID][region].queues.get(name)
    if queue is None:
        return 0.0
    sent = [int(stamp) for message in list(queue._messages) if (stamp := getattr(message, "sent_timestamp", None))]
    if not sent:
        return 0.0
    return max(0.0, (now if now is not None else time.time()) - min(sent) / 1000)


def visible_messages(region: str, queue_url: str) -> int:
    """Messages a receive could get now from a queue of the in-process moto server."""
    name = queue_url.rstrip("/").rsplit("/", 1)[-1]
    queue = sqs_backends[DEFAULT_ACCOUNT_ID][region].queues.get(name)
    return 0 if queue is None else int(queue.approximate_number_of_messages)


def emf_to_metric_data(document: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """One EMF document as (namespace, PutMetricData entries), as CloudWatch Logs would extract it."""
    [directive] = document["_aws"]["CloudWatchMetrics"]
    timestamp = datetime.fromtimestamp(document["_aws"]["Timestamp"] / 1000, tz=UTC)
    entries = []
    for dimension_set in directive["Dimensions"]:
        dimensions = [{"Name": name, "Value": str(document[name])} for name in dimension_set]
        for metric in directive["Metrics"]:
            values = document[metric["Name"]]
            for value in values if isinstance(values, list) else [values]:
                entries.append(
                    {
                        "MetricName": metric["Name"],
                        "Dimensions": dimensions,
                        "Value": float(value),
                        "Unit": metric.get("Unit", "None"),
                        "Timestamp": timestamp,
                    }
                )
    return directive["Namespace"], entries


class MetricsAgent:
    """Samples queue ages on a timer and forwards EMF documents, into the engine's CloudWatch."""

    def __init__(
        self, cloudwatch: Any, queues: Mapping[str, LocalQueue], region: str, interval_s: float = SAMPLE_INTERVAL_S
    ) -> None:
        self._cloudwatch = cloudwatch
        self._queues = dict(queues)
        self._region = region
        self._lock = threading.Lock()
        self._ticker = Ticker("metrics-agent", self.sample, interval_s)

    def start(self) -> None:
        self.sample()
        self._ticker.start()

    def stop(self) -> None:
        self._ticker.stop()

    def sample(self) -> None:
        """Publish each queue's (and priority lane's) and DLQ's oldest-message age and visible messages now."""
        now = datetime.now(UTC)
        entries = []
        for queue in self._queues.values():
            # Its priority lanes' own queues too: each has its alarms, and `jobctl status` reads each one's age.
            for url in (queue.url, queue.dlq_url, *(lane.url for lane in queue.other_lanes)):
                name = url.rstrip("/").rsplit("/", 1)[-1]
                dimensions = [{"Name": "QueueName", "Value": name}]
                entries.append(
                    {
                        "MetricName": OLDEST_AGE_METRIC,
                        "Dimensions": dimensions,
                        "Value": oldest_age_s(self._region, url),
                        "Unit": "Seconds",
                        "Timestamp": now,
                    }
                )
                entries.append(
                    {
                        "MetricName": VISIBLE_METRIC,
                        "Dimensions": dimensions,
                        "Value": visible_messages(self._region, url),
                        "Unit": "Count",
                        "Timestamp": now,
                    }
                )
        self._put(SQS_NAMESPACE, entries)

    def record_emf(self, document: Mapping[str, Any]) -> None:
        """Forward one of a worker's EMF documents (called from worker threads)."""
        namespace, entries = emf_to_metric_data(document)
        self._put(namespace, entries)

    def _put(self, namespace: str, entries: list[dict[str, Any]]) -> None:
        with self._lock:
            for start in range(0, len(entries), 1000):
                self._cloudwatch.put_metric_data(Namespace=namespace, MetricData=entries[start : start + 1000])
