"""The local engine's traces: the spans of traced queues' runs and durable steps (docs/tracing.md), written as JSON
lines to a file or the console, with OpenTelemetry's SDK (`jobctl local --traces PATH|-`; the `cli` extra has it).

On Lambda the function's tracer provider is the ADOT layer's (or the project's own); the engine runs every worker
in its own process, so one provider of the process, installed by `jobctl local`, gets every span."""

from __future__ import annotations

import json
from typing import Any, TextIO

SERVICE_NAME = "sqs-jobs-local"


def tracer_provider_writing_to(out: TextIO) -> Any:
    """A tracer provider that writes each span as it ends, as one line of JSON (OpenTelemetry's own form of a span:
    its name, context, parent, kind, times, attributes, status), to `out`."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    def one_line(span: ReadableSpan) -> str:
        return json.dumps(json.loads(span.to_json()), separators=(",", ":")) + "\n"

    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out, formatter=one_line)))
    return provider


def export_traces(out: TextIO) -> Any:
    """Install `tracer_provider_writing_to(out)` as the process's tracer provider (OpenTelemetry takes one per
    process); the provider, whose `shutdown()` flushes it."""
    from opentelemetry import trace

    provider = tracer_provider_writing_to(out)
    trace.set_tracer_provider(provider)
    return provider
