"""The model's job (tests/functional/test_model.py): does what the model planned for its ID, and says so.

Each run records its start (its key and run number) here, then makes its side effect through its own client, a
PutItem to the `effects` table (so a run cut at its time limit is fenced from it as from any call), then follows
its plan: a progress report (where a cancel is seen), a cancel asked of it by the operator in the middle of its run,
a follow-up job, a transient failure, a permanent one."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqs_jobs.envelope import Envelope
from sqs_jobs.errors import PermanentError
from sqs_jobs.worker.errors import TransientError
from sqs_jobs.worker.jobs import JobContext

FOLLOW_UP_JOB = "done"


@dataclass
class Plan:
    """What runs of one ID do: fail transiently the first `transient` runs; fail permanently until `fixed`; run past
    the time limit (`slow`); report progress; ask the operator to cancel it mid-run; name a follow-up."""

    transient: int = 0
    permanent: bool = False
    slow: bool = False
    progress: bool = False
    cancel_mid_run: bool = False
    follow_up: bool = False


_LOCK = threading.Lock()
_SEQUENCE = itertools.count()
PLANS: dict[str, Plan] = {}
FIXED: set[str] = set()
# (sequence, key, run number) of every run's start, in order; the keys of the runs that returned.
STARTS: list[tuple[int, str, int]] = []
RETURNED: list[str] = []
# (the model's serial of the published message, the key it ran under) of every run's start.
MESSAGES: list[tuple[str, str]] = []
# Called with (job, ID, tenant, key) by a run whose plan cancels it mid-run: the model's operator.
CANCEL: list[Callable[[str, str, str | None, str | None], None]] = []
SLOW_S = 1.6


def reset() -> None:
    with _LOCK:
        PLANS.clear()
        FIXED.clear()
        STARTS.clear()
        RETURNED.clear()
        MESSAGES.clear()
        CANCEL.clear()


def run(envelope: Envelope, context: JobContext) -> None:
    plan = PLANS.get(envelope.id, Plan())
    with _LOCK:
        STARTS.append((next(_SEQUENCE), context.key, context.attempt))
        MESSAGES.append((str(envelope.extra.get("m", "")), context.key))
        started = sum(1 for _, key, _ in STARTS if key == context.key)
    if plan.slow and started == 1:
        time.sleep(SLOW_S)  # past its time limit: cut, and fenced from what follows
    context.client("dynamodb").put_item(
        TableName=context.resource("effects"),
        Item={
            "effect": {"S": f"{context.key}#{context.attempt}#{time.monotonic_ns()}"},
            "key": {"S": context.key},
            "run": {"N": str(context.attempt)},
        },
    )
    if plan.cancel_mid_run and started == 1:
        for cancel in CANCEL:
            cancel(envelope.job, envelope.id, envelope.tenant, envelope.key)
    if plan.progress:
        context.progress(1, 2, "half way")
    if plan.follow_up and envelope.job != FOLLOW_UP_JOB:
        context.then(FOLLOW_UP_JOB, f"after-{envelope.id}")
    if started <= plan.transient:
        raise TransientError(f"downstream busy (run {started} of {envelope.id})")
    if plan.permanent and envelope.id not in FIXED:
        raise PermanentError(f"entity {envelope.id} can't be processed")
    with _LOCK:
        RETURNED.append(context.key)
