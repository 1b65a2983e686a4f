"""DurableJobContext: what a durable job's code gets, in place of the SDK's DurableContext.

The job never imports the durable execution SDK: it calls `context.step(name, fn)`, `context.wait(seconds)` and
`context.heartbeat()`, and the runtime's promises apply to every step as to an ordinary job's run:
- a failure is classified by the project's rules (sqs_jobs.worker.classify, the job's PERMANENT_ERRORS and
  TRANSIENT_ERRORS first): a permanent one fails the step at once, a transient one is retried after the queue's
  backoff (sqs_jobs.worker.backoff, full jitter), up to the queue's max_attempts per step;
- each attempt is cut at the job's `durable.step_time_limit_s` (StepTimeLimitError, transient);
- every step's start, end and retry is written to the key's durable record (sqs_jobs.durable.record): the
  heartbeat and what `jobctl job show` prints;
- a failed attempt's evidence travels in the SDK's own checkpoint of that failure, so a replay reads what the first
  run judged (AttemptEvidence);
- what a replay can't keep is refused at once, for good (DurableMisuseError): a step, a wait or a follow-up inside a
  step, a step name taken twice.
A step's result is checkpointed by Lambda: on a replay (after a wait, a retry or a lost invocation) a finished step
returns its checkpointed result without running again. A step interrupted mid-way (a crash, a killed process) runs
again from its start: its writes must be idempotent (docs/workflows.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import random
import re
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from aws_durable_execution_sdk_python.config import CallbackConfig, Duration, StepConfig
from aws_durable_execution_sdk_python.exceptions import (
    CallbackError,
    CallbackTimeoutError,
    DurableOperationError,
    NonDeterministicExecutionError,
    StepError,
)
from aws_durable_execution_sdk_python.retries import RetryDecision

from sqs_jobs.durable.record import (
    LAST_ERROR,
    LAST_ERROR_TYPE,
    NEXT_RETRY_AT,
    NOTE,
    STEP,
    STEP_ATTEMPT,
    STEPS_DONE,
    StaleGenerationError,
)
from sqs_jobs.worker.backoff import backoff_delay_s
from sqs_jobs.worker.classify import classify
from sqs_jobs.worker.deadletter import MAX_ERROR_MESSAGE_BYTES, MAX_TRACEBACK_BYTES
from sqs_jobs.worker.errors import (
    DurableMisuseError,
    DurableStepFailedError,
    EventRefusedError,
    EventTimeoutError,
    EventWaitError,
    JobCodeExitError,
    StepTimeLimitError,
    WorkerConfigError,
)
from sqs_jobs.worker.jobs import read_secret, resource_of
from sqs_jobs.worker.names import (
    CALLBACK_ID,
    DURATION,
    FAILED,
    RETRIED,
    RETRY_ATTEMPT,
    WAITING_FOR,
    WAITING_SINCE,
    WAITING_UNTIL,
    DeadLetterFailure,
)
from sqs_jobs.worker.observability import BatchTally

if TYPE_CHECKING:
    from aws_durable_execution_sdk_python.context import DurableContext
    from aws_durable_execution_sdk_python.types import StepContext
    from aws_lambda_powertools import Logger

    from sqs_jobs.durable.record import DurableRecords
    from sqs_jobs.durable.tracing import StepTracing
    from sqs_jobs.envelope import Envelope, Scalar
    from sqs_jobs.specs import QueueSpec
    from sqs_jobs.worker.clients import ClientFactory
    from sqs_jobs.worker.follow_ups import FollowUps
    from sqs_jobs.worker.http import HttpClient, JobHttp
    from sqs_jobs.worker.jobs import LoadedJob
    from sqs_jobs.worker.observability import Observability
    from sqs_jobs.worker.secrets import SecretCache

T = TypeVar("T")

# Step names of the runtime's own steps: a job's step may not take them.
RUNTIME_STEP_PREFIX = "jobs."
MAX_NOTE_CHARS = 200
# Where the evidence of a step that failed for good is named when no step failed: the job's code outside steps,
# or a replay that no longer matched the execution's checkpoints.
OUTSIDE_STEPS = "(outside steps)"
REPLAY = "(replay)"
# An event's name: what its sender names it by (JobPublisher.send_event, `jobctl job event`).
EVENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# How often the write naming a wait's callback is tried, from how long a pause, doubling (about 3 s in all).
WAITING_WRITE_ATTEMPTS = 5
WAITING_WRITE_BACKOFF_S = 0.2


@dataclass(frozen=True)
class AttemptEvidence:
    """One failed attempt of a step as the runtime judged it, carried in the SDK's checkpoint of the attempt's error
    (its `ErrorData`): a replay, which gets the checkpointed failure without asking the retry strategy again, reads
    the same evidence the first run had (its type, its attempt, permanent or retries exhausted), never a guess."""

    step: str
    error_type: str
    message: str
    traceback: str
    attempt: int
    transient: bool
    reason: str
    retry_after_s: float | None
    # "" while it may be retried; else how it failed for good (DeadLetterFailure).
    failure: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | None) -> AttemptEvidence | None:
        try:
            return cls(**json.loads(data)) if data else None
        except (TypeError, ValueError):
            return None

    def step_failed(self) -> DurableStepFailedError:
        return DurableStepFailedError(
            self.step,
            self.error_type,
            self.message,
            self.failure or DeadLetterFailure.PERMANENT,
            self.attempt,
            self.traceback,
        )


class StepAttemptError(DurableOperationError):
    """What escapes a step's attempt to the SDK: the job's error, judged (AttemptEvidence in its `data`, which the SDK
    checkpoints with the attempt's failure)."""

    def __init__(self, evidence: AttemptEvidence) -> None:
        super().__init__(message=f"{evidence.error_type}: {evidence.message}", data=evidence.to_json())
        self.evidence = evidence


class DurableJobContext:
    """One durable execution's view for the job's code: its envelope and key, its resources and clients, and
    checkpointed steps, waits and heartbeats."""

    def __init__(
        self,
        sdk: DurableContext,
        *,
        envelope: Envelope,
        key: str,
        generation: int,
        job: LoadedJob,
        queue: QueueSpec,
        records: DurableRecords,
        resources: Mapping[str, str],
        clients: ClientFactory,
        logger: Logger,
        observability: Observability | None = None,
        secrets: SecretCache | None = None,
        follow_ups: FollowUps | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
        tracing: StepTracing | None = None,
        http_client: Callable[[], HttpClient] | None = None,
    ) -> None:
        self._sdk = sdk
        self.envelope = envelope
        self.key = key
        self.generation = generation
        self._job = job
        self._queue = queue
        self._records = records
        self.resources = resources
        self.clients = clients
        self.logger = logger
        # The function's secret values, read on first use and cached across its executions; None: none to read.
        self._secrets = secrets
        # What the job asks to be published once the execution has succeeded (its end step publishes them).
        self.follow_ups = follow_ups
        # Set in a step's own thread: a follow-up named there would be lost on a replay (the step is not run).
        self._in_step = threading.local()
        self._rng = rng or random.Random()
        self._clock = clock
        # Each step attempt counts as a run of an ordinary job does: JobDuration, JobFailed, JobRetried and
        # RetryAttempt, under the queue and the job, so the queue's alarms and dashboard see durable jobs too.
        self._obs = observability
        self._tally = BatchTally()
        self._steps_passed = 0
        # Step names taken in this run of the job's code: a name taken twice is refused.
        self._names: set[str] = set()
        # The replay stopped matching the checkpoints (NonDeterministicExecutionError): no further step runs, and the
        # execution ends in failure even if the job's code caught it.
        self.replay_error: NonDeterministicExecutionError | None = None
        # A traced queue's: each step attempt a span (sqs_jobs.durable.tracing); None: nothing traced.
        self._tracing = tracing
        # The function's one HTTP client, built on a step's first request (`http`); None: none.
        self._http_client = http_client

    # --- what the job calls -----------------------------------------------------------------------------------

    def resource(self, name: str) -> str:
        return resource_of(self.resources, self.envelope.job, name)

    def client(self, service: str) -> Any:
        return self.clients(service)

    def secret(self, name: str) -> str:
        """The value of the secret resource `name`, as an ordinary job's `context.secret` reads it (cached for
        SECRET_CACHE_S). Read it where it is used, and never return it from a step: Lambda keeps a step's result
        in the execution's checkpoints."""
        return read_secret(self.resources, self.envelope.job, name, self._secrets)

    @property
    def http(self) -> JobHttp:
        """The job's HTTP client (an ordinary job's: 10 s connect / 30 s read, no retries, typed failures), inside a
        step only, each request carrying the step's own `Idempotency-Key`, `<job key>:<step name>`: the same for
        every attempt of the step and every replay, and another for each step (two steps' calls to one API are two
        operations, not one). Outside a step it is refused (DurableMisuseError): code there runs again on every
        replay, so its calls would be made again."""
        step = getattr(self._in_step, "name", None)
        if step is None:
            raise DurableMisuseError(
                "context.http outside a step: code outside steps runs again on every replay, so its calls would be "
                "made again; call it inside context.step(...)"
            )
        if self._http_client is None:
            raise WorkerConfigError(f"job {self.envelope.job!r}: this context has no HTTP client")
        from sqs_jobs.worker.http import JobHttp

        return JobHttp(self._http_client(), f"{self.key}:{step}")

    def then(
        self, job: str, entity_id: str, *, key: str | None = None, tenant: str | None = None, **fields: Scalar
    ) -> None:
        """Publish `job` for `entity_id` once the execution has succeeded, from its end step (so once, and with
        the same key every time: a second publish runs nothing); nothing if it fails. Checked now, as an ordinary
        job's `context.then` is (FollowUpNotPublishableError, TooManyFollowUpsError). Call it outside steps: the
        job's code outside steps runs again on every replay and names it again, where a finished step does not
        run (a call inside one is refused, DurableMisuseError, and fails that step for good)."""
        self._refuse_in_step("context.then", "a follow-up named there would be lost")
        if self.follow_ups is None:
            raise WorkerConfigError(f"job {self.envelope.job!r}: this context publishes no follow-up jobs")
        self.follow_ups.add(job, entity_id, key=key, tenant=tenant, fields=fields)

    def step(self, name: str, fn: Callable[[], T]) -> T:
        """Run `fn()` once as the checkpointed step `name` and return its result (JSON-serializable), or on a
        replay the result it had. Names must be unique within the execution and stable across deployments: Lambda
        matches a replay's steps to its checkpoints by their order and names. Refused (DurableMisuseError, for
        good): inside another step, a name taken twice, a name starting `jobs.`."""
        self._refuse_in_step(
            f"context.step({name!r})", "a replay does not run a finished step, so its steps would shift"
        )
        if name.startswith(RUNTIME_STEP_PREFIX):
            raise DurableMisuseError(f"step name {name!r}: names starting {RUNTIME_STEP_PREFIX!r} are the runtime's")
        self._claim_name("step", name, "chunk-<n>")
        ran = False

        def attempt(step_context: StepContext) -> T:
            nonlocal ran
            ran = True
            self._beat(**{STEP: name, STEP_ATTEMPT: step_context.attempt, NEXT_RETRY_AT: None})
            started = time.monotonic()
            traced = self._tracing.attempt(name, step_context.attempt) if self._tracing else contextlib.nullcontext()
            with traced as span:
                try:
                    return self._within_limit(name, fn)
                except Exception as error:
                    evidence = self._judged(name, error, step_context.attempt)
                    if self._tracing is not None:
                        self._tracing.failed(span, evidence.error_type, not evidence.failure)
                    raise StepAttemptError(evidence) from error
                finally:
                    self._tally.sample(self._job.spec.name, DURATION, round((time.monotonic() - started) * 1000, 3))

        try:
            result = self._sdk.step(attempt, name=name, config=StepConfig(retry_strategy=self._retry_of(name)))
        except StepError as error:
            raise self._failed(name, error) from error
        except NonDeterministicExecutionError as error:
            self.replay_error = error
            raise
        finally:  # also when the SDK suspends the invocation for a retry's delay
            self.flush_metrics()
        self._steps_passed += 1
        if ran:  # a replayed step wrote its record when it ran
            self._beat(**{STEP: name, STEPS_DONE: self._steps_passed, STEP_ATTEMPT: None})
        return result

    def wait(self, seconds: int, name: str | None = None) -> None:
        """Suspend the execution for `seconds` (at least 1): no invocation runs, and none is billed, meanwhile."""
        self._refuse_in_step("context.wait", "a step's attempt runs within one invocation")
        self._sdk.wait(Duration.from_seconds(seconds), name=name)

    def wait_for_event(self, name: str, *, timeout_s: int) -> Any:
        """Suspend the execution until the event `name` is sent to this job (JobPublisher.send_event, `jobctl job
        event`; docs/workflows.md "Waiting for an event") and return its payload (JSON-decoded; None when none was
        sent). No invocation runs, and none is billed, meanwhile; `jobctl job show` says what it waits for and until
        when. No event within `timeout_s` (1 s up to the execution's timeout): EventTimeoutError, permanent (listed
        in the job's TRANSIENT_ERRORS, the wait starts again, up to the queue's max_attempts waits). A sender's
        failure in its place, or a payload that is not JSON: EventRefusedError. Names follow step names' rules:
        unique within the execution, stable across deployments; an event sent before the job waits for it is
        refused to its sender (EventNotAwaitedError), never kept."""
        self._refuse_in_step(f"context.wait_for_event({name!r})", "a step's attempt runs within one invocation")
        if not isinstance(name, str) or not EVENT_NAME.fullmatch(name) or name.startswith(RUNTIME_STEP_PREFIX):
            raise DurableMisuseError(
                f"event name {name!r}: 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit, "
                f"not starting {RUNTIME_STEP_PREFIX!r}"
            )
        limit_s = self._job.spec.durable.execution_timeout_s if self._job.spec.durable else None
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int) or timeout_s < 1:
            raise DurableMisuseError(f"wait_for_event({name!r}): timeout_s {timeout_s!r} is not a whole number >= 1")
        if limit_s is not None and timeout_s > limit_s:
            raise DurableMisuseError(
                f"wait_for_event({name!r}): timeout_s {timeout_s} is past the execution's timeout ({limit_s} s)"
            )
        self._claim_name("event", name, "approved-<n>")
        attempt = 1
        while True:
            try:
                return self._waited(name, f"{name}#{attempt}" if attempt > 1 else name, timeout_s)
            except EventTimeoutError as error:
                found = classify(error, self._job.permanent_errors, self._job.transient_errors)
                if not found.transient or attempt >= self._queue.max_attempts:
                    raise
                self.logger.info("no event within the wait's timeout; waiting again", extra={"event": name})
                attempt += 1

    def _claim_name(self, kind: str, name: str, example: str) -> None:
        """Take `name` for a step or an event of this run of the job's code: refused if taken (steps and events share
        one set of names); a replay that stopped matching its checkpoints runs nothing more."""
        if name in self._names:
            raise DurableMisuseError(
                f"{kind} name {name!r} is taken twice (steps and events share one set of names): each needs a name "
                f"of its own (e.g. {example!r})"
            )
        if self.replay_error is not None:
            raise self.replay_error
        self._names.add(name)

    def _waited(self, name: str, operation: str, timeout_s: int) -> Any:
        """One wait for `name`, as the checkpointed callback `operation`: its callback written to the durable
        record while it is pending (so the event's sender finds it), removed once it has ended."""
        try:
            callback = self._sdk.create_callback(
                name=operation, config=CallbackConfig(timeout=Duration.from_seconds(timeout_s))
            )
        except NonDeterministicExecutionError as error:
            self.replay_error = error
            raise
        checkpoint = callback.state.get_checkpoint_result(callback.operation_id)
        ended = checkpoint.is_succeeded() or checkpoint.is_failed() or checkpoint.is_timed_out()
        ended = ended or checkpoint.is_cancelled() or checkpoint.is_stopped()
        if not ended:  # a replay past its end wrote its end already
            started = checkpoint.operation.start_timestamp if checkpoint.operation is not None else None
            since = started.timestamp() if started is not None else self._clock()
            self._mark_waiting(
                {
                    WAITING_FOR: name,
                    CALLBACK_ID: callback.callback_id,
                    WAITING_SINCE: since,
                    WAITING_UNTIL: since + timeout_s,
                    NEXT_RETRY_AT: None,
                }
            )
        done = dict.fromkeys((WAITING_FOR, CALLBACK_ID, WAITING_SINCE, WAITING_UNTIL))
        try:
            payload = callback.result()  # suspends the execution until the callback ends
        except CallbackTimeoutError as error:
            self._beat(**done)
            raise EventTimeoutError(name, f"no event {name!r} came within {timeout_s} s") from error
        except CallbackError as error:
            self._beat(**done)
            raise EventRefusedError(name, f"event {name!r} was sent as a failure: {error.message}") from error
        self._beat(**done)
        if payload is None or payload == "":
            return None
        try:
            return json.loads(payload)
        except ValueError as error:
            raise EventRefusedError(name, f"event {name!r}'s payload is not JSON: {error}") from error

    def _mark_waiting(self, values: dict[str, Any]) -> None:
        """Write what the execution waits for: unlike a heartbeat, its sender can't find the wait without it, so a
        refused write is tried again (a throttle passes). If it never holds, the wait times out into the DLQ with its
        evidence, and a redrive waits again."""
        for attempt in range(WAITING_WRITE_ATTEMPTS):
            try:
                self._records.beat(self.key, self.generation, **values)
                return
            except StaleGenerationError:  # its execution ended (or its key moved on): the end stands
                return
            except Exception:
                if attempt == WAITING_WRITE_ATTEMPTS - 1:
                    self.logger.warning("could not write what the execution waits for", exc_info=True)
                    return
                time.sleep(WAITING_WRITE_BACKOFF_S * 2**attempt)

    def heartbeat(self, note: str = "") -> None:
        """Say the execution is alive (and, optionally, how far it is): written to its durable record now."""
        self._beat(**({NOTE: note[:MAX_NOTE_CHARS]} if note else {}))

    def progress(self, done: float, total: float | None = None, note: str = "") -> None:
        shown = f"{done:g}/{total:g}" if total is not None else f"{done:g}"
        self.heartbeat(f"{shown} {note}".strip())

    # --- the runtime's part -----------------------------------------------------------------------------------

    @property
    def steps_passed(self) -> int:
        return self._steps_passed

    def failure_of(self, error: Exception) -> DurableStepFailedError:
        """The evidence of the job's failure, `error` being what its code raised: a step's failure for good as its
        checkpoint says; a replay that no longer matched the checkpoints; else the job's code outside steps (its
        orchestration, which a replay runs again the same way: permanent)."""
        if isinstance(error, DurableStepFailedError):
            return error
        if isinstance(error, NonDeterministicExecutionError):
            return failed_for_good(REPLAY, error)
        if isinstance(error, EventWaitError):
            return failed_for_good(f"(event {error.event})", error)
        return failed_for_good(OUTSIDE_STEPS, error)

    def _refuse_in_step(self, call: str, why: str) -> None:
        """Refuse `call` in a step's thread, and fail that step for good even if the job's code catches the error."""
        inside = getattr(self._in_step, "name", None)
        if inside is None:
            return
        error = DurableMisuseError(f"{call} inside step {inside!r}: call it outside steps ({why})")
        if getattr(self._in_step, "misuse", None) is None:
            self._in_step.misuse = error
        raise error

    def flush_metrics(self) -> None:
        if self._obs is not None:
            self._tally.flush(self._obs, self._queue.name)

    def _beat(self, **values: Any) -> None:
        try:
            self._records.beat(self.key, self.generation, **values)
        except StaleGenerationError:  # its execution ended (or its key moved on): the end stands
            self.logger.info("durable record already ended; heartbeat not written")
        except Exception:  # the record is for operators: a write that fails never fails the job
            self.logger.warning("could not write the durable record", exc_info=True)

    def _within_limit(self, name: str, fn: Callable[[], T]) -> T:
        """`fn()` in a thread of its own, waited for at most the step's time limit (a thread can't be killed: a
        cut step's thread runs on, unwaited, as a cut run's does in the worker)."""
        limit_s = self._job.spec.durable.step_time_limit_s if self._job.spec.durable else None
        outcome: dict[str, Any] = {}

        def target() -> None:
            self._in_step.name = name
            self._in_step.misuse = None
            try:
                outcome["value"] = fn()
            except BaseException as error:  # carried to the waiting thread
                outcome["error"] = error
            if self._in_step.misuse is not None:  # refused, and caught by the job's code: the step fails all the same
                outcome["error"] = self._in_step.misuse

        # A traced step's code runs under its attempt's span (its own instrumented calls are the span's children).
        run = contextvars.copy_context().run if self._tracing is not None else None
        thread = threading.Thread(
            target=(lambda: run(target)) if run is not None else target, name=f"step-{name}", daemon=True
        )
        thread.start()
        thread.join(limit_s)
        if thread.is_alive():
            raise StepTimeLimitError(f"step {name!r} ran past its {limit_s}s time limit")
        if "error" in outcome:
            error = outcome["error"]
            if not isinstance(error, Exception):  # SystemExit and the like: the job's code, not the runtime's end
                raise JobCodeExitError(f"step {name!r} raised {type(error).__name__}: {error}") from error
            raise error
        return outcome["value"]  # type: ignore[no-any-return]

    def _judged(self, name: str, error: Exception, attempt: int) -> AttemptEvidence:
        """A failed attempt, classified by the project's rules (the job's overrides first): whether it may be
        retried, and if not, how it failed for good."""
        found = classify(error, self._job.permanent_errors, self._job.transient_errors)
        failure = ""
        if not found.transient:
            failure = DeadLetterFailure.PERMANENT
        elif attempt >= self._queue.max_attempts:
            failure = DeadLetterFailure.RETRIES_EXHAUSTED
        return AttemptEvidence(
            step=name,
            error_type=type(error).__name__,
            message=str(error)[:MAX_ERROR_MESSAGE_BYTES],
            traceback="".join(traceback.format_exception(error))[-MAX_TRACEBACK_BYTES:],
            attempt=attempt,
            transient=found.transient,
            reason=found.reason,
            retry_after_s=found.retry_after_s,
            failure=failure,
        )

    def _retry_of(self, name: str) -> Callable[[Exception, int], RetryDecision]:
        def decide(error: Exception, attempt: int) -> RetryDecision:
            evidence = error.evidence if isinstance(error, StepAttemptError) else self._judged(name, error, attempt)
            self._tally.add(self._job.spec.name, FAILED)
            last = {LAST_ERROR_TYPE: evidence.error_type, LAST_ERROR: evidence.message, STEP_ATTEMPT: attempt}
            if evidence.failure:
                self._beat(**{**last, NEXT_RETRY_AT: None})
                return RetryDecision.no_retry()
            delay_s = max(
                1,
                backoff_delay_s(
                    attempt, self._queue.backoff_base_s, self._queue.backoff_cap_s, self._rng, evidence.retry_after_s
                ),
            )
            self._tally.add(self._job.spec.name, RETRIED)
            self._tally.sample(self._job.spec.name, RETRY_ATTEMPT, attempt)
            self.logger.info(
                "durable step failed; retried after a backoff",
                extra={"step": name, "attempt": attempt, "delay_s": delay_s, "reason": evidence.reason},
            )
            self._beat(**{**last, NEXT_RETRY_AT: self._clock() + delay_s})
            return RetryDecision.retry(Duration.from_seconds(delay_s))

        return decide

    def _failed(self, name: str, error: StepError) -> DurableStepFailedError:
        """The step's failure for good, from the evidence its checkpoint carries: the same on the first run and on
        every replay. A checkpoint without it (written by an older runtime) gives what the SDK kept."""
        evidence = AttemptEvidence.from_json(error.data)
        if evidence is not None:
            return evidence.step_failed()
        return DurableStepFailedError(
            name,
            error.error_type.rsplit(".", 1)[-1],
            error.message or "",
            DeadLetterFailure.PERMANENT,
            self._queue.max_attempts,
            "".join(error.stack_trace or []),
        )


def failed_for_good(where: str, error: Exception) -> DurableStepFailedError:
    """A failure of the job's, outside any step (`where` says what failed), as permanent evidence."""
    return DurableStepFailedError(
        where,
        type(error).__name__,
        str(error)[:MAX_ERROR_MESSAGE_BYTES],
        DeadLetterFailure.PERMANENT,
        1,
        "".join(traceback.format_exception(error))[-MAX_TRACEBACK_BYTES:],
    )
