"""The local engine: an embedded moto server (no Docker) with the stack's resources and the real workers, plus
a stand-in of each endpoint the catalog declares one for (sqs_jobs.local.standins).

with LocalEngine(port=0) as engine:        # or `jobctl local`
    engine.endpoint_url                    # any boto3 program or `aws --endpoint-url` reaches it
    engine.standins["<endpoint>"]          # a running stand-in, e.g. to change its mode

LocalEngine(chaos=ChaosSettings.parse("transient=0.2,crash=0.01")) injects faults (sqs_jobs.local.chaos).
"""

from __future__ import annotations

import io
import json
import logging
import socket
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import boto3
from botocore.config import Config
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from moto.server import ThreadedMotoServer
from werkzeug.serving import make_server

from sqs_jobs.durable.runtime import DurableRuntime, DurableSettings
from sqs_jobs.local.chaos import AWS_CALL_EVENT, Chaos, ChaosSettings
from sqs_jobs.local.durable import LocalDurableFunctions
from sqs_jobs.local.emulator import EventSourceMapping, Handler, MappingSwitch
from sqs_jobs.local.heartbeat import HeartbeatCanary
from sqs_jobs.local.metrics_agent import MetricsAgent
from sqs_jobs.local.moto_backlog import speed_up_backlogs
from sqs_jobs.local.moto_limits import enforce_message_limits
from sqs_jobs.local.moto_locks import serialize_moto
from sqs_jobs.local.moto_senders import record_senders
from sqs_jobs.local.provision import LocalDeployment, provision, worker_function_name
from sqs_jobs.local.scheduler import LocalScheduler, LocalSchedules, provision_schedules, scheduler_role_session
from sqs_jobs.local.standins import build_standins
from sqs_jobs.specs import Catalog
from sqs_jobs.stack_names import DEFAULT_STACK_NAME, durable_function_name, local_callbacks_parameter_name
from sqs_jobs.worker.clients import ClientFactory, new_session
from sqs_jobs.worker.http import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_READ_TIMEOUT_S, HttpClient
from sqs_jobs.worker.observability import Observability
from sqs_jobs.worker.runtime import Worker

log = logging.getLogger("sqs_jobs.local")

DEFAULT_PORT = 4566
# The server, the pollers and the jobs share one interpreter, and most of their threads wait on sockets: at
# CPython's default 5 ms GIL switch interval each reply waits behind busy threads (the convoy effect), which
# halved the engine's throughput. A 1 ms interval gives it back.
GIL_SWITCH_INTERVAL_S = 0.001
# A queue's messages not yet settled: waiting, in flight or invisible (running, a backoff, a crash), delayed.
WAITING = "ApproximateNumberOfMessages"
UNSETTLED_ATTRIBUTES = (WAITING, "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed")
DEFAULT_REGION = "us-east-1"
# moto accepts any credentials; these make the engine work on a machine that has none.
LOCAL_ACCESS_KEY = "local"
# DynamoDB's write operations (its JSON protocol's X-Amz-Target, `DynamoDB_20120810.<operation>`).
DYNAMODB_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem"})
# How late the server answers one request (seconds, 0: at once), from its WSGI environ and body.
AnswerDelay = Callable[[Mapping[str, Any], bytes], float]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def check_port_free(host: str, port: int) -> None:
    """Raise OSError (address in use) now: moto's server thread would only print it and die, and its start()
    would then wait forever for a server that never comes up."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as werkzeug binds: TIME_WAIT is no clash
        probe.bind((host, port))


class _CachingDispatcher(DomainDispatcherApplication):
    """moto's request dispatcher, remembering which backend serves a host. moto works it out again on every
    request - listing its package directory and trying hundreds of URL patterns - under a lock all requests
    share, which made it the engine's bottleneck."""

    def __init__(self, answer_delay: AnswerDelay | None = None) -> None:
        super().__init__(create_backend_app)
        self._backends: dict[str | None, Any] = {}
        self._answer_delay = answer_delay

    def get_backend_for_host(self, host: str | None) -> Any:
        # Called under the dispatcher's lock.
        if host not in self._backends:
            self._backends[host] = super().get_backend_for_host(host)
        return self._backends[host]

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if self._answer_delay is None:
            return super().__call__(environ, start_response)  # type: ignore[no-any-return]
        # Read the body once to judge the request, and hand moto a fresh copy of it.
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        environ["wsgi.input"] = io.BytesIO(body)
        delay_s = self._answer_delay(environ, body)
        if delay_s <= 0:
            return super().__call__(environ, start_response)  # type: ignore[no-any-return]
        # The request is served (a write is made) at once; its answer, not yet sent, waits on this request's own
        # server thread: outside moto's lock, so the other requests go on.
        answer = list(super().__call__(environ, start_response))
        time.sleep(delay_s)
        return answer


