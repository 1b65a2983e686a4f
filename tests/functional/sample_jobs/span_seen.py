"""Records the span its code runs under (OpenTelemetry's current span), as a job's own instrumented call sees it."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext

SEEN: list[Any] = []


def run(envelope: Envelope, context: JobContext) -> None:
    SEEN.append(trace.get_current_span().get_span_context())
