"""Each run a span in its publisher's trace, on a queue that says `tracing=True` (docs/tracing.md).

Loaded only by such a queue's worker, with OpenTelemetry's API (the `tracing` extra): a queue without it imports
and does nothing of this. The span is a CONSUMER span named `<job> process`, the child of the `traceparent` the
message carries (sqs_jobs.tracing; a redrive restores it, so every attempt and redrive of a job is a sibling span
in the same trace); with none, or a malformed one, a trace of its own. Spans go to whatever tracer provider the
function has (the ADOT Lambda layer's, or the project's own SDK setup); none set, OpenTelemetry's no-op.

What a producer sends only places the span: nothing the runtime counts, decides or records reads it.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sqs_jobs.tracing import TRACEPARENT, valid_traceparent
from sqs_jobs.worker.invocation import Delivery, Outcome

# W3C trace context, read from what a message carries (stateless: one serves every record).
_PROPAGATOR = TraceContextTextMapPropagator()

TRACER_NAME = "sqs-jobs"
# What of a producer's body names the span's job and ID: bounded, a body's text is anyone's.
MAX_NAME_CHARS = 128
# Outcomes that end a run in failure: the span's status is ERROR.
_FAILED = frozenset({Outcome.DEAD_LETTERED})


class RunSpan:
    """The span of one record's delivery, told how it ended."""

    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.span = span

    def ended(self, outcome: Outcome | None, verdict: object) -> None:
        """`outcome` as settlement carried it out, None: the record went back to its queue (a failed run to be
        retried, or handed back unrun); `verdict` the decision carried out (a dead letter's failure class and
        error, a hand-back's reason and cause)."""
        span = self.span
        reason = getattr(verdict, "reason", None)
        went_back = "retried" if reason == "retry" else "handed_back"
        shown = went_back if outcome is None else outcome.value
        span.set_attribute("jobs.outcome", shown)
        failure = getattr(verdict, "failure", None)
        if failure is not None:
            span.set_attribute("jobs.failure", str(failure))
        if reason is not None:
            span.set_attribute("jobs.reason", str(reason))
        error_type = getattr(verdict, "error_type", None)
        cause = getattr(verdict, "cause", None)
        if error_type is None and isinstance(cause, BaseException):
            error_type = type(cause).__name__
        if error_type:
            span.set_attribute("error.type", str(error_type)[:MAX_NAME_CHARS])
        if outcome in _FAILED or shown == "retried":
            span.set_status(Status(StatusCode.ERROR, str(error_type or shown)[:MAX_NAME_CHARS]))


class RunTracing:
    """Starts each delivery's span for the queue's worker."""

    def __init__(self, queue: str, tracer: Any = None) -> None:
        self._queue = queue
        self._tracer = tracer or trace.get_tracer(TRACER_NAME)

    @contextlib.contextmanager
    def run(self, delivery: Delivery) -> Iterator[RunSpan]:
        record = delivery.record
        parent = carried_context(delivery.attributes.producer.get(TRACEPARENT))
        job, job_id = _named(record.body)
        attributes: dict[str, Any] = {
            "messaging.system": "aws_sqs",
            "messaging.operation.type": "process",
            "messaging.destination.name": self._queue,
            "messaging.message.id": record.message_id,
            "jobs.job": job,
            "jobs.id": job_id,
            "jobs.receive": delivery.receives,
        }
        sent_ms = delivery.first_sent_ms
        if sent_ms is not None:
            attributes["jobs.queue_wait_ms"] = max(0, int(time.time() * 1000) - sent_ms)
        with self._tracer.start_as_current_span(
            f"{job or 'unreadable'} process",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield RunSpan(span)


def carried_context(attribute: object) -> Any:
    """The trace context a message's `traceparent` attribute (its SQS form, {"StringValue": ...}) names, for a
    span's parent; None where it carries none, or not a valid one: a producer's text only places the span."""
    carried = attribute.get("StringValue") if isinstance(attribute, Mapping) else None
    traceparent = valid_traceparent(carried)
    return _PROPAGATOR.extract({TRACEPARENT: traceparent}) if traceparent else None


def current_trace_id() -> str:
    """The trace the current span is of, as W3C writes a trace-id (32 hex digits); "" with no valid span (no
    tracer provider set: OpenTelemetry's no-op spans carry none)."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


def _named(body: str) -> tuple[str, str]:
    """The job and ID a body says, as text at most MAX_NAME_CHARS long; "" where it says none."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return "", ""
    if not isinstance(parsed, dict):
        return "", ""
    job, job_id = parsed.get("job"), parsed.get("id")
    return (
        job[:MAX_NAME_CHARS] if isinstance(job, str) else "",
        job_id[:MAX_NAME_CHARS] if isinstance(job_id, str) else "",
    )
