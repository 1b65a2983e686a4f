"""A job's next steps (`context.then(job, id)`): kept with its run's result, published after the run.

The intended steps are stored in the key's idempotency record with the result, `{"sqs_jobs_then": [[job, id,
key], ...], "result": <the job's result>}`, so that a redelivery answered from the record (the run succeeded, and
its worker died before publishing them) publishes them too. Each step is published with its own idempotency key
(the one given, else its job's default), so a second publish of it is answered as a duplicate. A job may name only
the jobs its `JobSpec.publishes` lists (its worker's routes): another is a permanent failure, said when it is named.
"""

from __future__ import annotations

from typing import Any

from sqs_jobs.errors import PermanentError

THEN = "sqs_jobs_then"
RESULT = "result"
# Steps one run may name: each is a publish after the run.
MAX_NEXT_STEPS = 10

NextStep = tuple[str, str, str | None]


class NextStepNotAllowedError(PermanentError):
    """A job named a next step its JobSpec.publishes does not list (its worker may not send it), or too many."""


def check(job: str, named: str, allowed: tuple[str, ...], already: int) -> None:
    if named not in allowed:
        raise NextStepNotAllowedError(
            f"job {job!r} may not publish {named!r} as a next step: add it to the job's `publishes` in the catalog "
            f"(it lists: {', '.join(allowed) or 'none'})"
        )
    if already >= MAX_NEXT_STEPS:
        raise NextStepNotAllowedError(f"job {job!r} named more than {MAX_NEXT_STEPS} next steps in one run")


def with_steps(result: Any, steps: list[NextStep]) -> Any:
    """The result as the record keeps it: as it is without steps, else with them."""
    if not steps:
        return result
    return {THEN: [list(step) for step in steps], RESULT: result}


def steps_of(kept: Any) -> list[NextStep]:
    """The steps a record's result holds (a fresh run's, or one replayed from the record); none if it holds none."""
    if not isinstance(kept, dict) or set(kept) != {THEN, RESULT} or not isinstance(kept[THEN], list):
        return []
    steps: list[NextStep] = []
    for step in kept[THEN]:
        if isinstance(step, list) and len(step) == 3 and all(isinstance(part, str | None) for part in step):
            job, entity_id, key = step
            if isinstance(job, str) and isinstance(entity_id, str):
                steps.append((job, entity_id, key))
    return steps
