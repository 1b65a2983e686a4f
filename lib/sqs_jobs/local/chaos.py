"""Fault injection for the local engine (`jobctl local --chaos ...`): the faults a job meets on AWS, on demand.

    transient   a job's call fails and nothing happens: an AWS call (any service, through `context.client`)
                answers its service's throttling error; an HTTP call (`context.http`) finds its connection
                refused before anything is sent; a stand-in that draws its own faults (the example's invoicing
                API) also answers 503 by itself
    hang        a job's call blocks: an AWS call for `hang_s`, then times out having sent nothing; an HTTP call
                until its whole-call timeout (or `hang_s`), having sent nothing; such a stand-in by itself does
                its work and answers only after `hang_s` (the article's incident)
    crash       the execution environment dies after the batch's side effects, before the ack: the event source
                deletes nothing and starts a new environment; the messages come back after their visibility
    duplicate   SQS delivers a message twice: a received message is made visible again at once, so another
                poller receives it (same MessageId, receive count + 1) while the first copy still runs
    slow_start  a new execution environment's first build of the worker takes `slow_start_s`, inside its
                first invocation (as sqs_jobs.worker.entry builds it), so the batch has that much less time
    slow_store  a worker's write to the idempotency table is made, and its answer comes `slow_store_s` late, on
                the socket (the runtime's bounded call may give up first, and the write has landed anyway)
    drip        a stand-in sends its answer (status line, headers, body) a byte at a time, over `drip_s`
    runtime     one of the worker runtime's own AWS calls (its idempotency record, key slots, rate limits, batch
                counts, follow-up publishes, visibility changes, dead letters: any call on the worker's clients
                that is not a job's) answers its service's throttling error, before and after a job's success

Rates are probabilities in [0, 1]: per job call (transient, hang: one draw per AWS or HTTP call a job makes in its
run, never the runtime's own calls; a stand-in draws again per request it serves), per record that ran
(crash), per received message (duplicate), per new execution environment (slow_start), per write to the
idempotency table (slow_store), per request to a stand-in (drip), per AWS call of the runtime's own (runtime). A
seed makes a run repeatable as far as thread timing allows.
"""

from __future__ import annotations

import errno
import random
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ReadTimeoutError

from sqs_jobs.worker.time_limit import current_run

if TYPE_CHECKING:
    from sqs_jobs.worker.clients import ClientFactory

# Each fault, and what its rate is counted per.
FAULTS: Mapping[str, str] = {
    "transient": "job's call",
    "hang": "job's call",
    "crash": "record that ran",
    "duplicate": "received message",
    "slow_start": "new execution environment",
    "slow_store": "write to the idempotency table",
    "drip": "answer of a stand-in",
    "runtime": "runtime's own AWS call",
}
# How long each slow fault lasts (seconds): the setting's name, the fault's, and its default.
DURATIONS: Mapping[str, tuple[str, float]] = {
    "hang_s": ("hang", 5.0),
    "slow_start_s": ("slow_start", 4.0),
    "slow_store_s": ("slow_store", 3.0),
    "drip_s": ("drip", 5.0),
}
MAX_DURATION_S = 900.0
# Every AWS call a job makes, whatever the service: botocore's `before-call.<service>.<operation>` events.
AWS_CALL_EVENT = "before-call"
# Each service's own throttling answer (code, HTTP status), from its API reference; others answer the generic one.
THROTTLED: Mapping[str, tuple[str, int]] = {
    "ses": ("Throttling", 400),
    "dynamodb": ("ProvisionedThroughputExceededException", 400),
    "s3": ("SlowDown", 503),
}
DEFAULT_THROTTLED = ("ThrottlingException", 400)
# The downstream name of every HTTP call a job makes, in `injected` (`transient.http`, `hang.http`).
HTTP_DOWNSTREAM = "http"


class ChaosSpecError(ValueError):
    """A --chaos specification the engine can't use; the message names what is accepted."""


