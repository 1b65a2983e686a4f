"""The DLQ review's summary as text: pure functions of what was read, for `dlq_review` to publish.

Per queue: its depth, its dead letters counted by error type (the runtime's evidence, or NO_EVIDENCE), the oldest
one's age, and the `jobctl` commands to triage them. A DLQ that could not be read says so instead.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

# The error type of a dead letter without the runtime's evidence; the same words as jobctl's (sqs_jobs.cli.dlq),
# so
# `jobctl dlq redrive --error-type` matches what the summary counts.
# SNS takes a subject of at most 100 printable ASCII characters.
SUBJECT_MAX_CHARS = 100
# SNS takes a message of at most 256 KiB; the summary stays well below.
MESSAGE_MAX_BYTES = 200_000
# Error types listed per queue, most frequent first; the rest are summed up in one line.
MAX_ERROR_TYPES = 10
# A name jobctl's --stack may take, pasted into a shell as it is.
_STACK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,127}")


@dataclass
class QueueReview:
    """What was read of one catalog queue's DLQ."""

    queue: str
    # ApproximateNumberOfMessages, read before the scan.
    depth: int = 0
    # Messages read: counted by error type (with one message ID of each as a sample).
    counts: dict[str, int] = field(default_factory=dict)
    samples: dict[str, str] = field(default_factory=dict)
    oldest_sent_at: datetime | None = None
    # False when the scan stopped early (at its cap, or out of time): the counts are a lower bound.
    complete: bool = True
    # Why the DLQ could not be read (access denied, deleted); None when it was.
    unreadable: str | None = None

    def add(self, message_id: str, error_type: str, sent_at: datetime | None) -> None:
        self.counts[error_type] = self.counts.get(error_type, 0) + 1
        self.samples.setdefault(error_type, message_id)
        if sent_at is not None and (self.oldest_sent_at is None or sent_at < self.oldest_sent_at):
            self.oldest_sent_at = sent_at

    @property
    def read(self) -> int:
        return sum(self.counts.values())

    @property
    def dead_letters(self) -> int:
        """The best count: the depth, or what was read if more (the depth is SQS's estimate)."""
        return max(self.depth, self.read)


@dataclass(frozen=True)
class Summary:
    subject: str
    message: str


def stack_of(dlq_urls: dict[str, str]) -> str | None:
    """The stack name, when every DLQ is named `<stack>-<queue>-dlq[.fifo]` (sqs_jobs.cdk.naming) with the same
    `<stack>`; None otherwise: jobctl's commands then go without --stack (its default stack)."""
    found: set[str] = set()
    for queue, url in dlq_urls.items():
        name = url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".fifo")
        suffix = f"-{queue}-dlq"
        if not name.endswith(suffix):
            return None
        found.add(name.removesuffix(suffix))
    if len(found) != 1:
        return None
    [stack] = found
    return stack if _STACK_NAME.fullmatch(stack) else None


def age_text(seconds: float) -> str:
    """`3 d 4 h`, `5 h 12 min`, `42 min`, `under a minute`."""
    minutes = int(max(0.0, seconds) // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min" if minutes else "under a minute"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _queue_lines(review: QueueReview, now: datetime, stack_option: str) -> list[str]:
    if review.unreadable is not None:
        return [f"{review.queue}: DLQ NOT READ: {review.unreadable}"]
    bound = "" if review.complete else "at least "
    head = f"{review.queue}: {bound}{_plural(review.dead_letters, 'dead letter')} (DLQ depth {review.depth}"
    head += ")" if review.complete else f"; read the first {review.read})"
    lines = [head]
    ranked = sorted(review.counts.items(), key=lambda item: (-item[1], item[0]))
    queue = shlex.quote(review.queue)
    for error_type, count in ranked[:MAX_ERROR_TYPES]:
        lines += [
            f"  {count:>5}  {error_type}",
            f"         jobctl dlq show {queue} {shlex.quote(review.samples[error_type])}{stack_option}",
            f"         jobctl dlq redrive {queue} --error-type {shlex.quote(error_type)} --dry-run{stack_option}",
        ]
    others = ranked[MAX_ERROR_TYPES:]
    if others:
        lines.append(f"  {sum(count for _, count in others):>5}  in {_plural(len(others), 'more error type')}")
    if review.read < review.dead_letters:
        lines.append(f"  {review.dead_letters - review.read:>5}  not read (in flight, or past the scan's limit)")
    if review.oldest_sent_at is not None:
        age = age_text((now - review.oldest_sent_at).total_seconds())
        of = "" if review.complete else " of those read"
        lines.append(f"  oldest{of}: {age} old (sent {_iso(review.oldest_sent_at)})")
    lines.append(f"  list them: jobctl dlq list {queue}{stack_option}")
    return lines


def _subject(prefix: str, text: str) -> str:
    subject = f"{prefix}{text}"
    subject = "".join(char if " " <= char <= "~" else "?" for char in subject)
    return subject if len(subject) <= SUBJECT_MAX_CHARS else subject[: SUBJECT_MAX_CHARS - 3] + "..."


def summarize(reviews: Sequence[QueueReview], review_id: str, now: datetime, stack: str | None) -> Summary:
    """The one notification of a review: a subject (<= 100 characters) and a plain-text message."""
    readable = [review for review in reviews if review.unreadable is None]
    holding = [review for review in readable if review.dead_letters]
    unreadable = len(reviews) - len(readable)
    total = sum(review.dead_letters for review in holding)
    bound = "" if all(review.complete for review in holding) else "at least "
    if holding:
        headline = f"{bound}{_plural(total, 'dead letter')} in {len(holding)} of {_plural(len(reviews), 'queue')}"
    else:
        headline = f"all empty ({_plural(len(readable), 'queue')})" if not unreadable else "no dead letters read"
    if unreadable:
        headline += f", {unreadable} DLQ{'' if unreadable == 1 else 's'} NOT READ"
    prefix = f"[{stack}] " if stack else ""
    # jobctl takes its global options anywhere: last, the commands read the same with or without it.
    stack_option = f" --stack {stack}" if stack else ""
    lines = [f"DLQ review {review_id}: {headline}.", f"Read at {_iso(now)}.", ""]
    # What needs a look first: the DLQs not read, then those holding the most; the empty ones in one line.
    ranked = [review for review in reviews if review.unreadable is not None]
    ranked += sorted(holding, key=lambda review: -review.dead_letters)
    for review in ranked:
        lines += [*_queue_lines(review, now, stack_option), ""]
    empty = [review.queue for review in readable if not review.dead_letters]
    if empty:
        lines += [f"Empty: {', '.join(empty)}.", ""]
    if holding:
        lines.append(
            "Each dead letter is a job that will not run again by itself: redrive it once its cause is fixed, or "
            "discard it. Error types count only the runtime's own evidence."
        )
    lines.append(
        "This review is published on every run, even when every DLQ is empty: if it stops arriving, it did not run."
    )
    return Summary(subject=_subject(prefix, f"DLQ review: {headline}"), message=_bounded("\n".join(lines) + "\n"))


def _bounded(message: str) -> str:
    data = message.encode("utf-8")
    if len(data) <= MESSAGE_MAX_BYTES:
        return message
    marker = "\n...[cut: the summary is longer than SNS takes; see jobctl dlq list]\n"
    return data[: MESSAGE_MAX_BYTES - len(marker)].decode("utf-8", errors="ignore") + marker
