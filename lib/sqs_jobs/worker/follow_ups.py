"""Follow-up jobs a run asks for: `context.then(job, id, ...)` names the next job of a pipeline while the run
works, and the runtime publishes it only once the run has succeeded, before the run's message is acknowledged.

- Kept with the run: the follow-ups are written into the key's idempotency record by the same write that marks the
  run completed (no write of their own), so a redelivery answered as a duplicate from that record (the worker died
  after the run, before publishing or acknowledging) publishes them too.
- Published at least once, run once: a follow-up's envelope is the same on every publish (its key is the one given,
  or the default `<job>:<id>`), so a second publish is answered from the follow-up's own key, never run twice.
- A run that fails publishes nothing, and its retry asks again; a run's follow-ups are those of the run that
  succeeded.
- Routed and granted like batch callbacks: a job may follow up only with the jobs its JobSpec.publishes lists (the
  stack grants its worker those queues and nothing else); any other is refused in the run (FollowUpNotPublishableError).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from sqs_jobs.envelope import Envelope, Scalar, build_envelope, parse_envelope
from sqs_jobs.worker.errors import FollowUpNotPublishableError, TooManyFollowUpsError
from sqs_jobs.worker.names import FOLLOW_UP_PUBLISHED

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

    from sqs_jobs.publisher import JobPublisher
    from sqs_jobs.worker.observability import BatchTally

# At most this many per run: one SQS SendMessageBatch, and at most ~10 KB of envelopes in the key's record.
MAX_FOLLOW_UPS = 10


class FollowUps:
    """The follow-ups one run asked for, in the order it asked; the same one twice is kept once."""

    def __init__(self, job: str, publishable: Collection[str]) -> None:
        self._job = job
        self._publishable = frozenset(publishable)
        self._envelopes: list[Envelope] = []
        self._lock = threading.Lock()

    def add(
        self,
        job: str,
        entity_id: str,
        *,
        key: str | None = None,
        tenant: str | None = None,
        fields: Mapping[str, Scalar] | None = None,
    ) -> Envelope:
        if job not in self._publishable:
            listed = ", ".join(sorted(self._publishable)) or "none"
            raise FollowUpNotPublishableError(
                f"job {self._job!r} may not publish {job!r}: add it to its JobSpec.publishes (listed: {listed})"
            )
        envelope = build_envelope(job, entity_id, self._publishable, key=key, extra=fields, tenant=tenant)
        with self._lock:
            if envelope not in self._envelopes:
                if len(self._envelopes) >= MAX_FOLLOW_UPS:
                    raise TooManyFollowUpsError(
                        f"job {self._job!r} asked for more than {MAX_FOLLOW_UPS} follow-ups in one run; publish a "
                        "batch (JobPublisher.batch) from one of them instead"
                    )
                self._envelopes.append(envelope)
        return envelope

    def envelopes(self) -> list[Envelope]:
        with self._lock:
            return list(self._envelopes)

    def encoded(self) -> str | None:
        """What the key's record keeps; None: none asked for."""
        with self._lock:
            if not self._envelopes:
                return None
            return json.dumps([envelope.to_dict() for envelope in self._envelopes], separators=(",", ":"))


def decoded(kept: str, publishable: Collection[str]) -> list[Envelope]:
    """The follow-ups a key's record keeps, checked again by the envelope's rules (the record is the runtime's
    own, but what it holds came from a job's code)."""
    return [parse_envelope(json.dumps(body), publishable) for body in json.loads(kept)]


def publish_follow_ups(
    publisher: JobPublisher, follow_ups: list[Envelope], asking_job: str, tally: BatchTally, logger: Logger
) -> None:
    """Publish a succeeded run's follow-ups (an ordinary run's or a durable execution's) and account for them:
    `FollowUpPublished` under the asking job, per follow-up job, and one log line. Raises what the publish raised,
    having counted nothing: each caller decides what a failed publish means for its record."""
    publisher.publish_many(follow_ups)
    for follow_up in follow_ups:
        tally.add(asking_job, FOLLOW_UP_PUBLISHED, reason=follow_up.job)
    logger.info("follow-up jobs published", extra={"follow_ups": [f"{f.job}:{f.id}" for f in follow_ups]})
