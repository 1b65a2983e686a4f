"""Catches what it shouldn't, as badly written jobs do: the id says how."""

from __future__ import annotations

import time

from functions.worker.errors import TimeLimitInterrupt
from functions.worker.jobs import JobContext
from sqs_jobs.envelope import Envelope

OUTCOMES: list[str] = []


def run(envelope: Envelope, context: JobContext) -> None:
    if envelope.id == "except-exception":
        try:
            time.sleep(5)
        except Exception:
            OUTCOMES.append("swallowed")
    elif envelope.id == "catch-then-finish":
        try:
            time.sleep(5)
        except TimeLimitInterrupt:
            OUTCOMES.append("caught")
    elif envelope.id == "catch-then-hang":
        try:
            time.sleep(5)
        except BaseException:
            OUTCOMES.append("caught")
        time.sleep(5)
    OUTCOMES.append("finished")