class _LocalMotoServer(ThreadedMotoServer):
    """ThreadedMotoServer with the caching dispatcher (the same server otherwise: moto's request handler), which
    may answer some requests late (`answer_delay`)."""

    def __init__(self, *args: Any, answer_delay: AnswerDelay | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._answer_delay = answer_delay

    def _server_entry(self) -> None:
        self._server = make_server(
            self._ip_address,
            self._port,
            _CachingDispatcher(self._answer_delay),
            True,
            request_handler=MotoRequestHandler,
        )
        self._server_ready_event.set()
        self._server.serve_forever()


class LocalEngine:
    """Starts moto, provisions the catalog's resources, and runs one event source mapping per queue."""

    def __init__(
        self,
        catalog: Catalog,
        port: int = DEFAULT_PORT,
        host: str = "127.0.0.1",
        stack_name: str = DEFAULT_STACK_NAME,
        region: str = DEFAULT_REGION,
        concurrency: int | None = None,
        run_workers: bool = True,
        worker_output: TextIO | None = None,
        standin_options: Mapping[str, Mapping[str, str]] | None = None,
        heartbeat_interval_s: float | None = None,
        chaos: ChaosSettings | None = None,
        scheduler_clock: Callable[[], datetime] | None = None,
        http_timeouts_s: tuple[float, float] | None = None,
        durable_state_dir: Path | None = None,
        durable_skip_time: bool = False,
    ) -> None:
        """`standin_options`: per endpoint with a stand-in (the catalog's `Endpoint.standin`), the options it is
        built with, e.g. {"payments_api": {"mode": "down"}}. `http_timeouts_s`: the jobs' HTTP client's
        connect and read timeouts (None: the client's defaults, as deployed); its whole-call timeout is their
        sum. `durable_state_dir`: where durable jobs' executions are kept (sqs_jobs.local.durable; a temporary
        directory when None): an engine started on the same directory resumes the executions a stopped or killed
        one left running. `durable_skip_time`: their waits and retry delays pass at once (tests)."""
        self.port = port or free_port()
        self.host = host
        self.region = region
        self.catalog = catalog
        self.stack_name = stack_name
        self._concurrency = concurrency
        self._run_workers = run_workers
        self._worker_output = worker_output
        self._server: _LocalMotoServer | None = None
        self.mappings: dict[str, EventSourceMapping] = {}
        self.deployment: LocalDeployment | None = None
        # Faults injected into the workers' downstream calls and deliveries; None: none.
        self.chaos = Chaos(chaos) if chaos is not None else None
        # Each serves from start() to stop(); its URL is its endpoint's value in the deployment.
        self.standins = build_standins(catalog, host=host, chaos=self.chaos, options=standin_options or {})
        # The stack's CloudWatch feeds and heartbeat schedule, locally; None until started.
        self.metrics: MetricsAgent | None = None
        self.heartbeats: HeartbeatCanary | None = None
        self._heartbeat_interval_s = heartbeat_interval_s
        self._switch_interval_s: float | None = None  # the interpreter's, while the engine runs
        self._sqs: Any = None  # the engine's own SQS client for reading queue counts; made once started
        # EventBridge Scheduler's part: the stack's schedules, fired on this clock (real time unless given).
        self._scheduler_clock = scheduler_clock
        self.schedules: LocalSchedules | None = None
        self.scheduler: LocalScheduler | None = None
        self._role_clients: dict[str, Any] = {}
        self._http_timeouts_s = http_timeouts_s
        # Durable jobs' functions, run by the durable execution testing SDK; None until started, or without any.
        self.durables: LocalDurableFunctions | None = None
        self._durable_state_dir = durable_state_dir
        self._durable_skip_time = durable_skip_time

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def session(self) -> boto3.session.Session:
        return new_session(
            region_name=self.region, aws_access_key_id=LOCAL_ACCESS_KEY, aws_secret_access_key=LOCAL_ACCESS_KEY
        )

    def clients(self, session: boto3.session.Session | None = None) -> ClientFactory:
        # No hidden retries against the local server: a failure should show, not be masked.
        # Path-style S3 addressing: a bucket can't be a subdomain of 127.0.0.1.
        config = Config(
            connect_timeout=5,
            read_timeout=30,
            retries={"mode": "standard", "max_attempts": 2},
            s3={"addressing_style": "path"},
        )
        return ClientFactory(session=session or self.session(), endpoint_url=self.endpoint_url, config=config)

    def _worker_clients(self, queue: str) -> ClientFactory:
        """A worker's clients: on credentials of its queue's worker role (as Lambda runs it), with chaos hooked
        into their downstream calls."""
        assert self.deployment is not None
        session = self.deployment.worker_session(self.clients()("sts"), queue, self._function_name(queue))
        clients = self.clients(session)
        if self.chaos is not None:
            # The hooks reach every client this worker's factory makes, and no other (the engine's own).
            self.chaos.register_aws(clients)
        return clients

    def start(self) -> LocalEngine:
        try:
            self._start()
        except BaseException:
            self.stop()  # nothing half-started stays behind (a server thread, a bound port)
            raise
        return self

    def _start(self) -> None:
        # One log line per request to the embedded server helps nobody; its warnings still show.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        check_port_free(self.host, self.port)
        serialize_moto()  # moto's SQS and DynamoDB are not thread-safe, and the pollers are many threads
        record_senders()  # SenderId names the IAM identity that sent a message, as on AWS
        # A message SQS refuses (over its queue's size, attributes counted; an attribute name SQS doesn't take) is
        # refused before moto stores it, as on AWS: a stored one made every receive of its queue fail
        enforce_message_limits()
        # A backlog of thousands costs a receive milliseconds, not seconds: a backed-up queue (or priority lane)
        # holds up no other one's receives behind moto's lock.
        speed_up_backlogs()
        self._switch_interval_s = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval_s, GIL_SWITCH_INTERVAL_S))
        self._server = _LocalMotoServer(
            ip_address=self.host,
            port=self.port,
            verbose=False,
            answer_delay=self._slow_store_delay if self.chaos is not None else None,
        )
        self._server.start()
        # moto's backends live in this process; an engine always starts from an empty account.
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")).close()
        for standin in self.standins.values():
            standin.start()
        self.deployment = provision(
            self.clients(),
            catalog=self.catalog,
            stack_name=self.stack_name,
            settings={name: standin.url for name, standin in self.standins.items()},
        )
        self._sqs = self.clients()("sqs")
        self.durables = self._durable_functions()
        self.schedules = provision_schedules(self.clients(), self.deployment, self.catalog)
        self.scheduler = LocalScheduler(self.clients(), self._role_sqs, self.schedules, clock=self._scheduler_clock)
        self.scheduler.start()
        self.metrics = MetricsAgent(self.clients()("cloudwatch"), self.deployment.queues, self.region)
        self.metrics.start()
        if self._run_workers:
            self.start_workers()
        # After the workers: the first beats are consumed at once, and nothing logs before start() returns.
        self.heartbeats = HeartbeatCanary(self.clients()("sqs"), self.deployment.queues, self._heartbeat_interval_s)
        self.heartbeats.start()

    def _durable_functions(self) -> LocalDurableFunctions | None:
        """The catalog's durable jobs' functions, each on its queue's worker role's credentials (the stack gives the
        durable function the same grants as the worker); executions a previous engine left running go on."""
        assert self.deployment is not None
        runtimes: dict[str, tuple[str, DurableRuntime]] = {}
        for spec in self.catalog:
            for job in spec.jobs:
                if job.durable is None:
                    continue
                settings = DurableSettings(worker=self.deployment.worker_settings(spec.name), job=job.name)
                observability = Observability.create(output=self._worker_output, metrics_sink=self._forward_metrics)
                runtime = DurableRuntime(settings, self._worker_clients(spec.name), observability=observability)
                runtimes[job.name] = (durable_function_name(self.stack_name, job.name), runtime)
        if not runtimes:
            return None
        durables = LocalDurableFunctions(runtimes, self._durable_state_dir, skip_time=self._durable_skip_time)
        # Where an event's sender (jobctl job event, a service's JobPublisher) completes a waiting execution.
        self.clients()("ssm").put_parameter(
            Name=local_callbacks_parameter_name(self.stack_name),
            Value=durables.serve_callbacks(host=self.host),
            Type="String",
            Overwrite=True,
        )
        resumed = durables.resume()
        if resumed:
            log.info("resumed %d durable execution(s) left running: %s", len(resumed), ", ".join(resumed))
        return durables

    def start_workers(self) -> None:
        """Start the event source mappings (again, after stop_workers)."""
        assert self.deployment is not None
        for spec in self.catalog:
            if spec.name in self.mappings:
                continue
            queue = self.deployment.queues[spec.name]
            mapping = EventSourceMapping(
                queue=queue,
                sqs_client=self.clients()("sqs"),
                # One event source mapping per priority lane, each paused and resumed through Lambda's API.
                switches={source.arn: MappingSwitch(self.clients()("lambda"), source.arn) for source in queue.sources},
                handler_factory=lambda name=spec.name: self._worker_handler(name),  # type: ignore[misc]
                function_name=self._function_name(spec.name),
                concurrency=self._concurrency,
                chaos=self.chaos,
            )
            mapping.start()
            self.mappings[spec.name] = mapping

    def stop_workers(self, timeout_s: float | None = None) -> None:
        """Disable every event source mapping (batches in flight finish): what a disabled ESM or a reserved
        concurrency of 0 does on AWS. The queues, the server and the heartbeat canary keep going."""
        for mapping in self.mappings.values():
            mapping.request_stop()
        for mapping in self.mappings.values():
            mapping.join(timeout_s)
        self.mappings.clear()

    def _function_name(self, queue: str) -> str:
        return worker_function_name(self.stack_name, queue)

    def _role_sqs(self, role_arn: str) -> Any:
        """An SQS client on the credentials of `role_arn` (a scheduler role), as the scheduler sends with."""
        if role_arn not in self._role_clients:
            session = scheduler_role_session(self.clients()("sts"), role_arn, self.region)
            self._role_clients[role_arn] = self.clients(session)("sqs")
        return self._role_clients[role_arn]

    def _worker_handler(self, queue: str) -> Handler:
        """A new execution environment (one per poller, with its own state), run as sqs_jobs.worker.entry runs
        one on
        Lambda: the worker is built inside the first invocation, its time measured from the invocation's entry,
        so a slow build (chaos's slow_start) is that invocation's time."""
        slow_start_s = self.chaos.slow_start_s() if self.chaos is not None else 0.0
        built: list[Worker] = []

        def handle(event: Mapping[str, Any], context: Any) -> Mapping[str, Any]:
            remaining_s = context.get_remaining_time_in_millis() / 1000
            if not built:
                if slow_start_s and self.chaos is not None:
                    self.chaos.wait(slow_start_s)
                built.append(self._build_worker(queue))
            built[0].invocation_started(remaining_s)
            return built[0].handle(event, context)

        return handle

    def _build_worker(self, queue: str) -> Worker:
        assert self.deployment is not None
        clients = self._worker_clients(queue)
        mapping = self.mappings.get(queue)
        lane = mapping.poller_lane() if mapping is not None else None
        if mapping is not None and lane:
            # A lower priority lane's environment: its AWS calls wait while a more urgent lane's batch runs, which on
            # AWS has environments of its own (sqs_jobs.local.emulator).
            urgent_first = mapping.wait_for_urgent_lanes
            clients.register(AWS_CALL_EVENT, lambda **_: urgent_first(lane))
        return Worker(
            settings=self.deployment.worker_settings(queue),
            clients=clients,
            observability=Observability.create(output=self._worker_output, metrics_sink=self._forward_metrics),
            http_client=self._jobs_http_client(queue),
            durable_starter=self.durables,
            durable_executions=self.durables,
        )

    def _jobs_http_client(self, queue: str) -> HttpClient | None:
        """The jobs' HTTP client when the engine changes it (chaos hooked in, other timeouts); None: the worker
        builds its own, as deployed."""
        if self.chaos is None and self._http_timeouts_s is None:
            return None
        connect_s, read_s = self._http_timeouts_s or (DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_READ_TIMEOUT_S)
        return HttpClient(
            connect_timeout_s=connect_s,
            read_timeout_s=read_s,
            connections_per_host=self.catalog.queue(queue).records_in_parallel,
            before_send=self.chaos.before_http_send if self.chaos is not None else None,
        )

    def _slow_store_delay(self, environ: Mapping[str, Any], body: bytes) -> float:
        """How late the server answers a request: chaos's slow_store for a write to the idempotency table."""
        operation = str(environ.get("HTTP_X_AMZ_TARGET", "")).rpartition(".")[2]
        if self.chaos is None or self.deployment is None or operation not in DYNAMODB_WRITES:
            return 0.0
        try:
            table = json.loads(body).get("TableName")
        except (ValueError, AttributeError):
            return 0.0
        return self.chaos.store_delay_s() if table == self.deployment.idempotency_table else 0.0

    def _forward_metrics(self, document: dict[str, Any]) -> None:
        if self.metrics is not None:
            self.metrics.record_emf(document)

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop polling, let every batch in flight finish, then stop the fake API and the server."""
        if self.scheduler is not None:
            self.scheduler.stop()
        self.stop_workers(timeout_s)
        if self.heartbeats is not None:
            self.heartbeats.stop()
        if self.metrics is not None:
            self.metrics.stop()
        # Before moto: a run cut at its time limit may still wait on a stand-in or an injected hang; answered
        # now, it can still clean up its idempotency record.
        if self.chaos is not None:
            self.chaos.stop()
        for standin in self.standins.values():
            standin.stop()
        if self.durables is not None:
            self.durables.close()
            self.durables = None
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._switch_interval_s is not None:
            sys.setswitchinterval(self._switch_interval_s)
            self._switch_interval_s = None

    def __enter__(self) -> LocalEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stats(self) -> dict[str, dict[str, Any]]:
        return {name: mapping.stats.snapshot() for name, mapping in self.mappings.items()}

    def sent_mail(self) -> list[dict[str, Any]]:
        """Mails the SES stand-in accepted (moto keeps them in this process)."""
        from moto.core.models import DEFAULT_ACCOUNT_ID
        from moto.ses.models import ses_backends

        backend = ses_backends[DEFAULT_ACCOUNT_ID][self.region]
        return [
            {"source": m.source, "destinations": m.destinations, "subject": m.subject, "body": m.body}
            for m in backend.sent_messages
        ]

    def queue_counts(self) -> dict[str, dict[str, int]]:
        """Per source queue, its messages by UNSETTLED_ATTRIBUTES (of every priority lane, added up)."""
        assert self.deployment is not None and self._sqs is not None
        counts = {}
        for name, queue in self.deployment.queues.items():
            counts[name] = dict.fromkeys(UNSETTLED_ATTRIBUTES, 0)
            for source in queue.sources:
                attributes: Mapping[str, str] = self._sqs.get_queue_attributes(
                    QueueUrl=source.url, AttributeNames=list(UNSETTLED_ATTRIBUTES)
                )["Attributes"]
                for attribute in UNSETTLED_ATTRIBUTES:
                    counts[name][attribute] += int(attributes.get(attribute, "0"))
        return counts

    def wait_until_idle(self, timeout_s: float = 60.0, poll_s: float = 0.2) -> bool:
        """True once every source queue is empty and nothing is in flight, False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not any(sum(counts.values()) for counts in self.queue_counts().values()):
                return True
            time.sleep(poll_s)
        return False


@contextmanager
def running_engine(**kwargs: Any) -> Iterator[LocalEngine]:
    engine = LocalEngine(**kwargs)
    engine.start()
    try:
        yield engine
    finally:
        engine.stop()
