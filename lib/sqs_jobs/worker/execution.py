"""Executing a job: one record's run of its job, under its time limit and Powertools idempotency.

The idempotency layer runs in the record's thread, keyed on the business key, the key's runs counted in its record
(sqs_jobs.worker.run_ledger); only the job's code runs in a job thread, cut at its time limit and fenced after
(sqs_jobs.worker.time_limit); its downstream calls pass the circuit breakers (sqs_jobs.worker.downstream).
A twin that holds the key is waited for briefly. A run ends in an outcome (succeeded, or a duplicate answered from
the key's record) or in the error that stopped it; what that means for the record is settlement.py's to decide.
"""

from __future__ import annotations

import contextvars
import math
import threading
import time
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError

from sqs_jobs.envelope import Envelope
from sqs_jobs.limits import SETTLE_MARGIN_S
from sqs_jobs.worker.breaker import Breakers, Snapshot
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.errors import JobInProgressError
from sqs_jobs.worker.follow_ups import FollowUps
from sqs_jobs.worker.invocation import Delivery, Invocation, Outcome
from sqs_jobs.worker.jobs import JobContext, JobResult, LoadedJob
from sqs_jobs.worker.names import (
    CIRCUIT_OPENED,
    CUT_RUN_CALL,
    LIMIT_WAIT,
    RESULT_DROPPED,
    RUNTIME_JOB,
    CutRunCallReason,
)
from sqs_jobs.worker.observability import BatchTally, Observability
from sqs_jobs.worker.provenance import HELD_SINCE, PRIOR_ATTEMPTS, MessageAttributes
from sqs_jobs.worker.run_ledger import RunIdentity, RunLedger, StartedRun
from sqs_jobs.worker.settings import IDEMPOTENCY_KEY_PREFIX, WorkerSettings, idempotency_record_id
from sqs_jobs.worker.time_limit import JobRun, JobRunner

# Modules only a job's HTTP call or secret needs are imported there, on first use, not at cold start
# (docs/benchmarks.md, (a)).
if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from sqs_jobs.worker.batch_status import BatchStatus
    from sqs_jobs.worker.flow_control import Admission, FlowControl
    from sqs_jobs.worker.http import HttpClient
    from sqs_jobs.worker.secrets import SecretCache

# The idempotency payload is {"key": "<business key>"}; Powertools hashes the value under this path.
_KEY_PATH = "key"
# How long a record waits for a twin holding its key before it is handed back, and how often it looks.
IN_PROGRESS_PATIENCE_S = 2.0
IN_PROGRESS_POLL_S = 0.2
# How long the write that records a cut run which finished its work may take (in that run's own thread).
CUT_RUN_WRITE_S = 10.0
# Logged when a call a run had in flight at its cut is answered after it: its effect may have happened (what a
# timeout can't take back), and the run's retry relies on the job's key.
CUT_RUN_CALL_ENDED_MESSAGE = (
    "call of a run cut at its time limit ended after the cut; the retry relies on the job's key"
)


class _NoTimeLeft(Exception):
    """The run's start write took so long that the invocation can no longer serve the job's limit."""


