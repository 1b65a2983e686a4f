"""A worker's flow control: which of the catalog's limits a run and its calls pass, and passing them.

Before a run's job starts (inside its run, its key already held): a slot of its key's concurrency limit, then a
token of the job's rate limit. Before each HTTP call: a token of the host's rate limit, if an endpoint with one is
at that host; before each SES call, a token of the mail sender's. Each waits while its turn is near and the
invocation's time allows; otherwise it raises a HeldBackError and the record is handed back, spending no attempt
(sqs_jobs.worker.settlement). The limits themselves are in rate_limit.py and key_concurrency.py; their
declarations in sqs_jobs.flow_control.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqs_jobs.envelope import Envelope
from sqs_jobs.flow_control import (
    MAX_TOKEN_WAIT_S,
    RateLimit,
    endpoint_rate_limit_name,
    job_rate_limit_name,
    key_concurrency_name,
    limit_key,
)
from sqs_jobs.resources import MailSender
from sqs_jobs.specs import JobSpec
from sqs_jobs.worker.downstream import http_downstream
from sqs_jobs.worker.key_concurrency import KeySlots, Lease
from sqs_jobs.worker.rate_limit import RateLimiter, TokenBucketStore

# SES's services as botocore names them (v1 and v2): a mail sender's limit counts every call to either.
SES_SERVICES = ("ses", "sesv2")


@dataclass(frozen=True)
class Admission:
    """What a run holds while it runs: its key's slot (to give back when it settles), and how long it waited."""

    lease: Lease | None
    waited_s: float


class FlowControl:
    """The limits a worker's runs pass, on the shared store (the idempotency table)."""

    def __init__(
        self,
        dynamodb: Callable[[], Any],
        table: str,
        endpoints: Mapping[str, str],
        endpoint_limits: Mapping[str, tuple[str, RateLimit]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.buckets = TokenBucketStore(dynamodb, table)
        self.limiter = RateLimiter(self.buckets, clock=clock)
        self.slots = KeySlots(dynamodb, table, clock=clock)
        self._clock = clock
        # Each limited downstream as its breaker names it: an endpoint's host (scheme, host and port), SES's
        # services for a mail sender; its limit's name and spec.
        self._hosts: dict[str, tuple[str, RateLimit]] = {}
        for name, (kind, limit) in endpoint_limits.items():
            if name not in endpoints:
                continue
            named = (endpoint_rate_limit_name(name), limit)
            if kind == MailSender.__name__:
                self._hosts.update(dict.fromkeys(SES_SERVICES, named))
            else:
                self._hosts[http_downstream(endpoints[name])] = named

    def admit(
        self, job: JobSpec, envelope: Envelope, holder: str, wait_s: float, lease_until: float, held_s: float
    ) -> Admission:
        """Pass the job's limits before its run starts: a slot of its key until `lease_until` (when the
        invocation ends at the latest), then a token, waiting for it at most `wait_s`. Raises KeyBusyError,
        RateLimitedError or FlowControlStoreError instead (holding nothing)."""
        fields = envelope.to_dict()
        lease = None
        if job.concurrency is not None:
            lease = self.slots.acquire(
                key_concurrency_name(job.name),
                limit_key(fields, job.concurrency.per),
                job.concurrency,
                holder,
                until=lease_until,
                held_s=held_s,
            )
        waited_s = 0.0
        try:
            if job.rate_limit is not None:
                waited_s = self.limiter.acquire(
                    job_rate_limit_name(job.name),
                    limit_key(fields, job.rate_limit.per),
                    job.rate_limit,
                    wait_until=self._clock() + min(wait_s, MAX_TOKEN_WAIT_S),
                )
        except BaseException:
            if lease is not None:
                self.release(Admission(lease, 0.0))
            raise
        return Admission(lease, waited_s)

    def release(self, admission: Admission) -> None:
        """The run settled: its key's slot is free for the next (a failure to say so leaves the slot to expire
        with the invocation)."""
        if admission.lease is not None:
            self.slots.release(admission.lease)

    def call_limit(self, envelope: Envelope) -> Callable[[str, float], float] | None:
        """What a run's HTTP calls wait on: the limit of the host called, for at most the seconds given; how long
        it waited. None when no endpoint of the worker has a limit."""
        if not self._hosts:
            return None
        fields = envelope.to_dict()

        def wait_for_token(downstream: str, wait_s: float) -> float:
            found = self._hosts.get(downstream)
            if found is None:
                return 0.0
            name, limit = found
            return self.limiter.acquire(
                name, limit_key(fields, limit.per), limit, wait_until=self._clock() + min(wait_s, MAX_TOKEN_WAIT_S)
            )

        return wait_for_token
