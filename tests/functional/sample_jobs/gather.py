"""Records how many runs are inside it at once, overall and per group (the id's part before "-"), and in what
order each group's runs started; ids starting with "fail" fail transiently."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext

HOLD_S = 0.3
_LOCK = threading.Lock()
ACTIVE: Counter[str] = Counter()
MOST: Counter[str] = Counter()
STARTED: defaultdict[str, list[str]] = defaultdict(list)


def reset() -> None:
    with _LOCK:
        ACTIVE.clear()
        MOST.clear()
        STARTED.clear()


def _enter(*names: str) -> None:
    with _LOCK:
        for name in names:
            ACTIVE[name] += 1
            MOST[name] = max(MOST[name], ACTIVE[name])


def _leave(*names: str) -> None:
    with _LOCK:
        for name in names:
            ACTIVE[name] -= 1


def run(envelope: Envelope, context: JobContext) -> None:
    group = envelope.id.split("-", 1)[0]
    with _LOCK:
        STARTED[group].append(envelope.id)
    _enter("all", group)
    try:
        time.sleep(HOLD_S)  # waiting on a downstream
        if envelope.id.startswith("fail"):
            raise ConnectionResetError("downstream reset the connection")
    finally:
        _leave("all", group)
