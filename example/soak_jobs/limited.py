"""A receipt mail job limited to one run at a time per customer (`KeyConcurrency(limit=1, per="customer")`), as the
soak runs it: it re-reads the order and mails a receipt. On its first run a third of its IDs (`slow`) first ask the
invoicing API for a quote that the soak makes slow: four calls of `PROBE_DELAY_S` each, so the run is cut at its
time limit with the fourth in flight, and its thread goes on until that call is answered.

Each run notes when its code started and when it left (its `finally`: after a cut, once the call in flight has
ended and the fence has stopped the run there), by the customer it holds: the soak checks that no two runs of one
customer overlapped (the key's slot must be held as long as a run's work can still be in flight).
"""

from __future__ import annotations

import threading
import time
import zlib
from dataclasses import dataclass

from example.soak_jobs import odd_results
from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext

# Each quote call is answered this late (the soak sets the invoicing API's slow mode for the quotes' IDs): four of
# them outlast the soak's 3 s time limit, and each stays well under the jobs' HTTP read timeout (1.5 s): at 1.1 s
# a machine starved at make test's start (three workers, mypy and the rehearsal on two cores) answered past the
# timeout, and the run failed transiently instead of being cut.
PROBE_DELAY_S = 0.8
PROBE_CALLS = 4


@dataclass(frozen=True)
class Run:
    customer: str
    key: str
    attempt: int
    started: float
    ended: float


_LOCK = threading.Lock()
RUNS: list[Run] = []


def reset() -> None:
    with _LOCK:
        RUNS.clear()


def runs() -> list[Run]:
    with _LOCK:
        return list(RUNS)


def slow(entity_id: str) -> bool:
    """Whether this ID's first run makes the slow quote calls (the same for the same ID, wherever it is asked)."""
    return zlib.crc32(entity_id.encode()) % 3 == 0


def quote_id(entity_id: str) -> str:
    """The invoice ID a slow run asks a quote for (the soak makes the API slow for exactly these)."""
    return f"quote-{entity_id}"


def run(envelope: Envelope, context: JobContext) -> str:
    started = time.monotonic()
    try:
        if context.attempt == 1 and slow(envelope.id):
            url = context.resource("invoicing_api_url").rstrip("/") + "/invoices"
            quote = {"invoice_id": quote_id(envelope.id), "customer": envelope.id, "amount": "1", "currency": "EUR"}
            for _ in range(PROBE_CALLS):
                context.http.post(url, json=quote)
        return odd_results.mail_receipt(envelope, context, odd_results.receipt_recipient(envelope, context))
    finally:
        ended = time.monotonic()
        with _LOCK:
            RUNS.append(Run(str(envelope.extra.get("customer", "")), context.key, context.attempt, started, ended))