class Execution:
    """One run of a job, as the idempotency layer calls it; `ran` tells a fresh run from a replayed result. A plain
    class: its dataclass cost every cold start 0.75 ms (docs/benchmarks.md, issue 33)."""

    def __init__(
        self,
        *,
        job: LoadedJob,
        context_for: Callable[[int], JobContext],
        limit_s: float,
        runner: JobRunner,
        breakers: Breakers,
        ledger: RunLedger,
        remaining_s: Callable[[], float],
        on_result_dropped: Callable[[str, str], None],
        log_keys: Mapping[str, Any],
        on_call_after_cut: Callable[[JobRun, str, str], None],
        admit: Callable[[StartedRun | None], Admission] | None = None,
        release: Callable[[Admission], None] | None = None,
        call_limit: Callable[[str, float], float] | None = None,
        list_running_after_s: float = 0.0,
        carry_context: bool = False,
    ) -> None:
        self.job = job
        self.context_for = context_for
        self.limit_s = limit_s
        self.runner = runner
        self.breakers = breakers
        self.ledger = ledger
        # The invocation's remaining seconds, and what a result that can't be kept says.
        self.remaining_s = remaining_s
        self.on_result_dropped = on_result_dropped
        # The record's log keys, for the job's own thread.
        self.log_keys = log_keys
        self.on_call_after_cut = on_call_after_cut
        # The job's flow control (its key's concurrency, its rate limit), passed before its code starts, and given
        # back when it ends; None: the job has none. `call_limit` is what its HTTP calls pass.
        self.admit = admit
        self.release = release
        self.call_limit = call_limit
        # How long a run its start write left unlisted goes before its key is listed as running (the queue's
        # setting).
        self.list_running_after_s = list_running_after_s
        # The job's code runs in the record's context (a traced queue's span): its own instrumented calls and the
        # jobs it publishes are the run's children.
        self.carry_context = carry_context
        self.ran = False
        self.completed = False
        # The run's start left the job too little time: it was given back before the job's code started.
        self.out_of_time = False
        self.run: JobRun | None = None
        # The follow-up jobs the run asked for (sqs_jobs.worker.follow_ups), as its record keeps them.
        self.follow_ups: str | None = None

    def __call__(self) -> JobResult:
        started = self.ledger.started()
        admission = self.admit(started) if self.admit is not None else None
        try:
            return self._run_admitted(started)
        finally:
            if admission is not None and self.release is not None:
                # `release` never raises: what follows a run never changes what the run came to.
                release, held = self.release, admission
                if self.run is not None and self.run.was_cut:
                    # A cut run's call may still be in flight: its key's slot is given back once its thread ends
                    # (or with its lease, which outlasts the longest call), never while the call could overlap
                    # the next run's.
                    self.run.when_ended(lambda: release(held))
                else:
                    release(held)

    def _run_admitted(self, started: StartedRun | None) -> JobResult:
        number = started.number if started is not None else 1
        if self.remaining_s() < self.limit_s + SETTLE_MARGIN_S:
            self.out_of_time = True
            raise _NoTimeLeft(f"{self.remaining_s():.3f}s left after the run's start; it needs {self.limit_s:g}s")
        self.ran = True
        context = self.context_for(number)
        logger = context.logger
        logger.thread_safe_append_keys(attempt=number)
        log_keys = {**self.log_keys, "attempt": number}
        self.run = JobRun(
            key=context.key,
            job=self.job.spec.name,
            attempt=number,
            limit_s=self.limit_s,
            target=self.job.run,
            args=(context.envelope, context),
            breakers=self.breakers,
            on_call_after_cut=self.on_call_after_cut,
            cancel_check=context.progress_reporter.raise_if_cancelled if context.progress_reporter else None,
            call_limit=self.call_limit,
            invocation_left=self.remaining_s,
            on_start=lambda: logger.thread_safe_append_keys(**log_keys),
            on_end=logger.thread_safe_clear_keys,
            on_long_run=self.ledger.list_running if started is not None and not started.listed else None,
            long_run_after_s=self.list_running_after_s,
            context=contextvars.copy_context() if self.carry_context else None,
        )
        result = self.runner.run(self.run)
        self.completed = True
        # Written with the run's completion: a duplicate answered from the record publishes them too.
        self.follow_ups = context.follow_ups.encoded() if context.follow_ups is not None else None
        self.ledger.keep_follow_ups(self.follow_ups)
        from sqs_jobs.worker.results import NOT_JSON, ResultNotStorableError, storable

        try:
            return storable(result)
        except ResultNotStorableError as error:
            self.on_result_dropped(error.reason, str(error))
        except Exception as error:  # a result whose own code raises while it is read: still the job's output
            self.on_result_dropped(NOT_JSON, f"reading the result raised {type(error).__name__}: {error}")
        return None

    def elapsed_ms(self) -> float | None:
        """How long the job's code ran; None if it never started."""
        return self.run.elapsed_ms() if self.run is not None and self.run.started else None


def _run_execution(*, idempotency: Mapping[str, str], execution: Execution) -> JobResult:
    return execution()


