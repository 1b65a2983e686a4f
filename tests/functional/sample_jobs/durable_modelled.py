"""The durable model's jobs (tests/functional/test_model_durable.py): a durable job that does what the model planned
for its ID, and the ordinary job its follow-ups and batch callbacks run.

The durable job names its follow-up (outside steps, as it must), runs one step `fetch` that records its start and
its side effect here and then follows the plan (a late progress report of an attempt cut at its time limit, a
transient failure, a permanent one, a step inside the step), waits (so every execution is replayed at least once),
planned to await, waits for the event `go` (recording the payload it got in RECEIVED) until AWAIT_S pass, and runs a
second step. Planned non-deterministic, its first step's name changes on every replay of its code; planned
to hang, its code outside steps blocks (a call that never answers) until the model stops the execution, times it out
or lets it go. What the plan breaks holds until the model fixes the entity."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqs_jobs.envelope import Envelope
from sqs_jobs.errors import PermanentError
from sqs_jobs.worker.errors import TransientError

DURABLE_JOB = "djob"
FOLLOW_UP_JOB = "dnext"
# An attempt planned slow sleeps this long: past its step's 1 s time limit, and past its retry's success (the retry
# after a 1-2 s backoff, then a 1 s wait and a last step), so its late report meets a record that says SUCCEEDED.
SLOW_S = 4.0
# The event a planned `awaits` execution waits for, and how long before its wait times out (EventTimeoutError).
EVENT = "go"
AWAIT_S = 3


@dataclass
class Plan:
    """What executions of one ID do: fail the step's first `transient` attempts; fail it permanently, be
        non-deterministic outside steps, or call a step inside a step until fixed; run its first attempt past the step's
        time limit and report progress late (`slow`); block outside steps until released (`hang`); name a follow-up;
    wait for the event EVENT (`awaits`)."""

    transient: int = 0
    permanent: bool = False
    nondeterministic: bool = False
    nested: bool = False
    slow: bool = False
    hang: bool = False
    follow_up: bool = False
    awaits: bool = False


@dataclass(frozen=True)
class Start:
    """An attempt of a step, as it started."""

    sequence: int
    key: str
    generation: int
    step: str
    attempt: int


@dataclass(frozen=True)
class Effect:
    """A side effect, made by an attempt; `cut`: by one cut at its time limit, which runs on unwaited."""

    sequence: int
    key: str
    generation: int
    cut: bool


_LOCK = threading.Lock()
_SEQUENCE = itertools.count()
_REPLAYS = itertools.count()
PLANS: dict[str, Plan] = {}
FIXED: set[str] = set()
STARTS: list[Start] = []
EFFECTS: list[Effect] = []
# The keys of the ordinary runs (follow-ups, callbacks) that returned.
RETURNED: list[str] = []
# What each awaiting execution's wait returned: (key, generation, the payload's nonce).
RECEIVED: set[tuple[str, int, int]] = set()
# Executions blocked outside steps, by (key, generation), each until its event is set; those that hung once.
HUNG: dict[tuple[str, int], threading.Event] = {}
_HUNG_ONCE: set[tuple[str, int]] = set()
# Threads running the durable job's code (an invocation, or a step's attempt), hung ones included.
_ACTIVE = [0]


def reset() -> None:
    release()
    with _LOCK:
        PLANS.clear()
        FIXED.clear()
        STARTS.clear()
        EFFECTS.clear()
        RETURNED.clear()
        RECEIVED.clear()
        HUNG.clear()
        _HUNG_ONCE.clear()


def release() -> None:
    """Let every hung execution's code go on."""
    with _LOCK:
        hung = list(HUNG.values())
    for event in hung:
        event.set()


def active() -> int:
    with _LOCK:
        return _ACTIVE[0]


@contextmanager
def _running() -> Iterator[None]:
    with _LOCK:
        _ACTIVE[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE[0] -= 1


def run(envelope: Envelope, context: Any) -> Any:
    if envelope.job == FOLLOW_UP_JOB:
        with _LOCK:
            RETURNED.append(context.key)
        return None
    with _running():
        return _durable(envelope, context)


def _durable(envelope: Envelope, context: Any) -> dict[str, str]:
    plan = PLANS.get(envelope.id, Plan())
    fixed = envelope.id in FIXED
    key, generation = context.key, context.generation
    if plan.follow_up:
        context.then(FOLLOW_UP_JOB, f"after-{envelope.id}")
    if plan.hang and (key, generation) not in _HUNG_ONCE:
        event = threading.Event()
        with _LOCK:
            _HUNG_ONCE.add((key, generation))
            HUNG[(key, generation)] = event
        event.wait(60)
        with _LOCK:
            HUNG.pop((key, generation), None)
    # A name made outside steps from something that changes between replays: the replay no longer matches.
    name = f"fetch-{next(_REPLAYS)}" if plan.nondeterministic and not fixed else "fetch"
    context.step(name, lambda: _fetch(envelope, context, plan, name))
    context.wait(1)
    if plan.awaits:
        payload = context.wait_for_event(EVENT, timeout_s=AWAIT_S)
        with _LOCK:
            RECEIVED.add((key, generation, int(payload["n"])))
    context.step("after", lambda: 2)
    return {"done": envelope.id}


def _fetch(envelope: Envelope, context: Any, plan: Plan, name: str) -> int:
    with _running():
        fixed = envelope.id in FIXED
        key, generation = context.key, context.generation
        with _LOCK:
            attempt = 1 + sum(1 for s in STARTS if (s.key, s.generation, s.step) == (key, generation, name))
            STARTS.append(Start(next(_SEQUENCE), key, generation, name, attempt))
        cut = plan.slow and attempt == 1
        if cut:
            time.sleep(SLOW_S)  # past its time limit: its retry may end the execution before this reports
            context.progress(1, 2, "late")
        with _LOCK:
            EFFECTS.append(Effect(next(_SEQUENCE), key, generation, cut))
        if plan.nested and not fixed:
            context.step("inner", lambda: 1)  # refused at once, for good
        if attempt <= plan.transient:
            raise TransientError(f"downstream busy (attempt {attempt} of {envelope.id})")
        if plan.permanent and not fixed:
            raise PermanentError(f"entity {envelope.id} can't be processed")
        return attempt
