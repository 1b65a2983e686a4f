"""Tenant-scoped idempotency keys across the upgrade that brought them (docs/key-life.md, "Whose key it is").

A tenant's job runs under `<job>@<tenant> <key>`; runtimes before ran it under `<job>:<key>`, so one tenant's job
could be taken for another's duplicate. A message in flight across the upgrade must keep every promise, so while
records of the old form may still live, a tenant's job whose old-form record lives runs under that key instead:
answered as the duplicate it is if that key completed, counted on from its runs if it was retrying, and sending
the downstream the same `Idempotency-Key` as its earlier runs did.

Records of the old form are written by no runtime since this one, and each lives at most its queue's
`idempotency_expiry_s`. So the look (one consistent GetItem, a tenant's job only) is made only for that long after
the first tenant-scoped key of the table: a marker item, `runtime#tenant-keys`, says since when (one write the
first time, one read per execution environment after). After that window a tenant's job costs nothing
more than any job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sqs_jobs.worker.key_life import KeyRecord, KeyState

MARKER_ID = "runtime#tenant-keys"
SINCE = "since"


class TenantKeys:
    """Which key a tenant's job runs under. `dynamodb()` gives the client for one of the runtime's own calls."""

    def __init__(
        self,
        dynamodb: Callable[[], Any],
        table: str,
        expiry_s: int,
        record_id: Callable[[str], str],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._dynamodb = dynamodb
        self._table = table
        self._expiry_s = expiry_s
        self._record_id = record_id
        self._clock = clock
        self._since: float | None = None
        self._lock = threading.Lock()

    def key_for(self, scoped: str, unscoped: str, tenant: str) -> str:
        """`unscoped` while a record of it lives that a runtime before the upgrade wrote (or that this tenant's job
        took over since), else `scoped`. Raises what the store raised: the caller hands the record back rather than
        guess."""
        if scoped == unscoped or not self._old_keys_may_live():
            return scoped
        found = self._dynamodb().get_item(
            TableName=self._table, Key={"id": {"S": self._record_id(unscoped)}}, ConsistentRead=True
        )
        old = KeyRecord.from_item(self._record_id(unscoped), found.get("Item"))
        if old.state(self._clock()) is KeyState.NEW:
            return scoped
        # A record this runtime wrote names its tenant: "" is a job without one, never this tenant's.
        return unscoped if old.tenant is None or old.tenant == tenant else scoped

    def _old_keys_may_live(self) -> bool:
        with self._lock:
            if self._since is None:
                self._since = self._mark()
            return self._clock() < self._since + self._expiry_s

    def _mark(self) -> float:
        """Since when tenant-scoped keys are written here: this call's time, unless a worker said so before."""
        found = self._dynamodb().get_item(TableName=self._table, Key={"id": {"S": MARKER_ID}}, ConsistentRead=True)
        if SINCE in found.get("Item", {}):
            return float(found["Item"][SINCE]["N"])
        now = self._clock()
        answer = self._dynamodb().update_item(
            TableName=self._table,
            Key={"id": {"S": MARKER_ID}},
            UpdateExpression="SET #since = if_not_exists(#since, :now)",
            ExpressionAttributeNames={"#since": SINCE},
            ExpressionAttributeValues={":now": {"N": f"{now:.3f}"}},
            ReturnValues="ALL_NEW",
        )
        return float(answer["Attributes"][SINCE]["N"])
