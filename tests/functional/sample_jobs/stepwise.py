"""Works in three steps. After each it calls the test's hooks (BETWEEN: the test lists or cancels there, as an
operator would while it runs), then tells the runtime: by a progress report (the default) or, for an ID starting
with `call-`, by an AWS call of its own. STEPS[id] records the steps it did; FAIL_IDS fail transiently."""

from __future__ import annotations

from collections.abc import Callable

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.errors import TransientError
from sqs_jobs.worker.jobs import JobContext

STEPS: dict[str, list[int]] = {}
BETWEEN: list[Callable[[str, int], None]] = []
FAIL_IDS: set[str] = set()


def reset() -> None:
    """Forget every step, hook and failing ID (a test's start and end)."""
    STEPS.clear()
    BETWEEN.clear()
    FAIL_IDS.clear()


class StepFailedError(TransientError):
    """A downstream refused the step; the next run may do it."""


def run(envelope: Envelope, context: JobContext) -> None:
    if envelope.id in FAIL_IDS:
        raise StepFailedError(f"step 1 of {envelope.id} refused")
    for step in (1, 2, 3):
        STEPS.setdefault(envelope.id, []).append(step)
        for hook in BETWEEN:
            hook(envelope.id, step)
        if envelope.id.startswith("call-"):
            context.client("sqs").list_queues()
        else:
            context.progress(step, 3, f"step {step}")
