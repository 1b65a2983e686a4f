"""The worker's configuration: environment variable names (shared with `sqs_jobs.cdk`) and their typed, checked form.

Read once per execution environment, on the first invocation, never at import time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqs_jobs.catalog_ref import ENV_CATALOG, CatalogRefError, load_catalog
from sqs_jobs.specs import Catalog, QueueSpec, UnknownQueueError
from sqs_jobs.worker.errors import WorkerConfigError
from sqs_jobs.worker.names import IDEMPOTENCY_KEY_PREFIX, idempotency_record_id

__all__ = ["IDEMPOTENCY_KEY_PREFIX", "idempotency_record_id"]  # where they were first defined (callers import them)

if TYPE_CHECKING:
    from sqs_jobs.flow_control import RateLimit

ENV_QUEUE_NAME = "JOBS_QUEUE_NAME"
ENV_QUEUE_URL = "JOBS_QUEUE_URL"
ENV_DLQ_URL = "JOBS_DLQ_URL"
ENV_IDEMPOTENCY_TABLE = "JOBS_IDEMPOTENCY_TABLE"
# The unique ID (AROA...) of the worker's own IAM role: messages it sent carry it in their SenderId, and only
# their `jobs.*` attributes are the runtime's bookkeeping (sqs_jobs.worker.provenance).
ENV_RUNTIME_ROLE_ID = "JOBS_RUNTIME_ROLE_ID"
# Where the worker may publish jobs of other queues (a batch's callbacks): JSON {"<job>": ["<queue>", "<url>"]};
# optional.
ENV_ROUTES = "JOBS_ROUTES"
# A queue's priority lanes other than its default one (docs/priorities.md), each its own SQS queue that the worker
# consumes: JSON {"<lane queue ARN>": "<lane queue URL>"}, so that what it does with a record (a visibility change,
# a fresh copy) goes to the queue the record came from; optional (a queue without lanes has none).
ENV_LANES = "JOBS_LANES"
# One variable per resource a queue's jobs need: JOBS_RESOURCE_<NAME>, the name in upper case.
RESOURCE_ENV_PREFIX = "JOBS_RESOURCE_"
# One variable per durable job of the queue: JOBS_DURABLE_FUNCTION_<JOB>, the qualified ARN (an alias's) of the
# function its executions run in (sqs_jobs.worker.durable_start).
DURABLE_FUNCTION_ENV_PREFIX = "JOBS_DURABLE_FUNCTION_"
# A durable job's function's own variable, beside the worker's: which of the queue's durable jobs it runs.
ENV_DURABLE_JOB = "JOBS_DURABLE_JOB"


def resource_env_name(resource: str) -> str:
    return RESOURCE_ENV_PREFIX + resource.upper()


def durable_function_env_name(job: str) -> str:
    return DURABLE_FUNCTION_ENV_PREFIX + job.upper()


def endpoint_rate_limits(catalog: Catalog, queue: QueueSpec) -> dict[str, tuple[str, RateLimit]]:
    """The rate limits of the downstreams the queue's jobs use, by resource name, with the resource's kind: HTTP
    endpoints (their URLs are their values) and mail senders (SES)."""
    found: dict[str, tuple[str, RateLimit]] = {}
    if not queue.resources:
        return found
    from sqs_jobs.resources import Endpoint, MailSender  # loaded with the resources the catalog declares

    for name in queue.resources:
        resource = catalog.resource(name)
        if isinstance(resource, Endpoint | MailSender) and resource.rate_limit is not None:
            found[name] = (resource.kind, resource.rate_limit)
    return found


@dataclass(frozen=True)
class WorkerSettings:
    """Everything one queue's worker needs to know about where it runs."""

    queue: QueueSpec
    queue_url: str
    dlq_url: str
    idempotency_table: str
    runtime_role_id: str
    resources: Mapping[str, str] = field(default_factory=dict)
    # Rate limits of the downstreams among `resources` (endpoints, mail senders), by resource name, with the
    # resource's kind (sqs_jobs.flow_control).
    endpoint_limits: Mapping[str, tuple[str, RateLimit]] = field(default_factory=dict)
    # The jobs its jobs may publish (a batch's callbacks): each one's queue and its URL.
    routes: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # Per durable job of the queue, the qualified ARN of its durable function (sqs_jobs.durable).
    durable_functions: Mapping[str, str] = field(default_factory=dict)
    # The catalog it was loaded from (`package.module:NAME`, sqs_jobs.catalog_ref); None: given as an object.
    catalog_ref: str | None = None
    # Its priority lanes' queues other than the default lane's (whose URL is `queue_url`): ARN -> URL.
    lane_urls: Mapping[str, str] = field(default_factory=dict)

    def source_url(self, source_arn: str | None) -> str:
        """The URL of the queue a record came from (its `eventSourceARN`): a priority lane's, or the queue's."""
        return self.lane_urls.get(source_arn or "", self.queue_url)

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str], catalog: Catalog | None = None, *, with_durable_functions: bool = True
    ) -> WorkerSettings:
        """Build from the Lambda environment; one WorkerConfigError lists every missing or bad variable.
        `catalog`: the one to read the queue from; None: the one `JOBS_CATALOG` names (the stack sets it on every
        function it deploys). `with_durable_functions`: the queue's durable jobs' functions
        must be named (the worker's, not a durable function's own settings: it never starts an execution)."""
        catalog_ref = None
        if catalog is None:
            catalog_ref = environ.get(ENV_CATALOG, "").strip()
            if not catalog_ref:
                raise WorkerConfigError(
                    f"worker environment is incomplete: {ENV_CATALOG} is not set (the stack names the project's "
                    "catalog there, as package.module:NAME)"
                )
            try:
                catalog = load_catalog(catalog_ref)
            except CatalogRefError as error:
                raise WorkerConfigError(f"worker environment is incomplete: {ENV_CATALOG}: {error}") from error
        problems: list[str] = []
        required = (ENV_QUEUE_NAME, ENV_QUEUE_URL, ENV_DLQ_URL, ENV_IDEMPOTENCY_TABLE, ENV_RUNTIME_ROLE_ID)
        values = {name: environ.get(name, "").strip() for name in required}
        problems += [f"{name} is not set" for name, value in values.items() if not value]
        queue: QueueSpec | None = None
        if values[ENV_QUEUE_NAME]:
            try:
                queue = catalog.queue(values[ENV_QUEUE_NAME])
            except UnknownQueueError as exc:
                problems.append(f"{ENV_QUEUE_NAME}: {exc}")
        resources: dict[str, str] = {}
        for resource in queue.resources if queue else ():
            value = environ.get(resource_env_name(resource), "").strip()
            if value:
                resources[resource] = value
            else:
                problems.append(f"{resource_env_name(resource)} is not set ({catalog.resource(resource).description})")
        routes = _routes(environ.get(ENV_ROUTES, ""), problems)
        lane_urls = _lane_urls(environ.get(ENV_LANES, ""), problems)
        durable_functions: dict[str, str] = {}
        for job in queue.jobs if queue and with_durable_functions else ():
            if job.durable is None:
                continue
            value = environ.get(durable_function_env_name(job.name), "").strip()
            if value:
                durable_functions[job.name] = value
            else:
                problems.append(f"{durable_function_env_name(job.name)} is not set (durable job {job.name!r})")
        if problems or queue is None:
            raise WorkerConfigError("worker environment is incomplete: " + "; ".join(problems))
        return cls(
            queue=queue,
            queue_url=values[ENV_QUEUE_URL],
            dlq_url=values[ENV_DLQ_URL],
            idempotency_table=values[ENV_IDEMPOTENCY_TABLE],
            runtime_role_id=values[ENV_RUNTIME_ROLE_ID],
            resources=resources,
            endpoint_limits=endpoint_rate_limits(catalog, queue),
            routes=routes,
            durable_functions=durable_functions,
            catalog_ref=catalog_ref,
            lane_urls=lane_urls,
        )

    def to_environ(self) -> dict[str, str]:
        """The inverse of from_environ: what a deployment sets for this worker."""
        environ = {
            ENV_QUEUE_NAME: self.queue.name,
            ENV_QUEUE_URL: self.queue_url,
            ENV_DLQ_URL: self.dlq_url,
            ENV_IDEMPOTENCY_TABLE: self.idempotency_table,
            ENV_RUNTIME_ROLE_ID: self.runtime_role_id,
        }
        environ.update({resource_env_name(name): value for name, value in self.resources.items()})
        if self.routes:
            routes = {job: list(route) for job, route in self.routes.items()}
            environ[ENV_ROUTES] = json.dumps(routes, separators=(",", ":"), sort_keys=True)
        environ.update({durable_function_env_name(job): arn for job, arn in self.durable_functions.items()})
        if self.lane_urls:
            environ[ENV_LANES] = json.dumps(dict(self.lane_urls), separators=(",", ":"), sort_keys=True)
        if self.catalog_ref is not None:
            environ[ENV_CATALOG] = self.catalog_ref
        return environ


def _routes(text: str, problems: list[str]) -> dict[str, tuple[str, str]]:
    if not text.strip():
        return {}
    try:
        routes = json.loads(text)
    except ValueError:
        routes = None
    if not isinstance(routes, dict) or not all(
        isinstance(route, list) and len(route) == 2 and all(isinstance(part, str) for part in route)
        for route in routes.values()
    ):
        problems.append(f'{ENV_ROUTES} must be a JSON object {{"<job>": ["<queue>", "<url>"]}}')
        return {}
    return {str(job): (route[0], route[1]) for job, route in routes.items()}


def _lane_urls(text: str, problems: list[str]) -> dict[str, str]:
    if not text.strip():
        return {}
    try:
        lanes = json.loads(text)
    except ValueError:
        lanes = None
    if not isinstance(lanes, dict) or not all(isinstance(url, str) for url in lanes.values()):
        problems.append(f'{ENV_LANES} must be a JSON object {{"<lane queue ARN>": "<lane queue URL>"}}')
        return {}
    return {str(arn): url for arn, url in lanes.items()}
