"""Makes its side effect (counted per ID), then waits in library code past its time limit and returns: a run the
time limit cuts after its work was done, which ends a moment later without anything more. Its envelope's `then`
field names a follow-up (`job:id`) it asks for first."""

from __future__ import annotations

import threading
from collections import Counter

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext

SIDE_EFFECTS: Counter[str] = Counter()
# Past the 1 s limit, well before the runtime interrupts a cut run again (1 s after the cut).
WAIT_S = 1.3


def run(envelope: Envelope, context: JobContext) -> None:
    SIDE_EFFECTS[envelope.id] += 1
    if envelope.extra.get("then"):
        job, entity_id = str(envelope.extra["then"]).split(":", 1)
        context.then(job, entity_id)
    threading.Event().wait(WAIT_S)  # in threading: never interrupted there
