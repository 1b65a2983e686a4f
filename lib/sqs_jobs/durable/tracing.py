"""A durable job's step attempts as spans in its publisher's trace, on a queue that says `tracing=True`
(docs/tracing.md, "Durable steps").

Loaded only for such a queue's durable jobs (OpenTelemetry's API, the `tracing` extra). Each attempt of a step that
runs (a replayed step does not run, so makes none) is an INTERNAL span `<job> step <name>`, the child of the
`traceparent` the job's message carried (the start's payload keeps the producer's attributes), so a durable job's
steps sit beside its dispatch in the one trace; the step's own code runs under it (its instrumented calls are its
children). What a producer sends only places the spans, as for an ordinary run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from sqs_jobs.tracing import TRACEPARENT
from sqs_jobs.worker.tracing import MAX_NAME_CHARS, TRACER_NAME, carried_context


class StepTracing:
    """Starts each step attempt's span for one execution."""

    def __init__(self, job: str, job_id: str, attributes: Mapping[str, Any], tracer: Any = None) -> None:
        self._job = job[:MAX_NAME_CHARS]
        self._job_id = job_id[:MAX_NAME_CHARS]
        self._tracer = tracer or trace.get_tracer(TRACER_NAME)
        self._parent = carried_context(attributes.get(TRACEPARENT))

    @contextlib.contextmanager
    def attempt(self, step: str, attempt: int) -> Iterator[Any]:
        """The span of one attempt of `step`, current while it runs."""
        attributes: dict[str, str | int] = {
            "jobs.job": self._job,
            "jobs.id": self._job_id,
            "jobs.step": step,
            "jobs.attempt": attempt,
        }
        with self._tracer.start_as_current_span(
            f"{self._job} step {step}"[: 2 * MAX_NAME_CHARS],
            context=self._parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield span

    @staticmethod
    def failed(span: Any, error_type: str, transient: bool) -> None:
        """The attempt failed: ERROR, with the job's error type and whether it is retried."""
        span.set_attribute("error.type", error_type[:MAX_NAME_CHARS])
        span.set_attribute("jobs.outcome", "retried" if transient else "failed")
        span.set_status(Status(StatusCode.ERROR, error_type[:MAX_NAME_CHARS]))
