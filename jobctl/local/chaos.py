"""Fault injection for the local engine (`jobctl local --chaos ...`): the faults a job meets on AWS, on demand.

    transient   a downstream call fails and nothing happens: SES answers Throttling, the invoicing API 503
    hang        a downstream call blocks for `hang_s`: SES then times out having sent nothing; the invoicing
                API creates the invoice and answers only after `hang_s` (the article's incident)
    crash       the execution environment dies after the batch's side effects, before the ack: the event source
                deletes nothing and starts a new environment; the messages come back after their visibility
    duplicate   SQS delivers a message twice: a received message is made visible again at once, so another
                poller receives it (same MessageId, receive count + 1) while the first copy still runs

Rates are probabilities in [0, 1]: per downstream call (transient, hang), per record that ran (crash), per
received message (duplicate). A seed makes a run repeatable as far as thread timing allows.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ReadTimeoutError

# Each fault, and what its rate is counted per.
FAULTS: Mapping[str, str] = {
    "transient": "downstream call",
    "hang": "downstream call",
    "crash": "record that ran",
    "duplicate": "received message",
}
DEFAULT_HANG_S = 5.0
# The SES operations that send mail: where transient failures and hangs are injected.
SES_SEND_EVENTS = ("before-call.ses.SendEmail", "before-call.ses.SendRawEmail")


class ChaosSpecError(ValueError):
    """A --chaos specification the engine can't use; the message names what is accepted."""


@dataclass(frozen=True)
class ChaosSettings:
    """How often each fault happens; all zero is no chaos."""

    transient: float = 0.0
    hang: float = 0.0
    crash: float = 0.0
    duplicate: float = 0.0
    hang_s: float = DEFAULT_HANG_S
    seed: int | None = None

    def __post_init__(self) -> None:
        problems = [f"{name}={getattr(self, name)!r}" for name in FAULTS if not 0.0 <= getattr(self, name) <= 1.0]
        if problems:
            raise ChaosSpecError(f"chaos rates must be between 0 and 1: {', '.join(problems)}")
        if self.transient + self.hang > 1.0:
            raise ChaosSpecError(
                f"transient ({self.transient}) + hang ({self.hang}) is over 1: both are shares of the same calls"
            )
        if not 0.0 < self.hang_s <= 900.0:
            raise ChaosSpecError(f"hang_s={self.hang_s!r} must be above 0 and at most 900 seconds")

    @classmethod
    def parse(cls, spec: str) -> ChaosSettings:
        """From `transient=0.2,hang=0.01,crash=0.01,duplicate=0.05[,hang_s=5][,seed=7]`."""
        accepted = [*FAULTS, "hang_s", "seed"]
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
        shown = [f"{f.name}={getattr(self, f.name)}" for f in fields(self) if f.name in FAULTS]
        return ", ".join([*shown, f"hang_s={self.hang_s:g}", f"seed={self.seed}"])


class Chaos:
    """Draws the faults (thread-safe) and counts the ones it injected."""

    def __init__(self, settings: ChaosSettings) -> None:
        self.settings = settings
        self._rng = random.Random(settings.seed)
        self._lock = threading.Lock()
        self._injected: Counter[str] = Counter()
        # Waiting hangs end at once when the engine stops.
        self._stopping = threading.Event()

    def injected(self) -> dict[str, int]:
        """Faults injected so far, by kind (`transient.ses`, `hang.invoicing`, `crash`, `duplicate`, ...)."""
        with self._lock:
            return dict(self._injected)

    def stop(self) -> None:
        self._stopping.set()

    def _draw(self, rate: float) -> bool:
        if rate <= 0.0:
            return False
        with self._lock:
            return self._rng.random() < rate

    def _count(self, fault: str) -> None:
        with self._lock:
            self._injected[fault] += 1

    def downstream_fault(self, downstream: str) -> str | None:
        """For one downstream call: "transient", "hang" or None (no fault). One draw splits the two rates."""
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
        self._stopping.wait(self.settings.hang_s)

    def crash_after(self, records_run: int) -> bool:
        """Whether the environment dies after running these records, before the ack: one draw per record."""
        crashed = any(self._draw(self.settings.crash) for _ in range(records_run))
        if crashed:
            self._count("crash")
        return crashed

    def duplicate(self) -> bool:
        duplicated = self._draw(self.settings.duplicate)
        if duplicated:
            self._count("duplicate")
        return duplicated

    # --- SES, through botocore's event hooks on the workers' session ------------------------------------------

    def register_ses(self, events: Any) -> None:
        """Hook SES's send operations on a boto3 session's event system: every client made from it after this
        is affected, the engine's own clients (made from other sessions) are not."""
        for event in SES_SEND_EVENTS:
            events.register(event, self._before_ses_send)

    def _before_ses_send(self, model: Any, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        fault = self.downstream_fault("ses")
        if fault == "hang":
            started = time.monotonic()
            self.hang()
            # Nothing was sent: the connection never answered.
            raise ReadTimeoutError(endpoint_url=f"ses ({time.monotonic() - started:.1f}s, injected hang)")
        if fault == "transient":
            # A real botocore error path: returning a response here skips the HTTP call, and botocore raises
            # the ClientError it would raise for this answer.
            status = 400
            parsed = {
                "Error": {"Code": "Throttling", "Message": "Maximum sending rate exceeded (injected)"},
                "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}},
            }
            return AWSResponse(url="https://email.local/", status_code=status, headers=HTTPHeaders(), raw=None), parsed
        return None
