"""A job that does nothing: what bench.overhead runs to measure the runtime around it."""

from __future__ import annotations

from functions.worker.envelope import Envelope
from functions.worker.jobs import JobContext


def run(envelope: Envelope, context: JobContext) -> None:
    return None
