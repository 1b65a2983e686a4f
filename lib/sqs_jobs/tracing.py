"""Traces from the request that published a job to each of its runs (docs/tracing.md).

The publisher carries the caller's W3C trace context on the message, as the `traceparent` message attribute, when
OpenTelemetry is installed (the `tracing` extra) and a span is active where it publishes; a worker whose queue
says `tracing=True` makes each run a span in that trace (sqs_jobs.worker.tracing). Without OpenTelemetry nothing
is imported, sent or recorded: one cached check per publish.

A producer is untrusted: a `traceparent` that isn't W3C's form is ignored, and whatever it says only places the
run's span in a trace; nothing the runtime counts or records reads it.
"""

from __future__ import annotations

import re
from typing import Any

# The message attribute the trace context travels in, named as W3C's header (other languages' publishers set it
# the same way: docs/envelope.md).
TRACEPARENT = "traceparent"
# W3C Trace Context, version 00: version-traceid-parentid-flags, lower-case hex, neither ID all zeros.
_TRACEPARENT_FORM = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
# Whether OpenTelemetry's propagation API is importable: looked up once (a failed import is not cached by Python).
_propagation: Any = None
_looked_up = False


def valid_traceparent(value: object) -> str | None:
    """`value` if it is a W3C traceparent (version 00), else None."""
    return value if isinstance(value, str) and _TRACEPARENT_FORM.fullmatch(value) else None


def current_traceparent() -> str | None:
    """The traceparent of the span active here, or None: no OpenTelemetry, no active span, or one not sampled in."""
    global _propagation, _looked_up
    if not _looked_up:
        try:
            from opentelemetry import propagate
        except ImportError:
            propagate = None  # type: ignore[assignment]
        _propagation, _looked_up = propagate, True
    if _propagation is None:
        return None
    carrier: dict[str, str] = {}
    _propagation.inject(carrier)
    return valid_traceparent(carrier.get(TRACEPARENT))


def traceparent_attribute(value: str) -> dict[str, str]:
    """The SQS message attribute that carries `value`."""
    return {"DataType": "String", "StringValue": value}
