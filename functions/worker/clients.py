"""AWS clients, built on first use and injected: nothing here runs at import time."""

from __future__ import annotations

import threading
from typing import Any

import boto3
from botocore.config import Config

from functions.worker.downstream import register_aws_hooks

# Short timeouts for the runtime's own AWS calls: a hung call must not eat the whole Lambda timeout.
DEFAULT_CONFIG = Config(connect_timeout=5, read_timeout=20, retries={"mode": "standard", "max_attempts": 3})


class ClientFactory:
    """Creates one boto3 client per service and hands out the same one after; safe across threads.

    Every client carries the hooks of functions/worker/downstream.py, which act only on a job's own calls: the
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
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def reserve_connections(self, connections: int) -> None:
        """Keep at least this many connections per client (botocore keeps 10) for the clients made from now on:
        records running in parallel and the runtime share them."""
        if connections > (getattr(self._config, "max_pool_connections", None) or 10):
            self._config = self._config.merge(Config(max_pool_connections=connections))

    def __call__(self, service: str) -> Any:
        with self._lock:
            client = self._clients.get(service)
            if client is None:
                session = self._session or boto3.session.Session()
                client = session.client(service, endpoint_url=self._endpoint_url, config=self._config)  # type: ignore[call-overload]
                register_aws_hooks(client.meta.events)
                self._clients[service] = client
            return client
