"""Loading the jobs the catalog names, and what a job receives when it runs."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from aws_lambda_powertools import Logger

from sqs_jobs.envelope import Envelope, Scalar
from sqs_jobs.specs import JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.errors import IdempotencyKeyError, WorkerConfigError
from sqs_jobs.worker.key_life import scoped_key

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from sqs_jobs.worker.batch_status import BatchStatus
    from sqs_jobs.worker.follow_ups import FollowUps
    from sqs_jobs.worker.http import HttpClient, JobHttp
    from sqs_jobs.worker.progress import ProgressReporter
    from sqs_jobs.worker.secrets import SecretCache

# What a job returns: kept in its idempotency record by the rule of sqs_jobs.worker.results (any value that
# converts to JSON; None keeps nothing).
JobResult = Any


@dataclass(frozen=True)
class JobContext:
    """What a running job may use: its key, attempt, resources and clients. Jobs build nothing themselves."""

    envelope: Envelope
    key: str
    attempt: int
    message_id: str
    resources: Mapping[str, str]
    clients: ClientFactory
    logger: Logger
    lambda_context: LambdaContext
    # The worker's one HTTP client, built on a job's first request (most jobs make none).
    http_client_provider: Callable[[], HttpClient]
    # The worker's secrets, read on first use and cached (sqs_jobs.worker.secrets); None: the job has none.
    secrets: SecretCache | None = None
    # Where this run's progress goes (sqs_jobs.worker.progress); None: nowhere (a test's context).
    progress_reporter: ProgressReporter | None = None
    # The jobs this run asks to be published once it has succeeded (sqs_jobs.worker.follow_ups); None: it
    # can ask for none (a test's context).
    follow_ups: FollowUps | None = None
    # Reads a batch's status for its callback (sqs_jobs.worker.batch_status); None: no table to read.
    batch_reader: Callable[[str, str], BatchStatus | None] | None = None

    def resource(self, name: str) -> str:
        return resource_of(self.resources, self.envelope.job, name)

    def secret(self, name: str) -> str:
        """The value of the secret resource `name` (a Secret of the catalog that the job's resources list), read
        from Secrets Manager (or Parameter Store) on first use and kept for SECRET_CACHE_S. Never log it."""
        return read_secret(self.resources, self.envelope.job, name, self.secrets)

    def progress(self, done: float, total: float | None = None, note: str = "") -> bool:
        """Report how far this run has come (e.g. rows done of total, and a short note): kept in the key's record
        for `jobctl job show` and the console, at most one write every 5 s (True when this one was written). It
        never fails the job; after the run's cut it is refused like any call."""
        if self.progress_reporter is None:
            return False
        return self.progress_reporter.report(done, total, note)

    def then(
        self, job: str, entity_id: str, *, key: str | None = None, tenant: str | None = None, **fields: Scalar
    ) -> None:
        """Publish `job` for `entity_id` once this run has succeeded (a pipeline's next step), before its message
        is acknowledged; nothing if the run fails (its retry asks again). Checked now by the envelope's rules;
        only a job this job's JobSpec.publishes lists (FollowUpNotPublishableError). Kept with the run's
        completion, so a crash after it still publishes it, and published with the same key every time, so it
        runs once (docs/workflows.md)."""
        if self.follow_ups is None:
            raise WorkerConfigError(f"job {self.envelope.job!r}: this context publishes no follow-up jobs")
        self.follow_ups.add(job, entity_id, key=key, tenant=tenant, fields=fields)

    def batch(self) -> BatchStatus | None:
        """When this run is a batch's callback (`on_success`, `on_complete`): its batch's status now (its size, the
        members that succeeded and those dead-lettered, its description); else None, and None once the batch's
        items have expired."""
        from sqs_jobs.worker.batch_status import callback_batch

        callback = callback_batch(self.envelope.key)
        if callback is None or self.batch_reader is None:
            return None
        return self.batch_reader(*callback)

    def client(self, service: str) -> Any:
        return self.clients(service)

    def remaining_time_ms(self) -> int:
        return self.lambda_context.get_remaining_time_in_millis()

    @property
    def http_client(self) -> HttpClient:
        return self.http_client_provider()

    @property
    def http(self) -> JobHttp:
        """The shared HTTP client (10 s connect / 30 s read, no retries), sending this job's Idempotency-Key."""
        from sqs_jobs.worker.http import JobHttp  # loaded with the client, by a job's first request

        return JobHttp(self.http_client, self.key)


def resource_of(resources: Mapping[str, str], job: str, name: str) -> str:
    """The value of resource `name` for `job` (a durable job's context too), or a WorkerConfigError naming it."""
    try:
        return resources[name]
    except KeyError:
        raise WorkerConfigError(
            f"job {job!r} needs resource {name!r}, which its JobSpec.resources does not list"
        ) from None


def read_secret(resources: Mapping[str, str], job: str, name: str, secrets: SecretCache | None) -> str:
    """The value of `job`'s secret resource `name` (a durable job's context too) through `secrets`, or a
    WorkerConfigError naming what is wrong."""
    from sqs_jobs.worker.secrets import is_secret_arn  # loaded with the secrets, by a job's first read

    secret_id = resource_of(resources, job, name)
    # A Secret resource's value is its ARN, in the stack and the local engine alike.
    if not is_secret_arn(secret_id):
        raise WorkerConfigError(f"job {job!r}: resource {name!r} is not a Secret")
    if secrets is None:
        raise WorkerConfigError(f"job {job!r}: this worker has no secret store to read {name!r}")
    return secrets.get(name, secret_id)


def default_idempotency_key(envelope: Envelope) -> str:
    """The business key within the job: the entity ID, never the message ID (a redrive gives the message a new
    one). The runtime prefixes the job: `<job>:<id>`."""
    return envelope.id


ErrorTypes = tuple[type[BaseException], ...]


class JobModule(Protocol):
    """What a job's module (its `JobSpec.handler`) defines; docs/catalog.md, "The job module", says it in full.

    `run` is required; the rest are optional and default as described. The worker checks them when it loads the
    queue's jobs (its first invocation), and a module that breaks them fails that start with WorkerConfigError."""

    def run(self, envelope: Envelope, context: JobContext, /) -> JobResult:
        """Do the job once for `envelope.id`, re-reading the entity; its return value is kept as the run's result
        (results.py's rule). Raise a PermanentError for what can never succeed; anything else is retried."""

    # Optional: `idempotency_key(envelope) -> str`, the business key within the job (default: `envelope.id`).
    # Optional: `unique_key(envelope) -> str`, what a unique or debounced job is unique by within the job and tenant
    # (default: `envelope.id`; sqs_jobs.worker.uniqueness).
    # Optional: `PERMANENT_ERRORS` and `TRANSIENT_ERRORS`, tuples of exception classes that override the
    # classifier for this job's own errors (sqs_jobs.worker.classify).


class LoadedJob:
    # A plain class: a dataclass's generated methods cost every cold start half a millisecond.
    __slots__ = ("key_function", "permanent_errors", "run", "spec", "transient_errors", "unique_key_function")

    def __init__(
        self,
        spec: JobSpec,
        run: Callable[[Envelope, JobContext], JobResult],
        key_function: Callable[[Envelope], str],
        permanent_errors: ErrorTypes = (),
        transient_errors: ErrorTypes = (),
        unique_key_function: Callable[[Envelope], str] | None = None,
    ) -> None:
        self.spec: Final = spec
        self.run: Final = run
        self.key_function: Final = key_function
        # The job's classification overrides: exception types it knows to be permanent or transient.
        self.permanent_errors: Final = permanent_errors
        self.transient_errors: Final = transient_errors
        # The module's `unique_key(envelope)`, for a unique or debounced job; None: the entity ID.
        self.unique_key_function: Final = unique_key_function

    def derives_key(self, envelope: Envelope) -> bool:
        """Whether the record's idempotency key is the runtime's default, `<job>:<id>`: neither the publisher nor
        the job's module named it."""
        return envelope.key is None and self.key_function is default_idempotency_key

    def idempotency_key(self, envelope: Envelope) -> str:
        """`<job>:<key>` (`<job>@<tenant> <key>` for a tenant's job), where the key is the publisher's explicit one
        if it sent one, else the job's own (`idempotency_key(envelope)` in its module), else the entity ID.
        Namespaced by the job and the tenant, so two jobs, or two tenants, given the same key never mistake each
        other's work for their own (key_life.scoped_key)."""
        return scoped_key(self.spec.name, self._key_within(envelope), envelope.tenant)

    def unscoped_key(self, envelope: Envelope) -> str:
        """The key as runtimes before tenant-scoped keys wrote it, `<job>:<key>` whatever the tenant: what a tenant's
        job may still run under while such a record lives (sqs_jobs.worker.tenant_keys)."""
        return scoped_key(self.spec.name, self._key_within(envelope), None)

    def _key_within(self, envelope: Envelope) -> str:
        key = envelope.key if envelope.key is not None else self.key_function(envelope)
        if not isinstance(key, str) or not key.strip():
            raise IdempotencyKeyError(
                f"job {self.spec.name!r} produced idempotency key {key!r}; it must be a non-blank string"
            )
        return key


def load_jobs(queue: QueueSpec) -> dict[str, LoadedJob]:
    """Import each job module of the queue once; a module without `run` is a deployment bug, said at start."""
    loaded: dict[str, LoadedJob] = {}
    for spec in queue.jobs:
        try:
            module = importlib.import_module(spec.handler)
        except ModuleNotFoundError as error:
            # The module itself, or a package it imports: either way not deployed with the worker (its code asset,
            # its layer: `jobctl bundle` checks both).
            raise WorkerConfigError(
                f"job {spec.name!r}: its module {spec.handler!r} can't be imported: {error} (not in the functions' "
                "code or their layer)"
            ) from error
        run = getattr(module, "run", None)
        if not callable(run) or not _takes_positionals(run, 2):
            raise WorkerConfigError(f"job module {spec.handler!r} has no callable run(envelope, context)")
        key_function = getattr(module, "idempotency_key", default_idempotency_key)
        if not callable(key_function) or not _takes_positionals(key_function, 1):
            raise WorkerConfigError(f"job module {spec.handler!r}: idempotency_key must be a function of (envelope)")
        unique_key = getattr(module, "unique_key", None)
        if unique_key is not None and (not callable(unique_key) or not _takes_positionals(unique_key, 1)):
            raise WorkerConfigError(f"job module {spec.handler!r}: unique_key must be a function of (envelope)")
        loaded[spec.name] = LoadedJob(
            spec=spec,
            run=run,
            key_function=key_function,
            permanent_errors=_error_types(module, "PERMANENT_ERRORS"),
            transient_errors=_error_types(module, "TRANSIENT_ERRORS"),
            unique_key_function=unique_key,
        )
    return loaded


def _takes_positionals(function: Callable[..., Any], count: int) -> bool:
    """Whether `function(a1, ..., a<count>)` binds (a signature that can't be read is given the benefit)."""
    try:
        inspect.signature(function).bind(*range(count))
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def _error_types(module: Any, name: str) -> ErrorTypes:
    types = tuple(getattr(module, name, ()))
    if not all(isinstance(item, type) and issubclass(item, BaseException) for item in types):
        raise WorkerConfigError(f"{module.__name__}.{name} must be a tuple of exception classes")
    return types
