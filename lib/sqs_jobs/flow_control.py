"""Flow control declared in the catalog: rate limits shared by every worker, and concurrency per key.

- `RateLimit` on a job (`JobSpec.rate_limit`: runs started per second) or on an HTTP endpoint
  (`Endpoint.rate_limit`: calls per second to its host, from every job that calls it). Enforced across every
  execution environment by a token bucket (GCRA) in the idempotency table, leased in blocks so that most tokens
  cost no write (sqs_jobs.worker.rate_limit).
- `KeyConcurrency` on a job (`JobSpec.concurrency`): at most `limit` runs at once per key, across workers, with
  leases that end with the invocation that holds them (sqs_jobs.worker.key_concurrency).

Both may be keyed by an envelope field (`per`): "tenant", "id", or an extra field the producer sends. A record
over a limit waits inside its invocation when its turn is near, and is otherwise handed back until its turn,
spending no attempt, for at most `max_hold_s` (then each refusal is a failed attempt, so nothing waits for ever).
docs/flow-control.md says how each is enforced and what it costs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sqs_jobs.limits import HOUR, MINUTE, SQS_MAX_VISIBILITY_S

# An envelope field a limit is keyed by: a reserved field or an extra field's name (sqs_jobs.envelope).
_PER = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
# What one lease of tokens aims to cover: a worker asks the store for about this many seconds' worth at once.
LEASE_TARGET_S = 1.0
# The most a RateLimit may allow: far above what one bucket item's writes could serve anyway.
MAX_PER_SECOND = 10_000.0
# The longest a run's start or call waits for a token inside its invocation; a token further away hands the record
# back instead. Waiting holds a worker (and its Lambda bill) while a hand-back costs a receive and two writes, and
# with a backlog the pollers would hand the next records straight back too: a short wait keeps the pollers at the
# limit's pace (docs/flow-control.md). Here, not in the runtime, so the dashboard can draw it.
MAX_TOKEN_WAIT_S = 20.0


@dataclass(frozen=True)
class RateLimit:
    """At most `per_second` on average, and at most `per_second` x W + `burst` in any W seconds, across every
    worker. `per` keys it by an envelope field (one bucket per value; a record without the field shares the
    bucket of records without it)."""

    per_second: float
    burst: int = 1
    per: str | None = None
    # How long a record may be handed back by this limit without spending an attempt, from its first hold.
    max_hold_s: int = 15 * MINUTE

    @property
    def interval_s(self) -> float:
        """The time one token stands for."""
        return 1.0 / self.per_second

    @property
    def lease_tokens(self) -> int:
        """Tokens a worker leases at once. A lease's tokens may be spent for as long as they stand for, so the
        bucket keeps that much of the burst back (see `store_capacity_s`); a burst under 4 leases one at a time,
        to be spent at once."""
        wanted = max(1, round(self.per_second * LEASE_TARGET_S))
        return max(1, min(wanted, self.burst // 2))

    @property
    def lease_valid_s(self) -> float:
        """How long a leased token may wait to be spent: what its lease stands for (0: spent at once)."""
        tokens = self.lease_tokens
        return tokens * self.interval_s if tokens > 1 else 0.0

    @property
    def store_capacity_s(self) -> float:
        """How far ahead of now the bucket's theoretical arrival time may run (GCRA's tolerance plus one
        interval): the burst less what leases may hold back, so that tokens spent in any W seconds are at most
        per_second x W + burst however the leases are spent (docs/flow-control.md has the proof)."""
        return self.burst * self.interval_s - self.lease_valid_s

    def problems(self, where: str) -> list[str]:
        found: list[str] = []
        if not _number(self.per_second) or not _whole(self.burst) or not _whole(self.max_hold_s):
            return [
                f"{where}: rate_limit needs per_second a number, burst and max_hold_s whole numbers, not "
                f"{self.per_second!r}, {self.burst!r}, {self.max_hold_s!r}"
            ]
        if not (math.isfinite(self.per_second) and 0 < self.per_second <= MAX_PER_SECOND):
            found.append(
                f"{where}: rate_limit.per_second {self.per_second} must be above 0 and at most {MAX_PER_SECOND:g}"
            )
        if not 1 <= self.burst <= 100_000:
            found.append(f"{where}: rate_limit.burst {self.burst} must be between 1 and 100000")
        found += _per_problems(where, "rate_limit", self.per)
        found += _hold_problems(where, "rate_limit", self.max_hold_s)
        return found


@dataclass(frozen=True)
class KeyConcurrency:
    """At most `limit` runs of the job at once per value of the envelope field `per` (default the ID: one run
    per entity), across every worker. A run's lease ends when it settles, or with its invocation if its worker
    dies, so no key stays locked."""

    limit: int = 1
    per: str = "id"
    # How long a record may be handed back while its key is busy without spending an attempt, from its first
    # hold: long enough for a few of the job's longest runs.
    max_hold_s: int = HOUR

    def problems(self, where: str) -> list[str]:
        found: list[str] = []
        if not _whole(self.limit) or not _whole(self.max_hold_s):
            return [
                f"{where}: concurrency needs limit and max_hold_s whole numbers, not {self.limit!r}, "
                f"{self.max_hold_s!r}"
            ]
        if not 1 <= self.limit <= 100:
            found.append(f"{where}: concurrency.limit {self.limit} must be between 1 and 100")
        found += _per_problems(where, "concurrency", self.per)
        found += _hold_problems(where, "concurrency", self.max_hold_s)
        return found


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def limit_problems(where: str, label: str, limit: object, kind: type) -> list[str]:
    """A declared limit that is not of its type (a dict, a number) says so in one line, instead of failing later."""
    if limit is None or isinstance(limit, kind):
        return []
    return [f"{where}: {label} must be a {kind.__name__}(...), not {type(limit).__name__} {limit!r:.60}"]


def _per_problems(where: str, label: str, per: str | None) -> list[str]:
    if per is None or (isinstance(per, str) and _PER.fullmatch(per)):
        return []
    return [
        f"{where}: {label}.per {per!r} must name an envelope field (tenant, id, key, or an extra field's name, "
        f"matching {_PER.pattern})"
    ]


def _hold_problems(where: str, label: str, max_hold_s: int) -> list[str]:
    if 0 <= max_hold_s <= SQS_MAX_VISIBILITY_S:
        return []
    return [f"{where}: {label}.max_hold_s {max_hold_s} is outside 0..{SQS_MAX_VISIBILITY_S}"]


@dataclass(frozen=True)
class DeclaredLimit:
    """One limit of the catalog, by the name it goes by in metrics, logs and jobctl (`job:<job>`,
    `endpoint:<resource>`, `key:<job>`)."""

    name: str
    limit: RateLimit | KeyConcurrency

    @property
    def keyed(self) -> bool:
        """Whether each value of an envelope field has its own bucket or slots (concurrency always is)."""
        return isinstance(self.limit, KeyConcurrency) or self.limit.per is not None

    def describe(self) -> str:
        """The declaration in a few words: `10/s, burst 20, per tenant` or `1 at once per customer`."""
        limit = self.limit
        if isinstance(limit, KeyConcurrency):
            said = f"{limit.limit} at once per {limit.per}"
        else:
            said = f"{limit.per_second:g}/s, burst {limit.burst}" + (f", per {limit.per}" if limit.per else "")
        return f"{said}; held at most {limit.max_hold_s}s"

    def to_dict(self) -> dict[str, object]:
        limit = self.limit
        common = {"name": self.name, "per": limit.per, "max_hold_s": limit.max_hold_s}
        if isinstance(limit, KeyConcurrency):
            return {**common, "kind": "concurrency", "limit": limit.limit}
        return {**common, "kind": "rate", "per_second": limit.per_second, "burst": limit.burst}


def job_rate_limit_name(job: str) -> str:
    """The name a job's rate limit goes by: in metrics (JobHeld's reason), logs and jobctl."""
    return f"job:{job}"


def endpoint_rate_limit_name(endpoint: str) -> str:
    """The name an endpoint's rate limit goes by (shared by every job and queue that calls it)."""
    return f"endpoint:{endpoint}"


def key_concurrency_name(job: str) -> str:
    """The name a job's concurrency per key goes by."""
    return f"key:{job}"


def limit_key(fields: Mapping[str, object], per: str | None) -> str:
    """The key a limit keyed by the envelope field `per` counts a record under: the field's value as text; ""
    when the limit has no `per` or the record lacks the field (such records share one key)."""
    if per is None:
        return ""
    value = fields.get(per)
    return "" if value is None else str(value)
