"""Performs its side effect (counted per ID, like a mail sent), then returns what a new team's job might: the kind
of result its ID starts with."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext

SIDE_EFFECTS: Counter[str] = Counter()


class Unreadable(Mapping[str, Any]):
    """A mapping whose own code raises when it is read."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("the connection this result reads from is closed")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("the connection this result reads from is closed")

    def __len__(self) -> int:
        return 1


RESULTS = {
    "datetime": lambda: {"sent_at": dt.datetime.now(dt.UTC)},
    "string": lambda: "0100018c-ses-message-id",
    "huge": lambda: {"rendered": "x" * 500_000},  # over DynamoDB's 400 KB item limit
    "object": lambda: {"client": object()},
    "unreadable": Unreadable,
}


def run(envelope: Envelope, context: JobContext) -> Any:
    SIDE_EFFECTS[envelope.id] += 1
    return RESULTS[envelope.id.split("-")[0]]()
