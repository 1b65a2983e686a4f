"""AWS clients, built on first use and injected: nothing here runs at import time."""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from typing import Any, Final

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config

from sqs_jobs.worker.downstream import register_aws_hooks

# The jobs' AWS calls: a hung call must not eat the whole Lambda timeout (the job's time limit cuts it sooner).
JOB_CONNECT_S = 5.0
JOB_READ_S = 20.0
DEFAULT_CONFIG = Config(
    connect_timeout=JOB_CONNECT_S, read_timeout=JOB_READ_S, retries={"mode": "standard", "max_attempts": 3}
)
# The longest one attempt of a job's AWS call takes: what a call in flight when its run is cut may still take.
JOB_AWS_ATTEMPT_S = JOB_CONNECT_S + JOB_READ_S


class CallBound:
    """Timeouts and attempts for one of the runtime's own AWS calls, and the longest it can then take. A plain class:
    a dataclass's generated methods cost every cold start half a millisecond."""

    __slots__ = ("attempts", "connect_s", "read_s")

    def __init__(self, connect_s: float, read_s: float, attempts: int) -> None:
        self.connect_s: Final = connect_s
        self.read_s: Final = read_s
        self.attempts: Final = attempts

    # Equal by value: ClientFactory keeps one client per (service, bound), and call_bound makes short bounds afresh.
    def _key(self) -> tuple[float, float, int]:
        return (self.connect_s, self.read_s, self.attempts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CallBound):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"CallBound(connect_s={self.connect_s!r}, read_s={self.read_s!r}, attempts={self.attempts!r})"

    @property
    def worst_s(self) -> float:
        # Before each retry botocore's standard mode waits at most min(2^i, 20) s (throttling's scale), raised
        # by at most 5 s more for an x-amz-retry-after header (botocore/retries/standard.py).
        waits = sum(min(2.0**retry, 20.0) + 5.0 for retry in range(self.attempts - 1))
        return self.attempts * (self.connect_s + self.read_s) + waits

    def config(self) -> Config:
        return Config(
            connect_timeout=self.connect_s,
            read_timeout=self.read_s,
            # total_max_attempts counts the first attempt; botocore's max_attempts would count only retries.
            retries={"mode": "standard", "total_max_attempts": self.attempts},
        )


# The runtime's own calls (its idempotency record, its DLQ, its queue) must end before the invocation does, or the
# batch's answer is lost and the whole batch comes back: a call gets the most generous of these whose worst case
# fits the time it has left (the last, shortest, when none does). Few bounds, so few clients.
CALL_BOUNDS = (
    CallBound(connect_s=5, read_s=20, attempts=3),
    CallBound(connect_s=2, read_s=8, attempts=2),
    CallBound(connect_s=1, read_s=3, attempts=2),
    CallBound(connect_s=1, read_s=4, attempts=1),
    CallBound(connect_s=1, read_s=1, attempts=1),
)
# Below the last bound: one attempt sharing the time left, in steps of this (few distinct clients), at least one.
SHORT_CALL_STEP_S = 0.25


@functools.cache
def _shared_loader() -> botocore.loaders.Loader:
    return botocore.loaders.create_loader()


def new_session(**settings: Any) -> boto3.session.Session:
    """A boto3 session (`settings` as for boto3.session.Session) that shares one process-wide loader of botocore's
    service models with every other session made here: a fresh session would parse each model's JSON again, which
    costs more than the rest of making a client (the local engine and the tests make sessions per worker)."""
    core = botocore.session.Session()
    core.register_component("data_loader", _shared_loader())
    return boto3.session.Session(botocore_session=core, **settings)


def call_bound(time_left_s: float) -> CallBound:
    """The most generous bound whose worst case ends within `time_left_s`."""
    for bound in CALL_BOUNDS:
        if bound.worst_s <= time_left_s:
            return bound
    half = max(SHORT_CALL_STEP_S, math.floor(time_left_s / 2 / SHORT_CALL_STEP_S) * SHORT_CALL_STEP_S)
    return CallBound(connect_s=half, read_s=half, attempts=1)


class ClientFactory:
    """Creates one boto3 client per service and hands out the same one after; safe across threads.

    Every client carries the hooks of sqs_jobs.worker.downstream, which act only on a job's own calls: the
    time limit's fence and the circuit breaker of the service."""

    def __init__(
        self,
        session: boto3.session.Session | None = None,
        endpoint_url: str | None = None,
        config: Config = DEFAULT_CONFIG,
    ) -> None:
        self._session = session
        self._endpoint_url = endpoint_url
        self._config = config
        self._clients: dict[tuple[str, CallBound | None], Any] = {}
        self._handlers: list[tuple[str, Callable[..., Any]]] = []
        self._lock = threading.Lock()

    def reserve_connections(self, connections: int) -> None:
        """Keep at least this many connections per client (botocore keeps 10) for the clients made from now on:
        records running in parallel and the runtime share them."""
        if connections > (getattr(self._config, "max_pool_connections", None) or 10):
            self._config = self._config.merge(Config(max_pool_connections=connections))

    def __call__(self, service: str) -> Any:
        return self._client(service, None)

    def register(self, event_name: str, handler: Callable[..., Any]) -> None:
        """A botocore event handler on every client this factory made and makes (the jobs' and the runtime's
        alike), e.g. `provide-client-params.sqs.ChangeMessageVisibility`: how the local engine injects faults and
        tests watch calls."""
        with self._lock:
            self._handlers.append((event_name, handler))
            clients = list(self._clients.values())
        for client in clients:
            client.meta.events.register(event_name, handler)

    def within(self, service: str, time_left_s: float) -> Any:
        """A client of `service` for one of the runtime's own calls, which must end within `time_left_s`: its
        timeouts and retries are those of `call_bound(time_left_s)`."""
        return self._client(service, call_bound(time_left_s))

    def _client(self, service: str, bound: CallBound | None) -> Any:
        with self._lock:
            client = self._clients.get((service, bound))
            if client is None:
                session = self._session or new_session()
                config = self._config if bound is None else self._config.merge(bound.config())
                client = session.client(service, endpoint_url=self._endpoint_url, config=config)  # type: ignore[call-overload]
                register_aws_hooks(client.meta.events)
                for event_name, handler in self._handlers:
                    client.meta.events.register(event_name, handler)
                self._clients[(service, bound)] = client
            return client
