"""Logger and per-job metrics, built when a worker is built (never at import time).

No tracer: the X-Ray SDK that Powertools' Tracer drives is in maintenance mode (end of support 25 February
2027), and a Tracer that traced nothing only cost cold-start time. Lambda's own active tracing still records
each invocation; what a job did is in its log lines and metrics, keyed by job and ID (docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, TextIO

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider

from sqs_jobs.worker.names import (
    HOLD_SHARE,
    METRICS_NAMESPACE,
    RETRY_ATTEMPT,
    RUNTIME_FAULT,
    RUNTIME_JOB,
    SERVICE_NAME,
    STALLED_BATCHES,
)

# Serializes Logger set-up (see Observability.create).
_LOGGER_SETUP = threading.Lock()

# Values per EMF document, kept below Powertools' and CloudWatch's 100.
EMF_MAX_VALUES = 99
# The unit of each sampled metric; durations are milliseconds.
_SAMPLE_UNITS = {RETRY_ATTEMPT: MetricUnit.Count, STALLED_BATCHES: MetricUnit.Count, HOLD_SHARE: MetricUnit.NoUnit}


class Observability:
    """The worker's logger and metrics. A plain class, as the other per-worker ones: a dataclass cost every cold
    start about half a millisecond (docs/benchmarks.md, issue 33)."""

    def __init__(
        self,
        logger: Logger,
        metrics: AmazonCloudWatchEMFProvider,
        output: TextIO | None = None,
        metrics_sink: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.logger = logger
        self.metrics = metrics
        # Where logs and EMF documents go; None is stdout, which Lambda ships to CloudWatch Logs.
        self.output = output
        # Also handed every EMF document: the local engine forwards them to its CloudWatch, as Lambda's logs would.
        self.metrics_sink = metrics_sink

    @classmethod
    def create(
        cls, output: TextIO | None = None, metrics_sink: Callable[[dict[str, Any]], None] | None = None
    ) -> Observability:
        # Powertools registers one handler and formatter per service, process-wide, and not thread-safely: the
        # local engine's pollers building workers at once got duplicate handlers or a None formatter.
        with _LOGGER_SETUP:
            logger = Logger(service=SERVICE_NAME)
            # Shared by every Logger of the service in this process: point it at our output.
            handler = logger.registered_handler
            if isinstance(handler, logging.StreamHandler):
                # Not setStream(): it flushes the previous stream first, which fails once its owner has closed
                # it (an earlier local engine's log file in the same process).
                with handler.lock or contextlib.nullcontext():
                    handler.stream = output or sys.stdout
        return cls(
            logger=logger,
            metrics=AmazonCloudWatchEMFProvider(namespace=METRICS_NAMESPACE, service=SERVICE_NAME),
            output=output,
            metrics_sink=metrics_sink,
        )

    def flush_metrics(self) -> None:
        """Write the metrics added since the last flush as one EMF document: compact JSON on one line, to `output`
        (stdout by default, which Lambda ships to CloudWatch Logs). Never through Powertools' own flush, which prints
        nothing when POWERTOOLS_DEV or POWERTOOLS_METRICS_DISABLED is set: the alarms depend on these metrics, and
        CloudWatch extracts them only from a log event that is one JSON object."""
        document = self.metrics.serialize_metric_set()
        stream = self.output or sys.stdout
        stream.write(json.dumps(document, separators=(",", ":")) + "\n")
        stream.flush()
        self.metrics.clear_metrics()
        if self.metrics_sink is not None:
            self.metrics_sink(dict(document))


class BatchTally:
    """Counts of outcomes in one batch, flushed as one EMF document per job (dimensions queue, job), plus one
    per job and reason for counts that have a reason (dimensions queue, job, reason)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, str]] = Counter()
        # Per job, values that are not counts (durations, attempts): EMF carries them as a list, CloudWatch keeps
        # each.
        self.samples: dict[tuple[str, str], list[float]] = {}
        # A batch's records are counted from several threads at once.
        self._lock = threading.Lock()

    def add(self, job: str, metric: str, reason: str = "") -> None:
        with self._lock:
            self.counts[(job, metric, "")] += 1
            if reason:
                self.counts[(job, metric, reason)] += 1

    def runtime_fault(self, reason: str) -> None:
        """Count a failure of the runtime's own AWS resources: the runtime-faults alarm pages on it."""
        self.add(RUNTIME_JOB, RUNTIME_FAULT, reason=reason)

    def sample(self, job: str, metric: str, value: float) -> None:
        with self._lock:
            self.samples.setdefault((job, metric), []).append(value)

    def flush(self, observability: Observability, queue: str) -> None:
        with self._lock:
            counts, self.counts = self.counts, Counter()
            samples, self.samples = self.samples, {}
        _flush(observability, queue, counts, samples)


def _flush(
    observability: Observability,
    queue: str,
    counts: Counter[tuple[str, str, str]],
    samples: dict[tuple[str, str], list[float]],
) -> None:
    groups = {(job, reason) for job, _, reason in counts} | {(job, "") for job, _ in samples}
    for job, reason in sorted(groups):
        entries: list[tuple[str, MetricUnit, float]] = [
            (metric, MetricUnit.Count, float(count))
            for (counted_job, metric, counted_reason), count in sorted(counts.items())
            if (counted_job, counted_reason) == (job, reason)
        ]
        if not reason:
            entries += [
                (metric, _SAMPLE_UNITS.get(metric, MetricUnit.Milliseconds), sample)
                for (sampled_job, metric), values in sorted(samples.items())
                if sampled_job == job
                for sample in values
            ]
        dimensions = {"queue": queue, "job": job, **({"reason": reason} if reason else {})}
        # An EMF document holds fewer than 100 values per metric (Powertools would otherwise print the
        # overflow to stdout itself): a large batch's durations go out in several documents.
        for start in range(0, len(entries), EMF_MAX_VALUES):
            for name, dimension in dimensions.items():
                observability.metrics.add_dimension(name=name, value=dimension)
            for metric, unit, value in entries[start : start + EMF_MAX_VALUES]:
                observability.metrics.add_metric(name=metric, unit=unit, value=value)
            observability.flush_metrics()
