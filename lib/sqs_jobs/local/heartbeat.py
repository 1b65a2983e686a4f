"""The local engine's heartbeat canary: what the stack's EventBridge schedule does, on a thread.

Every queue gets a `heartbeat` job every `heartbeat_interval_s` (the catalog's, unless the engine overrides it);
the worker records it as the Heartbeat metric. If the workers stop, the heartbeats stop arriving there.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqs_jobs.local.provision import LocalQueue
from sqs_jobs.specs import HEARTBEAT_JOB

log = logging.getLogger("sqs_jobs.local")


def heartbeat_body(now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    return json.dumps({"job": HEARTBEAT_JOB, "id": stamp}, separators=(",", ":"))


class HeartbeatCanary:
    def __init__(self, sqs: Any, queues: Mapping[str, LocalQueue], interval_s: float | None = None) -> None:
        self._sqs = sqs
        self._queues = dict(queues)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._due: dict[str, float] = {}

    def interval_s(self, queue: LocalQueue) -> float:
        return self._interval_s if self._interval_s is not None else queue.spec.alarms.heartbeat_interval_s

    def start(self) -> None:
        # The first beat at once, so a fresh engine is healthy from the start; then one every interval.
        self._thread = threading.Thread(target=self._run, name="heartbeat-canary", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def beat(self, queue: LocalQueue) -> None:
        request: dict[str, Any] = {"QueueUrl": queue.url, "MessageBody": heartbeat_body()}
        if queue.spec.fifo:
            request["MessageGroupId"] = HEARTBEAT_JOB
        self._sqs.send_message(**request)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for name, queue in self._queues.items():
                if now >= self._due.get(name, 0.0):
                    try:
                        self.beat(queue)
                    except Exception:
                        log.exception("heartbeat to %s failed", name)
                    self._due[name] = now + self.interval_s(queue)
            self._stop.wait(min(1.0, *(self.interval_s(q) for q in self._queues.values())))