def _number(attributes: MessageAttributes, name: str) -> float | None:
    """A number the runtime's own bookkeeping carries (a previous runtime's copies), if it is one."""
    try:
        value = float(attributes.bookkeeping.get(name, ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _since(moment: float | None) -> float | None:
    return round(time.monotonic() - moment, 3) if moment is not None else None


class JobExecutor:
    """Runs a worker's jobs: builds each run's context and holds what the runs share (their job threads, the
    circuit breakers, the HTTP client, the secrets)."""

    def __init__(
        self,
        settings: WorkerSettings,
        clients: ClientFactory,
        observability: Observability,
        tally: BatchTally,
        ledger: RunLedger,
        invocation: Invocation,
        http_client: HttpClient | None = None,
    ) -> None:
        self._settings = settings
        self._queue = settings.queue
        self._clients = clients
        self._obs = observability
        self._tally = tally
        self._ledger = ledger
        self._invocation = invocation
        self._http = http_client
        self._http_lock = threading.Lock()
        self.runner = JobRunner(on_cut_run_end=self._cut_run_ended)
        self.breakers = Breakers(self._queue.circuit_breaker, on_open=self._circuit_opened)
        self._idempotency_config = IdempotencyConfig(
            event_key_jmespath=_KEY_PATH,
            raise_on_no_idempotency_key=True,
            expires_after_seconds=self._queue.idempotency_expiry_s,
        )
        self._run_once = idempotent_function(
            _run_execution,
            data_keyword_argument="idempotency",
            persistence_store=ledger,
            config=self._idempotency_config,
            key_prefix=IDEMPOTENCY_KEY_PREFIX,
        )

    def begin(self, context: LambdaContext) -> None:
        """An invocation starts: an in-progress record of a run that crashes in it expires with it."""
        self._idempotency_config.register_lambda_context(context)

    @cached_property
    def _secrets(self) -> SecretCache:
        """The worker's secret values, read through the jobs' own client: a read is part of the job's run (its
        time limit and the service's breaker apply)."""
        from sqs_jobs.worker.secrets import SecretCache

        return SecretCache(self._clients)

    def _http_client(self) -> HttpClient:
        """The worker's one HTTP client (one pool), built on a job's first request: most jobs make none."""
        with self._http_lock:
            if self._http is None:
                from sqs_jobs.worker.http import HttpClient

                self._http = HttpClient(connections_per_host=self._queue.records_in_parallel)
            return self._http

    def prepare(self, job: LoadedJob, envelope: Envelope, delivery: Delivery, key: str, limit_s: float) -> Execution:
        """The record's run of its job, its key's record made ready to count it."""
        self._obs.logger.thread_safe_append_keys(idempotency_key=key)
        lambda_context = self._invocation.context
        assert lambda_context is not None

        def context_for(attempt: int) -> JobContext:
            from sqs_jobs.worker.progress import ProgressReporter

            return JobContext(
                envelope=envelope,
                key=key,
                attempt=attempt,
                message_id=delivery.record.message_id,
                resources=self._settings.resources,
                clients=self._clients,
                logger=self._obs.logger,
                lambda_context=lambda_context,
                http_client_provider=self._http_client,
                secrets=self._secrets,
                # The key's record, written by this run only while it holds the key (its run number).
                progress_reporter=ProgressReporter(
                    lambda: self._clients("dynamodb"),
                    self._settings.idempotency_table,
                    idempotency_record_id(key),
                    attempt,
                    on_unwritten=lambda reason: self._obs.logger.warning(
                        "progress not recorded", extra={"reason": reason}
                    ),
                ),
                follow_ups=FollowUps(job.spec.name, job.spec.publishes),
                batch_reader=self._batch_status,
            )

        flow = self._flow_control
        execution = Execution(
            admit=self._admission(job, envelope, key, lambda_context) if flow and job.spec.limited else None,
            release=self._release if flow else None,
            call_limit=flow.call_limit(envelope) if flow else None,
            job=job,
            context_for=context_for,
            limit_s=limit_s,
            runner=self.runner,
            breakers=self.breakers,
            ledger=self._ledger,
            remaining_s=self._invocation.remaining_s,
            on_result_dropped=lambda reason, why: self._result_dropped(envelope.job, reason, why),
            # The job's thread logs with the record's keys too.
            log_keys=self._obs.logger.thread_safe_get_current_keys(),
            on_call_after_cut=self._call_after_cut,
            list_running_after_s=self._queue.list_running_after_s,
            carry_context=self._queue.tracing,
        )
        # A copy a previous runtime handed back carries the runs its ancestors used, and since when open breakers
        # held it; the ledger takes them over when it has no count of its own for the key.
        # The run's start and completion writes may take what the invocation has left less the settle margin; a
        # start that leaves the job too little time gives the run back (`_NoTimeLeft`).
        self._ledger.prepare(
            max_runs=self._queue.max_attempts,
            time_left=lambda: self._invocation.call_time_s(SETTLE_MARGIN_S if not execution.completed else 0.0),
            seed_runs=int(_number(delivery.attributes, PRIOR_ATTEMPTS) or 0),
            seed_held_since=_number(delivery.attributes, HELD_SINCE),
            first_delivery=delivery.receives == 1,
            identity=RunIdentity(
                queue=self._queue.name,
                job=envelope.job,
                job_id=envelope.id,
                key=key,
                run_by=f"{lambda_context.log_stream_name} {lambda_context.aws_request_id}",
                tenant=envelope.tenant or "",
                trace_id=_trace_id() if self._queue.tracing else "",
            ),
        )
        return execution

    def _batch_status(self, batch_id: str, callback: str) -> BatchStatus | None:
        """A batch callback's read of its batch: the job's own call (its client, its breaker, its time limit)."""
        from sqs_jobs.worker.batch_status import read_status

        return read_status(self._clients("dynamodb"), self._settings.idempotency_table, batch_id, callback)

    @cached_property
    def _flow_control(self) -> FlowControl | None:
        """The worker's flow control, if any of its jobs or endpoints has a limit (most have none)."""
        if not any(job.limited for job in self._queue.jobs) and not self._settings.endpoint_limits:
            return None
        # Loaded only here: a queue with no limits never imports its code.
        from sqs_jobs.worker.flow_control import FlowControl

        return FlowControl(
            # The runtime's own calls: bounded by what the invocation has left, as the run ledger's are.
            lambda: self._clients.within("dynamodb", self._invocation.call_time_s(SETTLE_MARGIN_S)),
            self._settings.idempotency_table,
            self._settings.resources,
            self._settings.endpoint_limits,
        )

    def _admission(
        self, job: LoadedJob, envelope: Envelope, key: str, lambda_context: LambdaContext
    ) -> Callable[[StartedRun | None], Admission]:
        """What a run of `job` passes before its code starts (its key's slot, its rate limit's token): waiting as
        long as the invocation can still serve its time limit after, its slot held until the invocation ends."""
        flow = self._flow_control
        assert flow is not None

        def admit(started: StartedRun | None) -> Admission:
            now = time.time()
            remaining_s = self._invocation.remaining_s()
            held_since = started.held_since if started is not None else None
            run_number = started.number if started is not None else 0
            admission = flow.admit(
                job.spec,
                envelope,
                holder=f"{idempotency_record_id(key)}#{run_number}#{lambda_context.aws_request_id}",
                wait_s=max(0.0, remaining_s - self._queue.time_limit_s(job.spec.name) - SETTLE_MARGIN_S - 1.0),
                # The run is cut by the invocation's end at the latest, and a call it had in flight then ends
                # within its own bound after: the slot is held that long at least, however the run ends.
                lease_until=now + remaining_s + self._longest_call_s(),
                held_s=max(0.0, now - held_since) if held_since is not None else 0.0,
            )
            if admission.waited_s > 0:
                self._tally.sample(envelope.job, LIMIT_WAIT, round(admission.waited_s * 1000, 3))
            return admission

        return admit

    def _longest_call_s(self) -> float:
        """The longest a call a job started can stay in flight: the HTTP client's whole-call deadline, or one
        attempt of a job's AWS call (the fence refuses a cut run's retries: sqs_jobs.worker.downstream)."""
        from sqs_jobs.worker.clients import JOB_AWS_ATTEMPT_S
        from sqs_jobs.worker.http import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_READ_TIMEOUT_S

        http_s = (
            self._http.total_timeout_s if self._http is not None else DEFAULT_CONNECT_TIMEOUT_S + DEFAULT_READ_TIMEOUT_S
        )
        return max(http_s, JOB_AWS_ATTEMPT_S)

    def _release(self, admission: Admission) -> None:
        """Give the run's key slot back. A failure is the runtime's (alarmed) and changes nothing of the run's
        outcome: the slot is free again when its lease ends."""
        flow = self._flow_control
        assert flow is not None
        try:
            flow.release(admission)
        except Exception:
            self._tally.runtime_fault("key_release")
            self._obs.logger.exception("could not give the key's slot back; it is free again when its lease ends")

    def run(self, execution: Execution, key: str) -> Outcome:
        """Run it, or answer it from the key's record; raises what stopped it."""
        # A twin delivered at the same moment usually finishes in milliseconds: wait briefly for its result
        # before handing this one back.
        patience_ends = time.monotonic() + IN_PROGRESS_PATIENCE_S
        while True:
            try:
                # The idempotency layer runs here, in the record's thread; only the job's code runs in the job
                # thread, so a run that is cut can never write the store (sqs_jobs.worker.time_limit).
                self._run_once(idempotency={_KEY_PATH: key}, execution=execution)
                return Outcome.SUCCEEDED if execution.ran else Outcome.DUPLICATE
            except IdempotencyAlreadyInProgressError as error:
                time_left = self._invocation.remaining_s() > execution.limit_s + SETTLE_MARGIN_S + IN_PROGRESS_POLL_S
                if time.monotonic() >= patience_ends or not time_left:
                    raise JobInProgressError(f"job key {key!r} is being run by another worker") from error

                time.sleep(IN_PROGRESS_POLL_S)

    # --- what a run says ----------------------------------------------------------------------------------------

    def _result_dropped(self, job: str, reason: str, why: str) -> None:
        self._tally.add(job, RESULT_DROPPED, reason=reason)
        self._obs.logger.warning(
            "the job's result can't be kept in its idempotency record; the run counts as completed without it",
            extra={"reason": reason, "why": why[:1024]},
        )

    def _call_after_cut(self, run: JobRun, what: str, outcome: str) -> None:
        """A run cut at its limit called a downstream (refused) or got a late answer: its effect may have happened
        after the record was settled, so it is said, with the cut run's own record keys (its thread's)."""
        self._tally.add(
            run.job or RUNTIME_JOB,
            CUT_RUN_CALL,
            reason=CutRunCallReason.REFUSED if outcome == "refused" else CutRunCallReason.ENDED,
        )
        self._obs.logger.warning(
            "call of a run cut at its time limit: refused" if outcome == "refused" else CUT_RUN_CALL_ENDED_MESSAGE,
            extra={"call": what, "outcome": outcome, "since_cut_s": _since(run.cut_at)},
        )

    def _cut_run_ended(self, run: JobRun) -> None:
        """The thread of a run cut at its limit is done at last (it is never reused). If its code ran to its end
        untouched (not interrupted, no call after the cut), every side effect it made was made before the cut:
        its key is recorded completed, unless a later run has started, so the retry the cut scheduled is answered
        as a duplicate instead of doing it all again."""
        finished = run.error is None and run.interruptions == 0 and run.calls_after_cut == 0
        recorded = False
        if finished and run.attempt:
            from sqs_jobs.worker.run_ledger import is_condition_failure

            try:
                # Its own thread, after the record was settled: it holds no invocation's answer up.
                context = run.args[1] if len(run.args) > 1 else None
                follow_ups = context.follow_ups if isinstance(context, JobContext) else None
                # Its follow-ups too: the retry the cut scheduled is answered from the record, and publishes them.
                self._ledger.complete_after_cut(
                    idempotency_record_id(run.key),
                    run.attempt,
                    time_left_s=CUT_RUN_WRITE_S,
                    follow_ups=follow_ups.encoded() if follow_ups is not None else None,
                )
                recorded = True
            except Exception as error:
                if not is_condition_failure(error):
                    self._tally.runtime_fault("idempotency_store")
                    self._obs.logger.exception("could not record a cut run that finished its work as completed")
        self._obs.logger.info(
            "run cut at its time limit has ended",
            extra={
                "outcome": type(run.error).__name__ if run.error is not None else "returned",
                "since_cut_s": _since(run.cut_at),
                "interruptions": run.interruptions,
                "recorded_completed": recorded,
            },
        )

    def _circuit_opened(self, snapshot: Snapshot) -> None:
        self._tally.add(RUNTIME_JOB, CIRCUIT_OPENED, reason=snapshot.downstream)
        self._obs.logger.warning(
            "circuit opened",
            extra={
                "downstream": snapshot.downstream,
                "consecutive_failures": snapshot.consecutive_failures,
                "open_for_s": snapshot.open_for_s,
                "last_error": snapshot.last_error,
            },
        )


def _trace_id() -> str:
    """The trace of the delivery's span (the worker runs the record inside it): a traced queue's only, so a queue
    without tracing never loads OpenTelemetry; "" where the layer lacks it (the worker said so at its start)."""
    try:
        from sqs_jobs.worker.tracing import current_trace_id
    except ImportError:
        return ""
    return current_trace_id()
