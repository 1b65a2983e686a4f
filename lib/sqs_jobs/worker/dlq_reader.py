"""Reading a DLQ without consuming it, the one way every reader does (the DLQ review job, `jobctl dlq`, the
console): receive batches with a short visibility timeout, then make each received message visible again.

SQS samples its servers on a receive: an empty answer is not proof of an empty queue, so a scan ends after two
polls in a row bring nothing (new). A message whose scan visibility runs out during a long scan can come back in
the same scan; `fresh_only` drops those repeats.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sqs_jobs.limits import SQS_BATCH_MAX

EMPTY_POLLS_TO_STOP = 2


class DlqReader:
    """One DLQ, read in batches that stay hidden for `visibility_s`; `received` holds every receipt handle of the
    reads so far, for a caller that releases them all at once."""

    def __init__(self, sqs: Any, url: str, *, visibility_s: int, wait_s: int = 1) -> None:
        self._sqs = sqs
        self.url = url
        self._visibility_s = visibility_s
        self._wait_s = wait_s
        self.received: list[str] = []
        # True once a scan ended because the queue answered empty: every message visible during it was read.
        self.exhausted = False

    def depth(self) -> int:
        attributes = self._sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["ApproximateNumberOfMessages"])
        return int(attributes["Attributes"]["ApproximateNumberOfMessages"])

    def receive(self) -> list[dict[str, Any]]:
        """One batch, with every attribute (the evidence, who sent it, when)."""
        messages: list[dict[str, Any]] = self._sqs.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=SQS_BATCH_MAX,
            VisibilityTimeout=self._visibility_s,
            WaitTimeSeconds=self._wait_s,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
        ).get("Messages", [])
        self.received += [message["ReceiptHandle"] for message in messages]
        return messages

    def scan(
        self, *, limit: int | None = None, deadline: float | None = None, fresh_only: bool = False
    ) -> Iterator[list[dict[str, Any]]]:
        """Batches until the queue answers empty twice in a row, `limit` messages were read, or `deadline`
        (time.monotonic()) passes. The caller releases (or deletes) what it received."""
        self.exhausted = False
        seen: set[str] = set()
        count = 0
        empty_polls = 0
        while (limit is None or count < limit) and (deadline is None or time.monotonic() < deadline):
            batch = self.receive()
            if fresh_only:
                batch = [message for message in batch if message["MessageId"] not in seen]
                seen.update(message["MessageId"] for message in batch)
            if not batch:
                empty_polls += 1
                if empty_polls >= EMPTY_POLLS_TO_STOP:
                    self.exhausted = True
                    return
                continue
            empty_polls = 0
            count += len(batch)
            yield batch

    def release(self, receipt_handles: Iterable[str], *, keep_going: bool = False) -> list[str]:
        """Make messages visible again now, unchanged; the entries SQS refused, as their codes. `keep_going`: a
        call that fails is reported among them and the rest are still released (they reappear after the scan's
        visibility anyway); else it raises."""
        pending = list(receipt_handles)
        failures: list[str] = []
        for start in range(0, len(pending), SQS_BATCH_MAX):
            chunk = pending[start : start + SQS_BATCH_MAX]
            try:
                answer = self._sqs.change_message_visibility_batch(
                    QueueUrl=self.url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": receipt, "VisibilityTimeout": 0}
                        for i, receipt in enumerate(chunk)
                    ],
                )
            except (ClientError, BotoCoreError) as error:
                if not keep_going:
                    raise
                failures.append(str(error))
                continue
            failures += [str(item.get("Code")) for item in answer.get("Failed", [])]
        return failures
