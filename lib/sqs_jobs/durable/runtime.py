"""The durable function's runtime: one durable execution of one durable job, from start to its end.

1. The payload (sqs_jobs.durable.payload) gives the record's body, key and generation; the envelope is parsed
   as the worker parses it.
2. The job's `run(envelope, context)` runs with a DurableJobContext (sqs_jobs.durable.context): its steps are
   checkpointed, classified, retried with backoff and cut at their time limit.
3. It ends in the runtime's own steps (sqs_jobs.durable.ending), in a namespace of their own so a replay that no
   longer matches the job's checkpoints (NonDeterministicExecutionError) still reaches them:
   - `jobs.outcome` checkpoints what the execution came to, once: succeeded with the follow-ups the job named, or
     failed with its evidence (a step's failure for good, the job's code raising outside a step, a replay that no
     longer matched, a result that is not JSON). Every later replay acts on it, whatever the job's code says then;
   - failed: `jobs.dead_letter` sends the record's body to the queue's DLQ with that evidence (its result, the
     message ID, is checkpointed: a later retry never sends again), then `jobs.end` writes the record FAILED and
     moves it to the next generation (a redrive or a new publish starts anew) and counts its batch members dead;
     then the error is raised and Lambda ends the execution FAILED (DurableExecutionFailed);
   - succeeded: `jobs.end` publishes the follow-ups, writes the record SUCCEEDED and counts its batch members.
   The end steps are retried without a cap (ending.until_done) until they hold or the execution times out.
An execution that ends with no code of ours running (its timeout, a stop) or fails before its end steps is ended by
the sweep (sqs_jobs.durable.sweep) its queue's worker runs on each heartbeat.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from aws_durable_execution_sdk_python.config import StepConfig
from aws_durable_execution_sdk_python.exceptions import NonDeterministicExecutionError

from sqs_jobs.durable.context import DurableJobContext, failed_for_good
from sqs_jobs.durable.ending import DEAD_LETTER_STEP, END_STEP, OUTCOME_STEP, DurableEnding, Outcome, until_done
from sqs_jobs.durable.payload import DurableStart
from sqs_jobs.durable.record import DurableRecords
from sqs_jobs.envelope import parse_envelope
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.errors import DurableStepFailedError, EnvelopeError, WorkerConfigError
from sqs_jobs.worker.follow_ups import FollowUps
from sqs_jobs.worker.jobs import LoadedJob, load_jobs
from sqs_jobs.worker.names import DeadLetterFailure
from sqs_jobs.worker.observability import Observability
from sqs_jobs.worker.settings import ENV_DURABLE_JOB, WorkerSettings

if TYPE_CHECKING:
    from aws_durable_execution_sdk_python.context import DurableContext

    from sqs_jobs.durable.tracing import StepTracing
    from sqs_jobs.worker.http import HttpClient
    from sqs_jobs.worker.secrets import SecretCache

# The virtual context the runtime's own steps run in: their operation IDs derive from it, never from the job's steps'
# positions (the SDK's DurableContext.create_child_context, is_virtual: no checkpoint of its own).
RUNTIME_NAMESPACE = "jobs"
# Where the evidence of a body the queue no longer accepts is named.
ENVELOPE = "(envelope)"


@dataclass(frozen=True)
class DurableSettings:
    worker: WorkerSettings
    job: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> DurableSettings:
        worker = WorkerSettings.from_environ(environ, with_durable_functions=False)
        job = environ.get(ENV_DURABLE_JOB, "").strip()
        spec = {spec.name: spec for spec in worker.queue.jobs}.get(job)
        if spec is None or spec.durable is None:
            durable = [spec.name for spec in worker.queue.jobs if spec.durable is not None]
            raise WorkerConfigError(
                f"{ENV_DURABLE_JOB} {job!r} is not a durable job of queue {worker.queue.name!r} (its durable jobs: "
                f"{', '.join(durable) or 'none'})"
            )
        return cls(worker=worker, job=job)

    def to_environ(self) -> dict[str, str]:
        return {**self.worker.to_environ(), ENV_DURABLE_JOB: self.job}


class DurableRuntime:
    """Runs the executions of one durable job. Build one per execution environment."""

    def __init__(
        self,
        settings: DurableSettings,
        clients: ClientFactory,
        observability: Observability | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self._queue = settings.worker.queue
        self._clients = clients
        self._obs = observability or Observability.create()
        self._rng = rng or random.Random()
        self._job: LoadedJob = load_jobs(_only(self._queue, settings.job))[settings.job]
        self._records = DurableRecords(
            lambda: clients("dynamodb"), settings.worker.idempotency_table, self._queue.idempotency_expiry_s
        )
        self._said_untraced = False
        self._http: HttpClient | None = None
        self._http_lock = threading.Lock()

    @property
    def records(self) -> DurableRecords:
        return self._records

    @cached_property
    def _secrets(self) -> SecretCache:
        """The function's secret values, kept across its executions as the worker keeps its own."""
        from sqs_jobs.worker.secrets import SecretCache

        return SecretCache(self._clients)

    def _http_client(self) -> HttpClient:
        """The function's one HTTP client (one pool), built on a step's first request: most jobs make none."""
        with self._http_lock:
            if self._http is None:
                from sqs_jobs.worker.http import HttpClient

                self._http = HttpClient()
            return self._http

    @cached_property
    def _ending(self) -> DurableEnding:
        return DurableEnding(self.settings.worker, self.settings.job, self._records, self._clients, self._obs)

    def run(self, event: Any, sdk: DurableContext) -> Any:
        start = DurableStart.from_json(event)
        self._obs.logger.append_keys(idempotency_key=start.key)
        try:
            envelope = parse_envelope(start.body, self._queue.accepted_jobs)
        except EnvelopeError as error:  # its worker accepted it; a deploy since may not: the job can't run
            return self._end(sdk, start, None, Outcome(failure=failed_for_good(ENVELOPE, error)))
        self._obs.logger.append_keys(job=envelope.job, id=envelope.id)
        context = DurableJobContext(
            sdk,
            envelope=envelope,
            key=start.key,
            generation=start.generation,
            job=self._job,
            queue=self._queue,
            records=self._records,
            resources=self.settings.worker.resources,
            clients=self._clients,
            logger=self._obs.logger,
            observability=self._obs,
            secrets=self._secrets,
            follow_ups=FollowUps(envelope.job, self._job.spec.publishes),
            rng=self._rng,
            tracing=self._step_tracing(envelope, start) if self._queue.tracing else None,
            http_client=self._http_client,
        )
        try:
            self._records.first_start(start.key, start.generation, time.time())
        except Exception:  # the record is for operators: a write that fails never fails the job
            self._obs.logger.warning("could not write the durable record's start", exc_info=True)
        result, proposed = self._ran(envelope, context)
        return self._end(sdk, start, result, proposed)

    def _step_tracing(self, envelope: Any, start: DurableStart) -> StepTracing | None:
        """A traced queue's step spans; None where the layer lacks OpenTelemetry (said once, and the job runs)."""
        try:
            from sqs_jobs.durable.tracing import StepTracing
        except ImportError:
            if not self._said_untraced:
                self._said_untraced = True
                self._obs.logger.warning(
                    "the queue says tracing=True, but OpenTelemetry is not in the function's layer: steps are not "
                    "traced; add sqs-jobs[tracing] (opentelemetry-api) to the layer's requirements"
                )
            return None
        return StepTracing(envelope.job, envelope.id, start.attributes)

    def _end(self, sdk: DurableContext, start: DurableStart, result: Any, proposed: Outcome) -> Any:
        """The runtime's end steps (sqs_jobs.durable.ending), in their own namespace."""
        ending = sdk.create_child_context(RUNTIME_NAMESPACE, is_virtual=True)
        checkpointed = ending.step(lambda _: proposed.to_json(), name=OUTCOME_STEP)
        outcome = Outcome.from_json(checkpointed)
        end = StepConfig(retry_strategy=until_done(self._rng))
        if outcome.failure is None:
            ending.step(lambda _: self._ending.end_succeeded(start, outcome.follow_ups), name=END_STEP, config=end)
            # A replay of code that no longer matches its outcome (it failed now) has no result to give.
            return result if proposed.succeeded else None
        failure = outcome.failure
        ending.step(lambda _: self._ending.dead_letter(start, failure), name=DEAD_LETTER_STEP, config=end)
        ending.step(lambda _: self._ending.end_failed(start, failure), name=END_STEP, config=end)
        raise failure

    def _ran(self, envelope: Any, context: DurableJobContext) -> tuple[Any, Outcome]:
        """The job's code run (or replayed) to what it proposes as the execution's outcome. The SDK's own faults
        (a checkpoint that failed: InvocationError; its suspensions) are not the job's and pass through."""
        from aws_durable_execution_sdk_python.exceptions import UnrecoverableError

        try:
            result = self._job.run(envelope, context)  # type: ignore[arg-type]
        except NonDeterministicExecutionError as error:
            return None, Outcome(failure=context.failure_of(error))
        except UnrecoverableError:
            raise
        except Exception as error:
            return None, Outcome(failure=context.failure_of(error))
        if context.replay_error is not None:  # caught by the job's code: the replay still did not match
            return None, Outcome(failure=context.failure_of(context.replay_error))
        try:
            json.dumps(result)
        except (TypeError, ValueError) as error:
            failure = DurableStepFailedError(
                "(result)",
                type(error).__name__,
                f"the job's result is not JSON: {error}",
                DeadLetterFailure.PERMANENT,
                1,
                "",
            )
            return None, Outcome(failure=failure)
        follow_ups = context.follow_ups.encoded() if context.follow_ups is not None else None
        return result, Outcome(follow_ups=follow_ups)


def _only(queue: Any, job: str) -> Any:
    """The queue with only `job`, so loading imports that job's module alone."""
    from dataclasses import replace

    return replace(queue, jobs=tuple(spec for spec in queue.jobs if spec.name == job))