@dataclass(frozen=True)
class ChaosSettings:
    """How often each fault happens, and how long the slow ones last; all rates zero is no chaos."""

    transient: float = 0.0
    hang: float = 0.0
    crash: float = 0.0
    duplicate: float = 0.0
    slow_start: float = 0.0
    slow_store: float = 0.0
    drip: float = 0.0
    runtime: float = 0.0
    hang_s: float = DURATIONS["hang_s"][1]
    slow_start_s: float = DURATIONS["slow_start_s"][1]
    slow_store_s: float = DURATIONS["slow_store_s"][1]
    drip_s: float = DURATIONS["drip_s"][1]
    seed: int | None = None

    def __post_init__(self) -> None:
        problems = [f"{name}={getattr(self, name)!r}" for name in FAULTS if not 0.0 <= getattr(self, name) <= 1.0]
        if problems:
            raise ChaosSpecError(f"chaos rates must be between 0 and 1: {', '.join(problems)}")
        if self.transient + self.hang > 1.0:
            raise ChaosSpecError(
                f"transient ({self.transient}) + hang ({self.hang}) is over 1: both are shares of the same calls"
            )
        for name in DURATIONS:
            if not 0.0 < getattr(self, name) <= MAX_DURATION_S:
                raise ChaosSpecError(
                    f"{name}={getattr(self, name)!r} must be above 0 and at most {MAX_DURATION_S:g} seconds"
                )

    @classmethod
    def parse(cls, spec: str) -> ChaosSettings:
        """From `transient=0.2,hang=0.01,crash=0.01,duplicate=0.05[,slow_start=0.3,slow_start_s=4][,seed=7]`."""
        accepted = [*FAULTS, *DURATIONS, "seed"]
        usage = f"expected comma-separated name=value with names {', '.join(accepted)}, e.g. transient=0.2,crash=0.01"
        values: dict[str, Any] = {}
        for item in (part.strip() for part in spec.split(",")):
            if not item:
                continue
            name, sep, raw = item.partition("=")
            name = name.strip()
            if not sep or name not in accepted:
                raise ChaosSpecError(f"bad chaos setting {item!r}: {usage}")
            if name in values:
                raise ChaosSpecError(f"chaos setting {name!r} is given twice")
            try:
                values[name] = int(raw) if name == "seed" else float(raw)
            except ValueError:
                kind = "an integer" if name == "seed" else "a number"
                raise ChaosSpecError(f"chaos setting {name}={raw.strip()!r} is not {kind}") from None
        if not values:
            raise ChaosSpecError(f"empty chaos specification: {usage}")
        return cls(**values)

    def describe(self) -> str:
        """The rates, how long the slow faults last (hang_s always, the others when their fault is on), the seed."""
        shown = [f"{f.name}={getattr(self, f.name)}" for f in fields(self) if f.name in FAULTS]
        shown += [
            f"{name}={getattr(self, name):g}"
            for name, (fault, _) in DURATIONS.items()
            if name == "hang_s" or getattr(self, fault) > 0
        ]
        return ", ".join([*shown, f"seed={self.seed}"])


