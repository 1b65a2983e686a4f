"""A durable job of two steps, `fetch` and `store`; `fetch` fails transiently on its first attempt for IDs in
FAIL_ONCE. Its step code records the span it runs under in SEEN (the tracing test's check that it is the attempt's)."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

from sqs_jobs.envelope import Envelope
from sqs_jobs.errors import TransientError

FAIL_ONCE: set[str] = set()
SEEN: list[tuple[str, int]] = []


def run(envelope: Envelope, context: Any) -> dict[str, int]:
    def fetch() -> int:
        SEEN.append(("fetch", trace.get_current_span().get_span_context().span_id))
        if envelope.id in FAIL_ONCE:
            FAIL_ONCE.discard(envelope.id)
            raise TransientError(f"{envelope.id}: the source is busy")
        return 1

    fetched = context.step("fetch", fetch)
    stored: int = context.step("store", lambda: fetched + 1)
    return {"stored": stored}