class Chaos:
    """Draws the faults (thread-safe) and counts the ones it injected."""

    def __init__(self, settings: ChaosSettings) -> None:
        self.settings = settings
        self._rng = random.Random(settings.seed)
        self._lock = threading.Lock()
        self._injected: Counter[str] = Counter()
        # Waiting faults end at once when the engine stops.
        self._stopping = threading.Event()

    def injected(self) -> dict[str, int]:
        """Faults injected so far, by kind (`transient.ses`, `hang.http`, `transient.<stand-in>`, `crash`, ...)."""
        with self._lock:
            return dict(self._injected)

    def stop(self) -> None:
        self._stopping.set()

    def wait(self, seconds: float) -> bool:
        """Sleep `seconds`, or less if the engine stops; True when it stopped."""
        return self._stopping.wait(max(0.0, seconds))

    def _draw(self, rate: float) -> bool:
        if rate <= 0.0:
            return False
        with self._lock:
            return self._rng.random() < rate

    def _count(self, fault: str) -> None:
        with self._lock:
            self._injected[fault] += 1

    def _drawn(self, rate: float, fault: str) -> bool:
        drawn = self._draw(rate)
        if drawn:
            self._count(fault)
        return drawn

    def downstream_fault(self, downstream: str) -> str | None:
        """For one call to a downstream: "transient", "hang" or None (no fault). One draw splits the two rates."""
        if self.settings.transient + self.settings.hang <= 0.0:
            return None
        with self._lock:
            roll = self._rng.random()
        fault = None
        if roll < self.settings.transient:
            fault = "transient"
        elif roll < self.settings.transient + self.settings.hang:
            fault = "hang"
        if fault is not None:
            self._count(f"{fault}.{downstream}")
        return fault

    def hang(self) -> None:
        """Block for hang_s, or until the engine stops."""
        self.wait(self.settings.hang_s)

    def crash_after(self, records_run: int) -> bool:
        """Whether the environment dies after running these records, before the ack: one draw per record."""
        crashed = any(self._draw(self.settings.crash) for _ in range(records_run))
        if crashed:
            self._count("crash")
        return crashed

    def duplicate(self) -> bool:
        return self._drawn(self.settings.duplicate, "duplicate")

    def slow_start_s(self) -> float:
        """For a new execution environment: how long its first build takes beyond the usual (0.0: as usual)."""
        return self.settings.slow_start_s if self._drawn(self.settings.slow_start, "slow_start") else 0.0

    def store_delay_s(self) -> float:
        """For one write to the idempotency table: how late its answer comes (0.0: at once)."""
        return self.settings.slow_store_s if self._drawn(self.settings.slow_store, "slow_store") else 0.0

    def drip_s(self, standin: str) -> float:
        """For one answer of the stand-in `standin`: how long sending it a byte at a time takes (0.0: at once)."""
        return self.settings.drip_s if self._drawn(self.settings.drip, f"drip.{standin}") else 0.0

    # --- AWS calls on the worker's clients: botocore's event hooks ---------------------------------------------

    def register_aws(self, clients: ClientFactory) -> None:
        """Hook every AWS call of every client `clients` makes (ClientFactory.register): a job's calls meet the
        job's faults (transient, hang), the runtime's own calls on the same clients the runtime fault; no other
        factory's calls meet any."""
        clients.register(AWS_CALL_EVENT, self._before_aws_call)

    def _before_aws_call(self, event_name: str = "", **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        parts = event_name.split(".")
        service = parts[1] if len(parts) >= 3 else "aws"
        run = current_run()
        # The runtime's own calls: outside a run, or from a run's thread on the runtime's behalf (a cancel's read,
        # a rate limit's lease), as sqs_jobs.worker.downstream tells them apart.
        if run is None or run.runtime_calling:
            operation = parts[2] if len(parts) >= 3 else "call"
            if self._drawn(self.settings.runtime, f"runtime.{service}.{operation}"):
                return _throttled(service, "runtime")
            return None
        fault = self.downstream_fault(service)
        if fault == "hang":
            started = time.monotonic()
            self.hang()
            # Nothing was sent: the connection never answered. Raised before botocore's own retries, so one hang
            # is one call's whole timeout.
            raise ReadTimeoutError(endpoint_url=f"{service} ({time.monotonic() - started:.1f}s, injected hang)")
        if fault == "transient":
            return _throttled(service, "job")
        return None

    # --- a job's HTTP calls: the hook point of sqs_jobs.worker.http's HttpClient ----------------------------

    def before_http_send(self, method: str, url: str, time_left_s: float) -> None:
        """HttpClient's `before_send`: client-side faults of a job's HTTP call, before anything is sent. A refused
        connection, or a hang that lasts until the call's whole-call timeout (at most hang_s): both OSErrors, which
        the client turns into its own errors as for a real connection."""
        if current_run() is None:
            return
        fault = self.downstream_fault(HTTP_DOWNSTREAM)
        if fault == "transient":
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"Connection refused (injected) for {method} {url}")
        if fault == "hang":
            self.wait(min(self.settings.hang_s, time_left_s))
            raise TimeoutError(f"timed out (injected hang) for {method} {url}")


def _throttled(service: str, whose: str) -> tuple[AWSResponse, dict[str, Any]]:
    """The service's throttling answer, for botocore's `before-call`: returning a response skips the HTTP call (and
    botocore's retries), and botocore raises the ClientError it would raise for this answer (its after-call hooks
    see it, as the breakers do)."""
    code, status = THROTTLED.get(service, DEFAULT_THROTTLED)
    parsed = {
        "Error": {"Code": code, "Message": f"Rate exceeded (injected {service} throttling of a {whose} call)"},
        "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}},
    }
    return AWSResponse(url=f"https://{service}.local/", status_code=status, headers=HTTPHeaders(), raw=None), parsed
